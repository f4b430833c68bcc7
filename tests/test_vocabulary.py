"""kvqa.model.vocabulary: the scans of a tokenizer's vocabulary, made once per tokenizer object."""

from __future__ import annotations

import gc

import kvqa.model.vocabulary as vocabulary
from kvqa.model.vocabulary import eos_ids, line_end_tokens, number_tokens


class Tokenizer:
    """A vocabulary and its decoder, as a transformers tokenizer gives them (get_vocab builds a new dict each call)."""

    def __init__(self, vocab: dict[str, int], eos_token: str | None = None):
        self.vocab, self.eos_token, self.vocab_reads = vocab, eos_token, 0

    def get_vocab(self) -> dict[str, int]:
        self.vocab_reads += 1
        return dict(self.vocab)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens).replace("\u0120", " ").replace("\u010a", "\n")

    def decode(self, ids: list[int]) -> str:
        token = {i: t for t, i in self.vocab.items()}
        return self.convert_tokens_to_string([token[i] for i in ids])


def test_number_tokens_are_every_token_that_decodes_to_digits(default_tokenizer):
    """The scan decodes only the tokens that may be digits: the same set as decoding every token."""
    tok = default_tokenizer
    every = {i for token, i in tok.get_vocab().items() if tok.convert_tokens_to_string([token]).strip().isdigit()}
    digits = number_tokens(tok)
    assert digits == every
    assert {tok.convert_tokens_to_ids(t) for t in ("1", "7")} <= digits
    assert tok.convert_tokens_to_ids("one") not in digits


def test_line_end_tokens_hold_a_line_break(default_tokenizer):
    tok = default_tokenizer
    ends = line_end_tokens(tok)
    assert tok("\n", add_special_tokens=False)["input_ids"][0] in ends
    assert all("\n" in tok.decode([i]) for i in ends)
    assert tok("Paris", add_special_tokens=False)["input_ids"][0] not in ends


def test_each_scan_is_made_once_per_tokenizer_and_not_kept_after_it():
    tok = Tokenizer({"7": 0, "x": 1, "\u012012": 2, "\u010a": 3})
    assert number_tokens(tok) == {0, 2} and line_end_tokens(tok) == {3}
    reads = tok.vocab_reads
    assert number_tokens(tok) == {0, 2} and line_end_tokens(tok) == {3} and tok.vocab_reads == reads
    assert eos_ids(tok, None) == frozenset() and tok.vocab_reads == reads == 1  # one read for every scan
    held = len(vocabulary._scans)
    del tok
    gc.collect()
    assert len(vocabulary._scans) == held - 1


def test_a_tokenizer_made_where_a_freed_one_was_gets_its_own_scan():
    """Keyed by the object, not id(): a new tokenizer at a freed one's address is scanned anew."""
    for _ in range(50):
        first = Tokenizer({"7": 0, "x": 1})
        assert number_tokens(first) == {0}
        address = id(first)
        del first
        second = Tokenizer({"x": 0, "7": 1, "\u010a": 2})
        assert number_tokens(second) == {1} and line_end_tokens(second) == {2}
        if id(second) == address:
            break


def test_eos_ids_are_the_models_and_the_vocabularys_end_tokens():
    tok = Tokenizer({"</s>": 0, "<|im_end|>": 1, "<end_of_turn>": 2, "x": 3}, eos_token="</s>")
    assert eos_ids(tok, None) == {0, 1, 2}
    assert eos_ids(tok, 9) == {0, 1, 2, 9} and eos_ids(tok, [8, 9]) == {0, 1, 2, 8, 9}
    assert tok.vocab_reads == 1
    assert eos_ids(Tokenizer({"x": 0}), None) == frozenset()


def test_a_digit_outside_ascii_is_a_number_token_in_byte_level_and_sentencepiece_spelling():
    """Byte-level BPE writes the UTF-8 bytes of "٣" (Arabic-Indic three) as "Ù£"; SentencePiece writes it as it is,
    and a byte-fallback token as <0x33>; none of them is ASCII with a digit in it, or only one is."""
    tok = Tokenizer({"\u00d9\u00a3": 0, "\u2581\u0663": 1, "\u4e09": 2, "<0x33>": 3, "\u00e9": 4})
    tok.convert_tokens_to_string = lambda tokens: {"\u00d9\u00a3": "\u0663", "\u2581\u0663": " \u0663",
                                                   "<0x33>": "3"}.get(tokens[0], tokens[0])
    assert number_tokens(tok) == {0, 1, 3}  # "三" is a numeral but not a digit (str.isdigit)
