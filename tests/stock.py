"""transformers' own `generate`, with nothing of kvqa's, as the outside reference of the exactness tests; the prompt's
shared start (the document) is read once by the stock model and its stock cache copied for each call, as a cached
prompt in transformers is (`cache=`; 5.24 deprecates `past_key_values=`), so each reference reads only its own turns."""

from __future__ import annotations

import copy

import torch


class StockGenerate:
    """generate(do_sample=False) on ids. `prefix`: ids that most calls start with; the stock model reads them once,
    and a call whose ids start with them (and go on) continues from a copy of that stock cache. Other calls read
    everything, as plain generate does."""

    def __init__(self, model, prefix: torch.Tensor | None = None):
        self.model = model
        self.prefix: list[int] = []
        self.cache = None
        if prefix is not None:
            with torch.no_grad():
                self.cache = model(prefix, use_cache=True).cache
            self.prefix = prefix[0].tolist()

    def __call__(self, ids: torch.Tensor, **options) -> list[int]:
        """The new token ids (everything generate returns after `ids`)."""
        n = len(self.prefix)
        if n and ids.shape[1] > n and ids[0, :n].tolist() == self.prefix:
            options["cache"] = copy.deepcopy(self.cache)
        with torch.no_grad():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, **options)
        return out[0, ids.shape[1]:].tolist()
