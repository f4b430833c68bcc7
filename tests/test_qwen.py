"""The Qwen2.5-Coder models offline: their int8 copies written once and read back as the model that wrote
them, biases kept in float32; int8 answers from the cache bit for bit a recompute in the same chunks on the Qwen2
architecture; the rule that picks the best installed model reading the document's and the question's languages (the
1.5B, or on a CPU the 0.5B for a long document); and, slow, the real models through `kvqa ask`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

import kvqa
from kvqa.config import Config
from kvqa.messages import Message, render
from kvqa.model import offline
from kvqa.model.architectures import has_step
from kvqa.model.kernels.int8_kernel import widened
from kvqa.model.loading import _load_int8_copy, prepare
from kvqa.model.presets import PRESETS, reading_model
from kvqa.model.weights import Int8Linear, dequantize, int8_rows, int8_state, product, quantize
from test_llama_layer import assert_same, layers_in_c_run, python_loop
from test_llama_step import steps_both_ways
from test_presets import small_copy, tokenizer_for
from test_weights import QUESTIONS_ASKED, TEXT

QWEN2 = next(p for p in PRESETS if p.config == "qwen2.5-0.5b")


def tiny_qwen(default_lm, llama3_tokenizer):
    """Qwen2.5-0.5B's architecture (q/k/v biases, 2 key/value heads of 14) in two layers with random weights, and a
    tokenizer with Qwen2.5's template."""
    tokenizer = tokenizer_for(QWEN2, default_lm, llama3_tokenizer)
    model = small_copy(QWEN2, tokenizer)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)  # biases that matter (the random init leaves them 0)
    return model, tokenizer


def written(model, folder) -> None:
    """The model's int8 copy as kvqa.model.offline writes one."""
    model.config.save_pretrained(folder)
    save_file(int8_state(model), str(folder / "model.safetensors"))
    (folder / offline.RECORD).write_text(json.dumps({"form": "int8"}))


def test_an_int8_copy_reads_back_as_the_model_that_wrote_it(tmp_path, default_lm, llama3_tokenizer):
    model, _ = tiny_qwen(default_lm, llama3_tokenizer)
    quantize(model, "int8")
    assert not any(type(m) is torch.nn.Linear for m in model.modules())  # every linear, biased ones too
    q = model.model.layers[0].self_attn.q_proj
    assert isinstance(q, Int8Linear) and q.bias.dtype == torch.float32 and q.bias.abs().sum() > 0
    written(model, tmp_path)
    back = _load_int8_copy(tmp_path, "tiny-qwen", "sdpa")
    assert stored_equal(model, back)
    assert offline.stored_form(tmp_path) == "int8"
    ids = torch.randint(0, 1000, (1, 40))
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, back(input_ids=ids).logits)


def stored_equal(a, b) -> bool:
    """Both models hold the same tensors under the same names (the tied output layer's rows once)."""
    sa, sb = int8_state(a), int8_state(b)
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_biased_int8_product_adds_its_float32_bias():
    torch.manual_seed(0)
    weight, bias = torch.randn(64, 32), torch.randn(64)
    rows, scales = int8_rows(weight)
    linear = Int8Linear(rows, scales, bias=bias)
    x = torch.randn(3, 32)
    expected = F.linear(x, widened(rows, scales, torch.float32)) + bias
    assert torch.allclose(linear(x), expected, atol=1e-4)
    assert product(linear) is linear  # the written-out steps' plain function would drop the bias: the module instead
    assert not torch.allclose(product(Int8Linear(rows, scales))(x), expected, atol=1e-2)


def test_an_int8_copy_widens_back_to_float_where_int8_does_not_run(default_lm, llama3_tokenizer):
    model, _ = tiny_qwen(default_lm, llama3_tokenizer)
    quantize(model, "int8")
    q = model.model.layers[1].self_attn.k_proj
    rows, scales, bias = q.rows.clone(), q.scales.clone(), q.bias.clone()
    dequantize(model, torch.float32)
    plain = model.model.layers[1].self_attn.k_proj
    assert type(plain) is torch.nn.Linear and torch.equal(plain.weight, widened(rows, scales, torch.float32))
    assert torch.equal(plain.bias, bias)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # still tied
    assert not hasattr(model.config, "kvqa_weights")


