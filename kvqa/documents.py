"""Loading documents: text out of .pdf, .txt and .md files or pasted text, with a clear error for every bad input."""

from __future__ import annotations

import codecs
import io
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .config import Config
from .errors import DocumentError

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".text")
PDF_SUFFIXES = (".pdf",)
SUPPORTED_SUFFIXES = TEXT_SUFFIXES + PDF_SUFFIXES

PAGE_BREAK = "\n\n[Page {n}]\n"  # keeps page boundaries visible to the model and to the reader

# (BOM, codec), longest first so UTF-32-LE is not mistaken for UTF-16-LE
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


@dataclass(frozen=True)
class Part:
    """Which part of a longer document a Document holds: pages first..last (PDF, 1-based) or characters
    first..last (text, 1-based), out of `total`."""

    unit: str  # "pages" or "characters"
    first: int
    last: int
    total: int

    def __str__(self) -> str:
        return f"{self.unit} {self.first:,}-{self.last:,} of {self.total:,}"


@dataclass(frozen=True)
class Document:
    """A document's text, ready to prefill."""

    name: str  # file name or "pasted text", for display
    text: str
    pages: int | None = None  # PDF page count (the whole file's), None for text
    page_starts: tuple[int, ...] = ()  # PDF: where each page's text (with its "[Page n]" line) begins in `text`
    part: Part | None = None  # set when this is a part of a longer document (kvqa.parts)

    @property
    def chars(self) -> int:
        return len(self.text)


def document_from_text(text: str, *, name: str = "pasted text") -> Document:
    """Wrap pasted text as a Document; raises DocumentError if there is nothing to read."""
    text = _normalise(text)
    if not text.strip():
        raise DocumentError("The document is empty (or only whitespace): paste or upload some text.")
    return Document(name=name, text=text)


def combine(documents: Sequence[Document], *, problems: Sequence[str] = ()) -> Document:
    """Several documents read as one (one prefill): each headed by its name, so answers can say where they come
    from. A single document is returned as it is. problems: why other files could not be read (load_documents);
    they are the error when no document is left."""
    if not documents and problems:
        raise DocumentError(problems[0] if len(problems) == 1 else "No file could be read. " + " ".join(problems))
    if not documents:
        raise DocumentError("Nothing to read: upload a PDF, .txt or .md file, or paste some text.")
    if len(documents) == 1:
        return documents[0]
    n = len(documents)
    text = "\n\n".join(f"=== File {i} of {n}: {d.name} ===\n{d.text}" for i, d in enumerate(documents, start=1))
    return Document(name=" + ".join(d.name for d in documents), text=text)


def load_documents(paths: Sequence[str | Path], *, config: Config = Config()) -> tuple[list[Document], list[str]]:
    """Each file read on its own: (the documents that loaded, one message per file that did not, naming it)."""
    documents, problems = [], []
    for path in paths:
        try:
            documents.append(load_document(path, config=config))
        except DocumentError as e:
            name = Path(path).name
            problems.append(str(e) if name in str(e) else f"{name}: {e}")
    return documents, problems


def load_document(path: str | Path, *, config: Config = Config()) -> Document:
    """Read a .pdf, .txt or .md file into a Document, within config's size, page and time limits;
    raises DocumentError with what to do if it cannot."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        kind = f"'{suffix}' files" if suffix else "files without an extension"
        raise DocumentError(
            f"kvqa cannot read {kind} ({path.name}): upload a PDF, a .txt or a .md file, or paste the text."
        )
    try:
        size = path.stat().st_size
        if size > config.max_file_bytes:
            raise DocumentError(
                f"{path.name} is {size / 2**20:,.1f} MB; the limit is {config.max_file_mb:,.1f} MB. "
                "Split the document or paste the part you need."
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise DocumentError(f"No such file: {path}. Check the path.") from None
    except IsADirectoryError:
        raise DocumentError(f"{path} is a folder: give the path of a file.") from None
    except PermissionError:
        raise DocumentError(f"kvqa may not read {path}: check the file's permissions.") from None
    if not data:
        raise DocumentError(f"{path.name} is empty (0 bytes): choose a file with text in it.")
    starts: tuple[int, ...] = ()
    if suffix in PDF_SUFFIXES:
        text, starts = _pdf_text(data, path.name, max_pages=config.max_pdf_pages, max_seconds=config.max_pdf_seconds)
    else:
        text = _normalise(decode_text(data, name=path.name))
    if not text.strip():  # a PDF without text has been refused by _pdf_text already
        raise DocumentError(f"{path.name} holds only whitespace: choose a file with text in it.")
    return Document(name=path.name, text=text, pages=len(starts) if starts else None, page_starts=starts)


def decode_text(data: bytes, *, name: str = "the file") -> str:
    """Decode a text file's bytes: a BOM if present, then UTF-8, then UTF-16 without BOM, then Windows-1252/latin-1."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(codec)
            except UnicodeDecodeError:
                raise DocumentError(
                    f"{name} starts like {codec.upper()} text but is not valid {codec.upper()}: "
                    "re-save it as UTF-8."
                ) from None
    text = _utf16_without_bom(data) if b"\x00" in data else None  # ASCII in UTF-16 is valid UTF-8 with NULs
    if text is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            try:
                text = data.decode("cp1252")
            except UnicodeDecodeError:
                text = data.decode("latin-1")
    if _looks_binary(text):
        raise DocumentError(
            f"{name} does not contain text (its bytes look binary): upload a PDF, a .txt or a .md file."
        )
    return text


