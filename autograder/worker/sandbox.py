"""The worker's sandbox: a fresh folder, resource limits and, as root, another user.

The submission is copied alone into an empty folder, so nothing that sat beside it
(conftest.py, sitecustomize.py, a fake torch/) is importable; the worker starts with `python -I`,
so neither that folder nor PYTHON* variables reach sys.path.

As root, the first layer of isolation is a uid of the worker's own, and it must hold alone
(Gradescope's Docker allows nothing more): everything the grader makes is created private
(umask 077, explicit modes), the project root and every submissions source are closed to other
users (close_project, protect_paths), the sandbox's folders are open to this worker's uid alone,
and what the uid leaves outside its sandbox is counted and removed (residue.py). Where the
kernel allows, namespaces.py adds a second layer. Each worker holds a lease on its uid, a lock in
a folder only root can open, so graders side by side never share a uid and no worker can take,
forge or exhaust the leases.
"""
import ctypes
import fcntl
import os
import re
import resource
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

from ..errors import MachineError
from ..exercise import EXERCISE
from . import landlock, namespaces, procfs, residue, seccomp

WORKER_FILES = ("child.py", "deferred.py", "wire.py", "parameters.py")
# The grader's environment variables the worker keeps: which GPUs this grading may use (a GPU
# hidden from the grader stays hidden from the submission, and the device check runs where asked).
PASSED_ENV = ("CUDA_VISIBLE_DEVICES",)
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
KEYCTL_CLEAR, KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = 7, -4, -5
DEFAULT_BASE_UID = 61000
LEASE_SPAN = 1000  # uids tried from the first candidate on
LEASE_FOLDERS = ("/run/attention-autograder", f"{tempfile.gettempdir()}/attention-autograder-leases")
KILL_WAIT_S = 10.0  # how long kill_uid waits for the uid's processes to be gone

# glibc's malloc raises its mmap threshold each time a large block is freed, so that later large
# blocks (a module's buffer of a few MiB, built hundreds of times over a grading) come from the
# heap, where freed memory stays in the process: a correct module with a 4 MiB buffer it never
# used reached the 512 MiB limit. A fixed threshold (glibc's default, 128 KiB) keeps large blocks
# mapped apart and gives them back when freed. cuBLAS, on a GPU, keeps a fixed workspace: the
# worker runs torch's deterministic algorithms (child.Worker), and a cuBLAS matmul without this
# setting warns on every first use. Read at the interpreter's start: the warm zygote's too.
LIBRARY_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}

_libc = ctypes.CDLL(None, use_errno=True)


class UidUnavailable(MachineError):
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


def _lease_folder():
    """A folder for the uid leases that only root can open: made 0700 if missing, and refused if
    anyone else could have made or changed it (a worker may create folders in /tmp first)."""
    for folder in LEASE_FOLDERS:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            info = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o077:
            return folder
    raise UidUnavailable(f"no private folder for uid leases: {' or '.join(LEASE_FOLDERS)} "
                         "must be a folder owned by root with mode 0700")


