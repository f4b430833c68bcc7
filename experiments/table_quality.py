"""How often a question about one cell of a table finds the cell's row first.

Documents are built from public tables (Open Data Commons PDDL CSVs of the "datasets" GitHub organisation: country
codes, population, GDP) with paragraphs of prose around each (XQuAD's English and Chinese contexts, CC BY-SA 4.0), in
two readings: (a) a PDF with ruled tables (fpdf2), read as kvqa reads a PDF with tables (pypdf's text, and
kvqa.documents.tables.pdf_tables' text for the pages with a table), and (b) Markdown text (as .docx and .html give).
Each cell
(but the row's key) gets a question templated from its row's key and its column ("What is the capital of France?");
it counts as found when the question's best passage (kvqa.evidence.evidence.Evidence.of: what the engine quotes first,
and the answer's first source when the answer's words do not reorder them) holds the cell's row whole. For
comparison, the PDF as pypdf alone reads it (today's reading, no rows to hold): how often the best passage holds the
row's key and the cell's value. No model runs.

    .venv/bin/python experiments/table_quality.py               # per-document and total figures
    .venv/bin/python experiments/table_quality.py --json
    .venv/bin/python experiments/table_quality.py --speed       # pdfplumber's seconds per page

The data: `fetch` github:datasets/country-codes, github:datasets/population, github:datasets/gdp and
github:google-deepmind/xquad (or `git clone` them) into --mirror, as <owner>+<name>/repo git folders.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kvqa.documents.reading import PAGE_BREAK, Document, document_from_text
from kvqa.documents.tables import markdown_table, pdf_tables
from kvqa.evidence.evidence import Evidence

CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")  # fonts-wqy-microhei


@dataclass(frozen=True)
class Table:
    """A table of a document: header first, column 0 the row's key; how questions name each column."""

    caption: str
    rows: list[list[str]]
    templates: tuple[str, ...]  # {key}, {column}: asked in turn
    names: tuple[str, ...] = ()  # how a question names each column (default: the header, lower-cased)

    def questions(self) -> list[tuple[str, int, int]]:
        """(question, row, column) for every cell but the keys, the templates taken in turn."""
        header, asked = self.rows[0], []
        names = self.names or tuple(h.lower() for h in header)
        for i, row in enumerate(self.rows[1:], start=1):
            for j in range(1, len(header)):
                if row[j].strip():
                    template = self.templates[(i + j) % len(self.templates)]
                    asked.append((template.format(key=row[0], column=names[j]), i, j))
        return asked


@dataclass(frozen=True)
class Built:
    """A document to ask about: its name, language, and its prose paragraphs and tables in order."""

    name: str
    lang: str
    parts: list[str | Table]


# ---- the data ---------------------------------------------------------------------------------------------------

def repo_file(mirror: Path, repo: str, path: str) -> str:
    """A file of a fetched repository (a bare git folder <owner>+<name>/repo, or a clone <name>/)."""
    clone = mirror / repo.split("/")[1] / path
    if clone.exists():
        return clone.read_text(encoding="utf-8")
    git_dir = mirror / repo.replace("/", "+") / "repo"
    if not git_dir.exists():
        sys.exit(f"table_quality: {repo} is not in {mirror}: fetch it (github:{repo}) or git clone it there")
    return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"HEAD:{path}"], capture_output=True, text=True,
                          check=True).stdout


def csv_rows(mirror: Path, repo: str, path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(repo_file(mirror, repo, path))))


@lru_cache(maxsize=4)
def _xquad(mirror: Path, lang: str) -> list[dict]:
    return json.loads(repo_file(mirror, "google-deepmind/xquad", f"xquad.{lang}.json"))["data"]


def prose(mirror: Path, lang: str, title: str, count: int) -> list[str]:
    """The first `count` contexts of an XQuAD article."""
    data = _xquad(mirror, lang)
    article = next(a for a in data if a["title"] == title)
    return [p["context"].strip() for p in article["paragraphs"][:count]]


