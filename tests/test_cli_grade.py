"""`python -m autograder grade` as an instructor runs it: exit codes, results.json and the table."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def autograder(*args):
    return subprocess.run([sys.executable, "-m", "autograder", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, solution_path, stub_path):
    """(process, results.json) for the solution, the stub, and the stub with --lang en."""
    runs = {}
    for name, path, extra in (("solution", solution_path, ()), ("stub", stub_path, ()),
                              ("stub_en", stub_path, ("--lang", "en"))):
        out = tmp_path_factory.mktemp(name)
        process = autograder("grade", path, "--out", out, *extra)
        written = out / "results.json"
        runs[name] = process, json.loads(written.read_text(encoding="utf-8")) if written.exists() else None
    return runs


@pytest.mark.parametrize("name", ["solution", "stub", "stub_en"])
def test_grade_exits_zero_and_writes_results(graded, grading, name):
    process, written = graded[name]
    assert process.returncode == 0, process.stderr
    assert written is not None and len(written["tests"]) == len(grading.properties)
    assert "Total" in process.stdout
    assert "results.json" in process.stdout


def test_table_total_matches_results(graded, grading):
    top = grading.max_score
    assert f"{top:g} / {top:g}" in graded["solution"][0].stdout
    assert f"0 / {top:g}" in graded["stub"][0].stdout
    assert graded["solution"][1]["score"] == top and graded["stub"][1]["score"] == 0


def test_lang_en_gives_english_feedback(graded):
    spanish, english = graded["stub"], graded["stub_en"]
    assert "Resultado" in spanish[0].stdout and "Result" in english[0].stdout
    assert "Resultado" not in english[0].stdout
    for test in english[1]["tests"]:
        assert "has not been implemented yet" in test["output"], test["output"]
        assert "falta implementar" not in test["output"]
    assert english[1]["extra_data"]["language"] == "en"
    assert [t["score"] for t in english[1]["tests"]] == [t["score"] for t in spanish[1]["tests"]]


def test_a_mistyped_submission_path_exits_2_with_a_clear_message(tmp_path):
    """Once exit 0 and a table of 48 errors: an instructor's typo is a usage error, not a grade."""
    process = autograder("grade", tmp_path / "no_such.ipynb", "--out", tmp_path / "out")
    assert process.returncode == 2 and "no_such.ipynb: no such file or folder" in process.stderr
    assert "Traceback" not in process.stderr and not (tmp_path / "out").exists()


def test_missing_config_exits_2_with_a_clear_message(tmp_path, solution_path):
    process = autograder("grade", solution_path, "--out", tmp_path, "--config", "/nonexistent/grading.yml")
    assert process.returncode == 2
    assert "cannot read /nonexistent/grading.yml" in process.stderr
    assert "Traceback" not in process.stderr
    assert not (tmp_path / "results.json").exists()
