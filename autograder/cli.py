"""Command line: python -m autograder COMMAND ...

Each command lives in the module of its stage and registers itself through register(commands);
this file only wires them together and turns the grader's own errors into a clear message.
"""
import argparse
import importlib
import os
import sys
from pathlib import Path

from . import config as grading_config
from .errors import AutograderError, GraderBug, UsageError
from .exercise import EXERCISE
from .package import lock


def cmd_grade(args):
    from .grade import grade
    from .summary import print_summary

    if not os.path.lexists(args.submission):  # a mistyped path, not a student's empty upload
        raise UsageError(f"{args.submission}: no such file or folder")
    config = grading_config.load(args.config, args.lang)
    lock.note_if_unlike_the_lock()
    graded = grade(args.submission, config, out_dir=args.out)

    print_summary(graded.scored, config.language)
    print(f"isolation: {_isolation(graded.isolation)}")
    if args.out:
        print(f"results: {Path(args.out) / 'results.json'}  ({graded.seconds:.1f} s)")
    else:
        print(f"results: none written (give --out FOLDER for results.json)  ({graded.seconds:.1f} s)")
    internal = [o for o in graded.outcomes if o.code == "grader_error"]
    if internal:
        print(f"grader error in {len(internal)} test(s): {internal[0].params.get('error')}", file=sys.stderr)
        return GraderBug.exit_code
    return 0


def _isolation(layers):
    """The worker's layers; with none, why: no code ran (an unreadable submission), or not root."""
    if layers:
        return ", ".join(layers)
    return "none (no code of the submission ran)" if os.geteuid() == 0 else "none (not root: the worker runs as you)"


def cmd_test(args):
    import pytest

    root = Path(__file__).resolve().parent.parent
    # --fast: the unit tier alone (tests marked `unit`: no worker, no subprocess), for the
    # development loop; CI runs everything. A later -m of the user's replaces this one.
    tier = ["-m", "unit"] if args.fast else []
    return int(pytest.main([str(root / "tests"), *tier, *args.pytest_args]))


# Modules that define register(commands) for further commands (build, batch, report, diff).
COMMAND_MODULES = (".package.build", ".cohort.batch", ".cohort.report", ".cohort.diff", ".audit")


def parser():
    main = argparse.ArgumentParser(prog="python -m autograder", description="Autograder for the attention exercise.")
    commands = main.add_subparsers(dest="command", required=True)

    grade = commands.add_parser("grade", help="grade one submission and write results.json")
    grade.add_argument("submission", help=f"{EXERCISE.submission}, a folder or .zip holding it, or a notebook")
    grade.add_argument("--out", help="folder for results.json")
    grading_config.add_options(grade)
    grade.set_defaults(run=cmd_grade)

    test = commands.add_parser("test", help="run the project's own tests (pytest tests/ [pytest options])")
    test.add_argument("--fast", action="store_true",
                      help="only the unit tier (pytest -m unit): seconds, no grading worker")
    test.set_defaults(run=cmd_test)
    for name in COMMAND_MODULES:
        importlib.import_module(name, __package__).register(commands)
    return main


def main(argv=None):
    os.umask(0o077)  # stores, reports and results are created private: they hold students' work
    main_parser = parser()
    args, extra = main_parser.parse_known_args(argv)
    if extra and args.command != "test":
        main_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.pytest_args = extra  # `test` passes whatever it does not know on to pytest
    try:
        return args.run(args)
    except AutograderError as exc:  # errors.py: one line and its exit code, never a traceback
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a path given that cannot be used: --out an existing file, a folder not writable
        where = f" {exc.filename}" if exc.filename else ""
        print(f"error: cannot use{where}: {exc.strerror or exc}", file=sys.stderr)
        return UsageError.exit_code
    except KeyboardInterrupt:  # a second Ctrl-C while a batch winds down: what was graded is in the store
        print("interrupted", file=sys.stderr)
        return 130
