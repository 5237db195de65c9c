"""Apply grading.yml to raw outcomes: points, visibility, names and numbers of each test.

Scoring is a pure function of (outcomes, config): the store keeps outcomes, so a report can
rescore a whole cohort with edited weights or prerequisites without running any student code again.

A property with `requires` earns its points only when each prerequisite earns (passes, with its
own prerequisites met): a module that computes no attention cannot collect the points of checks
that such a module passes trivially (rows summing to one, masked weights at zero...).
"""
from collections.abc import Sequence
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
    blocked_by: tuple[str, ...] = ()  # prerequisites that did not pass: why a passing outcome earns nothing
    diagnosis: str | None = None  # the outcome's: the catalog misconception that explains its failure


@dataclass(frozen=True)
class Scorecard(Sequence):
    """One submission's scored tests, in grading.yml's order: the one results model. Totals and
    per-class subtotals are computed here only; results.json (results.py), the terminal table
    (summary.py), the report pages and the gradebooks (cohort/report.py, cohort/exports.py) write it."""

    tests: tuple[ScoredTest, ...]
    classes: tuple[str, ...]  # grading order

    def __getitem__(self, index):
        return self.tests[index]

    def __len__(self):
        return len(self.tests)

    @property
    def earned(self):
        return sum(t.score for t in self.tests)

    @property
    def possible(self):
        return sum(t.max_score for t in self.tests)

    @property
    def total(self):
        """(earned, possible)."""
        return self.earned, self.possible

    def class_totals(self):
        """Class -> points earned in it, in grading order."""
        return {cls: sum(t.score for t in self.tests if t.cls == cls) for cls in self.classes}

    def shown(self, before_due_date=False):
        """The tests a student's report page shows: all but the hidden ones; before the due date,
        as Gradescope shows them then, not those shown only after it or once grades are published."""
        unseen = ("hidden", *(LATER if before_due_date else ()))
        return [t for t in self.tests if t.visibility not in unseen]


# Visibilities whose results Gradescope shows a student only later (the page marks them).
LATER = ("after_due_date", "after_published")


def score(outcomes, config):
    """The Scorecard of `outcomes` under `config`, each test's feedback rendered."""
    by_key = {(o.cls, o.prop): o for o in outcomes}
    class_order = config.classes
    counters = {}
    scored = []
    earns = _earning(by_key, config)
    for prop in config.properties:
        outcome = by_key[(prop.cls, prop.name)]
        counters[prop.cls] = counters.get(prop.cls, 0) + 1
        blocked_by = tuple(r for r in prop.requires if not earns[(prop.cls, r)])
        passed = earns[(prop.cls, prop.name)]
        scored.append(ScoredTest(
            cls=prop.cls, prop=prop.name,
            number=f"{class_order.index(prop.cls) + 1}.{counters[prop.cls]}",
            name=feedback.title(prop.cls, prop.name, config.language),
            score=prop.points if passed else 0.0, max_score=prop.points,
            status="passed" if passed else "failed", outcome_status=outcome.status,
            visibility=prop.visibility, output="", blocked_by=blocked_by, diagnosis=outcome.diagnosis,
        ))
    return Scorecard(tuple(feedback.render(scored, outcomes, config.language)), config.classes)


def _earning(by_key, config):
    """(class, property) -> whether it earns its points: its outcome passed and so did its
    prerequisites, recursively (config.load refuses cycles)."""
    requires = {(p.cls, p.name): p.requires for p in config.properties}
    earns = {}

    def earning(key):
        if key not in earns:
            earns[key] = by_key[key].status == "passed" and all(earning((key[0], r)) for r in requires[key])
        return earns[key]

    for key in requires:
        earning(key)
    return earns
