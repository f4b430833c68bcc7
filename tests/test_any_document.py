"""Documents nobody chose (Hypothesis): every kind kvqa reads, from empty to several times a small context, in
English and Chinese words, with sentences, paragraphs, unbroken runs and tables, written to a file, read, cut into
parts on a fake engine and asked one question. What must hold for any of them:

1. load_document returns a Document, or raises DocumentError when (and only when) there is nothing to read; no
   word of the file is lost, and the words keep their order.
2. Session.load reads any document with text, however long one page of it is; its parts cover every non-space
   character of the document, and each part fits the model's context when read.
3. A question made of the document's words is answered, and each source of the answer lies in the part read for it.

KVQA_HYPOTHESIS_EXAMPLES=N runs N random documents of each kind (a new draw each run); without it each kind's
EXAMPLES documents are drawn from a fixed seed (derandomize), so CI runs the same documents every time.
"""

from __future__ import annotations

import html
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import docx
import pptx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pptx.util import Inches

from fakes import FakeEngine
from kvqa.documents.parts import offsets, select
from kvqa.documents.reading import Document, load_document
from kvqa.errors import DocumentError
from kvqa.evidence.sources import terms
from kvqa.results import Answer
from kvqa.session.session import Session
from test_office import CONTAINER  # an EPUB's META-INF/container.xml, pointing at OEBPS/content.opf

EXAMPLES = 25  # documents of each kind per run without KVQA_HYPOTHESIS_EXAMPLES (the module runs in well under 60 s)
CONTEXT = 160  # the fake engine's context in tokens: most documents drawn are several times longer
CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"  # as kvqa.documents.office counts CJK (with 。)
ENGLISH = ("river", "budget", "library", "ferry", "harbour", "committee", "lantern", "orchard", "velvet", "granite",
           "signal", "meadow", "copper", "falcon", "window", "seven", "1848", "42", "café", "R&D", "x<y", "the", "of",
           "and", "is", "a")
CHINESE = "水山火木金土日月风雨花鸟鱼书门车船桥路城国家人心手口耳目天地光电海河湖石田林春夏秋冬东西南北"
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")  # fonts-wqy-microhei (.ci/run installs it)

ASKED = int(os.environ.get("KVQA_HYPOTHESIS_EXAMPLES") or 0)  # exploring: this many random documents of each kind
EVERY_KIND = settings(max_examples=ASKED or EXAMPLES, deadline=None, derandomize=not ASKED, database=None,
                      suppress_health_check=[HealthCheck.too_slow])

Table = tuple[tuple[str, ...], ...]


def cjk(char: str) -> bool:
    return bool(re.match(f"[{CJK}]", char))


class CjkEngine(FakeEngine):
    """The fake engine counting each CJK character as a token (as real vocabularies roughly do) and each other
    whitespace-separated word as one, so a Chinese text without spaces is long too; it refuses by the same count."""

    def count_tokens(self, text: str) -> int:
        return len(re.findall(f"[{CJK}]|[^\\s{CJK}]+", text))


# ---- documents drawn: sections (pages) of a heading and blocks (a paragraph's text, or a table's rows)

@dataclass(frozen=True)
class Section:
    heading: str  # "" for none
    blocks: tuple[str | Table, ...]
    notes: str = ""  # a slide's speaker notes


@dataclass(frozen=True)
class Drawn:
    sections: tuple[Section, ...]
    pad: str = ""  # whitespace around a text file's text
    level: int = 1  # the level of an HTML file's headings: <h1> or <h2>

    def words(self) -> list[str]:
        """Every word written, in reading order."""
        out = []
        for section in self.sections:
            out += section.heading.split()
            for block in section.blocks:
                out += block.split() if isinstance(block, str) else [w for row in block for c in row for w in c.split()]
            out += section.notes.split()
        return out

    def paragraphs(self) -> list[str]:
        return [b for s in self.sections for b in (s.heading, *s.blocks, s.notes) if isinstance(b, str) and b]


def joined(words: list[str]) -> str:
    """Words as a text: a space between them, none between two CJK characters (Chinese has no spaces)."""
    text = ""
    for word in words:
        text += "" if not text or (cjk(text[-1]) and cjk(word[0])) else " "
        text += word
    return text


