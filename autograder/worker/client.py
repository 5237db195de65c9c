"""The grader's side of the trust boundary: starts the worker, sends requests, enforces limits.

Every request into the submission goes through Worker.call (or Worker.calls, which sends a few
at once and reads every answer). Worker owns the process's life and the framing; each request
gets the deadline of the tightest of its time budgets (budgets.py), and while it waits the grader
samples the worker's memory, processes and disk (watch.py) and drains its output into a capped
buffer (capture.py). What the submission can fail with is in submission_errors.py. A class that
timed out or crashed the worker is marked dead, so its remaining tests fail at once with the same
reason instead of each waiting again.
Nothing the worker sends is believed beyond its plain values: its replies are size-capped
frames of JSON and raw arrays, its output is kept only up to limits.output_kib per test.
"""
import itertools
import os
import select
import signal
import subprocess
import sys
import time

from ..errors import GraderBug, MachineError
from . import protocol, wire
from ..submission import cell_lines, ipython_command, newer_syntax_line
from ..text import clean_tree, json_needs_cleaning
from .budgets import Budgets
from .capture import OutputCapture
from .sandbox import Sandbox, UidUnavailable, harden_grader
from .submission_errors import KINDS, Kind, SubmissionError, SubmissionHalted
from .watch import ResourceWatch, worker_processes

POLL_S = 0.05  # how often a wait wakes up to drain output


class WorkerSetupError(MachineError):
    """The worker could not be started at all: a problem of the grading machine, not the student."""


# The requests one exchange may send (the suite sends at most 15: train_dropout's rare rate), and what
# their replies can hold unread: one frame of the largest size each.
MAX_REQUESTS = 16
MAX_INBOX_BYTES = MAX_REQUESTS * (wire.PREFIX_SIZE + wire.MAX_FRAME_BYTES)


def _names(value):
    """The exception's class names the worker sent (a list of strings), bounded; () for anything else.
    Only names a class statement could have given (identifiers, dotted): a class's __name__ can be
    set to any text, such as a sentence that reads like the grader's own."""
    if not isinstance(value, list):
        return ()
    return tuple(name[:wire.MAX_NAME_CHARS] for name in value[:8] if isinstance(name, str) and _is_class_name(name))


def _exception_type(error):
    """The name of the exception's class, or of its first base with a name a class statement gives."""
    types = error.get("types")
    return next(iter(_names([error.get("type"), *(types if isinstance(types, list) else ())])), None)


def _is_class_name(name):
    return all(part.isidentifier() for part in name.split("."))


def _label(op, args):
    """How a request is named in failures: the method it calls, or __init__ for a build."""
    return args.get("method") or ("__init__" if op == "build" else op)


