"""Every text in English and Chinese from one catalog; errors keep their English str and say
themselves in Chinese; every raise site names a message id."""

from __future__ import annotations

import ast
import pickle
import re
import string
from pathlib import Path

import pytest

from kvqa.bench.errors import BenchError
from kvqa.documents.parts import parse_range
from kvqa.documents.reading import Document, combine, load_document
from kvqa.errors import DocumentError, KvqaError
from kvqa.messages import CATALOG, Message, language_of, render, say

ROOT = Path(__file__).parent.parent
SOURCES = sorted(ROOT.glob("kvqa/**/*.py")) + [ROOT / "app.py"]
CATALOGUE = [ROOT / "kvqa" / "messages.py", *ROOT.glob("kvqa/texts/*.py")]  # where ids are defined, not used
MESSAGE_ID = re.compile(r"[a-z_]+(\.[a-z_]+)+")
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")  # Chinese characters and full-width punctuation


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def error_classes(cls=KvqaError) -> set[str]:
    return {cls.__name__}.union(*(error_classes(sub) for sub in cls.__subclasses__()))


def calls(names: set[str]):
    """(file, call) for every call in kvqa's sources and app.py to one of `names`."""
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                yield path.relative_to(ROOT), node


@pytest.mark.parametrize("key", sorted(CATALOG))
def test_every_message_has_both_languages_with_the_same_placeholders(key):
    english, chinese = CATALOG[key]
    assert english.strip() and chinese.strip()
    assert fields(english) == fields(chinese), key
    words = string.Formatter().parse(english)
    if any(re.search("[A-Za-z]{2}", literal) for literal, *_ in words):  # it has words to translate
        assert CJK.search(chinese) and chinese != english, key


def test_every_raise_site_names_a_message_id():
    """A KvqaError is made from a message id (a literal in the catalog, or an expression choosing among them) or
    from a Message already made; never from an English sentence or an f-string."""
    def ids_in(node) -> list[str] | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.IfExp):
            body, orelse = ids_in(node.body), ids_in(node.orelse)
            return body + orelse if body is not None and orelse is not None else None
        return None

    assert BenchError.__name__ in error_classes()  # the bench's error too (its module is imported above)
    checked = 0
    for path, call in calls(error_classes()):
        assert call.args, f"{path}:{call.lineno}: an error without a message"
        first = call.args[0]
        ids = ids_in(first)
        if ids is not None:
            assert all(i in CATALOG for i in ids), f"{path}:{call.lineno}: {ids} not in kvqa.messages.CATALOG"
        else:  # a Message made elsewhere: a name, an attribute or a call that returns one
            assert isinstance(first, (ast.Name, ast.Attribute, ast.Call)), \
                f"{path}:{call.lineno}: raise with a message id, not {ast.unparse(first)}"
        checked += 1
    assert checked > 80  # the scan sees the library's raise sites


def test_every_message_id_in_the_sources_is_in_the_catalog_and_every_entry_is_used():
    used, prefixes = set(), set()
    for _, call in calls({"Message", "say", "KvqaError", *error_classes()}):
        for arg in call.args[:1]:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and MESSAGE_ID.fullmatch(arg.value):
                used.add(arg.value)  # (the CLI's own say() prints text, not ids)
            elif isinstance(arg, ast.JoinedStr) and isinstance(arg.values[0], ast.Constant) \
                    and re.fullmatch(r"[a-z_]+\.[a-z_.]*", arg.values[0].value):
                prefixes.add(arg.values[0].value)  # f"unit.{unit}": the ids that start so
    assert used - set(CATALOG) == set()
    assert all(any(key.startswith(p) for key in CATALOG) for p in prefixes), prefixes
    strings = {n.value for path in SOURCES if path not in CATALOGUE for n in ast.walk(ast.parse(path.read_text()))
               if isinstance(n, ast.Constant) and isinstance(n.value, str)}  # ids held in names or dicts
    unused = [key for key in CATALOG if key not in used | strings and not any(key.startswith(p) for p in prefixes)]
    assert unused == []


def test_an_english_sentence_is_not_a_message_id():
    with pytest.raises(KeyError, match="no message"):
        KvqaError("Something went wrong: try again.")


