"""The evidence on its page: a PDF page rendered as an image with a source passage highlighted, and the matching
sentence marked more strongly (pypdfium2 renders the page and gives each character's box; on a scanned page, OCR's
line boxes); for text, the passage in its surrounding text.

The document's text came from pypdf, the boxes come from pdfium, and the two extract the same page with different
spaces and line breaks; so both are compared without whitespace, and a passage that is not found whole is found in
pieces (each run of PIECE characters that occurs once on the page).
"""

from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass

from kvqa.documents.ocr import OcrPage, lines_in

PASSAGE = (255, 221, 0, 90)  # RGBA: the passage
MARK = (255, 140, 0, 150)  # the best-matching sentence, on top
PIECE = 24  # characters (without whitespace) of a piece looked for when the whole passage is not found
SCALE = 1.5  # pixels per PDF point (1.5 x 72 = 108 dpi): a page of a 36-page PDF in about 0.1 s on 2 cores
_SPACE = re.compile(r"\s+")
_RULE = re.compile(r"\|(?:\s*:?-{3,}:?\s*\|)+\s*")  # a Markdown table's '| --- |' line


@dataclass(frozen=True)
class PageImage:
    """A rendered page: the image (PIL), how many boxes were highlighted, and what rendering took."""

    image: object  # PIL.Image.Image
    page: int
    highlighted: int  # rectangles drawn for the passage (0: it was not found on the page)
    seconds: float


def render_page(pdf: bytes, page: int, passage: str, marked: str = "", *, scale: float = SCALE,
                scan: OcrPage | None = None) -> PageImage:
    """Page `page` (1-based) of the PDF as an image, with `passage` highlighted and `marked` (a sentence of it)
    more strongly; on a scanned page (`scan`: what OCR read there), the boxes of OCR's lines that hold them.
    Raises ValueError when the PDF or the page cannot be rendered."""
    import pypdfium2 as pdfium
    from PIL import Image, ImageDraw

    started = time.perf_counter()
    try:
        pdf_doc = pdfium.PdfDocument(pdf)
    except pdfium.PdfiumError as e:
        raise ValueError(f"the PDF cannot be opened ({e})") from None
    try:
        if not 1 <= page <= len(pdf_doc):
            raise ValueError(f"the PDF has {len(pdf_doc)} pages, not a page {page}")
        pdf_page = pdf_doc[page - 1]
        image = pdf_page.render(scale=scale).to_pil().convert("RGBA")
        height = pdf_page.get_height()
        text_page = pdf_page.get_textpage()
        overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
        draw = ImageDraw.Draw(overlay)
        drawn = 0
        for colour, wanted in ((PASSAGE, passage), (MARK, marked)):
            if scan is not None and not text_page.count_chars():  # a scan: OCR's boxes, in its image's pixels
                ratio = pdf_page.get_width() * scale / scan.width
                for line in lines_in(scan, wanted):
                    draw.rectangle([x * ratio for x in line.box], fill=colour)
                    drawn += colour is PASSAGE
                continue
            for index, count in find(text_page, wanted):
                for n in range(text_page.count_rects(index, count)):
                    left, bottom, right, top = text_page.get_rect(n)
                    draw.rectangle([left * scale, (height - top) * scale, right * scale, (height - bottom) * scale],
                                   fill=colour)
                    drawn += colour is PASSAGE
        return PageImage(Image.alpha_composite(image, overlay).convert("RGB"), page, drawn,
                         time.perf_counter() - started)
    finally:
        pdf_doc.close()


def find(text_page, wanted: str) -> list[tuple[int, int]]:
    """(first character index, count) runs of the page's characters that spell `wanted`, whitespace aside: the
    whole text when it is on the page, else each piece of PIECE characters that occurs exactly once."""
    target = _SPACE.sub("", _cells(wanted))
    if not target:
        return []
    chars = text_page.count_chars()
    page_text = text_page.get_text_range(0, chars) if chars else ""
    if len(page_text) != chars:  # pdfium's text is not one character per index here: give up rather than misplace
        return []
    kept = [i for i, c in enumerate(page_text) if not c.isspace()]
    flat = "".join(page_text[i] for i in kept)
    at = flat.find(target)
    if at >= 0:
        return _runs(kept[at: at + len(target)])
    found = []
    for start in range(0, len(target), PIECE):
        piece = target[start: start + PIECE]
        if len(piece) < PIECE // 2:
            break
        at = flat.find(piece)
        if at >= 0 and flat.find(piece, at + 1) < 0:
            found += kept[at: at + len(piece)]
    return _runs(sorted(set(found)))


def _cells(text: str) -> str:
    """The text with its Markdown table rows as their cells' text (the page draws the cells, not '|' or '---')."""
    return "\n".join("" if _RULE.fullmatch(line) else re.sub(r"(?<!\\)\|", " ", line) if line.startswith("|") else line
                     for line in text.split("\n"))


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Consecutive character indices as (first, count) runs; a gap of only whitespace characters joins runs."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i - (runs[-1][0] + runs[-1][1]) <= 2:
            first, _ = runs[-1]
            runs[-1] = (first, i - first + 1)
        else:
            runs.append((i, 1))
    return runs


def text_context(text: str, start: int, end: int, mark: tuple[int, int] = (0, 0), *, around: int = 600,
                 answer: tuple[int, int] | None = None, short: bool = False) -> str:
    """HTML: the passage text[start:end] in its surrounding text (about `around` characters each side), the passage
    highlighted and its best-matching sentence `mark` (offsets into text) marked more strongly, the answer's own words
    in it (`answer`, offsets into text; short: they are its shortest phrase) in bold. Markdown tables in it are shown
    as HTML tables, with their header (kvqa.documents.tables.context_html)."""
    a, b = max(0, start - around), min(len(text), end + around)
    if 0 < a < start:  # from a word's start (CJK has no spaces: from where it is)
        a = min(text.find(" ", a, start) + 1 or a, start)
    if end < b < len(text):
        b = max(text.rfind(" ", end, b), end) if text.rfind(" ", end, b) > 0 else b
    m0, m1 = (mark if mark[1] > mark[0] and start <= mark[0] <= mark[1] <= end else (start, start))
    from kvqa.documents.tables import context_html

    tabled = context_html(text, (a, b), (start, end), (m0, m1))  # None unless a Markdown table lies in the window
    if tabled is not None:
        return ("<div class='kvqa-context'>" + ("… " if a > 0 else "") + tabled + (" …" if b < len(text) else "")
                + "</div>")

    a0, a1 = answer if answer and start <= answer[0] < answer[1] <= end else (start, start)
    bold = "kvqa-answer kvqa-short" if short else "kvqa-answer"

    def esc(i: int, j: int) -> str:  # text[i:j], escaped, the answer's words in it in bold
        i0, j0 = max(i, a0), min(j, a1)
        if j0 <= i0:
            return html.escape(text[i:j])
        return (html.escape(text[i:i0]) + f"<strong class='{bold}'>" + html.escape(text[i0:j0]) + "</strong>"
                + html.escape(text[j0:j]))

    return ("<div class='kvqa-context'>" + ("… " if a > 0 else "") + esc(a, start)
            + "<mark class='kvqa-passage'>" + esc(start, m0)
            + "<mark class='kvqa-sentence'>" + esc(m0, m1) + "</mark>"
            + esc(m1, end) + "</mark>" + esc(end, b) + (" …" if b < len(text) else "") + "</div>")
