"""Tables kept: a PDF page's ruled tables read as Markdown tables in their place (pdfplumber), and Markdown tables in a
passage's surrounding text shown as HTML tables (the evidence viewer).

pypdf reads a table as a run of cells, so a question about one row has no passage that holds the row whole. Here each
table becomes one line per row (a header row, a '| --- |' line, then the rows), so kvqa.evidence.sources cuts passages
between
rows, never inside one. Only ruled tables are found (pdfplumber's default "lines" strategy): its "text" strategy
reads columns of prose as tables. A table needs MIN_ROWS rows and MIN_COLUMNS columns that hold text.

Cost, measured 2026-12-01 on the 2-core AMD EPYC CI machine with others' jobs running (experiments/table_quality.py
--speed, 20 pages of prose): pdfplumber's find_tables costs 0.12-0.17 s a typical page of prose, 25-35 times pypdf's
0.005 s for its text, nearly all of it pdfminer parsing the page. So pdf_tables first asks pdfium which pages draw
any line or shape (under 1 ms a page of prose) and searches only those: a PDF without drawings costs under 1 ms a
page more than today; a page holding a ruled table about 0.2 s.
"""

from __future__ import annotations

import html
import io
import itertools
import re
import time
from collections.abc import Sequence

from kvqa.languages import WIDE

MIN_ROWS = 2  # a header and one row
MIN_COLUMNS = 2
MAX_PATHS = 5000  # a page drawing more lines and shapes (a map, a chart) is not searched: 5,000 cost pdfplumber 1.5-4 s
ROW = re.compile(r"^\|[^\n]*", re.MULTILINE)  # a line of a Markdown table: kvqa.evidence.sources never cuts a passage
                                              # inside one
TABLE = re.compile(r"^\|[^\n]*\n\|[ \t]*:?-{3,}[^\n]*(?:\n\|[^\n]*)*", re.MULTILINE)  # header, '| --- |' line, rows
_CJK_BREAK = re.compile(f"(?<=[{WIDE}])[ \\t]*\\n\\s*(?=[{WIDE}])")  # a wrapped CJK cell: no space where it wrapped
_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a cell's own '|' is written '\|'


