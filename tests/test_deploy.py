"""Deployment: the Space's front matter agrees with requirements.txt, the Spaces default model, and `kvqa doctor`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from kvqa.config import DEFAULT_MODEL, SPACES_DEFAULT_MODEL, config_from_env
from kvqa.model.kernels.decode_attention import choose_decode_attention
from kvqa.model.kernels.int8_kernel import choose_kernel
from kvqa.model.kernels.llama_layer import library as layer_library
from kvqa.model.kernels.rms_norm import choose_rms_norm
from kvqa.model.weights import choose_weights, choose_widening

ROOT = Path(__file__).parent.parent


def front_matter() -> dict:
    text = (ROOT / "README.md").read_text()
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, "README.md must start with the Space's YAML front matter"
    return yaml.safe_load(match.group(1))


def pins() -> dict[str, str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def test_front_matter_is_a_valid_space_config_that_agrees_with_requirements():
    meta = front_matter()
    assert meta["sdk"] == "gradio" and meta["sdk_version"] == pins()["gradio"]
    assert (ROOT / meta["app_file"]).exists() and meta["app_file"] == "app.py"
    assert str(meta["python_version"]) == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert SPACES_DEFAULT_MODEL in meta["models"] and "meta-llama/Llama-3.2-3B-Instruct" in meta["models"]
    assert meta["title"] and 0 < len(meta["short_description"]) <= 60


def test_requirements_install_on_a_space_as_they_are():
    text = "\n".join(line for line in (ROOT / "requirements.txt").read_text().splitlines()
                     if not line.startswith("#"))
    assert (text.strip() and "file:" not in text and "-e " not in text and "/work" not in text
            and "--no-deps" not in text)


def test_default_model_offline_and_on_a_space():
    assert config_from_env({}).model == DEFAULT_MODEL
    assert config_from_env({"SPACE_ID": "someone/kvqa"}).model == SPACES_DEFAULT_MODEL
    assert config_from_env({"SPACE_ID": "x/y", "KVQA_MODEL": "meta-llama/Llama-3.2-3B-Instruct"}).model == \
        "meta-llama/Llama-3.2-3B-Instruct"


def doctor(env: dict) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "kvqa", "doctor"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **env}, timeout=300)


def test_doctor_on_this_cpu_machine(default_lm):
    run = doctor({"KVQA_DEVICE": "cpu", "KVQA_DTYPE": "float32",  # what it reports is what it was told, anywhere
                  "KVQA_WEIGHTS": "auto"})
    assert run.returncode == 0, run.stdout + run.stderr
    for name in ("model", "device", "dtype", "attention", "context", "memory budget", "ZeroGPU", "HF token",
                 r"OCR \(scans, images\)"):
        assert re.search(rf"^{name}\s", run.stdout, re.M), name
    assert "cpu" in run.stdout and "float32" in run.stdout and "8,192 tokens" in run.stdout
    weights = choose_weights("auto", torch.device("cpu"), torch.float32, model=DEFAULT_MODEL)
    in_c = ", the decode step's layers in C" if layer_library() is not None else ""  # kvqa/model/kernels/llama_layer
    shown = (f"{weights} (one byte a weight, {choose_kernel()} for short products, {choose_widening()}{in_c};"
             if weights == "int8" else f"{weights}\n")
    assert re.search(r"^weights\s+" + re.escape(shown), run.stdout, re.M), run.stdout
    assert re.search(r"^attention\s+.*, decode steps: " + re.escape(str(choose_decode_attention())) + ", norms: "
                     + re.escape(str(choose_rms_norm())), run.stdout, re.M)
    kv = "int8" if weights == "int8" else "float32"  # the offline models' int8 weights hold an int8 cache on a CPU
    per_token = 2 * 30 * 3 * 64 * (1 if kv == "int8" else 4) / 1024  # SmolLM2-135M: 30 layers, 3 KV heads of 64
    assert re.search(rf"^architecture\s+llama, {per_token:,.0f} KiB of cache per token \({kv}\)", run.stdout, re.M)
    assert "no problems found" in run.stdout


@pytest.mark.model  # loads the model itself (a subprocess or the app)
def test_doctor_reports_the_cache_store(tmp_path):
    """The store's folder, entries and size; a folder kvqa cannot write to is a problem with its fix."""
    off = doctor({})  # the tests' default: KVQA_STORE_MB=0
    assert re.search(r"^cache store\s+off", off.stdout, re.M)
    (tmp_path / "a.safetensors").write_bytes(b"x" * 2**20)
    run = doctor({"KVQA_STORE_DIR": str(tmp_path), "KVQA_STORE_MB": "10"})
    assert f"{tmp_path}: 1 cache(s), 1.0 of 10 MiB" in run.stdout
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    bad = doctor({"KVQA_STORE_DIR": str(blocked / "store"), "KVQA_STORE_MB": "10"})
    assert bad.returncode == 1 and "set KVQA_STORE_DIR to a writable folder" in bad.stdout


def test_doctor_names_the_next_step_for_a_gated_model_without_a_token():
    run = doctor({"KVQA_MODEL": "meta-llama/Llama-3.2-3B-Instruct", "HF_TOKEN": ""})
    assert run.returncode == 1
    assert "is gated" in run.stdout and "set HF_TOKEN" in run.stdout and "Traceback" not in run.stderr
