"""How long the evidence viewer takes to show a source on its page: a 36-page PDF (the sample's paragraphs, wrapped
over the pages), each page rendered with its first passage highlighted. Prints the median and the slowest.

    .venv/bin/python experiments/page_speed.py
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import kvqa
from kvqa.documents.pages import render_page
from kvqa.evidence.sources import passages

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def main() -> int:
    from fpdf import FPDF

    paragraphs = [p.replace("—", "-").encode("latin-1", "replace").decode("latin-1")
                  for p in (ASSETS / "declaration-of-independence.md").read_text().split("\n\n")
                  if p.strip() and not p.startswith("#")]
    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    for n in range(36):
        pdf.add_page()
        pdf.multi_cell(0, 6, "\n\n".join(paragraphs[(3 * n + i) % len(paragraphs)] for i in range(3)))
    data = bytes(pdf.output())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "long.pdf"
        path.write_bytes(data)
        document = kvqa.load_document(path)
    seconds, found = [], 0
    for page in range(1, 37):
        start = document.page_starts[page - 1]
        end = document.page_starts[page] if page < 36 else len(document.text)
        a, b = next((a, b) for a, b in passages(document.text) if start <= a < end)
        shown = render_page(data, page, document.text[a:b])
        seconds.append(shown.seconds)
        found += shown.highlighted > 0
    print(f"36-page PDF ({len(data) / 1024:.0f} KiB): a page with its passage highlighted in "
          f"{statistics.median(seconds):.3f} s (median), {max(seconds):.3f} s (slowest); "
          f"the passage was found on {found} of 36 pages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
