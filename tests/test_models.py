"""Which models kvqa takes, and how device and dtype are chosen."""

from __future__ import annotations

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

import kvqa
from kvqa.model.loading import choose_device, choose_dtype, prepare


def tiny_mistral(sliding_window):
    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=sliding_window)
    return MistralForCausalLM(config)


def test_chunked_attention_models_are_refused_with_a_reason_and_sliding_window_ones_run(default_lm):
    chunked = tiny_mistral(None)
    chunked.config.layer_types, chunked.config.attention_chunk_size = ["chunked_attention", "full_attention"], 8
    with pytest.raises(kvqa.ModelError, match="chunked_attention layers, whose cache kvqa cannot roll back"):
        prepare(chunked, default_lm.tokenizer, name="tiny-chunked", device=torch.device("cpu"))
    for window in (4096, None):  # Mistral's sliding window (kvqa.model.kv_cache keeps every position), or none
        lm = prepare(tiny_mistral(window), default_lm.tokenizer, name="tiny-mistral", device=torch.device("cpu"))
        assert lm.context_length > 0 and not any(p.requires_grad for p in lm.model.parameters())
    layers = kvqa.model.kv_cache.new_cache(tiny_mistral(4096).config, 8).layers
    assert [layer.window for layer in layers] == [4096, 4096]


def test_device_and_dtype_choice_on_a_cpu_machine():
    if not torch.cuda.is_available():
        assert choose_device("auto") == torch.device("cpu")
    assert choose_dtype("auto", torch.device("cpu")) == torch.float32
    assert choose_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(kvqa.ModelError, match="Unknown dtype"):
        choose_dtype("float8", torch.device("cpu"))
    with pytest.raises(kvqa.ModelError, match="Unknown device"):
        choose_device("tpu:0")
    if not torch.cuda.is_available():
        with pytest.raises(kvqa.ModelError, match="no CUDA GPU"):
            choose_device("cuda")


def test_a_model_that_cannot_be_found_says_what_to_do(tmp_path):
    with pytest.raises(kvqa.ModelError, match="Could not load model"):
        kvqa.load_model(kvqa.Config.of(model=str(tmp_path / "no-such-model")))


def test_model_choice_for_the_machine_without_network():
    """With no model named, CUDA and hub access (mocked at the boundary) pick Llama 3.2 3B, else the
    offline default, with a one-line reason."""
    from kvqa.config import DEFAULT_MODEL, GPU_MODEL, SPACES_DEFAULT_MODEL, choose_model, config_from_env

    calls = []

    def access(ok, why=""):
        return lambda repo, token: calls.append((repo, token)) or (ok, why)

    assert choose_model({}, cuda=False, hub_access=access(True)) == (
        DEFAULT_MODEL, "no CUDA GPU here, so the small default model")
    model, reason = choose_model({}, cuda=True, hub_access=access(True))
    assert model == DEFAULT_MODEL and "HF_TOKEN is not set" in reason and not calls
    assert choose_model({"HF_TOKEN": "hf_x"}, cuda=True, hub_access=access(True))[0] == GPU_MODEL
    assert calls == [(GPU_MODEL, "hf_x")]
    model, reason = choose_model({"HF_TOKEN": "hf_x", "SPACE_ID": "a/b"}, cuda=True,
                                 hub_access=access(False, "HF_TOKEN has no access to it"))
    assert model == SPACES_DEFAULT_MODEL and "no access" in reason
    config = config_from_env({"KVQA_MODEL": "some/model"})
    assert (config.model, config.model_reason) == ("some/model", "named by KVQA_MODEL")
    assert config_from_env({}, model="other/model").model_reason == "named on the command line"
    assert config_from_env({}).model_reason.startswith("no CUDA GPU")  # this machine


def test_hub_access_says_why_offline(monkeypatch):
    import huggingface_hub

    from kvqa.config import _hub_access

    def offline(repo, token=None):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "auth_check", offline)
    ok, why = _hub_access("meta-llama/Llama-3.2-3B-Instruct", "hf_x")
    assert not ok and "cannot be reached" in why


def test_a_transformers_without_the_cache_argument_is_refused(default_lm):
    """transformers before 5.24 names the argument past_key_values and swallows cache= unused (found on the GPU
    machine's image, 5.17): the cache would stay empty. kvqa refuses such a model at load, saying what to install."""
    from transformers import LlamaConfig, LlamaForCausalLM

    class OldSignature(LlamaForCausalLM):
        def forward(self, input_ids=None, past_key_values=None, **kwargs):
            return super().forward(input_ids=input_ids, cache=past_key_values, **kwargs)

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=default_lm.tokenizer.vocab_size)
    with pytest.raises(kvqa.ModelError, match="transformers 5.24 or newer.*pip install -r requirements.txt"):
        prepare(OldSignature(config), default_lm.tokenizer, name="old", device=torch.device("cpu"))
