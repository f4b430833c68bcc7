"""How well kvqa reads scans: character error rate and seconds per page of kvqa's OCR on pages rendered
from public text, English and Chinese, in a few fonts and sizes, with a little noise and rotation.

The text (both CC BY-SA 4.0), given as file paths:

- English: the paragraphs of XQuAD (github.com/google-deepmind/xquad), `xquad.en.json`;
- Chinese: the paragraphs of CMRC 2018 (github.com/ymcui/cmrc2018), the squad-style train split
  `squad-style-data/cmrc2018_train.json`, or the trial split `squad-style-data/cmrc2018_trial.json` where the train
  file is not at hand.

From a clone (or a bare mirror: pass its git dir) of each repository:

    git --git-dir=xquad/.git show HEAD:xquad.en.json > /tmp/xquad.en.json
    git --git-dir=cmrc2018/.git show HEAD:squad-style-data/cmrc2018_trial.json > /tmp/cmrc2018_trial.json
    .venv/bin/python experiments/ocr_quality.py --english /tmp/xquad.en.json --chinese /tmp/cmrc2018_trial.json \
        --tesseract

Each page goes through what a scan goes through in kvqa: a paragraph or two is typeset on an A4 page with fpdf2
(wrapped to the page width, justified, 2 cm margins), the page rasterised with pypdfium2 at 150 dpi in grey, turned
by up to 1 degree either way (white fill), blurred slightly (Gaussian, radius 0.6 px), given Gaussian noise (sigma 8
of 255), and saved by PIL as an image-only PDF (PIL stores the page as a JPEG); `kvqa.load_document` then reads that
PDF, rendering it at `kvqa.documents.ocr.SCALE` and OCR'ing it. Everything is seeded (`--seed`): the same pages every
run.

Character error rate (CER): Levenshtein distance between the reference text and what OCR read, over the reference's
length, after Unicode NFKC on both (full-width and half-width forms, e.g. Chinese commas and brackets, compare equal)
and with all whitespace removed from both (line breaks, and OCR's spaces between CJK characters, are not the point).
For English a second CER keeps the spaces (each run of whitespace made one space): words run together matter to the
reader.

Fonts: English DejaVu Sans, DejaVu Serif, Liberation Sans, Liberation Serif; Chinese WenQuanYi Micro Hei, Noto Sans
CJK SC, Noto Serif CJK SC, AR PL UMing (apt: fonts-wqy-microhei, fonts-noto-cjk, fonts-arphic-uming). A missing font
is skipped and said. Sizes 10, 12 and 14 pt by default. `--tesseract` reads the same page images (those kvqa's OCR
reads) with Debian's tesseract (`tesseract-ocr`, `tesseract-ocr-chi-sim`) for comparison.

`--rapidocr KEY=VALUE` and `--scale` try other OCR settings (RapidOCR's constructor arguments, e.g.
det_limit_side_len=960 or text_score=0.3; kvqa.documents.ocr.SCALE) without editing kvqa.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import logging
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

DPI = 150  # the "scanner's" resolution
MARGIN = 56.7  # points (2 cm)
LEADING = 1.35  # line height over font size
MAX_CHARS = {"en": 1800, "zh": 900}  # a page's text at most (characters), so the largest size still fits one page

FONTS = {
    "en": [
        ("DejaVu Sans", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 0),
        ("DejaVu Serif", "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf", 0),
        ("Liberation Sans", "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf", 0),
        ("Liberation Serif", "/usr/share/fonts/truetype/liberation/LiberationSerif-Regular.ttf", 0),
    ],
    "zh": [
        ("WenQuanYi Micro Hei", "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 0),
        ("Noto Sans CJK SC", "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", 2),
        ("Noto Serif CJK SC", "/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc", 2),
        ("AR PL UMing CN", "/usr/share/fonts/truetype/arphic/uming.ttc", 0),
    ],
}
LANGUAGES = {"en": "English", "zh": "Chinese"}
TESSERACT_LANG = {"en": "eng", "zh": "chi_sim"}


@dataclass
class Page:
    language: str
    font: str
    size: float
    angle: float
    reference: str
    text: str = ""  # what kvqa read
    cer: float = 0.0  # whitespace removed
    cer_spaces: float | None = None  # English: whitespace runs kept as one space
    ocr_seconds: float = 0.0  # kvqa.documents.ocr's own time (OcrPage.seconds)
    seconds: float = 0.0  # load_document, end to end
    cpu_seconds: float = 0.0  # load_document's CPU time, all threads (less sensitive to a busy machine)
    tesseract: dict = field(default_factory=dict)  # text, cer, cer_spaces, seconds, cpu_seconds


# --- the text ---------------------------------------------------------------------------------------------------


def paragraphs(path: str) -> list[str]:
    """The contexts of a SQuAD-style JSON file, in file order, without repeats."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    seen, found = set(), []
    for article in data["data"]:
        for p in article["paragraphs"]:
            text = " ".join(p["context"].split())
            if text and text not in seen:
                seen.add(text)
                found.append(text)
    return found


