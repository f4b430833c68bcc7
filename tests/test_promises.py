"""The promises a hand mutation audit found untested (docs/testing.md, "Mutation audit, 2026-12-07"), each through
the public rule or the session and the app's handlers, with fakes only at the engine seam: which model reads a long
document (one that reads its language, the room for the prompt and the question counted), when a document or a
question counts as Chinese, a composed answer's runs in the document's order within its budget, the part and page a
source names, the old session kept until the new model's read succeeded, and a model chosen in the list kept."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pytest

import app
from fakes import FakeEngine
from kvqa.config import Config, Decoding
from kvqa.documents.parts import asked_range
from kvqa.documents.reading import Document, document_from_text
from kvqa.engines.base import EngineInfo
from kvqa.errors import DocumentTooLong, OutOfMemory
from kvqa.evidence.evidence import Evidence
from kvqa.evidence.routing import ALSO_MATCHES, also_matching, passage_shares
from kvqa.messages import Message
from kvqa.model import offline
from kvqa.model.presets import ROOM_AROUND, chinese_reason, estimated_tokens, reading_model, unread_question
from kvqa.prompt import asked_in_chinese, holds_chinese, mostly_chinese
from kvqa.results import PrefilledDocument, ServerPrefix
from kvqa.session.session import Session

# ---- which model reads a document: its language first, then its length (kvqa.model.presets.reading_model)

ENGLISH_MODEL, CHINESE_MODEL = offline.SMOLLM2, offline.GEMMA3  # 8k tokens, English; 32k tokens, Chinese too
LONG_ENGLISH = replace(ENGLISH_MODEL, name="long-english-reader", context=131_072)  # reads no Chinese
LONG_CHINESE = replace(CHINESE_MODEL, name="long-chinese-reader", context=131_072)

ZH = "青石茶叶合作社成立于二〇〇八年，位于青石镇老粮站。合作社有社员一百二十户，主要种植绿茶和白茶。"
EN = "The cooperative was founded in 2008 at the old grain station. "
HARBOUR = "The harbour office keeps the tide tables for every berth, and the pilots log each crossing in the ledger. "


def english(tokens: int) -> str:
    """English text that estimated_tokens() counts as exactly `tokens` tokens."""
    text = (HARBOUR * (4 * tokens // len(HARBOUR) + 1))[: 4 * tokens]
    assert estimated_tokens(text) == tokens
    return text


@pytest.fixture
def lineup(monkeypatch, tmp_path):
    """install(*models): these offline models, and only these, installed here (in this order); the settings of an
    app started on the default model without naming it."""
    def install(*models) -> Config:
        monkeypatch.setattr(offline, "OFFLINE", tuple(models))
        monkeypatch.setenv("KVQA_OFFLINE_MODELS", ",".join(m.name for m in models))  # the models kvqa may choose
        monkeypatch.setattr(offline, "installed", lambda model, cache_dir: True)
        return Config.of(cache_dir=tmp_path, model_reason=Message("reason.default"))
    return install


def chosen(config: Config, model: str, text: str, **asked) -> tuple[str, str] | None:
    """The model that reads `text` instead of `model`, and its reason's id; None: `model` keeps it."""
    found = reading_model(config.replaced(model=model), text, **asked)
    return None if found is None else (found[0], found[1].key)


def test_a_long_chinese_document_never_goes_to_a_longer_model_that_reads_no_chinese(lineup):
    config = lineup(ENGLISH_MODEL, LONG_ENGLISH, CHINESE_MODEL)
    chinese = (ZH * 1000)[:40_000]  # 40,000 ideographs: more than the Chinese model reads at once
    assert mostly_chinese(chinese) and estimated_tokens(chinese) + ROOM_AROUND > CHINESE_MODEL.context
    assert chosen(config, CHINESE_MODEL.name, chinese) is None  # read in parts by the model that reads it
    assert chosen(config, ENGLISH_MODEL.name, chinese) == (CHINESE_MODEL.name, "reason.reads_chinese")
    assert chosen(config, ENGLISH_MODEL.name, english(40_000)) == (LONG_ENGLISH.name, "reason.long_document")
    config = lineup(ENGLISH_MODEL, LONG_ENGLISH, CHINESE_MODEL, LONG_CHINESE)  # one that reads it whole
    assert chosen(config, CHINESE_MODEL.name, chinese) == (LONG_CHINESE.name, "reason.long_document")


