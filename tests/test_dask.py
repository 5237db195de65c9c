"""--scheduler: grading sent to a Dask distributed cluster lands in the same store.

Needs the optional extra (pip install 'attention-autograder[dask]'); skipped without it.
"""
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from autograder import config as grading_config  # noqa: E402
from autograder.cli import main  # noqa: E402
from autograder.cohort.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_cohort_graded_on_a_local_dask_cluster(tmp_path):
    config = grading_config.load()
    folder = tmp_path / "cohort"
    folder.mkdir()
    (folder / "sol.py").write_text((ROOT / "solutions" / "attention.py").read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "stub.py").write_text((ROOT / "assignments/attention/attention.py").read_text(encoding="utf-8"),
                                    encoding="utf-8")
    db = tmp_path / "store.sqlite"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as cluster:
        code = main(["batch", str(folder), "--cohort", "d", "--db", str(db), "--scheduler", cluster.scheduler_address])
    assert code == 0
    store = Store(db)
    results = {r.key: r for r in store.results(store.run("d"))}
    store.close()
    assert sorted(results) == ["sol.py", "stub.py"]
    assert all(o.status == "passed" for o in results["sol.py"].outcomes)
    assert len(results["sol.py"].outcomes) == len(config.properties)
    assert {o.code for o in results["stub.py"].outcomes} == {"submission.not_implemented"}
