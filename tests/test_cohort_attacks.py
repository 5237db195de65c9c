"""Hostile names, keys and metadata, and interrupted runs, in batch, report and diff (issue 9).

Stores are filled through the Store API with hand-made outcomes, and batches grade through an
executor that answers at once (Instant), so these tests take seconds; one grades the stub for real.
"""
import csv
import hashlib
import html
import io
import os
import sqlite3
import stat
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt
from rich.console import Console

from autograder import config as grading_config
from autograder.cli import main
from autograder.cohort import batch, gradescope_export, report
from autograder.cohort.executor import LocalExecutor
from autograder.cohort.store import Store, StoredResult, Submitter
from autograder.grade import suite_version
from autograder.outcomes import Outcome
from cohort_fakes import Instant, outcomes

ROOT = Path(__file__).resolve().parent.parent
CONFIG = grading_config.load()
STUB = (ROOT / "assignments" / "attention" / "attention.py").read_text(encoding="utf-8")
IMG = "</h1><img src=x onerror=alert(1)>"
PRINTED_IMG = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0, "expected": 0.25, "d_k": 16},
                      {"d_model": 16}, 0.1, f"```\n{IMG}\n```\n")
QUIET = Console(file=io.StringIO())


def record(store, cohort, results, finish=True):
    version, suite = suite_version(CONFIG)
    run, _ = store.begin_run(cohort, version, suite, CONFIG.source, "/cohort", False)
    for key, people, graded in results:
        store.record_grading(run, key, people, "hash-" + key, graded)
    if finish:
        store.finish_run(run.id)
    return run


def run_batch(folder, store, executor, regrade=False):
    return batch.run_batch(folder, "c", store, CONFIG, lambda: executor, regrade, QUIET)


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    yield store
    store.close()


@pytest.fixture
def loose_umask():
    """The default umask of many systems: new files would be world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def cohort_folder(tmp_path):
    folder = tmp_path / "cohort"
    folder.mkdir()
    for name in ("a.py", "b.py", "c.py"):
        (folder / name).write_text(STUB + f"# {name}\n", encoding="utf-8")
    return folder


# ---- gradebook ---------------------------------------------------------------------------------
@pytest.mark.parametrize("prefix", ["=", "+", "-", "@", "\t", "\r"])
def test_gradebook_text_cells_never_start_a_formula(tmp_path, prefix):
    text = prefix + 'HYPERLINK("http://evil.example","x")'
    results = [StoredResult(text, [Submitter(text, text, text)], outcomes(), "h1", 1, False),
               StoredResult(text + "2", [], outcomes(), "h2", 2, False),  # no submitters: the key is the name
               StoredResult("ana", [Submitter("Ana", "ana@example.edu", "7")], outcomes(), "h3", 3, False)]
    report.write_gradebook(tmp_path / "gradebook.csv", report.rescore(results, CONFIG), CONFIG)
    with open(tmp_path / "gradebook.csv", encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["Name"], r["SID"], r["Email"], r["Submission"]) for r in rows] == [
        ("'" + text, "'" + text, "'" + text, "'" + text),
        ("'" + text + "2", "", "", "'" + text + "2"),
        ("Ana", "7", "ana@example.edu", "ana"),
    ]
    assert all((r["Total Score"], r["Max Points"]) == ("48", "48") for r in rows)  # numbers stay numbers


@pytest.mark.parametrize("sid", ["+56", "-1203", "+56.5"])
def test_a_signed_number_is_no_formula_and_keeps_its_sign(sid):
    """The guard made SID +56 into '+56 in every LMS file, which then matched no student."""
    assert report.text_cell(sid) == sid
    assert report.text_cell(sid + "+cmd|' /C calc'!A0") == "'" + sid + "+cmd|' /C calc'!A0"


def test_gradebook_from_the_store_neutralises_formulas(store, tmp_path):
    people = [Submitter("=HYPERLINK(\"http://x\")", "-2+3", "@SUM(A1)")]
    run = record(store, "c", [("submission_1", people, outcomes())])
    report.write_gradebook(tmp_path / "gradebook.csv", report.rescore(store.results(run), CONFIG), CONFIG)
    with open(tmp_path / "gradebook.csv", encoding="utf-8-sig", newline="") as handle:
        [row] = list(csv.DictReader(handle))
    assert (row["Name"], row["Email"], row["SID"]) == ("'=HYPERLINK(\"http://x\")", "'-2+3", "'@SUM(A1)")


