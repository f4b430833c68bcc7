"""Documents longer than the context (the part that fits is read and named; any part can be chosen),
several files as one document, and follow-up questions (exact, and never written into the document's cache)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import app
import kvqa
from conftest import as_upload, make_pdf
from kvqa.cli import main
from kvqa.documents.parts import parse_range, part_of, select, units
from kvqa.engines import LocalEngine
from kvqa.session.session import Ask, Session

CONFIG = kvqa.Config.of(max_question_tokens=160, max_new_tokens=16, chunk_size=256)
FILLER = "The committee met again and discussed the budget, the roads and the library opening hours at length. "


def page_text(n: int) -> str:
    return f"Page {n} fact: the code word for page {n} is word{n}x. " + FILLER * 3


@pytest.fixture(scope="module")
def small(tiny_lm):
    """The tiny model with a 1,000-token context: a ten-page PDF does not fit."""
    return LocalEngine(CONFIG, lm=dataclasses.replace(tiny_lm, context_length=1000))


@pytest.fixture(scope="module")
def long_pdf(tmp_path_factory):
    path = tmp_path_factory.mktemp("pdf") / "long.pdf"
    path.write_bytes(make_pdf([page_text(n) for n in range(1, 11)]))
    return kvqa.load_document(path)


def test_a_pdf_longer_than_the_context_is_read_in_parts_each_named(small, long_pdf):
    session = Session(small)
    session.load(long_pdf)
    part = session.document.part
    assert part is not None and part.unit == "pages" and part.first == 1 and 1 <= part.last < 10
    assert session.prefilled.tokens <= 1000 - CONFIG.limits.reserve_tokens
    assert f"code word for page {part.last} is" in session.document.text
    assert f"code word for page {part.last + 1} is" not in session.document.text
    assert session.notice.startswith("long.pdf is longer than this model reads at once: it is cut into")
    assert f"read now: pages 1-{part.last} of 10" in session.notice
    parts = session.parts
    assert parts[0][:2] == (1, part.last) and parts[-1][1] == 10 and len(parts) >= 2
    assert all(b1 == a2 for (_, b1, _), (a2, _, _) in zip(parts, parts[1:]))  # neighbours share a page
    routed = Session(small)
    routed.load(long_pdf)
    answer = routed.ask("What is the code word for page 10?").answer  # no part chosen: the question finds it
    assert "code word for page 10 is" in routed.document.text and routed.turns[-1].part.last == 10
    assert answer.timings.new_tokens > 0 and routed.prefilled.cache.length == routed.prefilled.tokens
    assert all(s.page >= routed.document.part.first for s in answer.sources)  # pages of the whole PDF
    with pytest.raises(kvqa.DocumentTooLong):  # the longest run that fits: one more page would not
        small.prefill(select(long_pdf, 1, part.last + 1))
    first_part = part

    session.load(long_pdf, part=part_of(long_pdf, first_part.last + 1, 10))  # the next part, as the user chooses it
    part = session.document.part
    assert part.first == first_part.last + 1 and part.last <= 10
    assert session.document.text.startswith(f"[Page {part.first}]")
    assert f"code word for page {part.first} is" in session.document.text
    answer = session.ask("What is the code word?").answer  # the part is answerable: the cache is the part's
    assert answer.timings.new_tokens > 0 and session.prefilled.cache.length == session.prefilled.tokens

    session.load(long_pdf, part=part_of(long_pdf, 3, 3))
    assert session.notice == "Read pages 3-3 of 10 of long.pdf, as chosen."


def test_a_model_with_a_long_context_reads_the_same_pdf_whole(tiny_lm, long_pdf):
    """Llama 3.2's 131,072 tokens: the PDF the small context reads in parts is read whole, with no notice."""
    session = Session(LocalEngine(CONFIG, lm=dataclasses.replace(tiny_lm, context_length=131_072)))
    session.load(long_pdf)
    assert session.notice is None and session.document.part is None
    assert all(f"code word for page {n} is" in session.document.text for n in range(1, 11))
    assert session.prefilled.tokens > 1000 - CONFIG.limits.reserve_tokens  # more than the small context reads
    assert session.prefilled.cache.length == session.prefilled.tokens


