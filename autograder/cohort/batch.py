"""python -m autograder batch SUBMISSIONS --cohort NAME: grade a whole cohort into the store.

SUBMISSIONS is a folder with one submission per student (a folder, .py, .zip or .ipynb), or a
Gradescope "Export Submissions" archive (.zip or unpacked) whose submission_metadata.yml names
the students. The batch process only reads files (to hash them); grading happens in the
executor's slots. A submission whose content, grader version and grading.yml are unchanged
since it was last graded keeps that grading (unless --regrade). Each submission is stored in
one transaction as soon as it is graded.

Resuming: a batch interrupted (Ctrl-C, kill -9, a grader failure) leaves its run unfinished, and
the same command run again resumes it: a submission already in that run counts as done only if
its content hash is still the stored one; a changed one is graded (or its matching earlier
grading reused) again and replaces its result in the run. So nothing is lost or duplicated, and
the finished run holds every submission's present content. Only the cohort's latest run is
resumed, and only by a batch with the same --regrade flag (and grader and grading.yml):
`batch --regrade` after an interrupted plain batch starts a new run that grades everything, and
a plain batch after an interrupted --regrade one starts a new run that keeps unchanged gradings;
the interrupted run is left unfinished. A batch of another folder (late submissions) or with other
--only keys never resumes it either: it starts its own run, and reports warn about the open one.

Late submissions, re-uploads and regrades: reports show the cohort view (store.cohort_results),
each student's result from the latest run that graded them. So a folder holding only the late or
re-uploaded submissions, batched into the same cohort, adds or replaces just those students, and
`--only KEY` (repeatable) grades only those entries of the folder, the rest staying as they are.
`--only` follows the same rules as a whole batch: an unchanged submission keeps its grading
unless --regrade is given too.

Keys: a submission's key is its file or folder name (or Gradescope's folder name), made valid
text on one line by text.clean_line; a key that it changes gets a suffix from the sha256 of the raw name,
so that keys stay distinct and stable across runs while the grading reads the original path.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import shlex
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from ..errors import UsageError
from .. import config as grading_config
from .. import feedback, submission
from ..grade import close_to_workers, suite_version
from ..package import lock
from ..outcomes import Outcome
from ..text import clean, clean_line, composed
from . import gradescope_export
from .executor import DEFAULT_RECYCLE, RECYCLE_GROWTH_MIB, DaskExecutor, GraderFailure, LocalExecutor, Task
from .report import ReportFolder
from .roster import SUFFIXES, stem
from .store import DEFAULT_PATH, Store, Submitter, cohort_name



class BatchError(UsageError):
    """The submissions folder cannot be read as a cohort."""


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    submitters: tuple


@dataclass
class Summary:
    run_id: int = 0
    resumed: bool = False
    already_done: int = 0
    graded: int = 0
    reused: int = 0
    failures: list = field(default_factory=list)  # (key, message): grading could not happen; retried on resume
    grader_errors: list = field(default_factory=list)  # (key, message): graded, but a check failed inside the grader
    seconds: float = 0.0
    interrupted: bool = False
    unreadable_entries: list = field(default_factory=list)  # (key, name, first outcome) of every unreadable one
    notes: list = field(default_factory=list)  # (name, reason[, other key]): passed over, not as an export should be, renamed
    superseded: list = field(default_factory=list)  # (key, run, source): other content from another folder was shown


def folder_entries(folder, notes=None):
    """One entry per student: each folder, .py, .zip or .ipynb directly inside `folder`. `notes`,
    if given, gets (name, reason) of the other files ("not_a_submission": a notes.txt; a Windows
    `ana.py.txt`), of folders that are no student's ("not_a_student_folder": Python's cache, a
    report written there) and of entries that hold a Gradescope export ("holds_export": the parent folder of
    an unpacked export and its zip, given instead of the export)."""
    entries, notes = [], [] if notes is None else notes
    for path in sorted(Path(folder).iterdir()):
        if path.name.startswith((".", "__MACOSX")):
            continue
        if not (path.is_dir() or path.suffix.lower() in SUFFIXES):
            hidden = any(path.name.lower().endswith(f"{suffix}.txt") for suffix in SUFFIXES)  # Windows hides .txt
            notes.append((clean_line(path.name), "hidden_extension" if hidden else "not_a_submission"))
            continue
        if path.is_dir() and (path.name == "__pycache__" or (path / ReportFolder.MANIFEST).is_file()):
            notes.append((clean_line(path.name), "not_a_student_folder"))  # Python's cache, a report written here
            continue
        if gradescope_export.holds_export(path):
            notes.append((clean_line(path.name), "holds_export"))
        entries.append(Entry(path.name, path, (Submitter(name=clean_line(path.stem)),)))
    return entries


def clean_keys(found):
    """The entries with keys that are valid text, composed and pairwise distinct; paths stay as they were.

    A key is written in Unicode's composed form (NFC): macOS names a file `josé.py` with a
    decomposed é, Linux and Windows with a composed one, so a late folder copied from another
    machine must name the same student. A key that clean_line() changes (a lone surrogate, a
    control character, a newline or a tab in a file name), or whose composed form another entry of
    the folder already has, becomes its cleaned text plus `~` and 8 hex digits of the sha256 of the
    raw name, the same in every run. Only a name crafted to equal such a suffixed key makes it take
    a counter as well."""
    taken = {e.key for e in found if clean_line(e.key) == e.key and composed(e.key) == e.key}
    cleaned = []
    for entry in found:
        key = entry.key
        if clean_line(key) == key and composed(key) not in taken:
            key = composed(key)
            taken.add(key)
        elif clean_line(key) != key or composed(key) != key:
            digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]
            key = base = f"{composed(clean_line(key))}~{digest}"
            count = 1
            while key in taken:
                count += 1
                key = f"{base}-{count}"
            taken.add(key)
        cleaned.append(dataclasses.replace(entry, key=key))
    return cleaned


@contextlib.contextmanager
def entries(path, notes=None):
    """The cohort's entries, from a Gradescope export (zip or folder) or a plain folder; `notes`, if
    given, gets (name, reason) of what was passed over or looks wrong (folder_entries,
    gradescope_export.read)."""
    path = Path(path)
    if path.is_dir() and gradescope_export.find_metadata(path) is None:
        renamed = gradescope_export.renamed_export(path)
        if renamed is not None:
            raise BatchError(f"{path} holds only {renamed.name}/, which looks like a Gradescope export under another "
                             f"name ({gradescope_export.METADATA} beside submission_N folders): give that folder "
                             f"to batch, or rename it assignment_N_export")
        yield clean_keys(folder_entries(path, notes))
        return
    if not path.exists():
        raise BatchError(f"{path} does not exist")
    try:
        with gradescope_export.Export(path, notes) as exported:
            yield clean_keys([Entry(e.key, e.path, e.submitters) for e in exported])
    except gradescope_export.ExportError as exc:
        raise BatchError(f"{exc} (give a folder of submissions, or a Gradescope export)") from None


def _load(entry, config):
    """(content hash, Task or None, outcomes or None, graded file or None): read and hash a submission,
    running nothing. The graded file is named when the submission held others (grade.collect_loaded)."""
    try:
        loaded = submission.load(entry.path)
    except submission.SubmissionUnreadable as exc:
        digest = hashlib.sha256(json.dumps([exc.code, exc.params], sort_keys=True, default=str).encode()).hexdigest()
        outcomes = [Outcome(p.cls, p.name, "error", "load." + exc.code, exc.params) for p in config.properties]
        return "unreadable:" + digest, None, outcomes, None
    graded_file = loaded.filename if loaded.among > 1 else None
    return hashlib.sha256(loaded.source.encode()).hexdigest(), Task(entry.key, loaded.source), None, graded_file


def select(found, only):
    """The entries named by --only: each KEY is an entry's key, or its name without the suffix, as
    written or else in any case, when that names one entry alone. An unknown or ambiguous KEY is a
    BatchError listing what there is."""
    by_key = {e.key: e for e in found}
    by_stem, by_folded = {}, {}
    for entry in found:
        by_stem.setdefault(stem(entry.key), []).append(entry)
        for name in {entry.key.casefold(), stem(entry.key).casefold()}:
            by_folded.setdefault(name, []).append(entry)
    chosen, unknown = {}, []
    for key in map(composed, only):
        matches = ([by_key[key]] if key in by_key else by_stem.get(key) or by_folded.get(key.casefold(), []))
        if len(matches) == 1:  # as written first, then in any case (`ANA` for ana.py), as a roster matches
            chosen[matches[0].key] = matches[0]
        else:
            unknown.append(key)
    if unknown:
        shown = ", ".join(sorted(by_key)[:20]) + (f" (+{len(by_key) - 20})" if len(by_key) > 20 else "")
        raise BatchError(f"--only {', '.join(unknown)}: no such entry (or several) in this folder; "
                         f"its entries: {shown}")
    return [e for e in found if e.key in chosen]


def _progress(console):
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        console=console,
    )


def run_batch(path, cohort, store, config, executor_factory, regrade=False, console=None, only=None):
    """Grade every entry of `path` (or those named by `only`) that the cohort's current run lacks, or
    holds with other content; returns a Summary."""
    console = console or Console(stderr=True)
    close_to_workers([path])  # as root: no worker may read its classmates' submissions
    version, suite_hash = suite_version(config)
    started = time.monotonic()
    notes = []
    with entries(path, notes) as found, store.batch_lock() as holding:
        if not found:
            raise BatchError(f"no submissions found in {path}")
        if only:
            found = select(found, only)
        scope = [e.key for e in found] if only else None
        run, resumed = store.begin_run(cohort, version, suite_hash, config.source, Path(path).resolve(), regrade,
                                       scope)
        holding(run)
        store.set_expected(run.id, len(found))
        summary = Summary(run_id=run.id, resumed=resumed, notes=notes)
        done = store.done(run.id)
        known = {stem(key).casefold(): key for key in store.keys(cohort)}
        alike = {}  # entries of this folder whose names differ only in extension or case
        for entry in found:
            alike.setdefault(stem(entry.key).casefold(), []).append(entry.key)
        for keys in alike.values():
            if len(keys) > 1:
                summary.notes.append((keys[0], "alike_in_folder", ", ".join(keys[1:])))
        pending = {}
        for entry in found:
            other = known.get(stem(entry.key).casefold())
            if other not in (None, *alike[stem(entry.key).casefold()]):  # luis.py for an earlier luis.zip
                summary.notes.append((entry.key, "renamed_reupload", other))
            content_hash, task, outcomes, graded_file = _load(entry, config)
            if task is None:
                summary.unreadable_entries.append((entry.key, _name(entry), outcomes[0]))
            if done.get(entry.key) == content_hash:
                summary.already_done += 1
                continue
            shown = store.shown(cohort, entry.key)
            if shown and shown[1] != content_hash and shown[2] != run.source:
                summary.superseded.append((entry.key, shown[0], shown[2]))
            replace = entry.key in done  # changed since this run recorded it
            previous = None if regrade else store.reusable(cohort, entry.key, content_hash, version, suite_hash)
            if previous is not None:
                store.record_reuse(run, entry.key, entry.submitters, previous, replace)
                summary.reused += 1
            elif task is None:
                store.record_grading(run, entry.key, entry.submitters, content_hash, outcomes, replace=replace)
            else:
                pending[entry.key] = (entry, content_hash, task, replace, graded_file)
        if pending:
            _grade_pending(pending, run, store, executor_factory, summary, console, config.language)
    summary.seconds = time.monotonic() - started
    if not summary.failures and not summary.interrupted:
        store.finish_run(run.id)
    return summary


def _grade_pending(pending, run, store, executor_factory, summary, console, language):
    """Grade `pending` in the executor's slots and store each result as it comes. A grading that
    ran out of time while other slots were busy is graded again alone, after the others, and that
    grading is stored: a submission that keeps the machine's cores busy (processes of its own, in
    its time budget) must not make a classmate's grading beside it run out of time (a wall-clock
    budget; measured: a correct file at 0/48 beside 58 busy loops, 48/48 alone)."""
    began = time.monotonic()
    cancel, executor = True, None
    try:
        executor = executor_factory()  # its slots start here: a Ctrl-C meanwhile is an interruption too
        with _progress(console) as progress:
            words = feedback.catalog(language)["report"]
            bar = progress.add_task(words["batch_progress" if executor.slots == 1 else "batch_progress_slots"]
                                    .format(slots=executor.slots), total=len(pending), rate="")

            def stored(task, result):
                _store(pending[task.key], task, result, run, store, summary)
                done = summary.graded + len(summary.failures)
                progress.update(bar, advance=1, rate=f"{60 * done / max(time.monotonic() - began, 1e-9):.1f}/min")

            again = []
            for task, result in executor.run([task for _, _, task, _, _ in pending.values()]):
                if executor.slots > 1 and _disturbed(result):
                    again.append(task)
                else:
                    stored(task, result)
            for task in again:  # one at a time: nothing else grades beside it
                for _, result in executor.run([task]):
                    stored(task, result)
        cancel = False
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        if executor is not None:
            executor.close(cancel)


# An end that a busy machine can cause, not the submission alone: out of time (a wall-clock
# budget), or killed from outside (the kernel's out-of-memory killer takes a worker, the largest
# process, when another submission beside it holds memory).
DISTURBED = ("submission.crash", "submission.import_crash")


def _disturbed(result):
    return not isinstance(result, GraderFailure) and any(
        o["status"] == "timeout" or o["code"] in DISTURBED for o in result.outcomes)


def _store(pending_entry, task, result, run, store, summary):
    entry, content_hash, _, replace, graded_file = pending_entry
    if isinstance(result, GraderFailure):
        summary.failures.append((task.key, clean(result)))
        store.record_failure(run, entry.key, entry.submitters, str(result))
        return
    outcomes = [Outcome(**o) for o in result.outcomes]
    store.record_grading(run, entry.key, entry.submitters, content_hash, outcomes, result.seconds,
                         result.peak_rss_mib, replace, graded_file)
    summary.graded += 1
    internal = next((o for o in outcomes if o.code == "grader_error"), None)
    if internal is not None:  # the report marks it a grader failure: so does the summary
        summary.grader_errors.append((task.key, clean(internal.params.get("error", ""))))


def _name(entry):
    return ", ".join(s.name or s.email or s.sid for s in entry.submitters) or entry.key


def report_summary(summary, console, language="en"):
    """The batch's outcome in the report's language; every unreadable submission and grader failure
    named. Keys, names and messages are printed as literal text (they may hold [markup])."""
    words = feedback.catalog(language)["report"]
    resumed = words["batch_resumed"].format(done=summary.already_done) if summary.resumed else ""
    console.print(Text(words["batch_summary"].format(
        run=summary.run_id, resumed=resumed, graded=summary.graded, reused=summary.reused,
        # every unreadable entry of the folder, each listed below (recorded now or by an earlier run)
        unreadable=len(summary.unreadable_entries), failures=len(summary.failures) + len(summary.grader_errors),
        seconds=f"{summary.seconds:.1f}")))
    for key, name, outcome in summary.unreadable_entries:
        reason = feedback.message(outcome, language).splitlines()[0]
        shown = key if name in (key, stem(key)) else f"{key} ({name})"
        console.print(Text.assemble("  ", (words["status_unreadable"], "yellow"), f" {shown}: {reason}"))
    for key, message in [*summary.failures, *summary.grader_errors]:
        console.print(Text.assemble("  ", (words["status_grader_failure"], "red"), f" {key}: {message}"))
    for name, reason, *other in summary.notes:
        console.print(Text("  " + words[f"batch_note_{reason}"].format(
            name=name, metadata=gradescope_export.METADATA, other=other[0] if other else ""), style="yellow"))
    for key, run, source in summary.superseded:
        console.print(Text("  " + words["batch_superseded"].format(  # what a TA pastes into a shell: quoted
            key=key, run=run, source=source, folder=shlex.quote(source), only=shlex.quote(key)), style="yellow"))
    if summary.interrupted:
        console.print(Text(words["batch_interrupted"], style="yellow"))
    elif summary.failures:
        console.print(Text(words["batch_open"]))


@contextlib.contextmanager
def terminated_as_interrupted():
    """SIGTERM (`timeout`, a scheduler or a service stopping the batch) ends it as Ctrl-C does: the
    slots are stopped, the summary says what was stored and that the same command resumes. Without
    this, SIGTERM's default ended the process mid-line, saying nothing."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_batch(args):
    config = grading_config.load(args.config, args.lang)
    lock.note_if_unlike_the_lock()
    console = Console(stderr=True)
    if args.scheduler:
        def factory():
            return DaskExecutor(args.scheduler, config.source)
    else:
        def factory():
            return LocalExecutor(args.jobs, config.source, args.recycle)
    store = Store(args.db)
    try:
        with terminated_as_interrupted():
            summary = run_batch(args.submissions, args.cohort, store, config, factory, args.regrade, console, args.only)
    finally:
        store.close()
    report_summary(summary, console, config.language)
    return 130 if summary.interrupted else 2 if summary.failures or summary.grader_errors else 0


