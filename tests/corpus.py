"""The known submissions (tests/submissions/manifest.yml) graded in one batch, at any seed.

Shared by tests/test_variants.py (the corpus at the shipped seed), tests/test_corpus_seeds.py (at
a second seed) and tests/measure_corpus.py (the figures of issue 10): grading through `batch` uses
warm slots, two at a time, so a whole corpus costs minutes, not one cold start per file.
"""
import dataclasses
import functools
import shutil
import tempfile
from pathlib import Path

import yaml

from autograder import config as grading_config
from autograder import scoring
from autograder.cohort import batch
from autograder.cohort.executor import DEFAULT_RECYCLE, LocalExecutor
from autograder.cohort.store import Store

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "tests" / "submissions"
MANIFEST = yaml.safe_load((SUBMISSIONS / "manifest.yml").read_text(encoding="utf-8"))

# Failure codes that do not measure the property itself but point at another test that failed
# first (the output's form, a missing prerequisite): their message describes that other test.
UPSTREAM_CODES = {"shape_mismatch": "shapes", "missing_output": "shapes", "not_a_tensor": "shapes",
                  "dtype_mismatch": "shapes", "future_leak_upstream": "causality",
                  "future_leak_upstream_fused": "fused_equivalence",
                  "output_nan_upstream": "causality",
                  "masked_rows_nan_upstream": "masked_zero", "masked_weight_not_zero_upstream": "masked_zero",
                  "masked_column_nan_upstream": "rows_sum_to_one", "rows_do_not_sum_to_one_upstream": "rows_sum_to_one",
                  "weights_not_a_distribution_upstream": "rows_sum_to_one",
                  "rows_dropped_in_eval": "eval_deterministic", "eval_random_upstream": "eval_deterministic",
                  "eval_output_changes": "eval_deterministic", "residual_added_upstream": "reference_match",
                  "mask_raised_upstream": "masked_zero", "mask_shape_mismatch_upstream": "masked_zero"}


def files(kinds=("buggy", "correct", "fakes")):
    """name -> path of every known submission of these kinds ('solution' and 'stub' included when asked)."""
    found = {}
    for kind in kinds:
        if kind == "solution":
            found["solution"] = ROOT / "solutions" / "attention.py"
        elif kind == "stub":
            found["stub"] = ROOT / "assignments" / "attention" / "attention.py"
        else:
            found.update({f"{kind}/{p.stem}": p for p in sorted((SUBMISSIONS / kind).glob("*.py"))})
    return found


def config_at_seed(seed, folder):
    """The shipped grading.yml with hypothesis.seed changed, written into folder and loaded."""
    data = yaml.safe_load(grading_config.DEFAULT_PATH.read_text(encoding="utf-8"))
    data["hypothesis"]["seed"] = seed
    path = Path(folder) / "grading.yml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return grading_config.load(path)


@dataclasses.dataclass(frozen=True)
class Graded:
    """One known submission graded: its raw outcomes and their scoring under the config used."""
    outcomes: dict  # (cls, prop) -> Outcome
    card: scoring.Scorecard

    @functools.cached_property
    def scored(self):
        """(cls, prop) -> ScoredTest (built once: the measures read it in loops)."""
        return {(t.cls, t.prop): t for t in self.card}

    @property
    def total(self):
        return self.card.total

    def lost(self, cls=None):
        """(cls, prop) of every test that earned less than its maximum (0-point tests: that failed)."""
        return sorted(k for k, t in self.scored.items() if (cls is None or k[0] == cls)
                      and (t.score < t.max_score or t.status == "failed"))


def grade_all(paths, seed=None, jobs=2):
    """Grade {name: path} in one batch at hypothesis seed `seed` (None: grading.yml as shipped); {name: Graded}."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        config = grading_config.load() if seed is None else config_at_seed(seed, tmp)
        run = "corpus-shipped" if seed is None else f"corpus-seed-{seed}"
        folder = tmp / "cohort"
        folder.mkdir()
        keys = {}
        for name, path in paths.items():
            key = name.replace("/", "__") + ".py"
            shutil.copyfile(path, folder / key)
            keys[key] = name
        store = Store(tmp / "corpus.sqlite")
        try:
            summary = batch.run_batch(folder, run, store, config,
                                      lambda: LocalExecutor(jobs, config.source, DEFAULT_RECYCLE))
            if summary.failures:
                raise RuntimeError(f"the grader failed on {summary.failures}")
            stored = store.results(store.run(run, summary.run_id))
        finally:
            store.close()
    graded = {}
    for result in stored:
        graded[keys[result.key]] = Graded({(o.cls, o.prop): o for o in result.outcomes},
                                          scoring.score(result.outcomes, config))
    return graded


def collateral(name, graded):
    """The tests a buggy file lost that neither name nor describe its mistake: not in the manifest's
    must_fail or describes, not reference_match (its output differs), not a failure whose code the
    manifest lists as naming the mistake, not a test whose message points at an upstream test that
    the file also lost."""
    entry = MANIFEST["buggy"][name]
    described = {(entry["class"], p) for p in [*entry["must_fail"], *entry.get("describes", []), "reference_match"]}
    lost = set(graded.lost())
    lost -= {k for k in lost if graded.outcomes[k].code in entry.get("describing_codes", ())}
    upstream = set()
    for key in lost:
        outcome, test = graded.outcomes[key], graded.scored[key]
        target = UPSTREAM_CODES.get(outcome.code)
        if target and (key[0], target) in lost or test.blocked_by and {(key[0], r) for r in test.blocked_by} <= lost:
            upstream.add(key)
    return sorted(lost - described - upstream)
