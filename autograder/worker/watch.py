"""The memory, process and disk watch on a running worker, sampled while the grader waits for it.

Memory is the resident size of every process of the submission plus what no RSS shows (memfds
and deleted files kept open, its scratch tmpfs in namespaces, or else its /dev/shm files and
System V segments); a sample over a limit fails the request as a SubmissionError.
"""
import os
import time

from . import namespaces, procfs, residue
from .submission_errors import SubmissionError

RESOURCE_CHECK_S = 0.1  # how often memory and processes are counted (a /proc scan costs ~5 ms)
DISK_CHECK_S = 1.0  # how often, without namespaces, the uid's files on disk are counted


def worker_processes(session, uid=None):
    """(pid, rss_bytes with its page tables) of every process of the submission: as root, every process of the
    worker's uid, what left the session (setsid) included, and no root stand-in of namespaces.py;
    otherwise every process in the worker's session."""
    if uid is not None:
        return [(p.pid, p.rss) for p in procfs.processes(owners={uid}, page_tables=True) if p.uid == uid]
    return [(p.pid, p.rss) for p in procfs.processes(owners={os.geteuid()}, page_tables=True) if p.session == session]


class ResourceWatch:
    def __init__(self, limits):
        self.limits = limits
        self.peak_rss = 0
        self.last_check = self.last_disk_check = 0.0

    def check_now(self, session, sandbox):
        """Sample at once, disk included: what an import left counts against the import, and what
        a test left against that test (Worker.check_limits), wherever the last sample fell."""
        self._sample(session, sandbox, disk=True)

    def check(self, session, sandbox):
        """Sample if RESOURCE_CHECK_S passed since the last sample (the disk: DISK_CHECK_S)."""
        now = time.monotonic()
        if now - self.last_check >= RESOURCE_CHECK_S:
            self._sample(session, sandbox, disk=now - self.last_disk_check >= DISK_CHECK_S)

    def _sample(self, session, sandbox, disk):
        """Raise a SubmissionError (memory, disk, processes) if a limit is passed."""
        self.last_check = now = time.monotonic()
        processes = worker_processes(session, sandbox.uid)
        outside = self._memory_outside_processes(processes, sandbox)
        rss = sum(size for _, size in processes) + outside
        self.peak_rss = max(self.peak_rss, rss)
        if rss > self.limits.memory_mib << 20:
            shown = (f"/dev/shm, memfds or shared mappings: > {residue.MAX_ENTRIES}" if outside >= residue.OVER_ANY_LIMIT
                     else f"{rss >> 20} MiB")
            raise SubmissionError("memory", shown, limit=self.limits.memory_mib)
        if disk and sandbox.uid is not None and not sandbox.isolate:
            self.last_disk_check = now  # the scratch tmpfs bounds what a worker in namespaces writes
            if sandbox.disk_bytes() > self.limits.disk_mib << 20:
                raise SubmissionError("disk", f"> {self.limits.disk_mib} MiB", limit=self.limits.disk_mib)
        if len(processes) > self.limits.processes:
            raise SubmissionError("processes", f"{len(processes)} processes", limit=self.limits.processes)

    @staticmethod
    def _memory_outside_processes(processes, sandbox):
        """Memory the submission holds that no RSS shows (as root only), sampled as often as RSS:
        a second is enough to fill a container. Each scan is a few system calls for an honest
        worker and stops at residue.MAX_ENTRIES files."""
        if sandbox.uid is None:
            return 0
        held = residue.held_bytes(pid for pid, _ in processes)
        if sandbox.isolate:
            return held + namespaces.scratch_used(pid for pid, _ in processes)
        return held + residue.shm_bytes(sandbox.uid)
