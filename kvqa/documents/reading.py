"""Loading documents: text out of PDFs (scanned pages read by OCR, tables kept), Word, PowerPoint, HTML, EPUB, images,
.txt and .md files or pasted text, with a clear error for every bad input.

A document of pages (a PDF's pages, a deck's slides, a Word file's or web page's sections, an EPUB's chapters, an
image) is one text with a visible "[Page n]" line where each page after the first begins: sources and routing cite
page n.
"""

from __future__ import annotations

import codecs
import io
import sys
import time
import unicodedata
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvqa.config import Config
from kvqa.documents.ocr import OcrPage
from kvqa.documents.office import OFFICE_SUFFIXES, read_office
from kvqa.errors import DocumentError
from kvqa.messages import Message

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".text")
PDF_SUFFIXES = (".pdf",)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")  # read by OCR (kvqa.documents.ocr)
SUPPORTED_SUFFIXES = PDF_SUFFIXES + OFFICE_SUFFIXES + TEXT_SUFFIXES + IMAGE_SUFFIXES  # the one list: upload box, API,
#                                                                                     CLI and README name these
TYPES = ", ".join(SUPPORTED_SUFFIXES)  # as messages name them
EXPANSION = 4  # an Office or EPUB file may expand (unzipped) to this many times the file size limit
Progress = Callable[[float, Message], None]  # (fraction done, what is being done), for long reads (OCR)

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
    first..last (text, or a document of pages one of which alone is longer than the model reads; 1-based), out of
    `total`. Characters of a document of pages also say which pages they lie on and the words they start with."""

    unit: str  # "pages" or "characters"
    first: int
    last: int
    total: int
    pages: tuple[int, int] | None = None  # characters of a document of pages: the pages they lie on
    opening: str = ""  # characters of a document of pages: the words they start with, for the reader to find them

    @property
    def name(self) -> Message:
        """'pages 1-13 of 36', 'characters 1-40,000 of 95,000', 'characters 1-9,000 of 41,000 (page 1, from
        "Network Configuration")'."""
        if self.pages is None:
            return Message(f"part.{self.unit}", first=self.first, last=self.last, total=self.total)
        a, b = self.pages
        return Message("part.characters_page" if a == b else "part.characters_pages", first=self.first,
                       last=self.last, total=self.total, page=a, last_page=b, opening=self.opening)

    def __str__(self) -> str:
        return str(self.name)


@dataclass(frozen=True)
class Document:
    """A document's text, ready to prefill."""

    name: str  # file name or "pasted text", for display
    text: str
    pages: int | None = None  # PDF page count (the whole file's), None for text
    page_starts: tuple[int, ...] = ()  # PDF: where each page's text (with its "[Page n]" line) begins in `text`
    part: Part | None = None  # set when this is a part of a longer document (kvqa.documents.parts)
    start: int = 0  # a part's: where its text begins in the longer document's text (kvqa.documents.parts.select)
    in_characters: bool = False  # its parts are counted in characters though it has pages: one page (a Word file
    #                              without page breaks, a long web page) alone is longer than the model reads
    scans: Mapping[int, OcrPage] = field(default_factory=dict)  # page -> what OCR read there (its lines' boxes)
    notes: tuple[Message, ...] = ()  # what the reader should know, e.g. scanned pages where OCR found no text

    @property
    def span(self) -> tuple[int, int]:
        """[start, end) of this text in the document it is a part of (the whole of itself when it is no part)."""
        return self.start, self.start + len(self.text)


def document_from_text(text: str, *, name: str = "pasted text") -> Document:
    """Wrap pasted text as a Document; raises DocumentError if there is nothing to read."""
    text = _normalise(text)
    if not text.strip():
        raise DocumentError("document.empty")
    return Document(name=name, text=text)


def combine(documents: Sequence[Document], *, problems: Sequence[Message] = ()) -> Document:
    """Several documents read as one (one prefill): each headed by its name, so answers can say where they come
    from. A single document is returned as it is. problems: why other files could not be read (load_documents);
    they are the error when no document is left."""
    if not documents and problems:
        if len(problems) == 1:
            raise DocumentError("files.one_unreadable", problem=problems[0])
        raise DocumentError("files.none_readable", problems=list(problems))
    if not documents:
        raise DocumentError("document.nothing", types=TYPES)
    if len(documents) == 1:
        return documents[0]
    n = len(documents)
    text = "\n\n".join(f"=== File {i} of {n}: {d.name} ===\n{d.text}" for i, d in enumerate(documents, start=1))
    return Document(name=" + ".join(d.name for d in documents), text=text,
                    notes=tuple(note for d in documents for note in d.notes))