def test_a_long_text_is_cut_at_a_paragraph_and_a_far_too_long_one_is_read_too(small):
    text = "\n\n".join(f"Paragraph {n}. " + FILLER for n in range(120))  # each under the units' 200 characters
    source = kvqa.document_from_text(text)
    session = Session(small)
    session.load(source)
    part = session.document.part
    assert part.unit == "characters" and part.first == 1 and part.last < len(text)
    assert text[part.last - 2: part.last] == "\n\n"  # whole paragraphs
    assert f"read now: characters 1-{part.last:,} of {len(text):,}" in session.notice

    huge = kvqa.document_from_text(FILLER * 400)  # over 32 characters per token of context: refused unread before
    session.load(huge)
    assert session.document.part.last < len(huge.text)
    assert session.prefilled.tokens <= 1000 - CONFIG.limits.reserve_tokens


def test_ranges_are_checked_with_messages_that_say_what_to_type(long_pdf):
    assert parse_range("2-4", long_pdf) == part_of(long_pdf, 2, 4) and parse_range("7-", long_pdf).last == 10
    assert (parse_range("5", long_pdf).first, parse_range("5", long_pdf).last) == (5, 5)
    for bad, message in (("0-3", "between 1 and 10"), ("4-2", "no later than"), ("pages", "like 14-27"),
                         ("3-11", "has 10 pages")):
        with pytest.raises(kvqa.DocumentError, match=message):
            parse_range(bad, long_pdf)
    assert select(long_pdf, 1, 10) is long_pdf
    spans = units(kvqa.document_from_text("a\n\nb" + "c" * 9000), 1, 9004)
    assert spans[0] == (1, 3) and all(b - a < 4000 for a, b in spans) and spans[-1][1] == 9004


