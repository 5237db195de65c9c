"""Batch grading: real submissions graded by warm slots into the store, skipped when unchanged,
resumed after kill -9 without loss or duplicates, and forks that stay isolated from each other."""
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder import config as grading_config
from autograder import submission
from autograder.cohort import batch
from autograder.cohort.executor import RECYCLE_GROWTH_MIB, LocalExecutor, Result, Slot, Task
from autograder.cohort.store import Store
from autograder.grade import collect_outcomes
from autograder.outcomes import Outcome

ROOT = Path(__file__).resolve().parent.parent
CONFIG = grading_config.load()
SOLUTION = (ROOT / "solutions" / "attention.py").read_text(encoding="utf-8")
STUB = (ROOT / "assignments" / "attention" / "attention.py").read_text(encoding="utf-8")
NO_SCALING = ROOT / "tests" / "submissions" / "buggy" / "sa_no_scaling.py"
# Wrong by a cache keyed on the input's address: which calls hit it must not depend on the process.
CACHED_BY_ADDRESS = ROOT / "tests" / "submissions" / "buggy" / "sa_projections_cached_by_address.py"


def local(jobs=2):
    return lambda: LocalExecutor(jobs, CONFIG.source)


def passed(result):
    return {(o.cls, o.prop) for o in result.outcomes if o.status == "passed"}


def raw(outcomes):
    """What decides a score: everything but the durations."""
    return [(o.cls, o.prop, o.status, o.code, o.params, o.example) for o in outcomes]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cohort")
    (folder / "ana").mkdir()
    (folder / "ana" / "attention.py").write_text(SOLUTION, encoding="utf-8")
    (folder / "luis.py").write_text(NO_SCALING.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "stub.py").write_text(STUB, encoding="utf-8")
    (folder / "cached.py").write_text(CACHED_BY_ADDRESS.read_text(encoding="utf-8"), encoding="utf-8")
    # wrong by an offset that is a string's hash: the same only where the hash seed is the same
    (folder / "hashed.py").write_text(SOLUTION.replace("        return weights @ V, weights\n",
                                                       "        return weights @ V + hash('atención') % 997 / 997, weights\n", 1),
                                      encoding="utf-8")
    (folder / "bad.zip").write_bytes(b"this is not a zip")
    store = Store(folder.parent / "cohort.sqlite")
    summary = batch.run_batch(folder, "c", store, CONFIG, local())
    yield folder, store, summary, {r.key: r for r in store.results(store.run("c"))}
    store.close()


def test_batch_grades_every_submission(cohort):
    _, _, summary, results = cohort
    assert (summary.graded, len(summary.unreadable_entries), summary.reused, summary.failures) == (5, 1, 0, [])
    everything = {(p.cls, p.name) for p in CONFIG.properties}
    assert passed(results["ana"]) == everything
    assert passed(results["stub.py"]) == set()
    lost = everything - passed(results["luis.py"])
    assert {("SelfAttention", "scale"), ("SelfAttention", "reference_match")} <= lost
    assert {cls for cls, _ in lost} == {"SelfAttention"}
    assert {(o.status, o.code) for o in results["bad.zip"].outcomes} == {("error", "load.bad_zip")}
    assert results["ana"].peak_rss_mib > 0 and results["ana"].seconds > 0


@pytest.mark.parametrize("key", ["luis.py", "cached.py", "hashed.py"])
def test_forked_worker_gives_what_a_fresh_worker_gives(cohort, key):
    folder, _, _, results = cohort
    fresh = collect_outcomes(folder / key, CONFIG, slot=7).outcomes
    assert raw(fresh) == raw(results[key].outcomes)
    loaded = submission.load(folder / key)
    assert hashlib.sha256(loaded.source.encode()).hexdigest() == results[key].content_hash


def test_unchanged_submissions_are_kept_and_changed_ones_regraded(cohort):
    folder, store, _, first = cohort
    gradings = store.count("gradings")
    again = batch.run_batch(folder, "c", store, CONFIG, local())
    assert (again.graded, again.reused, again.resumed) == (0, 6, False)
    assert store.count("gradings") == gradings
    kept = {r.key: r for r in store.results(store.run("c"))}
    assert all(kept[k].reused and raw(kept[k].outcomes) == raw(first[k].outcomes) for k in first)

    (folder / "stub.py").write_text(STUB + "\n# edited\n", encoding="utf-8")
    changed = batch.run_batch(folder, "c", store, CONFIG, local())
    assert (changed.graded, changed.reused) == (1, 5)
    assert store.count("gradings") == gradings + 1


def make_stubs(folder, count):
    folder.mkdir()
    for i in range(count):
        (folder / f"s{i}.py").write_text(STUB + f"\n# {i}\n", encoding="utf-8")


