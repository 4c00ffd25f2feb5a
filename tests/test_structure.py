"""The package's shape: no import cycles between its modules, every module importable in a fresh interpreter, one
recording layer, and long modules saying why they are long."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from twoprim.notebooks import ROOT

PACKAGE = ROOT / "twoprim"
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (subpackages included)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _module_level_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports when it is imported: statements at module level (also inside a top-level
    `if`/`try`), not inside functions or classes, which run later or never."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                found.add(module)
                found.update(f"{module}.{a.name}" for a in node.names)  # `from . import checks`
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    # importing a.b.c imports a.b first: edges to the parents, but never to the module itself
    edges = set()
    for module in found:
        parts = module.split(".")
        edges.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {m for m in edges & known if m != name and not name.startswith(m + ".")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state, stack = [], {}, []

    def walk(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return cycles


def test_no_import_cycles_between_modules():
    modules = _modules()
    graph = {name: _module_level_imports(name, path, set(modules)) for name, path in modules.items()}
    assert "twoprim.checks" in graph["twoprim.ex01"] and "twoprim.verdicts" in graph["twoprim.checks"], \
        "the graph must see the package's own imports"
    assert _cycles(graph) == [], "modules that import each other (directly or through others)"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(_modules())
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    proc = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_one_recording_layer():
    """Only twoprim/record.py subclasses torch's dispatch or function modes: every count builds on it."""
    hooks = {}
    for name, path in _modules().items():
        text = path.read_text()
        if "TorchDispatchMode" in text or "TorchFunctionMode" in text:
            hooks[name] = path
    assert set(hooks) == {"twoprim.record"}


def test_long_modules_say_why():
    for name, path in _modules().items():
        lines = path.read_text().count("\n")
        if lines > MAX_LINES:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "Why this module is long" in doc, f"{name} has {lines} lines and its docstring gives no reason"