def load_documents(paths: Sequence[str | Path], *, config: Config = Config(),
                   progress: Progress | None = None) -> tuple[list[Document], list[Message]]:
    """Each file read on its own: (the documents that loaded, one message per file that did not, naming it)."""
    documents, problems = [], []
    for path in paths:
        try:
            documents.append(load_document(path, config=config, progress=progress))
        except DocumentError as e:
            name = Path(path).name
            named = name in str(e)  # most messages name their file; the others are given its name
            problems.append(e.message if named else Message("file.named_problem", name=name, problem=e.message))
    return documents, problems


def load_document(path: str | Path, *, config: Config = Config(), progress: Progress | None = None) -> Document:
    """Read a file of one of SUPPORTED_SUFFIXES into a Document, within config's size, page and time limits, saying
    how OCR goes through `progress`; raises DocumentError with what to do if it cannot."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        kind = Message("file.kind_suffix", suffix=suffix) if suffix else Message("file.kind_no_suffix")
        raise DocumentError("file.unsupported", kind=kind, name=path.name, types=TYPES)
    try:
        size = path.stat().st_size
        if size > config.limits.max_file_bytes:
            raise DocumentError("file.too_big", name=path.name, mb=size / 2**20, limit_mb=config.limits.max_file_mb)
        data = path.read_bytes()
    except FileNotFoundError:
        raise DocumentError("file.missing", path=path) from None
    except IsADirectoryError:
        raise DocumentError("file.folder", path=path) from None
    except PermissionError:
        raise DocumentError("file.forbidden", path=path) from None
    if not data:
        raise DocumentError("file.zero_bytes", name=path.name)
    if suffix in PDF_SUFFIXES:
        return _pdf_document(data, path.name, config=config, progress=progress)
    if suffix in IMAGE_SUFFIXES:
        return _image_document(data, path.name, config=config, progress=progress)
    if suffix in OFFICE_SUFFIXES:
        pages = read_office(data, suffix, path.name, max_pages=config.limits.max_pdf_pages,
                            max_expanded_bytes=EXPANSION * config.limits.max_file_bytes)
        return paged(path.name, [_normalise(p) for p in pages])
    text = _normalise(decode_text(data, name=path.name))
    if not text.strip():
        raise DocumentError("file.whitespace", name=path.name)
    return Document(name=path.name, text=text)


def paged(name: str, pages: Sequence[str], **extra) -> Document:
    """A document of pages: their texts joined with a "[Page n]" line before each after the first."""
    if not any(p.strip() for p in pages):
        raise DocumentError("file.whitespace", name=name)
    parts = [(PAGE_BREAK.format(n=n) if n > 1 else "") + p.strip("\n") for n, p in enumerate(pages, start=1)]
    starts, offset = [], 0
    for part in parts:
        starts.append(offset)
        offset += len(part)
    return Document(name=name, text="".join(parts), pages=len(parts), page_starts=tuple(starts), **extra)


def read_paths(paths: Sequence[str], *, config: Config, stdin=None, progress: Progress | None = None) -> Document:
    """The files as one document (`kvqa ask`), "-" for the text on stdin (bytes); a file that cannot be read, and
    what the reader should know (Document.notes), are said on stderr and the others are read; raises when none can
    be."""
    documents, problems = [], []
    for path in paths:
        if path == "-":
            documents.append(document_from_text(decode_text(stdin.read(), name="standard input"), name="stdin"))
        else:
            loaded, failed = load_documents([path], config=config, progress=progress)
            documents, problems = documents + loaded, problems + failed
    document = combine(documents, problems=problems)  # raises when nothing could be read
    for problem in problems:  # the others are still read
        print(f"kvqa: skipped: {problem}", file=sys.stderr)
    for note in document.notes:
        print(f"kvqa: note: {note}", file=sys.stderr)
    return document


def decode_text(data: bytes, *, name: str = "the file") -> str:
    """Decode a text file's bytes: a BOM if present, then UTF-8, then UTF-16 without BOM, then Windows-1252/latin-1."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(codec)
            except UnicodeDecodeError:
                raise DocumentError("file.bad_encoding", name=name, codec=codec.upper()) from None
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
        raise DocumentError("file.binary", name=name, types=TYPES)
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


