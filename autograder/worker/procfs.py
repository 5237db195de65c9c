"""Read the process table from /proc: what the grader needs to account for and kill a worker."""
import os
from typing import NamedTuple

PAGE = os.sysconf("SC_PAGE_SIZE")


class Process(NamedTuple):
    pid: int
    ppid: int
    session: int
    state: str
    rss: int  # bytes (with processes(page_tables=True), its page tables' too)
    uid: int  # real uid (from status: the owner of /proc/PID is root for non-dumpable processes)


_uids = {}  # (pid, start time) -> real uid: status is read once per process, not on every scan


def processes(owners=None, page_tables=False):
    """Every live entry of /proc, or with `owners` (uids) only the processes whose /proc folder
    one of them owns; processes that vanish while being read are skipped. page_tables: each
    process's rss includes its page tables (VmPTE of status, read on every scan then): read faults
    on regions 2 MiB apart map only the shared zero page, so RSS stays flat while each costs the
    kernel a 4 KiB page table (12 processes held 2.7 GB that way, against a 512 MiB limit).

    The folder /proc/PID always belongs to the process's effective uid (the files in it belong to
    root while the process is not dumpable: the kernel keeps the folder's owner for tools that
    stat it, as this does). A worker's processes run with no_new_privs and no privileges, so their
    effective uid is their real one: owners={uid} finds them all, at the cost of one stat for
    each process of anyone else. On a desktop with hundreds of processes the watch's scans, ten
    a second, then cost what they cost on a grading machine.

    A process's uid is read from status the first time it is seen and kept for its lifetime:
    only the sandbox changes a process's uid, before exec. Files are read with bare
    os.open/os.read (no buffered file objects: about half the cost).
    """
    found, seen = [], {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                if owners is not None and entry.stat(follow_symlinks=False).st_uid not in owners:
                    continue
                fields = _read(f"/proc/{entry.name}/stat").rsplit(b")", 1)[1].split()
                key = (entry.name, fields[19])  # field 22 of stat: the start time, which tells a reused pid
                if fields[0] == b"Z":  # a main thread that exited: its live threads hold the memory
                    fields = _live_thread_stat(entry.name) or fields
                uid, tables = _uids.get(key), 0
                if uid is None or page_tables:
                    status = _read(f"/proc/{entry.name}/status")
                    uid = int(status[status.index(b"\nUid:") + 5:].split(None, 1)[0])
                    at = status.find(b"\nVmPTE:") if page_tables else -1  # absent for kernel threads
                    tables = int(status[at + 7:].split(None, 1)[0]) << 10 if at >= 0 else 0
            except (OSError, ValueError, IndexError):
                continue
            seen[key] = uid
            # stat after the command name: state, ppid, pgrp, session, ..., field 24 resident pages
            found.append(Process(int(entry.name), int(fields[1]), int(fields[3]), fields[0].decode(),
                                 int(fields[21]) * PAGE + tables, uid))
    _uids.clear()
    _uids.update(seen)
    return found


def live_view(pid):
    """/proc/PID, or, when its main thread has exited (pthread_exit) while other threads run, the
    /proc folder of one of those threads: the main thread's own entry then shows no memory and no
    open file, though the threads still hold both (stat and fd are per process in a thread's view)."""
    folder = f"/proc/{pid}"
    try:
        if _read(f"{folder}/stat").rsplit(b")", 1)[1].split()[0] != b"Z":
            return folder
        with os.scandir(f"{folder}/task") as tasks:
            for task in tasks:
                if task.name != str(pid):
                    return task.path
    except (OSError, IndexError):
        pass
    return folder


def _live_thread_stat(pid):
    """stat's fields after the command name as a live thread of process `pid` reads them (its
    memory is the process's), or None when no thread but the exited main one is left."""
    view = live_view(pid)
    if view == f"/proc/{pid}":
        return None
    try:
        return _read(f"{view}/stat").rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _read(path):
    """A small /proc file's content (stat, status: one read of 8 KiB holds either)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        return os.read(descriptor, 8192)
    finally:
        os.close(descriptor)


def descendants(root, table=None):
    """root and every process below it in the parent tree."""
    table = processes() if table is None else table
    children = {}
    for proc in table:
        children.setdefault(proc.ppid, []).append(proc)
    found = [p for p in table if p.pid == root]
    frontier = list(found)
    while frontier:
        below = children.get(frontier.pop().pid, [])
        found.extend(below)
        frontier.extend(below)
    return found


def resident_bytes(pid):
    """The resident set size of one process, or 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0
