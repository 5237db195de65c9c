"""Shared fixtures: the shipped grading.yml, the reference and stub paths, and a cached grader."""
import functools
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder import config as grading_config
from autograder import submission
from autograder.grade import grade
from autograder.worker import client

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class GradedRun:
    """One graded submission: the grader's result and the results.json it wrote."""

    graded: object
    results_path: Path

    @property
    def outcomes(self):
        """(class, property) → Outcome."""
        return {(o.cls, o.prop): o for o in self.graded.outcomes}

    @property
    def results(self):
        return json.loads(self.results_path.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def grading():
    """grading.yml as shipped."""
    return grading_config.load()


@pytest.fixture(scope="session")
def solution_path():
    return ROOT / "solutions" / "attention.py"


@pytest.fixture(scope="session")
def stub_path():
    return ROOT / "assignments" / "attention" / "attention.py"


@pytest.fixture(scope="session")
def graded_run(grading, tmp_path_factory):
    """graded_run(path): grade `path` with the shipped grading.yml, once per session, writing results.json."""
    cache = {}

    def run(path):
        key = Path(path).resolve()
        if key not in cache:
            out = tmp_path_factory.mktemp("graded")
            cache[key] = GradedRun(grade(key, grading, out_dir=out), out / "results.json")
        return cache[key]

    return run


# ---- the fast tier -----------------------------------------------------------------------------
# `python -m autograder test --fast` runs only tests marked `unit` (pytest -m unit): no worker, no
# subprocess, no fork. The guard below holds a unit test to that while its fixtures are set up and
# while it runs, so a test that starts grading cannot stay in the fast tier by mistake.


class UnitTierViolation(RuntimeError):
    """A test marked `unit` tried to start a worker or another process."""


def _refuse(what):
    def refuse(*args, **kwargs):
        raise UnitTierViolation(f"a test marked unit must not start {what}: drop the marker or the call")
    return refuse


@functools.cache
def _matplotlib_font_cache():
    """Build matplotlib's font cache before any guard: on a fresh machine its first import runs
    `fc-list`, a process the library starts once for itself, not one the test starts."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


def _guarded(item):
    if item.get_closest_marker("unit") is None:
        return None
    _matplotlib_font_cache()
    patch = pytest.MonkeyPatch()
    patch.setattr(client.Worker, "start", _refuse("a grading worker (Worker.start)"))
    patch.setattr(subprocess.Popen, "__init__", _refuse("a subprocess"))
    patch.setattr(os, "fork", _refuse("a fork (os.fork)"))
    # submission.load reads in a child under a CPU limit: here, in this process (the limit itself
    # is tests/test_loader_attacks.py's, in the full tier)
    patch.setattr(submission, "_bounded", lambda read, path: read(path))
    return patch


def _guarded_phase(item):
    """A unit test's setup or call, run with workers, subprocesses and forks refused."""
    patch = _guarded(item)
    try:
        return (yield)
    finally:
        if patch is not None:
            patch.undo()


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_guarded_phase)
pytest_runtest_call = pytest_runtest_setup  # the same wrapper around both phases
