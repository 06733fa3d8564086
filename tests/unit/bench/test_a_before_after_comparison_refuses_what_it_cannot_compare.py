"""``bench/alternate.py`` (a benchmark run from two checkouts in turn) refuses, in one line and before any run, what
would make its before/after table wrong or unreadable: a tree that is not a checkout, the same tree on both sides (no
comparison, labelled as one), a script given as a path (both sides would run that one file), an interpreter that is
not there, and a script one tree lacks.  Each case exits before the first run (no process is started)."""

import sys

import pytest

from tests.conftest import REPO


def _other_checkout(tmp_path):
    tree = tmp_path / "old"
    (tree / "qworker").mkdir(parents=True)
    (tree / "qworker" / "__init__.py").write_text("")
    (tree / "bench").mkdir()
    (tree / "bench" / "transport.py").write_text("print('ran')\n")
    return tree


CASES = {
    "not a checkout": (lambda tmp, old: ["--before", str(tmp / "nowhere"), "transport.py"], "not a qworker checkout"),
    "same tree": (lambda tmp, old: ["--before", str(REPO), "transport.py"], "are the same tree"),
    "a path": (lambda tmp, old: ["--before", str(old), str(old / "bench" / "transport.py")], "not a path"),
    "no interpreter": (lambda tmp, old: ["--before", str(old), "--before-python", str(tmp / "python"), "transport.py"],
                       "not an executable file"),
    "no such script": (lambda tmp, old: ["--before", str(old), "nope.py"], "no bench/nope.py in the before tree"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_before_after_comparison_refuses_in_one_line_before_running(tmp_path, monkeypatch, capsys, case):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    monkeypatch.delitem(sys.modules, "alternate", raising=False)
    import alternate

    args, said = CASES[case]
    monkeypatch.setattr(sys, "argv", ["bench/alternate.py", *args(tmp_path, _other_checkout(tmp_path))])
    with pytest.raises(SystemExit) as exit_:
        alternate.main()
    line = str(exit_.value.code)
    assert said in line and "\n" not in line, line
    assert "ran" not in capsys.readouterr().out
