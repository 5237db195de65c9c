"""The grader's own errors share one root (autograder/errors.py), and the command line turns each
kind into its exit code and one line on stderr, never a traceback."""
import importlib
import inspect
import pkgutil

import pytest

import autograder
from autograder import cli, errors
from autograder.worker.client import WorkerSetupError

# Exceptions of the package that are not the grader's own errors, and why.
NOT_GRADER_ERRORS = {
    "SubmissionError": "what the submission did: it becomes an outcome, not an error of the command",
    "SubmissionUnreadable": "the loader's verdict on a submission: an 'unreadable submission' result, graded 0",
    "SubmissionHalted": "carries a SubmissionError past hypothesis (a BaseException on purpose)",
    "StudentError": "raised in the worker, which imports nothing of the grader",
    "WireError": "the wire module is shared with the worker, which imports nothing of the grader",
    "FrameTooLarge": "a WireError: the worker turns it into its output_too_large answer",
    "MalformedReply": "a forged reply: the worker's fault, turned into a protocol outcome",
    "ZygoteGone": "an OSError the executor handles by starting another zygote",
    "PropertyFailure": "an AssertionError: pytest and hypothesis must see a failing property",
    "SchemaError": "selfcheck.py is standard library only (it checks the image before anything else)",
}


def grader_exceptions():
    found = {}
    for info in pkgutil.walk_packages(autograder.__path__, "autograder."):
        if ".properties.test_" in info.name or info.name.endswith("__main__") or info.name.endswith("zygote"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name):
                found[name] = value
    return found


def test_every_error_of_the_grader_derives_from_the_root():
    found = grader_exceptions()
    assert {"ConfigError", "WorkerSetupError", "SuiteError", "StoreError", "GraderFailure"} <= set(found)
    strays = sorted(name for name, cls in found.items()
                    if not issubclass(cls, errors.AutograderError) and name not in NOT_GRADER_ERRORS)
    assert not strays, f"give these a place in autograder/errors.py (or a reason in NOT_GRADER_ERRORS): {strays}"
    assert not set(NOT_GRADER_ERRORS) - set(found), "a listed exception no longer exists"


def test_each_kind_has_its_own_exit_code():
    codes = {kind: kind.exit_code for kind in (errors.UsageError, errors.MachineError, errors.GraderBug)}
    assert sorted(codes.values()) == [2, 3, 4]
    assert issubclass(WorkerSetupError, errors.MachineError)


@pytest.mark.parametrize("raised, code", [(errors.UsageError("grading.yml: bad"), 2),
                                          (WorkerSetupError("uid 61000 cannot run python"), 3),
                                          (errors.GraderBug("suite and grading.yml disagree"), 4)])
def test_the_command_line_prints_one_line_and_the_exit_code(monkeypatch, capsys, tmp_path, raised, code):
    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr("autograder.grade.grade", fail)
    (tmp_path / "attention.py").write_text("", encoding="utf-8")
    assert cli.main(["grade", str(tmp_path / "attention.py"), "--out", str(tmp_path)]) == code
    err = capsys.readouterr().err
    assert err == f"error: {raised}\n"
