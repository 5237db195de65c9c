"""Grade one submission end to end: load → worker → property checks → outcomes → score → results.json."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from . import __version__, results, scoring, submission
from .outcomes import Outcome, run_properties
from .worker.client import Worker
from .worker.sandbox import worker_uid


@dataclass
class Graded:
    outcomes: list
    scored: list
    seconds: float
    source_sha256: str | None
    peak_rss_mib: float = 0.0

    @property
    def score(self):
        return scoring.total(self.scored)


def suite_version(config):
    """Grader version plus the hash of grading.yml: what a stored outcome was graded under."""
    return __version__, hashlib.sha256(config.source.encode()).hexdigest()[:16]


def collect_outcomes(path, config, slot=0):
    """The raw outcomes of every graded property for the submission at `path`."""
    try:
        loaded = submission.load(path)
    except submission.SubmissionUnreadable as exc:
        outcomes = [Outcome(p.cls, p.name, "error", "load." + exc.code, exc.params) for p in config.properties]
        return outcomes, None, 0.0
    worker = Worker(loaded.source, config.limits, uid=worker_uid(slot))
    worker.start()  # raises WorkerSetupError (a grading-machine problem) before any test runs
    try:
        outcomes = run_properties(worker, config)
    finally:
        worker.close()
    return outcomes, hashlib.sha256(loaded.source.encode()).hexdigest(), worker.peak_rss / 2**20


def grade(path, config, out_dir=None, slot=0, previous=None):
    """Grade and, when out_dir is given, write out_dir/results.json (last, after the worker is gone)."""
    started = time.monotonic()
    outcomes, digest, peak = collect_outcomes(path, config, slot)
    scored = scoring.score(outcomes, config)
    graded = Graded(outcomes, scored, time.monotonic() - started, digest, peak)
    if out_dir is not None:
        version, grading_hash = suite_version(config)
        data = results.build(
            scored, execution_time=graded.seconds, output=previous or "",
            extra_data={"grader_version": version, "grading_yml": grading_hash, "language": config.language},
        )
        results.write(Path(out_dir) / "results.json", data)
    return graded