def test_the_room_for_the_prompt_and_the_question_counts_when_a_model_holds_a_document(lineup):
    config = lineup(ENGLISH_MODEL, CHINESE_MODEL)
    room = ENGLISH_MODEL.context - ROOM_AROUND
    assert chosen(config, ENGLISH_MODEL.name, english(room)) is None  # exactly fits, with the room
    assert chosen(config, ENGLISH_MODEL.name, english(room + 1)) == (CHINESE_MODEL.name, "reason.long_document")
    assert chosen(config, ENGLISH_MODEL.name, english(ENGLISH_MODEL.context)) == (CHINESE_MODEL.name,
                                                                                 "reason.long_document")
    # the other model's context counts the room too: a loaded one that holds the text but not the room is no better
    text = english(20_000)
    assert chosen(config, ENGLISH_MODEL.name, text, contexts={CHINESE_MODEL.name: 20_000}) is None
    assert chosen(config, ENGLISH_MODEL.name, text, contexts={CHINESE_MODEL.name: 20_000 + ROOM_AROUND}) == (
        CHINESE_MODEL.name, "reason.long_document")


# ---- when a document, a page or a question counts as Chinese (kvqa.prompt, presets.chinese_reason)


def test_chinese_passages_late_in_a_document_count_when_the_page_is_in_chinese(lineup):
    config = lineup(ENGLISH_MODEL, CHINESE_MODEL)
    text = (HARBOUR * 100)[:10_000] + "\n\n" + (ZH * 100)[:2_500]  # English, then Chinese after 10,000 characters
    assert not holds_chinese(text[:8_000]) and not mostly_chinese(text)
    assert estimated_tokens(text) + ROOM_AROUND <= ENGLISH_MODEL.context  # short: only the language can switch it
    assert holds_chinese(text)
    assert chinese_reason(text, page_lang="zh") == "reason.asks_chinese"
    assert chinese_reason(text, page_lang="en") is None and chinese_reason(text) is None
    assert chosen(config, ENGLISH_MODEL.name, text, page_lang="zh") == (CHINESE_MODEL.name, "reason.asks_chinese")
    assert chosen(config, ENGLISH_MODEL.name, text, page_lang="en") is None


def test_a_document_between_a_third_and_a_half_chinese_is_chinese(lineup):
    config = lineup(ENGLISH_MODEL, CHINESE_MODEL)
    share = SimpleNamespace(of=lambda text: len([c for c in text if "\u4e00" <= c <= "\u9fff"])
                            / sum(c.isalpha() for c in text))
    mixed = (ZH + " " + EN) * 20  # 47% of its letters are ideographs
    assert 1 / 3 < share.of(mixed[:4000]) < 1 / 2
    assert mostly_chinese(mixed) and chinese_reason(mixed) == "reason.reads_chinese"
    assert chosen(config, ENGLISH_MODEL.name, mixed) == (CHINESE_MODEL.name, "reason.reads_chinese")
    less = (ZH + " " + EN * 2) * 20  # 31%: English with Chinese in it
    assert share.of(less[:4000]) < 1 / 3
    assert not mostly_chinese(less) and chinese_reason(less) is None
    assert chosen(config, ENGLISH_MODEL.name, less) is None


