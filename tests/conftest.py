"""Shared fixtures: the shipped grading.yml, the reference and stub paths, and a cached grader."""
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder import config as grading_config
from autograder.grade import grade

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
