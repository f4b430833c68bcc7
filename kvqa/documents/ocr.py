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
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvqa.errors import DocumentError
from kvqa.languages import CJK, WIDE

_WIDE = re.compile(f"[{WIDE}]")  # characters set without spaces between them (CJK, its punctuation)
SCALE = 2.0  # pixels per PDF point a scanned page is rendered at for OCR (144 dpi)
SPACE_GAP = 0.2  # blank pixel columns this many line heights wide between two Latin characters are a space
SPACE_GAP_CJK = 0.3  # the same in a line that holds Chinese (CJK fonts set Latin letters loosely)
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
        found = _recognise(rgb)
    boxes = [_box(points, text) for points, text in found if text.strip()]
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


def _recognise(rgb: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """Each line's quadrilateral (pixels of `rgb`) and text: RapidOCR's detection and recognition run as
    RapidOCR.__call__ runs them (rapidocr_onnxruntime 1.4.4), but without its 0/180-degree line classifier, which
    turned upright lines of a scan upside down (they then read as nothing), and with the spaces between words that
    the Chinese-first recogniser leaves out put back (_spaced)."""
    engine = _ocr()
    image, ratio_h, ratio_w = engine.preprocess(rgb)
    image, record = engine.maybe_add_letterbox(image, {"preprocess": {"ratio_h": ratio_h, "ratio_w": ratio_w}})
    boxes, _ = engine.auto_text_det(image)
    if boxes is None:
        return []
    crops = engine.get_crop_img_list(image, boxes)
    read, _ = engine.text_rec(crops, True)
    boxes = engine._get_origin_points(boxes, record, *rgb.shape[:2])
    return [(box, _spaced(text, info, crop)) for box, (text, score, info), crop in zip(boxes, read, crops)
            if score >= engine.text_score]


def _spaced(text: str, info, crop: np.ndarray) -> str:
    """The line's text with a space between two Latin characters wherever the line's image has a run of blank pixel
    columns at least SPACE_GAP of its height wide between them (SPACE_GAP_CJK in a line with Chinese; never between
    two digits, whose glyphs are all as wide as the widest, so a "1" stands apart): PP-OCR's recogniser (trained on
    Chinese first) drops most spaces between English words. Where it put each character is known from its CTC
    columns (`info`)."""
    columns, words, places = info[0], info[1], info[2]
    chars = [(c, x) for word, xs in zip(words, places) for c, x in zip(word, xs)]
    if len(chars) < 2 or "".join(c for c, _ in chars) != text:
        return text
    grey = crop.mean(axis=2) if crop.ndim == 3 else crop.astype(float)
    ink = grey < (np.percentile(grey, 5) + np.percentile(grey, 95)) / 2
    blank = ~ink.any(axis=0)
    gap = SPACE_GAP_CJK if any(CJK.match(c) for c, _ in chars) else SPACE_GAP  # Chinese characters
    cell, least = crop.shape[1] / columns, gap * crop.shape[0]
    out = [chars[0][0]]
    for (a, left), (b, right) in zip(chars, chars[1:]):
        if not (a.isspace() or b.isspace() or _cjk(a) or _cjk(b) or a.isdigit() and b.isdigit()) \
                and _longest_run(blank[int((left + 0.5) * cell):int((right + 0.5) * cell) + 1]) >= least:
            out.append(" ")
        out.append(b)
    return "".join(out)


def _longest_run(flags: np.ndarray) -> int:
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


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
    return _WIDE.match(c) is not None


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
