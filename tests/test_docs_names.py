"""The reference pages (README.md and docs/*.md) name only what exists: every `kvqa.` dotted name resolves (the longest
importable module, then attributes), every code path named is a file or folder of the repository (and a name after it,
`file.py:name` or `file.py::test_name`, is defined in that file), and every link to a page of the repository leads to
that page and, with an anchor, to one of its headings. CHANGELOG.md is history: it may name what no longer exists.
No model is loaded; the kvqa modules named are imported (torch among them)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# `kvqa.documents.parts.counted_units`, `kvqa.timing.ReadCost`: a dotted name that starts with kvqa
DOTTED = re.compile(r"(?<![\w./~-])kvqa(?:\.[A-Za-z_]\w*)+")
# a path from the repository's root (kvqa/..., scripts/..., tests/..., experiments/..., docs/..., assets/..., .ci/...)
# or one of its top-level files, with an optional `:name` or `::test_name` (a test's [parameters] are left out)
ROOTS = r"(?:kvqa|scripts|experiments|tests|docs|assets|\.ci)/[\w./-]*(?:\w|\{[\w,]+\})"
TOP = r"(?:app\.py|Makefile|pyproject\.toml|requirements(?:-dev)?\.txt|packages\.txt|CHANGELOG\.md|README\.md)"
PATH = re.compile(rf"(?<![\w./~<>-])(?P<path>{ROOTS}|{TOP})(?:(?P<sep>::?)(?P<name>[A-Za-z_]\w*))?")
# a test file named without its folder, as `test_reference.py::test_...` (always tests/)
TEST_FILE = re.compile(r"(?<![\w./-])(?P<path>test_\w+\.py)(?:::(?P<name>[A-Za-z_]\w*))?")
# `Session.read_ahead`, `KVCache.static_view()`: a class of kvqa's (each class name is kvqa's once) and an attribute
CLASS_ATTRIBUTE = re.compile(r"`(?P<cls>[A-Z]\w*)\.(?P<name>[A-Za-z_]\w*)[`(]")
# `choose_widening` in `kvqa/model/weights.py`: a name said to be in a file
NAME_IN_FILE = re.compile(rf"`(?P<name>[A-Za-z_]\w*)` in `(?P<path>{ROOTS})`")
# a Markdown link to a page of the repository: [text](docs/x.md#anchor), [text](x.md), [text](../README.md)
LINK = re.compile(r"\]\((?P<target>[^)\s:]+?\.md)(?:#(?P<anchor>[^)\s]+))?\)")
FENCE = re.compile(r"^(```|~~~)")


def text_of(page: Path) -> str:
    """The page's whole text: names are looked for in code blocks too (a command names a script)."""
    return page.read_text(encoding="utf-8")


def headings(page: Path) -> list[str]:
    """The page's headings outside code blocks."""
    found, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.append(line.lstrip("#").strip())
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, code marks and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower())
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> set[str]:
    """Every anchor a page has: its headings' (a repeated one numbered as GitHub numbers it) and its explicit ids."""
    seen: dict[str, int] = {}
    result = set()
    for heading in headings(page):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    result |= set(re.findall(r'<a id="([^"]+)"', page.read_text(encoding="utf-8")))
    return result


def resolves(dotted: str) -> bool:
    """Import the longest importable module prefix of a kvqa name, then get the rest as attributes; a class's field
    that is only annotated (a dataclass field without a default) or set on self in its methods counts."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as e:
            if e.name is not None and not ".".join(parts[:cut]).startswith(e.name):
                raise  # the module exists but one it imports does not: an error to see, not a stale name
            continue
        break
    else:
        return False
    for name in parts[cut:]:
        if hasattr(target, name):
            target = getattr(target, name)
        elif inspect.isclass(target) and is_field(target, name):
            return name == parts[-1]  # a field holds no attributes of its own to check
        else:
            return False
    return True


def is_field(cls: type, name: str) -> bool:
    if dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}:
        return True
    if any(name in getattr(base, "__annotations__", {}) for base in cls.__mro__):
        return True
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    return re.search(rf"\bself\.{re.escape(name)}\s*(?::[^=]+)?=[^=]", source) is not None


def defines(path: Path, name: str) -> bool:
    """Whether a Python file defines the name (a function, class or assignment at any depth); another file is searched
    for the name as a word."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return re.search(rf"\b{re.escape(name)}\b", text) is not None
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name:
            return True
    return False


def dotted_names(page: Path) -> set[str]:
    return set(DOTTED.findall(text_of(page)))


@cache
def kvqa_classes() -> dict[str, str]:
    """Each class kvqa defines, by name, and the module that defines it."""
    found = {}
    for path in (ROOT / "kvqa").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, module)
    return found


def class_attributes(page: Path) -> set[str]:
    """`Class.attribute` for the classes kvqa defines (F.linear and the like are someone else's)."""
    classes = kvqa_classes()
    return {f"{classes[m['cls']]}.{m['cls']}.{m['name']}" for m in CLASS_ATTRIBUTE.finditer(text_of(page))
            if m["cls"] in classes}


