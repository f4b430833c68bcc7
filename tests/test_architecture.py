"""The house without circles. kvqa's modules import each other in one direction only, and nothing outside
kvqa/engines/ knows which engine runs."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "kvqa"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The kvqa modules a file imports, at any depth (function-level imports count too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kvqa")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("kvqa"):
                found.add(target)
                found |= {f"{target}.{a.name}" for a in node.names}  # `from . import x` imports module x
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_kvqa_has_no_import_cycles():
    edges = graph()
    assert len(edges) > 15 and "kvqa.engines.local" in edges["kvqa.engines"]
    cycle = find_cycle(edges)
    assert cycle is None, " -> ".join(cycle)


def test_utilities_import_nothing_of_the_compute():
    edges = graph()
    for low in ("kvqa.errors", "kvqa.memory", "kvqa.timing", "kvqa.config", "kvqa.budget", "kvqa.uploads"):
        assert not {d for d in edges[low] if d.startswith(("kvqa.engines", "kvqa.session", "kvqa.model"))}, low


def test_only_the_engines_know_about_zerogpu():
    mention = re.compile(r"\bimport spaces\b|\bspaces\.GPU\b|SPACES_ZERO_GPU")
    outside = [p for p in [*PACKAGE.rglob("*.py"), ROOT / "app.py"] if "engines" not in p.parts]
    assert [str(p.relative_to(ROOT)) for p in outside if mention.search(p.read_text())] == []


# Engine modules that may import another engine module besides the package and base.py, and why. Everything else an
# engine shares with another lives outside kvqa/engines/ (kvqa.generate: prefill, decode, drafting).
ENGINE_PAIRS = {
    ("kvqa.engines.stored", "kvqa.engines.local"): "StoredLocalEngine subclasses LocalEngine",
    ("kvqa.engines.zerogpu", "kvqa.engines.local"): "ZeroGPUEngine keeps a LocalEngine as its CPU copy (tokenizer)",
}


def test_engines_take_no_helpers_from_each_other():
    """An engine module imports the package (make_engine picks among the engines) and base.py (the seam), and of the
    others only what ENGINE_PAIRS names; from local.py only the LocalEngine class, never a helper."""
    edges, paths = graph(), {module_name(p): p for p in PACKAGE.rglob("*.py")}
    engines = sorted(name for name in edges if name.startswith("kvqa.engines."))
    assert {"kvqa.engines.base", "kvqa.engines.local", "kvqa.engines.zerogpu", "kvqa.engines.remote"} <= set(engines)
    for name in engines:
        others = {d for d in edges[name] if d.startswith("kvqa.engines.") and d != "kvqa.engines.base"}
        assert {(name, d) for d in others} <= set(ENGINE_PAIRS), name
        if "kvqa.engines.local" in others:
            local = "kvqa.engines.local."
            assert {m.removeprefix(local) for m in imports(paths[name]) if m.startswith(local)} == {"LocalEngine"}, name


def test_generation_imports_no_engine():
    """kvqa.generate is what the engines call: neither it nor anything it imports, at any depth, imports an engine."""
    edges = graph()
    seen, todo = set(), ["kvqa.generate"]
    while todo:
        for nxt in edges[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert "kvqa.model" in seen and not {m for m in seen if m == "kvqa.engines" or m.startswith("kvqa.engines.")}


def test_no_issue_numbers_in_the_code_the_tests_or_the_docs():
    """Why a line is there is said in words: an issue number means nothing to a reader without the tracker."""
    number = re.compile(r"issues? ?#?[0-9]+", re.IGNORECASE)
    files = [ROOT / "README.md", ROOT / "app.py", *PACKAGE.rglob("*.py"), *(ROOT / "tests").glob("*.py"),
             *(ROOT / "scripts").glob("*.py"), *(ROOT / "docs").glob("*.md")]
    assert [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files
            for m in number.finditer(p.read_text(encoding="utf-8"))] == []