def test_kill_9_then_rerun_loses_and_duplicates_nothing(tmp_path):
    folder, db = tmp_path / "cohort", tmp_path / "store.sqlite"
    make_stubs(folder, 3)
    command = [sys.executable, "-m", "autograder", "batch", str(folder), "--cohort", "k", "--db", str(db), "--jobs", "1"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    committed = 0
    while committed == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        if db.exists():
            store = Store(db)
            committed = store.count("gradings")
            store.close()
    assert committed > 0 and proc.poll() is None, "the batch should still be running after its first commit"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    store = Store(db)
    interrupted = store.count("gradings")
    assert 1 <= interrupted < 3 and store.runs("k")[-1].finished_at is None
    summary = batch.run_batch(folder, "k", store, CONFIG, local())
    assert summary.resumed and summary.already_done == interrupted and summary.graded == 3 - interrupted
    assert store.count("gradings") == 3 and store.count("run_results") == 3 and store.count("submissions") == 3
    assert store.count("outcomes") == 3 * len(CONFIG.properties)
    assert [r.id for r in store.runs("k")] == [summary.run_id] and store.runs("k")[0].finished_at

    regraded = batch.run_batch(folder, "k", store, CONFIG, local(), regrade=True)
    assert (regraded.graded, regraded.reused, regraded.resumed) == (3, 0, False)
    first, second = (store.results(run) for run in store.runs("k"))
    assert [raw(a.outcomes) for a in first] == [raw(b.outcomes) for b in second]
    assert store.count("gradings") == 6
    store.close()


HOSTILE = SOLUTION + """
import torch
torch.softmax = lambda x, dim=-1, **kw: x
torch.nn.functional.softmax = torch.softmax
torch.Tensor.softmax = lambda self, dim=-1, **kw: self
"""


def test_a_submission_cannot_reach_the_next_one_in_its_slot(tmp_path):
    folder = tmp_path / "cohort"
    folder.mkdir()
    (folder / "a_hostile.py").write_text(HOSTILE, encoding="utf-8")
    (folder / "b_correct.py").write_text(SOLUTION, encoding="utf-8")
    store = Store(tmp_path / "store.sqlite")
    batch.run_batch(folder, "h", store, CONFIG, local(jobs=1))  # one slot: b is forked right after a
    results = {r.key: r for r in store.results(store.run("h"))}
    store.close()
    everything = {(p.cls, p.name) for p in CONFIG.properties}
    assert passed(results["a_hostile.py"]) != everything
    assert passed(results["b_correct.py"]) == everything


def test_a_slot_is_replaced_after_its_count_or_once_it_has_grown():
    slot = Slot(1)
    slot.done, slot.baseline_rss, slot.rss = 5, 100 << 20, (100 + RECYCLE_GROWTH_MIB) << 20
    assert not slot.worn_out(recycle=10)
    slot.rss += 1 << 20
    assert slot.worn_out(recycle=10)
    slot.rss, slot.done = slot.baseline_rss, 10
    assert slot.worn_out(recycle=10)


def test_a_killed_slot_leaves_no_copy_of_the_code_it_graded(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # where the slots, their zygotes and workers would write
    marker = "# marker-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()
    executor = local(jobs=1)()
    [(task, result)] = list(executor.run([Task("a.py", SOLUTION + marker + "\n")]))
    assert task.key == "a.py" and len(result.outcomes) == len(CONFIG.properties)
    executor.close(cancel=True)  # an interrupted batch kills its slots
    left = [path for path in scratch.rglob("*") if path.is_file() and marker.encode() in path.read_bytes()]
    assert left == []


class Contended:
    """An executor of two slots whose first grading of "slow.py" ended badly because of a classmate
    (the cores kept busy: out of time; memory held beside it: killed by the kernel's OOM killer):
    what batch stores is the grading it makes again, alone."""
    slots = 2

    def __init__(self, status, code):
        self.runs = []
        self.status, self.code = status, code

    def run(self, tasks):
        self.runs.append([task.key for task in tasks])
        alone = len(self.runs) > 1
        for task in tasks:
            disturbed = task.key == "slow.py" and not alone
            outcome = Outcome("SelfAttention", "shapes", self.status if disturbed else "passed",
                              self.code if disturbed else None)
            yield task, Result([outcome.as_dict()], peak_rss_mib=1.0, seconds=1.0)

    def close(self, cancel=False):
        pass


@pytest.mark.parametrize("status, code", [("timeout", "submission.timeout"), ("error", "submission.crash"),
                                          ("error", "submission.import_crash")])
def test_a_grading_that_ran_out_of_time_beside_others_is_graded_again_alone(tmp_path, status, code):
    folder = tmp_path / "cohort"
    folder.mkdir()
    for name in ("ana.py", "slow.py", "luis.py"):
        (folder / name).write_text(SOLUTION, encoding="utf-8")
    executor = Contended(status, code)
    store = Store(tmp_path / "store.sqlite")
    try:
        summary = batch.run_batch(folder, "c", store, CONFIG, lambda: executor)
        results = {r.key: r for r in store.results(store.run("c"))}
    finally:
        store.close()
    assert executor.runs == [["ana.py", "luis.py", "slow.py"], ["slow.py"]]  # the second time, nothing beside it
    assert summary.graded == 3 and [o.status for o in results["slow.py"].outcomes] == ["passed"]
