"""The house without circles. kvqa's packages import each other in one direction only (ALLOWED names each one's
lower neighbours), its modules have no circle either, and nothing outside kvqa/engines/ knows which engine runs."""

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


# What each of kvqa's packages (and top-level modules) may import, lowest first: the architecture (docs/layout.md).
# An import that is not here (an upward one, or a new neighbour) fails test_packages_import_only_downward until it is
# added here with a reason, or the code moves to where it belongs.
BASE = {"texts", "messages", "errors", "timing", "memory", "config", "prompt", "languages"}  # what every layer uses
ALLOWED = {
    "texts": set(), "timing": set(), "memory": set(),
    "messages": {"texts"},
    "errors": {"messages"},
    "config": {"errors", "messages"},
    "languages": set(),  # which language a text is in
    "prompt": {"errors", "messages", "languages"},  # chat templates and the turn's text: no model
    "documents": BASE,  # files in, pages and parts
    "evidence": BASE | {"documents"},  # passages ranked, a question's part
    "model": BASE,  # loading, weights, the KV cache type, the written-out steps, kernels
    "results": BASE | {"documents", "evidence", "model"},  # the values a question and an answer travel as
    "generation": BASE | {"documents", "evidence", "model", "results"},  # prefill, decode, drafting
    "cache": BASE | {"documents", "model", "results", "generation"},  # caches kept: disk, shared, budget
    "engines": BASE | {"documents", "model", "results", "generation", "cache"},
    "session": BASE | {"documents", "evidence", "model", "results", "cache", "engines"},
    "export": BASE | {"documents", "evidence", "results"},
    "doctor": BASE | {"documents", "model", "cache", "engines"},
    "bench": BASE | {"documents", "evidence", "model", "results", "generation", "cache", "engines", "session"},
    "ui": BASE | {"documents", "evidence", "model", "results", "cache", "engines", "session", "export"},
    "cli": BASE | {"documents", "model", "cache", "engines", "session", "export", "doctor", "bench"},
    "kvqa": BASE | {"documents", "model", "results", "generation", "engines", "session"},  # the package's face
    "api": BASE | {"documents", "model", "results", "engines", "session"},  # the Python API on a model you loaded
    "__main__": {"cli"},
}


