"""The grader's own errors: one root, three kinds, each with the exit code the command line gives it.

Modelled on hypothesis's errors.py: every error the grader raises about itself, its input or its
machine derives from AutograderError, so `cli.main` turns any of them into one line on stderr and
an exit code, never a traceback. What a *submission* does wrong is not here: that becomes an
outcome (outcomes.py, worker/submission_errors.SubmissionError) and a grade, not an error of the command.

Exit codes: 0 done; 1 done, and what was checked is not right (a statement out of date, an audit
survivor, a failed self-check); 2 UsageError; 3 MachineError; 4 GraderBug; 130 interrupted.
"""


class AutograderError(Exception):
    """Root of the grader's own errors. Catch this to handle any of them; see the subclasses for
    cause and fix."""

    exit_code = 2


class UsageError(AutograderError):
    """What the command was given is wrong: grading.yml, a roster, a store, a submissions folder,
    an export, an output path. The message names the file and what to change in it."""

    exit_code = 2


class MachineError(AutograderError):
    """This machine cannot run the grader's isolated worker (no uid free, an interpreter other
    users cannot reach, a process that cannot start). Nothing about the submission: fix the
    machine (README, "Fresh machines") and grade again."""

    exit_code = 3


class GraderBug(AutograderError):
    """The grader contradicts itself: the hidden suite and grading.yml disagree, or a grading slot
    died. Not the student's fault nor the machine's: report it with the message."""

    exit_code = 4
