"""Files that reach kvqa from the network: only what a client uploaded to this server may be read.

Gradio hands an event handler whatever path a client puts in a FileData, also a path on the server that was never
uploaded (reproduced with Gradio 6.31). So every path that comes from the app or its API goes through
`uploaded_file`, which resolves it (symlinks included) and refuses anything outside the server's upload folder,
without reading it or saying whether it exists. The CLI reads a local user's own files and does not use this.

Inside the folder, a served app's requests may read only what their own client uploaded: `Uploads` takes the place of
Gradio's set of uploaded paths (Blocks.upload_file_set, which its upload route adds each upload's path to), so it
counts every upload of a path; the first client (Gradio's session hash) that uses an upload owns it. Gradio names an
upload by its content's hash, so two clients uploading the same bytes get the same path, and each upload gives one
client the right to it; a path used by another client and uploaded only once is refused with the same words as a path
outside the folder.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter, defaultdict
from pathlib import Path

from kvqa.errors import DocumentError
from kvqa.messages import Message

log = logging.getLogger("kvqa.documents.uploads")
NOT_AN_UPLOAD = Message("upload.foreign")  # the same words whether or not the path exists


def upload_folder() -> Path:
    """Where Gradio stores this server's uploads: $GRADIO_TEMP_DIR, else <system temp>/gradio (as Gradio decides)."""
    from gradio.utils import get_upload_folder

    return Path(get_upload_folder())


def uploaded_file(path: str | os.PathLike, *, folder: Path | None = None) -> Path:
    """The resolved path of an uploaded file; raises DocumentError for any path that is not a file inside the upload
    folder (absolute, relative, `..`, a symlink leading out), the same message whether or not it exists."""
    root = (folder or upload_folder()).resolve()
    try:
        resolved = Path(path).resolve(strict=False)  # relative paths resolve against the server's working folder
        inside = resolved != root and resolved.is_relative_to(root)
    except (OSError, RuntimeError, ValueError, TypeError):  # symlink loops, NUL bytes, not a path at all
        inside = False
    if not inside:
        log.warning("refused a file path that is not an upload: %r", str(path)[:300])
        raise DocumentError(NOT_AN_UPLOAD)
    if not resolved.is_file():
        raise DocumentError("upload.expired")
    return resolved


class Uploads(set):
    """Gradio's set of this server's uploaded paths (install with `own(blocks)`), also counting each path's uploads
    that no client has claimed yet and which clients own it."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._unclaimed: Counter[str] = Counter()  # resolved path -> uploads of it no client has used yet
        self._owners: defaultdict[str, set[str]] = defaultdict(set)  # resolved path -> the clients that used it

    def own(self, blocks) -> None:
        """Take the place of the Blocks' upload set (what Gradio's upload route adds to, and what it cleans up)."""
        self.update(blocks.upload_file_set)
        blocks.temp_file_sets = [self if s is blocks.upload_file_set else s for s in blocks.temp_file_sets]
        blocks.upload_file_set = self

    def update(self, *paths_lists) -> None:  # what Gradio's upload route calls with each upload's paths
        with self._lock:
            for paths in paths_lists:
                for path in paths:
                    super().add(path)
                    self._unclaimed[_key(path)] += 1

    def claim(self, path: Path, owner: str) -> bool:
        """Whether `owner` may read the uploaded file at `path` (resolved): it used it before, or an upload of it is
        still unclaimed (which it then owns)."""
        key = _key(path)
        with self._lock:
            if owner in self._owners.get(key, ()):
                return True
            if self._unclaimed[key] <= 0:
                return False
            self._unclaimed[key] -= 1
            self._owners[key].add(owner)
            return True

    def file(self, path: str | os.PathLike, owner: str | None, *, folder: Path | None = None) -> Path:
        """uploaded_file(path), and one that `owner` uploaded when a served request names one (None: a handler
        called in this process, not over the network)."""
        resolved = uploaded_file(path, folder=folder)
        if owner is not None and not self.claim(resolved, owner):
            log.warning("refused another client's upload: %r", str(path)[:300])
            raise DocumentError(NOT_AN_UPLOAD)
        return resolved


def _key(path) -> str:
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError, ValueError):
        return str(path)
