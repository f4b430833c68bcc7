"""Documents nobody here wrote, as people have them (tests/data/public/SOURCES.md: the Python documentation's Logging
HOWTO, PSF licence; a chapter of The Debian Administrator's Handbook in its Chinese translation, with English passages
left in, CC BY-SA 3.0), each as one long web page and as a Word file without page breaks: one page longer than the
model reads, cut inside it into parts named by their page and opening words; each question is answered from a part,
its sources from every part, each naming its part. The small context makes several parts of each; the real models
read them in the CLI."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import kvqa
from kvqa.documents.parts import offsets
from kvqa.engines import LocalEngine
from kvqa.session.session import Session

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT / "tests" / "data" / "public"
QUESTIONS = json.loads((PUBLIC / "questions.json").read_text(encoding="utf-8"))
FILES = ["en-long.html", "en-long.docx", "zh-mixed.html", "zh-mixed.docx"]
CONFIG = kvqa.Config.of(max_question_tokens=200, max_new_tokens=4, chunk_size=512)


@pytest.fixture(scope="module")
def small(tiny_lm):
    """The real tokenizer, a tiny model, a 2,048-token context: each document is several parts."""
    return LocalEngine(CONFIG, lm=dataclasses.replace(tiny_lm, context_length=2048))


@pytest.mark.parametrize("name", FILES)
def test_one_long_page_is_read_in_parts_cut_inside_it_and_each_question_is_answered_from_one(small, name):
    document = kvqa.load_document(PUBLIC / name)
    assert len(document.page_starts) <= 1  # one page: a Word file without page breaks, one web page
    session = Session(small)
    session.load(document)
    whole, parts = session.whole, session.parts
    assert whole.in_characters and len(parts) >= 3
    spans = [offsets(whole, a, b) for a, b, _ in parts]
    assert spans[0][0] == 0 and spans[-1][1] == len(whole.text)
    assert all(a2 <= b1 for (_, b1), (a2, _) in zip(spans, spans[1:]))  # no character left between two parts
    part = session.document.part
    assert part.pages == (1, 1) and str(part.name).startswith(f"characters 1-{part.last:,} of {len(whole.text):,}")
    assert "(page 1, from “" in str(part.name)
    for q in (q for q in QUESTIONS if q["file"] == name):
        answer = session.ask(q["question"]).answer
        start, end = session.document.span
        assert session.document.text == whole.text[start:end]
        assert any(gold in session.document.text for gold in q["answers"]), q  # routed to a part that holds it
        assert answer.sources and all(s.text == whole.text[s.start: s.end] for s in answer.sources)  # every part's
        assert all(spans[s.part - 1][0] <= s.start < spans[s.part - 1][1] for s in answer.sources)  # named by its part
        assert session.turns[-1].part == session.document.part


def kvqa_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvqa", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=900)


@pytest.mark.model
def test_the_cli_reads_a_long_word_file_in_parts_with_the_default_model_when_it_is_named():
    run = kvqa_cli("ask", str(PUBLIC / "en-long.docx"), "-q", "What is the default logging level?",
                   "--max-new-tokens", "24", "--json", "--model", "SmolLM2-135M-Instruct")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["model"] == "SmolLM2-135M-Instruct" and len(result["parts"]) >= 2
    assert "is longer than this model reads at once" in run.stderr and "(page 1, from “" in run.stderr
    answer = result["answers"][0]
    assert any("WARNING" in s["text"] for s in answer["sources"])


@pytest.mark.model
def test_the_cli_reads_a_long_word_file_whole_with_the_model_whose_context_holds_it():
    run = kvqa_cli("ask", str(PUBLIC / "en-long.docx"), "-q", "What is the default logging level?",
                   "--max-new-tokens", "24", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["model"] == "gemma-3-270m" and len(result["parts"]) == 1
    assert "reading with gemma-3-270m" in run.stderr and "reads it whole" in run.stderr
    answer = result["answers"][0]
    assert answer["answer"].strip() and any("WARNING" in s["text"] for s in answer["sources"])


@pytest.mark.model
def test_the_cli_answers_a_chinese_question_on_a_mixed_page_with_the_model_that_reads_chinese():
    run = kvqa_cli("ask", str(PUBLIC / "zh-mixed.html"), "--chars", "1-6000", "-q",
                   "本书重点介绍哪三种虚拟化解决方案？", "--max-new-tokens", "24", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["model"] == "gemma-3-270m" and "reading with gemma-3-270m" in run.stderr
    answer = result["answers"][0]
    assert answer["answer"].strip() and "请根据文档" not in answer["answer"]  # an answer, not the prompt echoed
    assert any("Xen、LXC 和 KVM" in s["text"] for s in answer["sources"])
