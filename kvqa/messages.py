"""Every text kvqa shows a person, in English and Simplified Chinese, keyed by message id: the one CATALOG, merged from
its owners' texts in kvqa/texts/ (the library's errors, notices and promises; the app's labels and panels; the
bench's), and the functions that say them.

A Message is a str: its English text, so the CLI, the JSON API, logs and `str(error)` read as they always did. It
also carries its id and parameters, so `render(message, "zh")` says it in Chinese. A parameter that is a Message
(or a list of them) is rendered in the same language; any other parameter is formatted as it is.

Translation choices, kept throughout: token stays "token"; prefill 预填充; cache 缓存 (KV 缓存); time to first token
(TTFT) 首 token 时间; the document's part 部分; a session 会话.
"""

from __future__ import annotations

from collections.abc import Sequence

from .texts import app, bench, library

LANGUAGES = {"en": "English", "zh": "中文"}  # code -> the language's name in itself, for the switch
DEFAULT_LANGUAGE = "en"

# id -> (English, Chinese), from each owner's texts. Placeholders are str.format fields, the same in both languages.
CATALOG: dict[str, tuple[str, str]] = {**library.TEXTS, **app.TEXTS, **bench.TEXTS}
assert len(CATALOG) == len(library.TEXTS) + len(app.TEXTS) + len(bench.TEXTS), "a message id in two owners' texts"


class Message(str):
    """A text for a person: a str holding its English text, with the id and parameters to say it in another
    language (render)."""

    key: str
    params: dict

    def __new__(cls, key: str, /, **params) -> Message:
        if key not in CATALOG:
            raise KeyError(f"no message {key!r} in kvqa.messages.CATALOG: add it there, in every language")
        message = super().__new__(cls, _fill(key, params, "en"))
        message.key, message.params = key, params
        return message

    def __reduce__(self):  # pickled across ZeroGPU's process boundary (inside EngineInfo and errors)
        return _message, (self.key, self.params)


def _message(key: str, params: dict) -> Message:
    return Message(key, **params)


def render(text: str, language: str) -> str:
    """text in `language` ("en", "zh"; another falls back to English): a Message is said in it, any other str is
    returned as it is (text from outside kvqa, such as a server's own error)."""
    if not isinstance(text, Message):
        return text
    return _fill(text.key, text.params, language)


def say(key: str, language: str, /, **params) -> str:
    """The message `key` with `params`, in `language`."""
    return _fill(key, params, language)


def language_of(accept_language: str | None) -> str:
    """The language to answer in for an HTTP Accept-Language header ("zh-CN,zh;q=0.9,en;q=0.8" -> "zh"): the
    most preferred that kvqa speaks (any Chinese variant reads the Chinese texts), else English."""
    ranked = []
    for n, item in enumerate((accept_language or "").split(",")):
        tag, _, q = item.strip().partition(";q=")
        try:
            weight = float(q) if q else 1.0
        except ValueError:
            weight = 0.0
        ranked.append((-weight, n, tag.strip().lower().split("-")[0]))
    for weight, _, language in sorted(ranked):
        if weight < 0 and language in LANGUAGES:
            return language
    return DEFAULT_LANGUAGE


def _fill(key: str, params: dict, language: str) -> str:
    english, chinese = CATALOG[key]
    template = chinese if language == "zh" else english
    return template.format(**{name: _param(value, language) for name, value in params.items()})


def _param(value, language: str):
    if isinstance(value, Message):
        return render(value, language)
    if isinstance(value, Sequence) and not isinstance(value, str) and value and all(isinstance(v, str) for v in value):
        return " ".join(render(v, language) for v in value)  # several messages in a row (files.none_readable)
    return value


__all__ = ["CATALOG", "DEFAULT_LANGUAGE", "LANGUAGES", "Message", "language_of", "render", "say"]
