"""`python -m kvqa bench --store`: restoring a document's cache from the disk tier against prefilling it again."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence

import torch

from kvqa.cache.store import KVStore
from kvqa.documents.reading import Document
from kvqa.model.loading import LoadedModel
from kvqa.session.ask import ask

from ..config import Config
from .report import _mib, _s

REPEATS = 3  # each restore timed this many times; the median is reported


def drop_from_page_cache(path) -> bool:
    """Ask the kernel to forget the file's pages, so the next read comes from the disk; False where it cannot."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except (AttributeError, OSError):
        return False
    finally:
        os.close(fd)


def run_store_bench(lm: LoadedModel, documents: Sequence[tuple[Document, list[int]]], *, questions: Sequence[str],
                    config: Config, say: Callable[[str], None] = lambda message: None) -> list[dict]:
    """Per (document, prefix ids), shortest first: a fresh prefill (written to a temporary store), then restores from
    the warm and the cold file; the same questions answered from both caches; the caches compared bit for bit."""
    from kvqa.generation.generate import prefill

    from ..engines.stored import StoredLocalEngine

    prefill(lm, documents[0][0], config=config)  # first calls pay for lazy start-up: not part of any row
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvqa-store-bench-") as folder:
        for n, (document, ids) in enumerate(documents):
            store = KVStore(os.path.join(folder, str(n)), 2**40)
            engine = StoredLocalEngine(config, lm=lm, store=store, choose=False)  # restores, to time them
            say(f"prefill at {len(ids):,} tokens ...")
            fresh = engine.prefill(document)
            write_started = time.perf_counter()
            store.flush()
            write_s = time.perf_counter() - write_started  # what is left of the background write after prefill
            (path,) = store.entries()
            say(f"restore at {len(ids):,} tokens ...")
            cold, warm = [], []
            for _ in range(REPEATS):
                dropped = drop_from_page_cache(path)
                restored = engine.prefill(document)
                assert restored.origin == "disk", "the bench's own file did not restore"
                (cold if dropped else warm).append(restored.prefill_s)
                warm.append(engine.prefill(document).prefill_s)
            same_cache = all(torch.equal(a, b) for pa, pb in zip(fresh.cache.tensors(), restored.cache.tensors())
                             for a, b in zip(pa, pb))
            same_answers = all(ask(engine, fresh, q).answer.token_ids == ask(engine, restored, q).answer.token_ids
                               for q in questions)
            restore_s = sorted(warm)[len(warm) // 2]
            cold_s = sorted(cold)[len(cold) // 2] if cold else None
            rows.append({"context_tokens": len(ids), "prefill_s": fresh.prefill_s, "restore_s": restore_s,
                         "restore_cold_s": cold_s, "background_write_left_s": write_s,
                         "file_bytes": path.stat().st_size, "cache_bytes": fresh.cache_bytes,
                         "speedup": fresh.prefill_s / restore_s, "same_answers": same_answers,
                         "same_cache": same_cache, "questions": len(questions)})
    return rows


def format_store_table(rows: list[dict]) -> str:
    columns = ("context", "prefill", "restore (warm)", "restore (cold)", "prefill/restore", "file MiB",
               "write left", "same answers", "same cache")
    cells = [(f"{r['context_tokens']:,}", _s(r["prefill_s"]), _s(r["restore_s"]),
              _s(r["restore_cold_s"]) if r["restore_cold_s"] else "-", f"{r['speedup']:,.1f}x",
              _mib(r["file_bytes"]), _s(r["background_write_left_s"]),
              "yes" if r["same_answers"] else "NO", "yes" if r["same_cache"] else "NO") for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]

    def line(row):
        return "  ".join(c.rjust(w) for c, w in zip(row, widths))

    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, cells)])