def test_int8_qwen2_answers_from_its_copy_are_a_recompute_in_the_same_chunks(tmp_path, default_lm, llama3_tokenizer):
    model, tokenizer = tiny_qwen(default_lm, llama3_tokenizer)
    quantize(model, "int8")
    written(model, tmp_path)
    lm = prepare(_load_int8_copy(tmp_path, "tiny-qwen", "sdpa"), tokenizer, name="tiny-qwen",
                 device=torch.device("cpu"), weights="int8")
    assert lm.weights == "int8"
    answers_as_a_recompute(lm)


def answers_as_a_recompute(lm) -> None:
    """Each labelled question (English and Chinese) answered from the prefilled cache is, token for token, a recompute
    in the same chunks, and the cache rolls back to the document."""
    document = kvqa.document_from_text(TEXT)
    config = kvqa.Config.of(chunk_size=128, max_new_tokens=12, repeat_stop=0)
    doc = kvqa.prefill(lm, document, config=config)
    for question in QUESTIONS_ASKED:  # English and Chinese
        cached = kvqa.answer(lm, doc, question, max_new_tokens=12, repeat_stop=0)
        again = kvqa.answer_without_cache(lm, document, question, config=config, prompt=doc.prompt,
                                          same_schedule=True)
        assert cached.token_ids == again.token_ids and len(cached.token_ids) > 0, question
        assert doc.cache.length == doc.tokens


# ---- which model reads: the best installed one that reads the languages, within what a CPU reads fast enough

@pytest.fixture
def all_installed(monkeypatch, tmp_path):
    """Every offline model installed here (none named by KVQA_OFFLINE_MODELS); the settings of a start that named
    no model, on a CPU."""
    monkeypatch.delenv("KVQA_OFFLINE_MODELS", raising=False)
    monkeypatch.setattr(offline, "installed", lambda model, cache_dir: True)
    return Config.of(cache_dir=tmp_path, model_reason=Message("reason.default"), device="cpu")


ENGLISH = "The Lumaro CP-40 press holds 1.2 litres. Its frame is guaranteed for 24 months. " * 8
GERMAN = "Die Presse fasst 1,2 Liter. Der Rahmen hat eine Garantie von 24 Monaten, und die Dichtung ist aus Silikon. " \
    * 8
CHINESE = "青石茶叶合作社成立于二〇〇八年，位于青石镇老粮站。合作社有社员一百二十户，主要种植绿茶和白茶。" * 8


def test_the_best_installed_model_that_reads_the_language_reads_it(all_installed):
    for text in (ENGLISH, GERMAN, CHINESE):
        model, why = reading_model(all_installed, text)
        assert model == offline.QWEN_15B.name, text[:20]
        assert render(why, "en") and render(why, "zh")
    assert reading_model(all_installed, GERMAN)[1].key == "reason.reads_language"  # SmolLM2 reads no German
    assert "German" in str(reading_model(all_installed, GERMAN)[1])
    assert reading_model(all_installed, ENGLISH)[1].key == "reason.better_model"
    assert reading_model(all_installed, ENGLISH, questions=["Wie lange gilt die Garantie?"])[1].key == (
        "reason.reads_language")
    on_qwen = all_installed.replaced(model=offline.QWEN_15B.name)
    assert reading_model(on_qwen, ENGLISH) is None and reading_model(on_qwen, GERMAN) is None
    for named in ("reason.env", "reason.command_line", "reason.app"):  # a person named the model: kept
        assert reading_model(all_installed.replaced(model_reason=Message(named)), ENGLISH) is None


def test_on_a_cpu_a_long_document_goes_to_the_faster_model_and_on_a_gpu_to_the_best(all_installed):
    long = ENGLISH * 60  # about 20,000 tokens: past the 1.5B's cpu_tokens, within both Qwen contexts
    assert offline.QWEN_15B.cpu_tokens < 20_000 < offline.QWEN_05B.context
    model, why = reading_model(all_installed, long)
    assert model == offline.QWEN_05B.name and why.key == "reason.long_document"  # SmolLM2 holds 8k
    on_best = all_installed.replaced(model=offline.QWEN_15B.name)
    assert reading_model(on_best, long) == (offline.QWEN_05B.name, reading_model(on_best, long)[1])
    assert reading_model(on_best, long)[1].key == "reason.faster_model"
    assert reading_model(all_installed.replaced(device="cuda"), long)[0] == offline.QWEN_15B.name


