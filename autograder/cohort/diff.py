"""python -m autograder diff OLD [NEW]: what changed between two runs or two cohorts.

OLD and NEW are COHORT (its cohort view, as `report` shows it: each submission's latest result)
or COHORT:RUN (that run's results alone). With COHORT alone, the cohort view before its latest
run is compared with the view after it: what the latest run changed, be it a whole regrade, a
late submission or an `--only` regrade of one student. With COHORT:RUN alone, the cohort's last
two runs are compared. Submissions are matched by key; both sides are scored with the current
grading.yml, so the differences are those of the outcomes (a regrade after a fix, a new
submission), not of the weights. The table speaks the report's language (grading.yml's, or
--lang), and long keys, names and property names wrap instead of being cut.
"""
from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import config as grading_config
from .. import feedback
from .report import rescore
from .store import Store, StoreError


@dataclass(frozen=True)
class Change:
    key: str
    name: str
    old: float | None  # None: not in that side
    new: float | None
    properties: tuple  # (cls, prop, old status, new status)


def resolve(store, ref, previous=False):
    """A run from COHORT or COHORT:RUN; previous=True gives the run before it (before the cohort's
    latest when no RUN is named)."""
    cohort, _, run = ref.rpartition(":") if ":" in ref else (ref, "", "")
    if run and not run.isdigit():
        raise StoreError(f"{ref!r}: expected COHORT or COHORT:RUN")
    chosen = store.run(cohort, int(run) if run else None)
    if not previous:
        return chosen
    earlier = [r for r in store.runs(cohort) if r.id < chosen.id]
    if not earlier:
        raise StoreError(f"cohort {cohort!r} has no run before run {chosen.id}: give two runs or cohorts to compare")
    return earlier[-1]


def side(store, ref, language="en"):
    """(label, results) of one side of a diff: COHORT is its cohort view, COHORT:RUN that run alone."""
    cohort, _, run = ref.rpartition(":") if ":" in ref else (ref, "", "")
    if run:
        chosen = resolve(store, ref)
        return f"{chosen.cohort}:{chosen.id}", store.results(chosen)
    latest = store.run(cohort)
    label = feedback.catalog(language)["report"]["diff_cohort_view"].format(cohort=latest.cohort, run=latest.id)
    return label, store.cohort_results(cohort)


def before_latest(store, cohort, language="en"):
    """(label, results) of the cohort view before its latest run, and (label, results) after it."""
    runs = store.runs(cohort)
    if len(runs) < 2:
        raise StoreError(f"cohort {cohort!r} has {len(runs)} run(s): give two runs or cohorts to compare")
    template = feedback.catalog(language)["report"]["diff_cohort_view"]
    return ((template.format(cohort=runs[-2].cohort, run=runs[-2].id), store.cohort_results(cohort, runs[-2].id)),
            (template.format(cohort=runs[-1].cohort, run=runs[-1].id), store.cohort_results(cohort)))


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


def print_changes(changes, old_label, new_label, console, language="en"):
    """The changes as a table in `language`; names, keys and cohorts go in as Text, so rich reads no
    [markup] in them. Text columns fold (wrap anywhere) rather than cut, and the properties column
    is as wide as its longest "Class.property:" when the terminal allows (about 90 columns); where
    it does not, each class's name heads its properties, one per line, so that no name is split
    (down to about 60 columns): keys and names fold first."""
    words = feedback.catalog(language)["report"]
    table = Table(title=Text(f"{old_label} → {new_label}"))
    listed = [(c, p) for change in changes for c, p, _, _ in change.properties]
    dotted = max((len(f"{c}.{p}:") for c, p in listed), default=10)
    numbers = sum(max(len(words[n]), 4) for n in ("diff_old", "diff_new")) + 4 + 19  # with Δ, borders, padding
    room = console.width - numbers
    grouped = room - 20 < dotted  # leave key and name 10 columns each
    longest = max((max(len(c) + 1, len(p) + 3) for c, p in listed), default=10) if grouped else dotted
    properties = min(longest, room - 20) if room >= 30 else None
    text = max(10, (room - properties) // 2) if properties else None
    for name in ("diff_submission", "diff_student", "diff_old", "diff_new", "Δ", "diff_properties"):
        numeric = name in ("diff_old", "diff_new", "Δ")
        table.add_column(words.get(name, name), justify="right" if numeric else "left", overflow="fold",
                         no_wrap=numeric, min_width=properties if name == "diff_properties" else None,
                         max_width=None if numeric or name == "diff_properties" else text)
    for change in changes:
        delta = "" if change.old is None or change.new is None else f"{change.new - change.old:+g}"
        table.add_row(Text(change.key), Text(change.name), _score(change.old), _score(change.new), delta,
                      Text(_properties(change.properties, words, grouped)))
    console.print(table)
    moved = sum(1 for c in changes if c.old is not None and c.new is not None and c.old != c.new)
    console.print(Text(words["diff_summary"].format(moved=moved, differ=len(changes))))


def _properties(properties, words, grouped):
    """One line a property ("Class.property: before → after"), or, grouped, the class's name on a
    line of its own above its properties."""
    lines, heading = [], None
    for cls, prop, before, after in properties:
        change = f"{words.get(before, before)} → {words.get(after, after)}"
        if not grouped:
            lines.append(f"{cls}.{prop}: {change}")
            continue
        if cls != heading:
            lines.append(f"{cls}:")
            heading = cls
        lines.append(f"  {prop}: {change}")
    return "\n".join(lines)


def cmd_diff(args):
    config = grading_config.load(args.config, args.lang)
    language = config.language
    store = Store(args.db, create=False)
    try:
        if args.new is None and ":" not in args.old:
            (old_label, old_results), (new_label, new_results) = before_latest(store, args.old, language)
        elif args.new is None:
            old_run, new_run = resolve(store, args.old, previous=True), resolve(store, args.old)
            (old_label, old_results), (new_label, new_results) = (
                (f"{r.cohort}:{r.id}", store.results(r)) for r in (old_run, new_run))
        else:
            old_label, old_results = side(store, args.old, language)
            new_label, new_results = side(store, args.new, language)
        changes = compare(old_results, new_results, config)
    finally:
        store.close()
    print_changes(changes, old_label, new_label, Console(), language)
    return 0


def register(commands):
    from .batch import add_store_option

    diff = commands.add_parser("diff", help="compare two runs or cohorts: whose score and which properties changed")
    diff.add_argument("old", help="COHORT (its cohort view) or COHORT:RUN; COHORT alone: what its latest run changed")
    diff.add_argument("new", nargs="?", help="COHORT or COHORT:RUN")
    add_store_option(diff)
    grading_config.add_options(diff)
    diff.set_defaults(run=cmd_diff)
