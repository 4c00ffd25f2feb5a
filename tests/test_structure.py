"""The package's shape: its layers (who runs the code) import only downwards, no import cycles between its modules,
every module importable in its own fresh interpreter with no side effect on the process, one recording layer, long
modules saying why they are long, and every name a released notebook imports still resolving."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

from twoprim.config import ROOT

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


def _module_level_imports(name: str, path: Path, known: set[str], *, everywhere: bool = False) -> set[str]:
    """The package modules `name` imports when it is imported: statements at module level (also inside a top-level
    `if`/`try`), not inside functions or classes, which run later or never; with `everywhere`, every import
    statement in the file, functions included."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(statements):
        if everywhere:
            statements = [
                n
                for n in ast.walk(ast.Module(body=list(statements), type_ignores=[]))
                if isinstance(n, (ast.Import, ast.ImportFrom))
            ]
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
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
                cycles.append(stack[stack.index(nxt) :] + [nxt])
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
    assert (
        "twoprim.core.checks" in graph["twoprim.assignments.ex01_dot"]
        and "twoprim.core.verdicts" in graph["twoprim.core.checks"]
    ), "the graph must see the package's own imports"
    assert _cycles(graph) == [], "modules that import each other (directly or through others)"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


# Who runs the code: a module may import only from its own layer or a lower one. Layers 0-4 run in a learner's
# kernel (and in the graded kernel); 5 is the instructor's side; 6 the course command that ties them together.
LAYERS = {
    "twoprim.config": 0,
    "twoprim.core": 1,
    "twoprim.topics": 2,
    "twoprim.assignments": 3,
    "twoprim.learner": 4,
    "twoprim.grading": 5,
    "twoprim.exchange": 5,
    "twoprim.classroom": 5,
    "twoprim.analytics": 5,
    "twoprim.course": 6,
}
LEARNER_SIDE = 4


def _layer(name: str) -> int | None:
    """The layer of a module of the package (None for the package itself, whose alias table every layer may use)."""
    parts = name.split(".")
    return LAYERS.get(".".join(parts[:2])) if len(parts) > 1 else None


def _layer_violations() -> list[str]:
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        mine = _layer(name)
        assert mine is not None or name == "twoprim", f"{name} is in no layer: add its folder to LAYERS"
        for other in sorted(_module_level_imports(name, path, set(modules), everywhere=True)):
            theirs = _layer(other)
            if mine is not None and theirs is not None and theirs > mine:
                wrong.append(f"{name} (layer {mine}) imports {other} (layer {theirs})")
            same_assignment = name.startswith("twoprim.assignments.") and other.startswith("twoprim.assignments.")
            if same_assignment and other != "twoprim.assignments":
                wrong.append(f"{name} imports another assignment, {other}: shared cases belong in a topic module")
    return wrong


def test_layers_import_only_downwards():
    """A learner's kernel never imports grading or classroom code; core imports nothing above it; an assignment
    never imports another assignment."""
    assert _layer_violations() == []


def test_every_module_has_a_layer_and_the_layers_are_not_empty():
    layers = {_layer(name) for name in _modules()} - {None}
    assert layers == set(LAYERS.values())


# Every write to os.environ made by the package's own code while a module imports is recorded (a library's own, such
# as Dynamo setting TORCHINDUCTOR_CACHE_DIR or jax setting TF_CPP_MIN_LOG_LEVEL, is not ours).
_WATCH = """
import importlib, os, sys
package = os.path.join(os.getcwd(), "twoprim") + os.sep
ours = []

def _caller():
    frame = sys._getframe(2)
    while frame and frame.f_code.co_filename.endswith(("os.py", "_collections_abc.py")):
        frame = frame.f_back
    return frame.f_code.co_filename if frame else ""

def _watch(method):
    original = getattr(os._Environ, method)
    def watched(self, key, *args):
        if _caller().startswith(package):
            ours.append(f"{method[2:-2]} {key} in {_caller()[len(package):]}")
        return original(self, key, *args)
    setattr(os._Environ, method, watched)

_watch("__setitem__")
_watch("__delitem__")
"""
_IMPORT_ALONE = (
    _WATCH
    + """
importlib.import_module(sys.argv[1])
assert not ours, f"importing {sys.argv[1]} changed the environment: {ours}"
"""
)
# One interpreter imports the libraries the package imports (torch, jax, triton, nbgrader, ...), none of the
# package, then forks a child per module: each child imports its module into an interpreter where no module of the
# package was ever loaded, at the cost of a fork instead of a new interpreter importing torch again.
_IMPORT_EACH_FORKED = (
    _WATCH
    + """
import json
for library in json.loads(sys.argv[1]):
    try:
        importlib.import_module(library)
    except Exception:
        pass
assert not [m for m in sys.modules if m == "twoprim" or m.startswith("twoprim.")], "a library imported the package"
failed = {}
for name in sys.argv[2:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            message = f"importing {name} changed the environment: {ours}" if ours else ""
        except BaseException as exc:
            import traceback
            message = "".join(traceback.format_exception(exc))[-1500:]
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        message = f.read()
    _, status = os.waitpid(pid, 0)
    if message or status:
        failed[name] = message or f"the child ended with status {status}"
print(json.dumps(failed))
"""
)


