"""Grade one submission end to end: load → worker → property checks → outcomes → score → results.json."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from . import __version__, feedback, results, scoring, submission
from .outcomes import Outcome
from .package.lock import outcome_versions
from .worker.client import Worker
from .worker.sandbox import close_project, interpreter_folders, open_way_to, protect_paths, worker_uid

# Out of the worker's reach when it runs as another user: the whole project (the grader with its
# hidden suite, grading.yml, solutions/, tests/, .git), except the interpreter that runs workers.
PROJECT = Path(__file__).resolve().parent.parent


def worker_interpreter_folders():
    """Folders the worker's Python needs (sandbox.interpreter_folders of the one it will run)."""
    return interpreter_folders(os.environ.get("AUTOGRADER_WORKER_PYTHON") or sys.executable)


def close_to_workers(private=()):
    """As root, set what the worker's uid may reach: the way to its interpreter opened (search
    bit only, said on screen), the project and `private` (results, submissions) closed."""
    opened = open_way_to(worker_interpreter_folders())
    if opened:
        print(f"note: added the search permission for other users (o+x, not read) to {', '.join(map(str, opened))}, "
              "so that the unprivileged worker can run this Python; nothing there became listable or readable",
              file=sys.stderr)
    close_project(PROJECT, keep=worker_interpreter_folders())
    protect_paths(private)


class Collected(NamedTuple):
    """What grading one submission produced, before scoring."""

    outcomes: list
    peak_rss_mib: float
    isolation: list  # the layers the worker ran under (sandbox.Sandbox.layers); [] if it never ran
    graded_file: str | None = None  # which file of a folder or zip was graded, when it held others


@dataclass
class Graded:
    outcomes: list
    scored: scoring.Scorecard
    seconds: float
    peak_rss_mib: float = 0.0
    isolation: list = dataclasses.field(default_factory=list)

    @property
    def score(self):
        return self.scored.total


# What decides an outcome: the hidden suite, the worker, how outcomes are collected, the
# misconception catalog (an outcome's diagnosis), and the settings of grading.yml that reach them.
# Points, visibility and language do not.
OUTCOME_SOURCES = ("properties/*.py", "worker/*.py", "outcomes.py", "suite_runner.py", "misconceptions/*.py")


def suite_version(config):
    """(grader version, hash of everything that decides outcomes): a stored outcome graded under
    the same pair is still valid, so batch may reuse it; editing points alone changes neither."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(p for pattern in OUTCOME_SOURCES for p in package.glob(pattern)):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    settings = {
        "versions": outcome_versions(),  # hypothesis, torch, numpy, pytest: their upgrades change examples
        "max_examples": config.max_examples, "seed": config.seed,
        "limits": dataclasses.asdict(config.limits), "properties": sorted((p.cls, p.name) for p in config.properties),
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return __version__, digest.hexdigest()[:16]


def grading_yml_hash(config):
    """The hash of grading.yml's text: what a report or results.json was scored with."""
    return hashlib.sha256(config.source.encode()).hexdigest()[:16]


def collect_outcomes(path, config, slot=0, private=(), worker_class=Worker):
    """Collected: the raw outcomes of every graded property for the submission at `path`.

    As root, the worker runs as another user, and the project plus `private` (the results
    folder) are first closed to other users, so that it can neither read nor write them.
    worker_class builds the Worker (batch grading passes one that forks from a warm zygote).
    """
    try:
        loaded = submission.load(path)
    except submission.SubmissionUnreadable as exc:
        outcomes = [Outcome(p.cls, p.name, "error", "load." + exc.code, exc.params) for p in config.properties]
        return Collected(outcomes, 0.0, [])
    return collect_loaded(loaded, config, slot, private, worker_class)


def collect_loaded(loaded, config, slot=0, private=(), worker_class=Worker):
    """Collected for a submission already read (a batch's slot gets its text, not a file)."""
    chosen = loaded.filename if loaded.among > 1 else None  # named where another file could have been meant
    uid = worker_uid(slot)
    if uid is not None:
        close_to_workers(private)
    worker = worker_class(loaded.source, config.limits, uid=uid)
    worker.start()  # raises WorkerSetupError (a grading-machine problem) before any test runs
    from .suite_runner import run_properties  # pytest and hypothesis load while torch does

    try:
        outcomes = run_properties(worker, config)
    finally:
        worker.stop()
    return Collected(outcomes, worker.peak_rss / 2**20, worker.layers, chosen)


def grade(path, config, out_dir=None, slot=0, previous=None):
    """Grade and, when out_dir is given, write out_dir/results.json (last, after the worker is gone,
    into the folder as it was when grading started: results.Folder)."""
    if out_dir is None:
        return _grade(path, config, None, slot, previous)
    with results.Folder(out_dir) as folder:
        return _grade(path, config, folder, slot, previous)


def _grade(path, config, folder, slot, previous):
    started = time.monotonic()
    collected = collect_outcomes(path, config, slot, private=[folder.path] if folder else [])
    # What made whole groups of tests fail at once (the file, a class not written yet) goes to the
    # top of results.json, once; each of those tests says it in one line.
    scored = scoring.score(collected.outcomes, config)
    overview = feedback.overview(collected.outcomes, config.language, collected.graded_file)
    graded = Graded(collected.outcomes, scored, time.monotonic() - started, collected.peak_rss_mib,
                    collected.isolation)
    if folder is not None:
        version, suite_hash = suite_version(config)
        data = results.build(
            scored, execution_time=graded.seconds, output="\n\n".join(filter(None, (overview, previous))),
            extra_data={"grader_version": version, "suite": suite_hash, "grading_yml": grading_yml_hash(config),
                        "language": config.language, "isolation": graded.isolation},
        )
        folder.write("results.json", data)
    return graded
