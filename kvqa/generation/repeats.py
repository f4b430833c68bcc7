"""A sentence said again with small changes: the decode loop's second repeat stop, beside decode.is_looping (a
span said again whole). The answer is read as it grows, token by token, split into sentences and clauses at
. ! ? ; (followed by a space), at 。！？；， and at line ends. A sentence repeats when most of its word trigrams
(character trigrams for Chinese) were in one earlier sentence of the answer; the answer then ends before it
(SentenceRepeats.end), and while the running sentence could still prove a repeat it is held back from the stream
(SentenceRepeats.said), so a reader does not see the repeat and the streamed pieces still add up to the answer. Pure
text, no model, read once per token: the same tokens give the same decisions on the cached path and a recompute,
drafted or not. Each token costs a look at the running sentence only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from kvqa.languages import UNSPACED

NGRAM = 3  # trigrams: of words (English) or characters (Chinese); bigrams let template lists ("The first step
#            is to ... The second step is to ...") share too much
SHARE = 0.6  # a sentence whose trigrams were this share or more of one earlier sentence's repeats it
LEAST = 5  # trigrams a sentence needs (7 words, 7 Chinese characters) to count: "Yes. Yes." is no loop, nor
#           "The virus can spread through droplets. The virus can spread through contact."

_UNIT = re.compile(f"[{UNSPACED}]|[^\\W{UNSPACED}]+")  # a CJK character, or a run of letters, digits and _
_WORD_GOING = re.compile(f"[^\\W{UNSPACED}]+$")  # the text's last word, which the next token may go on
_END = re.compile(r"(?:[.!?;]+[\"'”’)\]]*(?=\s)|[。！？；，\n])\s*")  # "3.5" is no end: a space
#                                                                       must follow (after a closing quote or bracket)


def ngrams(sentence: str, n: int = NGRAM) -> frozenset[tuple[str, ...]]:
    """The sentence's n-grams of units (words lower-cased, Chinese characters one by one)."""
    units = _UNIT.findall(sentence.lower())
    return frozenset(tuple(units[i: i + n]) for i in range(len(units) - n + 1))


class SentenceRepeats:
    """Read an answer's text as it grows (add, once per token; finish at its end); True when its latest sentence
    said an earlier one again, and the answer is to end at `end` (a character offset into its text: after the last
    sentence before the repeat). `said`: how much of the text may be shown now; a running sentence that could still
    prove a repeat of an earlier one waits (every later sentence's first words too, too few to tell), and is shown,
    for good, once it cannot. A repeat found after part of it was shown ends the answer after it."""

    def __init__(self, *, n: int = NGRAM, share: float = SHARE, least: int = LEAST):
        self.n, self.share, self.least = n, share, least
        self.start = 0  # where the running sentence starts in the text
        self.said = 0
        self.end: int | None = None
        self.lengths: list[int] = []  # the text's length after each token: where to cut the token ids
        self._earlier: list[frozenset[tuple[str, ...]]] = []  # the trigrams of each earlier sentence long enough
        self._shown = False  # part of the running sentence was shown

    def add(self, text: str) -> bool:
        """The answer's text after one more token."""
        self.lengths.append(len(text.rstrip("\ufffd")))  # half a character (a UTF-8 piece) not counted yet
        while (found := _END.search(text, self.start)) is not None:
            if self._judge(text, found.end()):
                return True
        running = _WORD_GOING.sub("", text[self.start:])  # its words so far, not the one being said
        held = bool(self._earlier) and not self._shown and (
            len(_UNIT.findall(running)) < self.n or self._repeats(ngrams(running, self.n), of_running=True))
        self._shown = self._shown or not held
        self.said = len(text[:self.start].rstrip()) if held else len(text)
        return False

    def finish(self, text: str) -> bool:
        """The answer's text at its end: its last sentence, ended or not, judged as a whole."""
        return self.end is not None or (self.start < len(text) and self._judge(text, len(text)))

    def tokens(self) -> int:
        """How many of the answer's tokens hold its text up to `end` (all when it did not repeat)."""
        if self.end is None:
            return len(self.lengths)
        return next((i + 1 for i, length in enumerate(self.lengths) if length >= self.end), len(self.lengths))

    def _judge(self, text: str, stop: int) -> bool:
        """Judge the sentence text[start:stop]: a repeat ends the answer, else it is remembered."""
        grams = ngrams(text[self.start: stop], self.n)
        if self._repeats(grams, of_running=False):
            self.end = self.said = len(text[:stop if self._shown else self.start].rstrip())
            return True
        if len(grams) >= self.least:
            self._earlier.append(grams)
        self.start, self._shown = stop, False
        return False

    def _repeats(self, grams: frozenset[tuple[str, ...]], *, of_running: bool) -> bool:
        """True when `share` of the sentence's n-grams were in one earlier sentence (a whole one needs `least`); a
        running sentence also while it could still prove one: it shares an n-gram with it (or has said too little
        to tell) and would repeat it if it went on to say the rest of it."""
        if not grams or (len(grams) < self.least and not of_running):
            return False
        for earlier in self._earlier:
            same = len(grams & earlier)
            if same >= self.share * len(grams):
                return True
            if of_running and (same or len(grams) <= self.n + 1) and (
                    len(earlier) >= self.share * (len(grams) + len(earlier) - same)):
                return True  # it shares some, and saying the rest of this one would make it a repeat
        return False


def sentence_cut(token_ids: Sequence[int], say: Callable[[Sequence[int]], str], *, stop_reason: str,
                 **options) -> tuple[int, int] | None:
    """Where SentenceRepeats would have ended an answer already made (token ids, `say` their text as the decode loop
    says it): (tokens kept, characters kept), or None when it would not. For measuring after the fact."""
    repeats = SentenceRepeats(**options)
    for i in range(1, len(token_ids) + 1):
        if repeats.add(say(token_ids[:i])):
            break
    else:
        if stop_reason == "stopped" or not repeats.finish(say(token_ids)):
            return None
    return repeats.tokens(), repeats.end