def word_of(chinese: bool):
    english = st.sampled_from(ENGLISH)
    return st.one_of(english, st.text(CHINESE, min_size=1, max_size=8)) if chinese else english


@st.composite
def sentence(draw, chinese: bool) -> str:
    """Words ended by '.', '。' or nothing (a run-on)."""
    words = draw(st.lists(word_of(chinese), min_size=1, max_size=12))
    return joined(words) + draw(st.sampled_from([".", "。", ""] if chinese else [".", ""]))


@st.composite
def paragraph(draw, chinese: bool) -> str:
    """A few sentences, said up to ten times over: long paragraphs, with no sentence end in a run-on one."""
    sentences = draw(st.lists(sentence(chinese), min_size=1, max_size=4))
    return joined(sentences * draw(st.integers(1, 10)))


@st.composite
def table(draw, chinese: bool) -> Table:
    rows, cols = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    cell = st.lists(word_of(chinese), max_size=3).map(joined)
    return tuple(tuple(draw(cell) for _ in range(cols)) for _ in range(rows))


@st.composite
def drawn(draw, *, sections: int = 4, headings: bool = False, tables: bool = False, notes: bool = False,
          chinese: bool = True, pad: tuple[str, ...] = ("",), levels: tuple[int, ...] = (1,)) -> Drawn:
    """Up to `sections` sections of up to four blocks each."""
    block = st.one_of(paragraph(chinese), table(chinese)) if tables else paragraph(chinese)
    heading = st.lists(word_of(chinese), min_size=1, max_size=4).map(joined) if headings else st.just("")
    section = st.builds(Section, heading, st.lists(block, max_size=4).map(tuple),
                        paragraph(chinese) if notes else st.just(""))
    return Drawn(tuple(draw(st.lists(section, max_size=sections))), draw(st.sampled_from(pad)),
                 draw(st.sampled_from(levels)))


# ---- each kind written as its file

def write_docx(doc: Drawn, path: Path, *, breaks: bool) -> None:
    """Sections from Heading 1 (when drawn), a page break between sections (breaks) that does not start one."""
    document = docx.Document()
    for n, section in enumerate(doc.sections):
        if n and breaks:
            document.add_page_break()
        if section.heading:
            document.add_heading(section.heading, level=1)
        for block in section.blocks:
            if isinstance(block, str):
                document.add_paragraph(block)
            else:
                grid = document.add_table(rows=len(block), cols=len(block[0]))
                for r, row in enumerate(block):
                    for c, text in enumerate(row):
                        grid.cell(r, c).text = text
    document.save(path)


def html_body(section: Section, level: int) -> str:
    out = f"<h{level}>{html.escape(section.heading)}</h{level}>\n" if section.heading else ""
    for block in section.blocks:
        if isinstance(block, str):
            out += f"<p>{html.escape(block)}</p>\n"
        else:
            out += "<table>" + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                                       for row in block) + "</table>\n"
    return out


def write_html(doc: Drawn, path: Path) -> None:
    body = "".join(html_body(s, doc.level) for s in doc.sections)
    path.write_text(f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head>\n<body>\n{body}</body></html>',
                    encoding="utf-8")


OPF = """<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">urn:uuid:0</dc:identifier>
<dc:title>Drawn</dc:title><dc:language>en</dc:language></metadata>
<manifest><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>{items}</manifest>
<spine>{refs}</spine></package>"""
XHTML = """<?xml version="1.0" encoding="UTF-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Drawn</title></head>
<body>{body}</body></html>"""


def write_epub(doc: Drawn, path: Path) -> None:
    """A minimal EPUB 3: mimetype first and stored, the container, a package with its spine, a nav, the chapters."""
    count = len(doc.sections)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", CONTAINER)
        z.writestr("OEBPS/content.opf", OPF.format(
            items="".join(f'<item id="c{n}" href="c{n}.xhtml" media-type="application/xhtml+xml"/>'
                          for n in range(count)),
            refs="".join(f'<itemref idref="c{n}"/>' for n in range(count))))
        z.writestr("OEBPS/nav.xhtml", XHTML.format(body='<nav epub:type="toc"><ol><li>Drawn</li></ol></nav>'))
        for n, section in enumerate(doc.sections):
            z.writestr(f"OEBPS/c{n}.xhtml", XHTML.format(body=html_body(section, 1)))