def documents(mirror: Path) -> list[Built]:
    """Five documents: European codes and populations, Caribbean codes and the largest economies' GDP, Asian
    capitals (40 rows), East Asian codes in Chinese, and African codes and populations (built after the way passages
    cut tables was chosen on the first four: held out)."""
    codes = csv_rows(mirror, "datasets/country-codes", "data/country-codes.csv")
    population = csv_rows(mirror, "datasets/population", "data/population.csv")
    gdp = csv_rows(mirror, "datasets/gdp", "data/top-economies.csv")

    def region(*subregions: str, key: str = "Sub-region Name") -> list[dict[str, str]]:
        return [r for r in codes if r[key] in subregions]

    europe = region("Western Europe", "Northern Europe")
    codes_table = Table("Table 1. Codes of the countries and territories of Western and Northern Europe.",
                        [["Country", "Capital", "ISO code", "Dialling code", "Currency", "Internet domain"]]
                        + [[r["CLDR display name"], r["Capital"], r["ISO3166-1-Alpha-3"], r["Dial"],
                            r["ISO4217-currency_name"], r["TLD"]] for r in europe],
                        ("What is the {column} of {key}?", "What is {key}'s {column}?"))
    years = ["1970", "1990", "2010", "2020"]
    iso = {r["ISO3166-1-Alpha-3"] for r in europe if r["is_independent"] == "Yes"}
    people = {(r["Country Name"], r["Year"]): r["Value"] for r in population if r["Country Code"] in iso}
    names = sorted({name for name, _ in people})
    population_table = Table("Table 2. Population of the independent countries of Western and Northern Europe.",
                             [["Country", *years]] + [[n, *(f"{int(people[n, y]):,}" for y in years)] for n in names],
                             ("What was the population of {key} in {column}?",
                              "How many people lived in {key} in {column}?"), names=("country", *years))
    gdp_years = ["2000", "2005", "2010", "2015", "2020", "2022"]
    trillions = {(r["country"], r["year"]): float(r["gdp_trillion"]) for r in gdp}
    countries = sorted({c for c, _ in trillions}, key=lambda c: -trillions[c, "2022"])
    gdp_table = Table("Table 4. Gross domestic product of the ten largest economies, in trillions of US dollars.",
                      [["Economy", *gdp_years]] + [[c, *(f"{trillions[c, y]:.3f}" for y in gdp_years)]
                                                    for c in countries],
                      ("What was the GDP of {key} in {column}?",
                       "What was {key}'s gross domestic product in {column}?"),
                      names=("economy", *gdp_years))
    caribbean = region("Caribbean", key="Intermediate Region Name")
    caribbean_table = Table("Table 3. The Caribbean's countries and territories: capitals, dialling codes, "
                            "currencies.",
                            [["Country or territory", "Capital", "Dialling code", "Currency", "ISO code"]]
                            + [[r["CLDR display name"], r["Capital"], r["Dial"], r["ISO4217-currency_name"],
                                r["ISO3166-1-Alpha-3"]] for r in caribbean],
                            ("What is the {column} of {key}?", "What is {key}'s {column}?"))
    asia = sorted(region("Eastern Asia", "South-eastern Asia", "Southern Asia", "Western Asia", "Central Asia"),
                  key=lambda r: r["CLDR display name"])[:40]
    asia_table = Table("Table 5. Capitals and currencies of Asian countries and territories.",
                       [["Country", "Capital", "Currency"]]
                       + [[r["CLDR display name"], r["Capital"], r["ISO4217-currency_name"]] for r in asia],
                       ("What is the {column} of {key}?", "Which {column} does {key} have?"))
    east = [r for r in region("Eastern Asia", "South-eastern Asia") if r["UNTERM Chinese Short"].strip()]
    chinese_table = Table("表1 东亚和东南亚国家的代码",
                          [["国家", "三字母代码", "电话区号", "货币代码", "互联网域名"]]
                          + [[r["UNTERM Chinese Short"], r["ISO3166-1-Alpha-3"], r["Dial"],
                              r["ISO4217-currency_alphabetic_code"], r["TLD"]] for r in east],
                          ("{key}的{column}是什么？", "{key}的{column}是多少？"))
    africa = region("Eastern Africa", key="Intermediate Region Name")
    africa_table = Table("Table 6. Eastern Africa's countries and territories.",
                         [["Country or territory", "Capital", "Currency", "Language codes", "Geonames ID"]]
                         + [[r["CLDR display name"], r["Capital"], r["ISO4217-currency_name"], r["Languages"],
                             r["Geoname ID"]] for r in africa],
                         ("What is the {column} of {key}?", "What is {key}'s {column}?"))
    west = {r["ISO3166-1-Alpha-3"] for r in region("Western Africa", key="Intermediate Region Name")}
    people = {(r["Country Name"], r["Year"]): r["Value"] for r in population if r["Country Code"] in west}
    names = sorted({name for name, _ in people})
    west_table = Table("Table 7. Population of the countries of Western Africa.",
                       [["Country", "2000", "2010", "2020"]]
                       + [[n, *(f"{int(people[n, y]):,}" for y in ("2000", "2010", "2020"))] for n in names],
                       ("What was the population of {key} in {column}?", "How many people lived in {key} in {column}?"),
                       names=("country", "2000", "2010", "2020"))
    kenya = prose(mirror, "en", "Kenya", 5)
    law, oil = prose(mirror, "en", "European_Union_law", 5), prose(mirror, "en", "1973_oil_crisis", 5)
    yuan, yuan_zh = prose(mirror, "en", "Yuan_dynasty", 4), prose(mirror, "zh", "Yuan_dynasty", 4)
    return [Built("europe", "en", [*law[:2], codes_table, law[2], population_table, *law[3:]]),
            Built("economies", "en", [*oil[:2], caribbean_table, oil[2], gdp_table, *oil[3:]]),
            Built("asia", "en", [*yuan[:2], asia_table, *yuan[2:]]),
            Built("zh", "zh", [*yuan_zh[:2], chinese_table, *yuan_zh[2:]]),
            Built("africa", "en", [*kenya[:2], africa_table, kenya[2], west_table, *kenya[3:]])]


