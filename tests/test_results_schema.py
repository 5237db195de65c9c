"""results.json follows Gradescope's published schema, whatever the submission did."""
import json
import re
from pathlib import Path

import jsonschema
import pytest

SCHEMA = json.loads((Path(__file__).resolve().parent / "gradescope_results.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
BUGGY = Path(__file__).resolve().parent / "submissions" / "buggy" / "mha_split_without_transpose.py"


@pytest.mark.unit
def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("broken, complaint", [
    ({"tests": [{"score": 1, "status": "ok"}]}, "'ok' is not one of"),
    ({"score": 1, "visibility": "students"}, "'students' is not one of"),
    ({"score": 1, "tests": [{"score": 1, "number": 1.3}]}, "1.3 is not of type 'string'"),
    ({"score": 1, "tests": [{"score": 1, "points": 1}]}, "Additional properties"),
    ({"score": 1, "grade": 1}, "Additional properties"),
    ({"tests": [{"max_score": 1}]}, "is not valid under any of the given schemas"),
    ({"score": 1, "leaderboard": [{"name": "t", "value": 1, "order": "up"}]}, "'up' is not one of"),
])
@pytest.mark.unit
def test_schema_rejects_what_gradescope_rejects(broken, complaint):
    errors = [e.message for e in VALIDATOR.iter_errors(broken)]
    assert any(complaint in e for e in errors), errors


@pytest.fixture(scope="module")
def written(graded_run, solution_path, stub_path, tmp_path_factory, grading):
    """results.json as written for the solution, the stub, a buggy variant and an unreadable upload."""
    from autograder.grade import grade

    unreadable = tmp_path_factory.mktemp("unreadable")
    (unreadable / "entrega.zip").write_bytes(b"not a zip")
    grade(unreadable / "entrega.zip", grading, out_dir=unreadable)
    paths = {"solution": graded_run(solution_path).results_path, "stub": graded_run(stub_path).results_path,
             "buggy": graded_run(BUGGY).results_path, "unreadable": unreadable / "results.json"}
    return {name: (path.stat().st_size, json.loads(path.read_text(encoding="utf-8"), parse_constant=not_json))
            for name, path in paths.items()}


def not_json(constant):
    raise ValueError(f"{constant} is not valid JSON")


@pytest.mark.parametrize("name", ["solution", "stub", "buggy", "unreadable"])
def test_results_json_is_valid(written, grading, name):
    size, data = written[name]
    VALIDATOR.validate(data)
    assert size < 1_000_000
    assert len(data["tests"]) == len(grading.properties)
    for test in data["tests"]:
        assert re.fullmatch(r"[1-9]\d*\.[1-9]\d*", test["number"]), test["number"]
        # A 0-point test (a prerequisite such as attends) earns nothing either way: its status is its outcome's.
        passed = test["score"] == test["max_score"] and (test["max_score"] > 0 or test["extra_data"]["outcome"] == "passed")
        assert test["status"] == ("passed" if passed else "failed")
        assert test["output"]
    numbers = [t["number"] for t in data["tests"]]
    assert len(set(numbers)) == len(numbers)
    assert data["score"] == pytest.approx(sum(t["score"] for t in data["tests"]))


def test_scores_span_the_range(written, grading):
    assert written["solution"][1]["score"] == grading.max_score
    assert written["stub"][1]["score"] == written["unreadable"][1]["score"] == 0
    assert 0 < written["buggy"][1]["score"] < grading.max_score
