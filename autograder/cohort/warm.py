"""Warm workers for batch grading: the grader's handle on a zygote, and a Worker forked from it.

A zygote (autograder/worker/zygote.py) imports torch once; each submission's worker is then a
fresh fork of it that takes the sandbox the grader prepared, instead of a new interpreter that
imports torch again. Forks are only used when workers run as a uid of their own (the grader is
root): a worker that shared the zygote's uid could signal or trace it, and through it reach the
next submission's worker. Otherwise the plain Worker is used.
"""
import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict
from functools import partial

from ..exercise import EXERCISE
from ..worker import zygote as zygote_process
from ..worker.client import Worker
from ..worker.sandbox import LIBRARY_ENV, worker_uid

READY_TIMEOUT_S = 120
# What the zygote's interpreter starts with (its whole environment); each fork then takes its
# sandbox's, but not its hash seed, which Python fixes at start: the sandbox's own (a cold
# worker's), so that a set of strings is iterated in the same order in a batch slot as in a grade.
ZYGOTE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "PYTHONHASHSEED": "0", **LIBRARY_ENV}


class ZygoteGone(OSError):
    """The zygote exited or broke the protocol; Worker.start reports it as a setup error."""


class Zygote:
    """One warm zygote process, started on first use and restarted if it dies."""

    def __init__(self, python=None):
        self.python = python or os.environ.get("AUTOGRADER_WORKER_PYTHON") or sys.executable
        self.proc = None
        self.control = None

    def fork(self, sandbox, request_r, response_w, output_w):
        """Fork a worker for `sandbox`, whose pipes are the three fds given; return its handle."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self._start()
        message = {
            "op": "fork", "workdir": str(sandbox.home), "submission": str(sandbox.submission),
            "env": sandbox.env(), "uid": sandbox.uid, "root": str(sandbox.root), "isolate": sandbox.isolate,
            "keep": sandbox.keep,
            "limits": asdict(sandbox.limits),
        }
        return Forked(self, self.request(message, (request_r, response_w, output_w))["pid"])

    def request(self, message, fds=()):
        socket.send_fds(self.control, [json.dumps(message).encode()], list(fds))
        return self._receive()

    def close(self):
        if self.proc is not None:
            self.control.close()  # the zygote sees EOF and exits; its pending forks keep their pipes
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = self.control = None

    def _start(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [self.python, "-s", zygote_process.__file__, str(theirs.fileno()),  # -s: see client.Worker._spawn
                 *([str(EXERCISE.warm_up)] if EXERCISE.warm_up else [])],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=ZYGOTE_ENV, cwd="/", start_new_session=True,
            )
        finally:
            theirs.close()
        self.control = ours
        ours.settimeout(READY_TIMEOUT_S)
        if not self._receive().get("ready"):
            raise ZygoteGone("the zygote did not start")

    def _receive(self):
        data = self.control.recv(zygote_process.MAX_MESSAGE)
        if not data:
            raise ZygoteGone("the zygote exited")
        reply = json.loads(data)
        if not isinstance(reply, dict):
            raise ZygoteGone("malformed reply from the zygote")
        return reply


class Forked:
    """What Worker needs of a Popen for a forked worker: its pid, and wait() through the zygote."""

    def __init__(self, zygote, pid):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def wait(self, timeout=None):
        if self.returncode is None:
            try:
                code = self.zygote.request({"op": "wait", "pid": self.pid, "timeout": timeout})["returncode"]
            except OSError:
                return None  # the zygote is gone: init has adopted and reaped the worker
            if code is None:
                raise subprocess.TimeoutExpired("worker", timeout)
            self.returncode = code
        return self.returncode


class ZygoteWorker(Worker):
    """A Worker whose process is forked from a warm zygote instead of started from scratch."""

    def __init__(self, source_text, limits, uid=None, python=None, *, zygote):
        super().__init__(source_text, limits, uid, python)
        self.zygote = zygote

    def _spawn(self, request_r, response_w, output_w):
        return self.zygote.fork(self.sandbox, request_r, response_w, output_w)


def worker_class(slot, zygote):
    """The Worker class for a slot: forked from `zygote` when workers get their own uid."""
    return partial(ZygoteWorker, zygote=zygote) if worker_uid(slot) is not None else Worker