# ---- pages -----------------------------------------------------------------------------------------
def render_markdown(text):
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(text)


def test_pages_show_names_keys_and_outputs_as_text(store, tmp_path):
    name = f"{IMG} [click](javascript:alert(3))\n# heading & **bold**"
    key = "<img src=x onerror=alert(2)>|`k`"
    record(store, "c", [(key, [Submitter(name)], outcomes(PRINTED_IMG))])
    report.write_reports(store, "c", tmp_path / "out", CONFIG)
    [md] = (tmp_path / "out" / "students").glob("*.md")
    page = render_markdown(md.read_text(encoding="utf-8"))
    assert "<img" not in page and "<a " not in page and page.count("<h1>") == 1
    assert "&lt;/h1&gt;&lt;img src=x onerror=alert(1)&gt; [click](javascript:alert(3)) # heading &amp; **bold**" in page
    assert "&lt;img src=x onerror=alert(2)&gt;|`k`" in page
    assert page.count("&lt;/h1&gt;&lt;img src=x onerror=alert(1)&gt;") == 2  # the name, and the printed output
    [student] = (tmp_path / "out" / "students").glob("*.html")
    for path in (student, tmp_path / "out" / "index.html"):
        text = path.read_text(encoding="utf-8")
        assert "<img src=x" not in text and "&lt;img src=x onerror=alert(" in text


def test_keys_that_sanitize_alike_get_pages_of_their_own(store, tmp_path):
    keys = ["sub 3", "sub_3", "Ana", "ana", "ANA.py", ".hidden", "..", "x" * 300, "a~b", "sub_3~0000"]
    people = [(key, [Submitter(f"student {i}")], outcomes()) for i, key in enumerate(keys)]
    record(store, "c", people)
    report.write_reports(store, "c", tmp_path / "first", CONFIG)
    pages = sorted(p.name for p in (tmp_path / "first" / "students").glob("*.html"))
    assert len(pages) == len(keys) and len({p.lower() for p in pages}) == len(keys)  # case-insensitive too
    for i, key in enumerate(keys):
        page = (tmp_path / "first" / "students" / f"{report.page_name(key)}.html").read_text(encoding="utf-8")
        assert f"student {i}</h1>" in page and html.escape(key) in page
    assert report.page_name("sub_3") == "sub_3" and report.page_name("submission_42") == "submission_42"
    record(store, "c", people)  # a second run: the same page names
    report.write_reports(store, "c", tmp_path / "second", CONFIG)
    assert sorted(p.name for p in (tmp_path / "second" / "students").glob("*.html")) == pages


# ---- Gradescope exports ------------------------------------------------------------------------
def write_export(root, metadata_text, folders=("submission_1",)):
    root.mkdir(parents=True)
    (root / gradescope_export.METADATA).write_text(metadata_text, encoding="utf-8")
    for folder in folders:
        (root / folder).mkdir()
        (root / folder / "attention.py").write_text(STUB, encoding="utf-8")
    return root


@pytest.mark.parametrize("key", ["../outside", "/etc", "a\\b", "..", ".", "", "a\0b", "submission_\udc80",
                                 "submission_\u0661", "submission_1x", "luis.py", "ana"])
def test_export_keys_that_are_not_plain_folder_names_are_refused(tmp_path, key):
    (tmp_path / "outside").mkdir()
    metadata = {"submission_1": {":submitters": [{":name": "Ana"}]}, key: {":submitters": [{":name": "Eve"}]}}
    root = write_export(tmp_path / "export", yaml.safe_dump(metadata))
    with pytest.raises(gradescope_export.ExportError, match="not a submission folder name"):
        gradescope_export.read(root / gradescope_export.METADATA)
    with pytest.raises(batch.BatchError):
        with batch.entries(root):
            pass


@pytest.mark.parametrize("target", ["outside", "export/submission_1"])
def test_export_keys_that_are_symlinks_are_refused(tmp_path, target):
    (tmp_path / "outside").mkdir()
    metadata = {"submission_1": {":submitters": [{":name": "Ana"}]},
                "submission_2": {":submitters": [{":name": "Eve"}]}}
    root = write_export(tmp_path / "export", yaml.safe_dump(metadata))
    (root / "submission_2").symlink_to(tmp_path / target)
    with pytest.raises(gradescope_export.ExportError, match="symlink or a path outside"):
        gradescope_export.read(root / gradescope_export.METADATA)


