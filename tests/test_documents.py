"""Loading documents: every supported format reads, every unusable input raises a DocumentError that says what to do."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfWriter

import kvqa
from conftest import make_pdf  # noqa: F401 (test_bad_inputs imports it from here too)
from kvqa.documents.reading import decode_text


def write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_pdf_round_trips_with_visible_page_breaks(tmp_path):
    path = write(tmp_path, "two.pdf", make_pdf(["The first page says hello.", "The second page says goodbye."]))
    doc = kvqa.load_document(path)
    assert doc.pages == 2
    assert "The first page says hello." in doc.text and "The second page says goodbye." in doc.text
    assert doc.text.index("hello") < doc.text.index("[Page 2]") < doc.text.index("goodbye")


@pytest.mark.parametrize("name", ["notes.txt", "notes.md", "NOTES.MD"])
def test_text_files(tmp_path, name):
    assert kvqa.load_document(write(tmp_path, name, b"# Title\n\nSome text.\n")).text == "# Title\n\nSome text.\n"


@pytest.mark.parametrize("encoding,bom", [("utf-8", b""), ("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"),
                                          ("utf-16-be", b"\xfe\xff"), ("utf-16-le", b""), ("utf-16-be", b"")])
def test_unicode_encodings(tmp_path, encoding, bom):
    text = "长文本只读一次。Ünïcödé and emoji 🦜.\n"
    assert kvqa.load_document(write(tmp_path, "u.txt", bom + text.encode(encoding))).text == text


def test_latin1_falls_back_instead_of_crashing(tmp_path):
    assert kvqa.load_document(write(tmp_path, "l.txt", "Café crème à la française".encode("latin-1"))).text == \
        "Café crème à la française"


def test_windows_line_endings_are_unified():
    assert decode_text(b"a\r\nb\rc") == "a\r\nb\rc"
    assert kvqa.document_from_text("a\r\nb\rc").text == "a\nb\nc"


def encrypted_pdf() -> bytes:
    writer = PdfWriter(clone_from=io.BytesIO(make_pdf(["Secret text."])))
    writer.encrypt(user_password="hunter2", owner_password="owner")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


BAD = [
    ("empty.txt", b"", "empty"),
    ("blank.txt", b"  \n\t\n  ", "whitespace"),
    ("blank.md", b"\n\n", "whitespace"),
    ("binary.txt", bytes(range(256)) * 20, "binary"),
    ("image.pdf", None, "OCR found no text"),
    ("encrypted.pdf", None, "password"),
    ("truncated.pdf", None, "damaged"),
    ("garbage.pdf", b"%PDF-1.7\n" + b"\x00\xff" * 500, "damaged"),
    ("actually-text.pdf", b"Just some text, not a PDF.", "not a PDF"),
    ("report.docx", b"PK\x03\x04...", "damaged"),
    ("sheet.xlsx", b"PK\x03\x04...", "cannot read '.xlsx'"),
    ("README", b"text", "without an extension"),
]


@pytest.mark.parametrize("name,data,message", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs_raise_document_errors_that_say_what_to_do(tmp_path, name, data, message):
    if name == "image.pdf":
        data = make_pdf([""])
    elif name == "encrypted.pdf":
        data = encrypted_pdf()
    elif name == "truncated.pdf":
        data = make_pdf(["Some text on a page."])[:300]
    with pytest.raises(kvqa.DocumentError, match=message) as info:
        kvqa.load_document(write(tmp_path, name, data))
    assert name in str(info.value) or "empty" in str(info.value)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(kvqa.DocumentError, match="No such file"):
        kvqa.load_document(tmp_path / "missing.txt")
    (tmp_path / "dir.txt").mkdir()
    with pytest.raises(kvqa.DocumentError, match="folder"):
        kvqa.load_document(tmp_path / "dir.txt")


def test_file_over_the_size_limit(tmp_path):
    with pytest.raises(kvqa.DocumentError, match="limit"):
        kvqa.load_document(write(tmp_path, "big.txt", b"word " * 1000), config=kvqa.Config.of(max_file_mb=0.001))


def test_pdf_page_and_time_limits(tmp_path):
    path = write(tmp_path, "three.pdf", make_pdf(["one", "two", "three"]))
    with pytest.raises(kvqa.DocumentError, match="3 pages; the limit is 2"):
        kvqa.load_document(path, config=kvqa.Config.of(max_pdf_pages=2))
    with pytest.raises(kvqa.DocumentError, match="took over"):
        kvqa.load_document(path, config=kvqa.Config.of(max_pdf_seconds=1e-9))


def bomb_pdf(expanded_bytes: int) -> bytes:
    """A one-page PDF whose content stream is a few hundred KB compressed and `expanded_bytes` decompressed."""
    import zlib

    stream = zlib.compress(b"0 0 m " * (expanded_bytes // 6), 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_pdf_that_decompresses_to_hundreds_of_megabytes(tmp_path):
    data = bomb_pdf(300 * 2**20)
    assert len(data) < 2 * 2**20
    with pytest.raises(kvqa.DocumentError, match="expands to more data"):
        kvqa.load_document(write(tmp_path, "bomb.pdf", data))


@pytest.mark.parametrize("text", ["", "   ", "\n\t\n"])
def test_empty_pasted_text(text):
    with pytest.raises(kvqa.DocumentError, match="empty"):
        kvqa.document_from_text(text)


def test_document_too_long_for_the_context_gives_both_numbers(tiny_lm):
    text = "word " * 5000
    with pytest.raises(kvqa.DocumentTooLong, match=r"The document is [\d,]+ tokens; .* at most [\d,]+"):
        kvqa.prefill(tiny_lm, kvqa.document_from_text(text))


def test_without_ocr_a_scan_is_refused_with_the_fix_and_doctor_says_so(tmp_path, monkeypatch):
    """OpenCV under RapidOCR needs the system's libGL: where it cannot load, a scan gets a message that says what to
    install, `kvqa doctor` names the problem, and text layers still read."""
    import sys

    from kvqa.documents import ocr

    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)  # import fails, as without libGL
    monkeypatch.setattr(ocr, "_engine", None)
    with pytest.raises(kvqa.DocumentError, match="cannot run OCR.*libgl1"):
        kvqa.load_document(write(tmp_path, "scan.pdf", make_pdf([""])))
    assert "Hello" in kvqa.load_document(write(tmp_path, "typed.pdf", make_pdf(["Hello there."]))).text
    value, problem = ocr.status()  # what `kvqa doctor` shows on its "OCR (scans, images)" line
    assert value == "unavailable" and "libgl1" in problem
