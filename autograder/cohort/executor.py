"""Where submissions are graded: warm slot processes on this machine, or a Dask cluster.

A slot is a long-lived trusted process (pytest, hypothesis and the hidden suite imported once)
with its own zygote of warm workers (warm.py): it grades one submission at a time through
autograder.grade.collect_outcomes, with a slot number of its own so that parallel workers never
share a uid. Student code runs only in the workers; a slot returns plain outcome dictionaries.
A slot process is replaced when it has grown by RECYCLE_GROWTH_MIB since its first submission
(so memory stays flat over a cohort), after `recycle` submissions, and whenever it dies.
Replacing a slot costs a torch import in its new zygote, so it is not done on a fixed short count.

Executors take Task objects and yield (task, Result or GraderFailure) as grading finishes:
LocalExecutor runs a SlotPool here; DaskExecutor sends tasks to a Dask distributed scheduler,
where each Dask worker process grades through a SlotPool of its own, as many slots as threads.

Usage of a slot process: python -m autograder.cohort.executor SLOT REQUEST_FD REPLY_FD PARENT_PID
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, as_completed
from dataclasses import dataclass
from pathlib import Path

from ..errors import GraderBug, UsageError
from ..exercise import EXERCISE
from ..worker import procfs

PROJECT = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1
DEFAULT_RECYCLE = 1000
RECYCLE_GROWTH_MIB = 64  # measured growth is ~1 MiB per 100 submissions; this catches a leak
FIRST_SLOT = 1  # slot 0 (uid 61000) is what `grade` uses: a batch never shares it


@dataclass(frozen=True)
class Task:
    key: str  # the submission's key in its cohort
    source: str  # the student's code, as autograder.submission.load read it


@dataclass(frozen=True)
class Result:
    outcomes: list  # Outcome.as_dict() of every graded property
    peak_rss_mib: float
    seconds: float


class GraderFailure(GraderBug):
    """Grading could not happen (machine, suite or configuration problem): nothing to store."""


# ---- the slot process ----------------------------------------------------------------------
@functools.lru_cache(maxsize=1)  # a batch sends the same grading.yml with every task
def _config(config_text):
    from .. import config as grading_config

    return grading_config.parse(config_text, "grading.yml")


def _grade_in_slot(slot, task, config_text, worker_class):
    """Grade one task inside a slot process; returns a JSON-ready reply.

    The student's code stays in memory: nothing is written to disk, so a slot killed mid-batch
    (an interrupted batch, a Dask worker shut down) leaves no copy of anyone's code behind.
    """
    from ..grade import collect_loaded
    from ..submission import Submission

    started = time.monotonic()
    collected = collect_loaded(Submission(task["source"], EXERCISE.submission), _config(config_text), slot,
                               worker_class=worker_class)
    return {"outcomes": [o.as_dict() for o in collected.outcomes],
            "peak_rss_mib": round(collected.peak_rss_mib, 1), "seconds": round(time.monotonic() - started, 3)}


def slot_main(slot, request_fd, reply_fd, parent):
    """Serve grading requests (one JSON line each) until the pool closes the pipe or exits."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        return
    from .warm import Zygote, worker_class

    zygote = Zygote()
    workers = worker_class(slot, zygote)
    requests = os.fdopen(request_fd, "r", encoding="utf-8")
    replies = os.fdopen(reply_fd, "w", encoding="utf-8")
    try:
        for line in requests:
            request = json.loads(line)
            try:
                reply = {"ok": _grade_in_slot(slot, request["task"], request["config"], workers)}
            except Exception as exc:  # a grading-machine problem, reported to the batch as such
                reply = {"failure": f"{type(exc).__name__}: {exc}"}
            replies.write(json.dumps(reply) + "\n")
            replies.flush()
    finally:
        zygote.close()


