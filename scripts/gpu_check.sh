#!/usr/bin/env bash
# The GPU check, in one call on a lent GPU (under 8 minutes on an H200 is the plan; not yet run on one).
#   here:       scripts/gpu_check.sh prepare   # the default model's tokenizer and transformers' wheel into .gpu/
#   on the GPU: scripts/gpu_check.sh           # with .gpu carried; writes $OUT/gpu_check.json (or .gpu/out/)
# The GPU machine's python3 must hold torch; it needs no network and no Gradio. Its image's transformers (5.17 when
# last read) predates the `cache=` argument kvqa passes (5.24, requirements.txt), so the pinned wheel travels in .gpu/
# and is unpacked on the machine in front of it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = prepare ]; then
  PY=${PY:-.venv/bin/python}
  mkdir -p .gpu/tokenizer
  "$PY" - <<'PYEOF'
from kvqa.config import Config
from kvqa.model.loading import default_model_dir
import shutil, pathlib
source = default_model_dir(Config().cache_dir)
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    if (source / name).exists():
        shutil.copy(source / name, pathlib.Path(".gpu/tokenizer") / name)
print("tokenizer copied to .gpu/tokenizer")
PYEOF
  pinned=$(grep -E '^transformers==' requirements.txt)
  rm -rf .gpu/wheels
  "$PY" -m pip download --quiet --no-deps --only-binary :all: -d .gpu/wheels "$pinned"
  echo "$pinned wheel in .gpu/wheels"
  exit 0
fi
# that python3 has no venv, so no kvqa installed (make setup's editable install): kvqa comes from this checkout
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .gpu/wheels/*.whl >/dev/null 2>&1; then  # the pinned transformers, in front of the image's own
  site=$(mktemp -d)
  for wheel in .gpu/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$site"; done
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
OUT=${OUT:-.gpu/out}
mkdir -p "$OUT"
PYTHONUNBUFFERED=1 timeout 470 python3 scripts/gpu_check.py --tokenizer .gpu/tokenizer --out "$OUT" "$@" 2>&1 \
  | tee "$OUT/gpu_check.log"
