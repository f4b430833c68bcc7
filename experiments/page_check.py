"""Is the page the viewer shows for a question's first source the page that holds the passage? A PDF is made from a
public set in SQuAD's layout (each paragraph on its own page or pages), read as kvqa reads any PDF, and for every
question the first source (ranked by the question, as under each answer) is rendered on its page: it counts when the
passage is found on that page and highlighted there, and nowhere else is a better match. Needs a font with the set's
characters (a CJK one for Chinese).

    .venv/bin/python experiments/page_check.py --squad 200423_covidQA.json --articles 3
    .venv/bin/python experiments/page_check.py --squad cmrc2018_trial.json --articles 40
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import kvqa
from kvqa.documents.pages import render_page
from kvqa.evidence.sources import rank

FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")  # Latin and CJK glyphs (fonts-wqy-microhei)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--squad", type=Path, required=True)
    parser.add_argument("--articles", type=int, default=3, help="how many articles go into the PDF")
    parser.add_argument("--font", type=Path, default=FONT)
    args = parser.parse_args(argv)
    from fpdf import FPDF

    data = json.loads(args.squad.read_text(encoding="utf-8"))["data"][: args.articles]
    pdf = FPDF()
    pdf.add_font("body", "", str(args.font))
    pdf.set_font("body", size=10)
    questions = []
    for article in data:
        for para in article["paragraphs"]:
            pdf.add_page()
            pdf.multi_cell(0, 5, para["context"].strip())
            questions += [qa["question"].strip() for qa in para["qas"] if qa["question"].strip()]
    raw = bytes(pdf.output())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "set.pdf"
        path.write_bytes(raw)
        document = kvqa.load_document(path, config=kvqa.Config.of(max_pdf_pages=10_000))
    shown = found = 0
    for question in questions:
        sources = rank(document.text, question).sources("", pages=True)
        if not sources:
            continue
        source = sources[0]
        shown += 1
        found += render_page(raw, source.page, source.text, source.marked).highlighted > 0
    print(f"{args.squad.name}: a PDF of {document.pages} pages; {shown} questions with a first source; "
          f"highlighted on its page for {found} ({found / max(shown, 1):.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