def test_a_question_with_as_many_chinese_words_as_others_is_not_chinese(lineup):
    config = lineup(ENGLISH_MODEL, CHINESE_MODEL)
    document = HARBOUR * 10
    tied = "Where is 青石镇 located?"  # three ideographs, three English words: English quoting a Chinese name
    assert not asked_in_chinese(tied) and chinese_reason(document, questions=[tied]) is None
    assert chosen(config, ENGLISH_MODEL.name, document, questions=[tied]) is None
    assert unread_question(ENGLISH_MODEL.name, tied) is None  # a chosen English model answers it too
    more = "Where is 青石镇老粮站?"  # more ideographs than words: Chinese
    assert asked_in_chinese(more) and chinese_reason(document, questions=[more]) == "reason.question_chinese"
    assert chosen(config, ENGLISH_MODEL.name, document, questions=[more]) == (CHINESE_MODEL.name,
                                                                             "reason.question_chinese")


def test_a_short_question_with_as_many_chinese_words_as_others_is_not_chinese_either(lineup):
    config = lineup(ENGLISH_MODEL, CHINESE_MODEL)
    tied = "Is 白茶 ok?"  # two ideographs, two English words
    assert not asked_in_chinese(tied) and unread_question(ENGLISH_MODEL.name, tied) is None
    assert chosen(config, ENGLISH_MODEL.name, HARBOUR * 10, questions=[tied]) is None


# ---- a composed answer (kvqa.session.gather): its runs in the document's order, within the part's budget


class ComposingEngine(FakeEngine):
    """The fake engine, composing: a read's ids are its words (and the prompt around them), a run is the words of a
    span, a composed read holds the runs' text in the order given and is refused (DocumentTooLong) past the
    context, as the real engines refuse it. Each composed read is kept (composed)."""

    def __init__(self, gather_tokens: int, context_tokens: int):
        super().__init__(context_tokens, keeps_caches=True)
        self.options = Decoding(gather_tokens=gather_tokens)
        self.composed: list[PrefilledDocument] = []

    @property
    def info(self) -> EngineInfo:
        return replace(super().info, composes=True)

    def prefill(self, document, *, progress=None, admit=None) -> PrefilledDocument:
        read = super().prefill(document, progress=progress, admit=admit)
        read.ids = tuple(range(self.count_tokens(document.text) + self.OVERHEAD))
        return read

    def cut(self, read, spans):
        return [SimpleNamespace(text=read.document.text[a:b], ids=tuple(range(self.count_tokens(
            read.document.text[a:b])))) for a, b in spans]

    def compose(self, like, runs, document) -> PrefilledDocument:
        tokens = self.OVERHEAD + sum(len(run.ids) for run in runs)
        if tokens > self.context_tokens:
            raise DocumentTooLong("too_long.tokens", tokens=tokens, limit=self.context_tokens,
                                  context=self.context_tokens, reserve=0, over=tokens - self.context_tokens)
        composed = PrefilledDocument(
            document=replace(document, text="".join(run.text for run in runs)), prompt=None,
            ids=tuple(range(tokens)), cache=ServerPrefix("", tokens), cache_bytes=tokens, prefill_s=0.0,
            model_name="fake", max_question_tokens=512, max_new_tokens=64, origin="composed")
        self.composed.append(composed)
        return composed


CODEWORDS = "\n\n".join(f"Section {n} names the codeword marigold{n}. " + "The harbour wall was repaired. " * 12
                        for n in range(27))  # 27 paragraphs of 41 words: five parts at 400 tokens
BOTH = "Which sections name the codewords marigold1 and marigold25?"  # in the first part and the last


def composing_session(gather_tokens: int) -> tuple[ComposingEngine, Session]:
    engine = ComposingEngine(gather_tokens, context_tokens=400)
    session = Session(engine)
    session.load(document_from_text(CODEWORDS, name="codewords.txt"))
    session.read_ahead()
    assert len(session.parts) > 2 and session.parts.ready == len(session.parts)
    return engine, session


