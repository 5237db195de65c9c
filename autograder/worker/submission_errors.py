"""What a submission can fail with when the grader asks it something: one SubmissionError, its
kinds declared once (KINDS), and SubmissionHalted for the failures no other input would avoid.

These are outcomes of the submission, not errors of the grader (autograder/errors.py): the
suite turns them into a test's failure, timeout or error (outcomes.py) with the Spanish
message `submission.<kind>` of the feedback catalogs.
"""
import re
from typing import NamedTuple


class Kind(NamedTuple):
    """What one kind of SubmissionError means to the grader."""

    reported: bool = False  # the worker may report it itself (anything else it sends is an exception)
    timeout: bool = False  # a deadline passed: scored as a timeout, not an error
    stops_class: bool = False  # the worker is gone or untrustworthy: the class's other tests fail fast
    input_dependent: bool = False  # other inputs might avoid it: hypothesis shrinks it to the smallest example


# Every kind of SubmissionError, each with its message `submission.<kind>` in the feedback catalogs.
KINDS = {
    "syntax_error": Kind(), "syntax_error_ipython": Kind(), "syntax_error_python312": Kind(), "import_error": Kind(),
    "missing_class": Kind(reported=True), "not_implemented": Kind(reported=True),
    "missing_class_in_notebook": Kind(),  # missing_class, of a notebook: the client names it so
    "not_copyable": Kind(reported=True, input_dependent=True),  # copy.deepcopy refused the module
    "exception": Kind(reported=True, input_dependent=True), "bad_output": Kind(reported=True, input_dependent=True),
    "not_a_module": Kind(reported=True, input_dependent=True),
    "uninitialized_parameters": Kind(reported=True, input_dependent=True),
    "module_internals": Kind(reported=True, input_dependent=True),
    "output_shape": Kind(reported=True, input_dependent=True),
    "output_dtype": Kind(reported=True, input_dependent=True),
    "grad_disabled": Kind(reported=True, input_dependent=True),
    "unreadable_output": Kind(reported=True, input_dependent=True),
    "output_too_large": Kind(reported=True, input_dependent=True),
    "memory": Kind(reported=True, stops_class=True),
    "timeout": Kind(timeout=True, stops_class=True), "class_budget": Kind(timeout=True, stops_class=True),
    "submission_budget": Kind(timeout=True, stops_class=True),
    "crash": Kind(stops_class=True), "disk": Kind(stops_class=True), "processes": Kind(stops_class=True),
    "protocol": Kind(stops_class=True),
    # the same failures while the submission is being imported, before any class is involved
    "import_timeout": Kind(timeout=True), "import_crash": Kind(), "import_memory": Kind(),
    "import_disk": Kind(), "import_processes": Kind(), "import_protocol": Kind(),
}


# Python's own TypeError when a call does not fit the function's parameters (a renamed or missing
# argument of the statement's signature), for forward or the constructor.
_SIGNATURE_MISMATCH = re.compile(r"(forward|__init__)\(\) (got an unexpected keyword argument|got multiple values for "
                                 r"argument|missing \d+ required|takes \d+ positional|takes from \d+ to \d+ positional)")


def call_does_not_fit(exc_type, message):
    """Whether an exception is Python's for a call that does not fit forward's or __init__'s
    parameters (`forward(..., attn_mask=None)` called with mask=...): the signature is at fault,
    not what the property checks."""
    return exc_type == "TypeError" and bool(_SIGNATURE_MISMATCH.search(message or ""))


class SubmissionError(Exception):
    """The submission could not answer: it raised, was missing, timed out, crashed or overused.

    kind is a key of KINDS, which says what each means to the grader.
    For a notebook, cell is the code cell and line the line within it (submission.cell_lines);
    function: the submission's function that line is in (a helper the called method calls).
    request is the position, among the requests Worker.calls sent together, of the one that got
    this answer; None when the worker answered none of them (a class already stopped, say).
    """

    def __init__(self, kind, message="", *, line=None, exc_type=None, cls=None, op=None, limit=None, cell=None,
                 exc_types=(), function=None):
        super().__init__(f"{kind}: {message}")
        self.kind, self.message, self.line, self.exc_type = kind, message, line, exc_type
        self.cls, self.op, self.limit, self.cell, self.function = cls, op, limit, cell, function
        self.exc_types = tuple(exc_types) or ((exc_type,) if exc_type else ())  # the exception's classes, own first
        self.request = None

    @property
    def raised(self):
        """The submission's own code raised (rather than timing out, crashing or overusing), or
        built a module whose lazy layers have no size yet or whose class redefines nn.Module's
        tables, as good as a constructor that raised, or one copy.deepcopy could not copy."""
        return self.kind in ("exception", "uninitialized_parameters", "module_internals", "not_copyable")

    def again(self):
        """A fresh copy to raise for a later test: re-raising one object would grow its traceback."""
        return SubmissionError(self.kind, self.message, line=self.line, exc_type=self.exc_type,
                               cls=self.cls, op=self.op, limit=self.limit, cell=self.cell, exc_types=self.exc_types,
                               function=self.function)

    def as_dict(self):
        found = {
            "kind": self.kind, "message": self.message, "line": self.line,
            "exc_type": self.exc_type, "cls": self.cls, "op": self.op, "limit": self.limit,
        }
        if self.function is not None:
            found["function"] = self.function
        return found if self.cell is None else {**found, "cell": self.cell}


class SubmissionHalted(BaseException):
    """Carries a SubmissionError that no other input would avoid (a crash, a timeout, code not
    written yet). Like pytest's own outcomes it is a BaseException, so hypothesis stops at once
    instead of searching for a smaller example of a failure that does not depend on one."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error