def write_pptx(doc: Drawn, path: Path) -> None:
    """A slide a section: its heading as the title (Title Only layout), paragraphs in a text box, tables, notes."""
    deck = pptx.Presentation()
    for section in doc.sections:
        slide = deck.slides.add_slide(deck.slide_layouts[5 if section.heading else 6])
        if section.heading:
            slide.shapes.title.text = section.heading
        for block in section.blocks:
            if isinstance(block, str):
                slide.shapes.add_textbox(Inches(0.5), Inches(1.5), Inches(9), Inches(1)).text_frame.text = block
            else:
                grid = slide.shapes.add_table(len(block), len(block[0]), Inches(0.5), Inches(4), Inches(9),
                                              Inches(1)).table
                for r, row in enumerate(block):
                    for c, text in enumerate(row):
                        grid.cell(r, c).text = text
        if section.notes:
            slide.notes_slide.notes_text_frame.text = section.notes
    deck.save(path)


def markdown(doc: Drawn) -> str:
    out = []
    for section in doc.sections:
        out += [f"# {section.heading}"] if section.heading else []
        for block in section.blocks:
            if isinstance(block, str):
                out.append(block)
            else:
                rows = ["| " + " | ".join(row) + " |" for row in block]
                out.append("\n".join(rows[:1] + ["|" + " --- |" * len(block[0])] + rows[1:]))
    return "\n\n".join(out)


def write_pdf(doc: Drawn, path: Path) -> None:
    """Dense pages (6 pt): a page holds thousands of characters, so one page alone is longer than the context."""
    from fpdf import FPDF

    pdf = FPDF()
    if CJK_FONT.exists():
        pdf.add_font("cjk", "", str(CJK_FONT))
        pdf.set_font("cjk", size=6)
    else:
        pdf.set_font("helvetica", size=6)
    pdf.set_margins(8, 8)
    pdf.add_page()
    for section in doc.sections:
        for block in section.blocks:
            if isinstance(block, str):
                pdf.multi_cell(0, 2.6, block)
            else:
                with pdf.table(first_row_as_headings=False, line_height=2.6) as grid:
                    for row in block:
                        cells = grid.row()
                        for text in row:
                            cells.cell(text)
            pdf.ln(2)
    pdf.output(str(path))


@st.composite
def pdf_page(draw, chinese: bool = CJK_FONT.exists()) -> Drawn:
    """A paragraph, then up to three paragraphs or tables: one dense page (two when it is very long)."""
    more = draw(st.lists(st.one_of(paragraph(chinese), table(chinese)), max_size=3))
    return Drawn((Section("", (draw(paragraph(chinese)), *more)),))


TEXT_PAD = ("", "\n", " \n\t\n")
# kind: (its documents, how one is written to a file); Chinese in a PDF needs a CJK font (CJK_FONT), without which its
# documents are English only; a PDF without text is a scan, read by OCR (tests/test_scans.py): each PDF has a paragraph
KINDS = {
    "docx": (drawn(headings=True, tables=True), lambda d, p: write_docx(d, p, breaks=True)),
    "docx-no-headings": (drawn(tables=True), lambda d, p: write_docx(d, p, breaks=False)),
    "html": (drawn(headings=True, tables=True, levels=(1, 2)), write_html),
    "html-no-headings": (drawn(tables=True), write_html),
    "epub": (drawn(headings=True, tables=True), write_epub),
    "pptx": (drawn(headings=True, tables=True, notes=True), write_pptx),
    "md": (drawn(headings=True, tables=True, pad=TEXT_PAD),
           lambda d, p: p.write_text(d.pad + markdown(d) + d.pad, encoding="utf-8")),
    "txt-lines": (drawn(pad=TEXT_PAD),  # a paragraph a line, no blank line anywhere
                  lambda d, p: p.write_text(d.pad + "\n".join(d.paragraphs()) + d.pad, encoding="utf-8")),
    "txt-one-line": (drawn(pad=("", " ")),  # no line end at all
                     lambda d, p: p.write_text(d.pad + " ".join(d.paragraphs()) + d.pad, encoding="utf-8")),
    "pdf": (pdf_page(), write_pdf),
}
SUFFIX = {"docx-no-headings": ".docx", "html-no-headings": ".html", "txt-lines": ".txt", "txt-one-line": ".txt"}