def test_a_composed_answer_holds_its_runs_in_the_documents_order():
    engine, session = composing_session(gather_tokens=300)
    session.ask(BOTH).answer  # noqa: B018 - runs the answer
    composed = session.turns[-1].composed
    assert composed is not None and len(composed.numbers) >= 2
    starts = [start for start, _, _ in composed.held]
    assert starts == sorted(starts)  # the runs as the document has them
    assert [part for *_, part in composed.held] == sorted(part for *_, part in composed.held)
    text = engine.composed[-1].document.text  # what the composed cache holds, in its order
    assert text == "".join(session.whole.text[a:b] for a, b, _ in composed.held)
    assert text.index("marigold1.") < text.index("marigold25.")


def test_a_composed_budget_larger_than_the_part_composes_what_fits():
    engine, session = composing_session(gather_tokens=10**6)  # more than a part, more than the model reads
    answer = session.ask(BOTH).answer
    composed = session.turns[-1].composed
    assert answer.used_cache and composed is not None and len(composed.numbers) >= 2
    part = session.prefilled  # the part the question went to
    assert composed.tokens <= len(part.ids) <= engine.context_tokens


# ---- the part and the page a source names (kvqa.evidence.evidence, kvqa.documents.parts)

TOPICS = ["lighthouse keeper pelican", "ferry timetable harbour", "orchard apples pears", "railway viaduct granite",
          "museum tapestry weavers", "glacier meltwater valley", "bakery sourdough ovens",
          "observatory telescope comet"]
SECTIONS = "\n\n".join(f"Section {n} is about the {topic}. " + " ".join(f"filler{n}w{i}" for i in range(40))
                       for n, topic in enumerate(TOPICS))


def test_a_source_in_text_two_parts_share_names_the_part_read():
    session = Session(FakeEngine(context_tokens=120))
    session.load(document_from_text(SECTIONS, name="sections.txt"))
    whole, parts = session.whole, session.parts
    assert len(parts) >= 3
    (first1, last1, _), (first2, last2, _), (first3, _, _) = parts[0], parts[1], parts[2]

    def sections(first: int, last: int) -> set[int]:
        return {int(n) for n in whole.text[first - 1: last].split("Section ")[1:] for n in [n.split()[0]]}

    shared = sections(first2, last1)  # the paragraph parts 1 and 2 share
    assert len(shared) == 1
    (common,) = shared
    only_first = min(sections(first1, last1) - sections(first2, last2))
    only_second = min(sections(first2, last2) - sections(first1, last1) - sections(first3, len(whole.text)))

    def source_part(topic: int) -> int:
        answer = session.ask(f"What is said about the {TOPICS[topic].split()[1]}?").answer
        assert answer.sources and f"Section {topic} is about" in answer.sources[0].text
        return answer.sources[0].part

    assert source_part(only_second) == 2 and session.part_index == 1
    assert source_part(common) == 2 and session.part_index == 1  # stays in part 2, which holds it too: named so
    assert source_part(only_first) == 1 and session.part_index == 0
    assert source_part(common) == 1 and session.part_index == 0
    # a composed read: the part its run there was taken from
    spans = [(first, last, 0) for first, last, _ in parts]
    evidence = Evidence.of(whole, "What about the timetable?", spans).on(session.document)
    offset = whole.text.index(f"Section {common} is about")
    assert evidence.part_at(offset) == 1
    assert evidence.on(session.document, held=[(offset, offset + 50, 1)]).part_at(offset) == 2


def test_a_passage_across_two_parts_counts_for_each_by_its_share_and_an_equal_share_is_named():
    """Survivors of mutmut on kvqa/evidence/routing.py (docs/testing.md): the shares' maths and ALSO_MATCHES's edge."""
    spans = [(0, 100), (100, 200), (200, 300)]
    assert passage_shares([(4.0, 80, 120)], spans) == [(4.0, [0.5, 0.5, 0.0])]
    assert also_matching([(10.0, [1, 0]), (10.0 * ALSO_MATCHES, [0, 1])], 0) == 1  # exactly the share: named
    assert also_matching([(10.0, [1, 0]), (10.0 * ALSO_MATCHES - 0.01, [0, 1])], 0) is None


