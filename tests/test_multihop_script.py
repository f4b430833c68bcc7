"""scripts/multihop.py without a model: the document it lays out from a multi-hop set (every gold paragraph in it,
at the offset it records), the sentence matcher that says whether a supporting sentence reached the cache, a quote
or a source, and the answer's SQuAD scoring."""

from __future__ import annotations

import json

from scripts import multihop

WORDS = lambda text: len(text.split())  # noqa: E731 - a tokenizer's stand-in: one token a word


def _row(n: int, answer: str = "gold", kind: str = "bridge") -> dict:
    """A question in HotpotQA's layout: two gold paragraphs and two distractors, one shared with every question."""
    return {"_id": f"q{n}", "question": f"Which thing did person {n} make?", "answer": answer, "type": kind,
            "level": "hard",
            "context": [[f"Person {n}", [f"Person {n} was born in town {n}.", f" Person {n} made the thing {n}."]],
                        [f"Thing {n}", [f"Thing {n} is a {answer} object built in year {n}.", " It is heavy."]],
                        [f"Distractor {n}", [f"Distractor {n} talks of nothing at all, at length."]],
                        ["Shared", ["A paragraph every question of this set carries."]]],
            "supporting_facts": [[f"Person {n}", 1], [f"Thing {n}", 0]]}