# ---- the properties

def assert_read_whole(document: Document, words: list[str]) -> None:
    """Every word drawn is in the document's text, in order (the reader's own marks and spaces aside)."""
    text, at = "".join(document.text.split()), 0
    for n, word in enumerate(words):
        found = text.find(word, at)
        assert found >= 0, f"word {n} {word!r} lost or out of order after {text[max(0, at - 40): at]!r}"
        at = found + len(word)


def assert_parts_cover_and_fit(session: Session, engine: CjkEngine) -> None:
    """Every non-space character of the document lies in a part, and each part, read, fits the context."""
    whole = session.whole
    covered = bytearray(len(whole.text))
    for first, last, _ in session.parts:
        start, end = offsets(whole, first, last)
        covered[start:end] = b"\1" * (end - start)
        engine.prefill(select(whole, first, last))  # DocumentTooLong when it does not fit
    lost = [i for i, char in enumerate(whole.text) if not covered[i] and not char.isspace()]
    assert not lost, f"characters in no part: {whole.text[lost[0]: lost[0] + 40]!r} at {lost[0]} ({len(lost)} in all)"


def question_from(document: Document, data) -> str:
    """A few words of the document's text, one after another, CJK runs cut into pieces of up to four."""
    words = re.findall(f"[{CJK}]{{1,4}}|[^\\s{CJK}]+", document.text)
    at = data.draw(st.integers(0, len(words) - 1), label="question at word")
    return " ".join(words[at: at + 3]) + "?"


def assert_answered_from_its_part(session: Session, question: str) -> None:
    events = list(session.ask(question).events())
    answer = events[-1]
    assert isinstance(answer, Answer), f"the answer's stream ended with {answer!r}"
    read, whole = session.document, session.whole
    start, end = read.span
    assert whole.text[start:end] == read.text, "the part read is not where Document.span says"
    if len(session.parts) > 1:
        assert (read.part.first, read.part.last) in [(a, b) for a, b, _ in session.parts], "read no planned part"
    in_parts = len(session.parts) > 1  # then its sources come from every part, offsets into the whole text
    searched = whole.text if in_parts else read.text
    for source in answer.sources:
        assert 0 <= source.start <= source.end <= len(searched), f"source {source.start}-{source.end} outside"
        assert searched[source.start: source.end] == source.text
        assert (source.part is not None) == in_parts, "a source of a document in parts names its part, else none"
        if in_parts:
            first, last, _ = session.parts[source.part - 1]
            a, b = offsets(whole, first, last)
            assert a <= source.start < b, f"source at {source.start} is not in part {source.part} ({a}-{b})"
    if set(terms(question)) & set(terms(searched)):
        assert answer.sources, "the document holds the question's words, yet the answer has no source"


@pytest.mark.parametrize("kind", list(KINDS))
@EVERY_KIND
@given(data=st.data())
def test_any_document_is_read_cut_into_parts_that_fit_and_answered(kind, data):
    documents, write = KINDS[kind]
    doc = data.draw(documents, label="document")
    words = doc.words()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"drawn{SUFFIX.get(kind, '.' + kind)}"
        write(doc, path)
        try:
            document = load_document(path)
        except DocumentError as error:
            assert not words, f"refused though it has text: {error}"
            event("nothing to read: refused")
            return
    assert words, f"nothing to read, yet read as {document.text!r}"
    assert_read_whole(document, words)

    engine = CjkEngine(context_tokens=CONTEXT)
    session = Session(engine)
    session.load(document)
    tokens = engine.count_tokens(document.text)
    event(f"contexts long: {min(tokens // CONTEXT, 5)}{'+' if tokens >= 5 * CONTEXT else ''}")
    event(f"parts: {min(len(session.parts), 5)}{'+' if len(session.parts) >= 5 else ''}")
    assert_parts_cover_and_fit(session, engine)
    assert_answered_from_its_part(session, question_from(session.whole, data))
