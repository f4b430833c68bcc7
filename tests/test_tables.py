"""Tables kept: a PDF's ruled table read as a Markdown table in its place, one line per row; passages that
never cut a row and hold one row each, found by its table's header words; the evidence viewer showing a table as a
table, its cells escaped."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

import kvqa.documents.tables as tables
from kvqa.documents.pages import text_context
from kvqa.documents.tables import markdown_table, pdf_tables
from kvqa.evidence.sources import passages, rank
from ranked import find_sources, quotes

ORCHARD = [["Fruit", "Trees", "Grower"], ["Apple", "120", "Acme Inc. Farms"], ["Pear", "40", "Pryce & Sons"],
           ["Plum", "12", "Hollow Ltd."]]


def pdf_of(pages: list[list[str | list[list[str]]]]) -> bytes:
    """A PDF with a page per list: its paragraphs, and its tables (lists of rows) drawn ruled by fpdf2."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    for parts in pages:
        pdf.add_page()
        for part in parts:
            if isinstance(part, str):
                pdf.multi_cell(0, 6, part)
            else:
                with pdf.table() as table:
                    for row in part:
                        cells = table.row()
                        for value in row:
                            cells.cell(value)
            pdf.ln(4)
    return bytes(pdf.output())


# --- reading a PDF's tables ---

def test_a_pdf_table_is_read_as_a_markdown_table_in_its_place_and_a_page_without_one_is_absent():
    data = pdf_of([["The orchard was planted in 1950 by the Pryce family.", ORCHARD, "Harvest starts in September."],
                   ["This page has no table. It has two sentences."]])
    found = pdf_tables(data, max_seconds=30)
    assert list(found) == [1]
    assert found[1] == ("The orchard was planted in 1950 by the Pryce family.\n\n"
                        "| Fruit | Trees | Grower |\n| --- | --- | --- |\n| Apple | 120 | Acme Inc. Farms |\n"
                        "| Pear | 40 | Pryce & Sons |\n| Plum | 12 | Hollow Ltd. |\n\n"
                        "Harvest starts in September.")


def test_a_table_of_one_row_or_one_column_is_no_table():
    data = pdf_of([["Above.", [["Only", "one", "row"]], "Below."], ["Above.", [["One"], ["column"], ["only"]]]])
    assert pdf_tables(data, max_seconds=30) == {}


