"""Code as `./course similarity` compares it: what a disguise changes without changing what the code does, undone.

A student hiding a copy renames, recomments, reorders, rewrites loops and adds code that does nothing. copydetect's
tokenizer already sees through names and comments, and its fingerprints match wherever they stand; this module
undoes the rest that can be undone from the code alone, on Python's own syntax tree (`ast`), before fingerprinting:

- docstrings, bare constants and `pass` go;
- dead code goes: a branch under a flag that is only ever set to a false constant (`debug = False ... if debug:`),
  `if False:`, code after a `return` or `raise`, and assignments to a name nothing reads but its own updates
  (`steps = 0 ... steps += 1`), repeated until nothing more goes;
- a counted `while` loop (`i = a`, `while i < b:`, the body ending with `i += s`, nothing else changing i) becomes
  `for i in range(a, b, s)`; `range(0, n)` becomes `range(n)` and a step of 1 is dropped;
- `x = x + y` (also `-`, `*`) becomes `x += y`;
- what a reordering changes is put in one order: the operands of `+` and `*`, and a run of neighbouring assignments
  to names that do not depend on one another, each sorted by its form with every name read as one letter (so a
  renamed and reordered copy sorts as its source does).

Code that does not parse is compared as it is. What this cannot undo: an answer rewritten in another construction
(a comprehension for a loop, a helper split differently), which copydetect then sees as different code.
"""

from __future__ import annotations

import ast

__all__ = ["normalise"]

_ROUNDS = 4  # dead-code removal repeated: removing one dead store can make another one dead


def normalise(code: str) -> str:
    """`code` as the comparison sees it (see the module's docstring); unchanged if it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    for _ in range(_ROUNDS):
        tree = _Canonical(_false_flags(tree)).visit(tree)
        _refill(tree)
        if not _drop_dead_stores(tree):
            break
    tree = _Canonical(_false_flags(tree)).visit(tree)
    _refill(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


def _false_flags(tree: ast.AST) -> set[str]:
    """Names only ever assigned a false constant, never a parameter or a loop variable (a debug flag never set)."""
    values: dict[str, list] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        values.setdefault(n.id, []).append(node.value if target is n else None)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension, ast.With)):
            for n in ast.walk(getattr(node, "target", node)):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    values.setdefault(n.id, []).append(None)
        elif isinstance(node, ast.arg):
            values.setdefault(node.arg, []).append(None)
    return {name for name, vs in values.items() if all(isinstance(v, ast.Constant) and not v.value for v in vs)}


def _never(test: ast.expr, flags: set[str]) -> bool:
    return (isinstance(test, ast.Constant) and not test.value) or (isinstance(test, ast.Name) and test.id in flags)


class _Canonical(ast.NodeTransformer):
    """One pass of the rewrites of the module's docstring (dead stores apart: `_drop_dead_stores`)."""

    def __init__(self, flags: set[str]):
        self.flags = flags

    def _statements(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            new = self.visit(stmt)
            out += new if isinstance(new, list) else [] if new is None else [new]
        out = _in_order(_counted_whiles(out))
        ends = next((n for n, s in enumerate(out) if isinstance(s, (ast.Return, ast.Raise))), None)
        return out if ends is None else out[: ends + 1]

    def generic_visit(self, node):
        for name, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                setattr(node, name, self._statements(value))
            elif isinstance(value, list):
                setattr(node, name, [self.visit(v) if isinstance(v, ast.AST) else v for v in value])
            elif isinstance(value, ast.AST):
                setattr(node, name, self.visit(value))
        return node

    def visit_Expr(self, node: ast.Expr):
        return None if isinstance(node.value, ast.Constant) else self.generic_visit(node)

    def visit_Pass(self, node: ast.Pass):
        return None

    def visit_If(self, node: ast.If):
        self.generic_visit(node)  # in place: it returns `node` itself
        if _never(node.test, self.flags):
            return node.orelse or None
        if isinstance(node.test, ast.Constant) and node.test.value:
            return node.body
        return node

    def visit_While(self, node: ast.While):
        self.generic_visit(node)  # in place: it returns `node` itself
        return (node.orelse or None) if _never(node.test, self.flags) else node

    def visit_Assign(self, node: ast.Assign):
        self.generic_visit(node)  # in place: it returns `node` itself
        target = node.targets[0] if len(node.targets) == 1 else None
        value = node.value
        if (
            isinstance(target, (ast.Name, ast.Subscript))
            and isinstance(value, ast.BinOp)
            and isinstance(value.op, (ast.Add, ast.Sub, ast.Mult))
            and _same(value.left, target)
        ):
            return ast.copy_location(ast.AugAssign(target=target, op=value.op, value=value.right), node)
        return node

    def visit_BinOp(self, node: ast.BinOp):
        self.generic_visit(node)  # in place: it returns `node` itself
        if isinstance(node.op, (ast.Add, ast.Mult)) and _form(node.right) < _form(node.left):
            node.left, node.right = node.right, node.left
        return node

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)  # in place: it returns `node` itself
        if isinstance(node.func, ast.Name) and node.func.id == "range" and not node.keywords:
            node.args = _range_args(node.args)
        return node


class _Anonymous(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name):
        return ast.Name("V", node.ctx)


def _form(node: ast.AST) -> str:
    """`node`'s code with every name read as V: what sorts the same in a copy whatever its names."""
    import copy

    return ast.unparse(_Anonymous().visit(copy.deepcopy(node)))


