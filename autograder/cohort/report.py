"""python -m autograder report --cohort NAME --out DIR: regenerate a cohort's reports from the store.

Nothing is graded: the stored raw outcomes of the chosen run (the latest by default) are
rescored with the current grading.yml (points, visibility) and rendered in the chosen language.

  gradebook.csv        one row per student: Name, SID, Email, Total Score, Max Points, one
                       subtotal per class (what Gradescope's and Canvas's score imports match on)
  students/PAGE.html   per-submission feedback (and .md): what a student may see, so tests with
  students/PAGE.md     visibility "hidden" are left out, and so is the total when any test is hidden
  index.html           cohort summary for the staff: score histogram, pass rate per property and
                       per class, the most common failures with an example message, every student
  *.png                the summary's plots

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
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .. import config as grading_config
from .. import feedback, scoring
from ..grade import grading_yml_hash
from .store import Store, StoreError

TEMPLATES = Path(__file__).resolve().parent / "templates"
TOP_FAILURES = 10
PLAIN_PAGE = re.compile(r"[a-z0-9_-][a-z0-9._-]{0,99}")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV injection list
ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


class ReportError(Exception):
    """The stored outcomes cannot be scored with this grading.yml."""


@dataclass
class Graded:
    """One submission of the run, rescored."""

    key: str
    page: str
    submitters: list
    scored: list
    outcomes: list

    @property
    def total(self):
        return scoring.total(self.scored)

    @property
    def display_name(self):
        return ", ".join(s.name or s.email or s.sid for s in self.submitters) or self.key

    def class_totals(self, classes):
        return {cls: sum(t.score for t in self.scored if t.cls == cls) for cls in classes}


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
        graded.append(Graded(result.key, page_name(result.key), result.submitters,
                             scoring.score(result.outcomes, config), result.outcomes))
    return graded


def classes_of(config):
    return list(dict.fromkeys(p.cls for p in config.properties))


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


def text_cell(text):
    """A gradebook cell that no spreadsheet runs as a formula: a leading quote where one could start."""
    return "'" + text if text.startswith(FORMULA_START) else text


def write_gradebook(path, graded, config):
    classes = classes_of(config)
    with private_file(path) as handle:
        writer = csv.writer(handle)
        writer.writerow(["Name", "SID", "Email", "Submission", "Total Score", "Max Points", *classes])
        for item in graded:
            earned, possible = item.total
            subtotals = item.class_totals(classes)
            for person in item.submitters or [None]:
                texts = (person.name, person.sid, person.email) if person else (item.key, "", "")
                writer.writerow([
                    *map(text_cell, (*texts, item.key)),
                    f"{earned:g}", f"{possible:g}", *(f"{subtotals[c]:g}" for c in classes),
                ])


def summary_figures(graded, config):
    """Pass rates and the most common failures, from the rescored cohort."""
    properties = [(p.cls, p.name) for p in config.properties]
    passed = Counter()
    failures = Counter()
    example = {}
    for item in graded:
        by_key = {(o.cls, o.prop): o for o in item.outcomes}
        for cls, prop in properties:
            outcome = by_key[(cls, prop)]
            if outcome.status == "passed":
                passed[(cls, prop)] += 1
            else:
                failures[(cls, prop, outcome.code)] += 1
                example.setdefault((cls, prop, outcome.code), outcome)
    count = max(len(graded), 1)
    per_property = [(f"{cls}.{prop}", passed[(cls, prop)] / count) for cls, prop in properties]
    per_class = []
    for cls in classes_of(config):
        props = [p for p in properties if p[0] == cls]
        per_class.append((cls, sum(passed[p] for p in props) / (count * len(props))))
    top = [
        {"cls": cls, "prop": prop, "code": code, "count": n,
         "message": feedback.message(example[(cls, prop, code)], config.language)}
        for (cls, prop, code), n in failures.most_common(TOP_FAILURES)
    ]
    return per_property, per_class, top


def plot(out, graded, per_property, per_class, config, labels):
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
    _save(fig, out / figures["histogram"])

    for name, rows, height in (("per_property", per_property, 0.28), ("per_class", per_class, 0.6)):
        fig, ax = plt.subplots(figsize=(7, 1 + height * len(rows)))
        ax.barh([r[0] for r in rows][::-1], [100 * r[1] for r in rows][::-1], color="#4c9a6a")
        ax.set_xlim(0, 100)
        ax.set_xlabel("%")
        ax.set_title(f"{labels['pass_rate']} {labels[name]}")
        ax.tick_params(axis="y", labelsize=7 if name == "per_property" else 9)
        figures[name] = f"pass_rate_{name}.png"
        _save(fig, out / figures[name])
    return figures


def _save(fig, path):
    import matplotlib.pyplot as plt  # loaded by plot() already

    fig.tight_layout()
    with private_file(path, binary=True) as handle:
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


def write_reports(store, cohort, out, config, run_id=None):
    """Write every report of a run into `out`; returns (run, rescored submissions)."""
    run = store.run(cohort, run_id)
    graded = rescore(store.results(run), config)
    if not graded:
        raise ReportError(f"run {run.id} of {cohort!r} has no results yet")
    out = Path(out)
    private_folder(out / "students")
    (out / "students").chmod(0o700)  # made by an earlier version, maybe; it lists every student
    labels = feedback.catalog(config.language)["report"]
    env = environment()
    write_gradebook(out / "gradebook.csv", graded, config)
    page = {"labels": labels, "cohort": run.cohort, "language": config.language,
            "title": feedback.label("summary_title", config.language),
            "words": {k: feedback.label(k, config.language) for k in ("total", "property", "points", "status")}}
    for item in graded:
        shown = [t for t in item.scored if t.visibility != "hidden"]
        context = {**page, "item": item, "tests": shown, "show_total": len(shown) == len(item.scored)}
        for suffix in ("html", "md"):
            text = env.get_template(f"student.{suffix}.j2").render(context)
            with private_file(out / "students" / f"{item.page}.{suffix}") as handle:
                handle.write(text)
    per_property, per_class, top = summary_figures(graded, config)
    totals = [g.total[0] for g in graded]
    figures = plot(out, graded, per_property, per_class, config, labels)
    context = {
        "cohort": run.cohort, "run": run, "labels": labels, "language": config.language, "graded": graded,
        "max_score": config.max_score, "mean": statistics.fmean(totals), "median": statistics.median(totals),
        "per_class": per_class, "per_property": per_property, "top": top, "figures": figures,
        "scored_with": grading_yml_hash(config),
    }
    text = env.get_template("summary.html.j2").render(context)
    with private_file(out / "index.html") as handle:
        handle.write(text)
    return run, graded


def cmd_report(args):
    config = grading_config.load(args.config, args.lang)
    store = Store(args.db)
    try:
        run, graded = write_reports(store, args.cohort, args.out, config, args.run_id)
    except (StoreError, ReportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(f"run {run.id} of {run.cohort}: {len(graded)} submissions rescored with {args.config}; reports in {args.out}")
    return 0


def register(commands):
    from ..cli import _add_config_options
    from .batch import add_store_option

    report = commands.add_parser("report", help="regenerate a cohort's gradebook, feedback pages and summary")
    report.add_argument("--cohort", required=True)
    report.add_argument("--out", required=True, help="folder for the reports")
    report.add_argument("--run", type=int, dest="run_id", help="run id (default: the cohort's latest)")
    add_store_option(report)
    _add_config_options(report)
    report.set_defaults(run=cmd_report)
