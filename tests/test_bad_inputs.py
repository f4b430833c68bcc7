"""Every bad input, through the CLI (exit 2, one line, no traceback) and the app's handlers (a message, and the
session's document, cache and chat as they were)."""

from __future__ import annotations

import pytest

import app
from conftest import as_upload
from kvqa.cli import main
from kvqa.session.session import Ask
from test_documents import BAD, bomb_pdf, encrypted_pdf, make_pdf

FILES = {name: data for name, data, _ in BAD}
FILES.update({
    "image.pdf": make_pdf([""]),
    "encrypted.pdf": encrypted_pdf(),
    "truncated.pdf": make_pdf(["Some text on a page."])[:300],
    "bomb.pdf": bomb_pdf(200 * 2**20),
})  # a text far longer than the context is no longer an error: its first part is read (tests/test_parts.py)
MESSAGES = {name: message for name, _, message in BAD} | {"bomb.pdf": "expands"}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize("name", sorted(FILES))
def test_cli_exits_2_with_one_line(bad_files, name, capsys, default_lm):
    assert main(["ask", str(bad_files / name), "-q", "What is this?"]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("kvqa: ") and MESSAGES[name] in lines[0]


@pytest.mark.parametrize("question,message", [
    ("", "empty"), ("   \n", "empty"), ("x" * 100_000, "100,000 characters"),
    ("word " * 3000, "tokens; the limit is 512"),
])
def test_cli_bad_questions(question, message, capsys, tmp_path, default_lm):
    doc = tmp_path / "doc.txt"
    doc.write_text("A fine document.")
    assert main(["ask", str(doc), "-q", question]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.fixture(scope="module")
def session(default_lm):
    session = app.kvqa_app.reads.on_paste("The secret word is pelican.", None)[app.kvqa_app.page.state]
    list(app.kvqa_app.questions.on_ask(Ask("What is the secret word?"), session))
    yield session
    session.close()


def snapshot(session):
    return session.document, session.prefilled, list(session.turns), session.prefilled.cache.length


@pytest.mark.parametrize("name", sorted(FILES))
def test_app_upload_shows_a_message_and_keeps_the_session(bad_files, name, session):
    before = snapshot(session)
    with pytest.warns(UserWarning, match=MESSAGES[name].split("'")[0]):
        app.kvqa_app.reads.on_upload(as_upload(bad_files / name), session)
    assert snapshot(session) == before


@pytest.mark.parametrize("question", ["", "x" * 100_000, "word " * 3000])
def test_app_bad_questions_keep_the_session(question, session):
    before = snapshot(session)
    with pytest.warns(UserWarning):
        list(app.kvqa_app.questions.on_ask(Ask(question), session))
    assert snapshot(session) == before