# ---- the two readings -------------------------------------------------------------------------------------------

def markdown_text(built: Built) -> str:
    """The document as .docx and .html read: paragraphs, each table's caption and the table in Markdown."""
    return "\n\n".join(p if isinstance(p, str) else f"{p.caption}\n\n{markdown_table(p.rows)}" for p in built.parts)


def pdf_bytes(built: Built) -> bytes:
    """The document as a PDF: paragraphs, each table's caption and the table ruled (fpdf2's table, its header
    repeated on each page it runs onto)."""
    from fpdf import FPDF

    pdf = FPDF()
    if built.lang == "zh":
        pdf.add_font("cjk", "", str(CJK_FONT))
        pdf.add_font("cjk", "B", str(CJK_FONT))  # the table's header row is bold
        font = "cjk"
    else:
        font = "helvetica"
    pdf.add_page()
    for part in built.parts:
        pdf.set_font(font, size=11)
        if isinstance(part, str):
            text = part if built.lang == "zh" else part.encode("latin-1", "replace").decode("latin-1")
            pdf.multi_cell(0, 6, text)
            pdf.ln(4)
            continue
        pdf.multi_cell(0, 6, part.caption)
        pdf.ln(2)
        pdf.set_font(font, size=9)
        with pdf.table(first_row_as_headings=True) as table:
            for row in part.rows:
                cells = table.row()
                for value in row:
                    cells.cell(value)
        pdf.ln(4)
    return bytes(pdf.output())


