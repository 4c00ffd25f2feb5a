"""README.md is for a newcomer and short; dated measurements live as data files (data/benchmarks/), and the one
measurement README states agrees with its file; the guides it links to exist. (The site itself is built and
checked at the end of tests/test_notebooks.py, after the lessons it renders have run.)"""

from __future__ import annotations

import json
import re
from datetime import date

import pytest

from twoprim.config import ROOT

README = ROOT / "README.md"
BENCHMARKS = ROOT / "data" / "benchmarks"
ISO_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
SUITE_LINE = re.compile(
    r"`make test` takes about (\d+) minutes on a (\d+)-core machine \(measured (\d{4}-\d\d-\d\d)\)\."
)
RUN_FIELDS = {"date", "machine", "command", "numbers", "note"}


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def test_the_readme_is_short_and_states_no_dated_measurement_but_the_suites_time():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, f"README.md has {len(text.splitlines())} lines: move a guide into docs/"
    dated = [p for p in _paragraphs(text) if ISO_DATE.search(p)]
    assert len(dated) == 1 and SUITE_LINE.fullmatch(dated[0]), (
        "README.md's only dated paragraph is the one line with the suite's time; a measurement goes to "
        f"data/benchmarks/ (the site's Benchmarks page renders it). Dated paragraphs: {dated}"
    )


def _runs() -> dict[str, list[dict]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8"))["runs"] for p in sorted(BENCHMARKS.glob("*.json"))}


def test_the_readmes_suite_time_is_the_newest_passing_run_of_its_data_file():
    [(minutes, cores, measured)] = SUITE_LINE.findall(README.read_text(encoding="utf-8"))
    # the line speaks of `make test` itself: not of make test-fast, nor of another number of test processes
    passing = [
        r
        for r in _runs()["suite.json"]
        if r["numbers"].get("failed") == 0 and r["command"] in ("make test", ".ci/run (make test)")
    ]
    newest = max(passing, key=lambda r: r["date"])  # runs of one day are in the order they were made
    newest = [r for r in passing if r["date"] == newest["date"]][-1]
    assert (int(minutes), int(cores), measured) == (
        round(newest["numbers"]["wall_s"] / 60),
        newest["cpus"],
        newest["date"],
    ), (
        f"README.md says {minutes} minutes on {cores} cores ({measured}); data/benchmarks/suite.json's newest passing "
        f"run took {newest['numbers']['wall_s']} s on {newest['cpus']} cores ({newest['date']})"
    )


@pytest.mark.parametrize("name", sorted(p.name for p in BENCHMARKS.glob("*.json")))
def test_each_benchmark_file_holds_one_record_per_run(name):
    data = json.loads((BENCHMARKS / name).read_text(encoding="utf-8"))
    assert {"title", "about", "columns", "runs"} <= set(data), f"{name}: title, about, columns and runs"
    assert data["runs"], f"{name} records no run"
    for run in data["runs"]:
        assert set(run) >= RUN_FIELDS, f"{name}: a run without {sorted(RUN_FIELDS - set(run))}"
        date.fromisoformat(run["date"])
        assert "\n" not in run["note"] and len(run["note"]) <= 200, f"{name}: a note is one line: {run['note']!r}"
        rows = run["numbers"] if isinstance(run["numbers"], list) else [run["numbers"]]
        for row in rows:
            assert set(row) <= set(data["columns"]), (
                f"{name}: numbers without a column: {set(row) - set(data['columns'])}"
            )


def test_the_readme_links_only_to_files_that_exist():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local, "README.md links to no guide"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_guides_say_the_class_size_the_cluster_test_grades():
    found = re.search(r"^CLASS_SIZE = (\d+)", (ROOT / "tests" / "test_cluster.py").read_text(), re.M)
    assert found, "tests/test_cluster.py states its CLASS_SIZE"
    size = int(found[1])
    for page in ("cluster.md", "development.md"):
        said = re.findall(r"a class of (\d+)", (ROOT / "docs" / "guides" / page).read_text(encoding="utf-8"))
        assert said and {int(n) for n in said} == {size}, (
            f"docs/guides/{page} says a class of {said}, the test grades {size}"
        )


SIMILARITY_LINE = re.compile(
    r"on built classes of (\d+) to (\d+) students `./course similarity` flags copies with\s+"
    r"precision (\d\.\d\d)-(\d\.\d\d) and recall (\d\.\d\d)-(\d\.\d\d)"
)


def test_the_readmes_similarity_figures_are_the_newest_run_of_its_data_file():
    """#47: precision and recall stated in the README, from the script anyone runs, as its data file records them."""
    found = SIMILARITY_LINE.findall(" ".join(README.read_text(encoding="utf-8").split()))
    assert len(found) == 1, "README.md states the similarity's precision and recall once"
    smallest, largest, p_lo, p_hi, r_lo, r_hi = found[0]
    newest = _runs()["similarity.json"][-1]
    rows = newest["numbers"]
    sizes = [row["students"] for row in rows]
    precision = [row["precision"] for row in rows]
    recall = [row["recall"] for row in rows]
    assert (int(smallest), int(largest)) == (min(sizes), max(sizes)), (smallest, largest, sizes)
    assert (p_lo, p_hi) == (f"{min(precision):.2f}", f"{max(precision):.2f}"), (p_lo, p_hi, precision)
    assert (r_lo, r_hi) == (f"{min(recall):.2f}", f"{max(recall):.2f}"), (r_lo, r_hi, recall)
    assert newest["command"].startswith("scripts/bench_similarity.py")
