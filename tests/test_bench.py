"""`python -m kvqa bench`: every method gives figures at every context, caches hold what theory says, answers agree,
the JSON shape scripts rely on, the plot, and exit code 2 for bad flags. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kvqa
from kvqa.bench.errors import BenchError
from kvqa.bench.methods import METHODS
from kvqa.bench.report import format_table, target_checks, write_plot
from kvqa.bench.run import QUESTIONS, SAMPLE_DOCUMENT, cut_document, run_bench
from kvqa.cli import main
from kvqa.model.kv_cache import bytes_per_token
from kvqa.prompt import ChatPrompt

ROOT = Path(__file__).parent.parent
ROW_KEYS = {"method", "context_tokens", "prefill_s", "ttft_s", "answer_s", "decode_tokens_per_s", "fork_s",
            "peak_memory_bytes", "cache_bytes", "theoretical_cache_bytes", "floor_ttft_s", "same_answers",
            "ttft_over_floor", "decode_floor_s", "decode_step_s", "decode_over_floor"}
TINY_CONFIG = {  # a 2-layer Llama with a vocabulary smaller than the tokenizer's: ids are folded into it
    "model_type": "llama", "vocab_size": 4096, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
    "tie_word_embeddings": True, "initializer_range": 0.2,
}


def check_result(result: dict, contexts: list[int], questions: int, max_new_tokens: int) -> None:
    one = {"machine", "model", "compiled_decode", "weights", "weight_bytes", "quote_chars", "warm_up_s", "results"}
    assert one <= set(result) <= one | {"runs"}  # run_bench's, or the CLI's (side_by_side: a list of runs)
    assert {"cpu", "cores", "torch", "device", "dtype", "date", "gpu", "bandwidth_gb_s"} <= set(result["machine"])
    assert result["machine"]["bandwidth_gb_s"] > 0
    rows = result["results"]
    assert [(r["method"], r["target_context_tokens"]) for r in rows] == [(m, n) for n in contexts for m in METHODS]
    for r in rows:
        assert ROW_KEYS <= set(r), ROW_KEYS - set(r)
        assert 0 < r["context_tokens"] <= r["target_context_tokens"]
        assert len(r["new_tokens"]) == questions and all(0 < n <= max_new_tokens for n in r["new_tokens"])
        assert 0 < r["ttft_s"] <= r["answer_s"] and r["peak_memory_bytes"] >= 0
        assert r["same_answers"] is True, (r["method"], r["context_tokens"], r["answers"])
        if r["method"] == "recompute":
            assert r["prefill_s"] == r["fork_s"] == r["cache_bytes"] == r["theoretical_cache_bytes"] == 0
        else:
            assert r["prefill_s"] > 0 and r["cache_bytes"] > 0
            assert r["cache_bytes"] == r["theoretical_cache_bytes"]
        if r["method"] == "kvqa":
            assert r["floor_ttft_s"] > 0 and r["unchunked_prefill_s"] > 0 and r["chunked_prefill_s"] > 0
            assert len(r["question_tokens"]) == questions and min(r["question_tokens"]) > 0
            assert r["cache_tokens"] == r["context_tokens"] + 512 + max_new_tokens  # document + reserve
            assert r["decode_floor_s"] > 0 and r["ttft_over_floor"] > 0
            assert r["draft_same_answers"] is True and r["draft_tokens_per_step"] >= 0
            assert r["draft_speedup"] is None or r["draft_speedup"] > 0
            assert 0 <= r["sources_s"] < r["answer_s"]  # sources cost little
            assert r["written_step_same_logits"] is True  # the step written out computes the forward's logits
            assert r["written_step_s"] > 0 and r["forward_step_s"] > 0 and r["written_step_speedup"] > 0
            # the ratios printed are the ratios of the figures printed
            assert r["ttft_over_floor"] == pytest.approx(r["ttft_s"] / r["floor_ttft_s"], rel=0.02)
            assert r["written_step_speedup"] == pytest.approx(r["forward_step_s"] / r["written_step_s"], rel=0.02)
            if r["decode_step_s"]:
                assert r["decode_over_floor"] == pytest.approx(r["decode_step_s"] / r["decode_floor_s"], rel=0.02)
        else:
            assert r["floor_ttft_s"] is None
            assert r["ttft_over_floor"] is r["decode_floor_s"] is r["decode_step_s"] is r["decode_over_floor"] is None
        if r["method"] == "seed":
            assert r["cache_tokens"] == r["context_tokens"]
    by_context = {}
    for r in rows:  # every method read the same prompt and gave the same answers
        by_context.setdefault(r["target_context_tokens"], []).append(r)
    for same in by_context.values():
        assert len({r["context_tokens"] for r in same}) == 1
        assert len({tuple(r["answers"]) for r in same}) == 1


def test_bench_in_process_table_and_plot(tiny_lm, tmp_path):
    config = kvqa.Config.of(max_new_tokens=5, chunk_size=48)  # several chunks per prefill
    result = run_bench(tiny_lm, SAMPLE_DOCUMENT.read_text(), contexts=[80, 160], questions=QUESTIONS[:2],
                       config=config)
    check_result(result, [80, 160], questions=2, max_new_tokens=5)
    assert json.loads(json.dumps(result)) == result
    table = format_table(result)
    assert all(m in table for m in METHODS) and "targets at" in table and "unchunked" in table
    assert "one decode step written out" in table and "same logits bit for bit: yes" in table
    same = "same greedy answers for every method"  # a target in float32; int8 promises no method here its answers
    assert (True, same) in target_checks(result)
    assert same not in [text for _, text in target_checks({**result, "weights": "int8"})]
    write_plot(result, tmp_path / "ttft.png")
    assert (tmp_path / "ttft.png").read_bytes().startswith(b"\x89PNG")


def test_the_bench_runs_quote_lengths_side_by_side(tiny_lm):
    """`bench --quote-chars 0,60`: each length a run on the same model; the shorter quote reads fewer tokens per
    question, every row names its length, the table compares each run with the first."""

    from kvqa.bench.run import side_by_side

    config = kvqa.Config.of(max_new_tokens=4, chunk_size=48)
    runs = [run_bench(tiny_lm, SAMPLE_DOCUMENT.read_text(), contexts=[400], questions=QUESTIONS[0:3:2],
                      config=config.replaced(quote_chars=chars), methods=("recompute", "kvqa"), warm_up=False)
            for chars in (0, 60)]
    result = side_by_side(runs)
    assert result["quote_chars"] == [0, 60] and result["runs"] == [{"weights": "fp32", "quote_chars": 0},
                                                                    {"weights": "fp32", "quote_chars": 60}]
    rows = {(r["quote_chars"], r["method"]): r for r in result["results"]}
    whole, short = rows[0, "kvqa"], rows[60, "kvqa"]
    assert all(s < w for s, w in zip(short["question_tokens"], whole["question_tokens"]))
    assert whole["same_as_first_run"] is True and short["same_as_first_run"] == (short["answers"] == whole["answers"])
    assert rows[60, "recompute"]["same_answers"] is True  # recompute quoted the same shorter passage
    table = format_table(result)
    assert "runs side by side (each against fp32 weights, quote whole" in table
    assert "fp32 weights, quote 60 chars: weights" in table


def test_the_seed_row_runs_on_transformers_own_attention(tiny_lm):
    """The bench's outside reference: its answers (compared with kvqa's in every row) come from stock attention."""
    from kvqa.bench.methods import stock_attention
    from kvqa.model.attention import GROUPED_SDPA

    model = tiny_lm.model
    assert model.config._attn_implementation == GROUPED_SDPA  # kvqa's, on the CPU
    with stock_attention(model):
        assert model.config._attn_implementation == "sdpa"
    assert model.config._attn_implementation == GROUPED_SDPA


def test_bench_measures_bandwidth_and_the_decode_floor(tiny_lm):
    """Know the floor: the bandwidth once per run; per kvqa row the decode step against
    (weights + KV at the context) / bandwidth, and TTFT against the question's bare forward."""
    config = kvqa.Config.of(max_new_tokens=5, chunk_size=48)
    result = run_bench(tiny_lm, SAMPLE_DOCUMENT.read_text(), contexts=[80, 160], questions=QUESTIONS[:2],
                       config=config, methods=("seed", "kvqa"), warm_up=False)
    machine = result["machine"]
    assert machine["bandwidth_gb_s"] > 0 and machine["bandwidth_runs"] >= 3
    params = [p for _, p in tiny_lm.model.named_parameters(remove_duplicate=False)]
    weights = sum({p.data_ptr(): p.nbytes for p in params}.values())
    assert weights < sum(p.nbytes for p in params)  # the tied embedding and head are counted once
    kvqa_rows = [r for r in result["results"] if r["method"] == "kvqa"]
    assert len(kvqa_rows) == 2
    for r in kvqa_rows:
        assert r["decode_floor_s"] > 0 and r["decode_step_s"] > 0 and r["decode_over_floor"] > 0
        assert r["ttft_over_floor"] > 0
        assert r["weight_bytes"] == weights
        assert r["kv_bytes"] == bytes_per_token(tiny_lm.config, tiny_lm.dtype) * r["context_tokens"]
        assert r["decode_floor_s"] == pytest.approx((weights + r["kv_bytes"]) / (machine["bandwidth_gb_s"] * 1e9))
        assert r["decode_step_s"] == pytest.approx(1 / r["decode_tokens_per_s"])
        assert r["decode_over_floor"] == pytest.approx(r["decode_step_s"] / r["decode_floor_s"])
        assert r["ttft_over_floor"] == pytest.approx(r["ttft_s"] / r["floor_ttft_s"])
    assert kvqa_rows[1]["decode_floor_s"] > kvqa_rows[0]["decode_floor_s"]  # more KV to read at the longer context
    assert all(r["decode_floor_s"] is r["decode_over_floor"] is r["ttft_over_floor"] is None
               for r in result["results"] if r["method"] == "seed")
    table = format_table(result)
    assert f"memory read bandwidth {machine['bandwidth_gb_s']:,.1f} GB/s" in table
    assert "step/floor" in table and "TTFT/floor" in table
    assert f"{kvqa_rows[0]['decode_over_floor']:,.2f}x" in table