def test_kvqa_offline_models_names_the_models_kvqa_may_choose(all_installed, monkeypatch):
    monkeypatch.setenv("KVQA_OFFLINE_MODELS", "SmolLM2-135M-Instruct, gemma-3-270m")
    assert [m.name for m in offline.installed_models(all_installed.cache_dir)] == [
        "SmolLM2-135M-Instruct", "gemma-3-270m"]
    assert reading_model(all_installed, ENGLISH) is None
    assert reading_model(all_installed, CHINESE)[0] == "gemma-3-270m"
    assert reading_model(all_installed, GERMAN) is None  # nothing named reads German: the model it was given


# ---- the real models (slow): converted by `make setup`, read through the CLI as a user does

def kvqa_ask(text: str, *questions: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "KVQA_OFFLINE_MODELS"} | {"KVQA_WEIGHTS": "auto"}
    args = [sys.executable, "-m", "kvqa", "ask", "-", "--json"] + [a for q in questions for a in ("-q", q)]
    return subprocess.run(args, input=text, capture_output=True, text=True, timeout=600, env=environ | (env or {}))


@pytest.mark.model
def test_kvqa_ask_answers_with_the_qwen_15b_by_default_saying_so():
    text = ("The Harwick ferry was built in 1887 by the Orlan shipyard. It carried 340 passengers between the two "
            "banks of the Tessel river until 1961, when the Harwick bridge opened.") * 3
    out = kvqa_ask(text, "Who built the Harwick ferry?", "Wann wurde die Brücke eröffnet?")
    assert out.returncode == 0, out.stderr
    assert "reading with Qwen2.5-Coder-1.5B-Instruct" in out.stderr
    result = json.loads(out.stdout)
    answers = [a["answer"] for a in result["answers"]]
    assert "Orlan" in answers[0] and "1961" in answers[1], answers


@pytest.mark.model
def test_the_real_qwen_05b_answers_from_its_int8_cache_as_a_recompute_in_the_same_chunks():
    lm = kvqa.load_model(kvqa.Config.of(model=offline.QWEN_05B.name, weights="int8"))
    assert lm.weights == "int8" and type(lm.model).__name__ == "Qwen2ForCausalLM"
    document = kvqa.document_from_text(TEXT)
    config = kvqa.Config.of(model=offline.QWEN_05B.name, chunk_size=256, max_new_tokens=16)
    doc = kvqa.prefill(lm, document, config=config)
    for question in QUESTIONS_ASKED[::2]:  # English and Chinese
        cached = kvqa.answer(lm, doc, question, max_new_tokens=16)
        again = kvqa.answer_without_cache(lm, document, question, config=config, prompt=doc.prompt,
                                          same_schedule=True)
        assert cached.token_ids == again.token_ids and len(cached.token_ids) > 0, question
    assert "pelican" in kvqa.answer(lm, doc, QUESTIONS_ASKED[0], max_new_tokens=16).text.lower()


@pytest.mark.parametrize("weights", ["fp32", "int8"])
def test_qwen2_steps_as_its_forward_does_bit_for_bit(default_lm, llama3_tokenizer, weights):
    model, tokenizer = tiny_qwen(default_lm, llama3_tokenizer)
    lm = prepare(model, tokenizer, name="tiny-qwen", device=torch.device("cpu"), weights=weights)
    assert lm.step is not None and has_step(lm.model, torch.device("cpu"))
    in_c = assert_same(steps_both_ways(lm, prompt_tokens=37, steps=6))
    if weights == "int8" and layers_in_c_run():  # q, k and v's biases added in C
        assert lm.step.in_c is not None
        in_python = assert_same(steps_both_ways(python_loop(lm), prompt_tokens=37, steps=6))
        assert all(torch.equal(a, b) for a, b in zip(in_c, in_python))
