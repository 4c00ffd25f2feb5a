"""`./course similarity`, `analysis` and `export`: what each prints and writes (instructor side)."""

from __future__ import annotations

import argparse
from pathlib import Path

from twoprim.core.errors import CourseError
from twoprim.core.notebooks import assignments

__all__ = ["run"]


def run(args: argparse.Namespace, root: Path) -> int:
    """./course similarity, analysis and export (twoprim/analytics/): what an instructor learns from a graded
    class, and its grades out to the LMS."""
    reports = root / "grader" / "reports"
    if args.command == "similarity":
        from twoprim.analytics import similarity

        overall, answers = getattr(args, "threshold", None), getattr(args, "answers_threshold", None)
        result = similarity.compare(
            args.assignment,
            root=root,
            threshold=similarity.THRESHOLD if overall is None else overall,
            answers_threshold=similarity.ANSWERS_THRESHOLD if answers is None else answers,
        )
        print(result.describe())
        for path in similarity.write_report(result, reports):
            print(f"wrote {path}")
        return 0
    from twoprim.grading.gradebook import database_url

    url = database_url(root, args.db)
    if args.command == "analysis":
        from twoprim.analytics import items

        analysis = items.analyse(args.assignment, url, root, with_blank=getattr(args, "with_blank", False))
        if not analysis.students:
            raise CourseError(
                f"every graded notebook of {args.assignment} is blank ({', '.join(analysis.blank)}): "
                f"nothing to analyse (--with-blank counts them)"
                if analysis.blank
                else f"no graded submission of {args.assignment} in the gradebook: run ./course autograde "
                f"{args.assignment} first"
            )
        print(analysis.describe())
        for path in items.write_report(analysis, reports):
            print(f"wrote {path}")
        return 0
    from twoprim.analytics import export

    ids = export.canvas_assignment_ids(args.roster) if args.canvas else {}  # a Canvas export names its columns
    wanted = export.parse_assignments(args.assignments, assignments(root), canvas=args.canvas, ids=ids)
    print(
        export.export(
            wanted,
            args.roster,
            root=root,
            url=url,
            canvas=args.canvas,
            out=args.output,
            id_column=getattr(args, "roster_id", None) or export.ROSTER_ID,
        ).describe()
    )
    return 0
