"""The cohort store: a SQLite file of raw outcomes, per submission and per run.

It keeps what each property did (status, message code and parameters, failing example,
duration, what the submission printed), never only points, so that reports can rescore a whole
cohort with an edited grading.yml without running anything again.

  cohorts      one row per cohort name
  submissions  one per (cohort, key): a student's folder or file, or a Gradescope submission
  submitters   who handed a submission in (name, email, sid); several for a group
  runs         one per `batch` invocation: grader version, grading.yml hash and text, source
  gradings     one per submission actually graded: content hash, versions, time, peak memory
  outcomes     one per (grading, property), in grading.yml's order, with the diagnosis of a failure
               on values (the catalog misconception that explains it, properties/diagnosis.py), if any
  run_results  which grading stands for each submission in each run (new, or reused unchanged)
  failures     submissions a run could not grade (grader failure): nothing else is stored for them

Each submission's grading, outcomes and run_results row are written in one transaction, so a
batch killed at any moment leaves only whole submissions behind. The next batch resumes the
cohort's latest run if it is unfinished and was started with the same grader, grading.yml,
--regrade flag, source folder and --only keys (its scope); otherwise it starts a new run and the
unfinished one stays as it was (never resumed later: only the latest run can be). Resuming
replaces the result of a submission whose content changed since it was recorded in that run.

Two views are read back: a run's own results (results), and the cohort view (cohort_results):
each submission's result in the latest run that has one, whether that run finished or not (each
result is a whole grading). A run that grades a few students (a late submission, `--only`)
changes only their rows of the cohort view.

Every text written here (names, outcomes, cohort and source names) goes through text.clean, so
no lone surrogate or control character can fail an insert; keys must come clean (batch makes
them clean, composed (NFC) and distinct). The file and its -wal and -shm are made 0600 on every open: they hold
every student's feedback, and stores written by earlier versions were left world-readable.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import sqlite3
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..errors import UsageError
from ..outcomes import Outcome
from ..text import clean, clean_tree, composed

DEFAULT_PATH = Path("autograder-cohorts.sqlite")

SCHEMA = """
CREATE TABLE IF NOT EXISTS cohorts (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY, cohort_id INTEGER NOT NULL REFERENCES cohorts(id), key TEXT NOT NULL,
    UNIQUE (cohort_id, key));
CREATE TABLE IF NOT EXISTS submitters (
    submission_id INTEGER NOT NULL REFERENCES submissions(id), position INTEGER NOT NULL,
    name TEXT NOT NULL, email TEXT NOT NULL, sid TEXT NOT NULL, PRIMARY KEY (submission_id, position));
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, cohort_id INTEGER NOT NULL REFERENCES cohorts(id), started_at TEXT NOT NULL,
    finished_at TEXT, grader_version TEXT NOT NULL, suite_hash TEXT NOT NULL, grading_yml TEXT NOT NULL,
    source TEXT NOT NULL, regrade INTEGER NOT NULL, scope TEXT, expected INTEGER);
CREATE TABLE IF NOT EXISTS gradings (
    id INTEGER PRIMARY KEY, submission_id INTEGER NOT NULL REFERENCES submissions(id),
    run_id INTEGER NOT NULL REFERENCES runs(id), content_hash TEXT NOT NULL, grader_version TEXT NOT NULL,
    suite_hash TEXT NOT NULL, seconds REAL NOT NULL, peak_rss_mib REAL NOT NULL, graded_at TEXT NOT NULL,
    graded_file TEXT);
CREATE INDEX IF NOT EXISTS gradings_by_content
    ON gradings (submission_id, content_hash, grader_version, suite_hash);
CREATE TABLE IF NOT EXISTS outcomes (
    grading_id INTEGER NOT NULL REFERENCES gradings(id), position INTEGER NOT NULL,
    cls TEXT NOT NULL, prop TEXT NOT NULL, status TEXT NOT NULL, code TEXT, params TEXT NOT NULL,
    example TEXT NOT NULL, duration REAL NOT NULL, output TEXT NOT NULL, diagnosis TEXT,
    PRIMARY KEY (grading_id, position));
CREATE TABLE IF NOT EXISTS run_results (
    run_id INTEGER NOT NULL REFERENCES runs(id), submission_id INTEGER NOT NULL REFERENCES submissions(id),
    grading_id INTEGER NOT NULL REFERENCES gradings(id), reused INTEGER NOT NULL,
    PRIMARY KEY (run_id, submission_id));