def markdown_table(rows: Sequence[Sequence[str | None]]) -> str:
    """A table as Markdown, one line per row: the first row as the header, a '| --- |' line, then the others. A
    cell's whitespace (newlines too) becomes one space, '|' becomes '\\|', None ''; short rows are padded; rows with
    no text are left out. No blank lines around it: the caller puts one before and one after."""
    cleaned = [[_cell(c) for c in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]
    if not cleaned:
        return ""
    width = max(len(row) for row in cleaned)
    lines = ["| " + " | ".join(row + [""] * (width - len(row))) + " |" for row in cleaned]
    return "\n".join(lines[:1] + ["|" + " --- |" * width] + lines[1:])


def _cell(value: str | None) -> str:
    """A cell's text on one line: a line break inside CJK text is dropped, any other whitespace is one space."""
    return " ".join(_CJK_BREAK.sub("", value or "").split()).replace("|", "\\|")


def pdf_tables(data: bytes, *, max_seconds: float) -> dict[int, str]:
    """{page number (1-based): the page's text with each table as a Markdown table in its place} for the pages that
    hold at least one table; pages without one are left out (their pypdf text stands). Only pages that draw lines or
    shapes, at most MAX_PATHS, are searched (a ruled table is drawn with them). Stops looking after max_seconds, and
    at any error of pdfplumber or pdfminer, with the pages found so far."""
    import pdfplumber

    found: dict[int, str] = {}
    started = time.monotonic()
    drawn = _drawing_pages(data)
    if drawn is not None and not drawn:
        return found
    try:
        with pdfplumber.open(io.BytesIO(data)) as pdf:
            for n, page in enumerate(pdf.pages, start=1):
                if time.monotonic() - started > max_seconds:
                    break
                if drawn is not None and n not in drawn:
                    continue
                text = _page_text(page)
                page.close()  # frees the page's parsed objects: a long PDF's pages are not all kept in memory
                if text is not None:
                    found[n] = text
    except Exception:  # noqa: BLE001 - pdfminer raises many kinds on a damaged file; pypdf's text stands then
        pass
    return found


def _drawing_pages(data: bytes) -> set[int] | None:
    """The pages (1-based) that draw from 1 to MAX_PATHS paths (lines, rectangles...), counted by pdfium in a few ms
    a page; None when pdfium cannot read the PDF (then every page is searched)."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError:
        return None
    try:
        drawn = set()
        for n in range(1, len(pdf) + 1):
            page = pdf[n - 1]
            paths = sum(1 for _ in itertools.islice(page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_PATH]),
                                                    MAX_PATHS + 1))
            if 0 < paths <= MAX_PATHS:
                drawn.add(n)
            page.close()
        return drawn
    except pdfium.PdfiumError:
        return None
    finally:
        pdf.close()


def _page_text(page) -> str | None:
    """The page's text with its tables as Markdown, ordered top to bottom; None when it holds no table."""
    tables = []
    for table in page.find_tables():
        rows = _kept(table.extract())
        if rows:
            tables.append((table.bbox, rows))
    if not tables:
        return None

    def outside(obj) -> bool:  # a character whose centre lies in a table is read as the table's, not as text
        x, y = (obj["x0"] + obj["x1"]) / 2, (obj["top"] + obj["bottom"]) / 2
        return not any(x0 <= x <= x1 and top <= y <= bottom for (x0, top, x1, bottom), _ in tables)

    lines = page.filter(lambda obj: obj.get("object_type") != "char" or outside(obj)).extract_text_lines()
    items = [(line["top"], 0, line["text"]) for line in lines]
    items += [(bbox[1], 1, markdown_table(rows)) for bbox, rows in tables]
    text, previous = "", None
    for _, kind, piece in sorted(items, key=lambda item: item[0]):
        if text:
            text += "\n" if kind == previous == 0 else "\n\n"  # a blank line before and after a table
        text, previous = text + piece, kind
    return text


def _kept(rows: list[list[str | None]]) -> list[list[str | None]] | None:
    """The table's rows without empty rows and columns, or None when fewer than MIN_ROWS x MIN_COLUMNS are left."""
    rows = [row for row in rows if any(_cell(c) for c in row)]
    if len(rows) < MIN_ROWS:
        return None
    width = max(len(row) for row in rows)
    used = [j for j in range(width) if any(j < len(row) and _cell(row[j]) for row in rows)]
    if len(used) < MIN_COLUMNS:
        return None
    return [[row[j] if j < len(row) else None for j in used] for row in rows]


# ---- shown in the evidence viewer -------------------------------------------------------------------------------

def cells(line: str) -> list[str]:
    """A Markdown table line's cells, stripped, '\\|' read back as '|'."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(inner)]


def _tables_near(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """(start, end) of each Markdown table overlapping text[a:b]: the whole table, even where it reaches past a or b."""
    first = text.rfind("\n", 0, a) + 1  # the line a lies on
    while first > 0 and text.startswith("|", text.rfind("\n", 0, first - 1) + 1):
        first = text.rfind("\n", 0, first - 1) + 1  # back to the first of the table lines above it
    tables = []
    for m in TABLE.finditer(text, first):
        if m.start() >= b:
            break
        if m.end() > a:
            tables.append((m.start(), m.end()))
    return tables


def context_html(text: str, window: tuple[int, int], passage: tuple[int, int], mark: tuple[int, int]) -> str | None:
    """HTML of text[window] with the Markdown tables in it as HTML tables (the header always shown, the rows inside
    the window), the passage's rows and text highlighted and the sentence or row `mark` marked more strongly; None
    when no table lies in the window (kvqa.documents.pages.text_context shows the text as it always has)."""
    a, b = window
    tables = _tables_near(text, a, b)
    if not tables:
        return None
    out, at = [], a
    for start, end in tables:
        if start > at:
            out.append(_marked(text, at, start, passage, mark))
        out.append(_table(text, start, end, (max(a, start), min(b, end)), passage, mark))
        at = max(at, end)
    if at < b:
        out.append(_marked(text, at, b, passage, mark))
    return "".join(out)


def _marked(text: str, a: int, b: int, passage: tuple[int, int], mark: tuple[int, int]) -> str:
    """text[a:b], escaped, with the parts inside the passage and the mark in <mark>s."""
    cuts = sorted({a, b} | {p for p in (*passage, *mark) if a < p < b})
    out = []
    for x, y in zip(cuts, cuts[1:]):
        piece = html.escape(text[x:y])
        if mark[0] <= x and y <= mark[1]:
            piece = f"<mark class='kvqa-sentence'>{piece}</mark>"
        if passage[0] <= x and y <= passage[1]:
            piece = f"<mark class='kvqa-passage'>{piece}</mark>"
        out.append(piece)
    return "".join(out)


def _table(text: str, start: int, end: int, shown: tuple[int, int], passage: tuple[int, int],
           mark: tuple[int, int]) -> str:
    """A Markdown table text[start:end] as an HTML table: its header, then its rows that overlap `shown`, those in the
    passage (and the mark) highlighted."""
    lines, at = [], start
    for line in text[start:end].split("\n"):
        lines.append((at, at + len(line), line))
        at += len(line) + 1
    (h0, h1, header), rows = lines[0], lines[2:]
    width = len(cells(header))

    def cell_html(value: str, row: tuple[int, int]) -> str:
        piece = html.escape(value)
        if row[0] < mark[1] and mark[0] < row[1]:
            piece = f"<mark class='kvqa-sentence'>{piece}</mark>"
        if row[0] < passage[1] and passage[0] < row[1]:
            piece = f"<mark class='kvqa-passage'>{piece}</mark>"
        return piece

    def tr(line: str, row: tuple[int, int], tag: str) -> str:
        values = (cells(line) + [""] * width)[:max(width, len(cells(line)))]
        css = " class='kvqa-passage'" if row[0] < passage[1] and passage[0] < row[1] else ""
        return f"<tr{css}>" + "".join(f"<{tag}>{cell_html(v, row)}</{tag}>" for v in values) + "</tr>"

    body = [tr(line, (r0, r1), "td") for r0, r1, line in rows if r0 < shown[1] and shown[0] < r1]
    return ("<table class='kvqa-table'><thead>" + tr(header, (h0, h1), "th") + "</thead><tbody>" + "".join(body)
            + "</tbody></table>")