def test_sources_of_a_range_that_starts_inside_a_page_name_its_pages():
    pages = ["The museum opens at nine. " * 20,
             "The ferry timetable changes in May. " * 12 + "The lighthouse keeper is named Ada Brennan. "
             + "The ferry timetable changes in May. " * 12,
             "The orchard grows apples and pears. " * 20]
    text, starts = "", []
    for n, page in enumerate(pages, start=1):
        starts.append(len(text))
        text += f"[Page {n}]\n{page}\n\n"
    document = Document(name="guide.pdf", text=text, pages=len(pages), page_starts=tuple(starts))
    middle = starts[1] + len(pages[1]) // 3  # inside page 2, after its "[Page 2]" line
    part = asked_range(document, pages=None, chars=f"{middle + 1}-{len(text)}")  # kvqa ask --chars N-
    session = Session(FakeEngine())
    session.load(document, part=part)
    assert session.document.part.pages == (2, 3) and "[Page 2]" not in session.document.text
    answer = session.ask("Who is the lighthouse keeper?").answer
    assert answer.sources and "Ada Brennan" in answer.sources[0].text and answer.sources[0].page == 2
    answer = session.ask("What does the orchard grow?").answer
    assert answer.sources and "orchard" in answer.sources[0].text and answer.sources[0].page == 3


# ---- switching models: the old session kept until the new read succeeded; a model chosen in the list kept

ENGLISH_DOC = "The Lumaro CP-40 press holds 1.2 litres. Its frame is guaranteed for 24 months. " * 8
CHINESE_DOC = ZH * 8
ASKED = "How much does the press hold?"
ASKED_IN_CHINESE = "压榨机能装多少？"


@pytest.fixture
def two_models(monkeypatch, tmp_path):
    """The app on the English default, with the offline model that reads Chinese offered and loaded (fakes)."""
    monkeypatch.setattr(offline, "installed",
                        lambda model, cache_dir: model.name in (ENGLISH_MODEL.name, CHINESE_MODEL.name))
    default = FakeEngine(model=ENGLISH_MODEL.name)
    chinese = FakeEngine(context_tokens=32_768, model=CHINESE_MODEL.name)
    ui = app.KvqaApp(Config.of(cache_dir=tmp_path), default, models=[CHINESE_MODEL.name])
    ui.service._engines[CHINESE_MODEL.name] = chinese
    sessions = []
    yield SimpleNamespace(ui=ui, default=default, chinese=chinese, sessions=sessions)
    for session in sessions:
        session.close()


def tab() -> SimpleNamespace:
    """What Gradio hands a handler: its tab's session hash and the client's address."""
    return SimpleNamespace(session_hash=f"tab-{id(object())}", headers={}, client=SimpleNamespace(host="10.1.2.5"))


def asked(ui, session, question: str, request, lang: str = "en") -> list[dict]:
    """A question typed into the page and answered: every output the handler gives."""
    ui.questions.on_question(question, session, lang, request)
    return list(ui.questions.on_answer(session, False, False, lang, False, request))


def out_of_memory(document, chunk):
    raise OutOfMemory("memory.out", doing=Message("doing.reading"))


def english_session(models, request) -> Session:
    """An English document read by the default, one question answered."""
    session = models.ui.reads.on_paste(ENGLISH_DOC, None, request=request)[models.ui.page.state]
    models.sessions.append(session)
    session = asked(models.ui, session, ASKED, request)[-1][models.ui.page.state]
    assert session.engine is models.default and [t.question for t in session.turns] == [ASKED]
    return session


