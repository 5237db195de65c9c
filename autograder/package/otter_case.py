"""What the generated Otter test cases call, inside Otter's kernel, at grading time.

Otter runs the student's code and then the test files in one IPython kernel. The first case that
asks grades the submission file once with this grader in a fresh interpreter (`python -m
autograder grade`), whose worker runs the student's code again in a sandboxed process of its own;
every case then reports its property's verdict from that results.json, with the grader's feedback
as the failure message. So the checks never share a process with the student's code, and the
total is the one `python -m autograder grade` gives. What Otter's kernel itself leaves open is
described in otter.py.
"""
import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

GRADER_DIR = Path(__file__).resolve().parents[2]  # holds autograder/ and grading.yml


def submission_file(folder="."):
    """The file Otter grades, by Otter's own rule: the only notebook, else the only .py script."""
    folder = Path(folder)
    notebooks = sorted(folder.glob("*.ipynb"))
    scripts = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
    return (notebooks or scripts)[0].resolve()  # Otter has already refused a folder with none


@functools.lru_cache(maxsize=None)
def verdicts():
    """{(class, property): its test in our results.json}, or the grader's error as text. Otter shows
    no top-level output, so what results.json says there once (a file that could not be imported,
    a class not written yet) leads each test's output, which only points at it."""
    with tempfile.TemporaryDirectory(prefix="attention-otter-") as out:
        done = subprocess.run(
            [sys.executable, "-E", "-m", "autograder", "grade", str(submission_file()),
             "--out", out, "--config", str(GRADER_DIR / "grading.yml")],
            cwd=GRADER_DIR, capture_output=True, text=True, check=False,
        )
        results = Path(out) / "results.json"
        if not results.exists():
            return f"the attention grader failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
        written = json.loads(results.read_text(encoding="utf-8"))
    top = written.get("output") or ""
    return {tuple(test["tags"]): {**test, "output": "\n".join(filter(None, (top, test["output"])))}
            for test in written["tests"]}


def check(cls, prop):
    """Raise unless the grader passed (cls, prop); the message is the grader's own feedback."""
    found = verdicts()
    if isinstance(found, str):
        raise RuntimeError(found)
    test = found[(cls, prop)]
    if test["status"] != "passed":
        raise AssertionError(test["output"])
