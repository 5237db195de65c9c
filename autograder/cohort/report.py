"""python -m autograder report --cohort NAME --out DIR: regenerate a cohort's reports from the store.

Nothing is graded. By default the report shows the cohort view: each submission's result from
the latest run that has one (store.cohort_results), so an interrupted run, a folder of late
submissions or an `--only` regrade changes only the rows it graded; `--run N` shows one run's
results alone. Unfinished runs (and grader failures) are warned about on screen and in
index.html. The stored raw outcomes are rescored with the current grading.yml (points,
visibility) and rendered in the chosen language.

  gradebook.csv        one row per student: Name, SID, Email, Submission, Status (graded,
                       unreadable, grader failure, no submission: in the report's language), Run
                       (where the row comes from), Total Score, Max Points, one subtotal per class
  canvas.csv           the same scores laid out for Canvas's, Moodle's and Gradescope's imports
  moodle.csv           (exports.py; `--format` chooses, `--assignment` names the column)
  gradescope.csv
  students/PAGE.html   per-submission feedback (and .md): what a student may see, so tests with
  students/PAGE.md     visibility "hidden" are left out, and so is the total when any test is; those
                       shown after the due date or once grades are published are marked as such
                       (with --before-due-date, left out too, as Gradescope hides them until then)
  index.html           cohort summary for the staff: warnings, the runs the view draws on, score
                       histogram, pass rate per property and per class, the most common failures
                       with an example message, how many students each diagnosed misconception
                       has ("12 estudiantes": properties/diagnosis.py), every student with
                       status and run
  *.png                the summary's plots

`--roster roster.csv` (roster.py) gives each submission its students' names, SIDs, emails,
logins and sections by key, and adds "no submission" rows for the students without one.

Everything a student wrote or named (names, keys, messages, what the code printed) is shown as
text: gradebook cells that a spreadsheet would run as a formula get a leading quote, HTML pages
are autoescaped, Markdown pages escape names and keys and fence messages. Files are written 0600
and the folders made here 0700: the reports hold every student's feedback.
"""
from __future__ import annotations

import csv
import hashlib
import os
import re
import shlex
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from .. import config as grading_config
from .. import feedback, scoring
from ..grade import grading_yml_hash, suite_version
from ..text import composed
from . import exports
from . import roster as rosters
from .store import DEFAULT_PATH, Store, StoreError

TEMPLATES = Path(__file__).resolve().parent / "templates"
TOP_FAILURES = 10
PLAIN_PAGE = re.compile(r"[a-z0-9_-][a-z0-9._-]{0,99}")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV injection list
ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


class ReportError(UsageError):
    """The stored outcomes cannot be scored with this grading.yml."""


STATUSES = ("graded", "unreadable", "grader_failure", "missing")


def status_of(outcomes):
    """unreadable: the submission could not be loaded (every outcome is a load.* code); grader_failure:
    the grader itself failed on some property (grader_error), so the score is not to be trusted;
    graded otherwise, whatever the student's code did."""
    if outcomes and all((o.code or "").startswith("load.") for o in outcomes):
        return "unreadable"
    if any(o.code == "grader_error" for o in outcomes):
        return "grader_failure"
    return "graded"


@dataclass
class Graded:
    """One submission of the view, rescored."""

    key: str
    page: str
    submitters: list
    scored: scoring.Scorecard
    outcomes: list
    status: str = "graded"
    run_id: int | None = None
    overview: str = ""  # what made whole groups of tests fail at once, shown at the top of the page
    exported: bool = True  # False: a roster was given and no row of it is this submission's

    @property
    def total(self):
        return self.scored.total

    @property
    def display_name(self):
        return ", ".join(s.name or s.email or s.sid for s in self.submitters) or self.key


def page_name(key):
    """The file name (without suffix) of a submission's pages, from its key alone: the key itself when it
    is a plain lowercase name, else its sanitized form, `~` and a sha256 prefix of the key. `~` is in no
    plain name, so no two keys share a page, in any run, even on a case-insensitive file system."""
    if PLAIN_PAGE.fullmatch(key):
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{re.sub(r'[^a-z0-9._-]', '_', key.lower())[:80].lstrip('.')}~{digest}"


