"""The grader's side of the trust boundary: starts the worker, sends requests, enforces limits.

Every call into the submission goes through Worker.call, which gives it a deadline (the request
timeout, capped by what is left of its class's and the submission's budgets), watches the
resident memory and process count of the worker's session while it waits, and drains the
worker's output into a capped buffer. A class that timed out or crashed the worker is marked
dead, so its remaining tests fail at once with the same reason instead of each waiting again.
"""
import os
import select
import signal
import subprocess
import sys
import time

from . import wire
from .sandbox import Sandbox

PAGE = os.sysconf("SC_PAGE_SIZE")
POLL_S = 0.05


class WorkerSetupError(Exception):
    """The worker could not be started at all: a problem of the grading machine, not the student."""


class SubmissionError(Exception):
    """The submission could not answer: it raised, was missing, timed out, crashed or overused.

    kind is one of: syntax_error, import_error, missing_class, not_implemented, exception,
    bad_output, contract, timeout, crash, memory, processes, protocol.
    """

    def __init__(self, kind, message="", *, line=None, exc_type=None, cls=None, op=None, limit=None):
        super().__init__(f"{kind}: {message}")
        self.kind, self.message, self.line, self.exc_type = kind, message, line, exc_type
        self.cls, self.op, self.limit = cls, op, limit

    def as_dict(self):
        return {
            "kind": self.kind, "message": self.message, "line": self.line,
            "exc_type": self.exc_type, "cls": self.cls, "op": self.op, "limit": self.limit,
        }