def _names(node: ast.AST, ctx) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def _movable(stmt: ast.stmt) -> bool:
    """An assignment to names only (not into a container), which may move past another that it does not touch."""
    targets = (
        stmt.targets
        if isinstance(stmt, ast.Assign)
        else [stmt.target]
        if isinstance(stmt, (ast.AugAssign, ast.AnnAssign))
        else None
    )
    return bool(targets) and all(
        isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Load, ast.Store)) for t in targets for n in ast.walk(t)
    )


def _in_order(body: list[ast.stmt]) -> list[ast.stmt]:
    """Each run of movable assignments in one order: among those whose inputs are ready, the smallest form first."""
    out: list[ast.stmt] = []
    run: list[ast.stmt] = []
    for stmt in [*body, None]:
        if stmt is not None and _movable(stmt):
            run.append(stmt)
            continue
        while run:
            writes = [
                _names(s, ast.Store)
                | ({s.target.id} if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) else set())
                for s in run
            ]
            reads = [_names(s, ast.Load) for s in run]
            ready = [
                n
                for n in range(len(run))
                if not any(writes[m] & (reads[n] | writes[n]) or writes[n] & reads[m] for m in range(n))
            ]
            first = min(ready, key=lambda n: (_form(run[n]), n))
            out.append(run.pop(first))
        if stmt is not None:
            out.append(stmt)
    return out


def _same(a: ast.expr, b: ast.expr) -> bool:
    """The same expression, whatever its context (load or store)."""
    return ast.unparse(a) == ast.unparse(b)


def _range_args(args: list[ast.expr]) -> list[ast.expr]:
    """range(a, b, 1) -> range(a, b); range(0, n) -> range(n)."""
    if len(args) == 3 and isinstance(args[2], ast.Constant) and args[2].value == 1:
        args = args[:2]
    if len(args) == 2 and isinstance(args[0], ast.Constant) and args[0].value == 0:
        args = args[1:]
    return args


def _step(stmt: ast.stmt, name: str) -> ast.expr | None:
    """s of `name += s` or `name = name + s`, else None."""
    if (
        isinstance(stmt, ast.AugAssign)
        and isinstance(stmt.op, ast.Add)
        and isinstance(stmt.target, ast.Name)
        and stmt.target.id == name
    ):
        return stmt.value
    if (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == name
        and isinstance(stmt.value, ast.BinOp)
        and isinstance(stmt.value.op, ast.Add)
        and isinstance(stmt.value.left, ast.Name)
        and stmt.value.left.id == name
    ):
        return stmt.value.right
    return None


def _counted_whiles(body: list[ast.stmt]) -> list[ast.stmt]:
    """`v = a`, then (with nothing between touching v) `while v < b: ...; v += s`, v changed nowhere else in the loop,
    no break or continue: `for v in range(a, b, s)`."""
    out: list[ast.stmt] = []
    for stmt in body:
        test = stmt.test if isinstance(stmt, ast.While) and not stmt.orelse else None
        if not (
            isinstance(stmt, ast.While)  # (test is None otherwise)
            and isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Lt)
            and isinstance(test.left, ast.Name)
        ):
            out.append(stmt)
            continue
        v, rest = test.left.id, stmt.body[:-1]
        start = next(
            (n for n in range(len(out) - 1, -1, -1) if v in _names(out[n], ast.Store) or v in _names(out[n], ast.Load)),
            None,
        )
        init = out[start] if start is not None else None
        step = _step(stmt.body[-1], v)
        touched = any(
            (isinstance(n, ast.Name) and n.id == v and isinstance(n.ctx, ast.Store))
            or isinstance(n, (ast.Break, ast.Continue))
            for s in rest
            for n in ast.walk(s)
        )
        if (
            start is None  # (then init is None too)
            or not (
                isinstance(init, ast.Assign)
                and len(init.targets) == 1
                and isinstance(init.targets[0], ast.Name)
                and init.targets[0].id == v
                and v not in _names(init.value, ast.Load)
            )
            or step is None
            or touched
        ):
            out.append(stmt)
            continue
        del out[start]
        args = _range_args([init.value, test.comparators[0], step])
        out.append(
            ast.copy_location(
                ast.For(
                    target=ast.Name(v, ast.Store()),
                    iter=ast.Call(ast.Name("range", ast.Load()), args, []),
                    body=rest or [ast.Pass()],
                    orelse=[],
                    type_comment=None,
                ),
                stmt,
            )
        )
    return out


def _drop_dead_stores(tree: ast.Module) -> bool:
    """Remove assignments (without calls) in functions to names nothing reads but their own updates; True if any
    went."""
    reads: dict[str, int] = {}
    own: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads[node.id] = reads.get(node.id, 0) + 1
        if isinstance(node, ast.AugAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            target = value = None
        if isinstance(target, ast.Name) and value is not None:
            own[target.id] = own.get(target.id, 0) + sum(
                isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Load) for n in ast.walk(value)
            )
    dead = {name for name in own if reads.get(name, 0) <= own[name]}
    dropped = False

    class Drop(ast.NodeTransformer):  # inside functions only: a module-level name may be read by another cell
        depth = 0

        def visit_FunctionDef(self, node):
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1
            return node

        def _drop(self, node, target):
            nonlocal dropped
            if (
                self.depth
                and isinstance(target, ast.Name)
                and target.id in dead
                and not any(isinstance(n, ast.Call) for n in ast.walk(node.value))
            ):
                dropped = True
                return None
            return node

        def visit_Assign(self, node):
            return self._drop(node, node.targets[0]) if len(node.targets) == 1 else node

        def visit_AugAssign(self, node):
            return self._drop(node, node.target)

    Drop().visit(tree)
    return dropped


def _refill(tree: ast.AST) -> None:
    """A block the rewrites emptied gets a `pass` (the tree stays valid Python)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(node, ast.Module) and isinstance(body, list) and not body:
            body.append(ast.Pass())
