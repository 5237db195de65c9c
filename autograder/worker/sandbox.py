"""The worker's sandbox: a fresh directory, resource limits and, as root, another user.

The submission is copied alone into an empty directory, so nothing that sat beside it
(conftest.py, sitecustomize.py, a fake torch/) is importable; the worker starts with `python -I`,
so neither that directory nor PYTHON* variables reach sys.path. When the grader runs as root the
worker runs as an unprivileged uid of its own, without network, with its own home and temp dir:
it cannot read the grader's files (see protect_paths), write where results go, or signal it.
Each worker holds a lease on its uid (lease_uid), so that graders running side by side on one
machine never share a uid, and killing one worker's leftovers can never touch another's.
"""
import ctypes
import os
import resource
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

from . import procfs

WORKER_FILES = ("child.py", "wire.py", "parameters.py")
CLONE_NEWNET = 0x40000000
PR_SET_DUMPABLE = 4
DEFAULT_BASE_UID = 61000
LEASE_SPAN = 1000  # uids tried from the first candidate on
KILL_WAIT_S = 2.0  # how long kill_leftovers waits for the uid's processes to be gone


class UidUnavailable(Exception):
    """Every uid of the lease range is held by another grader on this machine."""


def worker_uid(slot=0):
    """The uid the worker runs as, or None to keep the grader's own (not running as root).

    AUTOGRADER_WORKER_UID overrides it; 'none' disables the privilege drop. Each parallel slot
    gets its own uid so that killing one worker's leftovers can never touch another's.
    """
    setting = os.environ.get("AUTOGRADER_WORKER_UID", "auto")
    if setting == "none" or os.geteuid() != 0:
        return None
    return (DEFAULT_BASE_UID if setting == "auto" else int(setting)) + slot


def lease_uid(first):
    """Reserve a uid for one worker: (uid, lease); closing the lease frees the uid.

    The lease is an abstract unix socket named after the uid: the kernel frees the name when its
    holder exits, however it exits, so a grader that was killed never leaves a uid taken.
    """
    for uid in range(first, first + LEASE_SPAN):
        lease = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lease.bind(f"\0autograder-worker-uid-{uid}")
        except OSError:
            lease.close()
            continue
        return uid, lease
    raise UidUnavailable(f"uids {first}..{first + LEASE_SPAN - 1} are all in use by other graders")


def protect_paths(paths):
    """As root, make the grader's own files unreachable for other users (chmod o-rwx).

    Only the 'other' bits of the given files and folders change, and they stay changed: a folder
    without o+x cannot be entered, so everything below it is out of the worker's reach, while
    the grader (root) and the files' owner keep their access.
    """
    if os.geteuid() != 0:
        return
    for path in paths:
        path = Path(path)
        if path.exists():
            path.chmod(path.stat().st_mode & ~0o007)


def harden_grader():
    """Make the grading process non-dumpable: a same-uid worker cannot ptrace it or read its memory."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


class Sandbox:
    """A fresh directory tree for one worker: submission/, home/, tmp/ and the worker's code.

    With a uid (root only), the sandbox leases the first free uid from there on and kills
    whatever still runs under it (left by a grader that was itself killed) before using it.
    """

    def __init__(self, source_text, limits, uid=None):
        self.limits = limits
        self.uid, self.lease = lease_uid(uid) if uid is not None else (None, None)
        self.kill_leftovers()
        self.root = Path(tempfile.mkdtemp(prefix="autograder-"))
        self.workdir = self.root / "submission"
        self.home = self.root / "home"
        self.tmp = self.root / "tmp"
        code_dir = self.root / "worker"
        for folder in (self.workdir, self.home, self.tmp, code_dir):
            folder.mkdir()
        self.submission = self.workdir / "attention.py"
        self.submission.write_text(source_text, encoding="utf-8")
        here = Path(__file__).resolve().parent
        for name in WORKER_FILES:
            shutil.copyfile(here / name, code_dir / name)
        self.child = code_dir / "child.py"
        self.root.chmod(0o711)
        code_dir.chmod(0o755)
        if self.uid is not None:
            for path in (self.workdir, self.home, self.tmp, self.submission):
                os.chown(path, self.uid, self.uid)

    def env(self):
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLBACKEND": "Agg",
        }

    def preexec(self):
        """Runs in the forked child before exec: limits first, then drop privileges."""
        limits = self.limits
        mib = 1 << 20
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_mib * mib,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # Address space is a backstop only (torch reserves large virtual ranges); the client
        # watches resident memory and stops the worker at limits.memory_mib.
        address_space = (limits.memory_mib + 4096) * mib
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if self.uid is None:
            return
        ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET)  # best effort: fails in some containers
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        os.setgroups([])
        os.setgid(self.uid)
        os.setuid(self.uid)

    def kill_leftovers(self):
        """As root, kill every process of the worker's uid: what escaped its session too.

        A helper process takes the uid and sends SIGKILL to everything it may signal, again
        until /proc shows no live process of the uid (zombies are dead already) or KILL_WAIT_S
        has passed. kill(-1) itself cannot tell: it succeeds whenever any other process exists.
        """
        if self.uid is None:
            return
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(self.uid)
                os.setuid(self.uid)
                me = os.getpid()
                deadline = time.monotonic() + KILL_WAIT_S
                while time.monotonic() < deadline:
                    os.kill(-1, signal.SIGKILL)
                    if not any(p.uid == self.uid and p.pid != me and p.state != "Z" for p in procfs.processes()):
                        break
                    time.sleep(0.01)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)
        if self.lease is not None:
            self.lease.close()
