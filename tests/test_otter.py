"""The Otter package: `otter run -a` gives the same totals as our own grader.

Needs the optional extra (pip install "otter-grader[grading]==7.0.0"); skipped without it.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("otter")
from otter.test_files import ExceptionTestFile  # noqa: E402

from autograder.config import CLASSES  # noqa: E402
from autograder.package import build as builder  # noqa: E402
from autograder.package import lock  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "attention.py"
BUGGY = ROOT / "tests" / "submissions" / "buggy" / "causal_mask_off_by_one.py"


def notebook(source):
    """The .py source as a student's notebook: a shell line, the code, and a cell that prints."""
    cells = [["!python --version\n"], source.splitlines(keepends=True), ["print('listo')\n"]]
    return json.dumps({
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None,
                   "outputs": [], "source": lines} for i, lines in enumerate(cells)],
    })


@pytest.fixture(scope="module")
def otter_dir(tmp_path_factory):
    """dist/otter with Otter's own autograder.zip made there by `otter generate`."""
    folder = builder.build(tmp_path_factory.mktemp("dist"))["otter"][0]
    python = "{}.{}".format(*lock.read().python)  # as README says: Otter's image gets the lock's Python
    done = subprocess.run([sys.executable, "-m", "otter", "generate", "--python-version", python, "attention_grader"],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return folder


@pytest.fixture(scope="module")
def otter_runs(otter_dir, tmp_path_factory):
    """name → (source graded by our grader, Otter's results.json)."""
    cases = {"solution": (SOLUTION, "attention.py"), "buggy": (BUGGY, "attention.py"),
             "buggy_notebook": (BUGGY, "attention.ipynb")}
    runs = {}
    for name, (source, filename) in cases.items():
        folder = tmp_path_factory.mktemp(f"otter-{name}")
        text = source.read_text(encoding="utf-8")
        (folder / filename).write_text(notebook(text) if filename.endswith(".ipynb") else text, encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "otter", "run", "--no-logo", "-a", str(otter_dir / "autograder.zip"),
                               "-o", str(folder), filename], cwd=folder, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        runs[name] = source, json.loads((folder / "results.json").read_text(encoding="utf-8"))
    return runs


def test_otter_zip_is_otters_own(otter_dir):
    shutil.unpack_archive(otter_dir / "autograder.zip", otter_dir / "unpacked")
    unpacked = otter_dir / "unpacked"
    assert {"run_autograder", "setup.sh", "environment.yml", "otter_config.json"} <= {p.name for p in unpacked.iterdir()}
    assert (unpacked / "files" / "attention_grader" / "grading.yml").is_file()
    environment = (unpacked / "environment.yml").read_text()
    locked = lock.read()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in environment
    assert "python={}.{}".format(*locked.python) in environment
    for name in locked.closure(lock.GRADING_PACKAGES):  # the locked versions of what grading imports
        assert f"- {name}=={locked.pins[name]}\n" in environment, name
    assert "matplotlib" not in environment and "# via" not in environment


def test_otter_reads_the_points_and_visibility_of_grading_yml(otter_dir, grading, monkeypatch):
    monkeypatch.chdir(otter_dir)  # the test files find the grader beside them, as in Otter's kernel
    found = []
    for path in sorted((otter_dir / "tests").glob("*.py")):
        test_file = ExceptionTestFile.from_file(str(path))
        found += [(test_file.name, case.points, case.hidden) for case in test_file.test_cases]
    assert found == [(p.cls, p.points, p.visibility != "visible") for p in grading.properties]


@pytest.mark.parametrize("name", ["solution", "buggy", "buggy_notebook"])
def test_otter_totals_equal_grade(otter_runs, graded_run, name):
    source, results = otter_runs[name]
    ours = graded_run(source).results
    per_class = {t["name"]: t["score"] for t in results["tests"] if t["name"] in CLASSES}
    expected = {cls: sum(t["score"] for t in ours["tests"] if t["tags"][0] == cls) for cls in CLASSES}
    assert per_class == pytest.approx(expected)
    assert sum(per_class.values()) == pytest.approx(ours["score"])


def test_otter_shows_our_feedback_for_a_failed_case(otter_runs, graded_run):
    source, results = otter_runs["buggy"]
    failed = [t for t in graded_run(source).results["tests"] if t["status"] == "failed"]
    causal = next(t for t in results["tests"] if t["name"] == "CausalSelfAttention")
    assert failed and failed[0]["output"].splitlines()[0] in causal["output"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the worker gets a uid of its own only as root")
def test_otter_grades_the_reference_with_its_python_in_a_0700_folder(otter_dir, grading):
    """Otter's Gradescope image puts Python under /root/miniforge3, and /root is 0700 on stock
    images: the grader opens the search bit (only) on the way to it, and the reference gets full marks."""
    home = Path(tempfile.mkdtemp(prefix="otter-home-"))  # 0700, as /root is
    try:
        assert home.stat().st_mode & 0o777 == 0o700
        venv = home / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                       preexec_fn=lambda: os.umask(0o022))  # as a newcomer makes it, whatever this process's umask
        folder = home / "submission"
        folder.mkdir()
        shutil.copy(SOLUTION, folder / "attention.py")
        done = subprocess.run([str(venv / "bin" / "python"), "-m", "otter", "run", "--no-logo", "-a",
                               str(otter_dir / "autograder.zip"), "-o", str(folder), "attention.py"],
                              cwd=folder, capture_output=True, text=True, timeout=600,
                              env={k: v for k, v in os.environ.items() if not k.startswith("AUTOGRADER_")})
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        per_class = {t["name"]: t["score"] for t in results["tests"] if t["name"] in CLASSES}
        assert sum(per_class.values()) == grading.max_score, [t.get("output") for t in results["tests"]]
        # the worker ran as a uid of its own: the grader opened the way to this Python for it
        assert home.stat().st_mode & 0o777 == 0o701
    finally:
        shutil.rmtree(home)