def test_bench_default_model_same_answers(default_lm):
    result = run_bench(default_lm, SAMPLE_DOCUMENT.read_text(), contexts=[128], questions=QUESTIONS[:1],
                       config=kvqa.Config.of(max_new_tokens=6), warm_up=False)
    check_result(result, [128], questions=1, max_new_tokens=6)
    assert result["results"][0]["context_tokens"] == 128  # the cut is exact here


def test_document_cut_to_exact_length(default_lm):
    prompt = ChatPrompt.for_tokenizer(default_lm.tokenizer)
    ids = default_lm.tokenizer(SAMPLE_DOCUMENT.read_text(), add_special_tokens=False)["input_ids"]
    for target in (80, 333, 1000):  # the prompt alone is 68 tokens
        document, prefix = cut_document(prompt, ids, target, name="sample")
        assert prefix == prompt.prefix_ids(document.text) and target - 2 <= len(prefix) <= target
    with pytest.raises(BenchError, match="too short"):
        cut_document(prompt, ids, 10, name="sample")


def test_bench_cli_json_with_random_init(tmp_path, default_lm):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY_CONFIG))
    plot = tmp_path / "plot.png"
    run = subprocess.run([sys.executable, "-m", "kvqa", "bench", "--json", "--random-init", str(config),
                          "--contexts", "80,128", "--questions", "2", "--max-new-tokens", "4", "--plot", str(plot)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)  # exactly one JSON object on stdout
    check_result(result, [80, 128], questions=2, max_new_tokens=4)
    assert result["model"] == "random-init tiny"
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_shipped_llama_config_is_llama_3_2_3b():
    from transformers import AutoConfig

    settings = json.loads((ROOT / "kvqa" / "model" / "configs" / "llama-3.2-3b.json").read_text())
    settings = {k: v for k, v in settings.items() if not k.startswith("_") and k != "torch_dtype"}
    c = AutoConfig.for_model(settings.pop("model_type"), **settings)
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.intermediate_size, c.vocab_size, c.max_position_embeddings) == (3072, 28, 24, 8, 128, 8192, 128256,
                                                                              131072)
    assert c.tie_word_embeddings and c.rms_norm_eps == 1e-5
    assert c.rope_parameters == {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                 "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                 "original_max_position_embeddings": 8192}


@pytest.mark.parametrize("args,message", [
    (["--contexts", "512,abc"], "--contexts"),
    (["--contexts", "0"], "--contexts"),
    (["--questions", "0"], "--questions"),
    (["--quote-chars", "0,-40"], "--quote-chars"),
    (["--quote-chars", "whole"], "--quote-chars"),
    (["--questions", "99"], "--questions"),
    (["--max-new-tokens", "0"], "above 0"),
    (["--random-init", "no-such-config"], "No config file"),
    (["--plot", "/no/such/folder/x.png"], "does not exist"),
    (["--doc", "missing.txt"], "No such file"),
])
def test_bad_flags_exit_2(args, message, capsys):
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kvqa: ") and message in err[0], err


def test_context_longer_than_the_model_is_refused(tiny_lm):
    with pytest.raises(BenchError, match="does not fit"):
        run_bench(tiny_lm, "text", contexts=[4000], questions=QUESTIONS[:1], config=kvqa.Config(), warm_up=False)


def test_store_bench_restores_the_same_cache_and_answers(tiny_lm):
    """`bench --store` rows, on the tiny model."""
    from kvqa.bench.store import format_store_table, run_store_bench

    prompt = ChatPrompt.for_tokenizer(tiny_lm.tokenizer)
    text_ids = tiny_lm.tokenizer("The museum opens at nine. Its code word is pelican. " * 20,
                                 add_special_tokens=False)["input_ids"]
    documents = [cut_document(prompt, text_ids, n, name="d") for n in (80, 160)]
    rows = run_store_bench(tiny_lm, documents, questions=["What is the code word?"],
                           config=kvqa.Config.of(max_new_tokens=4))
    assert [r["context_tokens"] for r in rows] == [len(ids) for _, ids in documents]
    assert all(r["same_answers"] and r["same_cache"] and r["restore_s"] > 0 and r["file_bytes"] > 0 for r in rows)
    assert "prefill/restore" in format_store_table(rows)