def _pdf_document(data: bytes, name: str, *, config: Config, progress: Progress | None) -> Document:
    """A PDF's pages: the text layer where there is one (tables written as Markdown tables), OCR where there is none."""
    page_texts = _pdf_text(data, name, max_pages=config.limits.max_pdf_pages, max_seconds=config.limits.max_pdf_seconds)
    blank = [n for n, t in enumerate(page_texts, start=1) if not t.strip()]
    if len(blank) > config.limits.max_ocr_pages:  # said before OCR starts: a scan this long would take too long
        raise DocumentError("scan.too_many_pages", name=name, count=len(blank), limit=config.limits.max_ocr_pages)
    if len(blank) < len(page_texts):
        from kvqa.documents.tables import pdf_tables

        for n, text in pdf_tables(data, max_seconds=config.limits.max_pdf_seconds).items():
            page_texts[n - 1] = _normalise(text)
    scans = _ocr_pages(data, name, blank, config=config, progress=progress) if blank else {}
    for n, scan in scans.items():
        page_texts[n - 1] = scan.text
    if not any(t.strip() for t in page_texts):
        raise DocumentError("scan.no_text" if scans else "pdf.no_text", name=name)
    empty = [n for n, scan in scans.items() if not scan.text.strip()]
    notes = (Message("scan.empty_pages", name=name, pages=", ".join(map(str, empty))),) if empty else ()
    return paged(name, page_texts, scans=scans, notes=notes)


def _ocr_pages(data: bytes, name: str, pages: Sequence[int], *, config: Config,
               progress: Progress | None) -> dict[int, OcrPage]:
    """OCR of the PDF's pages `pages` (1-based), each rendered at ocr.SCALE (less if over the image limit)."""
    import pypdfium2 as pdfium

    from kvqa.documents.ocr import SCALE, read_image

    limit = config.limits.max_image_megapixels * 1e6
    try:
        pdf = pdfium.PdfDocument(data)  # pypdf read it; pdfium may still refuse it
    except pdfium.PdfiumError as e:
        raise DocumentError("pdf.damaged", name=name, error=type(e).__name__) from None
    try:
        scans = {}
        for i, n in enumerate(pages):
            if progress:
                progress(i / len(pages), Message("progress.ocr", name=name, page=n, done=i + 1, count=len(pages)))
            page = pdf[n - 1]
            width, height = page.get_width(), page.get_height()
            scale = min(SCALE, (limit / max(width * height, 1)) ** 0.5)
            scans[n] = read_image(page.render(scale=scale).to_pil())
        return scans
    except pdfium.PdfiumError as e:
        raise DocumentError("pdf.damaged", name=name, error=type(e).__name__) from None
    finally:
        pdf.close()


def _image_document(data: bytes, name: str, *, config: Config, progress: Progress | None) -> Document:
    """An image (PNG, JPEG) read by OCR as a document of one page."""
    from PIL import Image, UnidentifiedImageError

    from kvqa.documents.ocr import read_image

    try:
        with warnings.catch_warnings():  # Pillow warns of a large image; kvqa's own limit is checked next
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))  # reads the header: the size is known before any pixel is decoded
        megapixels = image.width * image.height / 1e6
        if megapixels > config.limits.max_image_megapixels:
            raise DocumentError("image.too_big", name=name, megapixels=megapixels,
                                limit=config.limits.max_image_megapixels)
        image.load()
    except Image.DecompressionBombError:
        raise DocumentError("image.too_big", name=name, megapixels=float("inf"),
                            limit=config.limits.max_image_megapixels) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise DocumentError("image.damaged", name=name) from None
    if progress:
        progress(0.0, Message("progress.ocr", name=name, page=1, done=1, count=1))
    scan = read_image(image)
    if not scan.text.strip():
        raise DocumentError("scan.no_text", name=name)
    return paged(name, [scan.text], scans={1: scan})


def _pdf_text(data: bytes, name: str, *, max_pages: int, max_seconds: float) -> list[str]:
    """A PDF's text layer page by page ("" for a page without one); raises DocumentError for a PDF kvqa cannot read."""
    import pypdf
    from pypdf.errors import LimitReachedError, PdfReadError, PyPdfError

    if b"%PDF-" not in data[:1024]:
        raise DocumentError("pdf.not_pdf", name=name)
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")  # many PDFs are encrypted only against editing, with an empty password
            except Exception:
                opened = 0
            if not opened:
                raise DocumentError("pdf.encrypted", name=name)
        pages = reader.pages
        count = len(pages)
        if count > max_pages:
            raise DocumentError("pdf.too_many_pages", name=name, count=count, limit=max_pages)
        started = time.monotonic()
        page_texts = []
        for n, page in enumerate(pages, start=1):
            if time.monotonic() - started > max_seconds:
                raise DocumentError("pdf.too_slow", name=name, seconds=max_seconds, page=n, count=count)
            page.get_contents()  # raises LimitReachedError on a decompression bomb; extract_text would hide it
            page_texts.append(_normalise(page.extract_text() or ""))
    except DocumentError:
        raise
    except (MemoryError, LimitReachedError):
        raise DocumentError("pdf.bomb", name=name) from None
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError,
            RecursionError) as e:
        raise DocumentError("pdf.damaged", name=name, error=type(e).__name__) from None
    return page_texts
