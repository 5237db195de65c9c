"""Reports and diffs are regenerated from stored raw outcomes, rescored with the current grading.yml.

The outcomes here are written straight into a store (as batch would), so that no grading runs.
"""
import csv
import re

import pytest

from autograder import config as grading_config
from autograder.cli import main
from autograder.cohort import diff, report
from autograder.cohort.store import Store, StoredResult, Submitter
from autograder.grade import suite_version
from autograder.outcomes import Outcome

CONFIG = grading_config.load()
SCALE_FAILURE = Outcome("SelfAttention", "scale", "failed", "wrong_scale",
                        {"measured": 1.0, "expected": 0.25, "d_k": 16}, {"d_model": 16, "T": 3}, 0.4,
                        "print con ```tres``` comillas\n")


def outcomes(*failures):
    failed = {(o.cls, o.prop): o for o in failures}
    return [failed.get((p.cls, p.name), Outcome(p.cls, p.name, "passed")) for p in CONFIG.properties]


def record(store, cohort, results):
    version, suite = suite_version(CONFIG)
    run, _ = store.begin_run(cohort, version, suite, CONFIG.source, "/cohort", False)
    for key, people, graded in results:
        store.record_grading(run, key, people, "hash-" + key, graded)
    store.finish_run(run.id)
    return run


ANA = [Submitter("Ana Pérez", "ana@example.edu", "2024001"), Submitter("Luis Soto", "luis@example.edu", "7")]
MARTA = [Submitter("Marta", "marta@example.edu", "3")]