def _session_processes(session):
    """(pid, rss_bytes) of every process in the given session, read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # field 6 of stat: the session id
            found.append((int(entry), int(fields[21]) * PAGE))
    return found


class Worker:
    """One submission's worker process, restarted on demand after a class kills it."""

    def __init__(self, source_text, limits, uid=None, python=None):
        self.limits = limits
        self.source_text = source_text
        self.uid = uid
        self.python = python or os.environ.get("AUTOGRADER_WORKER_PYTHON") or sys.executable
        self.proc = None
        self.sandbox = None
        self.classes = None
        self.fatal = None
        self.dead = {}
        self.spent = {}
        self.started = time.monotonic()
        self.output = bytearray()
        self.output_dropped = 0
        self.peak_rss = 0
        self.last_check = 0.0

    # ---- public API --------------------------------------------------------------------------
    def call(self, owner, op, **args):
        """Send one request on behalf of class `owner` and return the worker's answer."""
        cls = owner
        label = args.get("method") or ("__init__" if op == "build" else op)
        if self.fatal:
            raise self.fatal
        if cls in self.dead:
            raise self.dead[cls]
        self._ensure_started()
        if self.fatal:
            raise self.fatal
        budget = min(
            self.limits.request_s,
            self.limits.class_s - self.spent.get(cls, 0.0),
            self.limits.submission_s - (time.monotonic() - self.started),
        )
        begin = time.monotonic()
        try:
            reply = self._exchange({"op": op, "args": args}, budget)
        except SubmissionError as exc:
            exc.cls, exc.op = cls, label
            if exc.kind == "timeout":
                exc.limit = round(budget, 1)
            if exc.kind in ("timeout", "crash", "memory", "processes", "protocol"):
                self.dead[cls] = exc
                self.stop()
            raise
        finally:
            self.spent[cls] = self.spent.get(cls, 0.0) + time.monotonic() - begin
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise SubmissionError(
                str(error.get("kind", "exception")), str(error.get("message", ""))[:500],
                line=error.get("line") if isinstance(error.get("line"), int) else None,
                exc_type=str(error.get("type") or "")[:80] or None,
                cls=cls, op=label,
            )
        if not isinstance(reply.get("ok"), dict):
            raise SubmissionError("protocol", "malformed reply", cls=cls, op=op)
        return reply["ok"]

    def take_output(self):
        """What the submission printed since the last call, capped to limits.output_kib."""
        text = self.output.decode("utf-8", "replace")
        if self.output_dropped:
            text += f"\n[... {self.output_dropped} bytes more]"
        self.output.clear()
        self.output_dropped = 0
        return text

    def stop(self):
        """Kill the worker's whole session (and, as root, every process of its uid)."""
        if self.proc is None:
            return
        for pid, _ in _session_processes(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.sandbox.kill_leftovers()
        self.proc.wait()
        for fd in (self.request_fd, self.response_fd, self.output_fd):
            os.close(fd)
        self.sandbox.cleanup()
        self.proc = None

    def close(self):
        self.stop()

    # ---- process management -----------------------------------------------------------------
    def start(self):
        """Start the worker process without waiting for it: torch imports while the suite loads."""
        if self.proc is not None:
            return
        self.sandbox = Sandbox(self.source_text, self.limits, self.uid)
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [self.python, "-I", str(self.sandbox.child), str(req_r), str(resp_w), str(self.sandbox.submission)],
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, pass_fds=(req_r, resp_w),
                cwd=self.sandbox.workdir, env=self.sandbox.env(), start_new_session=True,
                preexec_fn=self.sandbox.preexec,
            )
        except OSError as exc:
            for fd in (req_r, req_w, resp_r, resp_w, out_r, out_w):
                os.close(fd)
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
        os.set_blocking(req_w, False)
        self.ready = False
        self.spawned_at = time.monotonic()

    def _ensure_started(self):
        self.start()
        if self.ready:
            return
        elapsed = time.monotonic() - self.spawned_at
        budget = min(self.limits.import_s - elapsed, self.limits.submission_s - (time.monotonic() - self.started))
        try:
            ready = self._receive(time.monotonic() + budget)
        except SubmissionError as exc:
            exc.op = "import"
            if exc.kind == "timeout":
                exc.limit = self.limits.import_s
            self.fatal = exc
            self.stop()
            return
        if "error" in ready:
            error = ready["error"] if isinstance(ready["error"], dict) else {}
            kind = "syntax_error" if error.get("type") in ("SyntaxError", "IndentationError", "TabError") else "import_error"
            self.fatal = SubmissionError(
                kind, str(error.get("message", ""))[:500],
                line=error.get("line") if isinstance(error.get("line"), int) else None,
                exc_type=str(error.get("type") or "")[:80] or None, op="import",
            )
            self.stop()
        else:
            self.ready = True
            self.classes = ready.get("ok", {}).get("classes", [])

    def _exchange(self, message, budget):
        deadline = time.monotonic() + max(budget, 0.0)
        if budget <= 0:
            raise SubmissionError("timeout")
        self._send(wire.encode(message), deadline)
        return self._receive(deadline)

    def _send(self, frame, deadline):
        view = memoryview(frame)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SubmissionError("timeout")
            _, writable, _ = select.select([], [self.request_fd], [], min(remaining, POLL_S))
            self._check_resources()
            if writable:
                try:
                    view = view[os.write(self.request_fd, view):]
                except BrokenPipeError:
                    raise self._crash() from None

    def _receive(self, deadline):
        buffer = bytearray()
        expected = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SubmissionError("timeout")
            readable, _, _ = select.select([self.response_fd, self.output_fd], [], [], min(remaining, POLL_S))
            if self.output_fd in readable:
                self._keep_output(os.read(self.output_fd, 1 << 16))
            if self.response_fd in readable:
                chunk = os.read(self.response_fd, 1 << 20)
                if not chunk:
                    raise self._crash()
                buffer += chunk
            self._check_resources()
            try:
                if expected is None and len(buffer) >= wire.PREFIX_SIZE:
                    expected = wire.frame_length(bytes(buffer[: wire.PREFIX_SIZE]))
                if expected is not None and len(buffer) >= wire.PREFIX_SIZE + expected[0]:
                    body = bytes(buffer[wire.PREFIX_SIZE: wire.PREFIX_SIZE + expected[0]])
                    reply = wire.decode(body, expected[1])
                    if not isinstance(reply, dict):
                        raise wire.WireError("reply is not a mapping")
                    return reply
            except wire.WireError as exc:
                raise SubmissionError("protocol", str(exc)) from None

    def _keep_output(self, chunk):
        room = self.limits.output_kib * 1024 - len(self.output)
        self.output += chunk[: max(room, 0)]
        self.output_dropped += max(len(chunk) - max(room, 0), 0)

    def _check_resources(self):
        now = time.monotonic()
        if now - self.last_check < POLL_S:
            return
        self.last_check = now
        processes = _session_processes(self.proc.pid)
        rss = sum(size for _, size in processes)
        self.peak_rss = max(self.peak_rss, rss)
        if rss > self.limits.memory_mib << 20:
            raise SubmissionError("memory", f"{rss >> 20} MiB", limit=self.limits.memory_mib)
        if len(processes) > self.limits.processes:
            raise SubmissionError("processes", f"{len(processes)} processes", limit=self.limits.processes)

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
