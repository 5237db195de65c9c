"""Throughput and memory of batch grading: a script that prints figures, not a test.

    python tests/bench_batch.py --count 500 [--jobs 2] [--mix correct,buggy,stub]

Builds COUNT distinct submissions (the corpus's correct and buggy variants and the empty stub,
each made unique by a trailing comment so that nothing is skipped as unchanged), grades them
with `batch` into a fresh store, and prints submissions per minute plus the resident memory of
the whole grading process tree (batch process, slots, zygotes, workers) sampled while it runs,
so that growth over the cohort shows.
"""
import argparse
import itertools
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder import config as grading_config  # noqa: E402
from autograder.cohort import batch  # noqa: E402
from autograder.cohort.executor import DEFAULT_RECYCLE, LocalExecutor  # noqa: E402
from autograder.cohort.store import Store  # noqa: E402
from bench_grade import CpuAccount, tree_rss  # noqa: E402  (tests/ is this script's folder)

KINDS = {
    "correct": [ROOT / "solutions" / "attention.py", *sorted((ROOT / "tests/submissions/correct").glob("*.py"))],
    "buggy": sorted((ROOT / "tests/submissions/buggy").glob("*.py")),
    "stub": [ROOT / "assignments" / "attention" / "attention.py"],
}


def _rusage_cpu():
    """A lower bound where no cgroup can count: workers reaped by a zygote or a namespace's init
    never reach this process's rusage (measured: about half of a batch's CPU)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def make_cohort(folder, count, kinds):
    sources = list(itertools.chain.from_iterable(KINDS[k] for k in kinds))
    for i, path in zip(range(count), itertools.cycle(sources)):
        (folder / f"s{i:04d}.py").write_text(path.read_text(encoding="utf-8") + f"\n# submission {i}\n", encoding="utf-8")


class Sampler(threading.Thread):
    def __init__(self, interval=2.0):
        super().__init__(daemon=True)
        self.samples, self.interval, self.stop = [], interval, threading.Event()

    def run(self):
        while not self.stop.wait(self.interval):
            self.samples.append((time.monotonic(), tree_rss(os.getpid()) / 2**20))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="slots (batch's default)")
    parser.add_argument("--mix", default="correct,stub", help=f"comma-separated of {sorted(KINDS)}")
    parser.add_argument("--recycle", type=int, default=DEFAULT_RECYCLE)
    args = parser.parse_args()
    config = grading_config.load()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cohort"
        folder.mkdir()
        make_cohort(folder, args.count, args.mix.split(","))
        store = Store(Path(tmp) / "bench.sqlite")
        sampler = Sampler()
        sampler.start()
        why_not = CpuAccount.unavailable()
        account = None if why_not else CpuAccount(f"bench-batch-{os.getpid()}")
        cpu_before = account.seconds() if account else _rusage_cpu()
        started = time.monotonic()
        try:
            summary = batch.run_batch(folder, "bench", store, config,
                                      lambda: LocalExecutor(args.jobs, config.source, args.recycle))
            wall = time.monotonic() - started
            cpu = (account.seconds() if account else _rusage_cpu()) - cpu_before
        finally:
            if account:
                account.close()
        sampler.stop.set()
        gradings = store.count("gradings")
        seconds = [row[0] for row in store.db.execute("SELECT seconds FROM gradings")]
        store.close()
    rss = [mib for _, mib in sampler.samples]
    print(f"submissions: {args.count} ({args.mix}), slots: {args.jobs}, load average now: "
          f"{os.getloadavg()[0]:.2f} (other processes share these cores)")
    print(f"graded: {summary.graded}, grader failures: {len(summary.failures)}, stored gradings: {gradings}")
    print(f"wall: {wall:.1f} s  ->  {60 * summary.graded / wall:.1f} submissions/minute (slot start-up included)")
    if not seconds:
        sys.exit(f"nothing was graded; first failure: {summary.failures[:1]}")
    print(f"median grading wall time in a slot: {statistics.median(seconds):.2f} s per submission")
    per = cpu / max(summary.graded, 1)
    cores = os.cpu_count()
    counted = "counted by a cgroup" if account else f"rusage only, a lower bound ({why_not})"
    print(f"CPU of the whole tree ({counted}): {cpu:.1f} s = {per:.2f} s per submission  ->  at most "
          f"{60 * cores / per:.1f} submissions/minute on {cores} otherwise idle cores")
    if len(rss) >= 10:
        tenth = len(rss) // 10
        deciles = [statistics.median(rss[i * tenth:(i + 1) * tenth]) for i in range(10)]
        print(f"process-tree RSS (MiB), median per tenth of the run: {' '.join(f'{m:.0f}' for m in deciles)}"
              f"; peak {max(rss):.0f}, samples {len(rss)} (the first tenth includes slot start-up)")


if __name__ == "__main__":
    main()