def rescore(results, config):
    """Score each StoredResult with `config`; every property it defines must have been graded."""
    graded = []
    for result in results:
        have = {(o.cls, o.prop) for o in result.outcomes}
        missing = [f"{p.cls}.{p.name}" for p in config.properties if (p.cls, p.name) not in have]
        if missing:
            raise ReportError(f"{result.key} was graded without {missing}: grade the cohort again (batch --regrade)")
        scored = scoring.score(result.outcomes, config)
        overview = feedback.overview(result.outcomes, config.language, getattr(result, "graded_file", None))
        graded.append(Graded(result.key, page_name(result.key), result.submitters, scored, result.outcomes,
                             status_of(result.outcomes), getattr(result, "run_id", None), overview))
    return graded


@dataclass
class Ungraded:
    """A student in the view without a result: the grader failed on their only submission
    (status grader_failure, with the run), or a roster student who handed nothing in (missing)."""

    key: str
    submitters: list
    status: str
    run_id: int | None = None
    exported: bool = True  # as Graded's

    @property
    def display_name(self):
        return ", ".join(s.name or s.email or s.sid for s in self.submitters) or self.key


@dataclass
class Row:
    """One line of the gradebook and of the exports: a person and their submission's score."""

    key: str
    name: str
    sid: str
    email: str
    login: str
    section: str
    status: str
    run_id: int | None
    earned: float | None  # None: no trustworthy score (see exports)
    possible: float
    subtotals: dict | None
    exported: bool = True  # into the LMS files; gradebook.csv has every row


def rows_of(items, config):
    """Gradebook rows of Graded and Ungraded items: one per person (a group gives several), one with
    the key as name when nobody is known."""
    rows = []
    for item in items:
        if isinstance(item, Graded):
            earned, possible = item.total
            subtotals = item.scored.class_totals()
        else:
            earned, possible, subtotals = None, config.max_score, None
        for person in item.submitters or [None]:
            rows.append(Row(
                item.key, person.name if person else item.key, getattr(person, "sid", ""),
                getattr(person, "email", ""), getattr(person, "login", ""), getattr(person, "section", ""),
                item.status, item.run_id, earned, possible, subtotals, item.exported))
    return rows


@dataclass
class View:
    """What a report shows: the rescored submissions, those without a result, and what to warn about."""

    cohort: str
    runs: list  # the Run objects the rows come from (the cohort view: every run of the cohort)
    run: object | None  # the one run of `--run N`, else None
    graded: list
    ungraded: list = field(default_factory=list)
    warnings: list = field(default_factory=list)  # unfinished runs, grader failures, roster mismatches
    export_warnings: list = field(default_factory=list)  # rows an LMS export cannot place or leaves out
    counts: dict = field(default_factory=dict)  # run id -> rows of the view from it

    @property
    def items(self):
        return sorted([*self.graded, *self.ungraded], key=lambda i: (i.key == "", i.key, i.display_name))