def expanded(path: str) -> list[str]:
    """`scripts/gpu_check.{py,sh}` is two paths, as the shell expands it."""
    m = re.search(r"\{([\w,]+)\}$", path)
    return [path[: m.start()] + choice for choice in m[1].split(",")] if m else [path]


def code_paths(page: Path) -> set[tuple[str, str]]:
    """(path, name) pairs; name is '' when the path has none after it."""
    text = text_of(page)
    found = {(path, m["name"] or "") for m in PATH.finditer(text) for path in expanded(m["path"])}
    found |= {(f"tests/{m['path']}", m["name"] or "") for m in TEST_FILE.finditer(text)}
    found |= {(m["path"], m["name"]) for m in NAME_IN_FILE.finditer(text)}
    return found


def links(page: Path) -> set[tuple[str, str]]:
    """(target page as a path from the root, anchor or ''): links to Markdown pages only, not to the web."""
    result = set()
    for m in LINK.finditer(text_of(page)):
        target = (page.parent / m["target"]).resolve()
        if target.is_relative_to(ROOT):
            result.add((str(target.relative_to(ROOT)), m["anchor"] or ""))
    return result


def ids(pages):
    return [str(p.relative_to(ROOT)) for p in pages]


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_every_kvqa_name_resolves(page):
    stale = sorted(name for name in dotted_names(page) if not resolves(name))
    assert not stale, f"{page.name} names what kvqa does not have: {stale}"


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_every_class_attribute_exists(page):
    stale = sorted(".".join(name.split(".")[-2:]) for name in class_attributes(page) if not resolves(name))
    assert not stale, f"{page.name} names attributes kvqa's classes do not have: {stale}"


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_every_code_path_exists_and_names_what_it_holds(page):
    missing = []
    for path, name in sorted(code_paths(page)):
        where = ROOT / path
        if not where.exists():
            missing.append(path)
        elif name and where.is_file() and not defines(where, name):
            missing.append(f"{path}: {name}")
    assert not missing, f"{page.name} names files or names in them that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=ids(PAGES))
def test_every_link_to_a_page_leads_to_it_and_its_heading(page):
    broken = []
    for target, anchor in sorted(links(page)):
        where = ROOT / target
        if not where.exists():
            broken.append(target)
        elif anchor and anchor not in anchors(where):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{page.name} links to pages or headings that do not exist: {broken}"


def test_the_checks_find_what_they_look_for():
    """The patterns themselves, on lines written for them (so a pattern that matches nothing cannot pass quietly)."""
    assert resolves("kvqa.timing.ReadCost") and resolves("kvqa.Config") and resolves("kvqa.documents.parts")
    assert not resolves("kvqa.timing.NoSuchThing") and not resolves("kvqa.no_such_module.thing")
    line = ("`kvqa/session/parts.py`, `scripts/evaluate.py::main`, `test_reference.py::test_x[a]`, "
            "`~/.cache/kvqa/store`, `.ci/run`, `app.py`, kvqa.timing.ReadCost.")
    assert DOTTED.findall(line) == ["kvqa.timing.ReadCost"]
    paths = {(m["path"], m["name"]) for m in PATH.finditer(line)}
    assert paths == {("kvqa/session/parts.py", None), ("scripts/evaluate.py", "main"), (".ci/run", None),
                     ("app.py", None)}
    assert expanded("scripts/gpu_check.{py,sh}") == ["scripts/gpu_check.py", "scripts/gpu_check.sh"]
    assert [(m["path"], m["name"]) for m in TEST_FILE.finditer(line)] == [("test_reference.py", "test_x")]
    assert [m.group(0) for m in NAME_IN_FILE.finditer("(`choose_widening` in `kvqa/model/weights.py`)")] == [
        "`choose_widening` in `kvqa/model/weights.py`"]
    assert {m["cls"] for m in CLASS_ATTRIBUTE.finditer("`Session.read_ahead`, `KVCache.static_view()`")} == {
        "Session", "KVCache"}
    assert kvqa_classes()["ReadCost"] == "kvqa.timing"
    assert slug("The quote's length") == "the-quotes-length"
    assert slug("`kvqa ask` on the sample document") == "kvqa-ask-on-the-sample-document"
    assert defines(ROOT / "tests" / "test_docs_names.py", "slug")
    assert not defines(ROOT / "tests" / "test_docs_names.py", "no_such_function")


def test_the_reference_pages_stay_short_and_the_readme_names_where_to_start():
    """Reference pages say what is true now, briefly (the record of changes is CHANGELOG.md, which may grow)."""
    long = {page.name: n for page in PAGES[1:] if (n := len(page.read_text(encoding="utf-8").splitlines())) > 250}
    assert not long, f"docs pages over 250 lines (move their history to CHANGELOG.md): {long}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150 and "## Start here" in readme
    start = readme.split("## Start here", 1)[1].split("\n## ", 1)[0]
    assert 1 <= len(re.findall(r"^\d+\. \[", start, re.MULTILINE)) <= 3, "a 'Start here' list of at most three pages"
