"""The streaming detokenizer (kvqa.generation.decode.Detokenizer): an answer's text as its tokens come is the text of
all of them decoded at once, at every step (half a UTF-8 character at the end included), in English and Chinese, with
SmolLM2's byte-level BPE and Gemma's SentencePiece; and the tokenizer's work per token does not grow with the
answer (it decodes a window of the last few tokens, not the whole answer again)."""

from __future__ import annotations

import pytest

from kvqa.generation.decode import Detokenizer

TEXTS = {
    "en": "The museum opens at 9 am; tickets cost $12.50 (children: free). It isn't open on Mondays, "
          "and the café's menu lists crème brûlée. " * 6,
    "zh": "博物馆在工作日上午九点开门，门票十二元五角（儿童免费）。周一闭馆；咖啡馆供应焦糖布丁。🙂 " * 6,
}


class Counting:
    """A tokenizer whose decode calls are recorded: how many tokens each one decoded."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def decode(self, ids, **kw):
        self.calls.append(len(ids))
        return self.tokenizer.decode(ids, **kw)


def replay(tokenizer, ids: list[int], *, strip: bool = False) -> tuple[list[str], list[int], Detokenizer]:
    """Each step's text, and the tokens each step decoded (all its decode calls together)."""
    counting = Counting(tokenizer)
    text, texts, work = Detokenizer(counting, strip=strip), [], []
    for token in ids:
        before = len(counting.calls)
        texts.append(text.add(token))
        work.append(sum(counting.calls[before:]))
    return texts, work, text


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("strip", [False, True])
def test_each_step_says_what_all_the_tokens_say(default_tokenizer, lang, strip):
    ids = default_tokenizer.encode("  " + TEXTS[lang], add_special_tokens=False)
    texts, _, text = replay(default_tokenizer, ids, strip=strip)
    for n, got in enumerate(texts, start=1):
        whole = default_tokenizer.decode(ids[:n], skip_special_tokens=True)
        assert got == (whole.lstrip() if strip else whole), n
    assert text.whole() == texts[-1]
    if lang == "zh":  # byte-level BPE cuts Chinese characters: some steps end in half of one, then it is whole
        assert any(t.endswith("\ufffd") for t in texts) and not texts[-1].endswith("\ufffd")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_work_per_token_does_not_grow_with_the_answer(default_tokenizer, lang):
    ids = default_tokenizer.encode(TEXTS[lang], add_special_tokens=False)
    assert len(ids) > 150
    _, work, _ = replay(default_tokenizer, ids)
    assert max(work) <= 16, work  # a window of a few tokens (more while a character is cut), however long the answer
    assert sum(work) < 8 * len(ids)  # linear in the answer's length; decoding it all again each step: ~len^2 / 2


def test_gemmas_sentencepiece_text_too(gemma_lm):
    tokenizer = gemma_lm.tokenizer
    for lang in ("en", "zh"):
        ids = tokenizer.encode(TEXTS[lang], add_special_tokens=False)
        texts, work, _ = replay(tokenizer, ids)
        assert [texts[n - 1] for n in range(1, len(ids) + 1, 7)] == [
            tokenizer.decode(ids[:n], skip_special_tokens=True) for n in range(1, len(ids) + 1, 7)], lang
        assert texts[-1] == tokenizer.decode(ids, skip_special_tokens=True)
        assert max(work[-20:]) <= 16, work


def test_a_token_that_changes_the_text_before_it_is_decoded_from_the_start():
    """A tokenizer whose decode of a window is not a prefix of the next (one that joins across a boundary): the
    detokenizer decodes all the tokens again, so its text is still the whole decode."""

    class Joining:
        def decode(self, ids, **kw):
            return "".join("ab"[i] for i in ids).replace("ab", "X")

    text = Detokenizer(Joining())
    assert [text.add(t) for t in (0, 1, 0, 0, 1)] == ["a", "X", "Xa", "Xaa", "XaX"]