def pdf_document(data: bytes, *, tables: bool) -> tuple[Document, float]:
    """The PDF as kvqa reads it (kvqa.documents.reading): pypdf's text of each page, or with tables=True pdf_tables'
    text
    for the pages that hold a table; and the seconds pdf_tables took. Pages joined as kvqa joins them."""
    import pypdf

    texts = [(page.extract_text() or "").replace("\r\n", "\n") for page in pypdf.PdfReader(io.BytesIO(data)).pages]
    started = time.perf_counter()
    found = pdf_tables(data, max_seconds=60) if tables else {}
    seconds = time.perf_counter() - started
    texts = [found.get(n, t) for n, t in enumerate(texts, start=1)]
    text = "".join((PAGE_BREAK.format(n=n) if n > 1 else "") + t.strip("\n") for n, t in enumerate(texts, start=1))
    return Document(name="table_quality.pdf", text=text, pages=len(texts)), seconds


# ---- asking -----------------------------------------------------------------------------------------------------

def row_offsets(text: str, rows: list[list[str]]) -> dict[int, int]:
    """{row number: where its Markdown line lies in the text} for the rows read whole (the header's line is 0)."""
    found = {}
    for i, row in enumerate(rows):
        line = markdown_table([row]).split("\n")[0]
        m = re.search(rf"^{re.escape(line)}$", text, re.MULTILINE)
        if m:
            found[i] = m.start()
    return found


def ask_all(built: Built, document: Document, *, rows_read: bool) -> dict:
    """Each table question asked on the document: found when the best passage holds the cell's row (rows_read), or,
    for a reading without rows (pypdf's), the row's key and the cell's value."""
    text, asked, found, rows_whole, rows_total, missed = document.text, 0, 0, 0, 0, []
    for table in (p for p in built.parts if isinstance(p, Table)):
        where = row_offsets(text, table.rows) if rows_read else {}
        rows_total += len(table.rows) - 1
        rows_whole += len([i for i in where if i > 0])
        for question, i, j in table.questions():
            best = Evidence.of(document, question).ranking.best(1)
            start, end = best[0][:2] if best else (0, 0)
            row = table.rows[i]
            if rows_read:
                hit = i in where and start <= where[i] and where[i] + len(markdown_table([row]).split("\n")[0]) <= end
            else:
                passage = re.sub(r"\s+", " ", text[start:end])
                hit = row[0] in passage and row[j] in passage
            asked, found = asked + 1, found + hit
            if not hit and len(missed) < 5:
                missed.append({"question": question, "row": " | ".join(row), "passage": text[start:end][:200]})
    return {"questions": asked, "found": found, "share": found / asked if asked else 0.0,
            "rows_whole": rows_whole, "rows": rows_total, "missed": missed}


def measure(mirror: Path) -> dict:
    """Per document and in total: the share found in the Markdown reading, the PDF read with tables, and the PDF as
    pypdf alone reads it; the seconds pdf_tables took per page."""
    results, seconds, pages = {}, 0.0, 0
    for built in documents(mirror):
        if built.lang == "zh" and not CJK_FONT.exists():
            print(f"table_quality: {built.name} left out: a CJK PDF needs {CJK_FONT} (fonts-wqy-microhei)",
                  file=sys.stderr)
            continue
        data = pdf_bytes(built)
        with_tables, took = pdf_document(data, tables=True)
        plain, _ = pdf_document(data, tables=False)
        seconds, pages = seconds + took, pages + (plain.pages or 0)
        results[built.name] = {
            "markdown": ask_all(built, document_from_text(markdown_text(built), name=built.name), rows_read=True),
            "pdf": ask_all(built, with_tables, rows_read=True),
            "pdf_pypdf_only": ask_all(built, plain, rows_read=False),
            "pages": plain.pages}
    total = {}
    for reading in ("markdown", "pdf", "pdf_pypdf_only"):
        asked = sum(r[reading]["questions"] for r in results.values())
        found = sum(r[reading]["found"] for r in results.values())
        total[reading] = {"questions": asked, "found": found, "share": found / asked if asked else 0.0}
    return {"documents": results, "total": total, "pdf_tables_seconds_per_page": seconds / pages if pages else 0.0}


