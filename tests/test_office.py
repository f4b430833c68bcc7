"""Word, PowerPoint, HTML and EPUB files read as Markdown-like pages (kvqa.documents.office), each built here in the
test; every
bad file is refused with a message that names it."""

from __future__ import annotations

import io
import zipfile
from functools import partial

import docx
import pptx
import pytest
from docx.oxml import parse_xml
from docx.oxml.ns import nsdecls, qn
from pptx.util import Inches

from kvqa.documents.office import read_office
from kvqa.errors import DocumentError
from kvqa.messages import render

read = partial(read_office, max_pages=50, max_expanded_bytes=50 * 2**20)


def saved(document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def report_docx() -> bytes:
    """A Word report: a title paragraph, a Heading 1 section with lists and a 4x3 table between paragraphs, and a
    second Heading 1 section."""
    document = docx.Document()
    document.add_paragraph("Quarterly report")
    document.add_heading("Capitals", level=1)
    document.add_paragraph("Before the table.")
    document.add_paragraph("Paris is large", style="List Bullet")
    document.add_paragraph("Rome is old", style="List Bullet")
    document.add_paragraph("Count the people", style="List Number")
    document.add_paragraph("Compare them", style="List Number")
    table = document.add_table(rows=4, cols=3)
    rows = [("Country", "Capital", "Population"), ("France", "Paris", "68,000,000"), ("Italy", "Rome", "59,000,000"),
            ("Spain", "Madrid", "48,000,000")]
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    document.add_paragraph("After the table.")
    document.add_heading("Rivers", level=1)
    document.add_paragraph("The Seine flows through Paris.")
    return saved(document)


def slides(count: int = 3) -> bytes:
    """A deck of `count` slides, each with a title and a body; slide 2 has a table, slide 3 speaker notes."""
    deck = pptx.Presentation()
    for n in range(1, count + 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Slide {n} title"
        slide.placeholders[1].text = f"Fact number {n}: the answer is {n * 7}."
        if n == 2:
            table = slide.shapes.add_table(2, 2, Inches(1), Inches(5), Inches(4), Inches(1)).table
            for (r, c), text in zip([(0, 0), (0, 1), (1, 0), (1, 1)], ["Metric", "Value", "Revenue", "12 M"]):
                table.cell(r, c).text = text
        if n == 3:
            slide.notes_slide.notes_text_frame.text = "Remember the purple elephant."
    return saved(deck)


HTML = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Travel notes</title>
<style>body { font-family: zebrafont; }</style>
<script>var secret = "<p>xylophonequartz</p>"; document.write(secret);</script></head>
<body><noscript>Please enable nebulatron.</noscript>
<h1>Europe</h1><p>Paris is the capital of <b>France</b>.<br>It is on the Seine.</p>
<ol><li>Louvre</li><li>Orsay</li></ol>
<table><tr><th>City</th><th>Sights</th></tr><tr><td>Paris</td><td>Louvre | Orsay</td></tr>
<tr><td>Rome</td><td>Colosseum<br>Forum</td></tr></table>
<h1>Asia</h1><p>Tokyo is the capital of Japan.</p><template>hiddenword</template>
</body></html>"""

CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""

OPF = """<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Two chapters</dc:title></metadata>
<manifest><item id="c1" href="text/one.xhtml" media-type="application/xhtml+xml"/>
<item id="c2" href="text/two.xhtml" media-type="application/xhtml+xml"/>
<item id="css" href="style.css" media-type="text/css"/></manifest>
<spine><itemref idref="c1"/><itemref idref="c2"/></spine></package>"""

CHAPTER = """<?xml version="1.0" encoding="UTF-8"?>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Book</title></head>
<body><h1>{title}</h1><p>{text}</p></body></html>"""


def epub(chapters: dict[str, str], *, opf: str = OPF) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", CONTAINER)
        z.writestr("OEBPS/content.opf", opf)
        z.writestr("OEBPS/style.css", "p { margin: 0 }")
        for path, text in chapters.items():
            z.writestr(f"OEBPS/text/{path}", text)
    return out.getvalue()


def refused(data: bytes, suffix: str, name: str, **limits) -> DocumentError:
    with pytest.raises(DocumentError) as error:
        read_office(data, suffix, name, **{"max_pages": 50, "max_expanded_bytes": 50 * 2**20, **limits})
    assert name in str(error.value)
    return error.value


def test_docx_headings_lists_and_table_in_document_order():
    pages = read(report_docx(), ".docx", "report.docx")
    assert len(pages) == 2  # split at each Heading 1; the title paragraph opens the first section
    lines = pages[0].split("\n")
    assert lines[:2] == ["Quarterly report", "# Capitals"]
    assert "- Paris is large" in lines and "- Rome is old" in lines
    assert "1. Count the people" in lines and "2. Compare them" in lines
    table = ["| Country | Capital | Population |", "| --- | --- | --- |", "| France | Paris | 68,000,000 |",
             "| Italy | Rome | 59,000,000 |", "| Spain | Madrid | 48,000,000 |"]
    start = lines.index(table[0])
    assert lines[start:start + 5] == table
    assert lines[start - 1] == "" and lines[start + 5] == ""  # an empty line around the table
    assert lines.index("Before the table.") < start < lines.index("After the table.")
    assert pages[1] == "# Rivers\nThe Seine flows through Paris."


def test_docx_without_heading_1_splits_at_heading_2_or_not_at_all():
    document = docx.Document()
    for name in ("One", "Two", "Three"):
        document.add_heading(name, level=2)
        document.add_paragraph(f"About {name}.")
    assert read(saved(document), ".docx", "h2.docx") == ["## One\nAbout One.", "## Two\nAbout Two.",
                                                         "## Three\nAbout Three."]
    plain = docx.Document()
    plain.add_paragraph("Just a note.")
    plain.add_heading("A minor heading", level=3)
    assert read(saved(plain), ".docx", "plain.docx") == ["Just a note.\n### A minor heading"]


def test_docx_lists_numbered_by_word_numbering():
    """Word's list buttons number 'List Paragraph' paragraphs through word/numbering.xml, not by style."""
    document = docx.Document()
    formats = {num.get(qn("w:numId")): num for num in document.part.numbering_part.element.iter(qn("w:num"))}
    assert {"1", "5"} <= set(formats)  # the default template's numbering: 1 is a bullet list, 5 a numbered one
    for text, num_id, level in [("Mix", 5, 0), ("Bake", 5, 0), ("Serve warm", 1, 1)]:
        paragraph = document.add_paragraph(text, style="List Paragraph")
        paragraph._p.get_or_add_pPr().append(parse_xml(
            f'<w:numPr {nsdecls("w")}><w:ilvl w:val="{level}"/><w:numId w:val="{num_id}"/></w:numPr>'))
    assert read(saved(document), ".docx", "recipe.docx") == ["1. Mix\n2. Bake\n  - Serve warm"]


def test_pptx_one_page_per_slide_with_tables_and_notes():
    pages = read(slides(), ".pptx", "deck.pptx")
    assert len(pages) == 3
    assert pages[0].startswith("# Slide 1 title\n") and "Fact number 1: the answer is 7." in pages[0]
    assert "Fact number 2: the answer is 14." in pages[1] and "answer is 14" not in pages[0] + pages[2]
    assert "| Metric | Value |\n| --- | --- |\n| Revenue | 12 M |" in pages[1]
    assert pages[2].endswith("Notes:\nRemember the purple elephant.")


def test_html_drops_scripts_and_styles_keeps_tables_and_splits_at_h1():
    pages = read(HTML.encode(), ".html", "travel.html")
    text = "\n".join(pages)
    for hidden in ("xylophonequartz", "zebrafont", "nebulatron", "hiddenword", "document.write"):
        assert hidden not in text
    assert len(pages) == 2
    assert pages[0].split("\n")[:4] == ["Travel notes", "# Europe", "Paris is the capital of France.",
                                        "It is on the Seine."]
    assert "1. Louvre\n2. Orsay" in pages[0]
    assert "\n\n| City | Sights |\n| --- | --- |\n| Paris | Louvre \\| Orsay |\n| Rome | Colosseum Forum |" in pages[0]
    assert pages[1] == "# Asia\nTokyo is the capital of Japan."


def test_html_reads_its_declared_charset_and_falls_back_to_cp1252():
    gbk = '<html><head><meta charset="gb2312"></head><body><p>北京是中国的首都。</p></body></html>'.encode("gbk")
    assert read(gbk, ".htm", "gbk.htm") == ["北京是中国的首都。"]
    assert read("<p>Caf\xe9 cr\xe8me</p>".encode("cp1252"), ".html", "menu.html") == ["Café crème"]
    assert read("\ufeff<p>Ümlaut</p>".encode("utf-16-le"), ".html", "bom.html") == ["Ümlaut"]


def test_epub_chapters_are_pages_in_spine_order():
    book = epub({"one.xhtml": CHAPTER.format(title="Chapter One", text="The dragon sleeps."),
                 "two.xhtml": CHAPTER.format(title="Chapter Two", text="The knight wakes.")})
    assert read(book, ".epub", "tale.epub") == ["# Chapter One\nThe dragon sleeps.", "# Chapter Two\nThe knight wakes."]


def test_chinese_text_survives_exactly():
    chinese = "第一章：长江是中国最长的河流，全长约6300公里。"
    document = docx.Document()
    document.add_heading("概述", level=1)
    document.add_paragraph(chinese)
    table = document.add_table(rows=2, cols=2)
    for cell, text in zip(table._cells, ["河流", "长度", "长江", "6300 公里"]):
        cell.text = text
    assert read(saved(document), ".docx", "河流.docx") == [
        f"# 概述\n{chinese}\n\n| 河流 | 长度 |\n| --- | --- |\n| 长江 | 6300 公里 |"]
    page = f"<html><body><h1>概述</h1><p>{chinese[:8]}\n{chinese[8:]}</p></body></html>"  # a line wrapped in the source
    assert read(page.encode(), ".html", "河流.html") == [f"# 概述\n{chinese}"]


@pytest.mark.parametrize("before, after", [("长江是中国最长的河流，", "全长约6300公里。"),  # after a full-width comma
                                           ("日本語の文章です。", "続きの文です。"),  # after kana and CJK punctuation
                                           ("서울은 한국의 수도", "입니다.")])  # inside a Hangul word
def test_a_source_line_wrapped_between_cjk_characters_joins_closed_up(before, after):
    """kvqa.languages.WIDE: a line break in the HTML between two CJK characters (punctuation, full-width forms, kana and
    Hangul included) adds no space."""
    page = f"<html><body><p>{before}\n{after}</p></body></html>"
    assert read(page.encode(), ".html", "wrapped.html") == [before + after]


def test_encrypted_or_old_office_files_are_refused():
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(2000)
    error = refused(ole, ".docx", "secret.docx")
    assert "password-protected" in str(error) and "save it again as .docx" in str(error)
    assert "设有密码" in render(error.message, "zh") and "secret.docx" in render(error.message, "zh")


def test_damaged_files_are_refused():
    whole = report_docx()
    assert "damaged" in str(refused(whole[: len(whole) // 2], ".docx", "cut.docx"))
    assert "damaged" in str(refused(b"just some text", ".pptx", "fake.pptx"))
    assert "damaged" in str(refused(whole, ".pptx", "word.pptx"))  # a Word file named .pptx
    assert "damaged" in str(refused(epub({}, opf="<package"), ".epub", "broken.epub"))


def test_a_zip_bomb_is_refused_before_it_is_unpacked():
    out = io.BytesIO(whole := report_docx())
    megabyte = bytes(2**20)
    with zipfile.ZipFile(out, "a", zipfile.ZIP_DEFLATED, compresslevel=1) as z, z.open("word/zeros.bin", "w") as f:
        for _ in range(200):  # 200 MB of zeros, under 1 MB deflated
            f.write(megabyte)
    assert len(out.getvalue()) < len(whole) + 2 * 2**20
    assert "expands to more than 50 MB" in str(refused(out.getvalue(), ".docx", "bomb.docx"))
    many = io.BytesIO()
    with zipfile.ZipFile(many, "w") as z:
        for n in range(10_001):
            z.writestr(f"f{n}", b"")
    assert "10,001 files" in str(refused(many.getvalue(), ".epub", "many.epub"))


def test_too_many_pages_are_refused():
    error = refused(slides(4), ".pptx", "long.pptx", max_pages=3)
    assert "4 slides; the limit is 3" in str(error)


def test_files_without_text_are_refused():
    from PIL import Image

    picture = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(picture, format="PNG")
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[6]).shapes.add_picture(picture, Inches(1), Inches(1))
    error = refused(saved(deck), ".pptx", "photos.pptx")
    assert "has no text" in str(error) and "OCR" in str(error)
    assert "no text" in str(refused(b"<html><body><img src=x.png></body></html>", ".html", "empty.html"))


def test_binary_html_is_refused():
    assert "does not look like an HTML page" in str(refused(bytes(range(256)) * 8, ".html", "blob.html"))


def test_xml_that_declares_entities_is_refused():
    laughs = '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
    book = epub({"one.xhtml": CHAPTER.format(title="One", text="Fine."),
                 "two.xhtml": laughs + CHAPTER.split("?>", 1)[1].format(title="Two", text="&lol2;")})
    assert "damaged" in str(refused(book, ".epub", "laughs.epub"))
    opf = OPF.replace("?>", "?>" + laughs.split("?>", 1)[1], 1)
    bad_opf = epub({"one.xhtml": CHAPTER.format(title="One", text="Fine.")}, opf=opf)
    assert "damaged" in str(refused(bad_opf, ".epub", "laughs2.epub"))


def test_an_epub_under_drm_is_refused():
    book = io.BytesIO(epub({"one.xhtml": CHAPTER.format(title="One", text="Fine."), "two.xhtml": "\x93\x11 cipher"}))
    encryption = ('<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                  'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:CipherData>'
                  '<enc:CipherReference URI="OEBPS/text/two.xhtml"/></enc:CipherData></enc:EncryptedData></encryption>')
    with zipfile.ZipFile(book, "a") as z:
        z.writestr("META-INF/encryption.xml", encryption)
    assert "protected by DRM" in str(refused(book.getvalue(), ".epub", "locked.epub"))
