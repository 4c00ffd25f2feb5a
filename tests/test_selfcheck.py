"""Lesson self-checks: unanswered, right, wrong and revealed, without ever raising."""

from twoprim.learner.selfcheck import ask, reveal


def test_unanswered_right_wrong_and_reveal(capsys):
    ask("t-flops", ..., 8192, why="2n FLOPs.")
    assert "t-flops: not answered yet" in capsys.readouterr().out
    ask("t-flops", 8192, 8192, why="2n FLOPs.")
    assert capsys.readouterr().out.startswith("✔ t-flops: right. 2n FLOPs.")
    ask("t-flops", 4096, 8192, why="2n FLOPs.")
    assert "✘ t-flops: you answered 4096" in capsys.readouterr().out
    reveal("t-flops")
    assert capsys.readouterr().out.strip() == "t-flops: 8192. 2n FLOPs."


def test_types_are_compared_as_a_person_means_them(capsys):
    ask("t-shape", [6], (6,), why="")
    ask("t-str", " MX.EVAL ", "mx.eval", why="")
    assert capsys.readouterr().out.count("✔") == 2
    ask("t-bool", 0, False, why="")
    ask("t-bool2", 1.0, True, why="")
    assert capsys.readouterr().out.count("✘") == 2
