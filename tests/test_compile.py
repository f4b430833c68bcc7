"""The fixed-shape decode step (KVCache.static_view) and its compiled form keep kvqa's promise: the same
greedy tokens as the ordinary step, the document's keys and values untouched, answers equal to a recompute."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import kvqa
from kvqa.config import config_from_env
from kvqa.generation.decode import decode_one_token
from kvqa.generation.generate import run_chunks
from kvqa.model.kv_cache import new_cache
from kvqa.model.loading import compiled_decode_step

TEXT = "The secret word is pelican. " + " ".join(f"Item {i} costs {i * 7} euros and weighs {i} kg." for i in range(40))
QUESTIONS = ["What is the secret word?", "How much does item 12 cost?", "这份文件讲了什么？"]


def plain_step(lm: kvqa.LoadedModel):
    """The static-view step without torch.compile: isolates the view from the compiler."""
    def step(ids, position, cache):
        return lm.model(input_ids=ids, position_ids=position, cache=cache, use_cache=True).logits[:, -1]
    return step


def greedy(lm, ids, *, steps: int, capacity: int) -> list[int]:
    cache = new_cache(lm.config, capacity)
    token = int(run_chunks(lm, ids, cache, chunk_size=64).argmax())
    tokens = [token]
    for _ in range(steps):
        token = int(decode_one_token(lm, token, cache).argmax())
        tokens.append(token)
    assert cache.length == len(ids) + steps
    return tokens


def test_static_view_gives_the_tokens_of_the_ordinary_step(tiny_lm):
    ids = tiny_lm.tokenizer(TEXT)["input_ids"]
    ordinary = greedy(tiny_lm, ids, steps=20, capacity=len(ids) + 40)
    static_lm = dataclasses.replace(tiny_lm, decode_step=plain_step(tiny_lm))
    assert greedy(static_lm, ids, steps=20, capacity=len(ids) + 40) == ordinary


def test_static_view_writes_only_after_the_document_and_follows_rollback(tiny_lm):
    lm = dataclasses.replace(tiny_lm, decode_step=plain_step(tiny_lm))
    ids = lm.tokenizer(TEXT)["input_ids"]
    cache = new_cache(lm.config, len(ids) + 16)
    run_chunks(lm, ids, cache, chunk_size=64)
    before = [(k.clone(), v.clone()) for k, v in cache.tensors()]
    first = [decode_one_token(lm, 5, cache) for _ in range(3)][-1]
    assert cache.length == len(ids) + 3
    cache.rollback(len(ids))
    again = [decode_one_token(lm, 5, cache) for _ in range(3)][-1]
    assert torch.equal(first, again)  # the view's write position follows the rollback
    cache.rollback(len(ids))
    for (k, v), (k0, v0) in zip(cache.tensors(), before):
        assert torch.equal(k, k0) and torch.equal(v, v0)


def test_compiled_step_answers_like_a_recompute_through_the_same_step(tiny_lm):
    """The compiled graph serves every token and question of a document (shapes and addresses fixed), and a cached
    answer equals the recompute of the whole prompt in the same chunks, token for token."""
    lm = dataclasses.replace(tiny_lm, decode_step=compiled_decode_step(tiny_lm.model, tiny_lm.device))
    document = kvqa.document_from_text(TEXT)
    config = kvqa.Config.of(chunk_size=64, max_new_tokens=12, max_question_tokens=32)
    doc = kvqa.prefill(lm, document, config=config)
    before = [(k.clone(), v.clone()) for k, v in doc.cache.tensors()]
    for question in QUESTIONS:
        cached = kvqa.answer(lm, doc, question)
        whole = kvqa.answer_without_cache(lm, document, question, config=config, prompt=doc.prompt,
                                          same_schedule=True)
        assert cached.token_ids == whole.token_ids and len(cached.token_ids) > 0, question
        ordinary = kvqa.answer(tiny_lm, doc, question)  # the eager step on the same cache
        assert ordinary.token_ids == cached.token_ids, question
    assert doc.cache.length == doc.tokens
    for (k, v), (k0, v0) in zip(doc.cache.tensors(), before):
        assert torch.equal(k, k0) and torch.equal(v, v0)


def test_compile_setting_is_checked():
    with pytest.raises(kvqa.KvqaError, match="KVQA_COMPILE"):
        config_from_env({"KVQA_COMPILE": "yes please"})
    assert config_from_env({"KVQA_COMPILE": "on"}).compile == "on"


def test_a_repetition_penalty_at_or_below_zero_is_refused():
    for bad in ("0", "-1.2"):  # a penalty of 0 would divide by zero, a negative one reward repeating
        with pytest.raises(kvqa.KvqaError, match="KVQA_REPETITION_PENALTY: must be above 0"):
            config_from_env({"KVQA_REPETITION_PENALTY": bad})
    assert config_from_env({"KVQA_REPETITION_PENALTY": "1.2"}).decoding.repetition_penalty == 1.2


def test_gpu_check_script_runs_end_to_end_on_a_tiny_model(tmp_path, default_lm):
    """scripts/gpu_check.py is what a lent GPU runs: its --smoke mode keeps it working between loans."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parent.parent
    run = subprocess.run([sys.executable, "scripts/gpu_check.py", "--smoke", "--out", str(tmp_path)],
                         capture_output=True, text=True, cwd=root, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "answers identical, cache bit-identical" in run.stdout
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["context_tokens"] for r in result["eager"]["results"]] == [
        r["context_tokens"] for r in result["compiled"]["results"]]
    assert result["compiled"]["compiled_decode"] and not result["eager"]["compiled_decode"]
    assert all(r["decode_floor_s"] > 0 and r["ttft_over_floor"] > 0 for r in result["compiled"]["results"])
    assert result["rerank_s"] > 0 and "reranking 5 passages by question likelihood" in run.stdout
    assert [r["context_tokens"] for r in result["store"]] == [200, 400] and "restore (warm)" in run.stdout
    assert all(r["same_answers"] and r["same_cache"] and r["restore_s"] > 0 for r in result["store"])


def test_the_compiled_engine_promises_only_what_is_tested(tiny_lm):
    """The one-forward comparison is tested for the eager step; with the compiled step only same-chunks is."""
    from kvqa.engines import LocalEngine

    compiled = dataclasses.replace(tiny_lm, decode_step=plain_step(tiny_lm))
    info = LocalEngine(kvqa.Config(), lm=compiled).info
    assert not info.exact_vs_recompute and "same chunks" in info.guarantee and "one go" not in info.guarantee
    assert LocalEngine(kvqa.Config(), lm=tiny_lm).info.exact_vs_recompute