def test_unknown_yaml_tags_still_give_the_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = write_export(tmp_path / "export", """\
submission_1: !ruby/object:Gradescope::Submission
  :submitters: !ruby/array:Array
  - !ruby/hash:ActiveSupport::HashWithIndifferentAccess
    :name: !ruby/string Ana Pérez
    :email: ana@example.edu
    :sid: !custom 2024001
  :created_at: !ruby/object:ActiveSupport::TimeWithZone 2026-03-01 10:00:00 Z
  :score: !!python/object/apply:os.system ["touch pwned"]
submission_2:
  :submitters: 5
""", folders=("submission_1", "submission_2"))
    found = gradescope_export.read(root / gradescope_export.METADATA)
    assert [(e.key, e.submitters) for e in found] == [
        ("submission_1", (Submitter("Ana Pérez", "ana@example.edu", "2024001"),)), ("submission_2", ())]
    with batch.entries(root) as entries:
        assert [e.submitters for e in entries] == [found[0].submitters, ()]
    assert not (tmp_path / "pwned").exists()


def test_a_students_folder_holding_metadata_does_not_make_the_cohort_an_export(tmp_path):
    """A plain cohort folder where mallory/ holds a submission_metadata.yml naming Ana's SID (and a
    folder `ana.py/`): still the three plain submissions, each under its own name, no one's SID."""
    cohort = tmp_path / "cohort"
    for name in ("ana.py", "luis.py"):
        (cohort / name).parent.mkdir(parents=True, exist_ok=True)
        (cohort / name).write_text(STUB, encoding="utf-8")
    write_export(cohort / "mallory", yaml.safe_dump({"ana.py": {":submitters": [{":name": "Ana", ":sid": "2024001"}]},
                                                    "mallory": {":submitters": [{":name": "Mallory"}]}}),
                 folders=("ana.py", "mallory"))
    assert gradescope_export.find_metadata(cohort) is None
    with batch.entries(cohort) as entries:
        assert sorted(e.key for e in entries) == ["ana.py", "luis.py", "mallory"]
        assert [s.sid for e in entries for s in e.submitters if s.sid] == []


def test_a_late_folder_holding_one_students_folder_with_metadata_is_no_export(store, tmp_path):
    """Late work alone in a folder (README): its only entry, ana/, holds her submission and a
    submission_metadata.yml naming Luis's key. Still plain submissions: ana/ is graded as Ana's,
    and nothing is stored under Luis's key or with his name."""
    first = tmp_path / "first"
    first.mkdir()
    for name in ("ana.py", "luis.py"):
        (first / name).write_text(STUB, encoding="utf-8")
    run_batch(first, store, Instant(outcomes()))
    late = tmp_path / "late"
    write_export(late / "ana", yaml.safe_dump({"ana": {":submitters": [{":name": "ana"}]},
                                               "luis.py": {":submitters": [{":name": "Mallory"}]}}), folders=())
    (late / "ana" / "attention.py").write_text(STUB, encoding="utf-8")
    (late / "ana" / "luis.py").write_text(STUB, encoding="utf-8")
    assert gradescope_export.find_metadata(late) is None
    run_batch(late, store, Instant(outcomes()))
    stored = {r.key: r for r in store.cohort_results("c")}
    assert stored["luis.py"].submitters == [Submitter("luis", "", "")]  # named after his file, as before
    assert stored["luis.py"].run_id == stored["ana.py"].run_id
    assert stored["ana"].run_id > stored["luis.py"].run_id  # the late folder: Ana's, under her folder's name


def test_an_export_under_another_name_is_named_not_graded_as_one_student(tmp_path):
    """A copy of an unpacked export that the file manager named "assignment_987_export 2": graded as
    one student under the folder's name, nine students lost without a word (a TA's). Not read as an
    export either (a student's folder could hold the same): batch names it."""
    write_export(tmp_path / "gs" / "assignment_987_export 2", yaml.safe_dump({"submission_1": {}}))
    assert gradescope_export.find_metadata(tmp_path / "gs") is None
    with pytest.raises(batch.BatchError, match="looks like a Gradescope export"):
        with batch.entries(tmp_path / "gs"):
            pass


