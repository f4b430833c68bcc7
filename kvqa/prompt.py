"""Building the prompt: the document prefix as token ids once, each question's suffix as ids, from the model's template.

The conversation is the model's own chat template applied to a system turn (instructions + document) and a user turn
(the question), with the generation prompt. It is cut right after the special token that closes the system turn:
tokenizers split text at special tokens before anything else, so the ids before that point do not depend on the
question, and prefix + suffix equals the ids of the whole conversation tokenized in one go. A template with no control
token there (Gemma's puts the system text at the head of the first user turn) is cut where the document's turn text
ends, and check() proves that tokenizer does not merge across the cut.

A pretrained model has no chat template: CompletionPrompt lays the same conversation out as plain text (the document,
one line of instructions, then per question the quoted passage, `Question:` and `Answer:`), cut between two fixed
strings, and its answers end at the end of their line. prompt_for() picks the layout a tokenizer calls for.

Document and question text are tokenized as plain text: a string such as "<|im_end|>" inside them stays text and
never becomes a control token, so a document cannot close its turn or speak as another role.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import ModelError, QuestionError
from .languages import CJK, asked_in_chinese, holds_chinese, in_chinese, mostly_chinese  # noqa: F401 (kvqa.languages)
from .messages import Message

MAX_QUESTION_CHARS = 20_000

INSTRUCTIONS = (
    "You answer questions about the document below. Use only the document; if it does not contain the answer, "
    "say so. Answer in the language of the question, briefly."
)
# the instructions again after the document: +6 points in both languages (docs/quality.md); worked examples of the
# answer's form there instead measured worse in both, and are not given
REMINDER = "Answer each question from the document above, briefly, in the language of the question."
_DOC, _QUESTION = "kvqaDOCUMENTkvqa", "kvqaQUESTIONkvqa"  # placeholders that no template changes


def today() -> str:
    """The date string Llama 3.x templates print in their system header, fixed once per document."""
    return dt.date.today().strftime("%d %b %Y")


def system_text(document: str) -> str:
    """The system turn: instructions, then the document between tags, then the instructions again, briefly."""
    return f"{INSTRUCTIONS}\n\n<document>\n{document}\n</document>\n\n{REMINDER}"


def question_turn(question: str, quotes: Sequence[str] = ()) -> str:
    """The user turn: the question, after the document's passages that best match it (quoted, so a small model
    reads them next to the question; their tokens are computed per question, not cached). In the question's
    language, Chinese or English."""
    if not quotes:
        return question
    quoted = "\n\n".join(quotes)
    if in_chinese(question):
        return f"文档中的相关段落：\n{quoted}\n\n问题：{question}\n请根据文档用中文简短回答。"
    return f"From the document:\n{quoted}\n\nQuestion: {question}\nAnswer briefly, from the document."


class QuestionTurns:
    """What both layouts do with their tokenizer and turn_ids(history, question, quotes): fit a question's turn in its
    room, and tokenize plain text."""

    def question_ids(self, question: str, *, limit: int, history: Sequence[tuple[str, str]] = (),
                     quotes: Sequence[str] = ()) -> list[int]:
        """The question's suffix ids, after the earlier turns of `history` (question, answer) when given, with the
        quoted passages when they fit in `limit` tokens; raises QuestionError when the question is empty or its ids
        alone are longer than `limit` tokens."""
        _check_question(question)
        for kept in range(len(quotes), 0, -1):  # as many of the quotes as fit, best first
            ids = self.turn_ids(history, question, quotes[:kept])
            if len(ids) <= limit:
                return ids
        ids = self.turn_ids(history, question)
        if len(ids) > limit:
            raise QuestionError("question.too_many_tokens_in_conversation" if history else "question.too_many_tokens",
                                tokens=len(ids), limit=limit)
        return ids

    def remembered(self, history: Sequence[tuple[str, str]], question: str, *, limit: int) -> int:
        """How many of the latest turns of `history` fit with the question in `limit` tokens (0: none)."""
        for keep in range(len(history), 0, -1):
            if len(self.turn_ids(history[len(history) - keep:], question)) <= limit:
                return keep
        return 0

    def text_ids(self, text: str) -> list[int]:
        """Plain text's ids: special-token strings in it stay text."""
        if not text:
            return []
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


