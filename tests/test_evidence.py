"""Evidence and honesty: passages ranked by the question (bm25s), the matching sentence marked, passages that never
cross a heading, file or page, the best passage quoted in the question's turn on both paths, loops that count up,
no half characters at the token limit, and the numbers and names an answer adds that the document lacks."""

from __future__ import annotations

import itertools

import pytest

import kvqa
import kvqa.generation.decode as decode
from kvqa.documents.reading import combine, document_from_text
from kvqa.evidence.sources import CJK_WEIGHT, answer_span, excerpt, passages, source_dict, units
from kvqa.evidence.support import unquoted, unsupported
from kvqa.model.vocabulary import number_tokens
from kvqa.prompt import question_turn
from kvqa.results import QuestionTurn
from kvqa.session.ask import ask, ask_without_cache
from ranked import evidence, find_sources, quotes

HISTORY = ("The town of Wrenford lies on the River Ashe. It was first recorded in a charter in 1214.\n\n"
           "## The bridge\n\nThe new stone bridge, known ever since as the Seven Arches Bridge, was completed in 1791. "
           "It was designed by the engineer Hester Pryce, one of the few women working as a bridge engineer then. "
           "It is 120 metres long.\n\n## The market\n\nThe market has been held on Thursdays since 1302. "
           "Cheese and wool were sold there; today it sells mostly vegetables.")


# --- passages and ranking ---

def test_passages_never_cross_a_heading_a_page_or_a_file():
    text = combine([document_from_text("# A\nOne. Two.\n## B\nThree.", name="a.md"),
                    document_from_text("Four.\n\n[Page 2]\nFive.", name="b.txt")]).text
    spans = passages(text)
    for start, end in spans:
        inner = text[start:end]
        for marker in ("## B", "=== File 2", "[Page 2]"):
            assert marker not in inner[1:], (marker, inner)  # a marker may only open a passage
    assert "".join(text[a:b] for a, b in spans).strip() == text.strip().replace("\n\n", "\n\n")  # nothing lost


def test_the_first_source_is_ranked_by_the_question_not_only_the_answer():
    # a wrong answer that names the market must not pull the bridge question's evidence away from the bridge
    found = find_sources(HISTORY, "It was built in 1302 for the market.", "Who designed the Seven Arches Bridge?")
    assert found and "Hester Pryce" in found[0].text


def test_the_sentence_holding_the_answer_is_marked():
    found = find_sources(HISTORY, "The engineer Hester Pryce.", "Who designed the Seven Arches Bridge?")
    assert found[0].marked.startswith("It was designed by the engineer Hester Pryce")
    assert HISTORY[found[0].mark[0]:found[0].mark[1]] == found[0].marked


def test_evidence_and_quotes_follow_the_question():
    (start, end), = evidence(HISTORY, "On which day is the market held?")
    assert "Thursdays" in HISTORY[start:end]
    assert quotes(HISTORY, "On which day is the market held?", 0) == []
    assert evidence(HISTORY, "zebra quantum?") == []  # nothing shared: nothing quoted rather than a guess


def test_chinese_questions_find_chinese_passages():
    text = ("青石镇茶叶专业合作社位于云岭山脉东麓，成立于2009年。\n\n## 产品\n\n"
            "合作社主要生产绿茶和红茶，每年四月举办开茶节。"
            "\n\n## 成员\n\n合作社现有社员三百一十二户。")
    found = find_sources(text, "", "合作社每年几月举办开茶节？")
    assert found and "开茶节" in found[0].marked


# --- a shorter quote: the passage's best sentences ---

BRIDGE = ("The new stone bridge, known ever since as the Seven Arches Bridge, was completed in 1791. It was "
          "designed by the engineer Hester Pryce, one of the few women working as a bridge engineer then. "
          "It is 120 metres long.")


def _weighed(text: str) -> float:
    return len(text) + CJK_WEIGHT * sum("\u4e00" <= c <= "\u9fff" for c in text)


def test_an_excerpt_is_the_run_of_whole_sentences_that_shares_most_with_the_question():
    assert excerpt(BRIDGE, "Who designed the Seven Arches Bridge?", 0) == BRIDGE  # 0: the whole passage
    assert excerpt(BRIDGE, "Who designed the bridge?", len(BRIDGE)) == BRIDGE  # it fits whole
    found = excerpt(BRIDGE, "Who was the engineer who designed it?", 120)
    assert found == ("It was designed by the engineer Hester Pryce, one of the few women working as a bridge engineer "
                     "then.")
    longest = excerpt(BRIDGE, "How long is it?", 140)  # the most shared words, then as much of the passage as fits
    assert "120 metres long" in longest and len(longest) <= 140 and longest.endswith("long.")
    assert longest in BRIDGE and longest.startswith("It was designed")  # whole sentences, in the passage's order


