"""The cohort store and the readers of a cohort's submissions (no grading here)."""
import json
import sqlite3
import zipfile
from pathlib import Path

import pytest
import yaml

from autograder.cohort import batch, gradescope_export
from autograder.cohort.store import Store, StoreError, Submitter
from autograder.outcomes import Outcome

pytestmark = pytest.mark.unit

OUTCOMES = [
    Outcome("SelfAttention", "shapes", "passed", duration=0.5),
    Outcome("SelfAttention", "scale", "failed", "scale_mismatch", {"expected": 0.25, "found": 1.0},
            {"d_model": 8, "texto": "ñandú"}, 1.25, "impreso\n"),
]


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "cohort.sqlite")
    yield store
    store.close()


def begin(store, cohort="c", suite="s1", regrade=False):
    return store.begin_run(cohort, "0.1.0", suite, "grading: yml", "/submissions", regrade)


def test_outcomes_round_trip_exactly(store):
    run, resumed = begin(store)
    assert not resumed
    people = [Submitter("Ana Pérez", "ana@example.edu", "2024001"), Submitter("Luis", "luis@example.edu", "7")]
    store.record_grading(run, "ana", people, "hash-a", OUTCOMES, 4.5, 300.0)
    [result] = store.results(run)
    assert result.key == "ana" and result.submitters == people and not result.reused
    assert result.outcomes == OUTCOMES
    assert (result.seconds, result.peak_rss_mib) == (4.5, 300.0)


def test_the_graded_file_of_a_submission_that_held_others_reaches_the_store_and_the_page(store, tmp_path):
    """`grade` names it at the top of results.json; a batch's student page once left it out."""
    from autograder import config as grading_config
    from autograder.cohort import report

    folder = tmp_path / "cohort"
    folder.mkdir()
    stub = (Path(__file__).resolve().parent.parent / "assignments" / "attention" / "attention.py").read_text(encoding="utf-8")
    with zipfile.ZipFile(folder / "maría.zip", "w") as archive:
        archive.writestr("tarea/attention.py", stub)  # the untouched stub: the notebook is what was meant
        archive.writestr("tarea/mi notebook.ipynb", json.dumps({"nbformat": 4, "metadata": {}, "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "source": "".join(f"class {name}:\n    def forward(self, x):\n        return x\n\n"
                              for name in ("SelfAttention", "MultiHeadAttention", "CausalSelfAttention"))}]}))
    config = grading_config.load()
    with batch.entries(folder) as found:
        [entry] = found
        content_hash, task, _, graded_file = batch._load(entry, config)
    assert task is not None and graded_file == "tarea/mi notebook.ipynb"
    run, _ = begin(store)
    passed = [Outcome(p.cls, p.name, "passed") for p in config.properties]
    store.record_grading(run, entry.key, [], content_hash, passed, graded_file=graded_file)
    [result] = store.results(run)
    assert result.graded_file == graded_file
    [graded] = report.rescore([result], config)
    assert graded_file in graded.overview


def test_unfinished_run_is_resumed_and_finished_one_is_not(store):
    run, _ = begin(store)
    store.record_grading(run, "ana", [], "hash-a", OUTCOMES)
    again, resumed = begin(store)
    assert resumed and again.id == run.id
    assert store.done(run.id) == {"ana": "hash-a"}
    other_suite, resumed = begin(store, suite="s2")
    assert not resumed and other_suite.id != run.id
    store.finish_run(other_suite.id)
    store.finish_run(run.id)
    fresh, resumed = begin(store)
    assert not resumed and fresh.id not in (run.id, other_suite.id)
    assert store.done(fresh.id) == {}