@dataclass(frozen=True)
class ChatPrompt(QuestionTurns):
    """The model's chat template, split around the document and the question.

    rendered(document, question) == pre + T(system) + mid + T(question) + post, where T is whatever the template
    does to message content (Llama 3.x trims it); the prefix ends `cut` characters into `mid`.
    """

    tokenizer: object
    date_string: str
    pre: str
    mid: str
    post: str
    cut: int  # end of the first special token in `mid` (the end of the system turn), or 0 where `mid` has none
    specials: re.Pattern  # matches the tokenizer's added (control) token strings

    stops_at_line_end = False  # the answer ends at the template's end of turn (an EOS id), not at a line's end

    @classmethod
    def for_tokenizer(cls, tokenizer, *, date_string: str | None = None) -> ChatPrompt:
        """Split the tokenizer's chat template around placeholder turns; raises ModelError if it cannot be used."""
        date_string = date_string or today()
        if not getattr(tokenizer, "chat_template", None):
            raise ModelError("template.none")
        skeleton = _render(tokenizer, _DOC, _QUESTION, date_string)
        if (skeleton.count(_DOC) != 1 or skeleton.count(_QUESTION) != 1
                or skeleton.index(_DOC) > skeleton.index(_QUESTION)):
            raise ModelError("template.system_not_first")
        pre, rest = skeleton.split(_DOC)
        mid, post = rest.split(_QUESTION)
        specials = _specials(tokenizer)
        first = specials.search(mid)
        # No control token between the document and the question (Gemma folds the system turn into the first user
        # turn, "\n\n" between them): cut before `mid`; check() proves the tokenizer does not merge across it.
        return cls(tokenizer, date_string, pre, mid, post, first.end() if first else 0, specials)

    def prefix_ids(self, document: str) -> list[int]:
        """Token ids of everything up to and including the end of the system turn that holds the document."""
        rendered = _render(self.tokenizer, system_text(document), _QUESTION, self.date_string)
        tail = self.mid + _QUESTION + self.post
        if not (rendered.startswith(self.pre) and rendered.endswith(tail)):
            raise ModelError("template.not_splittable", why=Message("template.document_varies"))
        content = rendered[len(self.pre): len(rendered) - len(tail)]
        return self._ids([(self.pre, False), (content, True), (self.mid[: self.cut], False)])

    def suffix_ids(self, question: str) -> list[int]:
        """Token ids of the user turn holding the question and the assistant's generation prompt."""
        rendered = _render(self.tokenizer, _DOC, question, self.date_string)
        head = self.pre + _DOC + self.mid
        if not (rendered.startswith(head) and rendered.endswith(self.post)):
            raise ModelError("template.not_splittable", why=Message("template.question_varies"))
        content = rendered[len(head): len(rendered) - len(self.post)]
        return self._ids([(self.mid[self.cut:], False), (content, True), (self.post, False)])

    def conversation_ids(self, history: Sequence[tuple[str, str]], question: str) -> list[int]:
        """Token ids after the system turn for earlier (question, answer) turns, then the question and the assistant's
        generation prompt: what the template renders for the whole conversation, cut where prefix_ids ends."""
        if not history:
            return self.suffix_ids(question)
        contents = [c for turn in history for c in turn] + [question]
        placeholders = [f"kvqaTURN{i}kvqa" for i in range(len(contents))]
        skeleton = _render_turns(self.tokenizer, _DOC, placeholders, self.date_string)
        head = self.pre + _DOC + self.mid
        if not skeleton.startswith(head + placeholders[0]):
            raise ModelError("template.no_conversation")
        between = re.split("|".join(placeholders), skeleton[len(head):])  # around each turn's content
        if len(between) != len(contents) + 1 or between[0]:
            raise ModelError("template.no_conversation")
        shaped = [self._as_content(c) for c in contents]  # what the template does to content (Llama 3.x trims it)
        pieces = [(self.mid[self.cut:], False)]
        for content, after in zip(shaped, between[1:]):
            pieces += [(content, True), (after, False)]
        if head + "".join(c + a for c, a in zip(shaped, between[1:])) != _render_turns(
                self.tokenizer, _DOC, contents, self.date_string):
            raise ModelError("template.no_conversation")
        return self._ids(pieces)

    def _as_content(self, text: str) -> str:
        """`text` as the template prints a message's content."""
        rendered = _render(self.tokenizer, _DOC, text, self.date_string)
        return rendered[len(self.pre + _DOC + self.mid): len(rendered) - len(self.post)]

    def turn_ids(self, history: Sequence[tuple[str, str]], question: str, quotes: Sequence[str] = ()) -> list[int]:
        """The ids after the system turn: earlier turns, then the question's turn quoting `quotes` (question_turn)."""
        return self.conversation_ids(history, question_turn(question, quotes))

    def check(self) -> None:
        """Raise ModelError unless prefix + suffix ids equal the whole conversation tokenized in one go, for a
        sample with CJK, emoji and edge whitespace: run once when a model is loaded, not during a question."""
        document, question = " Ein Dokument: 文档只读一次 🙂\n", "Was steht darin? 里面写了什么？ "
        whole = self.tokenizer(self.rendered(document, question), add_special_tokens=False)["input_ids"]
        if self.prefix_ids(document) + self.suffix_ids(question) != whole:
            raise ModelError("template.not_splittable", why=Message("template.tokens_differ"))

    def rendered(self, document: str, question: str) -> str:
        """The whole conversation as text, rendered in one go."""
        return _render(self.tokenizer, system_text(document), question, self.date_string)

    def _ids(self, pieces: list[tuple[str, bool]]) -> list[int]:
        """Tokenize like the tokenizer does in one go (split at special tokens, then each run of text), except that
        special-token strings inside user content (is_content=True) stay plain text."""
        ids: list[int] = []
        run = ""
        for text, is_content in pieces:
            if is_content:
                run += text
                continue
            pos = 0
            for m in self.specials.finditer(text):
                run += text[pos: m.start()]
                ids += self.text_ids(run)
                ids.append(self.tokenizer.convert_tokens_to_ids(m.group()))
                run, pos = "", m.end()
            run += text[pos:]
        return ids + self.text_ids(run)