def covered(text: str, cmaps: list[set[int]]) -> bool:
    """Every character of `text` has a glyph in every font (so no page shows a missing-glyph box)."""
    return all(ord(c) in cmap for cmap in cmaps for c in text if not c.isspace())


def page_texts(pool: list[str], count: int, language: str, cmaps: list[set[int]], rng: random.Random) -> list[str]:
    """`count` page texts: one or two paragraphs each, drawn at random from the pool, up to MAX_CHARS."""
    order = list(range(len(pool)))
    rng.shuffle(order)
    usable = (pool[i] for i in order if 200 <= len(pool[i]) <= MAX_CHARS[language] and covered(pool[i], cmaps))
    texts = []
    for text in usable:
        if texts and len(texts[-1]) < MAX_CHARS[language] // 2 and "\n\n" not in texts[-1] \
                and len(texts[-1]) + len(text) <= MAX_CHARS[language]:
            texts[-1] += "\n\n" + text  # a second paragraph on a short page
            continue
        if len(texts) == count:
            break
        texts.append(text)
    return texts[:count]


# --- the pages --------------------------------------------------------------------------------------------------


def typeset(text: str, font: tuple[str, str, int], size: float) -> bytes:
    """A one-page A4 PDF with `text` (paragraphs apart by a blank line) in `font` at `size` points."""
    from fpdf import FPDF

    name, path, index = font
    pdf = FPDF(format="A4", unit="pt")
    pdf.set_margins(MARGIN, MARGIN, MARGIN)
    pdf.set_auto_page_break(True, MARGIN)
    pdf.add_font("body", fname=path, collection_font_number=index)
    pdf.set_font("body", size=size)
    pdf.add_page()
    for i, paragraph in enumerate(text.split("\n\n")):
        if i:
            pdf.ln(size * LEADING)
        pdf.multi_cell(0, size * LEADING, paragraph)
    if pdf.pages_count != 1:
        raise ValueError(f"{name} {size} pt: the text takes {pdf.pages_count} pages")
    return bytes(pdf.output())


def scan(pdf_bytes: bytes, rng: np.random.Generator, *, clean: bool) -> tuple:
    """The page as a scanner might give it: grey, 150 dpi, turned by up to 1 degree, slightly blurred, noisy.
    Returns (PIL image, angle)."""
    import pypdfium2 as pdfium
    from PIL import Image, ImageFilter

    pdf = pdfium.PdfDocument(pdf_bytes)
    try:
        image = pdf[0].render(scale=DPI / 72, grayscale=True).to_pil().convert("L")
    finally:
        pdf.close()
    angle = float(rng.uniform(-1.0, 1.0))
    if clean:
        return image, 0.0
    image = image.rotate(angle, resample=Image.BICUBIC, fillcolor=255)
    image = image.filter(ImageFilter.GaussianBlur(0.6))
    pixels = np.asarray(image, dtype=np.float32) + rng.normal(0.0, 8.0, (image.height, image.width))
    return Image.fromarray(np.clip(pixels, 0, 255).round().astype(np.uint8), "L"), angle


def image_pdf(image, path: Path) -> None:
    """An image-only PDF of the page (what a scanner saves), at the scan's resolution."""
    image.save(path, "PDF", resolution=DPI)


# --- the measure ------------------------------------------------------------------------------------------------