def private_file(path, binary=False):
    """Open `path` for writing, truncated, readable by its owner only (0600 even if it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    return open(fd, "wb") if binary else open(fd, "w", encoding="utf-8", newline="")


def private_folder(path):
    """Create `path` and its missing parents with mode 0700 (folders that exist are left alone)."""
    for folder in [*reversed(path.parents), path]:
        if not folder.exists():
            folder.mkdir(mode=0o700, exist_ok=True)


# A signed number (a SID `+56`, `-1203`): a spreadsheet reads it as a number, runs nothing, and the
# guard's quote would keep an LMS from matching the SID.
SIGNED_NUMBER = re.compile(r"[+-][0-9]+(?:\.[0-9]+)?")


def text_cell(text):
    """A gradebook cell that no spreadsheet runs as a formula: a leading quote where one could
    start, but for a signed number, which runs nothing."""
    return "'" + text if text.startswith(FORMULA_START) and not SIGNED_NUMBER.fullmatch(text) else text


def _number(value):
    return "" if value is None else f"{value:g}"


class ReportFolder:
    """The files one report writes into --out, so that a report into a reused folder removes what
    the earlier report there wrote and this one does not (the page of a key no longer in the view,
    a format not asked for now), which would otherwise pass for current. The list lives in
    MANIFEST; a file no report listed is never touched."""

    MANIFEST = ".autograder-report"

    def __init__(self, out):
        self.out = Path(out)
        self.written = set()

    def open(self, path, binary=False):
        self.written.add(Path(path).relative_to(self.out).as_posix())
        return private_file(path, binary)

    def close(self):
        """Remove the earlier report's files that this one did not write, then list this one's."""
        try:
            earlier = (self.out / self.MANIFEST).read_text(encoding="utf-8").splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            earlier = []
        for name in set(earlier) - self.written:
            stale = self.out / name
            if ".." not in Path(name).parts and not Path(name).is_absolute() and stale.is_file() \
                    and not stale.is_symlink():
                stale.unlink()
        with private_file(self.out / self.MANIFEST) as handle:
            handle.write("".join(f"{name}\n" for name in sorted(self.written)))


def write_gradebook(path, items, config, opener=private_file):
    """gradebook.csv from Graded/Ungraded items (or ready Rows); Status in the report's language."""
    classes = config.classes
    words = feedback.catalog(config.language)["report"]
    rows = [i for i in items if isinstance(i, Row)] + rows_of([i for i in items if not isinstance(i, Row)], config)
    with opener(path) as handle:
        handle.write("\ufeff")  # UTF-8 with a BOM, as the LMS files: Excel, opening it, reads the names' accents
        writer = csv.writer(handle)
        writer.writerow(["Name", "SID", "Email", "Submission", "Status", "Run", "Total Score", "Max Points", *classes])
        for row in rows:
            writer.writerow([
                *map(text_cell, (row.name, row.sid, row.email, row.key)), words[f"status_{row.status}"],
                _number(row.run_id), _number(row.earned), _number(row.possible),
                *(_number(row.subtotals and row.subtotals[c]) for c in classes),
            ])


def summary_figures(graded, config):
    """Pass rates and the most common failures, from the rescored cohort."""
    properties = [(p.cls, p.name) for p in config.properties]
    passed = Counter()
    failures = Counter()
    example = {}
    words = feedback.catalog(config.language)["report"]
    for item in graded:
        by_key = {(o.cls, o.prop): o for o in item.outcomes}
        context = feedback.Context(item.outcomes)  # a failure of the whole file, or of a class, counts once
        if context.whole is not None:
            failures[(words["whole_submission"], context.whole.code)] += 1
            example.setdefault((words["whole_submission"], context.whole.code), context.whole)
        for cls, outcome in context.unwritten.items():
            failures[(words["whole_class"].format(cls=cls), outcome.code)] += 1
            example.setdefault((words["whole_class"].format(cls=cls), outcome.code), outcome)
        for cls, prop in properties:
            outcome = by_key[(cls, prop)]
            if outcome.status == "passed":
                passed[(cls, prop)] += 1
            elif not context.explains(outcome):
                failures[(f"{cls}.{prop}", outcome.code)] += 1
                example.setdefault((f"{cls}.{prop}", outcome.code), outcome)
    count = max(len(graded), 1)
    per_property = [(f"{cls}.{prop}", passed[(cls, prop)] / count) for cls, prop in properties]
    per_class = []
    for cls in config.classes:
        props = [p for p in properties if p[0] == cls]
        per_class.append((cls, sum(passed[p] for p in props) / (count * len(props))))
    top = [{"where": where, "code": code, "count": n, "message": feedback.message(example[(where, code)], config.language)}
           for (where, code), n in failures.most_common(TOP_FAILURES)]
    return per_property, per_class, top