def _render(tokenizer, system: str, user: str, date_string: str) -> str:
    return _render_turns(tokenizer, system, [user], date_string)


def _render_turns(tokenizer, system: str, turns: Sequence[str], date_string: str) -> str:
    """The template over a system turn, then user and assistant turns alternately (the last one the user's)."""
    messages = [{"role": "system", "content": system}]
    messages += [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    return tokenizer.apply_chat_template(  # enable_thinking=False: Qwen3 answers at once (others ignore it)
        messages, tokenize=False, add_generation_prompt=True, date_string=date_string, enable_thinking=False
    )


def _specials(tokenizer) -> re.Pattern:
    """A regex matching every added (control) token string of the tokenizer, longest first."""
    tokens = sorted(tokenizer.added_tokens_encoder, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, tokens)))


COMPLETION_INSTRUCTIONS = {  # after the document, in the document's language: the layout's one line of instructions
    "en": "Answer each question below from the document above, briefly, in the language of the question.",
    "zh": "请根据上面的文档，用问题的语言简短回答下面的问题。",
}
COMPLETION_LABELS = {  # (passage, question, answer) labels, in the question's language
    "en": ("Passage: ", "Question: ", "Answer:"),
    "zh": ("段落：", "问题：", "回答："),
}


@dataclass(frozen=True)
class CompletionPrompt(QuestionTurns):
    """A pretrained model's prompt (no chat template): the document and a line of instructions as the prefix, then per
    question `Passage: ...`, `Question: ...`, `Answer:` (in Chinese 段落：/问题：/回答：), earlier turns of a
    conversation as their Question/Answer lines before it. The prefix ends with a blank line and every suffix starts
    with a label, so the cut lies between two fixed strings; check() proves the tokenizer never merges across it.
    The answer is the rest of the line: stop_ids end it (kvqa.generation.generate), and it is never empty."""

    tokenizer: object
    bos: tuple[int, ...]  # the tokenizer's beginning-of-text id, when it has one
    date_string: str = ""  # no template prints a date: kept for the store's record, like ChatPrompt's

    stops_at_line_end = True

    @classmethod
    def for_tokenizer(cls, tokenizer) -> CompletionPrompt:
        bos = getattr(tokenizer, "bos_token_id", None)
        return cls(tokenizer, (bos,) if bos is not None else ())

    def prefix_ids(self, document: str) -> list[int]:
        """The beginning of text, the document, a blank line, the instructions, a blank line."""
        return [*self.bos, *self.text_ids(self.prefix_text(document))]

    @staticmethod
    def prefix_text(document: str) -> str:
        language = "zh" if mostly_chinese(document) else "en"
        return f"{document.strip()}\n\n{COMPLETION_INSTRUCTIONS[language]}\n\n"

    @staticmethod
    def turn_text(question: str, answer: str | None = None, quotes: Sequence[str] = ()) -> str:
        """One question's lines (and its answer's, for an earlier turn); a question is kept on one line."""
        passage, asked, answered = COMPLETION_LABELS["zh" if in_chinese(question) else "en"]
        lines = [f"{passage}{' '.join(q.split())}" for q in quotes]
        lines.append(f"{asked}{' '.join(question.split())}")
        if answer is None:
            return "\n".join(lines) + f"\n{answered}"
        space = " " if answered.endswith(":") else ""
        return "\n".join(lines) + f"\n{answered}{space}{' '.join(answer.split())}\n\n"

    def conversation_ids(self, history: Sequence[tuple[str, str]], question: str,
                         quotes: Sequence[str] = ()) -> list[int]:
        text = "".join(self.turn_text(q, a) for q, a in history) + self.turn_text(question, quotes=quotes)
        return self.text_ids(text)

    def suffix_ids(self, question: str) -> list[int]:
        return self.conversation_ids((), question)

    turn_ids = conversation_ids  # (history, question, quotes) -> ids, as QuestionTurns asks

    def rendered(self, document: str, question: str) -> str:
        return self.prefix_text(document) + self.turn_text(question)

    def check(self) -> None:
        """Raise ModelError unless prefix + suffix ids equal the whole text tokenized in one go, for documents and
        questions in both languages, with a quoted passage and an earlier turn: every cut lies between the same
        fixed strings, so these cover every document and question."""
        for document in (" Ein Dokument: 文档只读一次 🙂\n", "文档只读一次。\n第二段。"):
            for history in ((), (("Why? 为什么", " Because.\n"),)):
                for question, quotes in (("Was steht darin? ", ()), ("里面写了什么？", ("段落 one",)),
                                         ("What?", ("A passage.\n\nTwo.",))):
                    text = self.prefix_text(document) + "".join(self.turn_text(q, a) for q, a in history)
                    text += self.turn_text(question, quotes=quotes)
                    whole = [*self.bos, *self.text_ids(text)]
                    if self.prefix_ids(document) + self.conversation_ids(history, question, quotes) != whole:
                        raise ModelError("template.not_splittable", why=Message("template.tokens_differ"))


Prompt = ChatPrompt | CompletionPrompt


def prompt_for(tokenizer, *, date_string: str | None = None) -> Prompt:
    """The model's chat template split around document and question, or, for a model without one (a pretrained
    model), the completion layout."""
    if not getattr(tokenizer, "chat_template", None):
        return CompletionPrompt.for_tokenizer(tokenizer)
    return ChatPrompt.for_tokenizer(tokenizer, date_string=date_string)


def _check_question(question: str) -> None:
    if not question or not question.strip():
        raise QuestionError("question.empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise QuestionError("question.too_many_chars", chars=len(question), limit=MAX_QUESTION_CHARS)
