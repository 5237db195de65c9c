"""Benchmark: cold-start grading of one submission vs `python -c "import torch"`, side by side.

Prints the wall time of each (median of N alternating runs, so both see the same machine load),
their ratio (target: at most 2.5), and the peak resident memory of the grader's whole process
tree, worker included (target: under 600 MiB). Not a test: run it by hand.

    python tests/bench_grade.py [--runs 5] [--submission solutions/attention.py]
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.worker import procfs  # noqa: E402


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--submission", default=str(ROOT / "solutions" / "attention.py"))
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="bench-grade-")
    torch_cmd = [sys.executable, "-c", "import torch"]
    grade_cmd = [sys.executable, "-m", "autograder", "grade", args.submission, "--out", out]
    timed(torch_cmd)  # warm the page cache for both
    timed(grade_cmd)
    torch_times, grade_times = [], []
    for _ in range(args.runs):
        torch_times.append(timed(torch_cmd))
        grade_times.append(timed(grade_cmd))
    peaks = [peak_memory(grade_cmd) for _ in range(2)]
    t_torch, t_grade = statistics.median(torch_times), statistics.median(grade_times)
    print(f"import torch      : median {t_torch:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in torch_times)})")
    print(f"grade (cold start): median {t_grade:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in grade_times)})")
    print(f"ratio grade/import: {t_grade / t_torch:.2f}  (target <= 2.5)")
    print(f"peak RSS of the grader's process tree: {max(peaks):.0f} MiB  (target < 600 MiB)")


if __name__ == "__main__":
    main()
