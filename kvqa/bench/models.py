"""Models with random weights built from a config JSON: a model's real shapes, for timing, without downloading it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from kvqa.model.loading import LoadedModel, choose_attention, choose_device, choose_dtype, model_source, prepare

from ..config import Config
from .errors import BenchError

CONFIGS = Path(__file__).resolve().parent.parent / "model" / "configs"  # kvqa/model/configs


class FoldedTokenizer:
    """A tokenizer whose ids are taken modulo a smaller model vocabulary: arbitrary but valid ids for a model with
    random weights (timing does not depend on which ids they are). Everything else is the wrapped tokenizer's."""

    def __init__(self, tokenizer, vocab_size: int):
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return self._vocab_size

    def _fold(self, ids):
        if isinstance(ids, int):
            return ids % self._vocab_size
        return [self._fold(i) for i in ids]

    def __call__(self, *args, **kwargs):
        encoded = self._tokenizer(*args, **kwargs)
        encoded["input_ids"] = self._fold(encoded["input_ids"])
        return encoded

    def convert_tokens_to_ids(self, tokens):
        ids = self._tokenizer.convert_tokens_to_ids(tokens)
        return None if ids is None else self._fold(ids)

    def get_vocab(self) -> dict[str, int]:
        return {token: i % self._vocab_size for token, i in self._tokenizer.get_vocab().items()}


def config_path(name: str) -> Path:
    """A config JSON: a path, or the name of one shipped in kvqa/model/configs (with or without .json)."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = CONFIGS / (name if name.endswith(".json") else f"{name}.json")
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.json")))
    raise BenchError("bench.no_config", name=name, names=names)


def random_init_model(path: str | Path, config: Config) -> LoadedModel:
    """A model with random weights from a config JSON, on the chosen device and dtype, with the tokenizer of
    config.model (the default model's unless --model says otherwise), folded into the vocabulary if it is smaller."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = config_path(str(path))
    try:
        settings = json.loads(path.read_text())
        settings = {k: v for k, v in settings.items() if not k.startswith("_")}
        model_type = settings.pop("model_type")
        settings.pop("torch_dtype", None)
        settings.pop("dtype", None)
        model_config = AutoConfig.for_model(model_type, **settings)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BenchError("bench.bad_config", path=path, error=f"{type(e).__name__}: {e}") from None
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    source = model_source(config.model, config.cache_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise BenchError("bench.no_tokenizer", model=config.model, error=e) from None
    started = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):  # initialise the weights where they will run: seconds on a GPU for 3B parameters
        model = AutoModelForCausalLM.from_config(model_config, dtype=dtype,
                                                 attn_implementation=choose_attention(config.attn_implementation,
                                                                                      device))
    vocab = model.config.get_text_config(decoder=True).vocab_size
    if vocab < len(tokenizer):
        tokenizer = FoldedTokenizer(tokenizer, vocab)
    return prepare(model, tokenizer, name=f"random-init {path.stem}", device=device, load_started=started,
                   compile=config.compile == "on", weights=config.weights)
