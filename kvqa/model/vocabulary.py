"""What kvqa reads from a tokenizer's vocabulary: the tokens that end an answer (EOS), the tokens that are numbers (the
repetition check counts them as one), the tokens that hold a line break (they end a completion prompt's answer).

Each scan is made once per tokenizer object and kept while the tokenizer lives (a tokenizer freed and another made at
its address get their own: keyed by the object, weakly, not by id()). kvqa.model.loading.prepare makes them at load,
so a first question does not wait for a scan of the vocabulary (Gemma 3's 262,144 tokens: about 0.7 s on 2 cores).
"""

from __future__ import annotations

import weakref

_numbers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_line_ends: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<end_of_turn>")  # chat templates' ends


def eos_ids(tokenizer, generation_eos: int | list[int] | None) -> frozenset[int]:
    """The ids that end an answer: the model's generation EOS, the tokenizer's EOS and the chat templates' end tokens
    this vocabulary has."""
    ids = set(generation_eos if isinstance(generation_eos, list) else
              [generation_eos] if generation_eos is not None else [])
    vocab = tokenizer.get_vocab()  # a dict built anew at each call (262k entries for Gemma 3): read once
    ids.update(vocab[token] for token in (tokenizer.eos_token, *END_TOKENS) if token and token in vocab)
    return frozenset(ids)


def number_tokens(tokenizer) -> frozenset[int]:
    """The ids of the tokenizer's tokens that are digits only (with a leading space or not). A token written in ASCII
    without a digit decodes to itself (byte-level BPE and SentencePiece alike), so only the others are decoded."""
    if tokenizer not in _numbers:
        _numbers[tokenizer] = frozenset(
            i for token, i in tokenizer.get_vocab().items()
            if not (token.isascii() and not any(c.isdigit() for c in token))
            and tokenizer.convert_tokens_to_string([token]).strip().isdigit())
    return _numbers[tokenizer]


def line_end_tokens(tokenizer) -> frozenset[int]:
    """The ids of the tokenizer's tokens whose text holds a line break: from the vocabulary's token strings that can
    hold one (a literal newline as SentencePiece writes it, "Ċ" for byte-level BPE, the byte-fallback <0x0A>), each
    confirmed by decoding it."""
    if tokenizer not in _line_ends:
        candidates = [i for token, i in tokenizer.get_vocab().items()
                      if "\n" in token or "\u010a" in token or "<0x0A>" in token]
        _line_ends[tokenizer] = frozenset(i for i in candidates if "\n" in tokenizer.decode([i]))
    return _line_ends[tokenizer]
