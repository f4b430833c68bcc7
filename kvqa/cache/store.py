"""The disk tier: prefilled caches kept in files, so a document is read once per machine, not once per process.

A file holds one document's keys and values (the filled part, without the reserve) in safetensors, with a header
that names everything that determines those bits (`CacheKey`), the prefix ids, the template's date string and a
SHA-256 of the tensors. Nothing read back is trusted: a file that cannot be parsed, is shorter than its header
says, fails its checksum, or was made for another model, dtype, device, attention, format or document is logged in
one line, deleted, and reported as a miss, so the caller prefills again. Writes go to a temporary file in the same
folder, are fsynced and renamed into place: a reader sees a whole file or none, whatever a killed writer or a second
writer does. They run on one background thread, off the answer's path, and
wait between pieces while a question is answered (kvqa.generation.activity); a full or read-only disk only logs.
The folder is capped at `limit_bytes`, least recently used files first out (reading a file marks it used).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kvqa.generation.activity import wait_until_quiet
from kvqa.model.weights import products_of

log = logging.getLogger(__name__)

FORMAT = 2  # bump when what a file holds or how it is laid out changes: older files then miss (2: the checksum
#            covers the header's fields too)
SUFFIX = ".safetensors"
STALE_TMP_S = 3600.0  # a temporary file this old belongs to a writer that died: removed when the store opens
QUIET_WAIT_S = 60.0  # the writer waits this long at most in all, for a file, for answers to end
PIECE_BYTES = 32 << 20  # a file is written this much at a time (hashed a tensor at a time), answers let through between

Tensors = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each (B, kv_heads, T, head_dim)


@dataclass(frozen=True)
class CacheKey:
    """Everything that determines a prefilled cache's bits, except the prefix ids, which the file holds and the
    reader compares exactly (they depend on the template's date line, which the file also holds)."""

    model: str
    weights: str  # weights_fingerprint() of the loaded model
    dtype: str
    device: str  # the device kind: cpu, cuda, mps
    attention: str
    text_sha256: str  # the document's text
    format: int = FORMAT

    @property
    def digest(self) -> str:
        """The file's name: a SHA-256 of every field."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class StoredCache:
    """What a valid file gives back."""

    ids: tuple[int, ...]
    date_string: str
    tensors: Tensors
    read_s: float | None  # what reading the document took when this cache was made (None: not recorded)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def weights_fingerprint(model: torch.nn.Module, *, samples: int = 4096) -> str:
    """A SHA-256 over every parameter's name, shape, dtype and `samples` evenly spaced values, and how int8 products
    run (kvqa.model.weights.products_of): another checkpoint, a fine-tune, another precision or another CPU's products
    change it. Sampled, not the whole weights, so it costs milliseconds."""
    digest = hashlib.sha256(products_of(model).encode())  # "" for float32 weights: their keys as before
    with torch.no_grad():
        for name, p in sorted(model.state_dict().items()):
            flat = p.detach().reshape(-1)
            picked = flat[:: max(1, flat.numel() // samples)].to("cpu").contiguous()
            digest.update(f"{name}{tuple(p.shape)}{p.dtype}".encode())
            digest.update(picked.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def _checksum(tensors: dict[str, torch.Tensor], names: Sequence[str], meta: dict[str, str], *,
              between=lambda: None) -> str:
    """SHA-256 of the header's fields (all but the checksum itself), then each tensor's name, dtype, shape and bytes:
    a damaged byte anywhere in the file changes it, or stops the file from parsing. between() runs before each
    tensor (the writer: answers first)."""
    digest = hashlib.sha256(json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True).encode())
    for name in names:
        between()
        tensor = tensors[name].contiguous()
        digest.update(f"{name}{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).reshape(-1).numpy().data)
    return digest.hexdigest()


def _names(layers: int) -> list[str]:
    return [f"{kind}.{i}" for i in range(layers) for kind in ("k", "v")]


class KVStore:
    """Prefilled caches in files under `folder`, at most `limit_bytes` together."""

    def __init__(self, folder: Path | str, limit_bytes: int):
        self.folder = Path(folder)
        self.limit_bytes = limit_bytes
        self._queue: queue.Queue = queue.Queue()
        self._writer: threading.Thread | None = None
        self._lock = threading.Lock()
        self._remove_stale_temporaries()

    # ---- reading --------------------------------------------------------------------------------------------------

    def get(self, key: CacheKey, *, device: torch.device | str = "cpu") -> StoredCache | None:
        """The cache stored under `key`, checked from end to end; None (logged, the file removed) when there is
        none or it cannot be trusted."""
        path = self.path(key)
        try:
            found = self._read(path, key, torch.device(device))
        except FileNotFoundError:
            return None
        except Exception as e:  # anything at all that is wrong with the file: prefill again instead
            log.warning("kvqa store: ignoring %s (%s: %s); the document will be read again", path.name,
                        type(e).__name__, e)
            self._remove(path)
            return None
        try:
            os.utime(path)  # recently used: last out
        except OSError:
            pass
        ids, date_string, tensors, read_s = found
        return StoredCache(ids=ids, date_string=date_string, tensors=tensors, read_s=read_s)

    def _read(self, path: Path, key: CacheKey,
              device: torch.device) -> tuple[tuple[int, ...], str, Tensors, float | None]:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:  # memory-mapped; refuses a header that does not fit the file
            meta = f.metadata() or {}
            if meta.get("format") != str(FORMAT):
                raise ValueError(f"format {meta.get('format')!r}, this kvqa reads {FORMAT}")
            stored_key = json.loads(meta.get("key", "{}"))
            if stored_key != asdict(key):
                different = sorted(k for k in asdict(key) if stored_key.get(k) != asdict(key)[k])
                raise ValueError(f"made for another {', '.join(different) or 'key'}")
            layers = int(meta["layers"])
            names = _names(layers)
            tensors = {name: f.get_tensor(name) for name in [*names, "ids"]}
        if _checksum(tensors, [*names, "ids"], meta) != meta.get("sha256"):
            raise ValueError("checksum mismatch (the file is damaged)")
        ids = tuple(tensors["ids"].tolist())
        layers_out = [(tensors[f"k.{i}"].to(device), tensors[f"v.{i}"].to(device)) for i in range(layers)]
        if any(k.shape[-2] != len(ids) or v.shape[-2] != len(ids) for k, v in layers_out):
            raise ValueError("tensor lengths differ from the prefix ids")
        read_s = float(meta["read_s"]) if "read_s" in meta else None
        return ids, meta["date_string"], layers_out, read_s

    # ---- writing --------------------------------------------------------------------------------------------------

    def put(self, key: CacheKey, ids: Sequence[int], date_string: str, tensors: Tensors, *,
            read_s: float | None = None) -> Future[bool]:
        """Write the cache in the background; `tensors` must not change afterwards (a document's part of a KVCache
        never does); `read_s`: what reading the document took, kept with it. Returns at once: the future says,
        when the write is over, whether the file was written; flush() waits for every write."""
        with self._lock:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._write_loop, name="kvqa-store", daemon=True)
                self._writer.start()
        written: Future[bool] = Future()
        self._queue.put((key, tuple(ids), date_string, tensors, read_s, written))
        return written

    def flush(self) -> None:
        """Wait until every write asked for so far is done (or given up)."""
        self._queue.join()

    def _write_loop(self) -> None:
        _lowest_priority()
        while True:
            key, ids, date_string, tensors, read_s, written = self._queue.get()
            ok = False
            try:
                ok = self.write(key, ids, date_string, tensors, read_s=read_s)
            except Exception as e:  # never let the writer die: the cache is still in memory
                log.warning("kvqa store: could not write a cache (%s: %s)", type(e).__name__, e)
            finally:
                written.set_result(ok)
                self._queue.task_done()

    def write(self, key: CacheKey, ids: Sequence[int], date_string: str, tensors: Tensors, *,
              read_s: float | None = None) -> bool:
        """Write now, atomically: a temporary file, fsync, rename. False (logged) when it cannot be written or would
        not fit under the limit."""
        from safetensors.torch import save

        named = {f"{kind}.{i}": t.to("cpu").contiguous() for i, (k, v) in enumerate(tensors)
                 for kind, t in (("k", k), ("v", v))}
        named["ids"] = torch.tensor(list(ids), dtype=torch.int64)
        if self._too_large(sum(t.nbytes for t in named.values())):  # the tensors alone: no need to serialise them
            return False
        meta = {"format": str(FORMAT), "key": json.dumps(asdict(key), sort_keys=True), "layers": str(len(tensors)),
                "date_string": date_string, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if read_s is not None:
            meta["read_s"] = f"{read_s:.6f}"
        until = time.monotonic() + QUIET_WAIT_S
        meta["sha256"] = _checksum(named, [*_names(len(tensors)), "ids"], meta,
                                   between=lambda: self._after_answers(until))
        self._after_answers(until)
        data = save(named, metadata=meta)  # the file's bytes, its header included: what the limit counts
        if self._too_large(len(data)):
            return False
        path = self.path(key)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._make_room(len(data), keep=path)
            with open(tmp, "wb") as f:
                for at in range(0, len(data), PIECE_BYTES):
                    self._after_answers(until)
                    f.write(memoryview(data)[at:at + PIECE_BYTES])
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)  # atomic: a reader sees the old file, the new one, or none
            self._fsync_folder()
            return True
        except OSError as e:  # a full or read-only disk, a folder that cannot be made
            log.warning("kvqa store: could not write %s (%s); answers are unaffected", path.name, e)
            self._remove(tmp)
            return False

    def _after_answers(self, until: float) -> None:
        """On the background writer, wait for the answers running now to end (until time.monotonic() says `until`
        at most): its hashing and copying would slow them. A write called directly goes on at once."""
        if threading.current_thread() is self._writer:
            wait_until_quiet(max(0.0, until - time.monotonic()))

    def _too_large(self, nbytes: int) -> bool:
        """Whether a file of `nbytes` is over the limit (logged: it is not written)."""
        if nbytes <= self.limit_bytes:
            return False
        log.warning("kvqa store: a cache of %.0f MiB is larger than the store's limit (%.0f MiB, KVQA_STORE_MB); "
                    "not written", nbytes / 2**20, self.limit_bytes / 2**20)
        return True

    # ---- the folder -----------------------------------------------------------------------------------------------

    def entries(self) -> list[Path]:
        """The stored files, least recently used first."""
        try:
            files = [p for p in self.folder.iterdir() if p.name.endswith(SUFFIX)]
        except OSError:
            return []
        return sorted(files, key=_mtime)

    @property
    def size_bytes(self) -> int:
        return sum(file_bytes(p) or 0 for p in self.entries())

    def _make_room(self, nbytes: int, *, keep: Path) -> None:
        files = [p for p in self.entries() if p != keep]
        total = sum(file_bytes(p) or 0 for p in files)
        for old in files:
            if total + nbytes <= self.limit_bytes:
                break
            total -= file_bytes(old) or 0
            self._remove(old)

    def _remove_stale_temporaries(self) -> None:
        try:
            for p in self.folder.glob("*.tmp"):
                if time.time() - _mtime(p) > STALE_TMP_S:
                    self._remove(p)
        except OSError:
            pass

    def _fsync_folder(self) -> None:
        try:
            fd = os.open(self.folder, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def path(self, key: CacheKey) -> Path:
        """Where the cache stored under `key` lies (or would lie)."""
        return self.folder / f"{key.digest}{SUFFIX}"

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def file_bytes(path: Path) -> int | None:
    """The size of the file at `path`, None when there is none (or it cannot be looked at)."""
    try:
        return path.stat().st_size
    except OSError:
        return None


def _lowest_priority() -> None:
    """Give the calling thread (the writer) the lowest CPU priority, beside waiting for answers to end (what it does
    between pieces cannot be paused). Linux only (a thread's own niceness); elsewhere nothing."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def store_for(config) -> KVStore | None:
    """The store these settings ask for, or None when it is turned off (store_mb = 0)."""
    if not config.store.store_mb:
        return None
    return KVStore(config.store_folder, int(config.store.store_mb * 2**20))
