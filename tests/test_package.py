"""`python -m autograder build`: what each zip holds, and Gradescope's run_autograder end to end.

The Gradescope runs unpack autograder.zip into a fake /autograder root (AUTOGRADER_ROOT) and use
the current interpreter (AUTOGRADER_PYTHON) instead of the venv that setup.sh would install.
Also: the notice run_autograder leaves when the grader cannot grade, and setup.sh's self-check.
"""
import ast
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.gradescope import FAILURE_OUTPUT, failure_results, previous_line
from autograder.package import build as builder
from autograder.package import lock, selfcheck
from test_results_schema import VALIDATOR  # tests/ is on sys.path: the schema is read in one place

ROOT = Path(__file__).resolve().parent.parent
BUGGY = ROOT / "tests" / "submissions" / "buggy" / "causal_mask_off_by_one.py"  # as in test_otter.py: graded once
STUDENT_FILES = ["attention/ENUNCIADO.md", "attention/README.md", "attention/STATEMENT.en.md",
                 "attention/attention.py", "attention/test_attention.py"]
EARLIER = {  # an earlier submission: 3 of 5 visible points, and 1 point hidden until the due date
    "submission_time": "2025-03-01T10:00:00.000000-03:00", "score": "4.0",
    "results": {"score": 4.0, "tests": [
        {"score": 3.0, "max_score": 5.0, "visibility": "visible"},
        {"score": 1.0, "max_score": 1.0, "visibility": "after_due_date"}]},
}
OLDEST = {"submission_time": "2025-02-01T10:00:00.000000-03:00", "score": "1.0",
          "results": {"tests": [{"score": 1.0, "max_score": 5.0}]}}
# (name, submission, file name in /autograder/submission, earlier submissions in the metadata)
GRADESCOPE_CASES = [
    ("solution", ROOT / "solutions" / "attention.py", "attention.py", [OLDEST, EARLIER]),
    ("stub", ROOT / "assignments" / "attention" / "attention.py", "attention.py", []),
    ("buggy", BUGGY, "mi_entrega.py", [EARLIER]),
]


def package_files(prefix):
    """The autograder package as it must ship: every file, without caches or hidden files."""
    found = []
    for path in (ROOT / "autograder").rglob("*"):
        parts = path.relative_to(ROOT).parts
        if path.is_file() and path.suffix != ".pyc" and not any(
                p == "__pycache__" or p.startswith(".") for p in parts):
            found.append(prefix + "/".join(parts))
    return found


def zip_names(path):
    with zipfile.ZipFile(path) as archive:
        return sorted(archive.namelist())


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "autograder", "build", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "autograder.zip" in done.stdout and "otter generate" in done.stdout
    return out


def test_gradescope_zip_holds_exactly_the_grader(dist):
    expected = sorted(["setup.sh", "run_autograder", "requirements.txt", "grading.yml", "failure_results.json",
                       "selfcheck/attention.py", "selfcheck/results.schema.json", *package_files("")])
    names = zip_names(dist / "autograder.zip")
    assert names == expected
    assert {"autograder/properties/test_self_attention.py", "autograder/worker/child.py"} <= set(names)
    assert not [n for n in names if n.startswith(("solutions/", "tests/", "assignments/")) or "__pycache__" in n]
    with zipfile.ZipFile(dist / "autograder.zip") as archive:  # the self-check's stub is the public handout's
        assert archive.read("selfcheck/attention.py") == (ROOT / "assignments" / "attention" / "attention.py").read_bytes()
        assert archive.read("selfcheck/results.schema.json") == (ROOT / "tests" / "gradescope_results.schema.json").read_bytes()
        notice = json.loads(archive.read("failure_results.json"))
    assert notice == failure_results("start")
    VALIDATOR.validate(notice)