@pytest.fixture
def cohort(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    record(store, "c", [("submission_1", ANA, outcomes()), ("submission_2", MARTA, outcomes(SCALE_FAILURE))])
    yield store, tmp_path
    store.close()


def gradebook(path):
    with open(path, encoding="utf-8-sig") as handle:
        return list(csv.DictReader(handle))


def test_gradebook_has_one_row_per_student_with_class_subtotals(cohort):
    store, tmp = cohort
    report.write_reports(store, "c", tmp / "out", CONFIG)
    rows = gradebook(tmp / "out" / "gradebook.csv")
    assert [(r["Name"], r["SID"], r["Email"], r["Total Score"], r["Max Points"]) for r in rows] == [
        ("Ana Pérez", "2024001", "ana@example.edu", "48", "48"),
        ("Luis Soto", "7", "luis@example.edu", "48", "48"),
        ("Marta", "3", "marta@example.edu", "46", "48"),
    ]
    assert (rows[2]["SelfAttention"], rows[2]["MultiHeadAttention"], rows[2]["CausalSelfAttention"]) == ("11", "17", "18")


def test_student_pages_in_spanish_by_default_and_english_on_request(cohort):
    store, tmp = cohort
    report.write_reports(store, "c", tmp / "es", CONFIG)
    page = (tmp / "es" / "students" / "submission_2.md").read_text(encoding="utf-8")
    assert "**Total: 46 / 48**" in page
    assert "La escala medida de los puntajes es 1.0; se esperaba 1/√d_k = 0.25 (d_k = 16)." in page
    assert "| incorrecto |" in page
    fence = re.search(r"^(`{4,})text$", page, re.M)  # longer than the ``` the submission printed
    assert fence and page.count(fence.group(1)) == 2
    html = (tmp / "es" / "students" / "submission_2.html").read_text(encoding="utf-8")
    assert "Ana" not in html and "Marta" in html and "incorrecto" in html
    report.write_reports(store, "c", tmp / "en", grading_config.load(language="en"))
    english = (tmp / "en" / "students" / "submission_2.md").read_text(encoding="utf-8")
    assert "The measured score scale is 1.0; expected 1/√d_k = 0.25 (d_k = 16)." in english
    assert "| failed |" in english and "incorrecto" not in english


def test_summary_page_has_plots_pass_rates_and_common_failures(cohort):
    store, tmp = cohort
    report.write_reports(store, "c", tmp / "out", CONFIG)
    index = (tmp / "out" / "index.html").read_text(encoding="utf-8")
    for figure in ("histogram.png", "pass_rate_per_property.png", "pass_rate_per_class.png"):
        assert (tmp / "out" / figure).read_bytes().startswith(b"\x89PNG")
        assert figure in index
    assert "SelfAttention.scale" in index and "wrong_scale" in index
    assert "La escala medida de los puntajes es 1.0" in index
    assert re.search(r"<td>SelfAttention.scale</td><td>50 %</td>", index)
    assert 'href="students/submission_1.html"' in index


def test_editing_grading_yml_rescores_without_regrading(cohort, tmp_path):
    store, tmp = cohort
    gradings = store.count("gradings")
    edited = tmp_path / "grading.yml"
    text = CONFIG.source.replace("scale:                  {points: 2, visibility: visible, requires: [attends]}",
                                 "scale:                  {points: 5, visibility: hidden, requires: [attends]}", 1)
    assert text != CONFIG.source
    edited.write_text(text, encoding="utf-8")
    code = main(["report", "--cohort", "c", "--out", str(tmp / "edited"), "--db", str(tmp / "store.sqlite"),
                 "--config", str(edited)])
    assert code == 0
    rows = gradebook(tmp / "edited" / "gradebook.csv")
    assert [(r["Name"], r["Total Score"], r["Max Points"]) for r in rows] == [
        ("Ana Pérez", "51", "51"), ("Luis Soto", "51", "51"), ("Marta", "46", "51")]
    page = (tmp / "edited" / "students" / "submission_2.md").read_text(encoding="utf-8")
    assert "SelfAttention: escala" not in page and "MultiHeadAttention: escala" in page  # hidden: not shown ...
    assert "Total:" not in page and "pruebas ocultas" in page  # ... and neither is the total
    assert store.count("gradings") == gradings


def test_the_most_common_failures_count_a_whole_file_or_class_once():
    """An unreadable notebook filled the table with ten rows of load.bad_notebook, one per property."""
    unreadable = [Outcome(p.cls, p.name, "error", "load.bad_notebook", {"file": "x.ipynb"}) for p in CONFIG.properties]
    unwritten = [Outcome(p.cls, p.name, "error", "submission.not_implemented", {"op": "forward", "line": 3})
                 if p.cls == "MultiHeadAttention" else Outcome(p.cls, p.name, "passed") for p in CONFIG.properties]
    graded = report.rescore([StoredResult("a", [], unreadable, "h", 1, False),
                             StoredResult("b", [], unwritten, "h", 2, False)], CONFIG)
    _, _, top = report.summary_figures(graded, CONFIG)
    assert [(row["where"], row["code"], row["count"]) for row in top] == [
        ("toda la entrega (cada prueba)", "load.bad_notebook", 1),
        ("MultiHeadAttention (cada prueba)", "submission.not_implemented", 1)]


def test_report_refuses_outcomes_that_lack_a_property(cohort):
    store, tmp = cohort
    partial = [o for o in outcomes() if o.prop != "device"]
    record(store, "old", [("x", [], partial)])
    with pytest.raises(report.ReportError, match="device"):
        report.write_reports(store, "old", tmp / "out", CONFIG)


def test_diff_names_whose_score_and_which_properties_changed(cohort):
    store, _ = cohort
    regression = Outcome("CausalSelfAttention", "causality", "timeout", "submission.timeout")
    record(store, "c", [("submission_1", ANA, outcomes(regression)), ("submission_2", MARTA, outcomes()),
                        ("submission_3", [], outcomes())])
    old_run = diff.resolve(store, "c", previous=True)
    new_run = diff.resolve(store, "c")
    assert (old_run.id, new_run.id) == (1, 2) and diff.resolve(store, "c:1").id == 1
    changes = diff.compare(store.results(old_run), store.results(new_run), CONFIG)
    assert [(c.key, c.old, c.new, c.properties) for c in changes] == [
        ("submission_1", 48, 45, (("CausalSelfAttention", "causality", "passed", "timeout"),)),
        ("submission_2", 46, 48, (("SelfAttention", "scale", "failed", "passed"),)),
        ("submission_3", None, 48, ()),
    ]


def test_pages_mark_what_is_shown_after_the_due_date_and_can_leave_it_out(cohort):
    """Gradescope shows an after_due_date test only once the date has passed: a page handed out
    earlier must not show it unmarked (an outside TA's finding), and --before-due-date leaves it out,
    with the total, as Gradescope does then."""
    store, tmp = cohort
    later = [p for p in CONFIG.properties if p.visibility == "after_due_date"]
    assert later, "grading.yml holds no after_due_date test to check this with"
    title = f"{later[0].cls}: "
    assert main(["report", "--cohort", "c", "--out", str(tmp / "after"), "--db", str(tmp / "store.sqlite")]) == 0
    page = (tmp / "after" / "students" / "submission_2.md").read_text(encoding="utf-8")
    marked = [line for line in page.splitlines() if line.startswith("| ") and "(tras la fecha)" in line]
    assert len(marked) == len(later) and "se muestra recién después de la fecha límite" in page
    assert "**Total: 46 / 48**" in page
    html = (tmp / "after" / "students" / "submission_2.html").read_text(encoding="utf-8")
    assert html.count("(tras la fecha)") == len(later)
    assert main(["report", "--cohort", "c", "--out", str(tmp / "before"), "--db", str(tmp / "store.sqlite"),
                 "--before-due-date"]) == 0
    page = (tmp / "before" / "students" / "submission_2.md").read_text(encoding="utf-8")
    assert "(tras la fecha)" not in page and "Total:" not in page and title in page
    rows = gradebook(tmp / "before" / "gradebook.csv")
    assert rows[2]["Total Score"] == "46"  # the staff's gradebook keeps every test
