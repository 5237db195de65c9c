"""setup.sh's last step: grade the public stub in the image just built, as Gradescope will grade
every submission, and fail the image build loudly unless all of this holds:

- run_autograder exits 0 and leaves a results.json valid under Gradescope's schema
  (selfcheck/results.schema.json, checked here without jsonschema, which the image lacks);
- it is a grade, not the failure notice: one test per property of grading.yml, 0 points in all
  (the stub implements nothing);
- the worker ran as a uid of its own (extra_data.isolation starts with "uid ");
- the venv holds exactly the versions of requirements.txt, and nothing that is not pinned there.

It needs no solution: the stub is the handout's file (attention.py), which the build ships in
selfcheck/. It grades a copy of /autograder/source in a temporary root, so the real
one keeps no trace of it. Usage, from /autograder/source: python -m autograder.package.selfcheck
"""
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2]  # /autograder/source: autograder/, grading.yml, selfcheck/
TOOLS = {"pip", "wheel"}  # what venv and setup.sh put there besides the pins


class SchemaError(Exception):
    pass


def validate(data, schema, node=None, where="results.json"):
    """Raise SchemaError unless data satisfies the JSON Schema `node` (default: schema itself).

    Only the keywords Gradescope's schema uses are known; any other stops the check, so that a
    schema that grows a keyword is never half-applied."""
    node = schema if node is None else node
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    for key, rule in node.items():
        if key in ("$schema", "$comment", "$defs", "title", "description"):
            continue
        if key == "$ref":
            target = schema
            for part in rule.removeprefix("#/").split("/"):
                target = target[part]
            validate(data, schema, target, where)
        elif key == "type":
            names = rule if isinstance(rule, list) else [rule]
            number = isinstance(data, (int, float)) and not isinstance(data, bool)
            if not any(number if n == "number" else isinstance(data, types[n]) for n in names):
                raise SchemaError(f"{where}: {data!r:.80} is not of type {rule}")
        elif key == "enum":
            if data not in rule:
                raise SchemaError(f"{where}: {data!r:.80} is not one of {rule}")
        elif key == "minimum":
            if isinstance(data, (int, float)) and data < rule:
                raise SchemaError(f"{where}: {data} is less than {rule}")
        elif key == "required":
            if isinstance(data, dict) and not set(rule) <= set(data):
                raise SchemaError(f"{where}: lacks {sorted(set(rule) - set(data))}")
        elif key == "properties":
            if isinstance(data, dict):
                for name, sub in rule.items():
                    if name in data:
                        validate(data[name], schema, sub, f"{where}.{name}")
        elif key == "additionalProperties":
            if rule is not False:
                raise SchemaError(f"unknown form of additionalProperties: {rule!r}")
            if isinstance(data, dict) and set(data) - set(node.get("properties", {})):
                raise SchemaError(f"{where}: additional properties {sorted(set(data) - set(node['properties']))}")
        elif key == "items":
            if isinstance(data, list):
                for index, item in enumerate(data):
                    validate(item, schema, rule, f"{where}[{index}]")
        elif key == "anyOf":
            errors = []
            for option in rule:
                try:
                    validate(data, schema, option, where)
                    break
                except SchemaError as exc:
                    errors.append(str(exc))
            else:
                raise SchemaError(f"{where}: is not valid under any of the given schemas ({'; '.join(errors)})")
        else:
            raise SchemaError(f"the self-check does not know the schema keyword {key!r}")


def version_problems(requirements, installed=None):
    """Where the installed distributions ({name: version}, default: this interpreter's) differ
    from requirements.txt: a pin missing or at another version, or a distribution no pin names."""
    from . import lock

    pins = lock.parse(Path(requirements).read_text(encoding="utf-8")).pins
    if installed is None:
        installed = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions()}
    installed = {lock.canonical(name): version for name, version in installed.items()}
    problems = [f"{name}=={version} is pinned but {installed[name] + ' is' if name in installed else 'nothing is'} installed"
                for name, version in sorted(pins.items()) if installed.get(name) != version]
    problems += [f"{name} {version} is installed but not pinned in requirements.txt"
                 for name, version in sorted(installed.items()) if name not in pins and name not in TOOLS]
    return problems