def test_reuse_needs_same_content_grader_and_suite(store):
    run, _ = begin(store)
    grading = store.record_grading(run, "ana", [], "hash-a", OUTCOMES)
    assert store.reusable("c", "ana", "hash-a", "0.1.0", "s1") == grading
    assert store.reusable("c", "ana", "hash-b", "0.1.0", "s1") is None
    assert store.reusable("c", "ana", "hash-a", "0.2.0", "s1") is None
    assert store.reusable("c", "ana", "hash-a", "0.1.0", "s2") is None
    assert store.reusable("c", "luis", "hash-a", "0.1.0", "s1") is None
    store.finish_run(run.id)
    second, _ = begin(store)
    store.record_reuse(second, "ana", [Submitter("Ana")], grading)
    [result] = store.results(second)
    assert result.reused and result.grading_id == grading and result.outcomes == OUTCOMES
    assert store.count("gradings") == 1 and store.count("run_results") == 2


def test_a_submission_is_stored_whole_or_not_at_all(store):
    run, _ = begin(store)
    unstorable = [OUTCOMES[0], Outcome("SelfAttention", "scale", "failed", "x", {"value": object()})]
    with pytest.raises(TypeError):
        store.record_grading(run, "ana", [Submitter("Ana")], "hash-a", unstorable)
    assert [store.count(t) for t in ("submissions", "gradings", "outcomes", "run_results")] == [0, 0, 0, 0]
    with pytest.raises(sqlite3.IntegrityError):  # a submission has one result per run
        store.record_grading(run, "ana", [], "hash-a", OUTCOMES)
        store.record_grading(run, "ana", [], "hash-a", OUTCOMES)
    assert store.count("gradings") == 1 and store.count("outcomes") == len(OUTCOMES)


def test_unknown_cohort_or_run_is_a_clear_error(store):
    with pytest.raises(StoreError, match="no cohort"):
        store.run("nobody")
    run, _ = begin(store)
    with pytest.raises(StoreError, match="no run 99"):
        store.run("c", 99)
    assert store.run("c").id == run.id


def write_export(root, metadata):
    root.mkdir(parents=True)
    (root / "submission_metadata.yml").write_text(yaml.safe_dump(metadata, allow_unicode=True), encoding="utf-8")
    for folder in metadata:
        (root / folder).mkdir()
        (root / folder / "attention.py").write_text("class SelfAttention: pass\n")


METADATA = {
    "submission_101": {":submitters": [{":name": "Ana Pérez", ":sid": "2024001", ":email": "ana@example.edu"},
                                       {":name": "Luis Soto", ":sid": 7, ":email": "luis@example.edu"}],
                       ":created_at": "2026-03-01 10:00:00", ":score": 10.0},
    "submission_202": {"submitters": [{"name": "Marta", "sid": "3", "email": "m@example.edu"}]},
}


def test_gradescope_export_folder_and_zip(tmp_path):
    root = tmp_path / "above" / "assignment_1_export"
    write_export(root, METADATA)
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for path in root.rglob("*"):
            handle.write(path, path.relative_to(root.parent))
    for given in (root, root.parent, archive):  # the export folder, the folder holding only it, the zip
        with batch.entries(given) as found:
            assert [e.key for e in found] == ["submission_101", "submission_202"]
            assert found[0].submitters == (Submitter("Ana Pérez", "ana@example.edu", "2024001"),
                                           Submitter("Luis Soto", "luis@example.edu", "7"))
            assert found[1].submitters == (Submitter("Marta", "m@example.edu", "3"),)
            assert (found[0].path / "attention.py").is_file()


