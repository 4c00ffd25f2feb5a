"""The site's two directives: the course outline from README.md's lesson table, and tables of dated measurements
read from the data files (`data/benchmarks/*.json`, the hub's `data/capacity/*.json`, `data/selfgrade_timings.json`).

    ```{course-outline}
    ```

    ```{benchmark-runs} data/benchmarks/suite.json
    ```

A data file of `data/benchmarks/` is {"title", "about", "columns": {key: header}, "runs": [...]}: one record per
run, each with its `date`, `machine`, `command`, `note` (one line), optional `conditions` and `detail`, and its
`numbers`: one row (a dict) or a row per item (a list of dicts), keyed as `columns`; optional `summary` (a dict of
further figures of the run). Each file is read when the page is built, so a new run is a new record, not a new page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.addnodes import pending_xref
from sphinx.util.docutils import SphinxDirective

from twoprim.config import ROOT


def inline(text: str) -> list[nodes.Node]:
    """`text` with its `code` spans as literals (the README's style in table cells)."""
    parts = re.split(r"`([^`]+)`", text)
    return [nodes.literal(part, part) if i % 2 else nodes.Text(part) for i, part in enumerate(parts) if part]


def table(header: list[str], rows: list[list[list[nodes.Node] | str]]) -> nodes.table:
    """A docutils table: a header row, then rows of cells (each a string or a list of inline nodes)."""
    group = nodes.tgroup(cols=len(header))
    group += [nodes.colspec(colwidth=1) for _ in header]

    def row(cells) -> nodes.row:
        out = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph("", "", *(inline(cell) if isinstance(cell, str) else cell))
            out += entry
        return out

    group += nodes.thead("", row(header))
    group += nodes.tbody("", *(row(r) for r in rows))
    return nodes.table("", group, classes=["twoprim-table"])


def doc_link(target: str, text: str) -> pending_xref:
    """A checked reference to another page of the site (nitpicky: a missing page fails the build)."""
    ref = pending_xref("", refdomain="std", reftype="doc", reftarget=target, refexplicit=True, refwarn=True)
    ref += nodes.literal(text, text)
    return ref


class CourseOutline(SphinxDirective):
    """The course outline, read from README.md's lesson table (its one source), each lesson linked to its page."""

    def run(self) -> list[nodes.Node]:
        from twoprim.core.notebooks import outline

        readme = ROOT / "README.md"
        self.env.note_dependency(str(readme))
        rows = []
        for row in outline(ROOT):
            lesson = (
                [doc_link(f"/lessons/{row.lesson}", row.lesson), nodes.Text(" — "), *inline(row.topic)]
                if row.lesson
                else []
            )
            work = f"`{row.assignment}`: {row.functions}" if row.assignment else ""
            rows.append([lesson, work])
        if not rows:
            raise self.error("README.md has no lesson table: the outline has nothing to show")
        return [table(["lesson", "assignment"], rows)]


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _records(path: Path) -> list[nodes.Node]:
    """A data/benchmarks file: its description, then each run's record (one table for single-row runs)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    columns: dict = data["columns"]
    out: list[nodes.Node] = [nodes.paragraph("", "", *inline(data["about"]))]
    runs = data["runs"]
    if all(isinstance(run["numbers"], dict) for run in runs):  # one row per run: one table
        machines = sorted({run["machine"] for run in runs})
        timed = any(run.get("time") for run in runs)
        header = [
            "date",
            *(["time (UTC)"] if timed else []),
            *columns.values(),
            *(["machine"] if len(machines) > 1 else []),
            "note",
        ]
        rows = [
            [
                run["date"],
                *([run.get("time") or "—"] if timed else []),
                *(_cell(run["numbers"].get(k)) for k in columns),
                *([run["machine"]] if len(machines) > 1 else []),
                run["note"] + (f" ({run['conditions']})" if run.get("conditions") else ""),
            ]
            for run in runs
        ]
        out.append(table(header, rows))
        if len(machines) == 1:
            out.append(nodes.paragraph("", "", nodes.Text(f"Machine: {machines[0]}.")))
        commands = sorted({run["command"] for run in runs})
        out.append(
            nodes.paragraph(
                "",
                "",
                nodes.Text("Made by: "),
                *[n for c in commands for n in (nodes.literal(c, c), nodes.Text("; "))][:-1],
            )
        )
        for run in runs:
            if run.get("detail"):
                out.append(
                    nodes.paragraph(
                        "", "", nodes.strong(run["date"], run["date"]), nodes.Text(": "), *inline(run["detail"])
                    )
                )
        return out
    for run in runs:
        title = f"{run['date']}{' ' + run['time'] if run.get('time') else ''}: {run['note']}"
        section = nodes.rubric(title, title)
        about = [nodes.Text(f"{run['machine']}; "), nodes.literal(run["command"], run["command"])]
        if run.get("conditions"):
            about.append(nodes.Text(f"; {run['conditions']}"))
        out += [section, nodes.paragraph("", "", *about)]
        numbers = run["numbers"] if isinstance(run["numbers"], list) else [run["numbers"]]
        out.append(table(list(columns.values()), [[_cell(row.get(k)) for k in columns] for row in numbers]))
        if run.get("summary"):
            items = nodes.bullet_list()
            for key, value in run["summary"].items():
                items += nodes.list_item("", nodes.paragraph("", "", nodes.Text(f"{key}: "), *inline(_cell(value))))
            out.append(items)
        if run.get("detail"):
            out.append(nodes.paragraph("", "", *inline(run["detail"])))
    return out


def _capacity(folder: Path) -> list[nodes.Node]:
    """scripts/bench_hub.py's reports (one JSON file per run): each run's conditions beside its numbers."""
    rows = []
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]
    for r in sorted(reports, key=lambda r: (r["started"], r["students"])):
        steps = r["steps"]

        def p(step: str, q: str, steps: dict = steps) -> str:
            return f"{steps[step][q]:.1f}" if step in steps else "—"

        cpu = r.get("student_cpu_s_median")
        rows.append(
            [
                r["started"].replace("T", " ").removesuffix("Z") + " UTC",
                str(r["students"]),
                f"{r['window_s']:g} s",
                f"{p('login_to_first_cell', 'p50')} / {p('login_to_first_cell', 'p95')}",
                f"{p('validate', 'p50')} / {p('validate', 'p95')}",
                p("submit", "p95"),
                f"{r['machine_peak_mb'] / 1000:.1f} ({r['machine_before_mb'] / 1000:.1f})",
                "—" if cpu is None else f"{cpu:.0f}",
                " / ".join(f"{x:.1f}" for x in r["loadavg_before"]),
                str(len(r["failures"])),
                f"`{r['command']}`",
            ]
        )
    header = [
        "started",
        "students",
        "logins within",
        "login → first cell p50 / p95 s",
        "Validate p50 / p95 s",
        "Submit p95 s",
        "machine memory peak GB (at start)",
        "CPU s per student (median)",
        "load average before (1, 5, 15 min)",
        "failures",
        "command",
    ]
    return [table(header, rows)]


def _selfgrade(path: Path) -> list[nodes.Node]:
    """scripts/bench_selfgrade.py's report: each assignment's self-grade, cold and warm, with the load of each."""
    data = json.loads(path.read_text(encoding="utf-8"))
    keys = ["cold command", "first warm", "warm command", "warm cell"]
    rows = []
    for aid, s in data["seconds"].items():
        rows.append(
            [f"`{aid}`", *(_cell(s.get(k)) for k in keys), _cell(s.get("warm command load")), _cell(s.get("score"))]
        )
    machine = data["machine"]
    about = (
        f"Measured {data['date']} on a {machine['cpus']}-core {machine['processor']} machine (Python "
        f"{machine['python']}), warm grader's start {data['warm grader start s']} s; load average at the end "
        f"{' / '.join(str(x) for x in data['load average at the end'])}. Seconds from pressing to the table."
    )
    return [
        nodes.paragraph("", about),
        table(
            [
                "assignment",
                "cold command s",
                "first warm s",
                "warm command s",
                "warm cell s",
                "load average (warm command)",
                "score",
            ],
            rows,
        ),
    ]


class BenchmarkRuns(SphinxDirective):
    """Tables of a data file's dated runs (or of a folder of bench_hub reports), read when the page is built."""

    required_arguments = 1
    option_spec = {"format": lambda arg: directives.choice(arg, ("records", "capacity", "selfgrade"))}

    def run(self) -> list[nodes.Node]:
        path = ROOT / self.arguments[0]
        kind = self.options.get("format", "records")
        if not path.exists():
            raise self.error(f"{self.arguments[0]} does not exist (the data files live in the repository: {ROOT})")
        for dependency in [path] if path.is_file() else sorted(path.glob("*.json")):
            self.env.note_dependency(str(dependency))
        try:
            return {"records": _records, "capacity": _capacity, "selfgrade": _selfgrade}[kind](path)
        except (KeyError, TypeError, ValueError) as err:
            raise self.error(f"{self.arguments[0]} is not a {kind} data file: {err!r}") from None


_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def _rst_inline(line: str) -> str:
    """A Markdown line of a docstring as reStructuredText: `code` spans as literals, a bare `|` as text."""
    out, last = [], 0
    for match in _CODE.finditer(line):
        out.append(line[last : match.start()].replace("|", r"\|"))
        out.append(f"``{match[1]}``")
        last = match.end()
    out.append(line[last:].replace("|", r"\|"))
    return "".join(out)


def _rst_table(rows: list[str], indent: str) -> list[str]:
    """A Markdown table (header, `---` line, rows) as an RST list-table."""
    cells = [[c.strip() for c in row.strip().strip("|").split(" | ")] for row in rows]
    body = [cells[0]] + [c for c in cells[1:] if set("".join(c)) - set("-: ")]
    out = [f"{indent}.. list-table::", f"{indent}   :header-rows: 1", ""]
    for row in body:
        for i, cell in enumerate(row):
            out.append(f"{indent}   {'* -' if i == 0 else '  -'} {_rst_inline(cell)}")
    return out + [""]


def markdown_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    """The package's docstrings are written in Markdown (code in single backticks, `|x|`, tables): autodoc reads
    reStructuredText, so each is rewritten in place before it is parsed."""
    out, i = [], 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|[\s\-:|]+\|", lines[i + 1].strip()):
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            j = i
            while j < len(lines) and lines[j].strip().startswith("|"):
                j += 1
            out += ([""] if out and out[-1].strip() else []) + _rst_table(lines[i:j], indent)
            i = j
            continue
        out.append(_rst_inline(lines[i]))
        i += 1
    lines[:] = out


def setup(app) -> dict:
    app.add_directive("course-outline", CourseOutline)
    app.add_directive("benchmark-runs", BenchmarkRuns)
    app.connect("autodoc-process-docstring", markdown_docstring)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
