"""What a worker uid can leave outside its sandbox folder, counted while it runs and removed after.

Without namespaces (Docker, Gradescope) a worker can write to the machine's shared /tmp,
/var/tmp and /dev/shm, make System V shared memory, semaphores and message queues, and start
processes that leave its session. None of that is resident memory of a process it owns, and all
of it outlives the worker. As root, each worker has a uid of its own, so everything of that uid
is the worker's: shm_bytes() and disk_bytes() let the client count it against the memory and
disk limits while the worker runs, and clear() removes it after (and before the uid is used
again), so nothing passes from one student to the next.
"""
import ctypes
import os
import stat
import subprocess
from pathlib import Path

from . import procfs

SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")
MAX_ENTRIES = 20000  # counting stops here: a worker that made more has exceeded its disk limit anyway
REMOVE_TIMEOUT_S = 30
IPC_RMID = 0
SYSV_COLUMNS = {"shm": ("shmid", "size"), "sem": ("semid", "nsems"), "msg": ("msqid", "cbytes")}

_libc = ctypes.CDLL(None, use_errno=True)


def _sysv_rows(kind):
    """The rows of /proc/sysvipc/KIND as dicts keyed by its header."""
    try:
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
    except OSError:
        return []
    header = lines[0].split() if lines else []
    return [dict(zip(header, line.split())) for line in lines[1:]]


def sysv_objects(uid, kind):
    """(id, bytes) of the System V objects of one kind ('shm', 'sem', 'msg') owned by `uid`."""
    ident, size = SYSV_COLUMNS[kind]
    return [(int(row[ident]), int(row.get(size, 0))) for row in _sysv_rows(kind) if row.get("uid") == str(uid)]


def _owners(folders):
    """(path, owner uid) of every top-level entry of `folders`."""
    for folder in folders:
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        yield entry.path, entry.stat(follow_symlinks=False).st_uid
                    except OSError:
                        continue
        except OSError:
            continue


def owned_entries(uid, folders=SHARED_FOLDERS):
    """Top-level entries of `folders` owned by `uid` (a worker can make nothing else there)."""
    return [path for path, owner in _owners(folders) if owner == uid]


def _bytes_below(paths, budget):
    """Allocated bytes of the trees at `paths` (not following links) and the entries left in budget."""
    total, stack = 0, list(paths)
    while stack and budget > 0:
        path = stack.pop()
        budget -= 1
        try:
            info = os.lstat(path)
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                with os.scandir(path) as entries:
                    stack += [entry.path for entry in entries]
        except OSError:
            continue
    return total, budget


def shm_bytes(uid):
    """Shared memory the uid holds outside any process's RSS: /dev/shm files and SysV segments."""
    files, _ = _bytes_below(owned_entries(uid, ("/dev/shm",)), MAX_ENTRIES)
    return files + sum(size for _, size in sysv_objects(uid, "shm"))


def disk_bytes(uid, private_folders):
    """Bytes the uid wrote to the shared temp folders and its sandbox's own folders; a worker with
    more than MAX_ENTRIES files is counted as over any limit."""
    total, left = _bytes_below([*owned_entries(uid, ("/tmp", "/var/tmp")), *private_folders], MAX_ENTRIES)
    return total if left > 0 else float("inf")


def clear(uid, private_folders=()):
    """Remove everything of `uid` outside its processes: files in the shared folders (and the
    given folders), and its System V objects. Call it when no process of the uid runs: removal
    then races with nothing. It never raises, and gives up after REMOVE_TIMEOUT_S."""
    remove([*owned_entries(uid), *private_folders])
    for ident, _ in sysv_objects(uid, "shm"):
        _libc.shmctl(ident, IPC_RMID, None)
    for ident, _ in sysv_objects(uid, "sem"):
        _libc.semctl(ident, 0, IPC_RMID)
    for ident, _ in sysv_objects(uid, "msg"):
        _libc.msgctl(ident, IPC_RMID, None)


def remove(paths):
    """rm -rf the given trees, whatever their depth, entries or names, without following links or
    leaving the file system; never raises, and gives up after REMOVE_TIMEOUT_S."""
    if not paths:
        return
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", *map(str, paths)], timeout=REMOVE_TIMEOUT_S,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        pass


def uids_with_residue(first, last):
    """Uids in [first, last] that own a live process, a file in the shared folders or an IPC object."""
    owners = {p.uid for p in procfs.processes() if p.state != "Z"}
    owners.update(owner for _, owner in _owners(SHARED_FOLDERS))
    owners.update(int(row.get("uid", -1)) for kind in SYSV_COLUMNS for row in _sysv_rows(kind))
    return {uid for uid in owners if first <= uid <= last}
