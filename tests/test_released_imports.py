"""Released notebooks keep working: every module and name that a notebook in exercises/ or lessons/ imports from the
course package resolves, with every attribute it then reads from such a module, for the notebooks as they are now
and as they were released before the package moved (commit 5f700fd, the last before the move). Resolved in one
fresh interpreter, as a learner's kernel would; and every short name is the very module of its home."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
from IPython.core.inputtransformer2 import TransformerManager

from twoprim.config import ROOT

BEFORE_THE_MOVE = "5f700fd"  # "README: the suite's size and time today", the last commit before the package moved
RELEASED = ("exercises", "lessons")


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (
        f"git {' '.join(args)}: {done.stderr.strip()} (this test reads the notebooks as released before the move from "
        f"the repository's history: a shallow clone needs `git fetch --unshallow`)"
    )
    return done.stdout


def released_notebooks() -> dict[str, str]:
    """Label -> notebook JSON: every notebook in exercises/ and lessons/, on disk and at BEFORE_THE_MOVE."""
    found = {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
        for folder in RELEASED
        for p in sorted((ROOT / folder).rglob("*.ipynb"))
        if ".ipynb_checkpoints" not in p.parts
    }
    for path in _git("ls-tree", "-r", "--name-only", BEFORE_THE_MOVE, *RELEASED).split():
        if path.endswith(".ipynb"):
            found[f"{BEFORE_THE_MOVE}:{path}"] = _git("show", f"{BEFORE_THE_MOVE}:{path}")
    return found


def notebook_uses(text: str) -> tuple[set, set]:
    """What a notebook's code cells use of the course package: (module, name) for every `from twoprim... import
    name` and (module, None) for every `import twoprim...`; and (bound, attribute) for every attribute read from a
    name an import bound (a module, a class, a dict: the child reads attributes of modules only)."""
    transform = TransformerManager().transform_cell  # IPython's magics and shell lines made Python
    trees = [ast.parse(transform("".join(c["source"]))) for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
    imports, bound = set(), {}
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "twoprim":
            for alias in node.names:
                imports.add((node.module, alias.name))
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "twoprim":
                    imports.add((alias.name, None))
                    bound[alias.asname or "twoprim"] = alias.name if alias.asname else "twoprim"
    reads = {
        (bound[n.value.id], n.attr)
        for tree in trees
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Load)
        and isinstance(n.value, ast.Name)
        and n.value.id in bound
    }
    return imports, reads


# In a fresh interpreter: each import resolves (a module imports; a name is its attribute or its submodule); each
# attribute read from a course module is there; each assignment's short name is its module; each short name in
# PUBLIC is the very module of its home.
_RESOLVE = """
import importlib, json, sys, types
import twoprim

def find(module, name):
    found = importlib.import_module(module)
    if name is None or hasattr(found, name):
        return found if name is None else getattr(found, name)
    return importlib.import_module(f"{module}.{name}")

def why(call, *args):
    try:
        call(*args)
        return ""
    except Exception as e:
        return f"{type(e).__name__}: {e}"

def read(bound, attr):
    module, _, name = bound.rpartition(".")
    found = find(module, name) if module else importlib.import_module(bound)
    if isinstance(found, types.ModuleType) and not hasattr(found, attr):
        raise AttributeError(f"module {found.__name__} has no attribute {attr}")

asked = json.loads(sys.stdin.read())
wrong = {f"{m}:{n}": w for m, n in asked["imports"] if (w := why(find, m, n))}
wrong |= {f"{b}.{a}": w for b, a in asked["reads"] if (w := why(read, b, a))}
aliases = {short: importlib.import_module(f"twoprim.{short}") is importlib.import_module(f"twoprim.assignments.{full}")
           for short, full in twoprim.assignment_modules().items()}
public = {short: importlib.import_module(f"twoprim.{short}") is importlib.import_module(f"twoprim.{home}")
          for short, home in twoprim.PUBLIC.items()}
print(json.dumps({"wrong": wrong, "aliases": aliases, "public": public}))
"""
NOT_THERE = [("twoprim.hints", "no_such_name"), ("twoprim.ex01", "no_such_check")]  # reported: the child can fail


@pytest.fixture(scope="module")
def resolved() -> dict:
    """Every notebook's uses, and what one fresh interpreter said of them."""
    uses = {label: notebook_uses(text) for label, text in released_notebooks().items()}
    imports = sorted(set().union(*(i for i, _ in uses.values())) | {NOT_THERE[0]}, key=str)
    reads = sorted(set().union(*(r for _, r in uses.values())) | {NOT_THERE[1]})
    child = subprocess.run(
        [sys.executable, "-c", _RESOLVE],
        input=json.dumps({"imports": imports, "reads": reads}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return {"uses": uses, **json.loads(child.stdout.strip().splitlines()[-1])}


def test_the_released_notebooks_are_read(resolved):
    old = {label for label in resolved["uses"] if label.startswith(f"{BEFORE_THE_MOVE}:")}
    assert {
        f"{BEFORE_THE_MOVE}:exercises/ex01_dot/ex01_dot.ipynb",
        f"{BEFORE_THE_MOVE}:lessons/00_start_here.ipynb",
        "exercises/ex01_dot/ex01_dot.ipynb",
        "lessons/00_start_here.ipynb",
    } <= set(resolved["uses"])
    assert len(old) >= 21, sorted(old)  # ex01-ex10 and lessons 00-10 were released before the move
    imports, reads = resolved["uses"][f"{BEFORE_THE_MOVE}:exercises/ex01_dot/ex01_dot.ipynb"]
    assert {("twoprim", "ex01"), ("twoprim.hints", "hints")} <= imports and ("twoprim.ex01", "check_dot") in reads


def test_every_import_of_a_released_notebook_resolves(resolved):
    planted = {"twoprim.hints:no_such_name", "twoprim.ex01.no_such_check"}
    assert planted <= set(resolved["wrong"]), "the child must report a name that is not there"
    wrong = {use: why for use, why in resolved["wrong"].items() if use not in planted}
    where = {
        use: sorted(
            label
            for label, (imports, reads) in resolved["uses"].items()
            if use in {f"{m}:{n}" for m, n in imports} | {f"{b}.{a}" for b, a in reads}
        )
        for use in wrong
    }
    assert not wrong, "\n".join(f"{use} ({why}), used by {where[use]}" for use, why in wrong.items())


def test_each_short_name_is_the_module_of_its_home(resolved):
    assert set(resolved["aliases"]) >= {f"ex{n:02d}" for n in range(1, 11)} and all(resolved["aliases"].values()), (
        resolved["aliases"]
    )
    assert resolved["public"] and all(resolved["public"].values()), resolved["public"]
