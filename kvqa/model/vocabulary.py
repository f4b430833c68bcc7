"""What kvqa reads from a tokenizer's vocabulary: the tokens that end an answer (EOS), the tokens that are numbers (the
repetition check counts them as one), the tokens that hold a line break (they end a completion prompt's answer).

One scan per tokenizer object, over one read of its vocabulary (transformers builds the dict anew at each
get_vocab(): 0.2-0.4 s for Gemma 3's 262,144 tokens on 2 cores), kept while the tokenizer lives: keyed by the object,
weakly, not by id(), so a tokenizer made at a freed one's address gets its own. kvqa.model.loading.prepare makes it at
load, so a first question does not wait for it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<end_of_turn>")  # chat templates' ends


@dataclass(frozen=True)
class Scan:
    ends: frozenset[int]  # the tokenizer's EOS and the chat templates' end tokens it has
    numbers: frozenset[int]  # tokens that decode to digits only (a leading space or not)
    line_ends: frozenset[int]  # tokens whose text holds a line break


_scans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def scan(tokenizer) -> Scan:
    """The tokenizer's scan, made on first use."""
    if tokenizer not in _scans:
        vocab = tokenizer.get_vocab()
        ends = frozenset(vocab[token] for token in (tokenizer.eos_token, *END_TOKENS) if token and token in vocab)
        numbers = frozenset(i for token, i in vocab.items()
                            if _may_be_digits(token) and tokenizer.convert_tokens_to_string([token]).strip().isdigit())
        # a literal newline as SentencePiece writes it, "Ċ" for byte-level BPE, the byte-fallback <0x0A>; confirmed
        lines = [i for token, i in vocab.items() if "\n" in token or "\u010a" in token or "<0x0A>" in token]
        _scans[tokenizer] = Scan(ends, numbers, frozenset(i for i in lines if "\n" in tokenizer.decode([i])))
    return _scans[tokenizer]


def _may_be_digits(token: str) -> bool:
    """Whether a token's text can decode to digits: it holds a digit (as written, or in a byte-fallback <0x3N>), or a
    character byte-level BPE writes a non-ASCII byte as (U+00A1-U+0143: a digit outside ASCII spelled in UTF-8 bytes).
    Any other token decodes to its own characters, none of them a digit. Gemma 3: 17,518 of 262,144 tokens decoded."""
    return any(c.isdigit() or "\x80" <= c <= "\u0143" for c in token)


def eos_ids(tokenizer, generation_eos: int | list[int] | None) -> frozenset[int]:
    """The ids that end an answer: the model's generation EOS and the scan's end tokens."""
    ids = generation_eos if isinstance(generation_eos, list) else [generation_eos] if generation_eos is not None else []
    return scan(tokenizer).ends | frozenset(ids)


def number_tokens(tokenizer) -> frozenset[int]:
    return scan(tokenizer).numbers


def line_end_tokens(tokenizer) -> frozenset[int]:
    return scan(tokenizer).line_ends