def normalise(text: str, *, spaces: bool) -> str:
    """NFKC; whitespace removed, or (spaces=True) each run of it made one space."""
    text = unicodedata.normalize("NFKC", text)
    return " ".join(text.split()) if spaces else "".join(text.split())


def distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions each cost 1); one numpy row at a time: within a row
    D[j] = min(A[j], D[j-1] + 1), which is j + the running minimum of A[k] - k."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return len(a)
    codes = np.array([ord(c) for c in b], dtype=np.int64)
    steps = np.arange(len(b) + 1, dtype=np.int64)
    row = steps.copy()
    best = np.empty_like(row)
    for i, c in enumerate(a, start=1):
        best[0] = i
        np.minimum(row[1:] + 1, row[:-1] + (codes != ord(c)), out=best[1:])
        row = np.minimum.accumulate(best - steps) + steps
    return int(row[-1])


def cer(reference: str, text: str, *, spaces: bool = False) -> float:
    ref, hyp = normalise(reference, spaces=spaces), normalise(text, spaces=spaces)
    return distance(ref, hyp) / max(len(ref), 1)


def differences(reference: str, text: str, *, most: int = 12, context: int = 12) -> list[str]:
    """The places where OCR differs from the reference (whitespace removed), as 'reference' -> 'read' in context."""
    ref, hyp = normalise(reference, spaces=False), normalise(text, spaces=False)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ref, hyp, autojunk=False).get_opcodes():
        if op != "equal":
            out.append(f"…{ref[max(i1 - context, 0):i1]}[{ref[i1:i2]} -> {hyp[j1:j2]}]{ref[i2:i2 + context]}…")
    return out[:most] + ([f"(and {len(out) - most} more)"] if len(out) > most else [])


# --- the readers ------------------------------------------------------------------------------------------------


def read_kvqa(path: Path) -> tuple[str, float, float, float]:
    """(text, OCR seconds, end-to-end seconds, end-to-end CPU seconds) of kvqa.load_document on an image-only PDF."""
    from kvqa import load_document

    started, cpu = time.perf_counter(), time.process_time()
    document = load_document(path)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return document.text, sum(s.seconds for s in document.scans.values()), seconds, cpu


def kvqa_view(path: Path):
    """The image kvqa's OCR reads for the PDF's first page (rendered at kvqa.documents.ocr.SCALE)."""
    import pypdfium2 as pdfium

    from kvqa.documents import ocr

    pdf = pdfium.PdfDocument(str(path))
    try:
        return pdf[0].render(scale=ocr.SCALE).to_pil()
    finally:
        pdf.close()


def read_tesseract(image, language: str, folder: Path) -> tuple[str, float, float]:
    """(text, seconds, CPU seconds) of tesseract on the image (its default page segmentation)."""
    png = folder / "tesseract.png"
    image.save(png)
    before, started = _children_cpu(), time.perf_counter()
    done = subprocess.run(["tesseract", str(png), "-", "-l", TESSERACT_LANG[language]], capture_output=True,
                          text=True, check=True)
    return done.stdout, time.perf_counter() - started, _children_cpu() - before


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def tesseract_languages() -> set[str]:
    if not shutil.which("tesseract"):
        return set()
    done = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True)
    return set(done.stdout.split()[1:]) if done.returncode == 0 else set()


# --- the run ----------------------------------------------------------------------------------------------------


def configure(scale: float | None, settings: list[str]) -> dict:
    """Apply --scale and --rapidocr to kvqa.documents.ocr (for trying settings; kvqa's own are the default)."""
    from kvqa.documents import ocr

    if scale is not None:
        ocr.SCALE = scale
    kwargs = {}
    for setting in settings:
        key, _, value = setting.partition("=")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    if kwargs:
        from rapidocr_onnxruntime import RapidOCR

        ocr._engine = RapidOCR(**kwargs)
    return {"scale": ocr.SCALE, "rapidocr": kwargs,
            "kvqa_ocr_sha256": hashlib.sha256(Path(ocr.__file__).read_bytes()).hexdigest()[:12]}


