"""Otter-grader 7 test files generated from grading.yml: one file per class, one case per property.

Each case has the property's points, and hidden=True unless grading.yml makes it visible. It
checks nothing itself: it asks our grader for its verdict (otter_case.py), so that `otter run`
and `python -m autograder grade` give the same total.

What Otter's same-kernel execution does and does not protect. Otter runs the student's file (or
every cell of the notebook) in an IPython kernel, then runs the test files in that same kernel.
- Kept: the checks themselves run in a fresh interpreter that the test cases start, and the
  student's code is graded there in our sandboxed worker (limits, timeouts, another uid as root).
  Whatever the student's code left in the kernel (seeds, patched torch or numpy functions, global
  state) cannot change a verdict; notebook cells that train or plot are not run by our grader.
- Not kept: before any test runs, the student's code has run in Otter's kernel as the grading
  user (root on Gradescope), with no timeout and no limits. It can patch Otter's classes or this
  package's check() and score full marks (reproduced: four lines at the top of the stub give
  48/48 under `otter run`, 0/48 under our grader); read the test files and the support folder
  (hidden suite and grading.yml included) and change them; hang or crash the kernel; and write
  the pickle of results that Otter's own process loads. Use Otter where students are trusted
  (practice, courses already on Otter); for marks that matter, upload autograder.zip instead,
  where the student's code only ever runs in the sandboxed worker.
"""
import re

from ..feedback import title

GRADER_FOLDER = "attention_grader"  # Otter copies its support files next to the submission

HEADER = '''"""Otter test file for {cls}, generated from grading.yml by `python -m autograder build`.

Rebuild instead of editing. Every case delegates to the attention grader, which grades the
submission once, in processes of its own (autograder/package/otter_case.py).
"""
import os
import sys

from otter.test_files import test_case

if os.path.abspath({folder!r}) not in sys.path:
    sys.path.insert(0, os.path.abspath({folder!r}))
from autograder.package.otter_case import check  # noqa: E402

OK_FORMAT = False
name = {cls!r}
'''

CASE = '''

@test_case(name={title!r}, points={points!r}, hidden={hidden!r})
def case_{prop}():
    check({cls!r}, {prop!r})
'''


def _snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_files(config):
    """{file name: source} of Otter's tests/ folder for this grading.yml, in its class order."""
    files = {}
    for index, cls in enumerate(config.classes, 1):
        parts = [HEADER.format(cls=cls, folder=GRADER_FOLDER)]
        for prop in (p for p in config.properties if p.cls == cls):
            parts.append(CASE.format(cls=cls, prop=prop.name, points=prop.points,
                                     hidden=prop.visibility != "visible",
                                     title=title(cls, prop.name, config.language)))
        files[f"q{index}_{_snake(cls)}.py"] = "".join(parts)
    return files