def _try_lease(uid):
    """The lease on `uid` (an open, locked file), or None if another grader holds it."""
    handle = os.open(f"{_lease_folder()}/uid-{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        return None
    return handle


class Lease:
    """A held uid: the kernel releases the lock when its holder exits, however it exits."""

    def __init__(self, handle):
        self.handle = handle

    def close(self):
        if self.handle is not None:
            os.close(self.handle)
            self.handle = None


def lease_uid(first):
    """Reserve a clean uid for one worker: (uid, lease); closing the lease frees the uid.

    A leased uid is cleared (its processes, files, IPC objects, keys and old sandbox folders)
    and used only if nothing of it is left: a uid that a student's leftovers survived is passed
    over, so they can never reach the next student. The first lease taken in a process also
    clears every unleased uid of the range that owns anything (what killed graders left).
    """
    reap_orphans(first)
    for uid in range(first, first + LEASE_SPAN):
        handle = _try_lease(uid)
        if handle is None:
            continue
        if _left_by(uid):  # usually nothing: the last holder cleared it
            kill_uid(uid)
            residue.clear(uid, stale_sandboxes(uid))
        if not _left_by(uid):
            return uid, Lease(handle)
        os.close(handle)
    raise UidUnavailable(f"uids {first}..{first + LEASE_SPAN - 1} are all in use by other graders or not clean")


_reaped = set()


def reap_orphans(first):
    """Kill and clear what a grader that was itself killed left under uids nobody holds now."""
    if first in _reaped:
        return
    _reaped.add(first)
    last = first + LEASE_SPAN - 1
    stale = {int(match[1]) for path in Path(tempfile.gettempdir()).glob("autograder-*-*")
             if (match := re.fullmatch(r"autograder-([0-9]{1,9})-.*", path.name))}
    for uid in sorted(residue.uids_with_residue(first, last) | {uid for uid in stale if first <= uid <= last}):
        handle = _try_lease(uid)
        if handle is not None:
            kill_uid(uid)
            residue.clear(uid, stale_sandboxes(uid))
            os.close(handle)


def _left_by(uid):
    """Whether anything of `uid` exists: a process, a file or IPC object, a key, a sandbox folder."""
    return bool(residue.uids_with_residue(uid, uid) or stale_sandboxes(uid))


def stale_sandboxes(uid):
    """Sandbox folders of `uid` (named autograder-UID-*): while its lease is held, any but the
    holder's own was left by a grader that was killed."""
    return sorted(Path(tempfile.gettempdir()).glob(f"autograder-{uid}-*"))


def close_project(root, keep=()):
    """As root, close the project root to other users, except the interpreter that runs workers.

    Folders in `keep` (a virtual environment inside the project, say) stay as they are, and the
    folders on the way to them keep only the search bit for others: a worker can run that
    interpreter, and list, read or open nothing else of the project (.git, solutions/, tests/).
    """
    if os.geteuid() != 0:
        return
    root = Path(root).resolve()
    kept = [Path(os.path.realpath(k)) for k in keep]
    kept = [k for k in kept if k == root or root in k.parents]
    if root in kept:
        raise ValueError(f"the worker's interpreter {root} is the project root itself: install it elsewhere")

    def close(folder):
        on_the_way = [k for k in kept if folder in k.parents]
        if not on_the_way:
            protect_paths([folder])
            return
        folder.chmod(folder.stat().st_mode & ~0o006 | 0o001)
        for entry in folder.iterdir():
            if entry in kept or entry.is_symlink():
                continue
            if entry.is_dir() and any(entry in k.parents for k in on_the_way):
                close(entry)
            else:
                protect_paths([entry])

    close(root)


def open_way_to(folders):
    """As root, add the search bit for others (o+x, never read) to each folder and every folder
    above it that lacks it, so that a worker uid can reach the interpreter it must run (pyenv or
    a venv under a 0700 home, say). Returns the folders changed."""
    if os.geteuid() != 0:
        return []
    changed = []
    for folder in folders:
        folder = Path(os.path.realpath(folder))
        for step in (folder, *folder.parents):
            mode = step.stat().st_mode
            if not mode & 0o001:
                step.chmod(mode | 0o001)
                changed.append(step)
    return changed


def protect_paths(paths):
    """As root, make files and folders unreachable for other users (chmod o-rwx, left so).

    For what the grader did not create itself (the project, a submissions folder, Gradescope's
    folders); what it creates is private from the start. A folder without o+x cannot be entered,
    so everything below it is out of the worker's reach.
    """
    if os.geteuid() != 0:
        return
    for path in paths:
        path = Path(path)
        if path.exists() and not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o007)


def harden_grader():
    """Make the grading process non-dumpable: a same-uid worker cannot ptrace it or read its memory."""
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def kill_uid(uid):
    """As root, kill every process of `uid`: what left the worker's session too.

    A helper process takes the uid and sends SIGKILL to everything it may signal, again until
    /proc shows no live process of the uid (zombies are dead already) or KILL_WAIT_S has passed.
    kill(-1) itself cannot tell: it succeeds whenever any other process exists. Then, still as
    the uid, it empties the uid's kernel keyrings, which belong to the uid and outlive processes.
    """
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            me = os.getpid()
            deadline = time.monotonic() + KILL_WAIT_S
            while time.monotonic() < deadline:
                os.kill(-1, signal.SIGKILL)
                left = procfs.processes(owners={uid})
                if not any(p.uid == uid and p.pid != me and p.state != "Z" for p in left):
                    break
                time.sleep(0.01)
            if SYS_KEYCTL is not None:
                for keyring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING):
                    _libc.syscall(SYS_KEYCTL, KEYCTL_CLEAR, keyring)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def interpreter_folders(python):
    """Folders a worker's Python needs: its environment (a venv may sit inside the project), the
    installation a venv points to, and the folder of the executable behind its links."""
    python = Path(python)
    return sorted({sys.prefix, sys.base_prefix, str(python.parent.parent), os.path.dirname(os.path.realpath(python))})


def _first_for_the_oom_killer():
    """Make the kernel's out-of-memory killer take this worker before any process without the
    same mark (the grader, a batch's zygotes): memory the watch cannot see or reaches too late
    (between two samples) must cost the submission that holds it, not the grader's results.json
    or a classmate's slot. Any process may raise its own mark, none lower it without
    CAP_SYS_RESOURCE; where /proc is read-only nothing changes."""
    try:
        with open("/proc/self/oom_score_adj", "w") as mark:
            mark.write("1000")
    except OSError:
        pass


