"""Raw outcomes: what happened to each graded (class, property) of one submission.

An outcome is what happened to one (class, property): passed, failed, error or timeout, with a
message code, its parameters, the minimal failing example and what the submission printed.
Outcomes carry no points: scoring.py applies grading.yml to them, now or later from the store.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .errors import GraderBug
from .properties import diagnosis
from .properties.failures import PropertyFailure, current_example
from .worker.submission_errors import KINDS, SubmissionError, SubmissionHalted


@dataclass
class Outcome:
    cls: str
    prop: str
    status: str  # passed, failed, error or timeout
    code: str | None = None
    params: dict = field(default_factory=dict)
    example: dict = field(default_factory=dict)
    duration: float = 0.0
    output: str = ""
    diagnosis: str | None = None  # id of the catalog misconception that explains a failure on values

    def as_dict(self):
        return asdict(self)


class SuiteError(GraderBug):
    """The hidden suite and grading.yml disagree, or the suite itself is broken."""


def _unwrap(exc):
    """Find our own failure inside hypothesis' exception groups, if it is there."""
    if isinstance(exc, SubmissionHalted):
        return exc.error
    if isinstance(exc, (PropertyFailure, SubmissionError)):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _unwrap(inner)
        if found is not None:
            return found
    return None


def outcome_from_exception(cls, prop, exc):
    found = _unwrap(exc)
    diagnosis.reset()  # the property is over: the next one starts afresh
    if isinstance(found, PropertyFailure):
        return Outcome(cls, prop, "failed", found.code, found.params, found.example, diagnosis=found.diagnosis)
    if found is not None:  # SubmissionError: the submission could not answer
        status = "timeout" if KINDS[found.kind].timeout else "error"
        return Outcome(cls, prop, status, "submission." + found.kind, found.as_dict(), current_example())
    return Outcome(cls, prop, "error", "grader_error", {"error": f"{type(exc).__name__}: {exc}"[:1000]})