def _utf16_without_bom(data: bytes) -> str | None:
    """UTF-16 text without a BOM shows as NUL bytes in every other position; None if it does not look like it."""
    if len(data) < 4 or len(data) % 2:
        return None
    even_nuls, odd_nuls = data[0::2].count(0), data[1::2].count(0)
    half = len(data) // 2
    if odd_nuls > 0.2 * half and even_nuls < odd_nuls / 4:
        codec = "utf-16-le"  # ASCII "a" is 61 00
    elif even_nuls > 0.2 * half and odd_nuls < even_nuls / 4:
        codec = "utf-16-be"
    else:
        return None
    try:
        return data.decode(codec)
    except UnicodeDecodeError:
        return None


def _looks_binary(text: str) -> bool:
    """True when the text has NULs or more than 5% control characters, as binary files decoded as text do."""
    if "\x00" in text:
        return True
    sample = text[:65536]
    controls = sum(1 for c in sample if unicodedata.category(c) == "Cc" and c not in "\t\n\r\f\v")
    return controls > 0.05 * max(len(sample), 1)


def _normalise(text: str) -> str:
    """Unify line endings and drop NULs; leaves everything else (CJK, emoji, control-token strings) as it is."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")


def _pdf_text(data: bytes, name: str, *, max_pages: int, max_seconds: float) -> tuple[str, tuple[int, ...]]:
    """Extract a PDF's text page by page, with visible page breaks; returns (text, where each page begins in it)."""
    import pypdf
    from pypdf.errors import LimitReachedError, PdfReadError, PyPdfError

    if b"%PDF-" not in data[:1024]:
        raise DocumentError(
            f"{name} is named .pdf but is not a PDF: rename it to .txt if it is text, or export it as PDF again."
        )
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")  # many PDFs are encrypted only against editing, with an empty password
            except Exception:
                opened = 0
            if not opened:
                raise DocumentError(
                    f"{name} is encrypted with a password: open it, save a copy without a password, and upload that."
                )
        pages = reader.pages
        count = len(pages)
        if count > max_pages:
            raise DocumentError(
                f"{name} has {count:,} pages; the limit is {max_pages:,}. Split it and upload the part you need."
            )
        started = time.monotonic()
        parts, page_texts = [], []
        for n, page in enumerate(pages, start=1):
            if time.monotonic() - started > max_seconds:
                raise DocumentError(
                    f"Reading the text of {name} took over {max_seconds:.0f} s (stopped at page {n} of {count}): "
                    "the PDF is too complex; export its text and upload that instead."
                )
            page.get_contents()  # raises LimitReachedError on a decompression bomb; extract_text would hide it
            page_text = _normalise(page.extract_text() or "")
            page_texts.append(page_text)
            parts.append((PAGE_BREAK.format(n=n) if n > 1 else "") + page_text.strip("\n"))
    except DocumentError:
        raise
    except (MemoryError, LimitReachedError):
        raise DocumentError(f"{name} expands to more data than kvqa can hold: upload its text instead.") from None
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError, RecursionError) as e:
        raise DocumentError(
            f"{name} is damaged or truncated and cannot be read ({type(e).__name__}): "
            "export it as PDF again, or upload its text."
        ) from None
    if not any(part.strip() for part in page_texts):
        raise DocumentError(
            f"{name} has no text layer (it is probably scanned images): run it through OCR first, or paste its text."
        )
    starts, offset = [], 0
    for part in parts:
        starts.append(offset)
        offset += len(part)
    return "".join(parts), tuple(starts)