def measure(args) -> dict:
    from fontTools.ttLib import TTFont
    from PIL import Image

    from kvqa.documents import ocr

    logging.getLogger("fontTools").setLevel(logging.ERROR)  # "BDF NOT subset" for AR PL UMing's bitmaps
    settings = configure(args.scale, args.rapidocr)
    ocr.read_image(Image.new("RGB", (64, 64), "white"))  # the engine made before any page is timed
    tesseract = tesseract_languages() if args.tesseract else set()
    skipped = []
    if args.tesseract and not tesseract:
        skipped.append("tesseract: not installed")
    pages: list[Page] = []
    keep = Path(args.keep) if args.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    sources = {"en": args.english, "zh": args.chinese}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for language in args.languages:
            fonts = [f for f in FONTS[language] if Path(f[1]).exists()]
            skipped += [f"{f[0]}: {f[1]} not found" for f in FONTS[language] if not Path(f[1]).exists()]
            if not fonts or not sources[language]:
                skipped.append(f"{LANGUAGES[language]}: no fonts" if not fonts else f"{LANGUAGES[language]}: no text")
                continue
            cmaps = [set(TTFont(path, fontNumber=index).getBestCmap()) for _, path, index in fonts]
            cells = [(font, size) for font in fonts for size in args.sizes for _ in range(args.pages_per_cell)]
            texts = page_texts(paragraphs(sources[language]), len(cells), language, cmaps,
                               random.Random(f"{args.seed}-{language}"))
            for n, ((font, size), text) in enumerate(zip(cells, texts)):
                rng = np.random.default_rng([args.seed, n, 0 if language == "en" else 1])
                image, angle = scan(typeset(text, font, size), rng, clean=args.clean)
                path = folder / f"{language}-{n:02d}.pdf"
                image_pdf(image, path)
                if keep:
                    shutil.copy(path, keep / path.name)
                page = Page(language, font[0], size, round(angle, 3), text)
                page.text, page.ocr_seconds, page.seconds, page.cpu_seconds = read_kvqa(path)
                page.cer = cer(text, page.text)
                if language == "en":
                    page.cer_spaces = cer(text, page.text, spaces=True)
                if TESSERACT_LANG[language] in tesseract:
                    read, seconds, cpu = read_tesseract(kvqa_view(path), language, folder)
                    page.tesseract = {"text": read, "cer": cer(text, read), "seconds": seconds, "cpu_seconds": cpu,
                                      "cer_spaces": cer(text, read, spaces=True) if language == "en" else None}
                elif args.tesseract and f"tesseract {TESSERACT_LANG[language]}" not in " ".join(skipped):
                    skipped.append(f"tesseract {TESSERACT_LANG[language]}: language data not installed")
                pages.append(page)
                if args.verbose:
                    print(f"{language} {font[0]} {size:g} pt {angle:+.2f} deg: CER {page.cer:.2%}"
                          + (f" ({page.cer_spaces:.2%} with spaces)" if page.cer_spaces is not None else "")
                          + f", {page.ocr_seconds:.2f} s OCR, {page.seconds:.2f} s in all ({page.cpu_seconds:.2f} CPU)"
                          + (f"; tesseract {page.tesseract['cer']:.2%}, {page.tesseract['seconds']:.2f} s"
                             if page.tesseract else ""), file=sys.stderr, flush=True)
    return {"settings": settings | {"seed": args.seed, "clean": args.clean, "dpi": DPI, "sizes": args.sizes},
            "skipped": skipped, "rows": rows(pages), "pages": [asdict(p) for p in pages]}


def summary(label: str, group: list[Page], reader: str = "kvqa") -> dict:
    if reader == "kvqa":
        cers = [p.cer for p in group]
        spaced = [p.cer_spaces for p in group if p.cer_spaces is not None]
        ocr_seconds = [p.ocr_seconds for p in group]
        seconds = [p.seconds for p in group]
        cpu = [p.cpu_seconds for p in group]
    else:
        cers = [p.tesseract["cer"] for p in group]
        spaced = [p.tesseract["cer_spaces"] for p in group if p.tesseract["cer_spaces"] is not None]
        ocr_seconds = seconds = [p.tesseract["seconds"] for p in group]
        cpu = [p.tesseract["cpu_seconds"] for p in group]
    return {"language": LANGUAGES[group[0].language], "group": label, "reader": reader, "pages": len(group),
            "cer": statistics.fmean(cers), "cer_worst": max(cers),
            "cer_spaces": statistics.fmean(spaced) if spaced else None,
            "ocr_seconds": statistics.fmean(ocr_seconds), "seconds": statistics.fmean(seconds),
            "seconds_median": statistics.median(seconds), "cpu_seconds": statistics.fmean(cpu),
            "characters": statistics.fmean(len(normalise(p.reference, spaces=False)) for p in group)}