def test_errors_keep_their_english_text_and_say_it_in_chinese(tmp_path):
    with pytest.raises(DocumentError) as missing:
        load_document(tmp_path / "gone.txt")
    assert str(missing.value) == f"No such file: {tmp_path / 'gone.txt'}. Check the path."
    assert render(missing.value.message, "zh") == f"找不到文件：{tmp_path / 'gone.txt'}。请检查路径。"

    pdf = Document(name="manual.pdf", text="a\n\n[Page 2]\nb", pages=2, page_starts=(0, 2))
    with pytest.raises(DocumentError) as outside:
        parse_range("5-9", pdf)
    assert "manual.pdf has 2 pages: choose pages between 1 and 2" in str(outside.value)
    assert render(outside.value.message, "zh") == ("manual.pdf 共 2 页：请在 1 到 2 之间选择，"
                                                   "起点不晚于终点（收到的是“5-9”）。")


def test_messages_inside_messages_are_said_in_the_same_language():
    """A bad file among others: the problem names its file, in the language of the page."""
    problems = [Message("file.named_problem", name="a.docx", problem=Message("file.kind_no_suffix")),
                Message("pdf.encrypted", name="b.pdf")]
    with pytest.raises(DocumentError) as none:
        combine([], problems=problems)
    assert str(none.value).startswith("No file could be read. a.docx: files without an extension b.pdf is")
    assert render(none.value.message, "zh") == ("没有一个文件能读取。a.docx：没有扩展名的文件 "
                                                 "b.pdf 设有密码：请打开它，"
                                                 "另存一份不带密码的副本，再上传。")
    assert render("text from a server", "zh") == "text from a server"  # not kvqa's: shown as it is


def test_a_message_is_its_english_str_and_survives_pickling():
    """Messages cross ZeroGPU's process boundary inside EngineInfo and errors, and are JSON strings for the CLI."""
    message = Message("notice.chosen", part=Message("part.pages", first=3, last=3, total=10), name="long.pdf")
    assert message == "Read pages 3-3 of 10 of long.pdf, as chosen." and isinstance(message, str)
    again = pickle.loads(pickle.dumps(message))
    assert again == message and render(again, "zh") == "已按所选读取 long.pdf 的第 3-3 页（共 10 页）。"
    error = pickle.loads(pickle.dumps(DocumentError("scan.no_text", name="scan.pdf")))
    assert render(error.message, "zh").startswith("OCR 没有在 scan.pdf 中识别出文字")


@pytest.mark.parametrize("header,language", [
    ("zh-CN,zh;q=0.9,en;q=0.8", "zh"), ("zh-TW", "zh"), ("zh", "zh"), ("en-US,en;q=0.9", "en"),
    ("fr-FR,fr;q=0.9,zh;q=0.8,en;q=0.5", "zh"), ("en;q=0.5,zh-CN;q=0.9", "zh"), ("de-DE", "en"), ("", "en"),
    (None, "en"), ("zh;q=0", "en"), ("*", "en"), ("zh;q=abc,en", "en"),
])
def test_the_language_follows_accept_language(header, language):
    assert language_of(header) == language


def test_an_unknown_language_reads_english():
    assert say("ui.ask", "fr") == say("ui.ask", "en") == "Ask" and say("ui.ask", "zh") == "提问"


def test_a_chinese_font_installed_after_matplotlib_listed_its_fonts_is_found(monkeypatch):
    """matplotlib keeps its font list on disk; a machine that installed fonts-wqy-microhei after matplotlib first ran
    still gets Chinese plot labels."""
    from matplotlib import font_manager

    from kvqa.ui.latency import CJK_FONTS, chinese_font

    font = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
    if not font.exists():
        pytest.skip("needs fonts-wqy-microhei (installed by .ci/run)")
    # as listed before any Chinese font was installed (this machine may have others than WenQuanYi: Noto CJK...)
    stale = [f for f in font_manager.fontManager.ttflist if f.name not in CJK_FONTS and "wqy" not in f.fname.lower()]
    monkeypatch.setattr(font_manager.fontManager, "ttflist", stale)
    chinese_font.cache_clear()
    try:
        assert chinese_font() == "WenQuanYi Micro Hei"  # the first of CJK_FONTS, found again on disk
    finally:
        chinese_font.cache_clear()