def diagnosis_counts(graded, language):
    """How many students the diagnosis (properties/diagnosis.py) found each catalog misconception in,
    most first: [{id, cls, props, count, students, explanation}], a student counted once per id
    whatever the number of properties that named it. An id this catalog no longer has (an outcome
    stored by another version) is counted under its id, without an explanation."""
    from .. import misconceptions

    students = Counter()
    where = {}
    for item in graded:
        found = {}
        for outcome in item.outcomes:
            if outcome.diagnosis:
                found.setdefault(outcome.diagnosis, set()).add(outcome.prop)
        for misconception, props in found.items():
            students[misconception] += 1
            where.setdefault(misconception, set()).update(props)
    template = feedback.catalog(language)["report"]["diagnosis_count"]
    rows = []
    for misconception, count in sorted(students.items(), key=lambda pair: (-pair[1], pair[0])):
        entry = misconceptions.BY_ID.get(misconception)
        rows.append({"id": misconception, "cls": entry.cls if entry else "", "props": sorted(where[misconception]),
                     "count": count, "students": feedback.fill(template, count=count),
                     "explanation": entry.explanation(language) if entry else ""})
    return rows


def plot(out, graded, per_property, per_class, config, labels, opener):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = {}
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.hist([g.total[0] for g in graded], bins=min(25, max(int(config.max_score), 1)), range=(0, config.max_score),
            color="#3b6ea5")
    ax.set_xlabel(labels["score"])
    ax.set_ylabel(labels["submissions"])
    ax.set_title(labels["histogram"])
    figures["histogram"] = "histogram.png"
    _save(fig, out / figures["histogram"], opener)

    for name, rows, height in (("per_property", per_property, 0.28), ("per_class", per_class, 0.6)):
        fig, ax = plt.subplots(figsize=(7, 1 + height * len(rows)))
        ax.barh([r[0] for r in rows][::-1], [100 * r[1] for r in rows][::-1], color="#4c9a6a")
        ax.set_xlim(0, 100)
        ax.set_xlabel("%")
        ax.set_title(f"{labels['pass_rate']} {labels[name]}")
        ax.tick_params(axis="y", labelsize=7 if name == "per_property" else 9)
        figures[name] = f"pass_rate_{name}.png"
        _save(fig, out / figures[name], opener)
    return figures


def _save(fig, path, opener):
    import matplotlib.pyplot as plt  # loaded by plot() already

    fig.tight_layout()
    with opener(path, binary=True) as handle:
        fig.savefig(handle, format="png", dpi=100)
    plt.close(fig)