def _libraries() -> list[str]:
    """The libraries the package imports at module level (not the package itself)."""
    found = set()
    for path in _modules().values():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module)
    return sorted(m for m in found if m.split(".")[0] not in ("twoprim", "__future__"))


def test_every_module_imports_in_its_own_fresh_interpreter_without_side_effects():
    """Each module alone, in an interpreter where no other module of the package was loaded: it imports, and
    importing it writes no environment variable."""
    names = sorted(_modules())
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_FORKED, json.dumps(_libraries()), *names],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failed, failed


def _package_copy(folder: Path, probe: str, source: str) -> Path:
    """A copy of the package in `folder` with module twoprim/topics/`probe`.py holding `source`: the probe never
    appears in the checkout, where ruff, pyright and the other tests' scans of twoprim/ run beside this file. Run
    from `folder`, `-c` puts it first on sys.path, so `import twoprim` is the copy."""
    shutil.copytree(ROOT / "twoprim", folder / "twoprim", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "twoprim" / "topics" / f"{probe}.py").write_text(source)
    return folder


def test_the_forked_import_finds_a_module_that_fails_alone(tmp_path):
    copy = _package_copy(tmp_path, "_probe_broken", "import twoprim.topics._no_such_module\n")
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_FORKED, "[]", "twoprim.config", "twoprim.topics._probe_broken"],
        cwd=copy,
        text=True,
        capture_output=True,
        timeout=120,
    )
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (
        list(failed) == ["twoprim.topics._probe_broken"] and "_no_such_module" in failed["twoprim.topics._probe_broken"]
    )


def test_the_side_effect_watch_sees_the_package_write_the_environment(tmp_path):
    copy = _package_copy(tmp_path, "_probe_side_effect", 'import os\nos.environ["TWOPRIM_PROBE"] = "1"\n')
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALONE, "twoprim.topics._probe_side_effect"],
        cwd=copy,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "setitem TWOPRIM_PROBE in topics/_probe_side_effect.py" in proc.stderr


def test_one_recording_layer():
    """Only twoprim/core/record.py subclasses torch's dispatch or function modes: every count builds on it."""
    hooks = {}
    for name, path in _modules().items():
        text = path.read_text()
        if "TorchDispatchMode" in text or "TorchFunctionMode" in text:
            hooks[name] = path
    assert set(hooks) == {"twoprim.core.record"}


def test_long_modules_say_why():
    for name, path in _modules().items():
        lines = path.read_text().count("\n")
        if lines > MAX_LINES:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "Why this module is long" in doc, f"{name} has {lines} lines and its docstring gives no reason"


MAX_FUNCTION_LINES = 80


def _long_functions(tree: ast.AST, where: str) -> list[str]:
    """Every function (methods and nested ones too) longer than MAX_FUNCTION_LINES lines, with its length."""
    return [
        f"{where}:{node.lineno} {node.name} ({(node.end_lineno or node.lineno) - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_function_is_longer_than_80_lines():
    """A function that does one job fits on a screen: split a longer one into the steps it takes."""
    long = [f for name, path in _modules().items() for f in _long_functions(ast.parse(path.read_text()), name)]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {'; '.join(long)}"


def test_the_long_function_finder_counts_methods_and_nested_functions():
    body = "\n".join(["    x = 1"] * MAX_FUNCTION_LINES)
    source = f"class A:\n    def m(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n\ndef short():\n    pass\n"
    assert [f.split()[1] for f in _long_functions(ast.parse(source), "m")] == ["m"]
    assert _long_functions(ast.parse(f"def f():\n{body[:-10]}\n"), "f") == []


def _undocumented(path: Path) -> list[str]:
    """The public top-level functions and classes of a module without a docstring."""
    missing = []
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and not node.name.startswith("_")
            and not ast.get_docstring(node)
        ):
            missing.append(node.name)
    return missing


def test_every_public_name_has_a_docstring():
    missing = {name: found for name, path in _modules().items() if (found := _undocumented(path))}
    assert not missing, f"public functions and classes without a one-line docstring: {missing}"


def test_the_docstring_finder_finds_a_missing_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('def shown(x):\n    return x\n\n\ndef _private():\n    pass\n\n\nclass Kept:\n    """Said."""\n')
    assert _undocumented(probe) == ["shown"]