def test_an_excerpt_cuts_a_sentence_too_long_at_its_clauses_then_its_words_and_keeps_tables_whole():
    sentence = ("We hold these truths to be self-evident, that all men are created equal, that they are endowed by "
                "their Creator with certain unalienable Rights, that among these are Life, Liberty and the pursuit of "
                "Happiness.")
    found = excerpt(sentence, "Which rights are unalienable?", 100)
    assert found.startswith("that they are endowed") and "unalienable Rights," in found and len(found) <= 100
    assert len(excerpt("word " * 100 + "needle here.", "needle?", 30)) <= 30
    assert "needle" in excerpt("word " * 100 + "needle here.", "needle?", 30)
    row = "| Town | Bridge |\n| --- | --- |\n| Wrenford | Seven Arches Bridge, 1791 |"
    assert excerpt(row, "When was the bridge at Wrenford built?", 20) == row  # a row keeps its header


@pytest.mark.parametrize("text", ["東京へいきます", "ひらがなカタカナ", "서울에갑니다", "長江是河流"])
def test_japanese_and_korean_are_read_a_character_at_a_time_as_chinese_is(text):
    """kvqa.languages.UNSPACED: kana and Hangul written without spaces are ranked and matched by their characters."""
    assert [word for word, _, _ in units(text)] == list(text)


def test_a_chinese_excerpt_weighs_its_characters_as_passages_do():
    text = ("青石镇茶叶专业合作社位于云岭山脉东麓，成立于2009年。合作社主要生产绿茶和红茶，每年四月举办开茶节。"
            "合作社现有社员三百一十二户。")
    for chars in (40, 60, 100):
        found = excerpt(text, "合作社每年几月举办开茶节？", chars)
        assert found in text and _weighed(found) <= chars
    assert excerpt(text, "合作社每年几月举办开茶节？", 60) == "合作社主要生产绿茶和红茶，每年四月举办开茶节。"


def test_excerpts_never_pass_their_length_and_are_pieces_of_the_passage():
    import random
    rng = random.Random(7)
    words = "bridge river market cheese 1791 Pryce, engineer. long; stone: 合作社 开茶节。 wool".split()
    for _ in range(300):
        passage = " ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
        chars = rng.randint(8, 200)
        found = excerpt(passage, "Who built the stone bridge over the river?", chars)
        assert found and found in passage
        assert _weighed(found) <= chars or _weighed(passage) <= chars or " " not in found.strip()


def test_a_question_quotes_excerpts_when_told_to():
    asked = QuestionTurn("Who was the engineer who designed it?", passages=((3, BRIDGE, 2.0), (1, HISTORY, 1.0)))
    assert asked.quotes(1) == [BRIDGE] and asked.quotes(1, chars=0) == [BRIDGE]
    assert asked.quotes(1, chars=120) == [excerpt(BRIDGE, asked.text, 120)]
    assert asked.quotes(2, order=[1, 3], chars=120) == [excerpt(HISTORY, asked.text, 120),
                                                      excerpt(BRIDGE, asked.text, 120)]


# --- the question's turn ---

def test_question_turn_quotes_in_the_question_language():
    assert question_turn("Why?") == "Why?"
    english = question_turn("Who designed it?", ["It was designed by Hester Pryce."])
    assert english.index("Hester Pryce") < english.index("Who designed it?")
    chinese = question_turn("谁设计的？", ["由林秀英设计。"])
    assert "由林秀英设计。" in chinese and "问题：谁设计的？" in chinese and "中文" in chinese


def test_quotes_that_do_not_fit_are_dropped_not_refused(tiny_lm):
    prompt = kvqa.prompt.ChatPrompt.for_tokenizer(tiny_lm.tokenizer)
    plain = prompt.question_ids("Who designed it?", limit=64)
    long_quote = "The bridge was designed with great care. " * 40
    assert prompt.question_ids("Who designed it?", limit=64, quotes=[long_quote]) == plain
    quoted = prompt.question_ids("Who designed it?", limit=512, quotes=["Hester Pryce designed it."])
    assert len(quoted) > len(plain)


