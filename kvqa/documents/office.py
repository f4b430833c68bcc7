"""Word (.docx), PowerPoint (.pptx), HTML and EPUB files as Markdown-like pages (a slide, a section or a chapter each):
headings as '#'-lines, lists as '- ' / '1. ' lines, tables as Markdown tables of one row a line.

Nothing in a file is run or fetched: scripts and styles are never read as text, XML that declares entities is refused,
and a zip's declared sizes are summed before anything in it is unpacked (zipfile reads no more than it declares).
"""

from __future__ import annotations

import codecs
import io
import posixpath
import re
import zipfile
import zlib
from html.parser import HTMLParser
from urllib.parse import unquote
from xml.etree import ElementTree

from kvqa.documents.tables import markdown_table
from kvqa.errors import DocumentError
from kvqa.languages import WIDE

OFFICE_SUFFIXES = (".docx", ".pptx", ".html", ".htm", ".epub")
MAX_MEMBERS = 10_000  # files inside one zip

TEXT, TABLE = 0, -1  # a block's level: 1-6 for a heading, TEXT for other lines, TABLE for a Markdown table
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # encrypted Office files and old .doc/.ppt are OLE compound files
_KIND = {".docx": "Word", ".pptx": "PowerPoint", ".epub": "EPUB"}
_ENTITY = re.compile(rb"<\x00?!\x00?E\x00?N\x00?T\x00?I\x00?T\x00?Y", re.I)  # UTF-8 or UTF-16
_CJK_WRAP = re.compile(f"(?<=[{WIDE}])[ \t\r\f]*\n\\s*(?=[{WIDE}])")  # a source line break between CJK adds no space


def read_office(data: bytes, suffix: str, name: str, *, max_pages: int, max_expanded_bytes: int) -> list[str]:
    """The file's text as Markdown-like pages (a slide, a section or a chapter each): headings as '#'-lines, lists as
    '- ' / '1. ' lines, tables as Markdown tables; raises DocumentError with what to do when it cannot be read."""
    if suffix in (".html", ".htm"):
        pages = _sections(_html_blocks(_decode_html(data, name)))
    else:
        if suffix != ".epub" and data.startswith(_OLE):
            raise DocumentError("office.encrypted_or_old", name=name, suffix=suffix)
        archive = _open_zip(data, name, suffix, max_expanded_bytes)
        from docx.exceptions import PythonDocxError
        from docx.opc.exceptions import OpcError
        from lxml.etree import LxmlError
        from pptx.exc import PythonPptxError
        try:
            if suffix == ".docx":
                pages = _sections(_docx_blocks(data))
            elif suffix == ".pptx":
                pages = _pptx_pages(data)
            else:
                pages = _epub_pages(archive, name)
        except MemoryError:
            raise DocumentError("office.bomb", name=name, limit_mb=max_expanded_bytes / 2**20) from None
        # a damaged file makes the libraries fail in many ways; each of them means "damaged"
        except (zipfile.BadZipFile, KeyError, ValueError, TypeError, AttributeError, IndexError, OSError, EOFError,
                zlib.error, SyntaxError, RecursionError, NotImplementedError, OpcError, LxmlError, PythonDocxError,
                PythonPptxError) as e:
            raise DocumentError("office.damaged", name=name, kind=_KIND[suffix], error=type(e).__name__) from None
    if len(pages) > max_pages:
        too_many = {".pptx": "office.too_many_slides", ".epub": "office.too_many_chapters"}.get(
            suffix, "office.too_many_sections")
        raise DocumentError(too_many, name=name, count=len(pages), limit=max_pages)
    if not any(page.strip() for page in pages):
        raise DocumentError("office.no_text", name=name)
    return pages


