"""A TA's cohort workflow (issue 11): the cohort view across runs, late submissions and --only
regrades, the Status column, LMS exports against their documented layouts, the roster join, and
diff and batch summaries in the report's language.

Stores are filled through the Store API with hand-made outcomes, or by batches whose executor
answers at once (Instant), so nothing here grades for real and the whole file takes seconds.
"""
import csv
import io
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
from rich.console import Console

from autograder import config as grading_config
from autograder.cli import main
from autograder.cohort import batch, diff, exports, report, roster
from autograder.cohort.store import Store, StoreError, Submitter
from autograder.grade import suite_version
from autograder.outcomes import Outcome
from cohort_fakes import Instant, outcomes

ROOT = Path(__file__).resolve().parent.parent
CONFIG = grading_config.load()
ENGLISH = grading_config.load(language="en")
STUB = (ROOT / "assignments" / "attention" / "attention.py").read_text(encoding="utf-8")
QUIET = Console(file=io.StringIO())
SCALE = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0, "expected": 0.25, "d_k": 16})
SDPA = Outcome("CausalSelfAttention", "fused_calls_sdpa", "failed", "sdpa_not_called")
BOM = b"\xef\xbb\xbf"


def unreadable():
    return [Outcome(p.cls, p.name, "error", "load.bad_zip", {"error": "File is not a zip file"})
            for p in CONFIG.properties]


def run_batch(folder, store, executor, regrade=False, only=None):
    return batch.run_batch(folder, "c", store, CONFIG, lambda: executor, regrade, QUIET, only)


def write_folder(folder, names, marker=""):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(STUB + f"# {name}{marker}\n", encoding="utf-8")
    return folder


def record(store, results, source="/cohort", finish=True, config=CONFIG):
    version, suite = suite_version(config)
    run, _ = store.begin_run("c", version, suite, config.source, source, False)
    for key, people, graded in results:
        store.record_grading(run, key, people, "hash-" + key, graded)
    if finish:
        store.finish_run(run.id)
    return run


def read_csv(path, encoding="utf-8"):
    with open(path, encoding=encoding, newline="") as handle:
        return list(csv.reader(handle))


