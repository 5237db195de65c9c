"""What a worker uid can leave outside its sandbox folder, counted while it runs and removed after.

Without namespaces (Docker, Gradescope) a worker can write to every world-writable folder of the
machine (/tmp, /var/tmp, /dev/shm, /run/lock...: writable_places() finds them), hold memory in
memfds and in files it deleted but keeps open, make System V objects, POSIX message queues and
keys in its uid's kernel keyring, and start processes that leave its session. None of that is
resident memory of a process it owns, and all of it may outlive the worker. As root, each worker
has a uid of its own, so everything of that uid is the worker's: shm_bytes(), held_bytes() and
disk_bytes() let the client count it against the memory and disk limits while the worker runs,
and clear() removes it after (and before the uid is used again), so nothing passes from one
student to the next.
"""
import ctypes
import functools
import os
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from . import procfs

# Where a worker can write on any machine, whatever the scan finds.
KNOWN_PLACES = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue")
SCAN_DEPTH = 3  # folders this deep below / are searched for world-writable ones (~30 ms)
SCAN_FOLDERS = 20_000  # folders that search reads at most
SCAN_SKIPPED = ("/proc", "/sys", "/usr/lib", "/usr/share", "/usr/include", "/usr/src")
MAX_ENTRIES = 4096  # files a worker may make: counting stops here and the worker is over its disk limit
MAX_DEPTH = 64  # folder depth likewise: each check then resolves at most MAX_ENTRIES paths this long
OVER_ANY_LIMIT = 1 << 50  # the bytes reported for a worker past MAX_ENTRIES or MAX_DEPTH
# What the kernel keeps for one memory mapping, outside any RSS: its vm_area_struct (~230 bytes of
# slab measured for private anonymous pages split by mprotect) and, for an unnamed file (shared
# anonymous memory, a memfd), a file, an inode and a dentry too (4.84 GB for 30 processes of 65,400
# untouched shared mappings of 4 KiB, an outside attacker's: ~2.5 KiB each). A torch worker has ~400.
MAPPING_BYTES = 256
UNNAMED_MAPPING_BYTES = 2560
REMOVE_TIMEOUT_S = 30
REMOVE_BATCH = 256  # paths per rm: PATH_MAX each stays far below the kernel's argument limit
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


@functools.lru_cache(maxsize=1)
def writable_places():
    """The world-writable folders of this machine (the known ones, and any a scan SCAN_DEPTH deep
    finds, inside other world-writable folders too: a root-owned folder in /tmp may hold one, whose
    entries are no top-level entry of /tmp): the places where a worker uid can leave files outside
    its sandbox. At most SCAN_FOLDERS folders are read (a /tmp of many folders, say)."""
    found, pending, read = set(), [("/", 0)], 0
    while pending and read < SCAN_FOLDERS:
        folder, depth = pending.pop()
        read += 1
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        if entry.path in SCAN_SKIPPED or not entry.is_dir(follow_symlinks=False):
                            continue
                        if entry.stat(follow_symlinks=False).st_mode & 0o002:
                            found.add(entry.path)
                        if depth + 1 < SCAN_DEPTH:
                            pending.append((entry.path, depth + 1))
                    except OSError:
                        continue
        except OSError:
            continue
    found.update(os.path.realpath(place) for place in KNOWN_PLACES if os.path.isdir(place))
    return tuple(sorted(found))


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


def owned_entries(uid, folders=None):
    """Top-level entries of `folders` (the writable places) owned by `uid`: a worker can make
    nothing else there (the sticky bit keeps it from others' entries)."""
    return [path for path, owner in _owners(writable_places() if folders is None else folders) if owner == uid]


def _bytes_below(paths, budget):
    """Allocated bytes of the trees at `paths` (not following links) and the entries left in
    budget; a tree deeper than MAX_DEPTH spends the whole budget."""
    total, stack = 0, [(path, 0) for path in paths]
    while stack and budget > 0:
        path, depth = stack.pop()
        budget -= 1 if depth <= MAX_DEPTH else budget
        try:
            info = os.lstat(path)
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                with os.scandir(path) as entries:
                    stack += [(entry.path, depth + 1) for entry in entries]
        except OSError:
            continue
    return total, budget


def shm_bytes(uid):
    """Shared memory the uid holds outside any process's RSS: /dev/shm files and SysV segments;
    more than MAX_ENTRIES files there is over any limit."""
    files, left = _bytes_below(owned_entries(uid, ("/dev/shm",)), MAX_ENTRIES)
    return files + sum(size for _, size in sysv_objects(uid, "shm")) if left > 0 else OVER_ANY_LIMIT


def disk_bytes(uid, private_folders):
    """Bytes the uid wrote to the writable places (/dev/shm is memory: see shm_bytes) and its
    sandbox's own folders; a worker with more than MAX_ENTRIES files, or folders more than
    MAX_DEPTH deep, is over any limit."""
    places = [place for place in writable_places() if place != "/dev/shm"]
    total, left = _bytes_below([*owned_entries(uid, places), *private_folders], MAX_ENTRIES)
    return total if left > 0 else OVER_ANY_LIMIT


