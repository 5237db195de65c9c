"""Apply grading.yml to raw outcomes: points, visibility, names and numbers of each test.

Scoring is a pure function of (outcomes, config): the store keeps outcomes, so a report can
rescore a whole cohort with edited weights without running any student code again.
"""
from dataclasses import dataclass

from . import feedback


@dataclass(frozen=True)
class ScoredTest:
    cls: str
    prop: str
    number: str
    name: str
    score: float
    max_score: float
    status: str  # Gradescope's: passed | failed
    outcome_status: str  # ours: passed | failed | error | timeout
    visibility: str
    output: str


def score(outcomes, config):
    by_key = {(o.cls, o.prop): o for o in outcomes}
    class_order = list(dict.fromkeys(p.cls for p in config.properties))
    counters = {}
    scored = []
    for prop in config.properties:
        outcome = by_key[(prop.cls, prop.name)]
        counters[prop.cls] = counters.get(prop.cls, 0) + 1
        passed = outcome.status == "passed"
        scored.append(ScoredTest(
            cls=prop.cls, prop=prop.name,
            number=f"{class_order.index(prop.cls) + 1}.{counters[prop.cls]}",
            name=feedback.title(prop.cls, prop.name, config.language),
            score=prop.points if passed else 0.0, max_score=prop.points,
            status="passed" if passed else "failed", outcome_status=outcome.status,
            visibility=prop.visibility, output=feedback.message(outcome, config.language),
        ))
    return scored


def total(scored):
    return sum(t.score for t in scored), sum(t.max_score for t in scored)
