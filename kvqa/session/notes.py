"""What the app knows of one session besides the session itself: one Notes record per session, kept by the Service
(Service.notes), written by its reads and its model's choice (kvqa.session.choice), read by the page."""

from __future__ import annotations

from dataclasses import dataclass

from kvqa.messages import Message
from kvqa.session.takeover import TakeOver


@dataclass
class Notes:
    """What the app knows of one session besides the session itself."""

    estimate: float | None = None  # the read time (s) its latest read was estimated to take before it began
    pdf: bytes | None = None  # the PDF (or an image as a one-page PDF) the document is, to show its pages
    reading_ahead: bool = False  # its long document's other parts are being read in the background now
    picked: bool = False  # its model was chosen in the list of models: the documents it reads keep it
    model_reason: Message | None = None  # why its model reads it, when the document's language chose it
    take_over: TakeOver | None = None  # a better model reading its document behind it (kvqa.session.takeover)
    took_over: str | None = None  # the stand-in this session took over from, once it did