def held_bytes(pids):
    """Bytes in memfds, in deleted files and in shared anonymous memory that the processes keep
    open or mapped, and the kernel's own for every mapping (MAPPING_BYTES, UNNAMED_MAPPING_BYTES):
    memory (or disk) that no RSS and no folder shows (a page mapped but never touched is in no
    RSS; a descriptor closed after mmap leaves the file alive through the mapping alone, 1.5 GB
    held at 512 MiB before mappings were read; 30 processes of 65,400 untouched mappings held
    4.8 GB of kernel memory).
    Each file counts once, however many descriptors and mappings hold it; more than MAX_ENTRIES
    of them is over any limit (each costs the grader a stat, every sample)."""
    seen, total, unnamed = set(), 0, 0
    for pid in pids:
        view = procfs.live_view(pid)
        count, mapped = _mappings(view)
        total += (count - len(mapped)) * MAPPING_BYTES + len(mapped) * UNNAMED_MAPPING_BYTES
        paths = [*_unnamed_descriptors(view), *mapped]
        unnamed += len(paths)
        if unnamed > MAX_ENTRIES:
            return OVER_ANY_LIMIT
        for path in paths:
            try:
                info = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


def _unnamed(target):
    """Whether a descriptor's or a mapping's file is in no folder: a memfd, a deleted file, shared
    anonymous memory (`/dev/zero (deleted)`)."""
    return target.startswith("/memfd:") or target.endswith(" (deleted)")


def _unnamed_descriptors(view):
    """/proc/PID/fd/N of the descriptors of a process view that hold an unnamed file."""
    try:
        with os.scandir(f"{view}/fd") as descriptors:
            for descriptor in descriptors:
                try:
                    if _unnamed(os.readlink(descriptor.path)):
                        yield descriptor.path
                except OSError:
                    continue
    except OSError:
        return


def _mappings(view):
    """(how many mappings a process view has, /proc/PID/map_files/RANGE of those whose file is
    unnamed: root may stat them, they lead to the file itself)."""
    try:
        with open(f"{view}/maps", "rb") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return 0, []
    unnamed = []
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) == 6 and _unnamed(fields[5].decode("utf-8", "replace")):
            unnamed.append(f"{view}/map_files/{fields[0].decode()}")
    return len(lines), unnamed


def clear(uid, private_folders=(), ipc=True):
    """Remove everything of `uid` outside its processes: files in the writable places (and the
    given folders) and, with `ipc`, its POSIX message queues and System V objects. Call it when no
    process of the uid runs: removal then races with nothing. It never raises, and gives up after
    REMOVE_TIMEOUT_S."""
    remove([*owned_entries(uid), *private_folders])
    if not ipc:
        return
    _clear_message_queues(uid)
    for ident, _ in sysv_objects(uid, "shm"):
        _libc.shmctl(ident, IPC_RMID, None)
    for ident, _ in sysv_objects(uid, "sem"):
        _libc.semctl(ident, 0, IPC_RMID)
    for ident, _ in sysv_objects(uid, "msg"):
        _libc.msgctl(ident, IPC_RMID, None)


def _clear_message_queues(uid):
    """Remove the uid's POSIX message queues. They live in the mqueue file system, which Docker
    mounts at /dev/mqueue (a writable place, cleared with the others); where it is not mounted, a
    child mounts it privately to find them."""
    if os.path.ismount("/dev/mqueue"):
        return
    pid = os.fork()
    if pid == 0:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(0x00020000) == 0:  # CLONE_NEWNS: the mount stays this child's
                libc.mount(None, b"/", None, 0x4000 | 0x40000, None)  # MS_REC | MS_PRIVATE
                folder = tempfile.mkdtemp(prefix="autograder-mqueue-")
                if libc.mount(b"mqueue", folder.encode(), b"mqueue", 0, None) == 0:
                    for path in owned_entries(uid, (folder,)):
                        os.unlink(path)
                    libc.umount2(folder.encode(), 2)  # MNT_DETACH
                os.rmdir(folder)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def remove(paths):
    """rm -rf the given trees, whatever their depth, entries or names, without following links or
    leaving the file system, REMOVE_BATCH paths at a time; never raises, and gives up after
    REMOVE_TIMEOUT_S in all (the caller checks what is left)."""
    paths = [str(path) for path in paths]
    deadline = time.monotonic() + REMOVE_TIMEOUT_S
    for start in range(0, len(paths), REMOVE_BATCH):
        try:
            subprocess.run(["rm", "-rf", "--one-file-system", "--", *paths[start:start + REMOVE_BATCH]],
                           timeout=max(deadline - time.monotonic(), 0.1), stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return


def _uids_with_keys():
    """Uids holding kernel keys beyond their own two keyrings (/proc/key-users: 'uid: usage n/n q/max')."""
    try:
        lines = Path("/proc/key-users").read_text().splitlines()
    except OSError:
        return set()
    found = set()
    for line in lines:
        fields = line.replace(":", " ").split()
        if len(fields) > 3 and int(fields[3].split("/")[0]) > 2:
            found.add(int(fields[0]))
    return found


def uids_with_residue(first, last):
    """Uids in [first, last] that own a live process, a file in a writable place, an IPC object
    or a kernel key."""
    owners = {p.uid for p in procfs.processes(owners=set(range(first, last + 1))) if p.state != "Z"} | _uids_with_keys()
    owners.update(owner for _, owner in _owners(writable_places()))
    owners.update(int(row.get("uid", -1)) for kind in SYSV_COLUMNS for row in _sysv_rows(kind))
    return {uid for uid in owners if first <= uid <= last}