def at_least_one(what):
    """An argparse type for a count (--jobs, --recycle), refused before any run is opened unless a
    whole number of at least 1: `what` says what to give."""
    def count(text):
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: give {what}, at least 1")
        return value
    return count


def add_store_option(parser):
    parser.add_argument("--db", default=str(DEFAULT_PATH), help=f"SQLite store (default: ./{DEFAULT_PATH})")


def register(commands):

    batch = commands.add_parser("batch", help="grade a cohort's submissions into the SQLite store")
    batch.add_argument("submissions", help="folder of submissions, or a Gradescope 'Export Submissions' zip/folder")
    batch.add_argument("--cohort", required=True, type=cohort_name, help="cohort name in the store")
    batch.add_argument("--jobs", type=at_least_one("the number of grading slots"), default=os.cpu_count() or 1,
                       help="parallel slots (default: the cores; a slot and its worker take turns on "
                            "about one core, and more slots cost more CPU per submission)")
    batch.add_argument("--regrade", action="store_true", help="grade again even if nothing changed")
    batch.add_argument("--only", action="append", metavar="KEY",
                       help="grade only this entry (its key: file or folder name, with or without .py/.zip/.ipynb; "
                            "repeatable); the cohort's other students keep their results")
    batch.add_argument("--scheduler", help="Dask scheduler address: grade on that cluster (needs the dask extra)")
    batch.add_argument("--recycle", type=at_least_one("how many submissions a slot grades before it is replaced"),
                       default=DEFAULT_RECYCLE,
                       help="replace a slot process after this many submissions, or sooner once it has "
                            f"grown by {RECYCLE_GROWTH_MIB} MiB (default: %(default)s)")
    add_store_option(batch)
    grading_config.add_options(batch)
    batch.set_defaults(run=cmd_batch)
