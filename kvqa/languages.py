"""Which language a text is in: the one place kvqa tells languages apart (the model that reads a document and a
question is chosen by it: kvqa.model.presets).

Chinese is told by its ideographs' share of the letters (a document, a question, passages spread over a document);
Japanese and Korean by their own scripts, Russian by Cyrillic and Arabic by its script; languages in Latin letters by
their commonest short words (a question of five words says "wer", "qui" or "¿"), English when none stands out. The
codes are ISO 639-1, as OfflineModel.languages and the presets list them.
"""

from __future__ import annotations

import re

# The scripts kvqa tells apart by their characters, as ranges for a regular expression's [...]: every module that
# asks "is this Chinese (CJK)?" takes its answer from here.
IDEOGRAPHS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs (Chinese; Japanese kanji share them)
# with kana and Hangul, read a character at a time (to ranking, the short phrase and the repeat stop, a word):
UNSPACED = "\u3040-\u30ff" + IDEOGRAPHS + "\uac00-\ud7af"
# CJK with its radicals, punctuation and full-width forms: a line broken between two of these joins with no space
WIDE = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
CJK = re.compile(f"[{IDEOGRAPHS}]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff]")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_ARABIC = re.compile(r"[\u0600-\u06ff]")
_WORD = re.compile(r"[^\W\d_]+")
SHORT = 400  # characters: a text this short is told by its words (a question), a longer one by its letters' shares

NAMES = {"en": "English", "zh": "Chinese", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
         "pt": "Portuguese", "nl": "Dutch", "ru": "Russian", "ja": "Japanese", "ko": "Korean", "vi": "Vietnamese",
         "ar": "Arabic"}

# the commonest short words of each language in Latin letters that the others rarely use (a word two languages share,
# such as "de" or "la", counts for neither)
_WORDS = {
    "en": "the of and to is was what who which when where how why in that with for does did are from by many much has "
          "have had were this",
    "de": "der die das und ist nicht ein eine mit von wer was wie wann wo warum welche welcher dem den des auf sich "
          "zu im für auch wurde sind welchem welchen welches viele wieviel hat haben hatte waren wird werden sie er "
          "es bei nach aus über oder aber als wenn dass",
    "fr": "le les et est une des du qui quoi quel quelle quels où comment pourquoi dans pour sur au aux ce cette "
          "sont été avec il elle combien quand ont était être par pas plus ses leur",
    "es": "el los las y es una del que qué quién cuál cuándo dónde cómo por para con se fue son está al su lo cuántos "
          "cuánto cuántas hay tiene tienen fueron",
    "it": "il gli e è una della delle che chi cosa quale quando dove come perché nel nella per con sono stato",
    "pt": "o os as e é uma do da dos das que quem qual quando onde como porque em no na para com foi são",
    "nl": "het een van wie wat welke wanneer waar hoe waarom niet met voor op zijn werd ook",
    "vi": "của và là có không những các được trong cho một người này đã với",
}
_MARKERS = {word: lang for lang, words in _WORDS.items() for word in words.split()
            if sum(word in other.split() for other in _WORDS.values()) == 1}


def cjk_and_letters(text: str) -> tuple[int, int]:
    """How many CJK ideographs, and how many letters (ideographs included), the text has."""
    return len(CJK.findall(text)), sum(c.isalpha() for c in text)


def mostly_chinese(text: str, *, sample: int = 4000) -> bool:
    """Whether a document is mostly Chinese: CJK ideographs are at least a third of the letters of its first
    `sample` characters (an English document quoting a few Chinese words is not)."""
    cjk, letters = cjk_and_letters(text[:sample])
    return cjk > 0 and 3 * cjk >= letters and not _KANA.search(text[:sample])


def holds_chinese(text: str, *, share: float = 0.1, samples: int = 8, sample: int = 1000) -> bool:
    """Whether a document holds Chinese passages a reader may ask about: CJK ideographs at least `share` of the
    letters of `samples` stretches spread over it (an English manual quoting a few Chinese words does not)."""
    step = max(len(text) // samples, 1)
    spread = "".join(text[i: i + sample] for i in range(0, len(text), step)) if len(text) > samples * sample else text
    cjk, letters = cjk_and_letters(spread)
    return letters > 0 and cjk >= share * letters


def in_chinese(question: str) -> bool:
    """Whether a question has CJK ideographs: its turn and the reranker's frame follow."""
    return CJK.search(question) is not None


def asked_in_chinese(question: str) -> bool:
    """Whether a question is asked in Chinese rather than quoting Chinese words: more CJK ideographs than words in
    other letters ("Sky Movies和Sky Box office也包含什么可选音轨？" is; "What does 白茶 mean?" is not)."""
    return len(CJK.findall(question)) > len(_WORD.findall(CJK.sub(" ", question)))


def language_of(text: str, *, sample: int = 4000) -> str:
    """The language a document (its first `sample` characters) or a question is written in, as a code of NAMES;
    "en" when nothing else stands out."""
    head = text[:sample]
    letters = max(sum(c.isalpha() for c in head), 1)
    if _KANA.search(head) and 10 * len(_KANA.findall(head)) >= letters:
        return "ja"
    if 3 * len(_HANGUL.findall(head)) >= letters:
        return "ko"
    if asked_in_chinese(head) if len(head) < SHORT else mostly_chinese(head):  # a question by its words (a tie of
        return "zh"  #                                                            ideographs and words is not Chinese)
    for code, script in (("ru", _CYRILLIC), ("ar", _ARABIC)):
        if 3 * len(script.findall(head)) >= letters:
            return code
    counts: dict[str, int] = {}
    for word in _WORD.findall(head.lower()):
        if word in _MARKERS:
            counts[_MARKERS[word]] = counts.get(_MARKERS[word], 0) + 1
    if "¿" in head or "¡" in head:
        counts["es"] = counts.get("es", 0) + 2
    best = max(counts, key=counts.get, default="en")
    return best if counts.get(best, 0) > counts.get("en", 0) else "en"


def languages_needed(text: str, *, page_lang: str | None = None, questions=()) -> tuple[str, ...]:
    """The languages whoever reads this document needs read: the document's, each question's, and Chinese where a
    document holding Chinese passages is read from the page in Chinese (its reader will ask in Chinese)."""
    needed = [language_of(text)] + [language_of(q) for q in questions]
    if page_lang == "zh" and holds_chinese(text):
        needed.append("zh")
    return tuple(dict.fromkeys(needed))
