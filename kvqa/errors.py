"""The exceptions a user can cause. Each message says what went wrong and what to do about it, in every language
kvqa speaks: it is raised as a message id from kvqa.messages, with its parameters."""

from .messages import Message


class KvqaError(Exception):
    """Base class: a problem the user can fix. Raise it with a message id and its parameters, or a Message;
    `error.message` is that Message (render it in a language with kvqa.messages.render) and str(error) its English
    text."""

    def __init__(self, message: str, /, **params):
        self.message = message if isinstance(message, Message) else Message(message, **params)
        super().__init__(self.message)


class DocumentError(KvqaError):
    """The document cannot be read or used (empty, not text, encrypted, unsupported type...)."""


class DocumentTooLong(DocumentError):
    """The document does not fit in the model's context (or in the memory budget)."""

    def __init__(self, message: str, /, *, tokens: int | None = None, limit: int | None = None, **params):
        super().__init__(message, tokens=tokens, limit=limit, **params)
        self.tokens = tokens  # the document's prompt prefix in tokens, when counted
        self.limit = limit  # the most prefix tokens the model reads; None: the memory budget refused it


class QuestionError(KvqaError):
    """The question cannot be answered as given (empty, too long)."""


class ModelError(KvqaError):
    """The model cannot be loaded or is not supported."""


class BusyError(KvqaError):
    """The document is already answering another question."""


class OutOfMemory(KvqaError):
    """The machine ran out of memory while working; the session is kept as it was."""


class EngineError(KvqaError):
    """A serving engine (--engine-url) failed or refused the request; the session is kept as it was."""


class EngineUnreachable(EngineError):
    """No server answers at the engine URL."""


class EngineRefused(EngineError):
    """The server refused the request: the API key, the model name, or the URL's path."""


class EngineBusy(EngineError):
    """The server is overloaded (429, 503): asking again later may work."""


class EngineTimeout(EngineError):
    """The server sent nothing for longer than the timeout."""


class EngineDisconnected(EngineError):
    """The connection to the server dropped in the middle of an answer."""
