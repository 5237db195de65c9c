"""python -m autograder diff OLD [NEW]: what changed between two runs or two cohorts.

OLD and NEW are COHORT (its latest run) or COHORT:RUN. With OLD alone, the cohort's last two
runs are compared. Submissions are matched by key; both sides are scored with the current
grading.yml, so the differences are those of the outcomes (a regrade after a fix, a new
submission), not of the weights.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import config as grading_config
from .report import ReportError, rescore
from .store import Store, StoreError


@dataclass(frozen=True)
class Change:
    key: str
    name: str
    old: float | None  # None: not in that side
    new: float | None
    properties: tuple  # (cls, prop, old status, new status)


def resolve(store, ref, previous=False):
    """A run from COHORT or COHORT:RUN; previous=True gives the run before the cohort's latest."""
    cohort, _, run = ref.rpartition(":") if ":" in ref else (ref, "", "")
    if run and not run.isdigit():
        raise StoreError(f"{ref!r}: expected COHORT or COHORT:RUN")
    if not previous:
        return store.run(cohort, int(run) if run else None)
    runs = store.runs(cohort)
    if len(runs) < 2:
        raise StoreError(f"cohort {cohort!r} has {len(runs)} run(s): give two runs or cohorts to compare")
    return runs[-2]


def compare(old_results, new_results, config):
    """Changes from old to new: score changes, and property status changes at equal score."""
    old = {g.key: g for g in rescore(old_results, config)}
    new = {g.key: g for g in rescore(new_results, config)}
    changes = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if before is None or after is None:
            item = before or after
            changes.append(Change(key, item.display_name, before and before.total[0], after and after.total[0], ()))
            continue
        properties = tuple(
            (b.cls, b.prop, b.outcome_status, a.outcome_status)
            for b, a in zip(before.scored, after.scored) if b.outcome_status != a.outcome_status
        )
        if properties or before.total[0] != after.total[0]:
            changes.append(Change(key, after.display_name, before.total[0], after.total[0], properties))
    return changes


def _score(value):
    return "—" if value is None else f"{value:g}"


def print_changes(changes, old_run, new_run, console):
    """The changes as a table; names, keys and cohorts go in as Text, so rich reads no [markup] in them."""
    table = Table(title=Text(f"{old_run.cohort}:{old_run.id} → {new_run.cohort}:{new_run.id}"))
    for column in ("submission", "student", "old", "new", "Δ", "properties"):
        table.add_column(column, justify="right" if column in ("old", "new", "Δ") else "left")
    for change in changes:
        delta = "" if change.old is None or change.new is None else f"{change.new - change.old:+g}"
        props = "\n".join(f"{c}.{p}: {a} → {b}" for c, p, a, b in change.properties)
        table.add_row(Text(change.key), Text(change.name), _score(change.old), _score(change.new), delta, Text(props))
    console.print(table)
    moved = sum(1 for c in changes if c.old is not None and c.new is not None and c.old != c.new)
    console.print(f"{moved} score(s) changed, {len(changes)} submission(s) differ")


def cmd_diff(args):
    config = grading_config.load(args.config, args.lang)
    store = Store(args.db)
    try:
        new_ref = args.new or args.old
        old_run = resolve(store, args.old, previous=args.new is None)
        new_run = resolve(store, new_ref)
        changes = compare(store.results(old_run), store.results(new_run), config)
    except (StoreError, ReportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print_changes(changes, old_run, new_run, Console())
    return 0


def register(commands):
    from ..cli import _add_config_options
    from .batch import add_store_option

    diff = commands.add_parser("diff", help="compare two runs or cohorts: whose score and which properties changed")
    diff.add_argument("old", help="COHORT or COHORT:RUN (alone: the cohort's last two runs)")
    diff.add_argument("new", nargs="?", help="COHORT or COHORT:RUN")
    add_store_option(diff)
    _add_config_options(diff)
    diff.set_defaults(run=cmd_diff)
