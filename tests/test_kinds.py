"""The documents people have, through every door: a fact on a scanned page, in a table's cell and on a
slide is answered with its source on the right page (slide) through the app, the API and `kvqa ask`; the scan's
source is highlighted on its page image in the evidence viewer. The fake engine stands in for the model (the
sources come from the document's text, above the engine); OCR is real."""

from __future__ import annotations

import json

import pytest
from fpdf import FPDF
from pptx import Presentation

import app as app_module
from conftest import as_upload, scan_image, scan_pdf
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.config import Config
from kvqa.session.session import Ask

pytestmark = pytest.mark.model  # OCR reads the scan (its ONNX models): not in make test-fast

PROSE = ("The harbour office keeps records of every vessel, every storm and every repair since the port opened. "
         "Its clerks write in ledgers that are copied each winter.")


def scanned(path):
    path.write_bytes(scan_pdf([scan_image(["The lighthouse keeper recorded 417 ships in 1887."]),
                               scan_image(["The ferry to Calloway Island leaves at 7:15 every morning."])]))


def deck(path):
    slides = Presentation()
    for title, body in [("Welcome", "An overview of the year."), ("Staff", "Forty people work in three teams."),
                        ("Results", "Quarterly revenue reached 4.2 million euros in Lisbon.")]:
        slide = slides.slides.add_slide(slides.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    slides.save(path)


def table(path):
    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    pdf.add_page()
    pdf.multi_cell(0, 7, PROSE)
    pdf.add_page()
    pdf.multi_cell(0, 7, "The towns of the survey and what was counted in each.")
    with pdf.table() as rows:
        for cells in [("Town", "Country", "Bakeries"), ("Tampere", "Finland", "31"), ("Aarhus", "Denmark", "44"),
                      ("Bergen", "Norway", "27")]:
            row = rows.row()
            for cell in cells:
                row.cell(cell)
    path.write_bytes(bytes(pdf.output()))


DOCUMENTS = {  # name: (make it, a question, the page (slide) of its answer, what the first source holds)
    "scan.pdf": (scanned, "When does the ferry to Calloway Island leave?", 2, "7:15"),
    "deck.pptx": (deck, "What did quarterly revenue reach in Lisbon?", 3, "4.2 million euros"),
    "table.pdf": (table, "How many bakeries does Aarhus have?", 2, "| Aarhus | Denmark | 44 |"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kinds")
    for name, (make, *_) in DOCUMENTS.items():
        make(folder / name)
    return folder


def new_app():
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(), budget=CacheBudget(2**30))
    return kvqa_app


def quiet(*args, **kwargs):
    pass


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_the_app_answers_with_the_source_on_its_page(files, name):
    _, question, page, holds = DOCUMENTS[name]
    kvqa_app = new_app()
    session = kvqa_app.reads.on_upload(as_upload(files / name), None, progress=quiet)[kvqa_app.page.state]
    list(kvqa_app.questions.on_ask(Ask(question), session))
    first = session.turns[-1].sources[0]
    assert first.page == page and holds in first.text
    shown = kvqa_app.evidence.evidence(session, None)
    if name.endswith(".pdf"):  # the page image, the passage highlighted on it (on the scan: OCR's boxes)
        assert shown[kvqa_app.page.evidence_page]["value"] is not None
        assert f"Page {page}, the passage highlighted" in shown[kvqa_app.page.evidence_text]


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_the_api_answers_with_the_source_on_its_page(files, name):
    _, question, page, holds = DOCUMENTS[name]
    kvqa_app = new_app()
    session = kvqa_app.api.api_prefill(file=as_upload(files / name), progress=quiet)[kvqa_app.page.state]
    list(kvqa_app.api.api_ask(question, session=session))
    first = kvqa_app.api.api_sources(session)[0]
    assert first["page"] == page and holds in first["text"]


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_kvqa_ask_answers_with_the_source_on_its_page(files, name, capsys, monkeypatch):
    import kvqa.engines
    from kvqa.cli import main

    _, question, page, holds = DOCUMENTS[name]
    monkeypatch.setattr(kvqa.engines, "make_engine", lambda *a, **k: FakeEngine())
    assert main(["ask", str(files / name), "--no-store", "--json", "-q", question]) == 0
    (answer,) = json.loads(capsys.readouterr().out)["answers"]
    assert answer["sources"][0]["page"] == page and holds in answer["sources"][0]["text"]