def test_an_export_is_found_at_the_top_or_in_the_one_folder_a_zip_unpacks_to(tmp_path):
    top = write_export(tmp_path / "top", yaml.safe_dump({"submission_1": {}}))
    assert gradescope_export.find_metadata(top) == top / gradescope_export.METADATA
    inner = write_export(tmp_path / "unpacked" / "assignment_7_export", yaml.safe_dump({"submission_1": {}}))
    (tmp_path / "unpacked" / ".DS_Store").write_text("")
    assert gradescope_export.find_metadata(tmp_path / "unpacked") == inner / gradescope_export.METADATA


def test_nested_aliases_in_the_metadata_are_read_as_empty_fields_in_bounded_memory(tmp_path):
    """Each level lists the one before ten times (aliases share one object when read): as text,
    nine levels would be gigabytes. A field that is not a single value is empty."""
    levels = ["a0: &a0 [" + ", ".join(["xxxxxxxxxx"] * 10) + "]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    text = "\n".join(["bomb:", *("  " + line for line in levels)]) + "\n"
    text += "submission_1:\n  :submitters:\n  - :name: *a8\n    :email: *a8\n    :sid: '2024001'\n"
    root = write_export(tmp_path / "export", text.replace("bomb:", "submission_0:"), folders=("submission_1",))
    found = gradescope_export.read(root / gradescope_export.METADATA)
    assert [(e.key, e.submitters) for e in found] == [("submission_1", (Submitter("", "", "2024001"),))]


def test_metadata_nested_past_the_recursion_limit_is_refused_with_a_message(tmp_path):
    """5,000 `[` in a name: PyYAML's composer recurses once per level (a RecursionError once
    stopped a batch with a traceback); the batch says it cannot read the file instead."""
    text = "submission_1:\n  :submitters:\n  - :name: " + "[" * 5000 + "]" * 5000 + "\n"
    root = write_export(tmp_path / "export", text)
    with pytest.raises(gradescope_export.ExportError, match="nested too deeply"):
        gradescope_export.read(root / gradescope_export.METADATA)


def test_metadata_keys_that_are_not_text_or_files_too_large_are_refused(tmp_path, monkeypatch):
    root = write_export(tmp_path / "export", "submission_1: {}\n? [1, 2]\n: {}\n")
    with pytest.raises(gradescope_export.ExportError):
        gradescope_export.read(root / gradescope_export.METADATA)
    root = write_export(tmp_path / "dated", "submission_1: {}\n2026-03-01: {}\n")
    with pytest.raises(gradescope_export.ExportError, match="not a folder name"):
        gradescope_export.read(root / gradescope_export.METADATA)
    monkeypatch.setattr(gradescope_export, "MAX_METADATA_BYTES", 10)
    with pytest.raises(gradescope_export.ExportError, match="not an export's metadata"):
        gradescope_export.read(root / gradescope_export.METADATA)


# ---- rich output ----------------------------------------------------------------------------------
def test_diff_prints_names_and_keys_with_markup_literally(store, capsys, monkeypatch, loose_umask):
    # loose_umask puts this process's umask back afterwards: main() sets its own
    monkeypatch.setenv("COLUMNS", "250")
    name, key = "Ana [/bold] [red]x[/red] :smile:", "[/bold]k[b]"
    record(store, "c", [(key, [Submitter(name)], outcomes())])
    record(store, "c", [(key, [Submitter(name)], outcomes(PRINTED_IMG))])
    assert main(["diff", "c", "--db", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert name in out and key in out and "46" in out


def test_batch_failure_lines_print_keys_and_messages_literally():
    console = Console(file=io.StringIO(), width=200)
    batch.report_summary(batch.Summary(run_id=1, failures=[("[/bold]k", "boom [red]x[/red]")]), console)
    assert "grader failure [/bold]k: boom [red]x[/red]" in console.file.getvalue()


# ---- resuming -----------------------------------------------------------------------------------
def test_resume_regrades_what_changed_since_it_was_recorded(store, cohort_folder):
    first = Instant(outcomes(), stop_after=2)
    interrupted = run_batch(cohort_folder, store, first)
    assert interrupted.interrupted and first.keys == ["a.py", "b.py"]
    changed = STUB + "# a.py, changed\n"
    (cohort_folder / "a.py").write_text(changed, encoding="utf-8")

    second = Instant(outcomes(PRINTED_IMG))
    resumed = run_batch(cohort_folder, store, second)
    assert resumed.resumed and resumed.run_id == interrupted.run_id and resumed.already_done == 1
    assert second.keys == ["a.py", "c.py"] and resumed.graded == 2
    results = {r.key: r for r in store.results(store.run("c"))}
    assert results["a.py"].content_hash == sha256(changed)
    assert PRINTED_IMG in results["a.py"].outcomes and PRINTED_IMG not in results["b.py"].outcomes
    assert store.count("run_results") == 3 and store.count("gradings") == 4  # the old grading is kept, unlinked
    assert store.runs("c")[-1].finished_at


def test_regrade_is_honoured_when_the_latest_run_is_unfinished(store, cohort_folder):
    plain = run_batch(cohort_folder, store, Instant(outcomes(), stop_after=1))
    everything = Instant(outcomes())
    regrade = run_batch(cohort_folder, store, everything, regrade=True)
    assert not regrade.resumed and regrade.run_id != plain.run_id
    assert everything.keys == ["a.py", "b.py", "c.py"] and regrade.reused == 0  # a.py is not kept from `plain`
    assert store.runs("c")[-1].regrade and store.runs("c")[-1].finished_at

    run_batch(cohort_folder, store, Instant(outcomes(), stop_after=1), regrade=True)  # interrupted --regrade
    nothing = Instant(outcomes())
    kept = run_batch(cohort_folder, store, nothing)
    assert not kept.resumed and nothing.keys == [] and kept.reused == 3 and not store.runs("c")[-1].regrade

    interrupted = run_batch(cohort_folder, store, Instant(outcomes(), stop_after=1), regrade=True)
    rest = Instant(outcomes())
    again = run_batch(cohort_folder, store, rest, regrade=True)  # the same command: resumed, nothing twice
    assert again.resumed and again.run_id == interrupted.run_id and again.already_done == 1
    assert rest.keys == ["b.py", "c.py"]
    assert len(store.results(store.run("c"))) == 3 and all(not r.reused for r in store.results(store.run("c")))
    assert [r.finished_at is None for r in store.runs("c")] == [True, False, True, False, False]


# ---- text that is not valid Unicode ----------------------------------------------------------------
def assert_valid_utf8(folder):
    files = [p for p in folder.rglob("*") if p.is_file() and p.suffix != ".png"]
    assert files
    for path in files:
        path.read_bytes().decode("utf-8")  # strict: a lone surrogate would fail here


def test_surrogates_in_folder_names_and_messages(store, tmp_path):
    folder = tmp_path / "cohort"
    folder.mkdir()
    sources = {"st\udc80dent.py": STUB + "# one\n", "st\udc81dent.py": STUB + "# two\n"}  # bytes 0x80, 0x81
    for name, source in sources.items():
        (folder / name).write_text(source, encoding="utf-8")
    message = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": "x\ud800"},
                      {"d\udc80": "\udcff"}, 0.1, "printed \udc80\x1b[31m\n")
    executor = Instant(outcomes(message))
    summary = run_batch(folder, store, executor)
    assert summary.graded == 2 and summary.failures == []
    keys = sorted(executor.keys)
    assert len(set(keys)) == 2 and all(k.startswith("st\ufffddent.py~") for k in keys)
    assert sorted(t.source for t in executor.tasks) == sorted(sources.values())  # the original files were read
    results = store.results(store.run("c"))
    assert sorted(r.key for r in results) == keys
    assert {r.submitters[0].name for r in results} == {"st\ufffddent"}
    assert message.output.replace("\udc80\x1b", "\ufffd") in {o.output for o in results[0].outcomes}
    report.write_reports(store, "c", tmp_path / "out", CONFIG)
    assert_valid_utf8(tmp_path / "out")
    again = run_batch(folder, store, Instant(outcomes()))  # the same keys in the next run: kept
    assert (again.graded, again.reused) == (0, 2)


def test_a_newline_or_tab_in_a_file_name_never_reaches_a_key(store, tmp_path):
    """A key is one line in every writer (gradebook rows, LMS files, page tables): a newline or a
    tab in a file name is made a space and the key suffixed, like any other control character."""
    folder = tmp_path / "cohort"
    folder.mkdir()
    for name in ("mal\nnombre.py", "con\ttab.py", "bien.py"):
        (folder / name).write_text(STUB + f"# {name!r}\n", encoding="utf-8")
    executor = Instant(outcomes())
    summary = run_batch(folder, store, executor)
    assert summary.graded == 3 and summary.failures == []
    keys = sorted(executor.keys)
    assert keys[0] == "bien.py" and keys[1].startswith("con tab.py~") and keys[2].startswith("mal nombre.py~")
    report.write_reports(store, "c", tmp_path / "out", CONFIG)
    with open(tmp_path / "out" / "gradebook.csv", encoding="utf-8-sig", newline="") as handle:
        assert len(handle.read().splitlines()) == 4  # the header and one line each


def test_surrogates_in_export_names(store, tmp_path):
    """Names with lone surrogates and control characters are stored as valid text (a key with
    them is no Gradescope key: refused, above)."""
    root = write_export(tmp_path / "export", """\
"submission_1":
  :submitters:
  - {":name": "Ana \\ud800\\x01", ":email": "ana\\udc80@example.edu", ":sid": "1"}
""")
    summary = run_batch(root, store, Instant(outcomes()))
    assert summary.graded == 1
    [result] = store.results(store.run("c"))
    assert result.key == "submission_1"
    assert result.submitters == [Submitter("Ana \ufffd", "ana\ufffd@example.edu", "1")]
    report.write_reports(store, "c", tmp_path / "out", CONFIG)
    assert_valid_utf8(tmp_path / "out")


def test_a_surrogate_named_submission_is_really_graded(store, tmp_path):
    folder = tmp_path / "cohort"
    folder.mkdir()
    (folder / "st\udc80dent.py").write_text(STUB, encoding="utf-8")
    summary = batch.run_batch(folder, "c", store, CONFIG, lambda: LocalExecutor(1, CONFIG.source), console=QUIET)
    assert (summary.graded, summary.failures) == (1, [])
    [result] = store.results(store.run("c"))
    assert result.content_hash == sha256(STUB) and len(result.outcomes) == len(CONFIG.properties)
    assert all(o.status != "passed" for o in result.outcomes)  # the stub, not an empty file
    report.write_reports(store, "c", tmp_path / "out", CONFIG)
    assert_valid_utf8(tmp_path / "out")


# ---- private files -------------------------------------------------------------------------------
def test_a_new_store_and_its_wal_and_shm_are_private(tmp_path, loose_umask):
    path = tmp_path / "store.sqlite"
    store = Store(path)
    record(store, "c", [("a", [], outcomes())], finish=False)
    files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
    assert [mode(f) for f in files] == [0o600] * 3
    store.close()


def test_an_old_world_readable_store_is_made_private_when_opened(tmp_path, loose_umask):
    path = tmp_path / "store.sqlite"
    old = sqlite3.connect(path)  # as earlier versions made it; kept open so that -wal and -shm stay
    old.execute("PRAGMA journal_mode=WAL")
    with old:
        old.execute("CREATE TABLE t (x)")
    files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
    assert [mode(f) for f in files] == [0o644] * 3
    store = Store(path)
    assert [mode(f) for f in files] == [0o600] * 3
    store.close()
    old.close()


def test_reports_are_private(store, tmp_path, loose_umask):
    record(store, "c", [("submission_1", [Submitter("Ana")], outcomes(PRINTED_IMG))])
    out = tmp_path / "new" / "reports"
    report.write_reports(store, "c", out, CONFIG)
    assert [mode(f) for f in (out.parent, out, out / "students")] == [0o700] * 3
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.suffix or p.name for p in files} == {".csv", ".html", ".md", ".png", ".autograder-report"}
    assert {p: mode(p) for p in files} == {p: 0o600 for p in files}

    earlier = tmp_path / "earlier"  # reports written by an earlier version, world-readable
    (earlier / "students").mkdir(parents=True)
    (earlier / "gradebook.csv").write_text("old")
    (earlier / "students" / "submission_1.md").write_text("old")
    report.write_reports(store, "c", earlier, CONFIG)
    assert mode(earlier) == 0o755  # the folder given is the user's to set
    assert mode(earlier / "students") == 0o700
    assert mode(earlier / "gradebook.csv") == mode(earlier / "students" / "submission_1.md") == 0o600