def test_gradescope_scripts_are_executable_and_use_their_own_python(dist, tmp_path):
    with zipfile.ZipFile(dist / "autograder.zip") as archive:
        modes = {info.filename: info.external_attr >> 16 & 0o777 for info in archive.infolist()}
        setup = archive.read("setup.sh").decode()
        requirements = archive.read("requirements.txt").decode()
        archive.extractall(tmp_path, ["setup.sh", "run_autograder"])
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    for script in ("setup.sh", "run_autograder"):
        checked = subprocess.run(["bash", "-n", str(tmp_path / script)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
    assert "VENV=/opt/attention-venv" in setup and '"$PY" -m venv "$VENV"' in setup
    assert setup.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in setup
    # the image build ends with the self-check: its failure fails the build
    assert setup.rstrip().splitlines()[-1] == '"$VENV/bin/python" -E -m autograder.package.selfcheck'
    assert '"$VENV/bin/python" -E -m compileall -q "$SOURCE/autograder"' in setup  # bytecode made once, in the image
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in requirements.splitlines()
    shipped = lock.parse(requirements)
    assert shipped.pins["torch"] == lock.read().pins["torch"] == "2.13.0+cpu"
    assert "# python: {}.{}".format(*lock.read().python) in requirements.splitlines()
    assert "matplotlib" not in requirements and "contourpy" not in requirements  # reports only


def test_student_zip_holds_the_handout_only(dist):
    assert zip_names(dist / "student.zip") == STUDENT_FILES


def test_otter_folder_holds_tests_grader_and_requirements(dist):
    found = sorted(p.relative_to(dist / "otter").as_posix() for p in (dist / "otter").rglob("*") if p.is_file())
    expected = sorted(["requirements.txt", "tests/q1_self_attention.py", "tests/q2_multi_head_attention.py",
                       "tests/q3_causal_self_attention.py", "attention_grader/grading.yml",
                       *package_files("attention_grader/")])
    assert found == expected


def test_nothing_shipped_has_the_content_of_a_solution(dist):
    secret = {hashlib.sha256(p.read_bytes()).digest() for p in (ROOT / "solutions").rglob("*")
              if p.is_file() and p.stat().st_size}
    shipped = [p.read_bytes() for p in (dist / "otter").rglob("*") if p.is_file()]
    for name in ("autograder.zip", "student.zip"):
        with zipfile.ZipFile(dist / name) as archive:
            shipped += [archive.read(n) for n in archive.namelist()]
    assert secret and not secret & {hashlib.sha256(data).digest() for data in shipped}


def test_build_refuses_to_ship_a_solution():
    solution = (ROOT / "solutions" / "attention.py").read_bytes()
    builder.refuse_solutions([builder.Entry("attention/attention.py", b"# stub\n")])
    with pytest.raises(builder.BuildError, match="attention/attention.py"):
        builder.refuse_solutions([builder.Entry("attention/attention.py", solution)])


def test_tree_leaves_out_caches_and_hidden_files(tmp_path):
    for name in ("a.py", "sub/b.yml", "__pycache__/a.cpython-311.pyc", "sub/c.pyc", ".hypothesis/x",
                 ".ipynb_checkpoints/n.ipynb", "sub/.pytest_cache/y"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert [e.name for e in builder.tree(tmp_path, "p")] == ["p/a.py", "p/sub/b.yml"]


def test_build_is_reproducible(dist, tmp_path):
    builder.build(tmp_path)
    for name in ("autograder.zip", "student.zip"):
        assert (tmp_path / name).read_bytes() == (dist / name).read_bytes(), name


def test_otter_cases_carry_the_points_and_visibility_of_grading_yml(dist, grading):
    found = []
    for path in sorted((dist / "otter" / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                keywords = {k.arg: ast.literal_eval(k.value) for k in node.decorator_list[0].keywords}
                cls, prop = (ast.literal_eval(a) for a in node.body[0].value.args)
                found.append((cls, prop, keywords["points"], keywords["hidden"]))
    assert found == [(p.cls, p.name, p.points, p.visibility != "visible") for p in grading.properties]


def test_previous_line_counts_only_visible_tests_of_the_latest_submission(tmp_path):
    metadata = tmp_path / "submission_metadata.json"
    metadata.write_text(json.dumps({"previous_submissions": [EARLIER, OLDEST]}))
    assert previous_line(metadata, "es") == "Puntaje de tu entrega anterior: 3 / 5"
    assert previous_line(metadata, "en") == "Score of your previous submission: 3 / 5"
    metadata.write_text(json.dumps({"previous_submissions": []}))
    assert previous_line(metadata, "es") == ""
    metadata.write_text("{not json")
    assert previous_line(metadata, "es") == ""
    assert previous_line(tmp_path / "missing.json", "es") == ""


def run_gradescope(dist, root, filename, source_text, earlier, env=None, prepare=None):
    """Unpack autograder.zip into a fake /autograder at root, run run_autograder: (process, results).

    env: variables added to the run's environment; prepare(root): called before the run."""
    with zipfile.ZipFile(dist / "autograder.zip") as archive:
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    (root / "results").mkdir()
    (root / "submission" / filename).write_text(source_text, encoding="utf-8")
    (root / "submission_metadata.json").write_text(json.dumps({
        "id": 1, "created_at": "2025-03-02T10:00:00.000000-03:00", "previous_submissions": earlier,
        "users": [{"email": "ana@example.com", "id": 7, "name": "Ana"}],
        "assignment": {"title": "Atención", "total_points": "48.0"}}))
    if prepare:
        prepare(root)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable, **(env or {})}
    process = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, cwd=root,
                             capture_output=True, text=True, timeout=600)
    written = root / "results" / "results.json"
    return process, json.loads(written.read_text(encoding="utf-8")) if written.exists() else None


@pytest.fixture(scope="module")
def gradescope_runs(dist, tmp_path_factory):
    """name → (run_autograder's process, results.json or None), each in its own fake /autograder."""
    return {name: run_gradescope(dist, tmp_path_factory.mktemp(f"autograder-{name}"), filename,
                                 source.read_text(encoding="utf-8"), earlier)
            for name, source, filename, earlier in GRADESCOPE_CASES}


@pytest.mark.parametrize("name", [case[0] for case in GRADESCOPE_CASES])
def test_run_autograder_scores_like_grade(gradescope_runs, graded_run, name):
    process, results = gradescope_runs[name]
    assert process.returncode == 0, process.stderr[-3000:]
    assert results is not None
    source = next(case[1] for case in GRADESCOPE_CASES if case[0] == name)
    graded = graded_run(source).results
    assert results["score"] == graded["score"]
    assert results["tests"] == graded["tests"]  # same points, statuses, names and feedback


def test_run_autograder_scores_span_the_range(gradescope_runs, grading):
    scores = {name: results["score"] for name, (_, results) in gradescope_runs.items()}
    assert scores["solution"] == grading.max_score and scores["stub"] == 0
    assert 0 < scores["buggy"] < grading.max_score


def test_run_autograder_shows_the_previous_score(gradescope_runs):
    line = "Puntaje de tu entrega anterior: 3 / 5"
    for name in ("solution", "buggy"):
        process, results = gradescope_runs[name]
        assert results["output"] == line and line in process.stdout
    # no earlier submission: only what all the stub's tests share, said once
    assert gradescope_runs["stub"][1]["output"].startswith("Tu archivo todavía es la plantilla del enunciado")


@pytest.mark.parametrize("name", [case[0] for case in GRADESCOPE_CASES])
def test_run_autograder_results_are_valid(gradescope_runs, grading, name):
    results = gradescope_runs[name][1]
    VALIDATOR.validate(results)
    assert len(results["tests"]) == len(grading.properties)
    for test in results["tests"]:
        assert {"score", "max_score", "name", "visibility", "output"} <= set(test)
        assert test["visibility"] in ("visible", "hidden", "after_due_date", "after_published")


@pytest.mark.skipif(os.geteuid() != 0, reason="the worker changes user only when the grader runs as root")
def test_run_autograder_as_root_keeps_the_grader_out_of_the_students_reach(dist, tmp_path, grading):
    """The solution, led by a probe that ends the import if it can reach a private path."""
    private = [tmp_path / "source" / "grading.yml", tmp_path / "source" / "autograder" / "properties" / "checks.py",
               tmp_path / "submission_metadata.json", tmp_path / "results" / "probe.txt"]
    probe = (f"import os\nassert os.getuid() != 0\nfor _path in {[str(p) for p in private]!r}:\n"
             "    try:\n        open(_path, 'a' if _path.endswith('probe.txt') else 'r')\n"
             "    except PermissionError:\n        continue\n    raise SystemExit('reached ' + _path)\n")
    solution = (ROOT / "solutions" / "attention.py").read_text(encoding="utf-8")
    # The uid layer alone, as on Gradescope (Docker refuses namespaces); with a mount namespace the
    # worker would not even see these paths under the host's /tmp (FileNotFoundError).
    process, results = run_gradescope(dist, tmp_path, "attention.py", probe + solution, [],
                                      env={"AUTOGRADER_NAMESPACES": "off"})
    assert results is not None, process.stderr[-3000:]
    assert results["score"] == grading.max_score, results["tests"][0]["output"]
    isolation = results["extra_data"]["isolation"]
    assert isolation[0].startswith("uid ") and "mount" not in isolation


# ---- when the grader cannot grade: a notice, never "The autograder failed to execute correctly" --

def break_grading_yml(root):
    (root / "source" / "grading.yml").write_text("properties: [unclosed\n", encoding="utf-8")


def break_summary(root):  # a module of the grader that raises: a Python exception of the grader's own
    (root / "source" / "autograder" / "summary.py").write_text("raise RuntimeError('broken on purpose')\n")


def unrunnable_python(root):
    (root / "not-a-python").write_text("not a program\n")  # exists, but no one may execute it


# name → (environment, prepare, the reason results.json gives)
FAILURES = {
    "bad_grading_yml": ({}, break_grading_yml, "config"),
    "worker_cannot_start": ({"AUTOGRADER_WORKER_PYTHON": "{root}/not-a-python"}, unrunnable_python, "worker"),
    "no_venv": ({"AUTOGRADER_PYTHON": "/nonexistent/attention-venv/bin/python"}, None, "start"),
    "grader_exception": ({}, break_summary, "exception"),
}


@pytest.mark.parametrize("name", list(FAILURES))
def test_run_autograder_leaves_a_notice_when_the_grader_cannot_grade(dist, tmp_path, name):
    env, prepare, reason = FAILURES[name]
    env = {key: value.format(root=tmp_path) for key, value in env.items()}
    process, results = run_gradescope(dist, tmp_path, "attention.py", (ROOT / "solutions" / "attention.py").read_text(
        encoding="utf-8"), [], env=env, prepare=prepare)
    assert process.returncode == 0  # Gradescope judges by results.json, which says what happened
    assert results is not None, process.stderr[-3000:]
    VALIDATOR.validate(results)
    assert results["output"] == FAILURE_OUTPUT and "no por tu código" in results["output"]
    assert results["tests"] == [] and results["score"] == 0
    assert results["extra_data"]["autograder_failed"] is True and results["extra_data"]["reason"] == reason
    assert "run_autograder" in process.stderr or "error: the autograder could not grade" in process.stderr


# ---- setup.sh's self-check: the public stub, graded in the built image -----------------------

@pytest.fixture(scope="module")
def unpacked(dist, tmp_path_factory):
    """autograder.zip as setup.sh finds it in /autograder/source."""
    source = tmp_path_factory.mktemp("source")
    with zipfile.ZipFile(dist / "autograder.zip") as archive:
        archive.extractall(source)
    return source


@pytest.mark.skipif(os.geteuid() != 0, reason="the worker changes user only when the grader runs as root")
def test_self_check_passes_on_a_sound_image(unpacked, monkeypatch):
    """As in setup.sh, but with this interpreter for the venv: its versions are checked apart."""
    monkeypatch.setenv("AUTOGRADER_PYTHON", sys.executable)
    problems, process, results = selfcheck.check(unpacked, versions=False)
    assert problems == [], process.stderr[-3000:]
    assert results["score"] == 0 and results["extra_data"]["isolation"][0].startswith("uid ")
    assert not (unpacked / "results").exists()  # it graded a copy: the source keeps no trace


@pytest.mark.skipif(os.geteuid() != 0, reason="the worker changes user only when the grader runs as root")
def test_self_check_fails_loudly_without_a_uid_of_its_own(unpacked, monkeypatch, capsys):
    monkeypatch.setenv("AUTOGRADER_PYTHON", sys.executable)
    monkeypatch.setenv("AUTOGRADER_WORKER_UID", "none")
    monkeypatch.setattr(selfcheck, "SOURCE", unpacked)
    monkeypatch.setattr(selfcheck, "version_problems", lambda requirements: [])
    assert selfcheck.main() == 1
    err = capsys.readouterr().err
    assert "SELF-CHECK FAILED" in err and "did not run as a uid of its own" in err


def test_self_check_finds_each_fault_of_the_stubs_results(gradescope_runs, grading):
    schema = json.loads((ROOT / "tests" / "gradescope_results.schema.json").read_text(encoding="utf-8"))
    count = len(grading.properties)
    stub = gradescope_runs["stub"][1]
    problems = selfcheck.results_problems(stub, count, schema)
    assert all("uid of its own" in p for p in problems) and (problems == []) == (os.geteuid() == 0)
    solution = gradescope_runs["solution"][1]
    assert f"scored {solution['score']}" in " ".join(selfcheck.results_problems(solution, count, schema))
    assert "could not grade" in selfcheck.results_problems(failure_results("config", "ConfigError"), count, schema)[0]
    assert f"3 tests in results.json, {count} properties" in " ".join(
        selfcheck.results_problems({**stub, "tests": stub["tests"][:3]}, count, schema))
    assert "schema" in selfcheck.results_problems({**stub, "grade": 0}, count, schema)[0]


def test_self_check_schema_validation_agrees_with_jsonschema(gradescope_runs):
    schema = json.loads((ROOT / "tests" / "gradescope_results.schema.json").read_text(encoding="utf-8"))
    valid = [results for _, results in gradescope_runs.values()] + [failure_results("start"), {"tests": []}]
    invalid = [{"tests": [{"score": 1, "status": "ok"}]}, {"score": 1, "visibility": "students"},
               {"score": 1, "tests": [{"score": 1, "number": 1.3}]}, {"score": 1, "tests": [{"score": 1, "points": 1}]},
               {"score": 1, "grade": 1}, {"tests": [{"max_score": 1}]}, {"score": True}, {"score": 1, "execution_time": -1},
               {"score": 1, "leaderboard": [{"name": "t", "value": 1, "order": "up"}]}, {"score": 1, "leaderboard": [{"name": "t"}]}]
    for data in valid:
        VALIDATOR.validate(data)
        selfcheck.validate(data, schema)
    for data in invalid:
        assert list(VALIDATOR.iter_errors(data)), data
        with pytest.raises(selfcheck.SchemaError):
            selfcheck.validate(data, schema)
    with pytest.raises(selfcheck.SchemaError, match="does not know"):
        selfcheck.validate({}, {"type": "object", "patternProperties": {}})


def test_self_check_compares_the_venv_with_the_pins(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# python: 3.11\n--extra-index-url https://example.org\nnumpy==2.4.6\ntorch==2.13.0+cpu\n")
    assert selfcheck.version_problems(requirements, {"numpy": "2.4.6", "torch": "2.13.0+cpu", "pip": "25.0"}) == []
    problems = selfcheck.version_problems(requirements, {"NumPy": "2.4.5", "matplotlib": "3.11.2", "pip": "25.0"})
    assert problems == ["numpy==2.4.6 is pinned but 2.4.5 is installed", "torch==2.13.0+cpu is pinned but nothing is installed",
                        "matplotlib 3.11.2 is installed but not pinned in requirements.txt"]