def _open_zip(data: bytes, name: str, suffix: str, max_expanded_bytes: int) -> zipfile.ZipFile:
    """The file as a zip whose declared contents are within the limits."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise DocumentError("office.damaged", name=name, kind=_KIND[suffix], error=type(e).__name__) from None
    if len(members) > MAX_MEMBERS:
        raise DocumentError("office.too_many_members", name=name, count=len(members), limit=MAX_MEMBERS)
    if sum(member.file_size for member in members) > max_expanded_bytes:
        raise DocumentError("office.bomb", name=name, limit_mb=max_expanded_bytes / 2**20)
    return archive


def _sections(blocks: list[tuple[int, str]]) -> list[str]:
    """Pages split before each level-1 heading but the first (level 2 if there is none; else one page)."""
    levels = {level for level, _ in blocks}
    split = 1 if 1 in levels else 2 if 2 in levels else None
    pages, started = [[]], False
    for level, text in blocks:
        if level == split:
            if started:
                pages.append([])
            started = True
        pages[-1].append((level, text))
    return [_page(page) for page in pages]


def _page(blocks: list[tuple[int, str]]) -> str:
    """The blocks as one page's text, a table with an empty line before and after it."""
    text = "\n".join(f"\n{text}\n" if level == TABLE else text for level, text in blocks)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def _table(rows: list[list[str]]) -> tuple[int, str]:
    """A Markdown table block, the first row as its header: one line a row, so a passage never splits a row."""
    return TABLE, markdown_table(rows)


# ---- Word
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
# the runs Word shows: plain, in links, fields, smart tags, content controls and tracked insertions (not deletions)
_RUNS = ("./w:r | ./w:hyperlink/w:r | ./w:ins/w:r | ./w:ins/w:hyperlink/w:r | ./w:fldSimple/w:r | ./w:smartTag/w:r"
         " | ./w:sdt/w:sdtContent/w:r")
_STYLE = re.compile(r"(heading|标题|list bullet|list number|title)(?: ?([1-9]))?")  # 标题 1: WPS's Heading 1


def _docx_blocks(data: bytes) -> list[tuple[int, str]]:
    """A Word document's paragraphs and tables as blocks, in the body's order."""
    import docx
    from docx.opc.constants import RELATIONSHIP_TYPE

    document = docx.Document(io.BytesIO(data))
    try:
        formats = _numbering_formats(document.part.part_related_by(RELATIONSHIP_TYPE.NUMBERING).element)
    except KeyError:  # no numbering part: no numbered paragraphs either
        formats = {}
    blocks, counters = [], {}  # counters: (list, depth) -> items so far
    for element in _docx_body(document.element.body):
        if element.tag == _W + "tbl":
            rows = [[text for tc in tr.tc_lst for text in [_docx_text(tc)] + [""] * (tc.grid_span - 1)]
                    for tr in element.tr_lst]
            if any(any(row) for row in rows):
                blocks.append(_table([row for row in rows if row]))
            continue
        text = "".join(run.text for run in element.xpath(_RUNS)).strip()
        if not text:
            continue
        kind, level = _docx_style(document.styles.element, element.style)
        numbered = element.pPr.numPr if element.pPr is not None else None
        if kind in ("heading", "title"):  # a title is a '# ' line but does not start a section
            counters.clear()  # lists are numbered within a section
            level = min(level, 6)
            blocks.append((level if kind == "heading" else TEXT, "#" * level + " " + " ".join(text.split())))
            continue
        if numbered is not None and numbered.numId is not None and numbered.numId.val:
            key, depth = numbered.numId.val, numbered.ilvl.val if numbered.ilvl is not None else 0
            bullet = formats.get((key, depth), "bullet") == "bullet"
        elif kind.startswith("list"):
            key, depth, bullet = kind, level - 1, kind == "list bullet"
        else:
            blocks.append((TEXT, text))
            continue
        for deeper in [k for k in counters if k[0] == key and k[1] > depth]:
            del counters[deeper]  # an item restarts the numbering of the items under it
        counters[key, depth] = counters.get((key, depth), 0) + 1
        blocks.append((TEXT, "  " * min(depth, 8) + ("- " if bullet else f"{counters[key, depth]}. ") + text))
    return blocks