def test_a_damaged_pdf_or_no_time_left_gives_what_was_found_so_far(monkeypatch):
    assert pdf_tables(b"%PDF-1.4 not really a pdf", max_seconds=30) == {}
    data = pdf_of([["Page one.", ORCHARD], ["Page two.", ORCHARD]])
    clock = itertools.count(step=10)  # each look at the clock is 10 s later
    monkeypatch.setattr(tables, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    assert list(pdf_tables(data, max_seconds=15)) == [1]


def test_a_page_drawing_too_much_is_not_searched(monkeypatch):
    data = pdf_of([["A table of four rows.", ORCHARD]])
    monkeypatch.setattr(tables, "MAX_PATHS", 3)  # fpdf2 draws the table with more: as a map or a chart would be
    assert pdf_tables(data, max_seconds=30) == {}


def test_markdown_table_escapes_bars_and_newlines_and_writes_none_as_empty():
    assert markdown_table([["Name", "Note"], ["a|b", "two\nlines"], [None, "x"], [None, None]]) == (
        "| Name | Note |\n| --- | --- |\n| a\\|b | two lines |\n|  | x |")
    assert tables.cells("| a\\|b | two lines |") == ["a|b", "two lines"]
    wrapped = markdown_table([["国家", "代码"], ["朝鲜民主主义\n人民共和国", "PRK"]])
    assert wrapped.endswith("| 朝鲜民主主义人民共和国 | PRK |")  # a CJK cell wrapped: no space where it wrapped


# --- passages ---

TEXT = ("The orchard keeps its records in a table. Acme Inc. buys most apples.\n\n" + markdown_table(ORCHARD)
        + "\n\nHarvest starts in September.")


def test_a_row_is_never_cut_and_each_row_is_a_passage_of_its_own():
    spans = [TEXT[a:b].strip() for a, b in passages(TEXT)]
    assert spans[1:4] == ["| Fruit | Trees | Grower |\n| --- | --- | --- |\n| Apple | 120 | Acme Inc. Farms |",
                          "| Pear | 40 | Pryce & Sons |", "| Plum | 12 | Hollow Ltd. |"]  # the header: with row 1
    assert "The orchard keeps its records in a table. Acme Inc. buys most apples." in spans  # prose cut as before
    long_row = "| " + " | ".join(["Acme Inc. holds 3.5 acres. It sells plums."] * 12) + " |"
    text = "Prose. " * 60 + "\n\n| A | B |\n| --- | --- |\n| a | b |\n" + long_row + "\n"
    assert long_row in [text[a:b].strip() for a, b in passages(text)]  # longer than a passage, still whole


def test_a_line_of_bars_outside_a_table_is_not_cut_either():
    text = "Intro text. " * 40 + "\n| Acme Inc. | 3.5 |\n" + "More text. " * 40
    row = text.index("| Acme"), text.index(" |\n") + 2
    assert not [cut for span in passages(text) for cut in span if row[0] < cut < row[1]]


def test_a_question_naming_a_column_finds_the_row_of_the_right_table_and_quotes_its_header():
    codes = markdown_table([["Country", "Capital", "Dialling code"], ["France", "Paris", "33"],
                            ["Spain", "Madrid", "34"]])
    people = markdown_table([["Country", "Population 1990", "Population 2020"],
                             ["France", "58,000,000", "67,000,000"], ["Spain", "39,000,000", "47,000,000"]])
    text = f"Codes.\n\n{codes}\n\nPeople, by year.\n\n{people}\n\nFrance and Spain border each other."
    (start, end, _), = rank(text, "What was the population of Spain in 1990?").best(1)
    assert text[start:end] == "| Spain | 39,000,000 | 47,000,000 |"
    (start, end, _), = rank(text, "What was the population of France in 2020?").best(1)
    assert text[start:end].endswith("| France | 58,000,000 | 67,000,000 |") and "Paris" not in text[start:end]
    (start, end, _), = rank(text, "What is the dialling code of Spain?").best(1)
    assert text[start:end] == "| Spain | Madrid | 34 |"
    assert quotes(text, "What is the dialling code of Spain?", 1) == [
        "| Country | Capital | Dialling code |\n| --- | --- | --- |\n| Spain | Madrid | 34 |"]
    source = find_sources(text, "34", "What is the dialling code of Spain?")[0]
    assert source.text == "| Spain | Madrid | 34 |" and source.marked == source.text  # the row, marked whole


# --- the evidence viewer ---

def test_text_context_shows_a_table_passage_as_a_table_with_its_cells_escaped():
    rows = [["Name", "Script"], ["Safe", "none"], ["Evil", "<script>alert(1)</script>"], ["Last", "ok"]]
    text = "Intro <b>text</b>.\n\n" + markdown_table(rows) + "\n\nOutro."
    start = text.index("| Evil")
    end = text.index("\n", start)
    shown = text_context(text, start, end, (start, end))
    assert "<table class='kvqa-table'>" in shown and "<th>Name</th><th>Script</th>" in shown
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown and "<script>" not in shown
    assert ("<tr class='kvqa-passage'><td><mark class='kvqa-passage'><mark class='kvqa-sentence'>Evil</mark></mark>"
            in shown)
    assert "<tr><td>Safe</td><td>none</td></tr>" in shown and "---" not in shown
    assert "Intro &lt;b&gt;text&lt;/b&gt;." in shown and "Outro." in shown


def test_text_context_of_ordinary_text_is_as_it_was():
    text = "Intro <b>bold</b>. " * 3 + "The ferry leaves at nine. Tickets cost ten euros. " + "Outro. " * 3
    start, end = text.index("The ferry"), text.index("Outro")
    mark = (text.index("Tickets"), text.index("Tickets") + len("Tickets cost ten euros."))
    assert text_context(text, start, end, mark, around=20) == (
        "<div class='kvqa-context'>… Intro &lt;b&gt;bold&lt;/b&gt;. <mark class='kvqa-passage'>The ferry leaves at "
        "nine. <mark class='kvqa-sentence'>Tickets cost ten euros.</mark> </mark>Outro. Outro. …</div>")  # as before


@pytest.mark.parametrize("around", [10, 600])
def test_a_table_far_from_the_passage_keeps_its_header_and_rows_inside_the_window(around):
    rows = [["Key", "Value"]] + [[f"k{i}", f"v{i}"] for i in range(60)]
    text = "Intro.\n\n" + markdown_table(rows)
    start = text.index("| k50 |")
    end = text.index("\n", start)
    shown = text_context(text, start, end, around=around)
    assert shown.count("<table") == 1 and "<th>Key</th>" in shown and "k50" in shown
    assert "<td>k0</td>" not in shown  # the first rows lie outside the window