def unit(module: str) -> str:
    """The package (or top-level module) a module belongs to: kvqa.model.kernels.native -> model."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "kvqa"


def upward(edges: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    """The imports between packages that `allowed` does not name, as "from -> to"."""
    return sorted(f"{unit(a)} -> {unit(b)} ({a} imports {b})" for a, targets in edges.items() for b in targets
                  if unit(a) != unit(b) and unit(b) not in allowed.get(unit(a), set()))


def test_the_allowed_imports_have_no_circle_and_name_every_package():
    assert find_cycle(ALLOWED) is None
    assert {unit(m) for m in graph()} == set(ALLOWED)  # a new package or top-level module is placed here first


def test_packages_import_only_downward():
    edges = graph()
    assert upward(edges, ALLOWED) == []
    with_upward = {**edges, "kvqa.model.loading": edges["kvqa.model.loading"] | {"kvqa.session.session"}}
    assert upward(with_upward, ALLOWED) == ["model -> session (kvqa.model.loading imports kvqa.session.session)"]


def test_the_top_level_holds_only_what_every_layer_uses_and_the_doors():
    """Every other module lives in a package named for its concern. The doors: __init__ (the face), __main__ and cli
    (the command line), api (the Python API); beside them what every layer uses (languages.py among them: the
    documents, the evidence, the prompt and the model's choice all tell languages apart), export and doctor."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 14, top


def test_only_the_engines_know_about_zerogpu():
    mention = re.compile(r"\bimport spaces\b|\bspaces\.GPU\b|SPACES_ZERO_GPU")
    outside = [p for p in [*PACKAGE.rglob("*.py"), ROOT / "app.py"] if "engines" not in p.parts]
    assert [str(p.relative_to(ROOT)) for p in outside if mention.search(p.read_text())] == []


# Engine modules that may import another engine module besides the package and base.py, and why. Everything else an
# engine shares with another lives outside kvqa/engines/ (kvqa.generation.generate: prefill, decode, drafting).
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
    """kvqa.generation.generate is what the engines call: neither it nor anything it imports, at any depth, imports
    an engine."""
    edges = graph()
    seen, todo = set(), ["kvqa.generation.generate"]
    while todo:
        for nxt in edges[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert "kvqa.model.loading" in seen
    assert not {m for m in seen if m == "kvqa.engines" or m.startswith("kvqa.engines.")}


def test_no_issue_numbers_in_the_code_the_tests_or_the_docs():
    """Why a line is there is said in words: an issue number means nothing to a reader without the tracker."""
    number = re.compile(r"issues? ?#?[0-9]+", re.IGNORECASE)
    files = [ROOT / "README.md", ROOT / "app.py", *PACKAGE.rglob("*.py"), *(ROOT / "tests").glob("*.py"),
             *(ROOT / "scripts").glob("*.py"), *(ROOT / "experiments").glob("*.py"),
                 *(ROOT / "docs").glob("*.md")]
    assert [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files
            for m in number.finditer(p.read_text(encoding="utf-8"))] == []


def test_the_decode_loop_stays_small():
    """The loop only loops: choosing, stopping, detokenizing and drafting are its parts (kvqa.generation.decode)."""
    tree = ast.parse((PACKAGE / "generation" / "decode.py").read_text())
    loop = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "decode_n_tokens")
    arguments = loop.args.posonlyargs + loop.args.args + loop.args.kwonlyargs
    assert loop.end_lineno - loop.lineno + 1 <= 40 and len(arguments) <= 6


def project_files() -> list[Path]:
    return [ROOT / "app.py", *PACKAGE.rglob("*.py")]


def test_no_class_inherits_two_of_the_projects_classes():
    """The page is composed, not inherited: a class is given the objects it uses, and takes at most one of the
    project's classes as its base (so no mixin needs attributes another one sets)."""
    trees = {p: ast.parse(p.read_text()) for p in project_files()}
    ours = {n.name for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    mixed = [f"{p.relative_to(ROOT)}: {n.name}" for p, tree in trees.items() for n in ast.walk(tree)
             if isinstance(n, ast.ClassDef)
             and sum(isinstance(b, ast.Name) and b.id in ours for b in n.bases) > 1]
    assert mixed == []
    session = next(n for n in ast.walk(trees[PACKAGE / "session" / "session.py"])
                   if isinstance(n, ast.ClassDef) and n.name == "Session")
    assert session.bases == []  # its long document is a Parts it holds, not a base


def test_nothing_outside_the_session_sets_a_flag_on_it():
    """A question travels as one Ask: the page, the API and the CLI never set an attribute on a session to change how
    the next question is asked (or anything else)."""
    outside = [p for p in project_files() if "session" not in p.relative_to(ROOT).parts]
    set_on_session = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in outside for n in ast.walk(ast.parse(p.read_text()))
                      if isinstance(n, (ast.Assign, ast.AugAssign))
                      for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                      for a in ast.walk(t)
                      if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name)
                      and a.value.id in ("session", "fresh", "reader")]
    assert set_on_session == []


def test_import_kvqa_loads_torch_only_when_a_name_needs_it():
    """The API's names load on first use (kvqa/__init__.py), so `kvqa ask` checks its arguments and reads the
    document before torch and transformers load; every name of __all__ is there, and a subpackage too."""
    import subprocess
    import sys

    code = ("import sys, kvqa; print('torch' in sys.modules, 'transformers' in sys.modules); "
            "[getattr(kvqa, name) for name in kvqa.__all__]; print('torch' in sys.modules, kvqa.engines.__name__); "
            "print(sorted(set(kvqa.__all__) - set(dir(kvqa))))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:3] == ["False False", "True kvqa.engines", "[]"]
    import kvqa

    assert {"Session", "ask", "load_model", "make_engine", "Config"} <= set(kvqa.__all__)
    try:
        kvqa.no_such_name
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("kvqa.no_such_name did not raise AttributeError")


CJK_RANGE = re.compile(r"\\u(?:2e80|3000|3040|3400|4e00|9fff|ac00|f900)")  # where a CJK range's ends are written


def test_only_kvqa_languages_writes_out_which_characters_are_cjk():
    """One home for "is this CJK?": the ranges in kvqa/languages.py, which the readers, ranking, the short phrase,
    the repeat stop and the benchmarks import (six modules wrote their own ranges before)."""
    writers = {str(path.relative_to(ROOT)) for path in [ROOT / "app.py", *PACKAGE.rglob("*.py")]
               if CJK_RANGE.search(path.read_text(encoding="utf-8"))}
    assert writers == {"kvqa/languages.py"}