def test_a_plain_folder_has_one_entry_per_student(tmp_path):
    (tmp_path / "ana").mkdir()
    (tmp_path / "luis.py").write_text("")
    (tmp_path / "marta.ipynb").write_text("{}")
    (tmp_path / "pablo.zip").write_bytes(b"")
    (tmp_path / ".hidden.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    with batch.entries(tmp_path) as found:
        assert [(e.key, e.submitters[0].name) for e in found] == [
            ("ana", "ana"), ("luis.py", "luis"), ("marta.ipynb", "marta"), ("pablo.zip", "pablo")]


def test_what_a_plain_folder_passes_over_or_holds_by_mistake_is_named(tmp_path):
    """A notes.txt or a Windows `ana.py.txt` was dropped without a word; the folder holding an
    unpacked export and its zip, given instead of the export, was two students at full marks."""
    cohort = tmp_path / "cohort"
    write_export(cohort / "assignment_7_export", METADATA)
    with zipfile.ZipFile(cohort / "export.zip", "w") as handle:
        handle.writestr("assignment_7_export/submission_metadata.yml", "{}")
    (cohort / "ana.py.txt").write_text("x = 1\n")
    (cohort / "luis.py").write_text("x = 1\n")
    (cohort / "marta").mkdir()
    (cohort / "marta" / "submission_metadata.yml").write_text("{}")  # a student's own file of that name
    (cohort / "notas.txt").write_text("x")
    (cohort / "__pycache__").mkdir()  # Python's cache, from running a file there
    (cohort / "reportes").mkdir()  # a report written into the submissions folder
    (cohort / "reportes" / ".autograder-report").write_text("index.html\n")
    notes = []
    with batch.entries(cohort, notes) as found:
        assert [e.key for e in found] == ["assignment_7_export", "export.zip", "luis.py", "marta"]
    assert notes == [("__pycache__", "not_a_student_folder"), ("ana.py.txt", "hidden_extension"),
                     ("assignment_7_export", "holds_export"), ("export.zip", "holds_export"), ("marta", "holds_export"),
                     ("notas.txt", "not_a_submission"), ("reportes", "not_a_student_folder")]


def test_an_export_whose_folders_and_metadata_disagree_says_so_and_grades_every_folder(tmp_path):
    """submission_105/ missing from the metadata was never graded; submission_104 named without a
    folder dropped Carla without a word."""
    root = tmp_path / "export"
    write_export(root, METADATA)
    (root / "submission_105").mkdir()
    (root / "submission_105" / "attention.py").write_text("x = 1\n")
    metadata = {**METADATA, "submission_104": {":submitters": [{":name": "Carla", ":email": "c@example.edu"}]}}
    (root / "submission_metadata.yml").write_text(yaml.safe_dump(metadata), encoding="utf-8")
    notes = []
    with batch.entries(root, notes) as found:
        assert [(e.key, len(e.submitters)) for e in found] == [("submission_101", 2), ("submission_105", 0),
                                                               ("submission_202", 1)]
    assert notes == [("submission_104 (Carla)", "no_folder"), ("submission_105", "not_in_metadata")]


def test_escape_sequences_in_an_export_s_names_never_reach_the_terminal(tmp_path):
    root = tmp_path / "export"
    write_export(root, {"submission_1": {":submitters": [{":name": "Ana\x1b[2K\x1b]0;owned\x07 Pérez", ":email": "a@x.edu"}]}})
    with batch.entries(root) as found:
        assert found[0].submitters[0].name == "Ana[2K]0;owned Pérez"


def test_unreadable_archive_is_a_batch_error(tmp_path):
    bad = tmp_path / "cohort.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(batch.BatchError):
        with batch.entries(bad):
            pass
    with pytest.raises(gradescope_export.ExportError):
        gradescope_export.read(tmp_path / "missing.yml")


def test_a_store_this_process_may_only_read_is_read_from_a_private_copy(tmp_path, monkeypatch):
    """A co-TA with read access only, or a store on a read-only mount: `report` and `diff` read it
    (what a batch committed but SQLite had not yet moved out of -wal included), leave it as it
    was, and remove their copy."""
    from autograder.cohort import store as store_module

    path = tmp_path / "cohort.sqlite"
    writer = Store(path)
    run, _ = begin(writer)
    writer.record_grading(run, "ana", [], "hash-a", OUTCOMES)  # the writer stays open: its commit is in -wal
    assert Path(f"{path}-wal").stat().st_size > 0
    before = path.read_bytes()
    monkeypatch.setattr(store_module, "_writable", lambda path: False)
    reader = Store(path, create=False)
    copy = reader._copy
    assert copy is not None and [r.key for r in reader.results(reader.run("c"))] == ["ana"]
    reader.close()
    assert not copy.exists() and path.read_bytes() == before
    writer.close()

