"""Presets: every model the app offers runs through kvqa's engine with its real architecture (kvqa/model/configs; two
layers and the test tokenizer's vocabulary, random weights, so it runs in seconds), its kind of chat template (ChatML,
Qwen2.5's, Qwen3's without thinking, Llama 3's, Gemma 3's) splits exactly, and its cached answers equal transformers'
own `generate` on a copy of the same model with stock attention. Gemma 3 4B's language model is not a preset
(kvqa/model/configs/gemma-3-4b.json says why) but its architecture is tested the same way."""

from __future__ import annotations

import copy

import pytest
import torch

import kvqa
from conftest import FIXTURES
from kvqa.generation.rerank import passage_order
from kvqa.messages import render
from kvqa.model.architectures import architecture_of, parameters
from kvqa.model.loading import prepare
from kvqa.model.presets import PRESETS, Preset, fitting, language_note, preset_for
from kvqa.prompt import ChatPrompt, question_turn, system_text
from kvqa.results import QuestionTurn
from kvqa.session.ask import ask
from ranked import candidates, quotes

PUBLISHED_BILLIONS = {"smollm2-135m": 0.135, "smollm2-360m": 0.362, "qwen2.5-0.5b": 0.494, "qwen3-0.6b": 0.596,
                      "llama-3.2-1b": 1.236, "gemma-3-1b": 1.000, "qwen2.5-1.5b": 1.544, "smollm2-1.7b": 1.711,
                      "llama-3.2-3b": 3.213}
ARCHITECTURES = (*PRESETS, Preset("google/gemma-3-4b-it", "gemma-3-4b", "the language model of Gemma 3 4B-it"))
DOCUMENT = ("The Lumaro CP-40 press holds 1.2 litres. Its frame is guaranteed for 24 months. Use 60 grams of coffee "
            "per litre and wait four minutes before pressing. ") * 6


def asked(question: str) -> QuestionTurn:
    """The question as an engine gets it: with BM25's best five passages of DOCUMENT."""
    return QuestionTurn(question, passages=tuple(candidates(DOCUMENT, question, limit=5)))


def test_parameters_are_counted_from_the_architecture():
    for preset in PRESETS:
        assert preset.parameters / 1e9 == pytest.approx(PUBLISHED_BILLIONS[preset.config], rel=0.01), preset.model
    fits = [p.config for p in fitting(16 * 2**30, 4)]  # a CPU Space: 16 GB, float32
    assert "qwen2.5-0.5b" in fits and "llama-3.2-3b" not in fits


def test_each_architectures_count_is_what_transformers_builds_of_the_config():
    """kvqa.model.architectures counts parameters from config.json's values; a model built from each preset's config
    (on the meta device: no memory) holds exactly that many, a tied embedding once. A model type with no file is
    refused, not guessed."""
    from transformers import AutoConfig, AutoModelForCausalLM

    for preset in ARCHITECTURES:
        settings = dict(preset.settings)
        config = AutoConfig.for_model(settings.pop("model_type"), **settings)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        assert sum(t.numel() for t in model.parameters()) == preset.parameters, preset.model
        architecture = architecture_of(model)
        assert architecture is not None and architecture.model_type == preset.settings["model_type"]
    with pytest.raises(ValueError, match="mamba"):
        parameters({"model_type": "mamba"})


def test_a_presets_cache_per_token_is_what_a_loaded_model_of_it_holds():
    from transformers import AutoConfig

    from kvqa.model.kv_cache import bytes_per_token

    for preset in PRESETS:
        config = AutoConfig.for_model(**preset.settings)
        for dtype in (torch.float32, torch.bfloat16):
            assert preset.kv_bytes_per_token(dtype.itemsize) == bytes_per_token(config, dtype), preset.model


def tokenizer_for(preset, default_lm, llama3_tokenizer):
    if preset.config.startswith("llama"):
        return llama3_tokenizer
    if preset.config.startswith("smollm2"):
        return default_lm.tokenizer
    tokenizer = copy.deepcopy(default_lm.tokenizer)  # the SmolLM2 vocabulary with the preset's kind of template
    if preset.config.startswith("gemma"):
        tokenizer.add_tokens(["<start_of_turn>", "<end_of_turn>"], special_tokens=True)
        tokenizer.chat_template = (FIXTURES / "gemma3_chat_template.jinja").read_text()
        return tokenizer
    name = "qwen3_chat_template.jinja" if preset.config.startswith("qwen3") else "qwen2.5_chat_template.jinja"
    tokenizer.chat_template = (FIXTURES / name).read_text()
    return tokenizer


