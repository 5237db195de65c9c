"""Gradescope's entry point: grade /autograder/submission into /autograder/results/results.json.

run_autograder (shipped in autograder.zip) starts `python -m autograder.gradescope` from
/autograder/source, where the zip was unpacked. The root is /autograder unless AUTOGRADER_ROOT
says otherwise (the project's end-to-end tests use a temporary folder).

Whatever happens, a results.json is left: when the grader cannot grade (a bad grading.yml, a
worker that cannot start, a dependency missing, any exception of its own), main() writes the
failure notice of failure_results() and exits 2; when Python itself cannot start,
run_autograder copies the same notice, which `python -m autograder build` ships as
failure_results.json. Only the standard library is imported before main()'s guard.
"""
import gc
import json
import os
import sys
import traceback
from pathlib import Path

SHOWN = (None, "visible")  # test visibilities a student sees before the due date

# Shown to the student instead of a grade when the grader could not grade. Top-level output with
# no tests rather than one failed test: a failed test reads as a verdict on the student's code
# and joins the list of properties they compare between submissions, while the top-level output
# is where Gradescope puts what concerns the run as a whole. The details go to the autograder's
# own output, which instructors see.
FAILURE_OUTPUT = (
    "No se pudo calificar tu entrega: el autograder falló por un problema del curso (su configuración "
    "o el propio autograder), no por tu código. El 0 que aparece no es tu nota. Avisa al equipo docente: "
    "cuando lo corrijan, volverán a ejecutar el autograder sobre esta entrega, sin que tengas que reenviarla."
)


def failure_results(reason, error=None):
    """results.json (Gradescope's schema) for a run that graded nothing: the notice, no tests.

    Gradescope needs a score where there are no tests; 0 is the only honest number, and the
    output says that it is not a grade. extra_data says why, for instructors and scripts
    ("config", "worker", "suite", "exception" or "start"), without the details.
    """
    return {
        "score": 0,
        "output": FAILURE_OUTPUT,
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {"autograder_failed": True, "reason": reason, "error": error},
        "tests": [],
    }


def previous_line(metadata_path, language):
    """The score of the latest earlier submission, over the tests the student could see; "" if none.

    Gradescope gives each earlier submission's results.json in the metadata. Points of tests hidden
    until the due date are left out of both numbers, so that this line cannot reveal them early.
    """
    from .feedback import label

    try:
        metadata = json.loads(Path(metadata_path).read_text(encoding="utf-8"))
        earlier = sorted(metadata.get("previous_submissions") or [], key=lambda s: str(s.get("submission_time")))
        latest = earlier[-1] if earlier else {}
        tests = (latest.get("results") or {}).get("tests") or []
        shown = [t for t in tests if t.get("visibility") in SHOWN]
        score = sum(float(t.get("score", 0)) for t in shown)
        possible = sum(float(t.get("max_score", 0)) for t in shown)
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        return ""  # first submission or unreadable metadata: nothing to show
    if not shown:
        return ""
    return label("previous", language, score=f"{score:g}", max_score=f"{possible:g}")


def grade_submission(root):
    """Grade root/submission into root/results/results.json and print the summary; 0."""
    gc.disable()  # while the grader loads: suite_runner.loading_done() turns it on
    from . import config as grading_config
    from .grade import grade
    from .summary import print_summary
    from .worker.sandbox import protect_paths

    metadata = root / "submission_metadata.json"
    # The student's process must not read the hidden suite nor other users' submission data.
    protect_paths([root / "source", metadata])
    config = grading_config.load(root / "source" / "grading.yml")
    previous = previous_line(metadata, config.language)
    graded = grade(root / "submission", config, out_dir=root / "results", previous=previous)
    if previous:
        print(previous)
    print_summary(graded.scored, config.language)
    return 0


def reason_for(exc):
    """The kind of failure, by the grader's own exception classes (when they could be imported)."""
    kinds = (("autograder.config", "ConfigError", "config"), ("autograder.worker.client", "WorkerSetupError", "worker"),
             ("autograder.outcomes", "SuiteError", "suite"))
    for module, name, reason in kinds:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(exc, cls):
            return reason
    return "exception"


def main():
    os.umask(0o077)
    root = Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    results = root / "results" / "results.json"
    try:
        return grade_submission(root)
    except BaseException as exc:  # noqa: B036  whatever stops the grader, the student gets a notice
        reason = reason_for(exc)
        if reason == "exception":
            traceback.print_exc()
        print(f"error: the autograder could not grade this submission ({reason}): {type(exc).__name__}: {exc}",
              file=sys.stderr)
        if results.exists():  # grade() wrote it, last: the grade stands, only what followed failed
            print(f"{results} was written before the error and is kept", file=sys.stderr)
        else:
            from .results import write

            write(results, failure_results(reason, type(exc).__name__))
            print(f"wrote {results}: the notice that the submission was not graded", file=sys.stderr)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return 2


if __name__ == "__main__":
    sys.exit(main())
