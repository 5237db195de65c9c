"""README's worked example, done as README says: a new property is its check, its grading.yml
entry and its catalog lines, and nothing in the engine. Done on a copy of the project, with the
check's code and grading.yml's line taken from README itself, so that README cannot drift."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTION = README[README.index("### Adding a property"):README.index("### Gradescope")]

WORDS = {  # step 3: what README describes for each catalog
    "es": {"titles": "los pesos no son negativos", "failures": "Hay un peso negativo ({value}).",
           "hints": "El softmax nunca da pesos negativos.", "checks": "ningún peso es negativo"},
    "en": {"titles": "no weight is negative", "failures": "A weight is negative ({value}).",
           "hints": "A softmax never gives negative weights.", "checks": "no weight is negative"},
}


def _readme_check():
    code = re.search(r"```python\n(.*?)```", SECTION, re.S).group(1)
    return "\n\n" + "\n".join(line[3:] if line.startswith("   ") else line for line in code.splitlines()) + "\n"


def _readme_points():
    return re.search(r"`(weights_nonnegative: \{[^`]*\})`", SECTION).group(1)


def _copy(tmp_path):
    project = tmp_path / "project"
    ignore = shutil.ignore_patterns("__pycache__", ".*")
    for name in ("autograder", "assignments", "solutions"):
        shutil.copytree(ROOT / name, project / name, ignore=ignore)
    for name in ("grading.yml", "pyproject.toml", "requirements.lock"):
        shutil.copy(ROOT / name, project / name)
    return project


def test_the_readme_example_adds_a_graded_property_with_three_edits(tmp_path):
    project = _copy(tmp_path)
    suite = project / "autograder" / "properties"
    with open(suite / "test_self_attention.py", "a", encoding="utf-8") as handle:  # 1. the check
        handle.write(_readme_check())
    grading = (project / "grading.yml").read_text(encoding="utf-8")  # 2. its points
    grading = grading.replace("  SelfAttention:\n", f"  SelfAttention:\n    {_readme_points()}\n", 1)
    (project / "grading.yml").write_text(grading, encoding="utf-8")
    for language, words in WORDS.items():  # 3. its words
        path = suite / "feedback" / f"{language}.yml"
        catalog = yaml.safe_load(path.read_text(encoding="utf-8"))
        catalog["titles"]["weights_nonnegative"] = words["titles"]
        catalog["failures"]["negative_weight"] = words["failures"]
        catalog["hints"]["weights_nonnegative"] = words["hints"]
        catalog["checks"]["weights_nonnegative"] = words["checks"]
        path.write_text(yaml.safe_dump(catalog, allow_unicode=True, sort_keys=False), encoding="utf-8")

    changed = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", "solutions/attention.py", "--out", "out"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((project / "out" / "results.json").read_text(encoding="utf-8"))
    added = [t for t in results["tests"] if t["tags"] == ["SelfAttention", "weights_nonnegative"]]
    assert len(added) == 1 and added[0]["status"] == "passed", added
    assert added[0]["name"] == "SelfAttention: los pesos no son negativos"
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) == 49
    # the copy graded itself (its suite has the new property), and the checkout was not touched
    assert subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout == changed


def test_a_property_file_that_cannot_be_imported_is_named_with_its_error(tmp_path):
    """An instructor's slip in a suite file stops grading with that file's error, not with a list
    of every property grading.yml has and the suite seems to lack."""
    project = _copy(tmp_path)
    with open(project / "autograder" / "properties" / "test_self_attention.py", "a", encoding="utf-8") as handle:
        handle.write("\n\ndef broken(:\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", "solutions/attention.py", "--out", "out"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and not (project / "out" / "results.json").exists()
    assert "test_self_attention.py could not be loaded" in done.stderr and "SyntaxError" in done.stderr, done.stderr
    assert "does not define" not in done.stderr
