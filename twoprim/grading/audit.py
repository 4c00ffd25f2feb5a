"""Audit of submitted code: what a cell the learner wrote does that graded code has no reason to do.

`grading` runs `audit` over every cell a student wrote before anything runs; a finding holds the submission for
the instructor to read (`flagged`, 0 points, the cell, line and why). The sandbox limits what running code can
do; the audit stops code that would switch off what observes it (the recorders, the capture, the checks), which
the sandbox alone cannot see. Powers are never evaluated, so `10**40**10` cannot hang the grader.
"""

from __future__ import annotations

import ast
import math
import re

import twoprim
from twoprim.core.catalog import package_modules

__all__ = ["audit"]

_IMPORTS = {
    "builtins": "rewrites Python's builtins",
    "inspect": "inspects frames or source",
    "gc": "walks live objects",
    "ctypes": "writes memory directly",
    "importlib": "imports by computed name",
    "socket": "opens network sockets",
    "subprocess": "starts processes",
    "multiprocessing": "starts processes",
    "threading": "starts threads",
    "signal": "handles signals",
    "atexit": "runs code at exit",
    "shutil": "copies or deletes files",
    "pathlib": "reads or writes files",
    "os": "reaches the operating system",
    "sys": "reaches the interpreter",
    "IPython": "reaches the notebook machinery",
    "twoprim.core.checks": "reaches the course's checks",
    "twoprim.core.verdicts": "reaches the grader's capture",
    "twoprim.grading": "reaches the grader",
    "torch.utils._python_dispatch": "reaches torch's dispatch modes",
    "torch.overrides": "reaches torch's function modes",
    "numpy.testing": "reaches test helpers",
    "torch.testing": "reaches test helpers",
    "unittest": "reaches test helpers",
}
_CALLS = {
    "exec": "runs code from a string",
    "eval": "runs code from a string",
    "compile": "compiles code at run time",
    "__import__": "imports by computed name",
    "open": "opens files",
    "globals": "rewrites module globals",
    "setattr": "sets attributes by computed name",
    "delattr": "deletes attributes",
    "get_ipython": "reaches the notebook machinery",
    "exit": "ends the kernel",
    "quit": "ends the kernel",
    "breakpoint": "starts a debugger",
    "vars": "reads namespaces",
}
_ATTRIBUTES = {
    "excepthook": "replaces the exception hook",
    "set_custom_exc": "replaces IPython's exception handler",
    "input_transformers_cleanup": "rewrites cells before they run",
    "input_transformers_post": "rewrites cells before they run",
    "ast_transformers": "rewrites cells before they run",
    "_getframe": "inspects the caller's frame",
    "f_back": "inspects the caller's frame",
    "f_locals": "reads a frame's variables",
    "f_globals": "reads a frame's variables",
    "__builtins__": "rewrites builtins",
    "__code__": "rewrites functions",
    "__globals__": "reads function globals",
    "settrace": "traces execution",
    "setprofile": "traces execution",
    "_exit": "ends the kernel",
    "_pop_torch_dispatch_stack": "switches off torch's dispatch modes",
    "_disable_torch_function": "switches off torch's function modes",
    "__torch_dispatch__": "intercepts torch ops",
    "__torch_function__": "intercepts torch functions",
    "register_magic_function": "adds notebook magics",
    "events": "hooks the notebook's events",
    "_C": "reaches torch's C internals",
    "__getattribute__": "reads attributes around the normal lookup",
    "checks": "reaches the course's checks",
    "verdicts": "reaches the grader's capture",
    "record_calls": "reaches the checks' recorder",
    "run_check": "reaches the course's checks",
    "start_capture": "reaches the grader's capture",
    "__subclasses__": "walks the class hierarchy",
    "__dict__": "reads or rewrites namespaces",
    "system": "runs shell commands",
    "popen": "runs shell commands",
    "fork": "starts processes",
    "kill": "sends signals",
}
_VERDICT_LOOKALIKE = re.compile(r"[✔✘]|\bScore\s*:|\bpassed \d+ cases?\b|\bex0\d_\w+-\w+")
_LIBRARY_ROOTS = {"torch", "np", "numpy", "F", "nn", "math", "mx", "twoprim", "builtins", "sys", "os"}


def _home(module: str) -> str:
    """A module as notebooks name it (`twoprim.checks`) spelled as its home (`twoprim.core.checks`)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[0] == "twoprim":
        home = twoprim.PUBLIC.get(parts[1]) or (
            f"assignments.{a}" if (a := twoprim.assignment_modules().get(parts[1])) else None
        )
        if home:
            return ".".join(["twoprim", home, *parts[2:]])
    return module


def _library_roots() -> set[str]:
    """Names that hold a library or a course module in a notebook (`ex01`, `checks`, ...), never the learner's."""
    return _LIBRARY_ROOTS | package_modules()


def _literal_size(node: ast.AST) -> float | None:
    """The value of +, -, *, ** over number literals, never computing a huge power (None: not such an expression)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Pow)):
        a, b = _literal_size(node.left), _literal_size(node.right)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Pow):
            if abs(a) > 1 and b * math.log2(abs(a)) > 64:
                return math.inf
            return float(abs(a) ** b) if b >= 0 else 0.0
        return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(node.op)]
    return None


def _huge(node: ast.BinOp) -> bool:
    """An expression of number literals worth 2**30 or more (`64 * 2**30`, `10**12`)."""
    value = _literal_size(node)
    return value is not None and abs(value) >= 2**30


def audit(code: str) -> list[str]:
    """What `code` (one cell the learner wrote) does that graded code has no reason to do, one line each."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []  # it cannot run, so it cannot reach anything; the kernel reports the error
    found: list[str] = []

    def note(node: ast.AST, what: str, why: str) -> None:
        found.append(f"line {getattr(node, 'lineno', '?')}: {what} ({why})")

    inner = {
        id(child) for node in ast.walk(tree) if isinstance(node, ast.BinOp) for child in (node.left, node.right)
    }  # a size is reported once, as its whole expression
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom):
                modules += [f"{node.module}.{a.name}" for a in node.names]
            for written in modules:
                module = _home(written)
                for banned, why in _IMPORTS.items():
                    if module == banned or module.startswith(banned + "."):
                        note(node, f"import {written}", why)
                        break
        elif isinstance(node, ast.BinOp) and id(node) not in inner and _huge(node):
            note(node, ast.unparse(node)[:40], "a size of a billion or more: a memory or time bomb")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _VERDICT_LOOKALIKE.search(node.value):
            note(node, f"the text {node.value[:40]!r}", "imitates a check's verdict or a score")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
            note(node, f"{node.func.id}(...)", _CALLS[node.func.id])
        elif isinstance(node, ast.Attribute) and node.attr in _ATTRIBUTES:
            note(node, f".{node.attr}", _ATTRIBUTES[node.attr])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) > 1
            and not isinstance(node.args[1], ast.Constant)
        ):
            note(node, "getattr(..., <computed name>)", "reads an attribute by computed name")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                root = target
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                if not isinstance(root, ast.Name) or root.id == "self":
                    continue
                if isinstance(target, ast.Attribute) or (
                    isinstance(target, ast.Subscript) and root.id in _library_roots()
                ):
                    note(
                        node,
                        f"assigns to {ast.unparse(target)[:80]}",
                        "rewrites a library or the course's checks"
                        if root.id in _library_roots()
                        else "rewrites an attribute of an object it did not create",
                    )
    seen, unique = set(), []
    for line in found:
        if line not in seen:
            seen.add(line)
            unique.append(line)
    return unique
