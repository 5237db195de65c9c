"""The zygote: a warm parent for workers, which imports torch once and forks one worker per submission.

Batch grading starts one zygote per parallel slot (autograder/cohort/warm.py is its trusted-side
handle) as `python -s zygote.py CONTROL_FD [WARM_UP]`, in the same sandbox environment as a worker. It
imports child.py (torch, numpy, wire, parameters) and runs the exercise's warm-up file (the
operations its modules use: exercise.yml's warm_up), so
that each worker it forks starts with torch loaded and its kernels initialised instead of paying
for that again. The zygote itself never runs student code: on each request it forks, and the
fork takes the sandbox the grader prepared (new session, its directory and environment, the
same rlimits, namespaces and privilege drop as sandbox.enter) before it imports the submission and
serves child.py's protocol. A fork is thus as isolated as a worker started from scratch, and
every submission gets a fresh fork of a process that no submission has touched.

Control protocol (a SOCK_SEQPACKET socket; one JSON datagram per message, fds by SCM_RIGHTS):
  zygote -> grader  {"ready": true} once warm
  fork  {workdir, submission, env, uid, root, isolate, keep, limits} + fds [request_r, response_w, output_w] -> {"pid": N}
  wait  {pid, timeout (seconds or null)} -> {"returncode": int, or null if still running}
"""
import ctypes
import gc
import json
import os
import signal
import socket
import runpy
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(os.path.dirname(HERE))  # where `autograder` is: sandbox.py imports relatively
PR_SET_PDEATHSIG = 1
MAX_MESSAGE = 1 << 16


def become_worker(request, fds):
    """In the fork: take the sandbox the grader prepared, then serve one submission until EOF."""
    import child
    from autograder.worker import sandbox

    request_fd, response_fd, output_fd = fds
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    for name in os.listdir("/proc/self/fd"):  # the control socket above all: no way back to the zygote
        if int(name) not in (0, 1, 2, request_fd, response_fd):
            try:
                os.close(int(name))
            except OSError:
                pass
    os.chdir(request["workdir"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None  # gettempdir() then reads the sandbox's TMPDIR
    sys.path[:] = [entry for entry in sys.path if entry not in (HERE, PACKAGE_ROOT)]  # child.py added HERE too
    sandbox.enter(types.SimpleNamespace(**request["limits"]), request["uid"], request["root"], request["isolate"],
                  request["keep"])
    child.run(request_fd, response_fd, request["submission"])


def wait(pid, timeout):
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def serve(control):
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 3)
        except OSError:
            return
        if not data:
            return  # the grader is gone
        request = json.loads(data)
        if request["op"] == "fork":
            pid = os.fork()
            if pid == 0:
                try:
                    control.close()
                    become_worker(request, fds)
                    os._exit(0)
                finally:
                    os._exit(1)
            for fd in fds:
                os.close(fd)
            reply = {"pid": pid}
        else:
            reply = {"returncode": wait(request["pid"], request["timeout"])}
        control.send(json.dumps(reply).encode())


def main():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    control = socket.socket(fileno=int(sys.argv[1]))
    sys.path[:0] = [HERE, PACKAGE_ROOT]
    import child
    import deferred
    from autograder.worker import sandbox  # noqa: F401  (loaded before any fork, like child)

    worker = child.Worker(os.devnull)
    # The stand-ins for sympy and symbolic_shapes spare a single grading their import, at a cost on
    # every meta-device call (~20% of its time); a zygote imports them once for all its forks, so it
    # takes the real ones. torch._dynamo's stand-in costs nothing per call: it stays.
    deferred.restore("sympy", deferred.SYMBOLIC_SHAPES)
    if len(sys.argv) > 2:  # the exercise's warm-up (exercise.yml's warm_up), run once before any fork
        runpy.run_path(sys.argv[2])["warm_up"](worker)
    gc.collect()
    gc.freeze()  # what the warm-up made, too: no fork's collector walks (and copies) it
    control.send(json.dumps({"ready": True}).encode())
    serve(control)


if __name__ == "__main__":
    main()
