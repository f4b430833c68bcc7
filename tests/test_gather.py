"""A question on a document read in parts is answered from its passages of every part read, cut from those parts'
caches and composed into one (kvqa.session.gather): on the tiny random Llama with a real store, a question naming
two sections that lie in different parts is answered from a cache holding both, said to be composed (Turn.composed,
--json's "composed" with exact false), the parts' own caches left as they were; with gathering off (the default),
or a part asked for, one part answers exactly as before; an engine that cannot compose answers from one part."""

from __future__ import annotations

import pytest

from fakes import FakeEngine
from kvqa.cache.store import KVStore
from kvqa.config import Config
from kvqa.documents.parts import part_of
from kvqa.documents.reading import document_from_text
from kvqa.engines.stored import StoredLocalEngine
from kvqa.export import session_dict
from kvqa.session.session import Ask, Session

TEXT = "\n\n".join(f"Section {n} names the codeword marigold{n}. " + "The harbour wall was repaired. " * 60
                   for n in range(14))  # about 6,000 tokens: two parts of the tiny model's 4,096-token context
BOTH = "Which sections name the codewords marigold1 and marigold13?"  # section 1 in part 1, section 13 in part 2


def read_ahead_session(tiny_lm, tmp_path, gather_tokens: int = 4096) -> Session:
    config = Config.of(max_new_tokens=8, max_question_tokens=64, chunk_size=256, quote_passages=1,
                       gather_tokens=gather_tokens)
    session = Session(StoredLocalEngine(config, lm=tiny_lm, store=KVStore(tmp_path, 512 * 2**20)))
    session.load(document_from_text(TEXT, name="long.txt"))
    assert len(session.parts) == 2 and session.engine.info.composes
    session.read_ahead()
    return session


def test_a_question_needing_two_parts_is_answered_from_both_composed(tiny_lm, tmp_path):
    session = read_ahead_session(tiny_lm, tmp_path)
    part, ids = session.prefilled, session.prefilled.ids
    answer = session.ask(BOTH).answer
    turn = session.turns[-1]
    assert answer.used_cache and answer.timings.new_tokens > 0
    assert turn.composed is not None and turn.composed.numbers == (1, 2)
    held = "".join(session.whole.text[a:b] for a, b, _ in turn.composed.held)
    assert "marigold1." in held and "marigold13." in held  # both places in the one cache
    assert {p for *_, p in turn.composed.held} == {0, 1} and turn.composed.tokens < len(ids)
    assert session.prefilled is part and part.ids == ids and part.cache.length == len(ids)  # its part untouched
    composed = session_dict(session)["answers"][-1]["composed"]
    assert composed["exact"] is False and composed["part_numbers"] == [1, 2]
    assert [p["first"] for p in composed["parts"]] == [a for a, _, _ in session.parts]


def test_with_gathering_off_or_a_part_asked_one_part_answers_as_before(tiny_lm, tmp_path):
    assert Config().decoding.gather_tokens == 0  # off unless asked for (docs/quality.md: why)
    off = read_ahead_session(tiny_lm, tmp_path / "off", gather_tokens=0)
    plain = off.ask(BOTH).answer
    assert off.turns[-1].composed is None and session_dict(off)["answers"][-1]["composed"] is None
    on = read_ahead_session(tiny_lm, tmp_path / "on")
    first, last, _ = on.parts[off.part_index]
    asked = on.ask(Ask(BOTH, part=part_of(on.whole, first, last))).answer
    assert on.turns[-1].composed is None and asked.token_ids == plain.token_ids  # the same part, exactly


def test_an_engine_that_cannot_compose_answers_from_one_part():
    engine = FakeEngine(context_tokens=120, keeps_caches=True)
    session = Session(engine)
    session.load(document_from_text(TEXT[:3000], name="long.txt"))
    session.read_ahead()
    assert len(session.parts) > 1 and not engine.info.composes
    session.ask(BOTH).answer  # noqa: B018 - runs the answer
    assert session.turns[-1].composed is None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_composed_answer_says_so_under_it(lang, tiny_lm, tmp_path):
    from kvqa.ui.answers import chat_messages

    session = read_ahead_session(tiny_lm, tmp_path)
    session.ask(BOTH).answer  # noqa: B018
    shown = chat_messages(session, lang)[-1]["content"]
    assert "kvqa-composed" in shown and ("Approximate" in shown if lang == "en" else "近似" in shown)
    assert ("parts 1, 2" in shown) if lang == "en" else ("第 1, 2 部分" in shown)


def test_a_budget_larger_than_the_context_composes_what_fits(tiny_lm, tmp_path):
    session = read_ahead_session(tiny_lm, tmp_path, gather_tokens=10**6)  # more than the model reads at once
    answer = session.ask(BOTH).answer
    composed = session.turns[-1].composed
    assert answer.used_cache and composed is not None and composed.tokens <= session.engine.info.context_tokens


def test_runs_that_come_out_longer_than_the_context_leave_the_part_to_answer(tiny_lm, tmp_path, monkeypatch):
    from kvqa.errors import DocumentTooLong

    session = read_ahead_session(tiny_lm, tmp_path)

    def too_long(*args, **kwargs):
        raise DocumentTooLong("too_long.tokens", tokens=5000, limit=4000, context=4096, reserve=72, over=1000)

    monkeypatch.setattr(session.engine, "compose", too_long)
    answer = session.ask(BOTH).answer
    assert answer.used_cache and answer.timings.new_tokens > 0 and session.turns[-1].composed is None