def _docx_style(styles, style_id: str | None) -> tuple[str, int]:
    """("heading", 2), ("list bullet", 1), ("title", 1)... for a paragraph style or the style it is based on."""
    for _ in range(10):  # based-on chains are short; a loop in a damaged file must not hang
        style = styles.get_by_id(style_id) if style_id else None
        if style is None:
            return "", 0
        if found := _STYLE.fullmatch((style.name_val or "").lower()):  # Word's own names, whatever its language
            kind = {"标题": "heading" if found.group(2) else "title"}.get(found.group(1), found.group(1))
            return kind, int(found.group(2) or 1)
        style_id = style.basedOn_val
    return "", 0


def _docx_body(body):
    """The body's paragraphs and tables in order, inside content controls too."""
    for child in body:
        if child.tag in (_W + "p", _W + "tbl"):
            yield child
        elif child.tag == _W + "sdt" and (content := child.find(_W + "sdtContent")) is not None:
            yield from _docx_body(content)


def _docx_text(tc) -> str:
    """A table cell's text, nested tables included."""
    return " ".join("".join(run.text for run in p.xpath(_RUNS)) for p in tc.iter(_W + "p")).strip()


def _numbering_formats(numbering) -> dict[tuple[int, int], str]:
    """(numId, level) -> its number format ("bullet", "decimal", ...) from word/numbering.xml."""
    abstract = {a.get(_W + "abstractNumId"): a for a in numbering.iter(_W + "abstractNum")}
    formats = {}
    for num in numbering.iter(_W + "num"):
        link, num_id = num.find(_W + "abstractNumId"), num.get(_W + "numId") or ""
        for lvl in abstract.get(link.get(_W + "val") if link is not None else None, ()):
            if lvl.tag == _W + "lvl" and (fmt := lvl.find(_W + "numFmt")) is not None and num_id.isdigit():
                formats[int(num_id), int(lvl.get(_W + "ilvl") or 0)] = fmt.get(_W + "val")
    return formats


# ---- PowerPoint
def _pptx_pages(data: bytes) -> list[str]:
    """One page a slide: its title as a '# ' heading, its shapes' text in reading order, then its speaker notes."""
    import pptx

    pages = []
    for slide in pptx.Presentation(io.BytesIO(data)).slides:
        title = slide.shapes.title
        heading = " ".join(title.text_frame.text.split()) if title is not None else ""
        blocks = [(1, "# " + heading)] if heading else []
        blocks += _pptx_shapes(slide.shapes, skip=title)
        notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
        if notes is not None and notes.text.strip():
            blocks += [(TEXT, "Notes:"), (TEXT, notes.text.replace("\v", "\n").strip())]
        pages.append(_page(blocks))
    return pages


def _pptx_shapes(shapes, *, skip) -> list[tuple[int, str]]:
    """The shapes' text and tables in the slide's reading order (the order of its shape tree), groups included."""
    from pptx.shapes.group import GroupShape

    blocks = []
    for shape in shapes:
        if skip is not None and shape.shape_id == skip.shape_id:
            continue
        if isinstance(shape, GroupShape):
            blocks += _pptx_shapes(shape.shapes, skip=skip)
        elif shape.has_text_frame:
            lines = (p.text.replace("\v", "\n").strip() for p in shape.text_frame.paragraphs)  # \v: a line break
            blocks += [(TEXT, line) for line in lines if line]
        elif shape.has_table:
            rows = [["" if cell.is_spanned else cell.text for cell in row.cells] for row in shape.table.rows]
            if any(any(row) for row in rows):
                blocks.append(_table(rows))
    return blocks


# ---- HTML and EPUB
_SKIP = {"script", "style", "noscript", "template", "head"}  # their text is never content
_IN_HEAD = {"title", "meta", "link", "base", "style", "script", "noscript", "template"}  # anything else ends <head>
_BLOCK = {"address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details", "dialog", "div",
          "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hgroup", "hr", "html", "legend",
          "main", "nav", "p", "pre", "section", "summary", "title"}
_HEADING = {f"h{n}": n for n in range(1, 7)}
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)|<\?xml[^>]*encoding\s*=\s*["']([\w.:-]+)""", re.I)
# labels that browsers read as another encoding (WHATWG Encoding)
_ALIASES = {"gb2312": "gb18030", "gbk": "gb18030", "iso-8859-1": "cp1252", "latin1": "cp1252", "ascii": "cp1252",
            "us-ascii": "cp1252", "utf-16": "utf-8", "utf-16le": "utf-8", "utf-16be": "utf-8"}