class Worker:
    """One submission's worker process, restarted on demand after a class kills it."""

    def __init__(self, source_text, limits, uid=None, python=None):
        self.limits = limits
        self.source_text = source_text
        self.cells = cell_lines(source_text)  # a notebook's map back to the student's cells; None for a .py
        self.uid = uid
        self.python = python or os.environ.get("AUTOGRADER_WORKER_PYTHON") or sys.executable
        self.proc = None
        self.sandbox = None
        self.fatal = None
        self.dead = {}
        self.budgets = Budgets(limits)
        self.output = OutputCapture(limits.output_kib * 1024)
        self.watch = ResourceWatch(limits)
        self.layers = []
        self.cuda = None  # sees_cuda's answer, once asked
        self.last_label = {}  # class -> what its latest request called ("forward", "build"...)
        # Names for the modules built on this worker, from 0 for each submission: a count kept across a
        # batch slot's submissions would tell the next one how far the last got.
        self.handles = itertools.count()
        self.facts = {}  # what a property learned once of this submission, for the others (say, a wrong default)
        self.released = []  # handles of modules no longer held here (harness.Remote): the next build lets go of them

    # ---- public API --------------------------------------------------------------------------
    def call(self, owner, op, **args):
        """Send one request on behalf of class `owner` and return the worker's answer."""
        answer, = self.calls(owner, [(op, args)])
        if isinstance(answer, SubmissionError):
            raise answer
        return answer

    def calls(self, owner, requests):
        """Send several (op, args) requests of class `owner` at once; return, in order, each
        one's answer or the SubmissionError it failed with, for the caller to raise in its order.

        The worker reads the next request as soon as it has answered one, so a build and the
        first call on it cost one exchange instead of two. Each request keeps its own deadline
        and its own name in failures, and every answer the worker sends is read, so none is left
        for the next exchange. If the first failure is one that no input avoids (a timeout, a
        crash, code not written yet...), it is raised as SubmissionHalted instead.
        """
        if len(requests) > MAX_REQUESTS:  # the inbox's bound counts on it
            raise GraderBug(f"{len(requests)} requests in one exchange (at most {MAX_REQUESTS})")
        if self.released and requests[0][0] == "build":  # the worker lets go of them as it builds
            requests = [("build", {**requests[0][1], "release": list(self.released)}), *requests[1:]]
            self.released.clear()  # in place: the finalizers of the modules still held append to this list
        try:
            self._send_requests(owner, requests)
        except SubmissionError as exc:
            raise SubmissionHalted(exc) from None
        answers = []
        for index, (op, args) in enumerate(requests):
            try:
                answers.append(self._answer(owner, op, args))
            except SubmissionError as exc:
                exc.request = index
                answers.append(exc)
                if self.proc is None:  # the worker is gone: no answer is left to read
                    answers += [exc] * (len(requests) - len(answers))
                    break
        failure = next((a for a in answers if isinstance(a, SubmissionError)), None)
        if failure is not None and not KINDS[failure.kind].input_dependent:
            raise SubmissionHalted(failure)
        return answers

    def check_limits(self, owner):
        """Sample memory, processes and disk now, on behalf of class `owner`, and fail as its
        latest request would have. Called as each test ends, so that whether a test passes never
        depends on where the 100 ms samples fell: on a loaded machine, a test that filled memory
        outside any RSS and returned quickly could pass, and the next few with it."""
        if self.proc is None or not self.ready or self.fatal or owner in self.dead:
            return
        try:
            self.watch.check_now(self.proc.pid, self.sandbox)
        except SubmissionError as exc:
            self._failed(owner, self.last_label.get(owner, "forward"), exc)
            raise SubmissionHalted(exc) from None

    def sees_cuda(self, owner):
        """Whether the worker sees a GPU (asked once, on behalf of class `owner`): then the device
        checks run there too."""
        if self.cuda is None:
            self.cuda = self.call(owner, "probe")["cuda"]
        return self.cuda

    def _send_requests(self, cls, requests):
        if self.fatal:
            raise self.fatal.again()
        if cls in self.dead:
            raise self.dead[cls].again()
        self._ensure_started()
        if self.fatal:
            raise self.fatal.again()
        op, args = requests[0]
        frames = b"".join(wire.encode({"op": op, "args": args}) for op, args in requests)
        self._timed(cls, _label(op, args), lambda deadline: self._send(frames, deadline))

    def _answer(self, cls, op, args):
        """Wait for the answer to the oldest request not yet answered."""
        label = _label(op, args)
        reply = self._timed(cls, label, self._receive)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            said = error.get("kind")  # anything JSON holds: only a declared kind's name is believed
            kind = said if isinstance(said, str) and KINDS.get(said, Kind()).reported else "exception"
            if kind == "missing_class" and self.cells is not None:  # what the notebook's kept code lacks
                kind = "missing_class_in_notebook"
            raise SubmissionError(
                kind, str(error.get("message", ""))[:500], **self._where(error.get("line")),
                function=next(iter(_names([error.get("function")])), None) if error.get("line") is not None else None,
                exc_type=_exception_type(error), cls=cls, op=label,
                limit=self.limits.memory_mib if kind == "memory" else None, exc_types=_names(error.get("types")),
            )
        try:
            protocol.check(op, reply.get("ok"), args)
        except protocol.MalformedReply:
            raise SubmissionError("protocol", f"malformed {op} reply", cls=cls, op=label) from None
        return reply["ok"]

    def _where(self, line):
        """line= (and cell=, for a notebook) of a line the worker reported in the file it imported."""
        if not isinstance(line, int):
            return {"line": None}
        found = self.cells.locate(line) if self.cells else None
        return {"line": line} if found is None else {"cell": found[0], "line": found[1]}

    def _timed(self, cls, label, step):
        """Run step(deadline) under the tightest of the request's, class's and submission's
        budgets, charging the time to the class; a failure marks the class or the worker."""
        kind, budget, limit = self.budgets.tightest(cls)
        self.last_label[cls] = label
        begin = time.monotonic()
        try:
            if budget <= 0:
                raise SubmissionError("timeout")
            return step(begin + budget)
        except SubmissionError as exc:
            if exc.kind == "timeout":
                exc.kind, exc.limit = kind, limit
            self._failed(cls, label, exc)
            raise
        finally:
            self.budgets.charge(cls, time.monotonic() - begin)

    def _failed(self, cls, label, exc):
        """Name the failed request, and stop its class or the whole worker if its kind says so."""
        exc.cls, exc.op = cls, label
        if KINDS[exc.kind].stops_class:
            self.dead[cls] = exc
            self.stop()
        if exc.kind == "submission_budget":
            self.fatal = exc

    def take_output(self):
        """What the submission printed since the last call, capped to limits.output_kib."""
        return self.output.take()

    @property
    def peak_rss(self):
        return self.watch.peak_rss

    def stop(self):
        """Kill the worker's whole session, then let the sandbox kill and remove everything of its uid."""
        if self.proc is None:
            return
        for pid, _ in worker_processes(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()  # reaped first, so that the uid's kill does not wait on it
        self.sandbox.kill()
        for fd in (self.request_fd, self.response_fd, self.output_fd):
            os.close(fd)
        self.sandbox.cleanup()
        self.proc = None

    # ---- process management -----------------------------------------------------------------
    def start(self):
        """Start the worker process without waiting for it: torch imports while the suite loads."""
        if self.proc is not None:
            return
        harden_grader()
        try:
            self.sandbox = Sandbox(self.source_text, self.limits, self.uid, self.python)
        except UidUnavailable as exc:
            raise WorkerSetupError(str(exc)) from None
        self.layers = self.sandbox.layers
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            self.proc = self._spawn(req_r, resp_w, out_w)
        except (OSError, subprocess.SubprocessError) as exc:
            for fd in (req_r, req_w, resp_r, resp_w, out_r, out_w):
                os.close(fd)
            self.sandbox.kill()
            self.sandbox.cleanup()
            who = "the grader's user" if self.uid is None else f"the worker's uid {self.uid}"
            raise WorkerSetupError(
                f"cannot start the worker ({exc}): {who} must be able to run {self.python}. "
                "Install Python where other users can reach it (or chmod o+x its parent folders), "
                "or set AUTOGRADER_WORKER_UID=none to run the worker as the grader's own user."
            ) from None
        for fd in (req_r, resp_w, out_w):
            os.close(fd)
        self.request_fd, self.response_fd, self.output_fd = req_w, resp_r, out_r
        self.output_open = True
        self.inbox = bytearray()  # reply bytes read but not yet taken
        os.set_blocking(req_w, False)
        self.ready = False
        self.spawned_at = time.monotonic()

    def _spawn(self, req_r, resp_w, out_w):
        """Run child.py in the sandbox; a subclass may fork it from a warm zygote instead (zygote.py).
        -s, not -I: the environment is the sandbox's whole (nothing of the grader's), and -I's -E would
        ignore its PYTHONHASHSEED: a set of strings was iterated in another order in each grading, and
        a file whose result hung on it got another score each time."""
        return subprocess.Popen(
            [self.python, "-s", str(self.sandbox.child), str(req_r), str(resp_w), str(self.sandbox.submission)],
            stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, pass_fds=(req_r, resp_w),
            cwd=self.sandbox.home, env=self.sandbox.env(), start_new_session=True,
            preexec_fn=self.sandbox.preexec,
        )

    def _ensure_started(self):
        self.start()
        if self.ready:
            return
        elapsed = time.monotonic() - self.spawned_at
        budget = min(self.limits.import_s - elapsed, self.budgets.submission_left())
        try:
            ready = self._receive(time.monotonic() + budget)
            self.watch.check_now(self.proc.pid, self.sandbox)
        except SubmissionError as exc:
            exc.kind, exc.op = "import_" + exc.kind, "import"
            if exc.kind == "import_timeout":
                exc.limit = self.limits.import_s
            self.fatal = exc
            self.stop()
            return
        if "error" in ready:
            error = ready["error"] if isinstance(ready["error"], dict) else {}
            kind = "syntax_error" if error.get("type") in ("SyntaxError", "IndentationError", "TabError") else "import_error"
            # A notebook's IPython lines were dropped before import: only a .py can hold one.
            py_syntax_error = kind == "syntax_error" and self.cells is None
            command = ipython_command(self.source_text, error.get("line")) if py_syntax_error else None
            newer = newer_syntax_line(self.source_text, error.get("line")) if kind == "syntax_error" else None
            self.fatal = SubmissionError(  # an IPython or Python 3.12 line's message is the line itself
                "syntax_error_ipython" if command else "syntax_error_python312" if newer else kind,
                command or newer or str(error.get("message", ""))[:500],
                **self._where(error.get("line")), exc_type=_exception_type(error), op="import",
            )
            self.stop()
        else:
            try:
                protocol.check("ready", ready.get("ok"))
            except protocol.MalformedReply:
                self.fatal = SubmissionError("import_protocol", "malformed ready reply", op="import")
                self.stop()
                return
            self.ready = True

    def _send(self, frame, deadline):
        """Write the request frames, reading the worker's replies meanwhile into the inbox: several
        requests sent at once can outgrow both pipes (64 KiB each), and a worker blocked writing
        its replies reads no more requests."""
        view = memoryview(frame)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SubmissionError("timeout")
            readable, writable, _ = select.select([self.response_fd, *self._outputs()], [self.request_fd], [],
                                                  min(remaining, POLL_S))
            self._drain_output(readable)
            self._read_replies(readable)
            self.watch.check(self.proc.pid, self.sandbox)
            if writable:
                try:
                    view = view[os.write(self.request_fd, view):]
                except BrokenPipeError:
                    raise self._crash() from None

    def _receive(self, deadline):
        """The worker's next reply: already read along with an earlier one, or read now."""
        while True:
            try:
                reply = self._take_reply()
            except wire.WireError as exc:
                raise SubmissionError("protocol", str(exc)) from None
            if reply is not None:
                return reply
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SubmissionError("timeout")
            readable, _, _ = select.select([self.response_fd, *self._outputs()], [], [], min(remaining, POLL_S))
            self._drain_output(readable)
            self._read_replies(readable)
            self.watch.check(self.proc.pid, self.sandbox)

    def _read_replies(self, readable):
        """Append what the worker wrote to the inbox, when select found some; a closed pipe is a crash.
        Bytes no exchange's replies could add up to (MAX_INBOX_BYTES) are the submission's protocol
        failure: a worker that writes without end while the grader is still sending would otherwise
        fill the grader's memory, outside the worker's limit."""
        if self.response_fd in readable:
            chunk = os.read(self.response_fd, 1 << 20)
            if not chunk:
                raise self._crash()
            self.inbox += chunk
            if len(self.inbox) > MAX_INBOX_BYTES:
                raise SubmissionError("protocol", f"more than {MAX_INBOX_BYTES} reply bytes unread")

    def _take_reply(self):
        """Cut the first whole frame off the inbox and decode it; None while it is incomplete."""
        inbox = self.inbox
        if len(inbox) < wire.PREFIX_SIZE:
            return None
        total, header_len = wire.frame_length(bytes(inbox[:wire.PREFIX_SIZE]))
        end = wire.PREFIX_SIZE + total
        if len(inbox) < end:
            return None
        body = bytes(inbox[wire.PREFIX_SIZE:end])
        del inbox[:end]
        reply = wire.decode(body, header_len)
        if not isinstance(reply, dict):
            raise wire.WireError("reply is not a mapping")
        # the worker's strings (messages, names) become valid text here
        return clean_tree(reply) if json_needs_cleaning(body[:header_len]) else reply

    def _outputs(self):
        return [self.output_fd] if self.output_open else []

    def _drain_output(self, readable):
        """Read what the worker printed; once its output is closed, stop watching it."""
        if self.output_fd in readable:
            chunk = os.read(self.output_fd, 1 << 16)
            self.output_open = bool(chunk)
            self.output.keep(chunk)

    def _crash(self):
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            try:
                detail = signal.Signals(-code).name
            except ValueError:
                detail = f"signal {-code}"
        else:
            detail = f"exit code {code}"
        return SubmissionError("crash", detail)
