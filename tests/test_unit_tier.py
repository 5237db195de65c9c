"""The fast tier itself: `python -m autograder test --fast` selects the `unit` marker, and the guard
in conftest.py stops a unit test that would start a worker, a subprocess or a fork."""
import os
import subprocess
import sys

import pytest

import conftest
from autograder import cli
from autograder.config import Limits
from autograder.worker import client

pytestmark = pytest.mark.unit


class Item:
    """What the guard reads of a pytest item: its closest marker of a name."""

    def __init__(self, *marks):
        self.marks = marks

    def get_closest_marker(self, name):
        return pytest.mark.unit.mark if name in self.marks else None


def test_the_guard_refuses_workers_subprocesses_and_forks_in_a_unit_test_and_then_lets_go():
    originals = (client.Worker.start, subprocess.Popen.__init__, os.fork)
    patch = conftest._guarded(Item("unit"))
    try:
        with pytest.raises(conftest.UnitTierViolation, match="Worker.start"):
            client.Worker("", Limits()).start()
        with pytest.raises(conftest.UnitTierViolation, match="subprocess"):
            subprocess.run([sys.executable, "-c", "pass"])
        with pytest.raises(conftest.UnitTierViolation, match="fork"):
            os.fork()
    finally:
        patch.undo()
    assert (client.Worker.start, subprocess.Popen.__init__, os.fork) == originals


def test_the_guard_leaves_other_tests_alone():
    assert conftest._guarded(Item()) is None


@pytest.mark.parametrize("argv, expected", [
    (["test", "--fast", "-q"], ["-m", "unit", "-q"]),
    (["test", "-q", "--fast", "-k", "scale"], ["-m", "unit", "-q", "-k", "scale"]),
    (["test", "-x"], ["-x"]),
])
def test_fast_adds_the_unit_marker_and_passes_the_rest_to_pytest(monkeypatch, argv, expected):
    seen = []
    monkeypatch.setattr(pytest, "main", lambda args: seen.append(args) or 0)
    umask = os.umask(0o022)
    try:
        assert cli.main(argv) == 0
    finally:
        os.umask(umask)  # cli.main makes it 077 for the grader; the other tests keep theirs
    assert seen[0][0].endswith("tests") and seen[0][1:] == expected
