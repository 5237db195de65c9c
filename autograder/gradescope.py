"""Gradescope's entry point: grade /autograder/submission into /autograder/results/results.json.

run_autograder (shipped in autograder.zip) starts `python -m autograder.gradescope` from
/autograder/source, where the zip was unpacked. The root is /autograder unless AUTOGRADER_ROOT
says otherwise (the project's end-to-end tests use a temporary folder).
"""
import json
import os
import sys
from pathlib import Path

from . import config as grading_config
from .feedback import label
from .grade import grade
from .outcomes import SuiteError
from .summary import print_summary
from .worker.client import WorkerSetupError
from .worker.sandbox import protect_paths

SHOWN = (None, "visible")  # test visibilities a student sees before the due date


def previous_line(metadata_path, language):
    """The score of the latest earlier submission, over the tests the student could see; "" if none.

    Gradescope gives each earlier submission's results.json in the metadata. Points of tests hidden
    until the due date are left out of both numbers, so that this line cannot reveal them early.
    """
    try:
        metadata = json.loads(Path(metadata_path).read_text(encoding="utf-8"))
        earlier = sorted(metadata.get("previous_submissions") or [], key=lambda s: str(s.get("submission_time")))
        latest = earlier[-1] if earlier else {}
        tests = (latest.get("results") or {}).get("tests") or []
        shown = [t for t in tests if t.get("visibility") in SHOWN]
        score = sum(float(t.get("score", 0)) for t in shown)
        possible = sum(float(t.get("max_score", 0)) for t in shown)
    except (OSError, ValueError, TypeError, AttributeError):
        return ""  # first submission or unreadable metadata: nothing to show
    if not shown:
        return ""
    return label("previous", language, score=f"{score:g}", max_score=f"{possible:g}")


def main():
    os.umask(0o077)
    root = Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    metadata = root / "submission_metadata.json"
    # The student's process must not read the hidden suite nor other users' submission data.
    protect_paths([root / "source", metadata])
    try:
        config = grading_config.load(root / "source" / "grading.yml")
        previous = previous_line(metadata, config.language)
        graded = grade(root / "submission", config, out_dir=root / "results", previous=previous)
    except (grading_config.ConfigError, WorkerSetupError, SuiteError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if previous:
        print(previous)
    print_summary(graded.scored, config.language)
    return 0


if __name__ == "__main__":
    sys.exit(main())