@pytest.mark.parametrize("chars", [0, 90])  # the whole passage, its best sentence
def test_quoted_answers_equal_a_recompute_and_leave_the_cache_as_it_was(tiny_lm, chars):
    document = document_from_text(HISTORY)
    config = kvqa.Config.of(max_new_tokens=12, quote_passages=1, quote_chars=chars)
    engine = kvqa.LocalEngine(config, lm=tiny_lm)
    doc = engine.prefill(document)
    before = doc.cache.length
    for question in ("Who designed the Seven Arches Bridge?", "On which day is the market held?"):
        cached = ask(engine, doc, question).answer
        whole = ask_without_cache(engine, document, question, prompt=doc.prompt).answer
        assert cached.token_ids == whole.token_ids and cached.question == question
        unquoted = kvqa.LocalEngine(kvqa.Config.of(max_new_tokens=12, quote_passages=0), lm=tiny_lm)
        assert cached.timings.question_tokens > ask(unquoted, doc, question).answer.timings.question_tokens
        assert doc.cache.length == before


# --- loops and characters ---

def test_a_list_that_counts_up_is_a_loop(default_lm):
    tok = default_lm.tokenizer
    digits = number_tokens(tok)
    ids = tok("".join(f"{n}. It takes a structure that is defined by the structure name.\n" for n in range(2, 8)),
              add_special_tokens=False)["input_ids"]
    assert decode.is_looping(ids, 12, digits=digits)
    assert not decode.is_looping(ids, 12)  # without the number rule the counter hides the repetition
    prose = tok("In 1791 the bridge opened; in 1802 it was widened, and in 1958 a second span was added for trains.",
                add_special_tokens=False)["input_ids"]
    assert not decode.is_looping(prose, 12, digits=digits)


def test_the_token_limit_never_leaves_half_a_character(tiny_lm, monkeypatch):
    tok = tiny_lm.tokenizer
    ids = tok("答案是茶", add_special_tokens=False)["input_ids"]
    cut = next(n for n in range(1, len(ids))  # mid-character, after at least one whole one
               if tok.decode(ids[:n]).endswith("\ufffd") and tok.decode(ids[:n]).rstrip("\ufffd"))
    script = iter(ids)
    monkeypatch.setattr(decode, "choose", lambda logits, temperature, generator: next(script))
    doc = kvqa.prefill(tiny_lm, document_from_text("A document."), config=kvqa.Config.of(max_new_tokens=cut))
    answer = kvqa.answer(tiny_lm, doc, "What?", max_new_tokens=cut, draft_tokens=0)
    assert answer.stop_reason == "length" and len(answer.token_ids) == cut
    assert answer.text and not answer.text.endswith("\ufffd") and "答案是茶".startswith(answer.text)


# --- what the document lacks ---

@pytest.mark.parametrize("answer, missing", [
    ("The Seven Arches Bridge was designed by Josiah Farrar in 1802.", ("1802", "Josiah", "Farrar")),
    ("It was designed by Hester Pryce and completed in 1791.", ()),
    ("The bridge is 120 metres long.", ()),
    ("1. It is on the River Ashe.\n2. It was recorded in 1214.", ()),  # list numbers are not figures
    ("About 1.2 billion people live in Wrenford.", ("1.2",)),
    ("Bridge", ()),  # a capitalised first word is not a name
    ("开茶节在四月，共有2000名游客。", ("2000",)),
])
def test_unsupported_lists_what_the_document_does_not_say(answer, missing):
    assert unsupported(answer, HISTORY, "Who designed the bridge?") == missing


def test_answers_carry_what_the_document_lacks(tiny_lm, monkeypatch):
    said = tiny_lm.tokenizer("Built in 1802.", add_special_tokens=False)["input_ids"]
    script = itertools.chain(said, itertools.repeat(next(iter(tiny_lm.eos_ids))))
    monkeypatch.setattr(decode, "choose", lambda logits, temperature, generator: next(script))
    doc = kvqa.prefill(tiny_lm, document_from_text(HISTORY), config=kvqa.Config.of(max_new_tokens=16))
    answer = kvqa.answer(tiny_lm, doc, "When was the bridge built?", draft_tokens=0)
    assert answer.text == "Built in 1802." and answer.unsupported == ("1802",)


COMPLETED = "The new stone bridge, known ever since as the Seven Arches Bridge, was completed in 1791."