def results_problems(results, properties, schema):
    """What is wrong with the stub's results.json, for a grading.yml of `properties` properties."""
    try:
        validate(results, schema)
    except SchemaError as exc:
        return [f"results.json is not valid under Gradescope's schema: {exc}"]
    extra = results.get("extra_data") or {}
    if extra.get("autograder_failed"):
        return [f"the grader could not grade the stub ({extra.get('reason')}: {extra.get('error')})"]
    problems = []
    tests = results.get("tests") or []
    if len(tests) != properties:
        problems.append(f"{len(tests)} tests in results.json, {properties} properties in grading.yml")
    earned = [t.get("name") for t in tests if t.get("score")]
    if results.get("score") != 0 or earned:
        problems.append(f"the stub scored {results.get('score')} (points in {earned[:3]}): it implements nothing")
    isolation = extra.get("isolation") or [""]
    if not str(isolation[0]).startswith("uid "):
        problems.append(f"the worker did not run as a uid of its own (isolation: {isolation})")
    return problems


def grade_stub(source, timeout=600):
    """Run run_autograder on the stub in a temporary copy of source: (process, results or None)."""
    with tempfile.TemporaryDirectory(prefix="attention-selfcheck-") as folder:
        root = Path(folder)
        shutil.copytree(source, root / "source", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        (root / "submission").mkdir()
        (root / "results").mkdir()
        stub, = (source / "selfcheck").glob("*.py")  # the handout's stub, under the exercise's file name
        shutil.copy(stub, root / "submission" / stub.name)
        (root / "submission_metadata.json").write_text(json.dumps({"previous_submissions": []}), encoding="utf-8")
        process = subprocess.run(["bash", str(root / "source" / "run_autograder")], cwd=root,
                                 env={**os.environ, "AUTOGRADER_ROOT": str(root)},
                                 capture_output=True, text=True, timeout=timeout, check=False)
        written = root / "results" / "results.json"
        try:
            results = json.loads(written.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            results = None
    return process, results


def check(source=None, versions=True):
    """([problems], run_autograder's process, results.json): no problems when the stub grades as
    it must in source (default: the one this file is in) and, with versions, this interpreter
    holds exactly the pins of requirements.txt."""
    from .. import config as grading_config

    source = Path(source or SOURCE)

    problems = version_problems(source / "requirements.txt") if versions else []
    properties = len(grading_config.load(source / "grading.yml").properties)
    schema = json.loads((source / "selfcheck" / "results.schema.json").read_text(encoding="utf-8"))
    process, results = grade_stub(source)
    if process.returncode != 0:
        problems.append(f"run_autograder exited with status {process.returncode}")
    if results is None:
        problems.append("run_autograder left no readable results.json")
    else:
        problems += results_problems(results, properties, schema)
    return problems, process, results


def main():
    started = time.monotonic()
    problems, process, results = check()
    if problems:
        print("\n" + "=" * 78, file=sys.stderr)
        print("SELF-CHECK FAILED: this image would not grade correctly (public stub graded as a submission):",
              file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        print("run_autograder's output (end):", file=sys.stderr)
        print((process.stdout + process.stderr)[-4000:], file=sys.stderr)
        print("=" * 78, file=sys.stderr)
        return 1
    isolation = ", ".join(results["extra_data"]["isolation"])
    print(f"self-check passed: the public stub got 0 / {sum(t['max_score'] for t in results['tests']):g} in "
          f"{time.monotonic() - started:.0f} s ({len(results['tests'])} tests, isolation: {isolation}); "
          "the venv holds exactly the pinned versions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