def speed(mirror: Path, pages: int = 20) -> dict:
    """Seconds per page (median of 3 reads): pdfplumber's find_tables on pages of prose (the page parsed first, as it
    must be), pdf_tables on the same pages (which skips pages that draw nothing), on the pages of a document with
    tables, and pypdf's text of the prose pages."""
    import pdfplumber
    import pypdf
    from fpdf import FPDF

    paragraphs = [p.encode("latin-1", "replace").decode("latin-1")
                  for title in ("European_Union_law", "1973_oil_crisis", "Yuan_dynasty", "Kenya", "Rhine")
                  for p in prose(mirror, "en", title, 12)]
    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    for n in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 6, "\n\n".join(paragraphs[(3 * n + k) % len(paragraphs)] for k in range(3)))
    prose_pdf = bytes(pdf.output())
    table_pdf = pdf_bytes(documents(mirror)[0])

    def find_tables(data: bytes) -> None:
        with pdfplumber.open(io.BytesIO(data)) as opened:
            for page in opened.pages:
                page.find_tables()

    def pypdf_text(data: bytes) -> None:
        for page in pypdf.PdfReader(io.BytesIO(data)).pages:
            page.extract_text()

    def per_page(data: bytes, read) -> float:
        count, times = len(pypdf.PdfReader(io.BytesIO(data)).pages), []
        for _ in range(3):
            started = time.perf_counter()
            read(data)
            times.append((time.perf_counter() - started) / count)
        return statistics.median(times)

    return {"find_tables_prose_page_s": per_page(prose_pdf, find_tables),
            "pdf_tables_prose_page_s": per_page(prose_pdf, lambda d: pdf_tables(d, max_seconds=600)),
            "pdf_tables_table_document_page_s": per_page(table_pdf, lambda d: pdf_tables(d, max_seconds=600)),
            "pypdf_prose_page_s": per_page(prose_pdf, pypdf_text), "prose_pages": pages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, default=Path("/work/.mirror"),
                        help="where the data's repositories were fetched")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--speed", action="store_true", help="measure pdfplumber's seconds per page instead")
    args = parser.parse_args()
    if args.speed:
        figures = speed(args.mirror)
        print(json.dumps(figures, indent=2) if args.json else
              "\n".join(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}" for k, v in figures.items()))
        return
    figures = measure(args.mirror)
    if args.json:
        print(json.dumps(figures, indent=2, ensure_ascii=False))
        return
    print(f"{'document':<12} {'pages':>5} {'Markdown':>16} {'PDF (tables)':>16} {'PDF (pypdf only)':>18}  "
          "PDF rows read whole")
    for name, r in figures["documents"].items():
        cells = [f"{r[k]['found']}/{r[k]['questions']} {100 * r[k]['share']:5.1f}%"
                 for k in ("markdown", "pdf", "pdf_pypdf_only")]
        print(f"{name:<12} {r['pages']:>5} {cells[0]:>16} {cells[1]:>16} {cells[2]:>18}  "
              f"{r['pdf']['rows_whole']}/{r['pdf']['rows']}")
    t = figures["total"]
    totals = [f"{t[k]['found']}/{t[k]['questions']} {100 * t[k]['share']:5.1f}%".rjust(w)
              for k, w in (("markdown", 16), ("pdf", 16), ("pdf_pypdf_only", 18))]
    print(f"{'total':<12} {'':>5} " + " ".join(totals))
    print(f"pdf_tables: {figures['pdf_tables_seconds_per_page']:.3f} s per page (these documents' pages)")


if __name__ == "__main__":
    main()
