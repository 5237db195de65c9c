"""Benchmark: cold-start grading of one submission vs `python -c "import torch"`, side by side.

Prints the wall time of each (median of N alternating runs, so both see the same machine load),
their ratio, and the peak memory. Not a test: run it by hand.

    python tests/bench_grade.py [--runs 5] [--submission solutions/attention.py] [--box]

The grader's bytecode is compiled first, as setup.sh leaves it in Gradescope's image.

Plain (default): on the whole machine; the ratio's target is at most 2.5, the peak resident
memory of the grader's process tree (worker included) under 600 MiB.
--box: both commands inside a cgroup shaped like Gradescope's default container, 0.5 CPU and
768 MiB (a fresh cgroup per run, v1 or v2; needs root); there what counts is CPU, and the
ratio's target is at most 2.0; the peak is the cgroup's (page cache included, as the
container's limit counts it) and OOM kills are reported. Where cgroups cannot be made, it says
so and falls back to one CPU (taskset) and the CPU time that rusage sees of each command (a
worker in its own namespaces may escape it: a lower bound).
"""
import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.worker import procfs  # noqa: E402

BOX_CPU = 0.5  # Gradescope's default container: half a CPU...
BOX_MEMORY = 768 << 20  # ...and 768 MiB


def tree_rss(root_pid):
    """Sum of RSS over root_pid and all its descendants (the worker included)."""
    return sum(p.rss for p in procfs.descendants(root_pid))


def timed(command):
    """Wall time of a command."""
    start = time.perf_counter()
    process = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if process.returncode != 0:
        sys.exit(f"{command} failed:\n{process.stderr.decode()[-2000:]}")
    return elapsed


def peak_memory(command, interval=0.02):
    """Peak RSS (MiB) of a command's process tree, polled from /proc. Measured in runs of its
    own: polling costs CPU, and would slow the timed runs."""
    peak = 0
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while process.poll() is None:
        peak = max(peak, tree_rss(process.pid))
        time.sleep(interval)
    return peak / 2**20


class Box:
    """A fresh cgroup with BOX_CPU and BOX_MEMORY for one command (cgroup v1 cpu+memory, or v2)."""

    V1 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/memory")
    V2 = Path("/sys/fs/cgroup")

    def __init__(self, name):
        if (self.V2 / "cgroup.controllers").exists():
            self.folders = [self.V2 / name]
        else:
            self.folders = [self.V1[0] / name, self.V1[1] / name]
        for folder in self.folders:
            folder.mkdir()
        period = 100_000
        if len(self.folders) == 1:
            (self.V2 / "cgroup.subtree_control").write_text("+cpu +memory")
            self._write("cpu.max", f"{int(BOX_CPU * period)} {period}")
            self._write("memory.max", str(BOX_MEMORY))
        else:
            self._write("cpu.cfs_period_us", str(period), 0)
            self._write("cpu.cfs_quota_us", str(int(BOX_CPU * period)), 0)
            self._write("memory.limit_in_bytes", str(BOX_MEMORY), 1)

    @classmethod
    def unavailable(cls):
        """Why no box can be made here, or None."""
        if os.geteuid() != 0:
            return "not root"
        if not (cls.V2 / "cgroup.controllers").exists() and not all(p.is_dir() for p in cls.V1):
            return "no cgroup cpu and memory controllers"
        try:
            cls(f"bench-grade-probe-{os.getpid()}").remove()
        except OSError as exc:
            return f"cannot create a cgroup ({exc})"
        return None

    def _write(self, name, value, index=0):
        (self.folders[index] / name).write_text(value)

    def _read(self, name, index):
        path = self.folders[index] / name
        return path.read_text() if path.exists() else ""

    def join(self):
        """preexec_fn: the command's process joins every controller's group."""
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def peak_mib(self):
        text = self._read("memory.peak", 0) or self._read("memory.max_usage_in_bytes", -1)
        return int(text) / 2**20 if text.strip() else float("nan")

    def oom_kills(self):
        events = self._read("memory.events", 0) if len(self.folders) == 1 else self._read("memory.oom_control", 1)
        found = [line.split()[1] for line in events.splitlines() if line.startswith("oom_kill ")]
        return int(found[0]) if found else 0

    def remove(self):
        for folder in self.folders:
            for _ in range(50):  # a killed process can take a moment to leave
                try:
                    folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