@pytest.mark.parametrize("answer, flagged", [
    ("It was completed in 1791.", ()),  # the quoted passage's own year
    ("It was completed in 1302.", ("1302",)),  # the market's year: in the document, not in the passage quoted
    ("It was completed in 1802.", ()),  # in no passage of the document: unsupported's to say, not this
    ("It took 7 years, from 1214 to 1791.", ("1214",)),
    ("1. It was completed in 1791.", ()),  # a list's number is no figure
    ("建于1302年。", ("1302",)),
])
def test_a_number_the_document_has_but_not_the_quoted_passage_is_flagged(answer, flagged):
    assert unquoted(answer, [COMPLETED], HISTORY, "When was the bridge completed?") == flagged
    assert unquoted(answer, [], HISTORY) == ()  # nothing quoted: nothing to check against
    assert unquoted("In 1302?", [COMPLETED], HISTORY, "Was it 1302?") == ()  # the question's own number


@pytest.mark.parametrize("said, flagged", [("Completed in 1791.", ()), ("Completed in 1302.", ("1302",))])
def test_an_answers_figures_are_checked_against_the_passage_its_turn_quoted(said, flagged, tiny_lm, monkeypatch):
    """Through kvqa.ask on a model: the quoted passage is the one the question's turn held (BM25's best here); a
    figure from it is kept, one from another passage of the document is flagged, in the Answer and in the export."""
    ids = tiny_lm.tokenizer(said, add_special_tokens=False)["input_ids"]
    script = itertools.chain(ids, itertools.repeat(next(iter(tiny_lm.eos_ids))))
    monkeypatch.setattr(decode, "choose", lambda logits, temperature, generator: next(script))
    doc = kvqa.prefill(tiny_lm, document_from_text(HISTORY), config=kvqa.Config.of(max_new_tokens=16))
    answer = kvqa.answer(tiny_lm, doc, "When was the Seven Arches Bridge completed?", draft_tokens=0,
                         quote_passages=1, quote_chars=0)
    assert answer.text == said and answer.unquoted == flagged and answer.unsupported == ()
    assert "1791" in answer.sources[0].text  # the passage quoted is the first source shown


@pytest.mark.parametrize("answer, found", [
    ("The document states that the bridge was designed by Hester Pryce.", "Hester Pryce"),  # its words, not the frame
    ("It was completed in 1791.", "completed in 1791"),
    ("The Seven Arches Bridge.", None),  # only the question's words: nothing of its own to point at
    ("It was designed by Josiah Farrar.", None),  # its own words are not in the passage
    ("大桥由Hester Pryce设计。", "Hester Pryce"),
])
def test_the_answers_own_words_are_found_in_its_source(answer, found):
    span = answer_span(HISTORY, 0, len(HISTORY), answer, "Who designed the Seven Arches Bridge?")
    assert (HISTORY[span[0]:span[1]] if span else None) == found


def test_a_chinese_answers_characters_are_found_in_its_source():
    text = "芙蓉洞于1994年正式对外开放，是国家AAAA级景区。"
    span = answer_span(text, 0, len(text), "芙蓉洞于1994年开放。", "芙蓉洞什么时候开放？")
    assert text[span[0]:span[1]] == "于1994年"  # the question's characters at its ends left out
    assert answer_span(text, 0, len(text), "芙蓉洞的开放时间是1993年。", "芙蓉洞什么时候开放？") is None  # 年 alone
    source = find_sources(text, "芙蓉洞于1994年开放。", "芙蓉洞什么时候开放？")[0]
    assert source.answered == "于1994年" and source_dict(source)["answer_start"] == span[0]


# --- shown under the answer ---

@pytest.mark.parametrize("lang, heading, warning", [("en", "From the document, page 3:", "Not found in the document"),
                                                    ("zh", "文档原文，第 3 页：", "文档中找不到")])
def test_the_first_source_is_shown_with_its_sentence_marked_and_the_rest_folded(lang, heading, warning):
    from kvqa.ui.answers import sources_block

    found = find_sources(HISTORY, "The engineer Hester Pryce.", "Who designed the Seven Arches Bridge?")
    sources = [kvqa.evidence.sources.Source(**{**s.__dict__, "page": 3}) for s in found]
    block = sources_block(sources, lang, ("Farrar",))
    shown, folded = block.split("<details", 1)
    assert heading in shown and "<mark>It was designed by the " in shown  # the sentence, and the answer's words in it
    assert "<strong class='kvqa-answer'>engineer Hester Pryce</strong>, one of the few women" in shown
    assert warning in shown and "Farrar" in shown
    assert folded.count("<li>") == len(sources)
    assert sources_block((), lang) == ""
    assert "<mark>" not in sources_block((), lang, ())
    flagged = sources_block(sources, lang, (), ("1302",))
    said = "Not in the passage quoted to the model" if lang == "en" else "引用给模型的段落中没有"
    assert "1302" in flagged and said in flagged
