"""Scans and images read by OCR: English and Chinese pages rendered in the test (no downloaded file), each
page keeping its number, progress said per page, a page with nothing on it named, the limits said before OCR starts,
and a source highlighted on its scanned page."""

from __future__ import annotations

import struct
import zlib

import pytest
from PIL import Image

import kvqa
from conftest import CJK_FONT, make_pdf, scan_image, scan_pdf
from kvqa.config import Config
from kvqa.documents import ocr
from kvqa.documents.pages import render_page
from kvqa.documents.reading import load_document
from ranked import find_sources

pytestmark = pytest.mark.model  # OCR loads its ONNX models (a second) and reads a page in seconds: not test-fast

EN = ["The lighthouse keeper recorded 417 ships in 1887.", "Its lamp burned whale oil until the year 1890."]
ZH = ["灯塔看守人在一八八七年记录了四百一十七艘船。", "灯里烧的是鲸油，直到一八九零年才换成煤油。"]


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    """A three-page scan: English, Chinese, and a blank page; read once with its progress recorded."""
    pages = [scan_image(EN), scan_image(ZH, font=CJK_FONT), Image.new("RGB", (1240, 1754), "white")]
    path = tmp_path_factory.mktemp("scan") / "scan.pdf"
    path.write_bytes(scan_pdf(pages))
    said = []
    document = load_document(path, progress=lambda fraction, message: said.append((fraction, message)))
    return path, document, said


def page_text(document, n: int) -> str:
    """Page n's text without whitespace (OCR may drop or add a space between English words: docs/quality.md)."""
    starts = document.page_starts + (len(document.text),)
    return "".join(document.text[starts[n - 1]: starts[n]].split())


def test_a_scanned_pdf_is_read_page_by_page_in_english_and_chinese(scanned):
    _, document, _ = scanned
    assert document.pages == 3 and sorted(document.scans) == [1, 2, 3]
    assert "417shipsin1887" in page_text(document, 1) and "whaleoil" in page_text(document, 1)
    assert "四百一十七艘船" in page_text(document, 2) and "鲸油" in page_text(document, 2)
    assert "417" not in page_text(document, 2) and page_text(document, 2).startswith("[Page2]")


def test_progress_is_said_for_each_scanned_page_and_a_blank_page_is_named(scanned):
    _, document, said = scanned
    assert [m.params["page"] for _, m in said] == [1, 2, 3]
    assert [f for f, _ in said] == sorted(f for f, _ in said) and said[0][0] == 0
    assert "page 1 (1 of 3 scanned pages)" in str(said[0][1])
    (note,) = document.notes
    assert "page(s) 3" in str(note) and "scan.pdf" in str(note)


def test_the_source_of_an_answer_on_a_scan_is_highlighted_on_its_page(scanned):
    path, document, _ = scanned
    source = find_sources(document.text, "", "How many ships did the lighthouse keeper record?", pages=True)[0]
    assert source.page == 1
    shown = render_page(path.read_bytes(), 1, source.text, source.marked, scan=document.scans[1])
    assert shown.highlighted >= 1
    unmarked = render_page(path.read_bytes(), 1, "words that are on no page of this scan", scan=document.scans[1])
    assert unmarked.highlighted == 0
    # the highlight lies on the OCR'd lines: the image differs from the plain page there and nowhere else
    plain = render_page(path.read_bytes(), 1, "", scan=document.scans[1]).image
    changed = [y for x in range(0, shown.image.width, 8) for y in range(0, shown.image.height, 8)
               if shown.image.getpixel((x, y)) != plain.getpixel((x, y))]
    ratio = shown.image.width / document.scans[1].width
    top, bottom = document.scans[1].lines[0].box[1] * ratio, document.scans[1].lines[-1].box[3] * ratio
    assert changed and all(top - 2 <= y <= bottom + 2 for y in changed)


def test_a_pdf_with_text_and_scanned_pages_reads_each_its_own_way(tmp_path, monkeypatch):
    typed = make_pdf(["The typed page names the harbour master, Ada Quill.", ""])  # page 2: a drawing, no text
    path = tmp_path / "mixed.pdf"
    path.write_bytes(typed)
    read = []
    real = ocr.read_image
    monkeypatch.setattr(ocr, "read_image", lambda image: read.append(image.size) or real(image))
    document = load_document(path)
    assert len(read) == 1 and sorted(document.scans) == [2]  # only the page without a text layer went to OCR
    assert "AdaQuill" in page_text(document, 1)
    assert [str(n) for n in document.notes] and "page(s) 2" in str(document.notes[0])


def test_an_image_file_is_a_document_of_one_page(tmp_path):
    for suffix in (".png", ".jpg"):
        path = tmp_path / f"note{suffix}"
        scan_image(EN).save(path)
        document = load_document(path)
        assert document.pages == 1 and "417ships" in page_text(document, 1) and sorted(document.scans) == [1]
    pdf = ocr.image_pdf((tmp_path / "note.png").read_bytes())  # what the evidence viewer shows for it
    assert pdf.startswith(b"%PDF-")


def test_a_scan_too_long_is_refused_before_ocr_starts(tmp_path, monkeypatch):
    path = tmp_path / "long-scan.pdf"
    path.write_bytes(make_pdf([""] * 5))
    monkeypatch.setattr(ocr, "read_image", lambda image: pytest.fail("OCR started"))
    with pytest.raises(kvqa.DocumentError, match="5 scanned pages.*at most 4") as info:
        load_document(path, config=Config.of(max_ocr_pages=4))
    assert "long-scan.pdf" in str(info.value)


def test_a_scan_without_any_text_says_so(tmp_path):
    path = tmp_path / "blank.png"
    Image.new("RGB", (800, 600), "white").save(path)
    with pytest.raises(kvqa.DocumentError, match="OCR found no text in blank.png"):
        load_document(path)


def png_header(width: int, height: int) -> bytes:
    """A PNG that says it is an image of that size, with one row of pixels (a decoder would fail after it)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    row = zlib.compress(b"\x00" * (1 + 3 * width))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", row) + chunk(b"IEND", b"")


def test_a_huge_image_is_refused_from_its_header_and_a_damaged_one_named(tmp_path):
    huge = tmp_path / "poster.png"
    huge.write_bytes(png_header(10_000, 10_000))  # 100 MP: refused before any pixel is decoded
    with pytest.raises(kvqa.DocumentError, match="poster.png is 100 megapixels; kvqa reads images up to 40"):
        load_document(huge)
    broken = tmp_path / "photo.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    with pytest.raises(kvqa.DocumentError, match="photo.jpg is not an image kvqa can open"):
        load_document(broken)
