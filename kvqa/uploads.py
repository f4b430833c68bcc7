"""Files that reach kvqa from the network: only what a client uploaded to this server may be read.

Gradio hands an event handler whatever path a client puts in a FileData, also a path on the server that was never
uploaded (reproduced with Gradio 6.31). So every path that comes from the app or its API goes through
`uploaded_file`, which resolves it (symlinks included) and refuses anything outside the server's upload folder,
without reading it or saying whether it exists. The CLI reads a local user's own files and does not use this.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .errors import DocumentError
from .messages import Message

log = logging.getLogger("kvqa.uploads")
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
