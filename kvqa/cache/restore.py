"""A document's cache from the disk tier (kvqa.cache.store) when its file is there and checks out, else prefilled and
handed to the store to write in the background: what the local engine with a store, and ZeroGPU, both do."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from kvqa.cache.store import CacheKey, KVStore, StoredCache, file_bytes, text_sha256
from kvqa.config import Config
from kvqa.documents.reading import Document
from kvqa.errors import KvqaError
from kvqa.generation.generate import check_fits, out_of_memory_as_error, prefill, prefix_of
from kvqa.model.kernels.decode_attention import choose_decode_attention
from kvqa.model.kv_cache import cache_bytes, cache_from_tensors
from kvqa.model.kv_scales import digest
from kvqa.model.loading import LoadedModel
from kvqa.model.norms import norm_of
from kvqa.prompt import Prompt, prompt_for
from kvqa.results import PrefilledDocument
from kvqa.timing import now

log = logging.getLogger(__name__)


def cache_key(lm: LoadedModel, document: Document, *, weights: str) -> CacheKey:
    """What determines this document's cache with this model here (the prefix ids are checked from the file)."""
    one_token = f" + {choose_decode_attention()}" if lm.device.type == "cpu" else ""  # a last chunk of one token
    norms = f" + {norm}" if (norm := norm_of(lm.model)) else ""  # kvqa's norm kernel sums in its own order
    held = f", cache int8 {digest(lm.kv_scales)}" if lm.kv_scales is not None else ""  # the scales' integers
    return CacheKey(model=lm.name, weights=weights, dtype=str(lm.dtype).removeprefix("torch.") + held,
                    device=lm.device.type, attention=lm.attn_implementation + norms + one_token,
                    text_sha256=text_sha256(document.text))


def prefill_or_restore(lm: LoadedModel, document: Document, store: KVStore, *, weights: str, config: Config = Config(),
                       progress: Callable[[float], None] | None = None,
                       admit: Callable[[int], None] | None = None,
                       restore_if: Callable[[int, int], bool] | None = None) -> PrefilledDocument:
    """The document's PrefilledDocument, restored from the store (origin "disk", prefill_s the time the
    restore took) or prefilled (origin "prefill") and then stored in the background. restore_if(tokens,
    file_bytes): whether restoring a stored file is worth it here (else the document is read again, its file kept)."""
    prompt, ids = prefix_of(lm, document, config=config)
    if admit is not None:  # once, for either way: the cache is the same size
        admit(cache_bytes(lm.config, lm.kv_dtype, len(ids), config.limits.reserve_tokens))
    key = cache_key(lm, document, weights=weights)
    stored = file_bytes(store.path(key))
    if stored is None or restore_if is None or restore_if(len(ids), stored):
        restored = restore(lm, document, store, key, prefix=(prompt, ids), config=config)
        if restored is not None:
            return restored
    doc = prefill(lm, document, config=config, progress=progress, prefix=(prompt, ids))  # admitted above
    if stored is None:  # a file that is there stays as it is
        store.put(key, doc.ids, doc.prompt.date_string, doc.cache.tensors(), read_s=doc.prefill_s)  # views
    return doc


def restore(lm: LoadedModel, document: Document, store: KVStore, key: CacheKey, *, prefix: tuple[Prompt, list[int]],
            config: Config, device: torch.device | None = None) -> PrefilledDocument | None:
    """The document's cache restored from the store under `key` onto `device` (default: the model's), or None when
    there is no file or it does not fit this model and document (logged; the caller reads the document again).
    `prefix` is prefix_of()'s (prompt, ids) for the document."""
    device = lm.device if device is None else device
    started = now(device)
    stored = store.get(key, device=device)
    if stored is None:
        return None
    try:
        return _restore(lm, document, stored, *prefix, config=config, device=device, started=started)
    except KvqaError:  # out of memory: the user's message, as a prefill would give it
        raise
    except Exception as e:  # a file that passed its checks but still does not fit this model: read it again
        log.warning("kvqa store: could not restore the cache (%s: %s); the document will be read again",
                    type(e).__name__, e)
        return None


def _restore(lm: LoadedModel, document: Document, stored: StoredCache, prompt: Prompt, ids: list[int], *,
             config: Config, device: torch.device, started: float) -> PrefilledDocument | None:
    """The stored cache as a PrefilledDocument, if its ids are exactly the ids this tokenizer and template give the
    document with the stored date line; else None (logged)."""
    if stored.date_string != prompt.date_string:  # a Llama 3.x date line from another day: the cache keeps it
        prompt = prompt_for(lm.tokenizer, date_string=stored.date_string)
        ids = prompt.prefix_ids(document.text)
    if tuple(ids) != stored.ids:
        log.warning("kvqa store: the stored prefix ids differ from this tokenizer's; the document will be read again")
        return None
    check_fits(lm, len(ids), config.limits.reserve_tokens)
    with out_of_memory_as_error("doing.restoring"):
        cache = cache_from_tensors(lm.config, stored.tensors, len(ids) + config.limits.reserve_tokens,
                                   lm.kv_scales)
    return PrefilledDocument(
        document=document, prompt=prompt, ids=stored.ids, cache=cache, cache_bytes=cache.nbytes,
        prefill_s=now(device) - started, model_name=lm.name, max_question_tokens=config.limits.max_question_tokens,
        max_new_tokens=config.limits.max_new_tokens, origin="disk", read_s=stored.read_s,
    )