def _decode_html(data: bytes, name: str) -> str:
    """A page's text: its BOM's encoding, else its <meta charset> (or XML declaration), else UTF-8, else cp1252."""
    for bom, codec in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                       (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(codec)
            except UnicodeDecodeError:
                raise DocumentError("office.html_not_text", name=name) from None
    declared = _CHARSET.search(data[:4096])
    label = (declared.group(1) or declared.group(2)).decode("ascii").lower() if declared else "utf-8"
    for codec in (_ALIASES.get(label, label), "utf-8", "cp1252", "latin-1"):
        try:
            text = data.decode(codec)
            break
        except (UnicodeError, LookupError):  # a wrong or unknown label
            continue
    controls = sum(1 for c in text[:65536] if ord(c) < 32 and c not in "\t\n\r\f\v")
    if "\x00" in text or controls > 0.05 * max(len(text[:65536]), 1):
        raise DocumentError("office.html_not_text", name=name)
    return text


def _html_blocks(text: str, *, title: bool = True) -> list[tuple[int, str]]:
    """A page's text as blocks: its title (when asked), headings, lines, list items and tables."""
    parser = _Html()
    parser.feed(text)
    parser.close()
    heading = parser.title.strip()
    if not title or not heading or any(t.lstrip("# ") == " ".join(heading.split()) for _, t in parser.out[:3]):
        return parser.out
    return [(TEXT, " ".join(heading.split())), *parser.out]


class _Html(HTMLParser):
    """HTML to blocks: lines, headings and list items as they end; tables as Markdown when their end tag comes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[tuple[int, str]] = []  # where finished lines go: the page, or the open table cell
        self.line: list[str] = []
        self.level, self.prefix, self.pre = TEXT, "", 0
        self.skipping: list[str] = []  # open elements whose text is not content
        self.title, self.in_title = "", False
        self.lists: list[list] = []  # [tag, items so far] of each open <ul>/<ol>
        self.tables: list[dict] = []  # each open table: rows of cells (blocks), the open cell's span, the page before

    def handle_starttag(self, tag, attrs):
        if "head" in self.skipping and tag not in _IN_HEAD:
            self.skipping.remove("head")  # a body element ends an unclosed <head>, as in a browser
        if tag == "title" and "head" in self.skipping:
            self.in_title = True
        elif tag in _SKIP:
            self.skipping.append(tag)
        elif tag in _HEADING:
            self.end_line()
            self.level, self.prefix = _HEADING[tag], "#" * _HEADING[tag] + " "
        elif tag in ("ul", "ol"):
            self.end_line()
            start = dict(attrs).get("start") or ""
            self.lists.append([tag, int(start) - 1 if start.isdecimal() else 0])
        elif tag == "li":
            self.end_line()
            item = self.lists[-1] if self.lists else ["ul", 0]
            item[1] += 1
            self.prefix = "  " * min(max(len(self.lists) - 1, 0), 8) + ("- " if item[0] == "ul" else f"{item[1]}. ")
        elif tag == "br":
            self.line.append("\n") if self.pre else self.end_line()
        elif tag == "table":
            self.end_line()
            self.tables.append({"rows": [], "span": None, "page": self.out, "stray": []})
            self.out = []
        elif tag in ("tr", "td", "th") and self.tables:
            table = self._end_cell()
            if tag == "tr" or not table["rows"]:
                table["rows"].append([])
            if tag != "tr":
                span = dict(attrs).get("colspan") or ""
                table["span"] = min(max(int(span), 1), 1000) if span.isdecimal() else 1  # browsers' limit: 1000
        elif tag in _BLOCK:
            self.end_line()
            self.pre += tag == "pre"

    def handle_endtag(self, tag):
        if tag in self.skipping:
            del self.skipping[len(self.skipping) - 1 - self.skipping[::-1].index(tag):]
        elif tag == "title":
            self.in_title = False
        elif tag in _HEADING or tag == "li":
            self.end_line()
            self.level, self.prefix = TEXT, ""
        elif tag in ("ul", "ol"):
            self.end_line()
            del self.lists[-1:]
        elif tag in ("td", "th", "tr") and self.tables:
            self._end_cell()
        elif tag == "table" and self.tables:
            self._end_table()
        elif tag in _BLOCK:
            self.end_line()
            self.pre -= tag == "pre" and self.pre > 0

    def handle_startendtag(self, tag, attrs):  # <br/>, <p/> in XHTML
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_data(self, data):
        if self.in_title:
            self.title += data
        elif not self.skipping:
            self.line.append(data)

    def close(self):
        super().close()
        while self.tables:  # tables left open at the end of the page
            self._end_table()
        self.end_line()

    def end_line(self):
        """Finish the line being read; a list item's or heading's marker waits for its first text."""
        if not self.line:
            return
        text, self.line = "".join(self.line), []
        if self.pre:
            lines = [line.rstrip() for line in text.strip("\n").split("\n")]
        else:
            lines = [" ".join(_CJK_WRAP.sub("", text).split())]
        if any(lines):
            self.out += [(self.level, self.prefix + lines[0]), *((TEXT, line) for line in lines[1:])]
            self.level, self.prefix = TEXT, ""

    def _end_cell(self) -> dict:
        """Put what was read since the last cell (or row) into the innermost table's open cell; returns the table."""
        self.end_line()
        table, blocks, self.out = self.tables[-1], self.out, []
        if table["span"] is None:
            table["stray"] += blocks  # a caption, or text outside any cell
        else:
            table["rows"][-1] += [blocks] + [[]] * (table["span"] - 1)
            table["span"] = None
        return table

    def _end_table(self):
        """Close the innermost table where it began: a Markdown table, or its cells' blocks if it lays out a page."""
        table = self._end_cell()
        self.out = table["page"]
        self.out += table["stray"]  # in place: a page of many tables must not be copied once per table
        self.tables.pop()
        rows = [row for row in table["rows"] if row]
        cells = [cell for row in rows for cell in row]
        if max(map(len, rows), default=0) == 1 or any(level != TEXT for cell in cells for level, _ in cell):
            self.out += [block for cell in cells for block in cell]  # one column, headings or tables inside: layout
        elif any(cells):
            self.out.append(_table([[" ".join(text for _, text in cell) for cell in row] for row in rows]))


def _epub_pages(archive: zipfile.ZipFile, name: str) -> list[str]:
    """One page per spine document with text, in reading order."""
    container = _xml(archive, "META-INF/container.xml")
    rootfile = container.find(".//{*}rootfile")
    opf_path = rootfile.get("full-path", "") if rootfile is not None else ""
    opf = _xml(archive, opf_path)
    manifest = {item.get("id"): item for item in opf.findall(".//{*}manifest/{*}item")}
    locked = set()  # DRM lists the documents it encrypts here (fonts may be listed too: they are not read)
    if "META-INF/encryption.xml" in archive.namelist():
        encryption = _xml(archive, "META-INF/encryption.xml")
        locked = {unquote(ref.get("URI", "")) for ref in encryption.findall(".//{*}CipherReference")}
    pages = []
    for ref in opf.findall(".//{*}spine/{*}itemref"):
        item = manifest.get(ref.get("idref"))
        if item is None or item.get("media-type") not in ("application/xhtml+xml", "text/html"):
            continue
        path = posixpath.normpath(posixpath.join(posixpath.dirname(opf_path), unquote(item.get("href", ""))))
        if path in locked:
            raise DocumentError("office.epub_drm", name=name)
        page = _page(_html_blocks(_decode_html(_member(archive, path), name), title=False))
        if page.strip():
            pages.append(page)
    return pages


def _xml(archive: zipfile.ZipFile, path: str) -> ElementTree.Element:
    """A member parsed as XML (xml.etree fetches no external entity)."""
    return ElementTree.fromstring(_member(archive, path))


def _member(archive: zipfile.ZipFile, path: str) -> bytes:
    """A member's bytes; ValueError when it declares XML entities (a billion laughs), KeyError when it is missing."""
    data = archive.read(path)
    if _ENTITY.search(data):
        raise ValueError("XML entities")
    return data
