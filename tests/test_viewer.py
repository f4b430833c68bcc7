"""The evidence on its page: a source passage highlighted on the PDF page it comes from (pypdfium2), the sentence
marked more strongly, text documents shown in their surrounding text; in the app, every source of an answer can be
opened (the fake engine stands in for the model; its sources are the real ranking)."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest

import app as app_module
import kvqa
from conftest import ASSETS, as_upload
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.config import Config
from kvqa.documents.pages import find, render_page, text_context
from ranked import find_sources

CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")  # fonts-wqy-microhei, which .ci/run installs


def pdf_of(pages: list[str], *, font: Path | None = None) -> bytes:
    """A PDF with one page per text, wrapped as a reader would see it (a CJK font when given)."""
    from fpdf import FPDF

    pdf = FPDF()
    if font is not None:
        pdf.add_font("cjk", "", str(font))
        pdf.set_font("cjk", size=11)
    else:
        pdf.set_font("helvetica", size=11)
        pages = [p.replace("—", "-").encode("latin-1", "replace").decode("latin-1") for p in pages]  # its charset
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    return bytes(pdf.output())


def declaration_pages(per_page: int = 3) -> list[str]:
    """The sample's paragraphs, a few per page: a real text, wrapped over many lines and pages."""
    paragraphs = [p for p in (ASSETS / "declaration-of-independence.md").read_text().split("\n\n")
                  if p.strip() and not p.startswith("#")]
    return ["\n\n".join(paragraphs[i: i + per_page]) for i in range(0, len(paragraphs), per_page)]


def highlighted_pixels(image) -> int:
    """Pixels tinted by the highlight (yellow over white: red and green high, blue low)."""
    return sum(1 for r, g, b in image.get_flattened_data() if r > 200 and g > 180 and b < 150)


@pytest.mark.parametrize("question", ["Who has obstructed the Administration of Justice?",
                                      "What did he do to the Judges?", "What rights are unalienable?",
                                      "Who abdicated Government here?"])
def test_the_first_source_is_highlighted_on_the_page_that_holds_it(tmp_path, question):
    data = pdf_of(declaration_pages())
    path = tmp_path / "declaration.pdf"
    path.write_bytes(data)
    document = kvqa.load_document(path)
    source = find_sources(document.text, "", question, pages=True)[0]
    shown = render_page(data, source.page, source.text, source.marked)
    assert shown.highlighted > 0 and highlighted_pixels(shown.image) > 500
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    try:  # the passage is found on its own page and on no other
        pages_with_it = [n for n in range(1, len(pdf) + 1) if find(pdf[n - 1].get_textpage(), source.text)]
    finally:
        pdf.close()
    assert source.page in pages_with_it and len(pages_with_it) == 1


@pytest.mark.skipif(not CJK_FONT.exists(), reason="needs fonts-wqy-microhei (installed by .ci/run) to write a CJK PDF")
def test_a_chinese_passage_is_highlighted_and_its_sentence_marked(tmp_path):
    pages = ["第一页：果园里种着苹果树和梨树。", "第二页：渡轮每天早上九点从港口出发，票价十元。船上可以买票。"]
    data = pdf_of(pages, font=CJK_FONT)
    path = tmp_path / "港口.pdf"
    path.write_bytes(data)
    document = kvqa.load_document(path)
    source = find_sources(document.text, "票价十元", "渡轮票价是多少？", pages=True)[0]
    assert source.page == 2 and "票价" in source.marked
    shown = render_page(data, 2, source.text, source.marked)
    assert shown.highlighted > 0 and highlighted_pixels(shown.image) > 100


def test_a_passage_not_on_the_page_is_not_highlighted_and_a_bad_pdf_says_why():
    data = pdf_of(["Apples grow in the orchard.", "The ferry leaves at nine."])
    assert render_page(data, 1, "The ferry leaves at nine.").highlighted == 0
    with pytest.raises(ValueError, match="not a page 3"):
        render_page(data, 3, "x")
    with pytest.raises(ValueError, match="cannot be opened"):
        render_page(b"%PDF-1.4 broken", 1, "x")


def test_text_context_marks_the_passage_and_its_sentence_and_escapes_html():
    text = "Intro <b>bold</b>. " * 5 + "The ferry leaves at nine. Tickets cost ten euros. " + "Outro. " * 5
    start = text.index("The ferry")
    end = text.index("Outro")
    mark = (text.index("Tickets"), text.index("Tickets") + len("Tickets cost ten euros."))
    shown = text_context(text, start, end, mark, around=20)
    assert "<mark class='kvqa-passage'>The ferry leaves at nine. <mark class='kvqa-sentence'>Tickets cost ten euros." \
           in shown
    assert "&lt;b&gt;bold&lt;/b&gt;" in shown and "<b>" not in shown and shown.count("…") == 2
    ferry = (text.index("nine"), text.index("nine") + 4)
    said = text_context(text, start, end, mark, around=20, answer=ferry)  # the answer's words, bold in the passage
    assert "The ferry leaves at <strong class='kvqa-answer'>nine</strong>. <mark class='kvqa-sentence'>" in said
    across = text_context(text, start, end, mark, around=20, answer=(ferry[0], mark[0] + 7))  # over the sentence's edge
    assert "<strong class='kvqa-answer'>nine. </strong><mark class='kvqa-sentence'><strong class='kvqa-answer'>" \
           "Tickets</strong> cost" in across
    assert text_context(text, start, end, mark, around=20, answer=(0, 5)) == shown  # outside the passage: nothing


