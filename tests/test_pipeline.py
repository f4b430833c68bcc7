"""A question's one way (kvqa.session.ask): its evidence is found once, whichever door it came in by (the app, the API,
the
CLI), and the server engine drags no torch code in. The fake engine stands in for the model."""

from __future__ import annotations

import ast
import json
from dataclasses import fields

import pytest

import app as app_module
import kvqa.evidence.sources as sources
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.config import ENVIRONMENT, Config, Decoding, config_from_env
from kvqa.documents.reading import document_from_text
from kvqa.session.session import Ask
from test_architecture import PACKAGE, module_name
from test_routing import TEXT

QUESTIONS = ["Where are the pelican and the comet?", "What is said about the sourdough?",
             "Where is the lighthouse keeper?"]  # the first matches two parts; the others are routed to another


@pytest.fixture
def scorings(monkeypatch) -> list[str]:
    """Every query scored against a BM25 index (kvqa.evidence.sources), in order."""
    seen, real = [], sources._scores

    def counted(index, query):
        seen.append(query)
        return real(index, query)

    monkeypatch.setattr(sources, "_scores", counted)
    return seen


def question_scorings(seen: list[str]) -> dict[str, int]:
    return {q: seen.count(q) for q in QUESTIONS}


def test_the_app_scores_each_question_once(scorings):
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(context_tokens=120), budget=CacheBudget(2**30))
    session, _ = kvqa_app.service.read(document_from_text(TEXT, name="long.txt"), None, None, lambda *a, **k: None)
    assert len(session.parts) > 2
    for question in QUESTIONS:
        list(kvqa_app.questions.on_ask(Ask(question), session))
    assert question_scorings(scorings) == dict.fromkeys(QUESTIONS, 1)
    assert len({t.part.first for t in session.turns}) > 1 and session.turns[0].sources  # routed, with sources
    # measured against a recompute: the same evidence serves both
    list(kvqa_app.questions.on_ask(Ask(QUESTIONS[1], baseline=True), session))
    assert scorings.count(QUESTIONS[1]) == 2 and session.turns[-1].baseline is not None


def test_the_api_scores_each_question_once(scorings):
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(context_tokens=120), budget=CacheBudget(2**30))
    session = kvqa_app.api.api_prefill(text=TEXT)[kvqa_app.page.state]
    for question in QUESTIONS:
        list(kvqa_app.api.api_ask(question, session=session))
    assert question_scorings(scorings) == dict.fromkeys(QUESTIONS, 1) and len(session.turns) == 3


def test_the_cli_scores_each_question_once(scorings, tmp_path, capsys, monkeypatch):
    import kvqa.engines
    from kvqa.cli import main

    engine = FakeEngine(context_tokens=120)
    monkeypatch.setattr(kvqa.engines, "make_engine", lambda *a, **k: engine)
    path = tmp_path / "long.txt"
    path.write_text(TEXT)
    assert main(["ask", str(path), "--no-store", "--json", *(a for q in QUESTIONS for a in ("-q", q))]) == 0
    answers = json.loads(capsys.readouterr().out)["answers"]
    assert question_scorings(scorings) == dict.fromkeys(QUESTIONS, 1)
    assert [a["question"] for a in answers] == QUESTIONS and len({a["part"]["first"] for a in answers}) > 1
    assert [q.text for q in engine.asked] == QUESTIONS and all(q.passages for q in engine.asked)  # quoted


def test_the_engine_gets_the_passages_its_settings_quote():
    engine = FakeEngine()
    kvqa_app = app_module.KvqaApp(Config(), engine, budget=CacheBudget(2**30))
    session = kvqa_app.api.api_prefill(text=TEXT)[kvqa_app.page.state]  # one part: the fake engine reads it all
    list(kvqa_app.api.api_ask(QUESTIONS[0], session=session))
    passages = engine.asked[-1].passages
    assert len(passages) == engine.options.passages == 1 and "pelican" in passages[0][1]
    assert engine.asked[-1].quotes(1) == [passages[0][1]]


def module_imports(path) -> set[str]:
    """What a file imports when it is imported: its module-level imports (not those inside functions, nor those only
    for type checking), relative ones resolved to kvqa's modules."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found |= {target} | {f"{target}.{a.name}" for a in node.names}
    return found


def test_the_server_engine_imports_no_torch_code():
    """Nothing remote.py imports, at any depth inside kvqa, imports torch when it is imported."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    seen, todo = {"kvqa.engines.remote"}, ["kvqa.engines.remote"]
    while todo:
        for nxt in {m for m in module_imports(paths[todo.pop()]) if m in paths} - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert {"kvqa.results", "kvqa.prompt", "kvqa.engines.base", "kvqa.timing"} <= seen
    assert "kvqa.generation.generate" not in seen  # the answer's evidence is kvqa.session.ask's, above the engines
    heavy = {"torch", "transformers"}
    with_torch = sorted(m for m in seen if heavy & {i.split(".")[0] for i in module_imports(paths[m])})
    assert with_torch == []
    assert "torch" in module_imports(paths["kvqa.generation.generate"])  # the check sees an import of torch where
                                                                         # there is one


def test_a_decoding_setting_is_one_field():
    """Config holds the Decoding settings whole (Config.decoding, as engines take them), Config.of takes each by its
    own name, and each has its variable."""
    names = [f.name for f in fields(Decoding)]
    assert {f.name: f.type for f in fields(Config)}["decoding"] == "Decoding"
    assert Config.of(draft_tokens=2, quote_passages=3).decoding == Decoding(draft_tokens=2, quote_passages=3)
    assert all(ENVIRONMENT[n] == f"KVQA_{n.upper()}" for n in names)
    assert config_from_env({"KVQA_MODEL": "m", "KVQA_SEED": "7", "KVQA_RERANK_PASSAGES": "5"}).decoding == Decoding(
        seed=7, rerank_passages=5)
    with pytest.raises(Exception, match="KVQA_DRAFT_TOKENS"):
        config_from_env({"KVQA_MODEL": "m", "KVQA_DRAFT_TOKENS": "-1"})
