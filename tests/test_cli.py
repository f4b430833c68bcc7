"""`python -m kvqa ask`: the JSON shape scripts rely on, cache vs --no-cache, and exit code 2 without a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOC = "The secret word is pelican.\nThe museum opens at 9 am on weekdays.\n"


def kvqa(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvqa", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env=None if env is None else {**os.environ, **env})


@pytest.fixture(scope="module")
def doc_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "doc.txt"
    path.write_text(DOC)
    return path


def test_json_answers_with_and_without_cache_agree(doc_path, default_lm):
    questions = ["-q", "What is the secret word?", "-q", "When does the museum open?"]
    cached = kvqa("ask", str(doc_path), *questions, "--max-new-tokens", "20", "--json")
    assert cached.returncode == 0, cached.stderr
    result = json.loads(cached.stdout)  # exactly one JSON object on stdout
    assert set(result) == {"format", "model", "engine", "dtype", "weights", "kv_cache", "exact_vs_recompute",
                           "guarantee", "document", "context_tokens",
                           "prefill_s", "read_s", "cache_bytes", "cache_source", "parts", "answers"}
    assert result["parts"] == [{"unit": "characters", "first": 1, "last": len(DOC), "tokens": result["context_tokens"]}]
    assert result["model"] == "SmolLM2-135M-Instruct" and result["context_tokens"] > 20
    assert result["document"] == {"name": doc_path.name, "pages": None, "chars": len(DOC)}
    assert result["engine"] == "local" and result["dtype"] == "float32" and result["exact_vs_recompute"] is True
    assert result["prefill_s"] > 0 and result["cache_bytes"] > 0 and result["cache_source"] == "prefill"
    assert result["read_s"] == result["prefill_s"]
    assert [a["question"] for a in result["answers"]] == ["What is the secret word?", "When does the museum open?"]
    for a in result["answers"]:
        assert set(a) == {"question", "answer", "short", "question_tokens", "new_tokens", "ttft_s", "answer_s",
                          "stop_reason", "sources", "unsupported", "unquoted", "part", "also",
                          "composed"}
        assert a["part"] == {"unit": "characters", "first": 1, "last": len(DOC)}
        assert isinstance(a["unsupported"], list)
        assert a["answer"] and 0 < a["ttft_s"] <= a["answer_s"] and a["new_tokens"] > 0
    assert "pelican" in result["answers"][0]["answer"].lower()
    first = result["answers"][0]["sources"][0]
    assert set(first) == {"page", "part", "start", "end", "text", "mark_start", "mark_end", "answer_start",
                          "answer_end", "short_start", "short_end"}
    assert first["part"] is None  # the document is one part
    assert "pelican" in first["text"]
    assert first["page"] is None and first["start"] <= first["mark_start"] < first["mark_end"] <= first["end"]
    assert doc_path.read_text()[first["start"]: first["end"]] == first["text"]

    baseline = json.loads(kvqa("ask", str(doc_path), *questions, "--max-new-tokens", "20", "--json",
                               "--no-cache").stdout)
    assert baseline["prefill_s"] == 0 and baseline["cache_bytes"] == 0 and baseline["cache_source"] is None
    assert baseline["read_s"] is None
    assert [a["answer"] for a in baseline["answers"]] == [a["answer"] for a in result["answers"]]
    assert all(b["question_tokens"] > a["question_tokens"] for a, b in zip(result["answers"], baseline["answers"]))


def test_the_store_restores_the_cache_in_the_next_run_unless_told_not_to(doc_path, tmp_path, default_lm):
    """A second `kvqa ask` on the same document reads its cache from the store, and answers the same."""
    env = {"KVQA_STORE_DIR": str(tmp_path / "store"), "KVQA_STORE_MB": "100"}
    ask = ("ask", str(doc_path), "-q", "What is the secret word?", "--max-new-tokens", "12", "--json")
    runs = [json.loads(kvqa(*ask, *extra, env=env).stdout) for extra in ((), (), ("--no-store",))]
    assert [r["cache_source"] for r in runs] == ["prefill", "disk", "prefill"]
    assert len({r["answers"][0]["answer"] for r in runs}) == 1
    assert all(r["prefill_s"] > 0 and r["context_tokens"] == runs[0]["context_tokens"] for r in runs)
    assert abs(runs[1]["read_s"] - runs[0]["prefill_s"]) < 1e-5  # the restore reports the first read's time too
    assert len(list((tmp_path / "store").glob("*.safetensors"))) == 1


def test_stdin_document_and_readable_output(default_lm):
    run = kvqa("ask", "-", "-q", "文件里的秘密词是什么？", "--max-new-tokens", "12",
               stdin="秘密词是鹈鹕。The secret word is pelican.")
    assert run.returncode == 0, run.stderr
    assert "Q: 文件里的秘密词是什么？" in run.stdout and "A: " in run.stdout
    assert "Greedy answers from the cache are bit for bit" in run.stdout
    assert "TTFT" in run.stdout and "prefill" in run.stdout
    assert "reads English only" not in run.stderr  # a mostly English document: nothing to say


def test_a_chinese_document_in_the_english_default_model_is_told_which_model_reads_chinese(default_lm):
    run = kvqa("ask", "-", "-q", "What is the secret word?", "--max-new-tokens", "4", "--model",
               "SmolLM2-135M-Instruct", stdin="秘密词是鹈鹕。博物馆在工作日上午九点开门。")  # named: kept, with a note
    assert run.returncode == 0, run.stderr
    assert "SmolLM2-135M-Instruct reads English only" in run.stderr and "--model gemma-3-270m" in run.stderr
    asked = kvqa("ask", "-", "-q", "秘密词是什么？", "--model", "SmolLM2-135M-Instruct",
                 stdin="The secret word is pelican.")  # a question in Chinese: what to do, in Chinese, not an answer
    assert asked.returncode == 2 and asked.stdout == "" and "Traceback" not in asked.stderr
    assert "只能读英文" in asked.stderr and "--model gemma-3-270m" in asked.stderr


@pytest.mark.parametrize("args,stdin,message", [
    (["ask", "missing.txt", "-q", "x"], None, "No such file"),
    (["ask", "-", "-q", "x"], "   \n ", "empty"),
    (["ask", "-", "-q", "   "], "text", "question is empty"),
    (["ask", "assets/SOURCES.md", "-q", "x", "--model", "/nonexistent/model"], None, "Could not load model"),
    (["ask", "-", "-q", "x", "--max-new-tokens", "0"], "text", "above 0"),
    (["ask", "-", "-q", "x", "--device", "cuda:7"], "text", "CUDA"),
])
def test_bad_input_exits_2_with_one_line(args, stdin, message):
    run = kvqa(*args, stdin=stdin)
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("kvqa: ")]
    assert len(lines) == 1 and message in lines[0], run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_binary_file_exits_2(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes(bytes(range(256)) * 10)
    run = kvqa("ask", str(path), "-q", "x")
    assert run.returncode == 2 and "binary" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.model
def test_a_chinese_document_is_read_by_the_model_that_reads_chinese(tmp_path):
    path = tmp_path / "合作社.md"
    path.write_text((ROOT / "tests" / "data" / "eval" / "qingshi-tea-coop-zh.md").read_text())
    run = kvqa("ask", str(path), "-q", "合作社在哪里？", "--max-new-tokens", "24", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["model"] == "gemma-3-270m" and "reading with gemma-3-270m" in run.stderr
    assert "mostly Chinese" in run.stderr and "--model" in run.stderr
    answer = result["answers"][0]
    assert answer["answer"].strip() and "\n" not in answer["answer"]
    named = kvqa("ask", str(path), "-q", "Where is the cooperative?", "--max-new-tokens", "8", "--json",
                 "--model", "SmolLM2-135M-Instruct")
    assert named.returncode == 0 and json.loads(named.stdout)["model"] == "SmolLM2-135M-Instruct"
    assert "gemma-3-270m" in named.stderr  # the note names the model that reads Chinese


def test_gather_tokens_reaches_the_config_and_a_negative_one_is_refused():
    from kvqa.cli import _parser, config_from

    args = _parser().parse_args(["ask", "doc.txt", "-q", "Why?", "--gather-tokens", "4096"])
    assert config_from(args).decoding.gather_tokens == 4096
    assert config_from(_parser().parse_args(["ask", "doc.txt", "-q", "Why?"])).decoding.gather_tokens == 0
    refused = kvqa("ask", "-", "-q", "Why?", "--gather-tokens", "-1", stdin=DOC)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and refused.stderr.startswith("kvqa: ")