class Slot:
    """The pool's side of one slot process."""

    def __init__(self, number):
        self.number = number
        self.proc = None
        self.done = 0
        self.baseline_rss = self.rss = 0

    def grade(self, task, config_text):
        if self.proc is None:
            self._start()
        request = {"task": {"key": task.key, "source": task.source}, "config": config_text}
        try:
            self.requests.write(json.dumps(request) + "\n")
            self.requests.flush()
            line = self.replies.readline()
        except (BrokenPipeError, ValueError):
            line = ""
        if not line:
            self.stop()
            raise GraderFailure(f"grading slot {self.number} died while grading {task.key}")
        reply = json.loads(line)
        self.done += 1
        self.rss = procfs.resident_bytes(self.proc.pid)
        if self.done == 1:  # pytest and hypothesis are loaded by now
            self.baseline_rss = self.rss
        if "failure" in reply:
            raise GraderFailure(reply["failure"])
        return Result(**reply["ok"])

    def _start(self):
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.cohort.executor", str(self.number), str(request_r), str(reply_w),
             str(os.getpid())],
            pass_fds=(request_r, reply_w), stdin=subprocess.DEVNULL, cwd=PROJECT,
        )
        os.close(request_r)
        os.close(reply_w)
        self.requests = os.fdopen(request_w, "w", encoding="utf-8")
        self.replies = os.fdopen(reply_r, "r", encoding="utf-8")
        self.done = 0

    def worn_out(self, recycle):
        """Whether to replace the slot process before its next submission."""
        return self.done >= recycle or self.rss - self.baseline_rss > RECYCLE_GROWTH_MIB << 20

    def kill(self):
        """Stop at once (an interrupted batch): the slot's zygote and worker die with it."""
        proc = self.proc
        if proc is not None:
            proc.kill()

    def stop(self):
        if self.proc is None:
            return
        for stream in (self.requests, self.replies):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)  # EOF: the slot finishes and closes its zygote
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class SlotPool:
    """`size` slots, each fed by a thread of this process; submit() is thread-safe."""

    def __init__(self, size, config_text, recycle=DEFAULT_RECYCLE, first_slot=FIRST_SLOT):
        self.config_text = config_text
        self.recycle = recycle
        self.queue = queue.Queue()
        self.slots = [Slot(first_slot + i) for i in range(size)]
        self.threads = [threading.Thread(target=self._feed, args=(slot,), daemon=True) for slot in self.slots]
        for thread in self.threads:
            thread.start()

    def submit(self, task):
        future = Future()
        self.queue.put((task, future))
        return future

    def _feed(self, slot):
        while True:
            item = self.queue.get()
            if item is None:
                slot.stop()
                return
            task, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(slot.grade(task, self.config_text))
            except Exception as exc:
                future.set_exception(exc)
            if slot.proc is not None and slot.worn_out(self.recycle):
                slot.stop()

    def close(self, cancel=False):
        if cancel:
            while True:
                try:
                    item = self.queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[1].cancel()
            for slot in self.slots:
                slot.kill()
        for _ in self.threads:
            self.queue.put(None)
        for thread in self.threads:
            thread.join()


# ---- executors -------------------------------------------------------------------------------
def _completed(futures):
    for future in as_completed(futures):
        task = futures[future]
        try:
            yield task, future.result()
        except GraderFailure as exc:
            yield task, exc


class LocalExecutor:
    """Grade on this machine in `slots` warm slot processes."""

    def __init__(self, slots, config_text, recycle=DEFAULT_RECYCLE):
        if slots < 1:  # no slot would ever take a task: the batch would wait for ever
            raise UsageError(f"--jobs must be at least 1 (grading slots), not {slots}")
        self.pool = SlotPool(slots, config_text, recycle)
        self.slots = slots

    def run(self, tasks):
        return _completed({self.pool.submit(task): task for task in tasks})

    def close(self, cancel=False):
        self.pool.close(cancel)


_dask_pool = None
_dask_pool_lock = threading.Lock()


def dask_grade(key, source, config_text):
    """Runs on a Dask worker: grade through that worker process's own SlotPool."""
    global _dask_pool
    from distributed import get_worker

    with _dask_pool_lock:
        if _dask_pool is None or _dask_pool.config_text != config_text:
            if _dask_pool is not None:
                _dask_pool.close()
            _dask_pool = SlotPool(get_worker().state.nthreads, config_text)
    result = _dask_pool.submit(Task(key, source)).result()
    return result.__dict__


class DaskExecutor:
    """Send tasks to a Dask distributed scheduler; outcomes come back here to be stored."""

    def __init__(self, address, config_text):
        try:
            from distributed import Client
        except ImportError:
            raise GraderFailure("--scheduler needs Dask: pip install 'attention-autograder[dask]'") from None
        self.client = Client(address)
        self.config_text = config_text
        self.slots = sum(self.client.nthreads().values())

    def run(self, tasks):
        from distributed import as_completed as dask_completed

        futures = {self.client.submit(dask_grade, task.key, task.source, self.config_text, pure=False): task
                   for task in tasks}
        for future in dask_completed(futures):
            task = futures[future]
            try:
                yield task, Result(**future.result())
            except GraderFailure as exc:
                yield task, exc

    def close(self, cancel=False):
        self.client.close()


if __name__ == "__main__":
    slot_main(*(int(arg) for arg in sys.argv[1:5]))