def small_copy(preset, tokenizer):
    """The preset's architecture with two layers, a narrow MLP and the tokenizer's vocabulary, random weights scaled so
    the logits are not flat (greedy choices are then far from ties). Gemma 3's two layers are one sliding-window layer
    and one global layer, the window cut to 16 positions so the document spans many windows."""
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = {k: v for k, v in preset.settings.items()
                if not k.startswith("_") and k not in ("torch_dtype", "architectures")}
    # the attention's layout (heads, key/value heads, head size, rotary settings) as the preset has it; the MLP
    # narrowed, which changes nothing kvqa does and makes the copy a few times smaller
    settings.update(num_hidden_layers=2, vocab_size=len(tokenizer), intermediate_size=256)
    if settings["model_type"] == "gemma3_text":
        settings.update(layer_types=["sliding_attention", "full_attention"], sliding_window=16)
    config = AutoConfig.for_model(settings.pop("model_type"), **settings)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 2 / config.hidden_size ** 0.5)
    return model


@pytest.mark.parametrize("preset", ARCHITECTURES, ids=[p.config for p in ARCHITECTURES])
def test_each_preset_answers_from_its_cache_as_transformers_generate_does(preset, default_lm, llama3_tokenizer):
    tokenizer = tokenizer_for(preset, default_lm, llama3_tokenizer)
    model = small_copy(preset, tokenizer)
    stock = copy.deepcopy(model).eval()  # before prepare(): stock attention, the model's own forward
    lm = prepare(model, tokenizer, name=preset.model, device=torch.device("cpu"))
    ChatPrompt.for_tokenizer(tokenizer).check()
    engine = kvqa.LocalEngine(kvqa.Config.of(max_new_tokens=10, repeat_stop=0, quote_passages=1), lm=lm)
    doc = engine.prefill(kvqa.document_from_text(DOCUMENT))
    for question in ("How much does it hold?", "它能装多少？"):
        answer = ask(engine, doc, question).answer
        messages = [{"role": "system", "content": system_text(DOCUMENT)},
                    {"role": "user", "content": question_turn(question, quotes(
                        DOCUMENT, question, 1,
                        passage_order(lm, asked(question), engine.config.decoding.rerank_passages)))}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             date_string=doc.prompt.date_string, enable_thinking=False)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = stock.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                                 eos_token_id=sorted(lm.eos_ids), pad_token_id=0)
        expected = out[0, ids.shape[1]:].tolist()
        expected = expected[:next((i for i, t in enumerate(expected) if t in lm.eos_ids), len(expected))]
        assert list(answer.token_ids) == expected, (preset.model, question)
        assert doc.cache.length == doc.tokens


def test_qwen3_answers_without_thinking(default_lm):
    preset = next(p for p in PRESETS if p.config == "qwen3-0.6b")
    tokenizer = tokenizer_for(preset, default_lm, None)
    prompt = ChatPrompt.for_tokenizer(tokenizer)
    assert tokenizer.decode(prompt.suffix_ids("Why?")).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_the_dropdown_offers_the_presets_that_fit_on_a_space_only():
    from kvqa.model.presets import offered

    assert offered("SmolLM2-135M-Instruct", {}) == ["SmolLM2-135M-Instruct"]  # offline machine: no hub models
    space = offered("HuggingFaceTB/SmolLM2-135M-Instruct", {"SPACE_ID": "a/b"}, memory_bytes=16 * 2**30, cuda=False)
    assert space[0] == "HuggingFaceTB/SmolLM2-135M-Instruct" and "Qwen/Qwen2.5-0.5B-Instruct" in space
    assert "meta-llama/Llama-3.2-3B-Instruct" not in space  # 13.7 GiB in float32 is over half of 16 GB
    assert "meta-llama/Llama-3.2-1B-Instruct" not in space  # gated: not without HF_TOKEN
    gpu = offered("meta-llama/Llama-3.2-3B-Instruct", {"KVQA_PRESETS": "1", "HF_TOKEN": "hf_x"},
                  memory_bytes=80 * 2**30, cuda=True)
    assert gpu[0] == "meta-llama/Llama-3.2-3B-Instruct" and len(gpu) == len(PRESETS)


def test_a_chinese_document_in_an_english_only_preset_gets_a_note_naming_a_model_that_reads_chinese():
    chinese = "秘密词是鹈鹕。博物馆在工作日上午九点开门。" * 20
    english_quoting_chinese = "The museum's sign reads 博物馆 and opens at nine on weekdays. " * 20
    note = language_note("SmolLM2-135M-Instruct", chinese)  # as a loaded model names itself
    assert note is not None and note.key == "notice.english_model" and preset_for(note.params["better"]).chinese
    assert "reads English only" in str(note) and "只能读英文" in render(note, "zh")
    assert language_note("HuggingFaceTB/SmolLM2-135M-Instruct", english_quoting_chinese) is None
    assert language_note("Qwen/Qwen2.5-0.5B-Instruct", chinese) is None  # reads Chinese
    assert language_note("my-own-model", chinese) is None  # not measured: nothing said