def kept(session: Session) -> bool:
    """The session still holds its document, its cache and its chat."""
    return (not session.closed and session.prefilled is not None and session.document.text == ENGLISH_DOC
            and [t.question for t in session.turns] == [ASKED])


def test_a_failed_read_for_a_chinese_question_keeps_the_document_and_the_chat(two_models):
    ui, request = two_models.ui, tab()
    session = english_session(two_models, request)
    two_models.chinese.on_chunk = out_of_memory  # the model that reads Chinese runs out of memory reading it
    with pytest.warns(UserWarning):
        shown = asked(ui, session, ASKED_IN_CHINESE, request, "zh")
    assert shown[-1][ui.page.question] == ASKED_IN_CHINESE and ui.page.state not in shown[-1]
    assert kept(session)
    two_models.chinese.on_chunk = None  # asked again once it has room: switched, the chat carried over
    fresh = asked(ui, session, ASKED_IN_CHINESE, request, "zh")[-1][ui.page.state]
    two_models.sessions.append(fresh)
    assert fresh.engine is two_models.chinese and session.closed
    assert [t.question for t in fresh.turns] == [ASKED, ASKED_IN_CHINESE]


def test_a_failed_read_by_a_model_chosen_in_the_list_keeps_the_session(two_models):
    ui, request = two_models.ui, tab()
    session = english_session(two_models, request)
    two_models.chinese.on_chunk = out_of_memory
    with pytest.warns(UserWarning):
        shown = ui.reads.on_model(CHINESE_MODEL.name, session, request=request)
    assert shown[ui.page.model_box] == ENGLISH_MODEL.name and ui.page.state not in shown  # the list put back
    assert kept(session)
    assert asked(ui, session, "How long is the frame guaranteed?", request)[-1][ui.page.state] is session


def test_a_failed_read_of_a_chinese_document_keeps_the_english_one(two_models):
    ui, request = two_models.ui, tab()
    session = english_session(two_models, request)
    two_models.chinese.on_chunk = out_of_memory
    with pytest.warns(UserWarning):
        shown = ui.reads.on_paste(CHINESE_DOC, session, request=request)
    assert ui.page.state not in shown or shown[ui.page.state] is session
    assert kept(session)


def test_a_model_chosen_in_the_list_answers_a_chinese_question_itself_or_says_what_to_do(two_models):
    ui, request = two_models.ui, tab()
    session = english_session(two_models, request)
    assert ui.reads.on_model(ENGLISH_MODEL.name, session, request=request) == gr.skip()  # chosen, already reading
    with pytest.warns(UserWarning, match="gemma-3-270m"):
        shown = asked(ui, session, ASKED_IN_CHINESE, request, "zh")
    assert shown[-1][ui.page.question] == ASKED_IN_CHINESE  # back in its box: nothing switched, nothing read
    assert kept(session) and two_models.chinese.prefills == 0
    # chosen by switching to it in the list: the same
    other = ui.reads.on_model(CHINESE_MODEL.name, session, request=request)[ui.page.state]
    two_models.sessions.append(other)
    back = ui.reads.on_model(ENGLISH_MODEL.name, other, request=request)[ui.page.state]
    two_models.sessions.append(back)
    assert back.engine is two_models.default and other.closed
    reads = two_models.chinese.prefills
    with pytest.warns(UserWarning, match="gemma-3-270m"):
        asked(ui, back, ASKED_IN_CHINESE, request, "zh")
    assert not back.closed and back.engine is two_models.default and two_models.chinese.prefills == reads
    # the rule itself: a model the app's list names is kept
    config = ui.service.config.replaced(model=ENGLISH_MODEL.name, model_reason=Message("reason.app"))
    assert reading_model(config, ENGLISH_DOC, questions=[ASKED_IN_CHINESE]) is None
    assert reading_model(config, CHINESE_DOC, page_lang="zh") is None
