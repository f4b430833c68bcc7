#!/usr/bin/env bash
# Issue 12's GPU check, in one call on a lent GPU (under 8 minutes on an H200 is the plan; not yet run on one).
#   here:       scripts/gpu_check.sh prepare   # copies the default model's tokenizer into .gpu/ (git-ignored)
#   on the GPU: scripts/gpu_check.sh           # with .gpu carried; writes $OUT/gpu_check.json (or .gpu/out/)
# The GPU machine's python3 must hold torch and transformers; it needs no network and no Gradio.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = prepare ]; then
  PY=${PY:-.venv/bin/python}
  mkdir -p .gpu/tokenizer
  "$PY" - <<'PYEOF'
from kvqa.config import Config
from kvqa.model import default_model_dir
import shutil, pathlib
source = default_model_dir(Config().cache_dir)
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    if (source / name).exists():
        shutil.copy(source / name, pathlib.Path(".gpu/tokenizer") / name)
print("tokenizer copied to .gpu/tokenizer")
PYEOF
  exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
OUT=${OUT:-.gpu/out}
mkdir -p "$OUT"
PYTHONUNBUFFERED=1 timeout 470 python3 scripts/gpu_check.py --tokenizer .gpu/tokenizer --out "$OUT" "$@" 2>&1 \
  | tee "$OUT/gpu_check.log"