CREATE TABLE IF NOT EXISTS failures (
    run_id INTEGER NOT NULL REFERENCES runs(id), submission_id INTEGER NOT NULL REFERENCES submissions(id),
    message TEXT NOT NULL, failed_at TEXT NOT NULL, PRIMARY KEY (run_id, submission_id));
"""
# Columns that stores written before they existed lack: added when such a store is opened.
ADDED_COLUMNS = {"runs": (("scope", "TEXT"), ("expected", "INTEGER")), "outcomes": (("diagnosis", "TEXT"),),
                 "gradings": (("graded_file", "TEXT"),)}


class StoreError(UsageError):
    """The store lacks what was asked for (an unknown cohort or run), or --db names no store: a
    file that is not one, a folder, a place that cannot be written."""


@dataclass(frozen=True)
class Submitter:
    name: str = ""
    email: str = ""
    sid: str = ""


@dataclass(frozen=True)
class Run:
    id: int
    cohort: str
    started_at: str
    finished_at: str | None
    grader_version: str
    suite_hash: str
    source: str
    regrade: bool
    scope: tuple | None = None  # the --only keys it was begun with; None: the whole folder
    expected: int | None = None  # how many submissions its folder held (or its --only keys)

    @property
    def finished(self):
        return self.finished_at is not None


@dataclass
class StoredResult:
    """A submission's result in one run: who handed it in, and the raw outcomes it got."""

    key: str
    submitters: list
    outcomes: list
    content_hash: str
    grading_id: int
    reused: bool
    seconds: float = 0.0
    peak_rss_mib: float = 0.0
    run_id: int | None = None  # the run this result was read from
    graded_file: str | None = None  # the file graded, when the submission held others


@dataclass(frozen=True)
class Failure:
    """A submission that a run could not grade (the grader failed), and why."""

    key: str
    submitters: list
    message: str
    run_id: int


# Gradescope's name of an exported submission's folder (and so its key).
SUBMISSION_KEY = re.compile(r"submission_[0-9]+")


def replaced_by_later_exports(results, replaced=None):
    """`results` without what a student's later Gradescope submission replaced. Gradescope names
    every submission anew (submission_N, N growing with time), so a resubmission in a re-downloaded
    export is another key, and the earlier one stayed in every file beside it with its older score.
    A student (by email, else SID) counts only in their submission of the largest N, whatever the
    order the exports were batched in: a submission whose every student has a later one is left
    out, and a group member who resubmitted alone leaves the group's submission to the others.
    `replaced`, if given, gets each result left out, or the students taken from it."""
    def identity(submitter):
        return ("email", submitter.email.casefold()) if submitter.email else ("sid", submitter.sid)

    def number(result):
        return int(result.key.split("_")[1]) if SUBMISSION_KEY.fullmatch(result.key) else None

    latest = {}
    for result in results:
        if number(result) is not None:
            for submitter in result.submitters:
                if submitter.email or submitter.sid:
                    latest[identity(submitter)] = max(latest.get(identity(submitter), -1), number(result))
    kept = []
    for result in results:
        gone = [s for s in result.submitters if number(result) is not None and (s.email or s.sid)
                and latest[identity(s)] > number(result)]
        if gone and replaced is not None:
            replaced.append(dataclasses.replace(result, submitters=gone))
        if not gone:
            kept.append(result)
        elif len(gone) < len(result.submitters):
            kept.append(dataclasses.replace(result, submitters=[s for s in result.submitters if s not in gone]))
    return kept


def cohort_name(text):
    """--cohort as argparse reads it: one line of text, not blank, without ':' (diff reads
    COHORT:RUN). A name with a newline or a tab ended up in the store as typed, and `""` was a cohort."""
    if not text.strip() or text != text.strip() or clean(text) != text or any(c in text for c in "\n\r\t:"):
        raise argparse.ArgumentTypeError(f"{text!r} cannot name a cohort: give one line of text, without ':' or spaces at its ends "
                                         "(diff reads COHORT:RUN), e.g. 2026-1")
    return text


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _make_private(path):
    """Give an existing file mode 0600 (SQLite creates -wal and -shm with the database's mode)."""
    try:
        if stat.S_IMODE(path.stat().st_mode) != 0o600:
            path.chmod(0o600)
    except FileNotFoundError:
        pass


