"""Text from images: the pages of a PDF that have no text layer (scans) and image files (PNG, JPEG), English and
Chinese, offline.

The OCR is RapidOCR's ONNX package (PyPI `rapidocr_onnxruntime`): PaddleOCR's PP-OCRv4 detection and recognition
models ship inside the wheel (16 MB), read Chinese and English in one model, and run on the CPU with onnxruntime; no
download at run time. Chosen over Debian's tesseract for Chinese (PP-OCR is trained on Chinese first) and for being a
pip install; measured in docs/quality.md ("Reading scans").

Each recognised line keeps its box (pixels of the image OCR read) so the evidence viewer can highlight a source on the
scanned page. Lines are put in reading order (top to bottom, then left to right), boxes on one line joined, and
paragraphs separated where the gap between lines is larger than a line's height.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import DocumentError

SCALE = 2.0  # pixels per PDF point a scanned page is rendered at for OCR (144 dpi)
SPACE_GAP = 0.25  # two Latin characters further apart than this many line heights have a space between them
PARAGRAPH_GAP = 0.8  # a gap between lines larger than this many line heights starts a paragraph
_lock = threading.Lock()
_engine = None


@dataclass(frozen=True)
class Line:
    """A line of text OCR found, and its box (left, top, right, bottom) in the OCR'd image's pixels."""

    text: str
    box: tuple[float, float, float, float]


@dataclass(frozen=True)
class OcrPage:
    """What OCR read on one image: its text (paragraphs separated by a blank line), its lines with their boxes, the
    size of the image it read (pixels) and the seconds it took."""

    text: str
    lines: tuple[Line, ...]
    width: int
    height: int
    seconds: float


def read_image(image) -> OcrPage:
    """OCR a PIL image; an image without text gives an OcrPage whose text is ""."""
    rgb = np.asarray(image.convert("RGB"))
    started = time.perf_counter()
    with _lock:  # one ONNX session; it uses every core already
        found, _ = _ocr()(rgb, return_word_box=True)
    boxes = [_box(points, _spaced(text, *rest[:2], height=points[3][1] - points[0][1]))
             for points, text, _score, *rest in (found or []) if text.strip()]
    lines = _lines(boxes)
    return OcrPage(_text(lines), tuple(lines), image.width, image.height, time.perf_counter() - started)


def image_pdf(data: bytes) -> bytes:
    """An image file as a one-page PDF of it (the evidence viewer shows a page of a PDF); ValueError if unreadable."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        out = io.BytesIO()
        image.convert("RGB").save(out, "PDF", resolution=144.0)
    except (OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise ValueError(f"the image cannot be opened ({type(e).__name__})") from None
    return out.getvalue()


def status() -> tuple[str, str | None]:
    """Whether scans and images can be read here (`kvqa doctor`): (what runs, None), or ("unavailable", what to do)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        import rapidocr_onnxruntime  # noqa: F401 (imports OpenCV, which needs the system's libGL)

        return f"RapidOCR {version('rapidocr_onnxruntime')}, PP-OCRv4 (English and Chinese)", None
    except (ImportError, OSError, PackageNotFoundError) as e:
        return "unavailable", str(DocumentError("ocr.unavailable", why=str(e)))


def _ocr():
    """The OCR engine, made once per process (0.3 s)."""
    global _engine
    if _engine is None:
        try:
            from rapidocr_onnxruntime import RapidOCR
        except (ImportError, OSError) as e:  # OpenCV needs the system's libGL and glib (Debian: libgl1, libglib2.0-0)
            raise DocumentError("ocr.unavailable", why=str(e)) from None
        _engine = RapidOCR()
    return _engine


def _spaced(text: str, char_boxes=None, chars=None, *, height: float) -> str:
    """The line's text with a space wherever two Latin characters stand apart by more than SPACE_GAP of the line's
    height: PP-OCR's recogniser (trained on Chinese first) drops some spaces between English words, more often on a
    page rendered from a PDF; its characters' positions still show the gap."""
    if not chars or not char_boxes or len(chars) != len(char_boxes) or "".join(chars) != text:
        return text
    out = chars[0]
    for (left, c0), (right, c1) in zip(zip(char_boxes, chars), zip(char_boxes[1:], chars[1:])):
        gap = right[0][0] - left[1][0]
        if gap > SPACE_GAP * height and not (c0.isspace() or c1.isspace() or _cjk(c0) or _cjk(c1)):
            out += " "
        out += c1
    return out


def _box(points: Sequence[Sequence[float]], text: str) -> Line:
    """A detected quadrilateral as an upright box."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return Line(text.strip(), (min(xs), min(ys), max(xs), max(ys)))


def _lines(boxes: list[Line]) -> list[Line]:
    """Boxes on the same line (their vertical middles within half a box's height) merged left to right, lines top to
    bottom. Two boxes that overlap repeat the characters in the overlap (the detector cut a line in two): those
    characters are dropped from the right-hand box."""
    rows: list[list[Line]] = []
    for b in sorted(boxes, key=lambda b: (b.box[1] + b.box[3]) / 2):
        middle, height = (b.box[1] + b.box[3]) / 2, b.box[3] - b.box[1]
        row = rows[-1] if rows else None
        if row and abs(middle - sum((r.box[1] + r.box[3]) / 2 for r in row) / len(row)) < height / 2:
            row.append(b)
        else:
            rows.append([b])
    lines = []
    for row in rows:
        row.sort(key=lambda b: b.box[0])
        text, box = row[0].text, row[0].box
        for b in row[1:]:
            overlap = box[2] - b.box[0]
            width = (b.box[2] - b.box[0]) / max(len(b.text), 1)  # pixels per character in this box
            piece = b.text[round(overlap / width):] if overlap > width / 2 else b.text
            text += _joiner(text, piece) + piece
            box = (box[0], min(box[1], b.box[1]), max(box[2], b.box[2]), max(box[3], b.box[3]))
        lines.append(Line(text, box))
    return lines


def _text(lines: Sequence[Line]) -> str:
    """The lines as text: a paragraph's lines joined (with a space, none between CJK characters), paragraphs apart
    where the vertical gap exceeds PARAGRAPH_GAP line heights."""
    paragraphs: list[str] = []
    previous = None
    for line in lines:
        height = line.box[3] - line.box[1]
        if previous is not None and line.box[1] - previous.box[3] <= PARAGRAPH_GAP * height:
            paragraphs[-1] += _joiner(paragraphs[-1], line.text) + line.text
        else:
            paragraphs.append(line.text)
        previous = line
    return "\n\n".join(paragraphs)


def _joiner(left: str, right: str) -> str:
    """"" between two CJK characters (Chinese has no spaces), else " "."""
    return "" if left and right and _cjk(left[-1]) and _cjk(right[0]) else " "


def _cjk(c: str) -> bool:
    return "\u3000" <= c <= "\u9fff" or "\uac00" <= c <= "\ud7af" or "\uf900" <= c <= "\uffef"


def lines_in(page: OcrPage, passage: str) -> list[Line]:
    """The page's lines that belong to `passage` (whitespace aside): each line whose text is in the passage, or
    which holds the passage when it is shorter than a line."""
    target = "".join(passage.split())
    if not target:
        return []
    found = []
    for line in page.lines:
        flat = "".join(line.text.split())
        if flat and (flat in target or target in flat or _shares_an_end(flat, target)):
            found.append(line)
    return found


def _shares_an_end(line: str, target: str, least: int = 8) -> bool:
    """True when the passage begins inside the line or ends inside it (a passage cut mid-line), by at least `least`
    characters."""
    n = min(len(line), len(target))
    return any(line.endswith(target[:k]) or line.startswith(target[-k:]) for k in range(n, least - 1, -1)) \
        if n >= least else False