def viewer_app() -> app_module.KvqaApp:
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(), budget=CacheBudget(2**30))
    return kvqa_app


def test_the_app_shows_each_answers_source_on_its_page(tmp_path):
    kvqa_app = viewer_app()
    path = tmp_path / "declaration.pdf"
    path.write_bytes(pdf_of(declaration_pages()))
    shown = kvqa_app.reads.on_upload([as_upload(path)], None)
    session = shown[kvqa_app.page.state]
    assert shown[kvqa_app.page.evidence_page]["visible"] is False  # no answer yet
    for question in ["Who has obstructed the Administration of Justice?", "What rights are unalienable?"]:
        session.ask(question).answer  # noqa: B018 - runs the answer
    panels = kvqa_app.panels.show(session)
    pick = panels[kvqa_app.page.evidence_pick]
    assert pick["value"] == "1:0" and len(pick["choices"]) >= 2  # the latest answer's first source, all listed
    page = panels[kvqa_app.page.evidence_page]
    assert page["visible"] and highlighted_pixels(page["value"]) > 500
    assert f"Page {session.turns[1].sources[0].page}, the passage highlighted" in panels[kvqa_app.page.evidence_text]
    earlier = kvqa_app.evidence.on_evidence("0:0", session)  # an earlier answer's source, by choosing it
    assert earlier[kvqa_app.page.evidence_pick]["value"] == "0:0"
    assert "Administration of Justice" in earlier[kvqa_app.page.evidence_text]
    zh = kvqa_app.evidence.on_evidence("0:0", session, "zh")[kvqa_app.page.evidence_text]
    assert "已高亮该段落" in zh


def test_a_text_document_shows_the_passage_in_its_text():
    kvqa_app = viewer_app()
    document = kvqa.document_from_text("Apples grow in the orchard.\n\nThe ferry leaves at nine.")
    session, _ = kvqa_app.service.read(document, None, None, lambda *a, **k: None)
    session.ask("When does the ferry leave?").answer  # noqa: B018
    panels = kvqa_app.panels.show(session)
    assert panels[kvqa_app.page.evidence_page]["visible"] is False
    assert "<mark class='kvqa-passage'>" in panels[kvqa_app.page.evidence_text]
    assert "ferry leaves at nine" in panels[kvqa_app.page.evidence_text]


def test_a_pdf_that_cannot_be_rendered_says_so_and_shows_the_text(tmp_path):
    kvqa_app = viewer_app()
    path = tmp_path / "two.pdf"
    path.write_bytes(pdf_of(["Apples grow in the orchard.", "The ferry leaves at nine."]))
    session = kvqa_app.reads.on_upload([as_upload(path)], None)[kvqa_app.page.state]
    session.ask("When does the ferry leave?").answer  # noqa: B018
    kvqa_app.service.notes(session).pdf = b"%PDF-1.4 damaged since"
    panels = kvqa_app.panels.show(session)
    assert panels[kvqa_app.page.evidence_page]["visible"] is False
    assert "cannot be shown as an image" in panels[kvqa_app.page.evidence_text]
    assert "ferry leaves at nine" in panels[kvqa_app.page.evidence_text]


def test_clicking_an_answer_shows_its_first_source():
    kvqa_app = viewer_app()
    document = kvqa.document_from_text("Apples grow in the orchard.\n\nThe ferry leaves at nine.")
    session, _ = kvqa_app.service.read(document, None, None, lambda *a, **k: None)
    session.ask("When does the ferry leave?").answer  # noqa: B018
    session.ask("What grows in the orchard?").answer  # noqa: B018

    def click(index):
        selected = app_module.gr.SelectData(None, {"index": index, "value": ""})
        return kvqa_app.evidence.on_chat_select(session, "en", selected)

    first = click(1)  # the first answer (messages: question, answer, question, answer)
    assert first[kvqa_app.page.evidence_pick]["value"] == "0:0"
    assert "ferry leaves at nine" in first[kvqa_app.page.evidence_text]
    assert click(2)[kvqa_app.page.evidence_pick]["value"] == "1:0"  # its question shows the same turn
    assert click(9) == gr.skip() and kvqa_app.evidence.on_chat_select(None, "en", None) == gr.skip()