def gradebook(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return {row["Submission"] or row["Name"]: row for row in csv.DictReader(handle)}


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    yield store
    store.close()


# ---- the cohort view across runs ----------------------------------------------------------------
def test_an_interrupted_run_is_warned_about_and_its_rerun_completes_the_view(store, tmp_path, capsys):
    folder = write_folder(tmp_path / "cohort", ["a.py", "b.py", "c.py"])
    first = run_batch(folder, store, Instant(stop_after=1))
    assert first.interrupted
    view = report.write_reports(store, "c", tmp_path / "early", CONFIG)
    assert [g.key for g in view.graded] == ["a.py"]
    [warning] = view.warnings
    assert "La corrida 1" in warning and "1 de 3" in warning and "no terminó" in warning
    assert warning.endswith(f"el mismo comando: python -m autograder batch {folder.resolve()} --cohort c --db {store.path}")
    assert warning in (tmp_path / "early" / "index.html").read_text(encoding="utf-8")
    assert main(["report", "--cohort", "c", "--out", str(tmp_path / "cli"), "--db", str(store.path)]) == 0
    assert "no terminó" in capsys.readouterr().err  # on screen too

    again = run_batch(folder, store, Instant())
    assert again.resumed and again.run_id == first.run_id
    view = report.write_reports(store, "c", tmp_path / "done", CONFIG)
    assert [g.key for g in view.graded] == ["a.py", "b.py", "c.py"] and view.warnings == []
    assert "no terminó" not in (tmp_path / "done" / "index.html").read_text(encoding="utf-8")


def test_the_resume_command_of_a_run_under_another_seed_names_its_grading_yml(store, tmp_path):
    """A run begun with `--config seed2.yml` resumes only under that suite: without --config, the
    command the warning printed started a new run instead."""
    seeded = tmp_path / "seed2.yml"
    seeded.write_text(re.sub(r"(?m)^( *)seed: *\d+", r"\1seed: 987654", CONFIG.source, count=1), encoding="utf-8")
    other = grading_config.load(seeded)
    assert suite_version(other) != suite_version(CONFIG)
    folder = write_folder(tmp_path / "cohort", ["a.py", "b.py"])
    assert batch.run_batch(folder, "c", store, other, lambda: Instant(stop_after=1), False, QUIET, None).interrupted

    def unfinished(view):
        [warning] = [w for w in view.warnings if "no terminó" in w]
        return warning

    warning = unfinished(report.build_view(store, "c", other, config_path=seeded))
    command = warning.split("el mismo comando: ")[1]
    assert command.endswith(f" --config {seeded}"), command
    warning = unfinished(report.build_view(store, "c", CONFIG))  # a report read under the default one
    assert warning.endswith("--config <grading.yml of run 1>"), warning
    again = batch.run_batch(folder, "c", store, other, lambda: Instant(), False, QUIET, None)
    assert again.resumed  # what the first command does
    [done] = store.runs("c")
    assert done.finished


def test_a_ctrl_c_while_the_slots_start_is_an_interruption_with_its_summary(store, tmp_path):
    """Ctrl-C in the first seconds, while the slots import torch, printed a bare "interrupted"."""
    def starting():
        raise KeyboardInterrupt
    summary = batch.run_batch(write_folder(tmp_path / "cohort", ["a.py"]), "c", store, CONFIG, starting, False, QUIET)
    assert summary.interrupted and summary.graded == 0 and not store.runs("c")[0].finished


def test_the_summary_counts_the_unreadable_submissions_it_lists(store, tmp_path):
    """A second run said "unreadable: 0", then listed the three the first had recorded."""
    folder = write_folder(tmp_path / "cohort", ["a.py"])
    (folder / "b.py").write_text("")
    (folder / "c.zip").write_bytes(b"not a zip")
    run_batch(folder, store, Instant())
    again = run_batch(folder, store, Instant())
    out = Console(file=io.StringIO(), width=200)
    batch.report_summary(again, out, "en")
    said = out.file.getvalue()
    assert len(again.unreadable_entries) == 2 and "2 unreadable" in said, said


def test_a_sigterm_ends_a_batch_as_ctrl_c_does(store, tmp_path):
    """`timeout` or a service stopping the batch sends SIGTERM: it ended the process silently, with
    no summary and no word of resuming."""
    def terminated():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    before = signal.getsignal(signal.SIGTERM)
    with batch.terminated_as_interrupted():
        summary = batch.run_batch(write_folder(tmp_path / "cohort", ["a.py"]), "c", store, CONFIG, terminated, False,
                                  QUIET)
    assert summary.interrupted and not store.runs("c")[0].finished
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_interrupted_regrade_keeps_everyone_in_the_view_with_the_run_of_each_row(store, tmp_path):
    folder = write_folder(tmp_path / "cohort", ["a.py", "b.py", "c.py"])
    run_batch(folder, store, Instant())
    regrade = run_batch(folder, store, Instant(outcomes(SCALE), stop_after=1), regrade=True)
    assert regrade.interrupted and regrade.run_id == 2
    view = report.write_reports(store, "c", tmp_path / "out", CONFIG)
    rows = gradebook(tmp_path / "out" / "gradebook.csv")
    assert {k: (r["Run"], r["Total Score"]) for k, r in rows.items()} == {
        "a.py": ("2", "46"), "b.py": ("1", "48"), "c.py": ("1", "48")}
    assert any("La corrida 2" in w and "1 de 3" in w for w in view.warnings)
    page = (tmp_path / "out" / "students" / f"{report.page_name('a.py')}.md").read_text(encoding="utf-8")
    assert "Corrida 2" in page
    one_run = report.write_reports(store, "c", tmp_path / "run2", CONFIG, run_id=2)  # --run N: that run alone
    assert [g.key for g in one_run.graded] == ["a.py"] and one_run.run.id == 2


def test_a_late_submission_batched_alone_adds_or_replaces_only_that_student(store, tmp_path):
    folder = write_folder(tmp_path / "cohort", ["a.py", "b.py", "c.py"])
    run_batch(folder, store, Instant())
    late = write_folder(tmp_path / "late", ["d.py"])
    added = run_batch(late, store, Instant(outcomes(SCALE)))
    assert not added.resumed and added.graded == 1
    reupload = write_folder(tmp_path / "reupload", ["b.py"], marker=" v2")
    replaced = run_batch(reupload, store, Instant(outcomes(SDPA)))
    assert replaced.graded == 1 and [r.finished_at is not None for r in store.runs("c")] == [True, True, True]
    report.write_reports(store, "c", tmp_path / "out", CONFIG)
    rows = gradebook(tmp_path / "out" / "gradebook.csv")
    assert {k: (r["Run"], r["Total Score"]) for k, r in rows.items()} == {
        "a.py": ("1", "48"), "b.py": ("3", "47"), "c.py": ("1", "48"), "d.py": ("2", "46")}


def test_a_second_batch_while_one_grades_is_refused_and_the_report_says_in_progress(store, tmp_path, capsys):
    """The same command run again while the first still graded (as "did not finish" invited)
    graded the same submissions, then stopped on an IntegrityError traceback."""
    folder = write_folder(tmp_path / "cohort", ["a.py", "b.py"])
    seen = {}

    class Watching(Instant):
        def run(self, tasks):
            for task, result in super().run(tasks):
                if len(self.tasks) == 2:  # a.py stored, b.py grading: a second batch, and a report
                    other = Store(store.path)
                    with pytest.raises(StoreError, match=r"another batch \(pid \d+\) is grading into"):
                        run_batch(folder, other, Instant())
                    seen["second"] = True
                    seen["warnings"] = report.build_view(other, "c", ENGLISH).warnings
                    other.close()
                yield task, result

    assert run_batch(folder, store, Watching()).graded == 2
    [warning] = seen["warnings"]
    assert warning.startswith(f"Run 1 ({folder.resolve()}, started ") and "is in progress" in warning
    assert "1 of 2 submissions so far" in warning
    assert store.grading_now() is None and report.build_view(store, "c", CONFIG).warnings == []
    assert main(["batch", str(folder), "--cohort", "c", "--db", str(store.path), "--jobs", "1", "--regrade"]) == 0
    for option in ("--jobs", "--recycle"):  # refused before a run is opened, which no command could finish
        with pytest.raises(SystemExit):
            main(["batch", str(folder), "--cohort", "c", "--db", str(store.path), option, "0", "--regrade"])
    assert len(store.runs("c")) == 2 and all(r.finished for r in store.runs("c"))


def test_a_late_folder_never_finishes_the_interrupted_run_of_the_whole_cohort(store, tmp_path):
    folder = write_folder(tmp_path / "cohort", ["a.py", "b.py", "c.py"])
    run_batch(folder, store, Instant(stop_after=1))
    late = run_batch(write_folder(tmp_path / "late", ["d.py"]), store, Instant())
    assert not late.resumed and late.run_id == 2
    assert [r.finished_at is None for r in store.runs("c")] == [True, False]
    view = report.build_view(store, "c", CONFIG)
    assert sorted(g.key for g in view.graded) == ["a.py", "d.py"]
    assert any("La corrida 1" in w for w in view.warnings)
    rest = Instant()
    final = run_batch(folder, store, rest)  # the same command: a new run, a.py kept, b and c graded
    assert rest.keys == ["b.py", "c.py"] and final.reused == 1
    view = report.build_view(store, "c", CONFIG)
    assert sorted(g.key for g in view.graded) == ["a.py", "b.py", "c.py", "d.py"]
    assert view.warnings == []  # run 1 is superseded by run 3, a finished run of the same folder


def test_only_grades_the_named_entries_and_keeps_the_rest(store, tmp_path):
    folder = write_folder(tmp_path / "cohort", ["a.py", "b.py", "c.py"])
    run_batch(folder, store, Instant())
    write_folder(folder, ["a.py", "b.py"], marker=" changed")
    one = Instant(outcomes(SCALE))
    summary = run_batch(folder, store, one, only=["a"])  # the name without .py is enough
    assert one.keys == ["a.py"] and summary.graded == 1
    assert store.runs("c")[-1].scope == ("a.py",) and store.runs("c")[-1].finished_at
    view = report.build_view(store, "c", CONFIG)
    assert {g.key: (g.run_id, g.total[0]) for g in view.graded} == {"a.py": (2, 46), "b.py": (1, 48), "c.py": (1, 48)}

    unchanged = Instant()
    kept = run_batch(folder, store, unchanged, only=["c.py"])
    assert unchanged.keys == [] and kept.reused == 1  # nothing changed: kept, unless --regrade
    forced = Instant(outcomes(SDPA))
    run_batch(folder, store, forced, regrade=True, only=["c.py"])
    assert forced.keys == ["c.py"]
    with pytest.raises(batch.BatchError, match="nobody"):
        run_batch(folder, store, Instant(), only=["nobody"])
    cased = Instant()
    run_batch(folder, store, cased, regrade=True, only=["A", "B.PY"])  # in any case, as a roster matches
    assert cased.keys == ["a.py", "b.py"]


def test_the_summary_names_what_the_folder_held_besides_submissions(store, tmp_path):
    folder = write_folder(tmp_path / "cohort", ["ana.py"])
    (folder / "notas.txt").write_text("x", encoding="utf-8")
    summary = run_batch(folder, store, Instant())
    for language, line in (("es", "notas.txt: no es una entrega (ni carpeta, ni .py, .ipynb o .zip): no se corrigió"),
                           ("en", "notas.txt: not a submission (no folder, .py, .ipynb or .zip): not graded")):
        console = Console(file=io.StringIO(), record=True, width=300)
        batch.report_summary(summary, console, language)
        assert line in console.export_text()


def test_names_alike_in_one_folder_are_said_from_the_first_run_and_never_sent_to_each_other(store, tmp_path):
    """ana.py, Ana.py and ana/ side by side: the first run said nothing, every later one told
    ana.py to take the name Ana.py, which another entry already has."""
    folder = write_folder(tmp_path / "cohort", ["ana.py", "Ana.py", "luis.py"])
    write_folder(folder / "ana", ["attention.py"])
    for _ in range(2):
        summary = run_batch(folder, store, Instant())
        assert [n for n in summary.notes if n[1] == "renamed_reupload"] == []
        [(name, reason, other)] = summary.notes
        assert reason == "alike_in_folder" and sorted([name, *other.split(", ")]) == ["Ana.py", "ana", "ana.py"]
    console = Console(file=io.StringIO(), record=True, width=300)
    batch.report_summary(summary, console, "en")
    assert f"{name}: the folder also holds {other}" in console.export_text()


def test_a_late_re_upload_under_another_extension_or_case_is_named(store, tmp_path):
    """luis.py for an earlier luis.zip, or Luis.py for luis.py, became a second student in silence."""
    run_batch(write_folder(tmp_path / "cohort", ["luis.zip", "ana.py"]), store, Instant())
    late = run_batch(write_folder(tmp_path / "late", ["luis.py", "Ana.py"]), store, Instant())
    assert sorted(late.notes) == [("Ana.py", "renamed_reupload", "ana.py"), ("luis.py", "renamed_reupload", "luis.zip")]
    console = Console(file=io.StringIO(), record=True, width=300)
    batch.report_summary(late, console, "es")
    assert "luis.py: la cohorte ya tiene luis.zip" in console.export_text()


def test_a_cohort_name_that_differs_only_in_case_is_refused_and_a_symlink_shares_the_lock(store, tmp_path):
    """`--cohort C1` beside c1 made a cohort of its own; a store reached through a symlink took a
    second lock, and the second batch ended in an IntegrityError traceback."""
    folder = write_folder(tmp_path / "cohort", ["ana.py"])
    run_batch(folder, store, Instant())
    with pytest.raises(StoreError, match="differs from 'C' only in case"):
        batch.run_batch(folder, "C", store, CONFIG, Instant, False, QUIET)
    link = tmp_path / "link.sqlite"
    link.symlink_to(store.path)
    other = Store(link)
    with store.batch_lock(), pytest.raises(StoreError, match="another batch"):
        with other.batch_lock():
            pass
    other.close()


def test_a_name_spelled_decomposed_on_a_mac_is_the_same_student(store, tmp_path):
    """`jose\u0301.py` (NFD, as macOS writes it) in a late folder became a second student beside
    `jos\u00e9.py` (NFC): two rows, the first one's old grade exported too."""
    run_batch(write_folder(tmp_path / "cohort", ["jos\u00e9.py", "ana.py"]), store, Instant())
    late = write_folder(tmp_path / "late", ["jose\u0301.py"], marker=" v2")
    assert run_batch(late, store, Instant(outcomes(SCALE))).graded == 1
    view = report.build_view(store, "c", CONFIG)
    assert {g.key: (g.run_id, g.total[0]) for g in view.graded} == {"ana.py": (1, 48), "jos\u00e9.py": (2, 46)}
    again = Instant()
    run_batch(late, store, again, regrade=True, only=["jose\u0301"])  # --only typed either way
    assert again.keys == ["jos\u00e9.py"]


def test_two_files_whose_names_differ_only_in_normal_form_stay_two_students(tmp_path):
    """Linux lets one folder hold both spellings: they must not share a key."""
    folder = write_folder(tmp_path / "cohort", ["jos\u00e9.py", "jose\u0301.py"])
    with batch.entries(folder) as found:
        keys = sorted(e.key for e in found)
    assert keys[0] == "jos\u00e9.py" and re.fullmatch(r"jos\u00e9\.py~[0-9a-f]{8}", keys[1]), keys


def test_a_store_with_a_decomposed_key_is_composed_when_opened(tmp_path):
    path = tmp_path / "old.sqlite"
    old = Store(path)
    record(old, [("jose\u0301.py", [Submitter("x")], outcomes()), ("ana.py", [Submitter("a")], outcomes())])
    old.db.execute("UPDATE submissions SET key = 'jose\u0301.py' WHERE key = 'jos\u00e9.py'")  # as stored before
    old.db.commit()
    old.close()
    store = Store(path)
    assert sorted(r.key for r in store.cohort_results("c")) == ["ana.py", "jos\u00e9.py"]
    store.close()


def test_grading_a_first_folder_again_after_a_late_one_says_what_it_replaces(store, tmp_path, capsys):
    """`batch cohort --only ana` after `batch late` put ana's older file back in the view without a word."""
    folder = write_folder(tmp_path / "cohort", ["ana.py", "luis.py"])
    run_batch(folder, store, Instant())
    late = write_folder(tmp_path / "late", ["ana.py"], marker=" late")
    run_batch(late, store, Instant(outcomes(SCALE)))
    summary = run_batch(folder, store, Instant(), only=["ana"])
    assert summary.reused == 1 and summary.superseded == [("ana.py", 2, str(late.resolve()))]
    console = Console(file=io.StringIO(), record=True, width=300)
    batch.report_summary(summary, console, "es")
    assert f"ana.py: la vista de la cohorte mostraba otro contenido, de la corrida 2 ({late.resolve()})" in console.export_text()
    restored = run_batch(late, store, Instant(), only=["ana"])  # what the message says to do
    assert restored.reused == 1 and restored.superseded == [("ana.py", 3, str(folder.resolve()))]
    view = report.build_view(store, "c", CONFIG)
    assert {g.key: g.total[0] for g in view.graded} == {"ana.py": 46, "luis.py": 48}
    write_folder(folder, ["luis.py"], marker=" fixed")  # changed in place in its own folder: no warning
    whole = run_batch(folder, store, Instant())  # the whole first folder again: ana's older file is named
    assert [(key, run) for key, run, _ in whole.superseded] == [("ana.py", 4)]


def test_only_on_the_command_line_and_the_summary_names_unreadable_students(store, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    folder = write_folder(tmp_path / "cohort", ["a.py", "b.py"])
    (folder / "roto.zip").write_bytes(b"not a zip at all")
    executors = []
    monkeypatch.setattr(batch, "LocalExecutor", lambda *args: executors.append(Instant()) or executors[-1])
    db = str(store.path)
    assert main(["batch", str(folder), "--cohort", "c", "--db", db]) == 0
    err = capsys.readouterr().err
    assert "ilegibles: 1" in err and "ilegible roto.zip: El .zip no se pudo abrir" in err
    assert main(["batch", str(folder), "--cohort", "c", "--db", db, "--only", "b.py", "--regrade", "--lang", "en"]) == 0
    err = capsys.readouterr().err
    assert executors[-1].keys == ["b.py"] and "1 graded" in err and "roto.zip" not in err
    assert main(["batch", str(folder), "--cohort", "c", "--db", db, "--only", "zz"]) == 2
    assert "--only zz" in capsys.readouterr().err


def test_the_summary_counts_a_grading_with_an_internal_error_as_the_report_does(store, tmp_path, monkeypatch, capsys):
    """A check that failed inside the grader makes the report say "falla del corrector": the batch's
    summary names it too, and exits 2, instead of "fallas del corrector: 0"."""
    monkeypatch.setenv("COLUMNS", "200")
    folder = write_folder(tmp_path / "cohort", ["a.py"])
    internal = Outcome("SelfAttention", "shapes", "error", "grader_error", {"error": "ValueError: shapes"})
    monkeypatch.setattr(batch, "LocalExecutor", lambda *args: Instant(outcomes(internal)))
    assert main(["batch", str(folder), "--cohort", "c", "--db", str(store.path)]) == 2
    err = capsys.readouterr().err
    assert "fallas del corrector: 1" in err and "falla del corrector a.py: ValueError: shapes" in err


# ---- the Status column -------------------------------------------------------------------------------
def test_the_gradebook_tells_unreadable_and_grader_failures_from_honest_zeros(store, tmp_path):
    grader_error = Outcome("SelfAttention", "shapes", "error", "grader_error", {"error": "KeyError: x"})
    zero = [Outcome(p.cls, p.name, "failed", "not_a_tensor", {"what": "output"}) for p in CONFIG.properties]
    run = record(store, [("ana.py", [Submitter("Ana", "ana@x.edu", "1")], outcomes()),
                         ("bad.zip", [Submitter("bad")], unreadable()),
                         ("cero.py", [Submitter("cero")], zero),
                         ("flaky.py", [Submitter("flaky")], outcomes(grader_error))], finish=False)
    store.record_failure(run, "lost.py", [Submitter("lost")], "GraderFailure: the slot died")
    report.write_reports(store, "c", tmp_path / "es", CONFIG)
    rows = gradebook(tmp_path / "es" / "gradebook.csv")
    assert {k: (r["Status"], r["Total Score"], r["Run"]) for k, r in rows.items()} == {
        "ana.py": ("corregida", "48", "1"), "bad.zip": ("ilegible", "0", "1"), "cero.py": ("corregida", "0", "1"),
        "flaky.py": ("falla del corrector", "47", "1"), "lost.py": ("falla del corrector", "", "1")}
    index = (tmp_path / "es" / "index.html").read_text(encoding="utf-8")
    assert re.search(r"<td>bad</td><td class=\"unreadable\">ilegible</td>", index)
    report.write_reports(store, "c", tmp_path / "en", ENGLISH)
    rows = gradebook(tmp_path / "en" / "gradebook.csv")
    assert [rows[k]["Status"] for k in ("ana.py", "bad.zip", "flaky.py", "lost.py")] == [
        "graded", "unreadable", "grader failure", "grader failure"]


def test_a_grader_failure_after_a_grading_keeps_the_grading_and_is_warned_about(store, tmp_path):
    record(store, [("a.py", [Submitter("a")], outcomes())])
    version, suite = suite_version(CONFIG)
    second, _ = store.begin_run("c", version, suite, CONFIG.source, "/regrade", True)
    store.record_failure(second, "a.py", [Submitter("a")], "boom")
    view = report.build_view(store, "c", ENGLISH)
    assert [(g.key, g.run_id, g.status) for g in view.graded] == [("a.py", 1, "graded")]
    assert any("In run 2 the grader failed on: a.py" in w for w in view.warnings)
    store.record_grading(second, "a.py", [Submitter("a")], "hash-a", outcomes(SCALE))  # resumed: the note goes
    assert store.count("failures") == 0


# ---- exports -----------------------------------------------------------------------------------------
@pytest.fixture
def mixed(store):
    run = record(store, [
        ("ana.py", [Submitter("Ana Pérez", "ana@x.edu", "2024001")], outcomes()),
        ("grupo", [Submitter("Luis", "luis@x.edu", "7"), Submitter("=Eve", "eve@x.edu", "8")], outcomes(SCALE)),
        ("bad.zip", [Submitter("Bad", "bad@x.edu", "9")], unreadable()),
    ], finish=False)
    store.record_failure(run, "lost.py", [Submitter("Lost", "lost@x.edu", "10")], "boom")
    return store


def canvas_header_ok(header):
    """The checks of canvas-lms GradebookImporter#header? and #update_column_count for this layout."""
    return (len(header) > 3 and "Student" in header[0] and "ID" in header[1]
            and re.search(r"SIS\s+User\s+ID", header[2]) and re.search(r"SIS\s+Login\s+ID", header[3])
            and "Section" in header[4])


def test_canvas_export_follows_canvas_gradebook_import_layout(mixed, tmp_path):
    report.write_reports(mixed, "c", tmp_path / "out", CONFIG, formats=("canvas",), assignment="Tarea 2 (123)")
    raw = (tmp_path / "out" / "canvas.csv").read_bytes()
    assert raw.startswith(BOM)
    assert not (tmp_path / "out" / "moodle.csv").exists() and not (tmp_path / "out" / "gradescope.csv").exists()
    rows = read_csv(tmp_path / "out" / "canvas.csv", "utf-8-sig")
    header, points, *students = rows
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Tarea 2 (123)"]
    assert canvas_header_ok(header) and "Student" in raw[:20].decode("utf-8")  # the BOM does not hide it
    assert "Points Possible" in points[0] and points[5] == "48" and points[1:5] == ["", "", "", ""]
    assert students == [["Ana Pérez", "", "2024001", "", "", "48"], ["Bad", "", "9", "", "", "0"],
                        ["Luis", "", "7", "", "", "46"], ["'=Eve", "", "8", "", "", "46"]]  # no lost.py: no score


def test_moodle_export_has_the_columns_moodle_maps_users_from(mixed, tmp_path):
    report.write_reports(mixed, "c", tmp_path / "out", CONFIG, formats=("moodle",))
    assert (tmp_path / "out" / "moodle.csv").read_bytes().startswith(BOM)
    header, *students = read_csv(tmp_path / "out" / "moodle.csv", "utf-8-sig")
    assert header == ["Full name", "ID number", "Email address", "Username", exports.DEFAULT_ASSIGNMENT]
    assert {r[2]: r[4] for r in students} == {"ana@x.edu": "48", "bad@x.edu": "0", "luis@x.edu": "46",
                                               "eve@x.edu": "46"}
    assert all(r[4] != "" for r in students)  # Moodle would clear a grade given as empty


def test_gradescope_export_is_a_roster_with_gradescope_score_columns(mixed, tmp_path):
    report.write_reports(mixed, "c", tmp_path / "out", CONFIG, formats=("gradescope",))
    raw = (tmp_path / "out" / "gradescope.csv").read_bytes()
    assert not raw.startswith(BOM) and raw.decode("utf-8")
    with open(tmp_path / "out" / "gradescope.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["Name", "SID", "Email", "Total Score", "Max Points", "Status"]
    assert {r["Email"]: (r["Name"], r["SID"], r["Total Score"], r["Max Points"], r["Status"]) for r in rows} == {
        "ana@x.edu": ("Ana Pérez", "2024001", "48", "48", "Graded"), "bad@x.edu": ("Bad", "9", "0", "48", "Graded"),
        "luis@x.edu": ("Luis", "7", "46", "48", "Graded"), "eve@x.edu": ("'=Eve", "8", "46", "48", "Graded"),
        "lost@x.edu": ("Lost", "10", "", "48", "Ungraded")}
    assert len({r["Email"] for r in rows}) == len(rows)  # Gradescope wants unique emails


def test_report_writes_every_export_by_default_and_warns_about_rows_it_cannot_place(store, tmp_path, capsys):
    record(store, [("ana.py", [Submitter("ana")], outcomes())])
    assert main(["report", "--cohort", "c", "--out", str(tmp_path / "out"), "--db", str(store.path),
                 "--lang", "en"]) == 0
    assert {p.name for p in (tmp_path / "out").glob("*.csv")} == {
        "gradebook.csv", "canvas.csv", "moodle.csv", "gradescope.csv"}
    err = capsys.readouterr().err
    assert "moodle.csv: 1 row(s) without Email address / ID number / Username" in err
    assert "canvas.csv: 1 row(s) without SIS User ID / SIS Login ID: Canvas will look them up by name alone" in err


def test_two_rows_with_one_sid_are_warned_about(store, tmp_path, capsys):
    """A re-upload under another name (a Gradescope resubmission is replaced: see below) keeps the
    same SID and email: both rows went into canvas.csv, moodle.csv and gradescope.csv without a word."""
    record(store, [("luis.py", [Submitter("Luis", "Luis@x.edu", "2024002")], outcomes()),
                   ("luis_v2.py", [Submitter("Luis", "luis@x.edu", "2024002")], outcomes(SCALE)),
                   ("ana.py", [Submitter("Ana", "ana@x.edu", "2024001")], outcomes())])
    assert main(["report", "--cohort", "c", "--out", str(tmp_path / "out"), "--db", str(store.path),
                 "--lang", "en"]) == 0
    err = capsys.readouterr().err
    assert "2 rows of the LMS files share sid 2024002 (submissions luis.py, luis_v2.py)" in err
    assert "share email Luis@x.edu" in err and "2024001" not in err


def test_two_rows_with_one_name_and_no_identifier_are_warned_about(store, tmp_path, capsys):
    """josé.py spelled two ways in one folder is two keys with one name: Canvas matches such rows by
    name, and one student's grade would land on the other's (an outside attacker's)."""
    record(store, [("jose\u0301.py~1a2b3c4d", [Submitter("jose\u0301")], outcomes()),
                   ("jos\u00e9.py", [Submitter("jos\u00e9")], outcomes(SCALE)),
                   ("ana.py", [Submitter("Ana", "ana@x.edu")], outcomes()), ("luis.py", [Submitter("Ana")], outcomes())])
    assert main(["report", "--cohort", "c", "--out", str(tmp_path / "out"), "--db", str(store.path),
                 "--lang", "en"]) == 0
    err = unicodedata.normalize("NFC", capsys.readouterr().err)
    assert "2 rows of the LMS files share name (with no SID or email) jos\u00e9 (submissions" in err
    assert "share name (with no SID or email) Ana" not in err  # one of them has an email: matched by it


# ---- roster ----------------------------------------------------------------------------------------------
def test_a_roster_fills_sid_and_email_of_a_plain_folder_cohort_by_key(store, tmp_path, capsys):
    record(store, [("ana.py", [Submitter("ana")], outcomes()), ("luis", [Submitter("luis")], outcomes(SCALE)),
                   ("extra.zip", [Submitter("extra")], unreadable())])
    path = tmp_path / "roster.csv"
    path.write_bytes(BOM + "Clave;Nombre;Matrícula;Correo;Usuario;Sección\n"
                           "ana;Ana Pérez;2024001;ana@x.edu;aperez;A\n"
                           "LUIS;;7;luis@x.edu;;B\n"
                           "pablo;Pablo;3;pablo@x.edu;;A\n".encode("utf-8"))
    assert main(["report", "--cohort", "c", "--out", str(tmp_path / "out"), "--db", str(store.path),
                 "--roster", str(path)]) == 0
    rows = gradebook(tmp_path / "out" / "gradebook.csv")
    assert {k: (r["Name"], r["SID"], r["Email"], r["Status"]) for k, r in rows.items()} == {
        "ana.py": ("Ana Pérez", "2024001", "ana@x.edu", "corregida"),
        "luis": ("luis", "7", "luis@x.edu", "corregida"),  # no name in the roster: the stored one stays
        "extra.zip": ("extra", "", "", "ilegible"),
        "Pablo": ("Pablo", "3", "pablo@x.edu", "sin entrega")}
    assert "extra.zip" in capsys.readouterr().err  # not in the roster: warned
    canvas = read_csv(tmp_path / "out" / "canvas.csv", "utf-8-sig")
    assert ["Ana Pérez", "", "2024001", "aperez", "A", "48"] in canvas and ["luis", "", "7", "", "B", "46"] in canvas
    # not in the roster: in gradebook.csv, in no LMS file (Canvas would match a row without SID by name)
    assert not any("extra" in cell for row in canvas for cell in row)
    for name in ("moodle.csv", "gradescope.csv"):
        assert "extra" not in (tmp_path / "out" / name).read_text(encoding="utf-8-sig")


def test_a_roster_without_keys_matches_by_email(store):
    record(store, [("submission_1", [Submitter("Ana", "Ana@X.edu", "")], outcomes())])
    joined = roster.join(roster.Roster((("", roster.Person("Ana Pérez", "ana@x.edu", "1", "ap", "S1")),)),
                         {"submission_1": [Submitter("Ana", "Ana@X.edu", "")]})
    assert joined.people == {"submission_1": [roster.Person("Ana Pérez", "ana@x.edu", "1", "ap", "S1")]}
    assert joined.missing == [] and joined.unmatched == []


def test_a_group_member_the_roster_lacks_keeps_their_row_and_an_empty_roster_cell_keeps_the_export(store, tmp_path):
    """A Gradescope group (Marta and Pedro) joined by Marta's email: Pedro, not in the roster, had
    no row in any file and no warning. Pedro's row with a SID but no email lost the export's email."""
    group = [Submitter("Marta Díaz", "marta@x.edu", ""), Submitter("Pedro Gil", "pedro@x.edu", "")]
    record(store, [("submission_103", group, outcomes()), ("submission_104", [Submitter("Luz", "luz@x.edu", "")], outcomes())])
    only_marta = roster.Roster((("", roster.Person("Marta Díaz", "marta@x.edu", "11", "", "")),
                                ("submission_104", roster.Person("Luz Rey", "", "12", "", ""))))
    view = report.build_view(store, "c", ENGLISH, roster=only_marta)
    people = {p.name: (p.email, p.sid) for i in view.graded for p in i.submitters}
    assert people == {"Marta Díaz": ("marta@x.edu", "11"), "Pedro Gil": ("pedro@x.edu", ""),
                      "Luz Rey": ("luz@x.edu", "12")}
    assert [w for w in view.warnings if "Pedro Gil (submission_103)" in w and "not in the roster" in w]
    both = roster.Roster((("submission_103", roster.Person("Marta Díaz", "", "11", "", "")),
                          ("submission_103", roster.Person("pedro gil", "", "13", "", ""))))
    view = report.build_view(store, "c", ENGLISH, roster=both)  # matched by name: no one twice
    assert sorted((p.name, p.email, p.sid) for p in view.graded[0].submitters) == [
        ("Marta Díaz", "marta@x.edu", "11"), ("pedro gil", "pedro@x.edu", "13")]


def test_report_counts_students_as_gradebook_csv_has_them(store, tmp_path, capsys):
    """A group of two is one submission and two gradebook rows: `report` said "students: 2"."""
    group = [Submitter("Marta Díaz", "marta@x.edu", ""), Submitter("Pedro Gil", "pedro@x.edu", "")]
    record(store, [("submission_103", group, outcomes()), ("submission_104", [Submitter("Luz", "luz@x.edu", "")], outcomes())])
    assert main(["report", "--cohort", "c", "--out", str(tmp_path / "out"), "--db", str(store.path), "--lang", "en"]) == 0
    assert "students: 3 " in capsys.readouterr().out
    with open(tmp_path / "out" / "gradebook.csv", encoding="utf-8-sig", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 3


def test_a_later_gradescope_submission_replaces_the_student_s_earlier_one_in_any_batch_order(store):
    """Gradescope gives a resubmission a new, larger submission_N: after a re-downloaded export,
    Luis had two rows in every file (0 and 48); batching the older export again after the newer one
    hid the newer; a group member who resubmitted alone kept a row from the group's too."""
    luis, marta, pedro, ana = (Submitter(n, f"{n.lower()}@x.edu", "") for n in ("Luis", "Marta", "Pedro", "Ana"))
    record(store, [("submission_102", [luis], outcomes(SDPA)), ("submission_103", [marta, pedro], outcomes()),
                   ("submission_104", [ana], outcomes()), ("plain.py", [Submitter("plain")], outcomes())])
    record(store, [("submission_202", [luis], outcomes()), ("submission_203", [marta], outcomes(SCALE))])
    record(store, [("submission_104", [ana], outcomes())])  # the older export again, after the newer
    view = report.build_view(store, "c", ENGLISH)
    rows = sorted((i.key, p.name) for i in view.items for p in i.submitters)
    assert rows == [("plain.py", "plain"), ("submission_103", "Pedro"), ("submission_104", "Ana"),
                    ("submission_202", "Luis"), ("submission_203", "Marta")]
    [warning] = [w for w in view.warnings if "replaced with a later one" in w]
    assert "submission_102 (Luis)" in warning and "submission_103 (Marta)" in warning
    record(store, [("submission_102", [luis], outcomes(SDPA))])  # batched again later: still the older one
    assert {(r.key, r.submitters[0].name) for r in store.cohort_results("c") if r.key.endswith("02")} == {
        ("submission_202", "Luis")}
    label, results = diff.side(store, "c")
    assert "submission_102" not in {r.key for r in results}


def test_keys_that_differ_in_case_are_two_students_and_a_row_matching_both_exports_nothing():
    """`luis.py` and `LUIS.py` once gave each of the two roster rows both submissions: two rows each,
    with different scores, in every LMS export."""
    submitted = {"luis.py": [Submitter("luis")], "LUIS.py": [Submitter("LUIS")], "ana.py": [Submitter("ana")],
                 "ANA.ipynb": [Submitter("ANA")]}
    people = {key: roster.Person(key, f"{key}@x.edu", key, "", "") for key in ("luis", "LUIS", "Ana")}
    joined = roster.join(roster.Roster(tuple(people.items())), submitted)
    assert joined.people == {"luis.py": [people["luis"]], "LUIS.py": [people["LUIS"]]}
    assert joined.ambiguous == [("Ana", ["ana.py", "ANA.ipynb"])]  # neither is exactly Ana's: no grade
    assert sorted(joined.unmatched) == ["ANA.ipynb", "ana.py"]


def test_a_file_and_a_folder_of_one_name_are_ambiguous_and_names_match_whatever_their_normal_form():
    """A folder `ana` beside the real `ana.py` took Ana's row by exact key: another's 48 under her SID.
    `jose\u0301.py` (NFD, as macOS writes it) did not match the roster's `josé` (NFC)."""
    ana, jose = roster.Person("Ana", "ana@x.edu", "1001", "", ""), roster.Person("José", "j@x.edu", "7", "", "")
    joined = roster.join(roster.Roster((("ana", ana), ("jos\u00e9", jose))),
                         {"ana.py": [Submitter("ana")], "ana": [Submitter("ana")], "jose\u0301.py": [Submitter("x")]})
    assert joined.ambiguous == [("ana", ["ana.py", "ana"])] and "ana.py" not in joined.people
    assert joined.people == {"jose\u0301.py": [jose]}


def test_a_report_into_a_reused_folder_leaves_no_earlier_file_that_passes_for_current(store, tmp_path):
    """Pages of students no longer in the view, and LMS files not asked for again, stayed in a reused
    --out beside the new ones. Files no report wrote stay."""
    run_batch(write_folder(tmp_path / "cohort", ["ana.py", "luis.py"]), store, Instant())
    run_batch(write_folder(tmp_path / "late", ["ana.py"], marker=" late"), store, Instant(outcomes(SCALE)))
    out = tmp_path / "out"
    report.write_reports(store, "c", out, CONFIG)
    (out / "notes.txt").write_text("the TA's own file", encoding="utf-8")
    (out / "students" / "mine.md").write_text("also the TA's", encoding="utf-8")
    before = {p.name for p in (out / "students").iterdir()}
    assert {"luis.py.html", "luis.py.md", "moodle.csv"} <= before | {p.name for p in out.iterdir()}
    report.write_reports(store, "c", out, CONFIG, run_id=2, formats=("canvas",))  # run 2 holds ana alone
    assert sorted(p.name for p in (out / "students").iterdir()) == ["ana.py.html", "ana.py.md", "mine.md"]
    assert not (out / "moodle.csv").exists() and not (out / "gradescope.csv").exists()
    assert (out / "canvas.csv").exists() and (out / "notes.txt").exists()
    report.write_reports(store, "c", out, CONFIG)  # and back: everything is written again
    assert {"luis.py.html", "luis.py.md"} <= {p.name for p in (out / "students").iterdir()}


@pytest.mark.parametrize("argv", [
    ["batch", "FOLDER", "--cohort", ""], ["batch", "FOLDER", "--cohort", "  "], ["batch", "FOLDER", "--cohort", "a\nb"],
    ["batch", "FOLDER", "--cohort", "2026:1"],  # diff would read run 1 of cohort 2026
    ["report", "--cohort", "c", "--out", "OUT", "--assignment", "=HYPERLINK(\"x\")"],
    ["report", "--cohort", "c", "--out", "OUT", "--assignment", "Tarea\n2"],
])
def test_a_cohort_name_or_column_title_that_cannot_work_is_refused_before_anything_runs(tmp_path, capsys, argv):
    """An empty cohort name and one with a newline were stored as typed; a title starting with = was
    written as a formula header of canvas.csv."""
    folder = write_folder(tmp_path / "cohort", ["ana.py"])
    argv = [str(folder) if a == "FOLDER" else str(tmp_path / "out") if a == "OUT" else a for a in argv]
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--db", str(tmp_path / "store.sqlite")])
    assert stopped.value.code == 2 and "cannot" in capsys.readouterr().err
    assert not (tmp_path / "store.sqlite").exists() and not (tmp_path / "out").exists()


def test_roster_names_in_two_columns_duplicated_rows_and_a_run_alone(store, tmp_path):
    """`Nombre` + `Apellido(s)` (Moodle's export) kept the first name only; a row pasted twice was a
    group of two; `report --run N --roster` called everyone outside run N "no submission"."""
    path = tmp_path / "roster.csv"
    path.write_text("Clave;Nombre;Apellido(s);Dirección de correo;Número de ID;Nombre de usuario\n"
                    "ana;Ana;Pérez Gil;ana@x.edu;7;ap\nana;Ana;Pérez Gil;ana@x.edu;7;ap\n"
                    "luis;Luis;Soto;luis@x.edu;8;ls\n", encoding="utf-8")  # Moodle's Spanish headers
    rows = roster.read(path).rows
    assert rows == (("ana", roster.Person("Ana Pérez Gil", "ana@x.edu", "7", "ap")),
                    ("luis", roster.Person("Luis Soto", "luis@x.edu", "8", "ls")))
    record(store, [("ana.py", [Submitter("ana")], outcomes())])
    record(store, [("luis.py", [Submitter("luis")], outcomes(SCALE))])
    view = report.build_view(store, "c", ENGLISH, run_id=2, roster=roster.read(path))
    assert [(i.key, i.status) for i in view.items] == [("luis.py", "graded")]
    assert any("1 roster student(s) have no submission in run 2" in w for w in view.warnings)
    whole = report.build_view(store, "c", ENGLISH, roster=roster.read(path))
    assert sorted((i.key, i.display_name) for i in whole.items) == [("ana.py", "Ana Pérez Gil"), ("luis.py", "Luis Soto")]


def test_a_roster_without_keys_for_a_plain_folder_is_refused(store, tmp_path, capsys):
    """Without a key column, rows match by email or SID, which a plain folder's submissions lack:
    every student who submitted was reported as "no submission" and Missing in gradescope.csv."""
    record(store, [("ana.py", [Submitter("ana")], outcomes())])
    path = tmp_path / "roster.csv"
    path.write_text("name,email\nAna,ana@x.edu\n", encoding="utf-8")
    assert main(["report", "--cohort", "c", "--out", str(tmp_path / "out"), "--db", str(store.path),
                 "--roster", str(path)]) == 2
    assert "no 'key' column, and this cohort's submissions carry no email or SID" in capsys.readouterr().err


def test_a_report_with_settings_that_decide_outcomes_changed_says_it_ran_nothing_again(store, tmp_path):
    """A grading.yml with another seed rescored points only, and said nothing: a TA may believe
    everyone was graded on new examples."""
    record(store, [("ana.py", [Submitter("ana")], outcomes())])
    assert report.build_view(store, "c", ENGLISH).warnings == []
    reseeded = tmp_path / "grading.yml"
    reseeded.write_text(CONFIG.source.replace(f"seed: {CONFIG.seed}", f"seed: {CONFIG.seed + 1}", 1), encoding="utf-8")
    other = grading_config.load(reseeded, "en")
    assert other.seed == CONFIG.seed + 1
    [warning] = report.build_view(store, "c", other, config_path=reseeded).warnings
    assert warning.startswith("Run 1 (/cohort): 1 row(s) (ana.py) were graded with another grader version or other "
                              "grading.yml settings")
    assert warning.endswith(f"python -m autograder batch /cohort --cohort c --regrade --only ana.py --db {store.path} "
                            f"--config {reseeded}")


def test_a_roster_it_cannot_use_is_a_clear_error(store, tmp_path, capsys):
    record(store, [("ana.py", [Submitter("ana")], outcomes())])
    latin = tmp_path / "latin1.csv"
    latin.write_bytes("key,name\nana,Ana Pérez\n".encode("latin-1"))
    nokey = tmp_path / "nokey.csv"
    nokey.write_text("nombre,nota\nAna,7\n", encoding="utf-8")
    for path, message in ((latin, "not UTF-8"), (nokey, "no 'key', 'email' or 'sid' column")):
        with pytest.raises(roster.RosterError, match=message):
            roster.read(path)
        assert main(["report", "--cohort", "c", "--out", str(tmp_path / "out"), "--db", str(store.path),
                     "--roster", str(path)]) == 2
        assert message in capsys.readouterr().err


def test_a_roster_row_with_a_cell_missing_or_one_too_many_is_refused(tmp_path):
    """A row without its SID cell put the email under ID number in moodle.csv and under SIS User ID
    in canvas.csv, with no warning; an unquoted comma in a name does the same (an outside TA's)."""
    header = "clave;Nombre;Apellido(s);Matrícula;Correo\n"
    missing = tmp_path / "missing.csv"
    missing.write_text(header + "ana;Ana;Pérez;7;ana@x.edu\nbeto;Alberto;Rojas;beto@x.edu\n", encoding="utf-8")
    extra = tmp_path / "extra.csv"
    extra.write_text("key,name,sid,email\nana,Pérez, Ana,7,ana@x.edu\n", encoding="utf-8")
    for path, line in ((missing, "3 (4)"), (extra, "2 (5)")):
        with pytest.raises(roster.RosterError, match=re.escape(f"line(s) {line} have another number")):
            roster.read(path)
    trailing = tmp_path / "trailing.csv"  # empty cells past the header's: nothing moves
    trailing.write_text(header + "ana;Ana;Pérez;7;ana@x.edu;;\n", encoding="utf-8")
    assert roster.read(trailing).rows == (("ana", roster.Person("Ana Pérez", "ana@x.edu", "7")),)


@pytest.mark.parametrize("delimiter", [",", ";"])
def test_a_doubled_quote_in_a_roster_is_one_quote(tmp_path, delimiter):
    """Excel writes a quote inside a quoted cell twice (Pepe in quotes, O'Brien written with a
    quote): the sniffer, reading the header alone, once took a dialect without doubled quotes, and
    every export showed the doubled quotes (a TA's)."""
    path = tmp_path / "roster.csv"
    path.write_text(f'key{delimiter}name{delimiter}sid\nana{delimiter}"Pérez, José ""Pepe"""{delimiter}1\n'
                    f'luis{delimiter}"O""Brien"{delimiter}2\n', encoding="utf-8")
    assert [person.name for _, person in roster.read(path).rows] == ['Pérez, José "Pepe"', 'O"Brien']


def test_a_store_that_is_not_one_is_a_clear_error_and_is_left_alone(store, tmp_path, capsys):
    """report and diff read a store: a typo in --db once made an empty one, and a CSV given as the
    store was chmod-ed to 0600 before SQLite refused it with a traceback (a TA's)."""
    csv_file = tmp_path / "notas.csv"
    csv_file.write_text("a,b\n", encoding="utf-8")
    csv_file.chmod(0o644)
    for db, message in ((csv_file, "is not a store"), (tmp_path / "typo.sqlite", "no store at"),
                        (tmp_path, "cannot open the store")):
        for command in (["report", "--cohort", "c", "--out", str(tmp_path / "out")], ["diff", "c"]):
            assert main([*command, "--db", str(db)]) == 2
            assert message in capsys.readouterr().err
    assert csv_file.stat().st_mode & 0o777 == 0o644 and not (tmp_path / "typo.sqlite").exists()


def test_an_output_path_that_cannot_be_used_is_one_line(tmp_path, capsys):
    """--out naming a file, or under a folder that does not exist: one line, exit 2, no traceback."""
    taken = tmp_path / "taken"
    taken.write_text("", encoding="utf-8")
    assert main(["build", "--out", str(taken)]) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot use {taken}")


# ---- diff and the report's language ----------------------------------------------------------------------
def test_diff_speaks_spanish_and_does_not_cut_property_names(store, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    record(store, [("submission_with_a_long_key", [Submitter("Ana María Pérez González")], outcomes()),
                   ("b", [Submitter("Beto")], outcomes())])
    record(store, [("submission_with_a_long_key", [Submitter("Ana María Pérez González")], outcomes(SDPA))],
           source="/only")
    assert main(["diff", "c", "--db", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert "correcto → incorrecto" in out and "passed" not in out
    assert "entrega" in out and "estudiante" in out and "1 puntaje(s) cambiaron, 1 entrega(s) difieren" in out
    assert "CausalSelfAttention.fused_calls_sdpa:" in out and "…" not in out  # whole, on one line
    assert "Beto" not in out  # the latest run graded one student: the cohort view of the rest is unchanged
    assert main(["diff", "c", "--db", str(store.path), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "passed → failed" in out and "1 score(s) changed" in out


def test_diff_of_two_runs_by_number_still_compares_those_runs(store):
    record(store, [("a", [], outcomes()), ("b", [], outcomes())])
    record(store, [("a", [], outcomes(SCALE))])
    old_label, old = diff.side(store, "c:1")
    new_label, new = diff.side(store, "c:2")
    changes = diff.compare(old, new, CONFIG)
    assert (old_label, new_label) == ("c:1", "c:2")
    assert [(c.key, c.old, c.new) for c in changes] == [("a", 48, 46), ("b", 48, None)]
    label, view = diff.side(store, "c", "es")
    assert label == "c (corridas hasta la 2)" and {r.key: r.run_id for r in view} == {"a": 2, "b": 1}


def test_diff_of_one_run_compares_it_with_the_run_before_it(store, capsys, monkeypatch):
    """`diff c:1` compared the cohort's second-to-last run with run 1: backwards in time, and with
    students appearing and leaving who did not."""
    monkeypatch.setenv("COLUMNS", "200")
    for graded in (outcomes(), outcomes(SCALE), outcomes(SDPA)):
        record(store, [("a", [], graded)])
    assert main(["diff", "c:2", "--db", str(store.path), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "c:1 → c:2" in out and "48" in out and "46" in out
    assert main(["diff", "c:1", "--db", str(store.path)]) == 2
    assert "no run before run 1" in capsys.readouterr().err


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_print_changes_folds_long_text_on_a_narrow_terminal(width):
    console = Console(file=io.StringIO(), width=width)
    change = diff.Change("k" * 40, "n" * 30, 48, 45, (("CausalSelfAttention", "fused_calls_sdpa", "passed", "timeout"),))
    diff.print_changes([change], "c:1", "c:2", console, "es")
    lines = console.file.getvalue().splitlines()
    assert "…" not in "".join(lines) and max(map(len, lines)) <= width
    cells = [line.split("│") for line in lines if line.startswith("│")]
    column = lambda i: "".join(cell[i].strip() for cell in cells)  # noqa: E731  (a column, folded lines joined)
    assert column(1) == "k" * 40 and column(2) == "n" * 30  # folded over lines, not cut
    assert column(-2).replace(" ", "") in ("CausalSelfAttention.fused_calls_sdpa:correcto→tiempoagotado",
                                          "CausalSelfAttention:fused_calls_sdpa:correcto→tiempoagotado")
    if width >= 80:  # the class heads its properties where "Class.property:" does not fit: no name split
        shown = [cell[-2] for cell in cells]
        assert any("CausalSelfAttention" in s for s in shown) and any("fused_calls_sdpa:" in s for s in shown)


# ---- the store ---------------------------------------------------------------------------------------------
def test_a_store_from_before_run_scopes_is_upgraded_when_opened(tmp_path):
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    with old:
        old.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, cohort_id INTEGER NOT NULL, started_at TEXT NOT NULL,"
                    " finished_at TEXT, grader_version TEXT NOT NULL, suite_hash TEXT NOT NULL,"
                    " grading_yml TEXT NOT NULL, source TEXT NOT NULL, regrade INTEGER NOT NULL)")
        old.execute("CREATE TABLE cohorts (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at TEXT NOT NULL)")
        old.execute("INSERT INTO cohorts VALUES (1, 'c', 'then')")
        old.execute("INSERT INTO runs VALUES (1, 1, 'then', NULL, 'v', 's', 'y', '/f', 0)")
    old.close()
    store = Store(path)
    [run] = store.runs("c")
    assert (run.scope, run.expected, run.finished) == (None, None, False)
    again, resumed = store.begin_run("c", "v", "s", "y", "/f", False)
    assert resumed and again.id == 1
    store.close()


def test_a_store_on_a_read_only_mount_is_read(tmp_path):
    """`report` and `diff` read a store on a read-only mount (even root cannot write there, and
    SQLite opens a WAL store for reading only where it can write its -shm beside it)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private read-only mount")
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "cohort.sqlite"
    writer = Store(path)
    run, _ = writer.begin_run("c", "0.1.0", "s1", "grading: yml", "/submissions", False)
    writer.record_grading(run, "ana", [], "hash-a", [Outcome("SelfAttention", "shapes", "passed")])
    writer.finish_run(run.id)
    writer.close()
    script = ("from autograder.cohort.store import Store\n"
              f"store = Store({str(path)!r}, create=False)\n"
              "print([r.key for r in store.results(store.run('c'))])\nstore.close()\n")
    mount = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && {sys.executable} -c \"$0\""
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", mount, script],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parent.parent)
    if "mount" in done.stderr and done.returncode != 0 and "Store" not in done.stderr:
        pytest.skip(f"no private read-only mount here: {done.stderr.strip()[:200]}")
    assert done.stdout.strip() == "['ana']", done.stderr