def _writable(path):
    """Whether this process may write the store and, for SQLite's -wal and -shm, its folder: else
    (a co-TA's read-only access, a read-only mount) `report` and `diff` read a private copy."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


# The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"


class Store:
    def __init__(self, path=DEFAULT_PATH, create=True):
        """The store at `path`; create=False (report, diff: they read one) refuses to make a new,
        empty one where --db has a typo."""
        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreError(f"no store at {self.path}: grade a cohort into it with `batch` first, or give --db")
        self._copy = None  # a folder of our own holding a copy of a store this process may only read
        try:
            self._open(self._private_copy() if not create and not _writable(self.path) else self.path)
        except BaseException:
            self._drop_copy()
            raise

    def _private_copy(self):
        """A copy of the store (and of its -wal: what a batch committed but did not yet write into
        the file) in a folder of our own, where SQLite can keep its -shm and upgrade an older store."""
        self._copy = Path(tempfile.mkdtemp(prefix="autograder-store-"))
        copy = self._copy / "store.sqlite"
        try:
            for suffix in ("", "-wal"):
                if Path(f"{self.path}{suffix}").exists():
                    shutil.copyfile(f"{self.path}{suffix}", f"{copy}{suffix}")
        except OSError as exc:
            raise StoreError(f"cannot read the store {self.path}: {exc.strerror}") from None
        return copy

    def _drop_copy(self):
        if self._copy is not None:
            shutil.rmtree(self._copy, ignore_errors=True)

    def _open(self, opened):
        try:  # SQLite takes an empty file as a new store; any other file is someone else's
            descriptor = os.open(opened, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                header = os.read(descriptor, len(SQLITE_HEADER))
            finally:
                os.close(descriptor)
        except OSError as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc.strerror}") from None
        if header and header != SQLITE_HEADER:
            raise StoreError(f"{self.path} is not a store (a SQLite file): give --db a store made by `batch`")
        for file in (opened, Path(f"{opened}-wal"), Path(f"{opened}-shm")):
            _make_private(file)
        self.db = sqlite3.connect(opened, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # a killed process loses nothing committed
        self.db.execute("PRAGMA foreign_keys=ON")
        with self.db:
            self.db.executescript(SCHEMA)
            for table, columns in ADDED_COLUMNS.items():
                have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
                for name, kind in columns:
                    if name not in have:
                        self.db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
            self._compose_keys()

    def _compose_keys(self):
        """Rewrite in composed form (NFC) the keys that earlier versions stored as the file system
        spelled them, so that `josé.py` from a Mac and from Linux stay one student. A key whose
        composed form the cohort already holds (both were stored before) is left as it is."""
        rows = self.db.execute("SELECT id, cohort_id, key FROM submissions").fetchall()
        taken = {(cohort_id, key) for _, cohort_id, key in rows}
        for submission_id, cohort_id, key in rows:
            new = composed(key)
            if new != key and (cohort_id, new) not in taken:
                self.db.execute("UPDATE submissions SET key = ? WHERE id = ?", (new, submission_id))
                taken.add((cohort_id, new))

    def close(self):
        self.db.close()
        self._drop_copy()

    # ---- the one batch writing ----------------------------------------------------------------
    @contextlib.contextmanager
    def batch_lock(self):
        """Held by the one batch grading into this store, as `<store>-batch`: a second one (the same
        command run again while the first still grades, as the report's "unfinished run" warning
        invites) would grade the same submissions and then fail on the first one's results. A
        StoreError names the holder. The lock is the kernel's (flock): a batch killed with -9 holds
        none. The file says who holds it (pid, cohort, run), for reports."""
        path = Path(f"{self.path.resolve()}-batch")  # one lock whatever path (a symlink) reaches the store
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot lock the store {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(descriptor, 200).decode("utf-8", "replace").split("\t")[0]
            os.close(descriptor)
            raise StoreError(f"another batch (pid {holder or '?'}) is grading into {self.path} now: let it finish, "
                             "or stop it, then run this command again") from None

        def holding(run):
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\t{run.cohort}\t{run.id}".encode("utf-8", "replace"), 0)

        try:
            holding(Run(0, "", "", None, "", "", "", False))
            yield holding
        finally:
            os.close(descriptor)

    def grading_now(self):
        """(cohort, run id) of the run a batch is grading into this store now, or None."""
        try:
            descriptor = os.open(f"{self.path.resolve()}-batch", os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None
        except BlockingIOError:
            fields = os.read(descriptor, 4096).decode("utf-8", "replace").split("\t")
            return (fields[1], int(fields[2])) if len(fields) == 3 and fields[2].isdigit() else ("", 0)
        finally:
            os.close(descriptor)

    # ---- cohorts and runs ---------------------------------------------------------------------
    def cohort_id(self, name, create=False):
        """The cohort's id; create=True makes a new one, unless its name differs from an existing
        cohort's only in case (`C1` beside `c1`: a late folder would land in a cohort of its own)."""
        name = clean(name)
        row = self.db.execute("SELECT id FROM cohorts WHERE name = ?", (name,)).fetchone()
        if row:
            return row[0]
        names = [row[0] for row in self.db.execute("SELECT name FROM cohorts ORDER BY name")]
        alike = [other for other in names if other.casefold() == name.casefold()]
        if create and alike:
            raise StoreError(f"the store has cohort {alike[0]!r}, which differs from {name!r} only in case: "
                             f"give --cohort {alike[0]!r} to add to it, or a name no cohort has in any case")
        if not create:
            there = (f"its cohorts: {', '.join(map(repr, names[:20]))}" if names else
                     "it holds none (a store copied without its -wal file, after a batch was killed, "
                     "lacks what that batch wrote: copy both)")
            raise StoreError(f"no cohort named {name!r} in {self.path}; {there}")
        with self.db:
            return self.db.execute("INSERT INTO cohorts (name, created_at) VALUES (?, ?)", (name, _now())).lastrowid

    def begin_run(self, cohort, grader_version, suite_hash, grading_yml, source, regrade, scope=None):
        """(run, resumed): the cohort's latest run if it is unfinished and was begun with the same grader,
        suite, regrade flag, source and scope (the --only keys, None for all), else a new one. An older
        unfinished run is never resumed, and neither is one of another folder: a folder holding one late
        submission must not finish (and so close) a run that the rest of the cohort left unfinished."""
        cohort_id = self.cohort_id(cohort, create=True)
        scope_text = None if scope is None else json.dumps(sorted(scope), ensure_ascii=False)
        latest = self.db.execute(
            "SELECT id, finished_at, grader_version, suite_hash, regrade, source, scope FROM runs WHERE cohort_id = ?"
            " ORDER BY id DESC LIMIT 1", (cohort_id,)).fetchone()
        if latest and latest[1:] == (None, grader_version, suite_hash, int(regrade), clean(source), scope_text):
            return self.run(cohort, latest[0]), True
        with self.db:
            run_id = self.db.execute(
                "INSERT INTO runs (cohort_id, started_at, grader_version, suite_hash, grading_yml, source, regrade,"
                " scope) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (cohort_id, _now(), grader_version, suite_hash, grading_yml, clean(source), int(regrade),
                 scope_text)).lastrowid
        return self.run(cohort, run_id), False

    def set_expected(self, run_id, count):
        """Record how many submissions the run's folder (or its --only keys) holds, for reports' warnings."""
        with self.db:
            self.db.execute("UPDATE runs SET expected = ? WHERE id = ?", (count, run_id))

    def finish_run(self, run_id):
        with self.db:
            self.db.execute("UPDATE runs SET finished_at = ? WHERE id = ?", (_now(), run_id))

    def runs(self, cohort):
        rows = self.db.execute(
            "SELECT id, started_at, finished_at, grader_version, suite_hash, source, regrade, scope, expected"
            " FROM runs WHERE cohort_id = ? ORDER BY id", (self.cohort_id(cohort),)).fetchall()
        return [Run(r[0], clean(cohort), *r[1:6], bool(r[6]), None if r[7] is None else tuple(json.loads(r[7])), r[8])
                for r in rows]

    def run(self, cohort, run_id=None):
        """A run of the cohort: the given one, or the latest."""
        runs = self.runs(cohort)
        if not runs:
            raise StoreError(f"cohort {cohort!r} has no runs yet")
        if run_id is None:
            return runs[-1]
        for run in runs:
            if run.id == run_id:
                return run
        raise StoreError(f"cohort {cohort!r} has no run {run_id}; its runs: {[r.id for r in runs]}")

    # ---- recording -----------------------------------------------------------------------------
    def done(self, run_id):
        """{key: content hash} of the submissions that already have a result in this run."""
        return dict(self.db.execute(
            "SELECT s.key, g.content_hash FROM run_results r JOIN submissions s ON s.id = r.submission_id"
            " JOIN gradings g ON g.id = r.grading_id WHERE r.run_id = ?", (run_id,)))

    def reusable(self, cohort, key, content_hash, grader_version, suite_hash):
        """The latest grading of this very content under the same grader and suite, if any."""
        row = self.db.execute(
            "SELECT g.id FROM gradings g JOIN submissions s ON s.id = g.submission_id"
            " WHERE s.cohort_id = ? AND s.key = ? AND g.content_hash = ? AND g.grader_version = ? AND g.suite_hash = ?"
            " ORDER BY g.id DESC LIMIT 1",
            (self.cohort_id(cohort), key, content_hash, grader_version, suite_hash)).fetchone()
        return row[0] if row else None

    def keys(self, cohort):
        """Every key the cohort has a submission under."""
        return {row[0] for row in self.db.execute(
            "SELECT key FROM submissions WHERE cohort_id = ?", (self.cohort_id(cohort, create=True),))}

    def shown(self, cohort, key):
        """(run id, content hash, run's source) of the key's result in the cohort view, or None."""
        return self.db.execute(
            "SELECT r.run_id, g.content_hash, runs.source FROM run_results r"
            " JOIN submissions s ON s.id = r.submission_id JOIN gradings g ON g.id = r.grading_id"
            " JOIN runs ON runs.id = r.run_id WHERE s.cohort_id = ? AND s.key = ? ORDER BY r.run_id DESC LIMIT 1",
            (self.cohort_id(cohort, create=True), key)).fetchone()

    def _submission(self, run, key, submitters):
        """Insert or find the submission and refresh its submitters (inside the caller's transaction)."""
        cohort_id = self.cohort_id(run.cohort)
        self.db.execute("INSERT OR IGNORE INTO submissions (cohort_id, key) VALUES (?, ?)", (cohort_id, key))
        submission_id = self.db.execute(
            "SELECT id FROM submissions WHERE cohort_id = ? AND key = ?", (cohort_id, key)).fetchone()[0]
        self.db.execute("DELETE FROM submitters WHERE submission_id = ?", (submission_id,))
        self.db.executemany(
            "INSERT INTO submitters (submission_id, position, name, email, sid) VALUES (?, ?, ?, ?, ?)",
            [(submission_id, i, clean(s.name), clean(s.email), clean(s.sid)) for i, s in enumerate(submitters)])
        return submission_id

    def _result(self, run, submission_id, grading_id, reused, replace):
        """Link a grading to the submission in this run; `replace` swaps the run's earlier result for it
        (resuming after the content changed), otherwise a second result in one run is an IntegrityError."""
        self.db.execute(
            f"INSERT {'OR REPLACE ' if replace else ''}INTO run_results (run_id, submission_id, grading_id, reused)"
            " VALUES (?, ?, ?, ?)", (run.id, submission_id, grading_id, int(reused)))

    def record_grading(self, run, key, submitters, content_hash, outcomes, seconds=0.0, peak_rss_mib=0.0,
                       replace=False, graded_file=None):
        """Store a new grading of one submission, all of it or nothing (one transaction). graded_file:
        the file graded, when the submission (a folder, a zip) held others."""
        with self.db:
            submission_id = self._submission(run, key, submitters)
            grading_id = self.db.execute(
                "INSERT INTO gradings (submission_id, run_id, content_hash, grader_version, suite_hash, seconds,"
                " peak_rss_mib, graded_at, graded_file) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (submission_id, run.id, content_hash, run.grader_version, run.suite_hash, seconds, peak_rss_mib,
                 _now(), graded_file and clean(graded_file))).lastrowid
            self.db.executemany(
                "INSERT INTO outcomes (grading_id, position, cls, prop, status, code, params, example, duration, output,"
                " diagnosis) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(grading_id, i, clean(o.cls), clean(o.prop), clean(o.status), o.code and clean(o.code),
                  json.dumps(clean_tree(o.params), ensure_ascii=False),
                  json.dumps(clean_tree(o.example), ensure_ascii=False), o.duration, clean(o.output),
                  o.diagnosis and clean(o.diagnosis))
                 for i, o in enumerate(outcomes)])
            self._result(run, submission_id, grading_id, False, replace)
            self._clear_failure(run, submission_id)
        return grading_id

    def record_reuse(self, run, key, submitters, grading_id, replace=False):
        """Let an earlier grading of unchanged content stand for this submission in this run."""
        with self.db:
            submission_id = self._submission(run, key, submitters)
            self._result(run, submission_id, grading_id, True, replace)
            self._clear_failure(run, submission_id)

    def record_failure(self, run, key, submitters, message):
        """Note that this run could not grade the submission (the grader failed); a later success in
        the same run (resuming) clears the note. Any result the run held for it stays."""
        with self.db:
            submission_id = self._submission(run, key, submitters)
            self.db.execute(
                "INSERT OR REPLACE INTO failures (run_id, submission_id, message, failed_at) VALUES (?, ?, ?, ?)",
                (run.id, submission_id, clean(message), _now()))

    def _clear_failure(self, run, submission_id):
        self.db.execute("DELETE FROM failures WHERE run_id = ? AND submission_id = ?", (run.id, submission_id))

    # ---- reading ---------------------------------------------------------------------------------
    _RESULT_COLUMNS = "s.id, s.key, g.id, g.content_hash, g.seconds, g.peak_rss_mib, r.reused, r.run_id, g.graded_file"

    def results(self, run):
        """Every submission's StoredResult in a run, sorted by key, outcomes rebuilt as Outcome."""
        return self._results(self.db.execute(
            f"SELECT {self._RESULT_COLUMNS} FROM run_results r"
            " JOIN submissions s ON s.id = r.submission_id JOIN gradings g ON g.id = r.grading_id"
            " WHERE r.run_id = ? ORDER BY s.key", (run.id,)).fetchall())

    def cohort_results(self, cohort, up_to=None, replaced=None):
        """The cohort view: each submission's StoredResult from the latest run that has one (finished or
        not: each result is a whole grading), sorted by key; `up_to` leaves out runs after that id. A
        StoredResult's run_id says which run it comes from. A Gradescope submission that a later
        export replaced is left out (replaced_by_later_exports), and added to `replaced` if given."""
        limit = up_to if up_to is not None else -1
        return replaced_by_later_exports(self._cohort_results(cohort, limit), replaced)

    def _cohort_results(self, cohort, limit):
        return self._results(self.db.execute(
            f"SELECT {self._RESULT_COLUMNS} FROM run_results r"
            " JOIN submissions s ON s.id = r.submission_id JOIN gradings g ON g.id = r.grading_id"
            " WHERE s.cohort_id = ? AND r.run_id = (SELECT MAX(l.run_id) FROM run_results l"
            "   WHERE l.submission_id = s.id AND (? < 0 OR l.run_id <= ?))"
            " ORDER BY s.key", (self.cohort_id(cohort), limit, limit)).fetchall())

    def _submitters(self, submission_id):
        return [Submitter(*s) for s in self.db.execute(
            "SELECT name, email, sid FROM submitters WHERE submission_id = ? ORDER BY position", (submission_id,))]

    def _results(self, rows):
        results = []
        for submission_id, key, grading_id, content_hash, seconds, peak, reused, run_id, graded_file in rows:
            outcomes = [
                Outcome(cls, prop, status, code, json.loads(params), json.loads(example), duration, output, diagnosis)
                for cls, prop, status, code, params, example, duration, output, diagnosis in self.db.execute(
                    "SELECT cls, prop, status, code, params, example, duration, output, diagnosis FROM outcomes"
                    " WHERE grading_id = ? ORDER BY position", (grading_id,))
            ]
            results.append(StoredResult(key, self._submitters(submission_id), outcomes, content_hash, grading_id,
                                        bool(reused), seconds, peak, run_id, graded_file))
        return results

    def failures(self, cohort, run_id=None):
        """Failure notes of one run, or of every run of the cohort, oldest run first."""
        rows = self.db.execute(
            "SELECT s.id, s.key, f.message, f.run_id FROM failures f JOIN submissions s ON s.id = f.submission_id"
            " JOIN runs ON runs.id = f.run_id WHERE runs.cohort_id = ? AND (? IS NULL OR f.run_id = ?)"
            " ORDER BY f.run_id, s.key", (self.cohort_id(cohort), run_id, run_id)).fetchall()
        return [Failure(key, self._submitters(sid), message, run) for sid, key, message, run in rows]

    def result_counts(self, cohort):
        """{run id: how many results it holds} for every run of the cohort."""
        return dict(self.db.execute(
            "SELECT runs.id, COUNT(r.submission_id) FROM runs LEFT JOIN run_results r ON r.run_id = runs.id"
            " WHERE runs.cohort_id = ? GROUP BY runs.id", (self.cohort_id(cohort),)))

    def count(self, table):
        """Rows in one of the store's tables (for summaries and checks)."""
        if table not in ("cohorts", "submissions", "submitters", "runs", "gradings", "outcomes", "run_results",
                         "failures"):
            raise ValueError(f"unknown table {table!r}")
        return self.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