def test_the_document_holds_every_gold_paragraph_once_at_its_offset(tmp_path):
    path = tmp_path / "set.jsonl"
    rows = [_row(n) for n in range(6)] + [_row(6, answer="yes", kind="comparison")] + [_row(n) for n in range(7, 30)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    items = multihop.load_items(path)
    for order in ("shuffled", "file"):
        built = multihop.build_document(items, WORDS, 150, order=order, seed=3)
        assert sum(WORDS(multihop.block(*key)) for key in built.at) == built.counted >= 150
        assert [i.id for i in built.items] == [f"q{n}" for n in (0, 1, 2, 3, 4, 5, 7, 8)][:len(built.items)]
        assert "q6" not in {i.id for i in built.items}  # answered "yes": left out
        assert built.text.count("## Shared\n\n") == 1  # a paragraph that repeats is laid out once
        for item in built.items:
            golds = item.gold()
            assert [title for title, _, _ in golds] == [f"Person {item.id[1:]}", f"Thing {item.id[1:]}"]
            for title, text, sentences in golds:
                at = built.at[(title, text)]
                assert built.text[at:at + len(text)] == text
                assert built.text[:at].endswith(f"## {title}\n\n")
                assert all(s in text for s in sentences)
    file_order = multihop.build_document(items, WORDS, 150, order="file")
    assert file_order.text.startswith("## Person 0\n\nPerson 0 was born in town 0. Person 0 made the thing 0.\n\n")
    shuffled = multihop.build_document(items, WORDS, 150, order="shuffled", seed=3)
    assert shuffled.text != file_order.text and sorted(shuffled.at) == sorted(file_order.at)
    assert multihop.build_document(items, WORDS, 150, seed=3).text == shuffled.text  # the seed decides


def test_the_hugging_face_layout_reads_the_same(tmp_path):
    row = _row(1)
    hf = dict(row, context={"title": [t for t, _ in row["context"]], "sentences": [s for _, s in row["context"]]},
              supporting_facts={"title": ["Person 1", "Thing 1"], "sent_id": [1, 0]})
    (tmp_path / "a.json").write_text(json.dumps([row]))
    (tmp_path / "b.json").write_text(json.dumps([hf]))
    a, b = multihop.load_items(tmp_path / "a.json")[0], multihop.load_items(tmp_path / "b.json")[0]
    assert a.gold() == b.gold() == [("Person 1", "Person 1 was born in town 1. Person 1 made the thing 1.",
                                     ["Person 1 made the thing 1."]),
                                    ("Thing 1", "Thing 1 is a gold object built in year 1. It is heavy.",
                                     ["Thing 1 is a gold object built in year 1."])]


SENTENCE = ("Shirley Temple Black was an American actress, singer, dancer, businesswoman, and diplomat who was "
            "Hollywood's number one box-office draw as a child actress from 1935 to 1938.")


def test_a_supporting_sentence_is_reached_where_enough_of_it_appears():
    part = f"## Shirley Temple\n\n{SENTENCE} As an adult, she was named ambassador to Ghana.\n\n## Other\n\nText."
    assert multihop.reached(SENTENCE, part)
    assert multihop.reached(SENTENCE, part.upper().replace(" ", "  \n"))  # case and whitespace do not matter
    # a quote cut to its clauses (quote_chars): a long run of the sentence still counts
    trimmed = "who was Hollywood's number one box-office draw as a child actress from 1935 to 1938."
    assert len(trimmed) < 0.6 * len(SENTENCE) and multihop.reached(SENTENCE, ["another quote", trimmed])
    # a short clause of it does not
    assert not multihop.reached(SENTENCE, "Shirley Temple Black was an American actress, and more.")
    # a sentence of another paragraph sharing its subject does not
    other = ("Shirley Temple Black was an American ambassador to Czechoslovakia and Chief of Protocol of the "
             "United States from 1976 to 1977.")
    assert not multihop.reached(SENTENCE, f"## Shirley Temple (diplomat)\n\n{other}")
    # a short sentence must appear whole
    assert multihop.reached("He lives in Los Angeles.", "Scott Derrickson. He lives in Los Angeles, California.")
    assert not multihop.reached("He lives in Los Angeles, California.", "He lives in Los Angeles.")
    assert not multihop.reached(SENTENCE, []) and not multihop.reached("", part)


def test_a_paragraph_is_reached_when_one_of_its_supporting_sentences_is():
    sentences = [SENTENCE, "As an adult, she was named United States ambassador to Ghana and to Czechoslovakia."]
    assert multihop.paragraph_reached(sentences, "she was named United States ambassador to Ghana and to "
                                                 "Czechoslovakia, it says")
    assert not multihop.paragraph_reached(sentences, "Shirley Temple was an actress.")


def test_the_run_needed_and_the_longest_run():
    assert multihop.longest_run("abcdef", "xxcdexx") == 3
    assert multihop.longest_run("abc", "") == 0
    assert multihop.needed("x" * 30) == 30  # short: whole
    assert multihop.needed("x" * 50) == 40
    assert multihop.needed("x" * 100) == 60  # 60% of it
    assert multihop.needed("x" * 400) == 80  # long: 80 characters


def test_answers_are_scored_as_squad_scores_them():
    assert multihop.score("She was the Chief of Protocol.", "Chief of Protocol") == {"correct": True,
                                                                                       "exact": False, "f1": 0.75}
    assert multihop.score("the  chief of PROTOCOL!", "Chief of Protocol") == {"correct": True, "exact": True,
                                                                               "f1": 1.0}
    assert multihop.score("An ambassador", "Chief of Protocol") == {"correct": False, "exact": False, "f1": 0.0}


def test_parts_holding_a_paragraph():
    spans = [(0, 100), (90, 200), (190, 300)]
    assert multihop.parts_holding(95, 99, spans) == [1, 2]
    assert multihop.parts_holding(120, 195, spans) == [2]
    assert multihop.parts_holding(150, 250, spans) == []  # across a boundary: in no part whole


def _result(both_cache: bool, quoted: bool, neither: bool = False, **extra) -> dict:
    gold = [{"in_cache": not neither, "in_quote": False, "in_sources": False},
            {"in_cache": both_cache, "in_quote": quoted, "in_sources": True}]
    for g in gold:
        g["reached"] = g["in_cache"] or g["in_quote"] or g["in_sources"]
    row = {"type": "bridge", "gold": gold, "same_part": both_cache, "correct": quoted, "exact": False, "f1": 0.5,
           "ttft_s": 1.0, "answer_s": 2.0, "wall_s": 2.0, "read": "disk", "read_s": 0.1,
           "both_reached": all(g["reached"] for g in gold), "one_reached": True,
           "both_in_cache": all(g["in_cache"] for g in gold),
           "both_in_cache_or_quote": all(g["in_cache"] or g["in_quote"] for g in gold)}
    return row | extra


def test_the_summary_says_why_a_gold_paragraph_did_not_reach_the_model():
    rows = [_result(True, False), _result(False, True), _result(False, False), _result(False, False, neither=True)]
    summary = multihop.summary_of(rows)
    s = summary["all"]
    assert (s["questions"], s["both_in_cache"], s["both_in_cache_or_quote"], s["both_reached"]) == (4, 0.25, 0.5, 0.75)
    assert s["missed"] == {"questions": 2, "part read holds neither": 1,
                           "other paragraph in another part, not quoted": 1,
                           "of those, in the sources after the answer": 2}
    assert summary["same_part"]["questions"] == 1 and summary["different_parts"]["questions"] == 3
    assert any(line.startswith("all") for line in multihop.table(summary))


def test_the_summary_counts_composed_answers_and_their_composing_time():
    composed = dict(composed_parts=[1, 3], composed_s=0.9, composed_tokens=3000)
    alone = dict(composed_parts=None, composed_s=None, composed_tokens=None)
    rows = [_result(True, False, **composed), _result(False, True, **composed | {"composed_s": 1.5}),
            _result(False, False, **alone), _result(True, True, **alone)]
    s = multihop.summarise(rows)
    assert s["composed"] == 0.5 and s["median_composed_s"] == 1.2  # over the composed answers only
    assert any("composed cache 50%" in line and "1.20 s" in line for line in multihop.table(multihop.summary_of(rows)))
    assert multihop.summarise([_result(True, False)])["composed"] == 0.0  # rows of a run before composing
