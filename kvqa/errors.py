"""The exceptions a user can cause. Each message says what went wrong and what to do about it."""


class KvqaError(Exception):
    """Base class: a problem the user can fix. str(error) is the message to show them."""


class DocumentError(KvqaError):
    """The document cannot be read or used (empty, not text, encrypted, unsupported type...)."""


class DocumentTooLong(DocumentError):
    """The document does not fit in the model's context (or in the memory budget)."""

    def __init__(self, message: str, *, tokens: int | None = None, limit: int | None = None):
        super().__init__(message)
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