def enter(limits, uid, root, isolate, keep=()):
    """In the worker's forked child, before it runs anything of the student's: resource limits,
    then (as root) namespaces when `isolate` (keeping the folders in `keep` in view), and the
    drop to the worker's uid for good."""
    _first_for_the_oom_killer()
    mib = 1 << 20
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_mib * mib,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Address space is a backstop only (torch reserves large virtual ranges); the client
    # watches resident memory and stops the worker at limits.memory_mib.
    address_space = (limits.memory_mib + 4096) * mib
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    if uid is None:
        return
    if isolate:
        namespaces.enter(root, uid, limits.disk_mib, keep)
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid program can give it another uid
    if landlock.available():  # first: the filter refuses the Landlock calls to what follows
        landlock.restrict()
    if seccomp.ARCHITECTURES.get(os.uname().machine) and not seccomp.install_filter():
        raise OSError("the system call filter could not be installed")
    namespaces.die_with_parent()


class Sandbox:
    """A fresh folder tree for one worker: submission/, home/, tmp/ and the worker's code.

    With a uid (root only), the sandbox leases the first free and clean uid from there on. Modes: the root is 0711 (enter, not list);
    submission/ is root's, readable by the worker's group alone; home/ and tmp/ are the worker's
    own (0700); the worker's code is public. Another worker, of another uid, can open none of it.
    The worker runs in home/, as HOME says: a file opened by a relative path (a log file a script
    opens at import) is written there, within the disk limits, not refused in submission/.
    """

    def __init__(self, source_text, limits, uid=None, python=sys.executable):
        self.limits = limits
        self.keep = interpreter_folders(python)
        self.uid, self.lease = lease_uid(uid) if uid is not None else (None, None)
        self.isolate = self.uid is not None and namespaces.available()
        self.root = Path(tempfile.mkdtemp(prefix=f"autograder-{self.uid}-" if self.uid is not None else "autograder-"))
        self.submission_dir = self.root / "submission"
        self.home = self.root / "home"
        self.tmp = self.root / "tmp"
        code_dir = self.root / "worker"
        for folder in (self.submission_dir, self.home, self.tmp, code_dir):
            folder.mkdir(mode=0o700)
        self.submission = self.submission_dir / EXERCISE.submission
        self.submission.write_text(source_text, encoding="utf-8")
        here = Path(__file__).resolve().parent
        for name in WORKER_FILES:
            shutil.copyfile(here / name, code_dir / name)
            (code_dir / name).chmod(0o644)
        self.child = code_dir / "child.py"
        self.root.chmod(0o711)
        code_dir.chmod(0o755)
        if self.uid is not None:
            for path, owner, mode in ((self.submission_dir, 0, 0o750), (self.submission, 0, 0o640),
                                      (self.home, self.uid, 0o700), (self.tmp, self.uid, 0o700)):
                os.chown(path, owner, self.uid)
                path.chmod(mode)

    @property
    def layers(self):
        """The isolation layers a worker of this sandbox runs under, for the record."""
        if self.uid is None:
            return []
        filtered = ["seccomp"] if seccomp.ARCHITECTURES.get(os.uname().machine) else []
        devices = ["landlock"] if landlock.available() else []
        return [f"uid {self.uid}", *filtered, *devices, *(namespaces.LAYERS if self.isolate else ())]

    def env(self):
        """The worker's whole environment: nothing of the grader's, except which GPUs it may use."""
        passed = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        return {
            **passed,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLBACKEND": "Agg",
            **LIBRARY_ENV,
        }

    def preexec(self):
        """Runs in the forked child before exec (see enter)."""
        enter(self.limits, self.uid, str(self.root), self.isolate, self.keep)

    def kill(self):
        """As root, kill every process of the worker's uid, wherever it went."""
        if self.uid is not None:
            kill_uid(self.uid)

    def disk_bytes(self):
        """What the worker wrote where the uid-only layer lets it (see residue.disk_bytes)."""
        return residue.disk_bytes(self.uid, [self.home, self.tmp])

    def cleanup(self):
        """Remove what the uid left and the sandbox folder (one bounded removal, whatever the
        worker made inside), then free the uid; call kill() first. Never raises. A worker that had
        an IPC namespace of its own left no IPC object (its namespace took them along)."""
        if self.uid is None:
            residue.remove([self.root])
        else:
            residue.clear(self.uid, [self.root], ipc=not self.isolate)
        if self.lease is not None:
            self.lease.close()
