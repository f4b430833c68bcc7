"""A question on a long document read in parts sees the whole document: its quotes and sources come from every part
(each source naming its part), the passage its part's cache cannot see is quoted beside it, and a two-hop question's
bridge (a name in its best passage) leads to the passage about that name, wherever it lies. A document read whole
is quoted and sourced as before. The fake engine reads at most `context_tokens` words; no model is loaded."""

from __future__ import annotations

from fakes import FakeEngine
from kvqa.documents.parts import offsets
from kvqa.documents.reading import document_from_text
from kvqa.evidence.evidence import Evidence
from kvqa.evidence.sources import names
from kvqa.session.session import Session

FILLER = ["The harbour ferry left at dawn and the gulls followed it out past the breakwater.",
          "Orchards on the hill grew apples, pears and a few late plums every autumn.",
          "The railway viaduct was built of granite quarried from the valley floor.",
          "Weavers at the museum restored a tapestry showing a hunting scene.",
          "Meltwater from the glacier fed a chain of small lakes below the pass.",
          "The bakery fired its ovens before sunrise to have bread ready by six."]

FILM = ("## Kiss and Tell\n\nKiss and Tell is a 1945 comedy film in which the teenage Corliss Archer is played by "
        "Shirley Temple, with Jerome Courtland as her boyfriend.")
ACTRESS = ("## Shirley Temple\n\nShirley Temple Black was an actress who later served as United States Ambassador "
           "to Ghana and to Czechoslovakia.")
QUESTION = "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"


def knowledge_base() -> str:
    """The film's paragraph first, then filler, then the actress's paragraph last: parts apart."""
    filler = [f"## Note {n}\n\n" + " ".join(FILLER[(n + k) % len(FILLER)] for k in range(3)) for n in range(12)]
    return "\n\n".join([FILM, *filler, ACTRESS])


def in_parts(text: str, context_tokens: int = 160) -> tuple[FakeEngine, Session]:
    engine = FakeEngine(context_tokens=context_tokens)
    session = Session(engine)
    session.load(document_from_text(text, name="kb.md"))
    return engine, session


def test_names_are_runs_of_capitalised_words_without_a_lone_stopword():
    found = names("In 1945 The film starred Shirley Temple. The University of Oxford and Ghana.")
    assert "Shirley Temple" in found and "University of Oxford" in found and "Ghana" in found
    assert "In" not in found and "The" not in found
    assert names("白茶是一种茶。") == []  # no capitals in Chinese: no second hop there


def test_the_bridge_passage_in_another_part_is_quoted_and_the_sources_name_their_parts():
    text = knowledge_base()
    _, session = in_parts(text)
    assert len(session.parts) >= 3
    answer = session.ask(QUESTION).answer
    read = session.document
    assert "Kiss and Tell" in read.text and "Ambassador" not in read.text  # routed to the film's part
    assert any("Ambassador to Ghana" in quote for quote in answer.quoted), answer.quoted  # the second hop, elsewhere
    assert answer.sources
    for source in answer.sources:
        first, last, _ = session.parts[source.part - 1]
        start, end = offsets(session.whole, first, last)
        assert start <= source.start < end and text[source.start: source.end] == source.text


def test_a_passage_outside_the_part_that_matches_the_question_is_quoted_beside_its_best():
    text = knowledge_base().replace(ACTRESS, ACTRESS + " Corliss Archer was her best known role on film.")
    evidence_parts = in_parts(text)[1].parts
    evidence = Evidence.of(document_from_text(text, name="kb.md"), QUESTION, evidence_parts)
    film_part = next(i for i, (a, b, _) in enumerate(evidence_parts) if "Kiss and Tell" in text[a - 1: b])
    read_doc = _part(text, evidence_parts[film_part])
    found = evidence.on(read_doc).elsewhere()
    assert found and all(text.index(quoted.strip()[:30]) >= len(read_doc.text) for _, quoted, _ in found)


def test_a_document_read_whole_quotes_and_sources_as_before():
    text = knowledge_base()
    engine, session = in_parts(text, context_tokens=100_000)
    assert len(session.parts) == 1
    answer = session.ask(QUESTION).answer
    evidence = Evidence.of(session.whole, QUESTION)
    assert evidence.parts == () and evidence.on(session.document).elsewhere() == ()
    assert all(source.part is None for source in answer.sources)
    assert len(answer.quoted) == engine.options.quote_passages  # its best passage only, as before


def test_a_pinned_range_keeps_its_quotes_and_sources_inside_it():
    text = knowledge_base()
    engine, session = in_parts(text)
    first, last, _ = session.parts[0]
    pinned = Session(engine)
    pinned.load(document_from_text(text, name="kb.md"), part=session.document.part)
    answer = pinned.ask(QUESTION).answer
    assert pinned.parts.pinned and all(source.part is None for source in answer.sources)
    assert all(source.end <= len(pinned.document.text) for source in answer.sources)
    assert not any("Ambassador" in quote for quote in answer.quoted)


def _part(text: str, span: tuple[int, int, int]):
    from kvqa.documents.parts import select
    document = document_from_text(text, name="kb.md")
    return select(document, span[0], span[1])