def test_cli_pages_and_json(tmp_path, capsys, default_lm):
    path = tmp_path / "three.pdf"
    path.write_bytes(make_pdf(["The first page is about apples.", "The second page says the ferry leaves at six.",
                               "The third page is about pears."]))
    assert main(["ask", str(path), "--pages", "2-3", "-q", "When does the ferry leave?", "--max-new-tokens", "12",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["pages_read"] == [2, 3] and result["pages_total"] == 3
    assert "Read pages 2-3 of 3 of three.pdf, as chosen." in err
    assert main(["ask", str(path), "--chars", "1-9", "-q", "x", "--max-new-tokens", "4"]) == 0  # any document
    assert "Read characters 1-9 of 128 (page 1, from “The first”) of three.pdf, as chosen." in capsys.readouterr().err


def test_several_files_are_one_document_each_named_and_a_bad_one_is_skipped(tmp_path, default_lm):
    ui = app.kvqa_app
    (tmp_path / "vault.txt").write_text("\n\n".join(["The vault code is 4417. Nobody else knows it."]
                                                     + [f"Note {n}: the garden is green." for n in range(8)]))
    (tmp_path / "ferry.md").write_text("\n\n".join([f"Note {n}: the town hall is old." for n in range(8)]
                                                    + ["# Timetable\nThe ferry leaves at 6:15 from pier nine."]))
    (tmp_path / "broken.pdf").write_bytes(b"not a pdf")
    files = [as_upload(tmp_path / name) for name in ("vault.txt", "broken.pdf", "ferry.md")]
    with pytest.warns(UserWarning, match="broken.pdf"):
        shown = ui.reads.on_upload(files, None)
    session = shown[ui.page.state]
    try:
        assert session.document.name == "vault.txt + ferry.md"
        text = session.document.text
        assert "=== File 1 of 2: vault.txt ===" in text and "=== File 2 of 2: ferry.md ===" in text
        answer = session.ask("When does the ferry leave?").answer
        ferry_section = text.index("ferry.md ===")
        assert answer.sources and answer.sources[0].start >= ferry_section  # it comes from the right file
        assert "6:15" in answer.text
    finally:
        session.close()


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_follow_ups_equal_a_recompute_of_the_whole_conversation(which, tiny_lm, default_lm):
    lm = tiny_lm if which == "tiny" else default_lm
    config = kvqa.Config.of(max_new_tokens=16, max_question_tokens=200, chunk_size=64)
    document = kvqa.document_from_text("The museum opens at 9 am. The secret word is pelican. The bridge is 40 m long.")
    session = Session(LocalEngine(config, lm=lm))
    session.load(document)
    before = [(k.clone(), v.clone()) for k, v in session.prefilled.cache.tensors()]
    first = session.ask(Ask("When does the museum open?", remember=True)).answer
    second = session.ask(Ask("And what is the secret word?", remember=True)).answer
    history = [("When does the museum open?", first.text)]
    whole = kvqa.answer_without_cache(lm, document, "And what is the secret word?", config=config,  # quoting as the
                                      prompt=session.prefilled.prompt, history=history,  # engine does
                                      quote_passages=config.decoding.quote_passages,
                                      rerank_passages=config.decoding.rerank_passages)
    assert second.token_ids == whole.token_ids and session.turns[-1].follows == 1
    alone = kvqa.answer(lm, session.prefilled, "And what is the secret word?",
                        quote_passages=config.decoding.quote_passages)
    assert alone.timings.question_tokens < second.timings.question_tokens  # the follow-up read the first turn
    assert session.prefilled.cache.length == session.prefilled.tokens
    for (k, v), (k0, v0) in zip(session.prefilled.cache.tensors(), before):  # never written into the document's part
        assert torch.equal(k, k0) and torch.equal(v, v0)

    session.new_conversation()  # the document is not read again; the next question follows nothing
    prefilled = session.prefilled
    session.ask(Ask("When does the museum open?", remember=True)).answer
    assert session.turns[-1].follows == 0 and session.prefilled is prefilled and len(session.conversation()) == 1
    session.ask("Again?").answer  # remember off: the conversation is not read
    assert session.turns[-1].follows == 0


@pytest.mark.parametrize("template", ["chatml", "llama3"])
def test_a_long_conversation_keeps_the_latest_turns_that_fit(template, tiny_lm, tiny_llama3_lm):
    """Six follow-ups, in English and Chinese, on both template families: each is token for token a recompute of the
    turns it kept, and it kept the most recent turns that fit the question's room (one more would not)."""
    lm = tiny_lm if template == "chatml" else tiny_llama3_lm
    config = kvqa.Config.of(max_new_tokens=8, max_question_tokens=120, chunk_size=64, quote_passages=0)
    document = kvqa.document_from_text("A short document about birds. 这是一份关于鸟类的简短文件。")
    session = Session(LocalEngine(config, lm=lm))
    session.load(document)
    questions = [f"Question number {n} about the birds?" if n % 2 else f"关于鸟类的第 {n} 个问题是什么？"
                 for n in range(6)]
    for n, question in enumerate(questions):
        answer = session.ask(Ask(question, remember=True)).answer
        kept = session.turns[-1].follows
        earlier = [(t.question, t.answer) for t in session.turns[:-1]]
        history = earlier[len(earlier) - kept:] if kept else []
        whole = kvqa.answer_without_cache(lm, document, question, config=config, prompt=session.prefilled.prompt,
                                          history=history, quote_passages=0)
        assert answer.token_ids == whole.token_ids, n
        prompt = session.prefilled.prompt
        if kept < len(earlier):  # one more turn would not fit in the room
            longer = earlier[len(earlier) - kept - 1:]
            assert len(prompt.conversation_ids(longer, question)) > config.limits.max_question_tokens
    follows = [t.follows for t in session.turns]
    assert follows[0] == 0 and max(follows) >= 2 and follows[-1] < 5  # older turns were forgotten to fit


def test_conversation_ids_match_the_template_in_one_go(tiny_llama3_lm, default_lm):
    from kvqa.prompt import ChatPrompt, _render_turns, system_text

    for lm in (tiny_llama3_lm, default_lm):
        prompt = ChatPrompt.for_tokenizer(lm.tokenizer)
        history = [("Who wrote it? ", " Jefferson, mostly.\n"), ("When?", "In 1776.")]
        rendered = _render_turns(lm.tokenizer, system_text("A document."), [c for t in history for c in t] + ["Why?"],
                                 prompt.date_string)
        whole = lm.tokenizer(rendered, add_special_tokens=False)["input_ids"]
        assert prompt.prefix_ids("A document.") + prompt.conversation_ids(history, "Why?") == whole


def test_api_prefill_takes_a_part_and_says_what_was_read(default_lm):
    ui = app.kvqa_app
    text = "\n\n".join(f"Paragraph {n}: the lamp number {n} is blue." for n in range(40))
    shown = ui.api.api_prefill(text=text, part="1-200")
    session = shown[ui.page.state]
    try:
        assert session.document.part == kvqa.documents.reading.Part("characters", 1, 200, len(text))
        assert "Read characters 1-200 of" in shown[ui.api.api_status]
        with pytest.raises(app.gr.Error, match="like 14-27"):
            ui.api.api_prefill(text=text, part="first half", session=session)
        assert session.document.part.last == 200  # a bad range changes nothing
    finally:
        session.close()


def test_switching_model_keeps_the_text_and_reads_it_again(tiny_lm, default_lm):
    config = kvqa.Config.of(max_new_tokens=8)
    ui = app.KvqaApp(config, LocalEngine(config, lm=default_lm), models=["tiny-llama"])
    ui.service._engines["tiny-llama"] = LocalEngine(config, lm=tiny_lm)  # offered model, already loaded (no download)
    session = ui.reads.on_paste("The secret word is pelican.", None)[ui.page.state]
    shown = ui.reads.on_model("tiny-llama", session)
    switched = shown[ui.page.state]
    try:
        assert switched is not session and switched.engine is ui.service._engines["tiny-llama"]
        assert switched.whole.text == session.whole.text and switched.prefilled.model_name == "tiny-llama"
        assert session.prefilled is None  # the old session's cache is freed
        assert "tiny-llama" in shown[ui.page.promise_box]
        assert switched in ui.service.clients.of("local")  # opened through new_session: per-client limits count it
        with pytest.warns(UserWarning, match="not offered here"):
            assert ui.reads.on_model("some/other-model", switched) == {ui.page.model_box: ui.service.model_of(switched)}
    finally:
        switched.close()


def test_when_no_file_can_be_read_the_error_names_each():
    from kvqa.documents.reading import combine

    with pytest.raises(kvqa.DocumentError, match="^No file could be read. a.pdf: damaged b.txt: binary$"):
        combine([], problems=["a.pdf: damaged", "b.txt: binary"])
    with pytest.raises(kvqa.DocumentError, match="^a.pdf: damaged$"):
        combine([], problems=["a.pdf: damaged"])


def test_cli_routes_each_question_to_its_part_and_says_so_in_json(small, long_pdf, tmp_path, capsys, monkeypatch):
    import kvqa.engines

    monkeypatch.setattr(kvqa.engines, "make_engine", lambda *a, **k: small)  # the 1,000-token context
    path = tmp_path / "long.pdf"
    path.write_bytes(make_pdf([page_text(n) for n in range(1, 11)]))
    assert main(["ask", str(path), "--no-store", "--json", "--max-new-tokens", "4",
                 "-q", "What is the code word for page 10?", "-q", "What is the code word for page 1?"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    parts = result["parts"]
    assert parts[0]["first"] == 1 and parts[-1]["last"] == 10 and all(p["unit"] == "pages" for p in parts)
    assert all(0 < p["tokens"] <= 1000 - CONFIG.limits.reserve_tokens for p in parts)
    first, second = (a["part"] for a in result["answers"])
    assert first["unit"] == "pages" and first["first"] <= 10 == first["last"]  # the part holding page 10
    assert second["first"] == 1  # and back to the one holding page 1
    assert "Answering from part" in err and "cut into" in err


def dense_pdf(pages: list[str]) -> bytes:
    """A PDF whose pages may hold far more text than a part (small print, no automatic page break)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_auto_page_break(False)
    pdf.set_font("helvetica", size=4)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 1.6, text)
    return bytes(pdf.output())


def test_a_pdf_page_longer_than_a_part_is_cut_inside_and_sources_keep_their_pages(small, tmp_path):
    dense = " ".join(f"Clause {n}: the inspector of district {n} is named Warden{n}q. " + FILLER for n in range(40))
    path = tmp_path / "dense.pdf"
    path.write_bytes(dense_pdf([page_text(1), dense, page_text(3)]))
    document = kvqa.load_document(path)
    assert len(document.page_starts) == 3
    session = Session(small)
    session.load(document)  # page 2 alone does not fit: the document is cut in characters, not refused
    whole = session.whole
    assert whole.in_characters and len(session.parts) >= 3
    assert session.document.part.pages == (1, 2) and "(pages 1-2, from “Page 1 fact" in session.notice
    answer = session.ask("What is the code word for page 3?").answer
    assert "code word for page 3 is" in session.document.text and session.document.part.pages[1] == 3
    assert answer.sources and answer.sources[0].page == 3
    answer = session.ask("Who is the inspector of district 23?").answer
    part = session.document.part
    assert "Warden23q" in session.document.text and part.pages == (2, 2) and part.first > 1
    assert "pages 2-2" not in str(part.name) and "(page 2, from “" in str(part.name)
    assert answer.sources and answer.sources[0].page == 2 and "Warden23q" in answer.sources[0].text
    source = answer.sources[0]  # offsets into the whole document, and the part it lies in: the part read
    assert source.text == whole.text[source.start: source.end] and source.part == session.part_index + 1