def _fence(text):
    """A Markdown code fence longer than any run of backticks in the text."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _markdown_text(text):
    """`text` as literal inline Markdown: one line, `&<>` as entities, other ASCII punctuation
    backslash-escaped, so a name can open no HTML tag, link, emphasis, table cell or heading."""
    return re.sub(r"[!-/:-@\[-`{-~]", lambda m: ENTITIES.get(m[0], "\\" + m[0]), " ".join(str(text).split()))


def environment():
    import jinja2  # imported here: every command's parser loads this module

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=jinja2.select_autoescape(["html.j2"]),
        trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
    )
    env.filters["fence"] = _fence
    env.filters["md"] = _markdown_text
    env.filters["num"] = lambda value: f"{value:g}"
    return env


def _superseded(run, runs):
    """An unfinished run that a later finished run of the same folder, covering its scope, replaced."""
    return any(later.id > run.id and later.finished and later.source == run.source
               and (later.scope is None or (run.scope is not None and set(run.scope) <= set(later.scope)))
               for later in runs)


def _command(run, db, config, config_path):
    """The batch command that resumes `run`: its folder, cohort, --regrade, --only keys, store and,
    where batch's default grading.yml would draw other examples (a run resumes only under the suite
    it began with), --config: the report's own when it draws as the run did, else a placeholder
    naming the run."""
    words = ["python -m autograder batch", shlex.quote(run.source), "--cohort", shlex.quote(run.cohort),
             *(["--regrade"] if run.regrade else []), *(f"--only {shlex.quote(key)}" for key in run.scope or ()),
             *([] if Path(db) == DEFAULT_PATH else ["--db", shlex.quote(str(db))])]
    if _suite_hash_of(grading_config.DEFAULT_PATH) != run.suite_hash:
        drawn_alike = suite_version(config)[1] == run.suite_hash
        words += ["--config", shlex.quote(str(config_path)) if drawn_alike else f"<grading.yml of run {run.id}>"]
    return " ".join(words)


def _regrade_command(run, keys, db, config_path):
    """The batch command that grades `keys` of `run`'s folder again under the report's grading.yml."""
    words = ["python -m autograder batch", shlex.quote(run.source), "--cohort", shlex.quote(run.cohort), "--regrade",
             *(f"--only {shlex.quote(key)}" for key in keys),
             *([] if Path(db) == DEFAULT_PATH else ["--db", shlex.quote(str(db))]),
             *([] if Path(config_path) == grading_config.DEFAULT_PATH else ["--config", shlex.quote(str(config_path))])]
    return " ".join(words)


def _suite_hash_of(path):
    try:
        return suite_version(grading_config.load(path))[1]
    except grading_config.ConfigError:
        return None


def _keys(keys):
    keys = list(keys)
    return ", ".join(keys[:15]) + (f" (+{len(keys) - 15})" if len(keys) > 15 else "")


def build_view(store, cohort, config, run_id=None, roster=None, config_path=grading_config.DEFAULT_PATH):
    """The View of a cohort (run_id None) or of one run, rescored, joined with `roster` if given;
    `config_path`: where `config` was read, for the command that resumes an unfinished run."""
    words = feedback.catalog(config.language)["report"]
    runs = store.runs(cohort)
    if not runs:
        raise StoreError(f"cohort {cohort!r} has no runs yet")
    counts = store.result_counts(cohort)
    replaced = []
    if run_id is None:
        run = None
        results = store.cohort_results(cohort, replaced=replaced)
        latest = {r.key: r.run_id for r in results}
        failures = [f for f in store.failures(cohort) if latest.get(f.key, 0) < f.run_id]
        shown = [r for r in runs if not r.finished and not _superseded(r, runs)]
    else:
        run = store.run(cohort, run_id)
        results = store.results(run)
        latest = {r.key: run.id for r in results}
        failures = [f for f in store.failures(cohort, run.id) if f.key not in latest]
        shown = [] if run.finished else [run]
    graded = rescore(results, config)
    ungraded = {}
    for failure in failures:  # the latest failure of a key with no result at all
        if failure.key not in latest:
            ungraded[failure.key] = Ungraded(failure.key, failure.submitters, "grader_failure", failure.run_id)
    view = View(cohort, runs, run, graded, list(ungraded.values()))
    now = store.grading_now()
    for r in shown:
        in_progress = now == (r.cohort, r.id)
        template = words["warning_in_progress" if in_progress else
                         "warning_unfinished" if r.expected else "warning_unfinished_count"]
        view.warnings.append(template.format(run=r.id, source=r.source, started=r.started_at,
                                             count=counts.get(r.id, 0), expected=r.expected, command=_command(r, store.path, config, config_path)))
    drawn_otherwise = {r.id: r for r in runs if r.suite_hash != suite_version(config)[1]}
    for stale_run in sorted({g.run_id for g in graded if g.run_id in drawn_otherwise}):
        keys = [g.key for g in graded if g.run_id == stale_run]
        view.warnings.append(words["warning_other_settings"].format(
            run=stale_run, source=drawn_otherwise[stale_run].source, count=len(keys), keys=_keys(keys),
            command=_regrade_command(drawn_otherwise[stale_run], keys, store.path, config_path)))
    if replaced:
        view.warnings.append(words["warning_replaced_export"].format(keys=_keys(
            f"{r.key} ({', '.join(s.name or s.email or s.sid for s in r.submitters)})" for r in replaced)))
    stale = {}
    for failure in failures:
        if failure.key in latest:
            stale.setdefault(failure.run_id, []).append(failure.key)
    for failed_run, keys in sorted(stale.items()):
        view.warnings.append(words["warning_failed"].format(run=failed_run, keys=_keys(dict.fromkeys(keys))))
    if roster is not None:
        _apply_roster(view, roster, words)
    if not view.graded and not view.ungraded:
        raise ReportError(f"{'run ' + str(run.id) if run else 'cohort'} of {cohort!r} has no results yet")
    view.counts = dict(Counter(i.run_id for i in view.items if i.run_id is not None))
    return view


def _apply_roster(view, roster, words):
    items = [*view.graded, *view.ungraded]
    joined = rosters.join(roster, {i.key: i.submitters for i in items})
    outside = []
    for item in items:
        people = joined.people.get(item.key)
        if people:
            merged, kept = _merged(people, item.submitters)
            stored = item.submitters[0].name if len(item.submitters) == 1 else ""
            item.submitters = [*(_named(p, stored or rosters.stem(item.key)) for p in merged), *kept]
            outside += [f"{k.name or k.email or k.sid} ({item.key})" for k in kept]
    if outside:
        view.warnings.append(words["warning_member_not_in_roster"].format(names=_keys(outside)))
    if view.run is None:
        for person in joined.missing:
            view.ungraded.append(Ungraded("", [person], "missing"))
    elif joined.missing:  # one run holds some submissions: the rest of the class did hand theirs in, maybe
        view.warnings.append(words["warning_not_in_run"].format(count=len(joined.missing), run=view.run.id))
    for key, keys in joined.ambiguous:
        view.warnings.append(words["warning_roster_ambiguous"].format(key=key, keys=_keys(keys)))
    if joined.unmatched:
        # No LMS file gets them: a row without the roster's SID would be matched by name alone
        # (Canvas), and the name is whatever the file was called.
        for item in items:
            item.exported = item.exported and item.key not in joined.unmatched
        view.warnings.append(words["warning_not_in_roster"].format(keys=_keys(joined.unmatched)))


def _merged(people, stored):
    """(roster people, stored submitters kept) of one submission. A person the roster leaves
    without an email or SID takes the stored one of the same student (same email, SID or name, or
    the one stored submitter of a one-person row). A stored submitter with an email or SID that no roster
    row names (a Gradescope group's member missing from the class list) is kept as exported, not
    dropped with their grade."""
    def same(person, submitter):
        return bool((person.email and person.email.casefold() == submitter.email.casefold())
                    or (person.sid and person.sid == submitter.sid)
                    or (person.name and composed(person.name).casefold() == composed(submitter.name).casefold()))

    merged, named = [], set()
    for person in people:
        match = next((s for s in stored if same(person, s)), None)
        if match is None and len(people) == len(stored) == 1:
            match = stored[0]
        if match is not None:
            named.add(id(match))
            person = rosters.Person(person.name, person.email or match.email, person.sid or match.sid,
                                    person.login, person.section)
        merged.append(person)
    kept = [rosters.Person(s.name, s.email, s.sid) for s in stored if id(s) not in named and (s.email or s.sid)]
    return merged, kept


def _named(person, fallback):
    return person if person.name else rosters.Person(fallback, person.email, person.sid, person.login, person.section)


def write_reports(store, cohort, out, config, run_id=None, roster=None, formats=exports.FORMATS,
                  assignment=exports.DEFAULT_ASSIGNMENT, config_path=grading_config.DEFAULT_PATH,
                  before_due_date=False):
    """Write every report of the cohort view (or of one run) into `out`; returns the View.
    before_due_date: the pages leave out what Gradescope shows a student only later."""
    view = build_view(store, cohort, config, run_id, roster, config_path)
    graded = view.graded
    out = Path(out)
    private_folder(out / "students")
    (out / "students").chmod(0o700)  # made by an earlier version, maybe; it lists every student
    labels = feedback.catalog(config.language)["report"]
    env = environment()
    rows = rows_of(view.items, config)
    folder = ReportFolder(out)
    write_gradebook(out / "gradebook.csv", rows, config, folder.open)
    view.export_warnings = exports.write(out, formats, rows, assignment, config.max_score, folder.open, text_cell, labels)
    statement = feedback.catalog(config.language)["statement"]
    page = {"labels": labels, "cohort": view.cohort, "language": config.language,
            "title": feedback.label("summary_title", config.language), "marks": statement["marks"],
            "words": {k: feedback.label(k, config.language) for k in ("total", "property", "points", "status")}}
    for item in graded:
        shown = item.scored.shown(before_due_date)
        later = dict.fromkeys(t.visibility for t in shown if t.visibility in scoring.LATER)
        context = {**page, "item": item, "tests": shown, "show_total": len(shown) == len(item.scored),
                   "notes": [statement["visibility_notes"][v].format(mark=statement["marks"][v]) for v in later]}
        for suffix in ("html", "md"):
            text = env.get_template(f"student.{suffix}.j2").render(context)
            with folder.open(out / "students" / f"{item.page}.{suffix}") as handle:
                handle.write(text)
    per_property, per_class, top = summary_figures(graded, config)
    totals = [g.total[0] for g in graded] or [0.0]
    figures = plot(out, graded, per_property, per_class, config, labels, folder.open)
    context = {
        "cohort": view.cohort, "view": view, "labels": labels, "language": config.language, "items": view.items,
        "graded": graded, "max_score": config.max_score, "mean": statistics.fmean(totals),
        "median": statistics.median(totals), "per_class": per_class, "per_property": per_property, "top": top,
        "diagnoses": diagnosis_counts(graded, config.language),
        "figures": figures, "scored_with": grading_yml_hash(config),
        "runs": [r for r in view.runs if view.run is None or r.id == view.run.id],
    }
    text = env.get_template("summary.html.j2").render(context)
    with folder.open(out / "index.html") as handle:
        handle.write(text)
    folder.close()
    return view


def cmd_report(args):
    config = grading_config.load(args.config, args.lang)
    words = feedback.catalog(config.language)["report"]
    formats = exports.FORMATS if not args.formats or "all" in args.formats else tuple(dict.fromkeys(args.formats))
    store = Store(args.db, create=False)
    try:
        roster = rosters.read(args.roster) if args.roster else None
        view = write_reports(store, args.cohort, args.out, config, args.run_id, roster, formats, args.assignment,
                             args.config, args.before_due_date)
    finally:
        store.close()
    for warning in [*view.warnings, *view.export_warnings]:
        print(f"{words['warnings']}: {warning}", file=sys.stderr)
    described = (words["report_view_run"].format(run=view.run.id) if view.run else
                 words["report_view_cohort"].format(runs=", ".join(map(str, sorted(view.counts)))))
    students = rows_of(view.items, config)  # gradebook.csv's rows: a group's submission counts each member
    statuses = Counter(row.status for row in students)
    summary = ", ".join(f"{words['status_' + s]}: {statuses[s]}" for s in STATUSES if statuses[s])
    print(words["report_done"].format(rows=len(students), view=described, out=args.out) + f": {summary}")
    return 0


def register(commands):
    from .batch import add_store_option

    report = commands.add_parser("report",
                                 help="regenerate a cohort's gradebook, LMS exports, feedback pages and summary")
    report.add_argument("--cohort", required=True)
    report.add_argument("--out", required=True, help="folder for the reports")
    report.add_argument("--run", type=int, dest="run_id",
                        help="show this run's results alone (default: the cohort view, each student's latest result)")
    report.add_argument("--roster", help="CSV class list (key, name, sid, email[, login, section]) joined by key")
    report.add_argument("--format", dest="formats", action="append", choices=(*exports.FORMATS, "all"),
                        help="LMS export to write: canvas, moodle, gradescope or all (repeatable; default: all)")
    report.add_argument("--assignment", default=exports.DEFAULT_ASSIGNMENT, type=exports.assignment_title,
                        help="column title of the score in canvas.csv and moodle.csv, e.g. 'Tarea 2' or "
                             "'Tarea 2 (12345)' to hit an existing Canvas assignment by id (default: %(default)s)")
    report.add_argument("--before-due-date", action="store_true",
                        help="leave out of the students' pages the tests shown only after the due date or once "
                             "grades are published (visibility in grading.yml), as Gradescope hides them until then")
    add_store_option(report)
    grading_config.add_options(report)
    report.set_defaults(run=cmd_report)