class CpuAccount:
    """CPU seconds of this process and everything it starts from now on, counted by a cgroup of
    its own (cgroup v2 cpu.stat, or v1 cpuacct): rusage misses a worker that a namespace's init
    or a zygote reaped, and a batch's workers are such. Needs root; `unavailable` says why not."""

    V1 = Path("/sys/fs/cgroup/cpuacct")
    V2 = Path("/sys/fs/cgroup")

    def __init__(self, name):
        self.v2 = (self.V2 / "cgroup.controllers").exists()
        self.folder = (self.V2 if self.v2 else self.V1) / name
        self.folder.mkdir()
        self.home = self._own_group()
        (self.folder / "cgroup.procs").write_text(str(os.getpid()))

    @classmethod
    def unavailable(cls):
        if os.geteuid() != 0:
            return "not root"
        if not (cls.V2 / "cgroup.controllers").exists() and not cls.V1.is_dir():
            return "no cgroup v2 and no cpuacct controller"
        return None

    def _own_group(self):
        """The folder of the group this process is in now, in the hierarchy used."""
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if (self.v2 and number == "0") or (not self.v2 and "cpuacct" in controllers.split(",")):
                return self.folder.parent / path.lstrip("/")
        return self.folder.parent

    def seconds(self):
        if self.v2:
            usage = next(line.split()[1] for line in (self.folder / "cpu.stat").read_text().splitlines()
                         if line.startswith("usage_usec"))
            return int(usage) / 1e6
        return int((self.folder / "cpuacct.usage").read_text()) / 1e9

    def close(self):
        """Back to the group this process came from; the account's group is removed."""
        (self.home / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(50):  # a reaped process can take a moment to leave
            try:
                self.folder.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def boxed(command, number):
    """(wall seconds, cgroup peak MiB, OOM kills) of a command in a fresh box."""
    box = Box(f"bench-grade-{os.getpid()}-{number}")
    try:
        start = time.perf_counter()
        process = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 preexec_fn=box.join)
        elapsed = time.perf_counter() - start
        if process.returncode != 0:
            sys.exit(f"{command} failed in the box:\n{process.stderr.decode()[-2000:]}")
        return elapsed, box.peak_mib(), box.oom_kills()
    finally:
        box.remove()


def cpu_time(command):
    """CPU seconds (user + system) that rusage sees of a command run on one CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    timed(["taskset", "-c", "0", *command] if shutil.which("taskset") else command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_line(label, values, unit="s"):
    return f"{label}: median {statistics.median(values):.2f} {unit}  (runs: {', '.join(f'{v:.2f}' for v in values)})"


def run_boxed(torch_cmd, grade_cmd, runs):
    why = Box.unavailable()
    if why is not None:
        print(f"no Gradescope-shaped box here ({why}): one CPU (taskset) and CPU time instead, a lower bound "
              "for the grade (a worker in its own namespaces escapes rusage); target ratio <= 2.0")
        torch_cpu, grade_cpu = [], []
        for _ in range(runs):
            torch_cpu.append(cpu_time(torch_cmd))
            grade_cpu.append(cpu_time(grade_cmd))
        print(median_line("import torch      CPU", torch_cpu))
        print(median_line("grade (cold start) CPU", grade_cpu))
        print(f"ratio grade/import: {statistics.median(grade_cpu) / statistics.median(torch_cpu):.2f}  (target <= 2.0)")
        return
    print(f"in a cgroup of {BOX_CPU} CPU and {BOX_MEMORY >> 20} MiB (Gradescope's default container), a fresh one per run")
    results = {"torch": [], "grade": []}
    for number in range(runs):
        results["torch"].append(boxed(torch_cmd, f"t{number}"))
        results["grade"].append(boxed(grade_cmd, f"g{number}"))
    for label, key in (("import torch      ", "torch"), ("grade (cold start)", "grade")):
        walls = [wall for wall, _, _ in results[key]]
        print(median_line(label, walls) + f"  peak {max(p for _, p, _ in results[key]):.0f} MiB, "
              f"OOM kills {sum(k for _, _, k in results[key])}")
    ratio = statistics.median(w for w, _, _ in results["grade"]) / statistics.median(w for w, _, _ in results["torch"])
    print(f"ratio grade/import: {ratio:.2f}  (target <= 2.0)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--submission", default=str(ROOT / "solutions" / "attention.py"))
    parser.add_argument("--box", action="store_true", help="in a 0.5-CPU, 768 MiB cgroup, like Gradescope's container")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-grade-") as out:
        bench(args, out)


def bench(args, out):
    torch_cmd = [sys.executable, "-c", "import torch"]
    grade_cmd = [sys.executable, "-m", "autograder", "grade", args.submission, "--out", out]
    # The grader's bytecode, as setup.sh leaves it in Gradescope's image (and a first run leaves
    # it wherever Python may write it): without it, each run compiles ~70 modules (~0.2 CPU-s).
    compileall.compile_dir(ROOT / "autograder", quiet=1)
    timed(torch_cmd)  # warm the page cache for both
    timed(grade_cmd)
    if args.box:
        run_boxed(torch_cmd, grade_cmd, args.runs)
        return
    torch_times, grade_times = [], []
    for _ in range(args.runs):
        torch_times.append(timed(torch_cmd))
        grade_times.append(timed(grade_cmd))
    peaks = [peak_memory(grade_cmd) for _ in range(2)]
    t_torch, t_grade = statistics.median(torch_times), statistics.median(grade_times)
    print(median_line("import torch      ", torch_times))
    print(median_line("grade (cold start)", grade_times))
    print(f"ratio grade/import: {t_grade / t_torch:.2f}  (target <= 2.5)")
    print(f"peak RSS of the grader's process tree: {max(peaks):.0f} MiB  (target < 600 MiB)")


if __name__ == "__main__":
    main()