def rows(pages: list[Page]) -> list[dict]:
    out = []
    for language in LANGUAGES:
        mine = [p for p in pages if p.language == language]
        if not mine:
            continue
        out.append(summary("all", mine))
        for font in dict.fromkeys(p.font for p in mine):
            out.append(summary(font, [p for p in mine if p.font == font]))
        for size in dict.fromkeys(p.size for p in mine):
            out.append(summary(f"{size:g} pt", [p for p in mine if p.size == size]))
        if all(p.tesseract for p in mine):
            out.append(summary("all", mine, reader="tesseract"))
    return out


def table(result: dict) -> str:
    lines = ["| language | reader | pages | CER mean | CER worst page | CER, spaces kept | OCR s/page | "
             "end to end s/page | CPU s/page |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        reader = "kvqa (RapidOCR)" if r["reader"] == "kvqa" else "tesseract 5"
        group = "" if r["group"] == "all" else f", {r['group']}"
        spaced = f"{r['cer_spaces']:.2%}" if r["cer_spaces"] is not None else "-"
        whole = f"{r['seconds']:.2f}" if r["reader"] == "kvqa" else "-"
        lines.append(f"| {r['language']}{group} | {reader} | {r['pages']} | {r['cer']:.2%} | {r['cer_worst']:.2%} | "
                     f"{spaced} | {r['ocr_seconds']:.2f} | {whole} | {r['cpu_seconds']:.2f} |")
    return "\n".join(lines)


def worst(result: dict, count: int) -> str:
    out = []
    for language in LANGUAGES:
        mine = sorted((p for p in result["pages"] if p["language"] == language), key=lambda p: -p["cer"])
        for p in mine[:count]:
            out.append(f"\n{LANGUAGES[language]}, {p['font']} {p['size']:g} pt, turned {p['angle']:+.2f} deg: "
                       f"CER {p['cer']:.2%}")
            out += ["  " + d for d in differences(p["reference"], p["text"])]
    return "\n".join(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--english", help="XQuAD's xquad.en.json")
    parser.add_argument("--chinese", help="CMRC 2018's squad-style cmrc2018_train.json (or cmrc2018_trial.json)")
    parser.add_argument("--languages", nargs="+", choices=list(LANGUAGES), default=list(LANGUAGES))
    parser.add_argument("--sizes", nargs="+", type=float, default=[10, 12, 14], help="font sizes, points")
    parser.add_argument("--pages-per-cell", type=int, default=1, help="pages per font and size (default 1)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--clean", action="store_true", help="no noise, blur or rotation")
    parser.add_argument("--tesseract", action="store_true", help="also read the pages with tesseract")
    parser.add_argument("--scale", type=float, help="try another kvqa.documents.ocr.SCALE")
    parser.add_argument("--rapidocr", action="append", default=[], metavar="KEY=VALUE",
                        help="try a RapidOCR setting, e.g. det_limit_side_len=960 (repeatable)")
    parser.add_argument("--worst", type=int, default=2, help="show where OCR went wrong on the N worst pages")
    parser.add_argument("--keep", help="a folder to keep the image-only PDFs in")
    parser.add_argument("--json", help="write the figures and every page's texts here")
    parser.add_argument("--verbose", "-v", action="store_true", help="a line per page as it is read")
    args = parser.parse_args()
    if not args.english and "en" in args.languages or not args.chinese and "zh" in args.languages:
        parser.error("give --english and --chinese (or --languages to measure one)")
    result = measure(args)
    print(f"settings: {result['settings']}")
    for line in result["skipped"]:
        print(f"skipped: {line}")
    print(table(result))
    if args.worst:
        print(worst(result, args.worst))
    if args.json:
        Path(args.json).write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
