"""The diagnosis (autograder/properties/diagnosis.py): after a failed comparison on values, the one
catalog misconception whose float64 alternative the module's outputs match on every failing
example, carried to results.json, the feedback, the store and the cohort report.

The unit tests feed diagnosis.py hand-made arrays; two tests grade real files (a buggy one and
the reference) through the whole grader. tests/measure_diagnosis.py measures it over the corpus.
"""
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from autograder import config as grading_config
from autograder import feedback, misconceptions
from autograder.cohort import report
from autograder.cohort.store import Store
from autograder.grade import suite_version
from autograder.outcomes import Outcome, outcome_from_exception
from autograder.properties import diagnosis, failures, reference
from autograder.properties.failures import PropertyFailure

ROOT = Path(__file__).resolve().parent.parent
CONFIG = grading_config.load()


@pytest.fixture(autouse=True)
def fresh_state():
    diagnosis.reset()
    yield
    diagnosis.reset()


def self_attention(d_model, d_k, seed=0, batch=2, time=4):
    """A stand-in for harness.Remote (its class, build arguments and float64 parameters) and three
    calls (inputs at scales 0.01, 1 and 30, the last with a mask), as reference_match makes them."""
    rng = np.random.default_rng(seed)
    params = {f"{n}.weight": rng.standard_normal((d_k, d_model)) / np.sqrt(d_model) for n in ("W_Q", "W_K", "W_V")}
    module = SimpleNamespace(cls="SelfAttention", params=params, kwargs={"d_model": d_model, "d_k": d_k})
    mask = (rng.random((batch, time, time)) < 0.6).astype(np.float32)
    mask[..., 0] = 1
    calls = [((rng.standard_normal((batch, time, d_model)).astype(np.float32) * s,), {} if m is None else {"mask": m})
             for s, m in ((0.01, None), (1.0, None), (30.0, mask))]
    return module, calls


def expected(module, calls):
    """reference_match's expected(i): (reference, rounding bound, magnitude, what) per output."""
    found = []
    for (x,), options in calls:
        out, weights, e_out, e_weights = reference.self_attention_bounded(
            module.params, x.astype(np.float64), options.get("mask"))
        magnitude = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))  # the scale the input was drawn at
        found.append([(out, e_out, magnitude, "output"), (weights, e_weights, 1.0, "weights")])
    return found


def returned_by(misconception_id, module, calls):
    """What a float32 module with that mistake returns: the alternative, rounded to float32."""
    entry = misconceptions.get(misconception_id)
    return [[a.astype(np.float32) for a in entry.compute(module.params, x.astype(np.float64), options.get("mask"))]
            for (x,), options in calls]


def diagnose(module, calls, returned):
    return diagnosis.diagnose(module, "reference_match", calls, returned, expected(module, calls))


# ---- diagnosis.py on hand-made arrays -------------------------------------------------------------
def test_one_matching_misconception_is_named():
    module, calls = self_attention(d_model=6, d_k=4)
    assert diagnose(module, calls, returned_by("sa_scale_by_d_k", module, calls)) == "sa_scale_by_d_k"
    diagnosis.reset()
    assert diagnose(module, calls, returned_by("sa_value_from_key", module, calls)) == "sa_value_from_key"


def test_two_matching_misconceptions_name_none():
    """With d_model = 1, dividing by √d_model is not dividing at all: both explain the outputs."""
    module, calls = self_attention(d_model=1, d_k=4)
    returned = returned_by("sa_no_scale", module, calls)
    example = [diagnosis.Call(module.params, module.kwargs, args, options, outputs, wanted)
               for (args, options), outputs, wanted in zip(calls, returned, expected(module, calls))]
    assert set(diagnosis.matching("SelfAttention", example)) == {"sa_no_scale", "sa_scale_by_d_model"}
    assert diagnose(module, calls, returned) is None


def test_no_matching_misconception_names_none():
    module, calls = self_attention(d_model=6, d_k=4)
    honest = returned_by("sa_no_scale", module, calls)
    off = [[output * 1.01, weights] for output, weights in honest]  # a mistake the catalog does not have
    assert diagnose(module, calls, off) is None
    diagnosis.reset()
    broken = [list(r) for r in honest]
    broken[2][1] = broken[2][1][..., :-1]  # a wrong shape matches nothing
    assert diagnose(module, calls, broken) is None


def test_a_name_must_hold_on_every_failing_example_of_the_property():
    """The running intersection: an ambiguous example keeps the name an earlier one gave alone; an
    example that matches something else (or nothing) takes it away; a new property starts afresh."""
    clear, clear_calls = self_attention(d_model=6, d_k=4, seed=1)
    ambiguous, ambiguous_calls = self_attention(d_model=1, d_k=4, seed=2)
    assert diagnose(clear, clear_calls, returned_by("sa_no_scale", clear, clear_calls)) == "sa_no_scale"
    assert diagnose(ambiguous, ambiguous_calls, returned_by("sa_no_scale", ambiguous, ambiguous_calls)) == "sa_no_scale"
    assert diagnose(clear, clear_calls, returned_by("sa_value_from_key", clear, clear_calls)) is None
    assert diagnose(clear, clear_calls, returned_by("sa_no_scale", clear, clear_calls)) is None  # lost for good
    diagnosis.begin("SelfAttention", "reference_match")  # as suite_runner does before each property
    assert diagnose(clear, clear_calls, returned_by("sa_no_scale", clear, clear_calls)) == "sa_no_scale"
    outcome = outcome_from_exception("SelfAttention", "reference_match", PropertyFailure("reference_mismatch_at"))
    assert outcome.diagnosis is None  # the failure itself carries the name (checks.reference_across_calls sets it)
    assert diagnose(ambiguous, ambiguous_calls, returned_by("sa_no_scale", ambiguous, ambiguous_calls)) is None


def test_other_properties_are_diagnosed_where_they_fail_from_the_calls_of_their_example():
    """rows_sum_to_one: the failure raised by the check is diagnosed from what the example's module
    was asked and answered (failures.exchanged), for the property suite_runner says is running."""
    module, calls = self_attention(d_model=6, d_k=4, seed=4)
    module.load_seed = [4, 1]
    replies = [SimpleNamespace(outputs=r) for r in returned_by("sa_softmax_query_axis", module, calls)]
    diagnosis.begin("SelfAttention", "rows_sum_to_one")
    failures.example(B=2, T=4)
    failures.exchanged(module, calls, replies)
    assert PropertyFailure("rows_do_not_sum_to_one").diagnosis == "sa_softmax_query_axis"
    assert PropertyFailure("shape_mismatch").diagnosis is None  # not a comparison of values
    diagnosis.begin("SelfAttention", "shapes")
    assert PropertyFailure("rows_do_not_sum_to_one").diagnosis is None  # not a property diagnosed there
    diagnosis.begin("SelfAttention", "rows_sum_to_one")
    failures.example(B=2, T=4)  # a new example forgets the calls of the last one
    assert PropertyFailure("rows_do_not_sum_to_one").diagnosis is None


def test_a_mistake_the_example_cannot_show_is_not_named():
    """At inputs of scale 1000 a -1e4 fill and a 0 fill give the same outputs wherever either shows
    (every open score far below both): both match, so neither is named; and on inputs where
    neither shows (the outputs are the reference's), neither matches."""
    module, calls = self_attention(d_model=6, d_k=4, seed=0)
    large = [((x * 1000,), options) for (x,), options in calls]
    example = [diagnosis.Call(module.params, module.kwargs, args, options, outputs,
                              diagnosis.reference_of("SelfAttention", module.params, module.kwargs, args, options))
               for (args, options), outputs in zip(large, returned_by("sa_mask_finite_fill", module, large))]
    assert set(diagnosis.matching("SelfAttention", example)) == {"sa_mask_fill_zero", "sa_mask_finite_fill"}
    small = [diagnosis.Call(module.params, module.kwargs, args, options, outputs, wanted)
             for (args, options), outputs, wanted
             in zip(calls, returned_by("sa_mask_finite_fill", module, calls), expected(module, calls))]
    assert diagnosis.matching("SelfAttention", small) == []


def test_nan_matches_only_nan_and_the_tolerance_is_the_references():
    alternative = np.array([1.0, np.nan, np.inf])
    bound = np.zeros(3)
    assert diagnosis.within(np.array([1.0, np.nan, np.inf]), alternative, bound)
    assert not diagnosis.within(np.array([1.0, 0.0, np.inf]), alternative, bound)
    assert diagnosis.within(np.array([1.0 + 5e-5, np.nan, np.inf]), alternative, bound)  # inside 1e-5 + 1e-4·|x|
    assert not diagnosis.within(np.array([1.0 + 5e-4, np.nan, np.inf]), alternative, bound)


def test_dropout_in_eval_is_named_from_the_masks_the_weights_show():
    """MultiHeadAttention returns its weights: the keep masks of a dropout that acts in eval are
    read off them (a dropped weight is exactly 0), and the rest must then match exactly."""
    rng = np.random.default_rng(3)
    heads, d_model, batch, tq, tk = 2, 4, 2, 3, 5
    params = {f"{n}.weight": rng.standard_normal((d_model, d_model)) / 2 for n in ("W_Q", "W_K", "W_V", "W_O")}
    module = SimpleNamespace(cls="MultiHeadAttention", params=params,
                             kwargs={"d_model": d_model, "num_heads": heads, "dropout": 0.2})
    calls = [(tuple(rng.standard_normal((batch, t, d_model)).astype(np.float32) for t in (tq, tk, tk)), {})
             for _ in range(2)]
    entry = misconceptions.get("mha_dropout_in_eval")
    returned, wanted = [], []
    for args, _ in calls:
        arrays = [a.astype(np.float64) for a in args]
        drop = {"weights": rng.random((batch, heads, tq, tk)) >= 0.2}
        returned.append([a.astype(np.float32) for a in entry.compute(params, heads, *arrays, None, p=0.2, drop=drop)])
        out, weights, e_out, e_weights = reference.multi_head_attention_bounded(params, heads, *arrays)
        wanted.append([(out, e_out, 1.0, "output"), (weights, e_weights, 1.0, "weights")])
    assert diagnosis.diagnose(module, "reference_match", calls, returned, wanted) == "mha_dropout_in_eval"
    diagnosis.reset()
    kept = [[output, np.where(weights == 0, 1e-3, weights)] for output, weights in returned]  # masks that do not fit
    assert diagnosis.diagnose(module, "reference_match", calls, kept, wanted) is None


def test_only_value_misconceptions_of_the_property_are_candidates():
    ids = [entry.id for entry in diagnosis.candidates("SelfAttention", "reference_match")]
    assert "sa_no_scale" in ids and "sa_bias" not in ids
    kinds = [misconceptions.get(i).kind for i in ids]
    assert kinds == sorted(kinds, key=diagnosis.KIND_ORDER.index)


def test_a_structural_mistake_is_named_by_the_failure_only_it_raises():
    """No value names a bias where the contract has none (the outputs are the reference's): the
    failure parameter_count raises for it does, and only for that property and code."""
    diagnosis.begin("SelfAttention", "parameter_count")
    failures.example(d_model=4)
    assert PropertyFailure("unexpected_bias", names=["W_Q.bias"]).diagnosis == "sa_bias"
    assert PropertyFailure("parameter_count", expected=48, got=52).diagnosis is None  # not only a bias does that
    diagnosis.begin("MultiHeadAttention", "parameter_count")
    assert PropertyFailure("unexpected_bias", names=["W_O.bias"]).diagnosis == "mha_bias"
    diagnosis.begin("CausalSelfAttention", "mask_buffer")
    assert PropertyFailure("mask_persistent").diagnosis == "causal_mask_persistent"
    diagnosis.begin("SelfAttention", "shapes")
    assert PropertyFailure("unexpected_bias").diagnosis is None  # another property's code


def test_every_structural_mistake_has_failures_only_it_raises():
    """A structural entry names the (property, code) only its mistake raises, of a property it
    explains, and no two entries of a class claim the same one: a code then names one mistake or
    none. Only a failure other mistakes raise too leaves an entry without (SDPA not called: written
    by hand, or no attention at all, as the fakes show)."""
    for entry in misconceptions.CATALOG:
        if entry.kind != "structural":
            assert entry.shows_as == (), entry.id
            continue
        assert entry.shows_as or entry.id == "causal_fused_by_hand", entry.id
        assert all(prop in entry.explains for prop, _ in entry.shows_as), entry.id
    for cls in {entry.cls for entry in misconceptions.CATALOG}:
        claimed = [pair for entry in misconceptions.of_class(cls) for pair in entry.shows_as]
        assert len(claimed) == len(set(claimed)), cls


def test_a_structural_diagnosis_is_worded_as_one():
    """Its sentence names the mistake without claiming the outputs matched anything."""
    outcome = Outcome("MultiHeadAttention", "parameter_count", "failed", "unexpected_bias", {}, diagnosis="mha_bias")
    for language, claim in (("es", "tu salida coincide"), ("en", "your output matches")):
        sentence = feedback.diagnosis(outcome, language)
        assert misconceptions.get("mha_bias").explanation(language) in sentence and claim not in sentence


# ---- the whole grader ---------------------------------------------------------------------------
def test_a_buggy_file_gets_its_diagnosis_in_results_json_and_in_its_feedback(graded_run):
    run = graded_run(ROOT / "tests" / "submissions" / "buggy" / "sa_no_scaling.py")
    outcome = run.outcomes[("SelfAttention", "reference_match")]
    assert outcome.status == "failed" and outcome.diagnosis == "sa_no_scale"
    tests = {tuple(t["tags"]): t for t in run.results["tests"]}
    test = tests[("SelfAttention", "reference_match")]
    assert test["extra_data"]["diagnosis"] == "sa_no_scale"
    entry = misconceptions.get("sa_no_scale")
    sentence = feedback.label("diagnosis", "es", explanation=entry.es)
    assert sentence in test["output"] and sentence.startswith("Diagnóstico: ")
    assert feedback.label("diagnosis", "en", explanation=entry.en) in feedback.message(outcome, "en")
    # scale fails on values too and is named the same; the other classes, the reference's, pass
    named = {key: t["extra_data"]["diagnosis"] for key, t in tests.items() if "diagnosis" in t["extra_data"]}
    assert named == {("SelfAttention", "reference_match"): "sa_no_scale", ("SelfAttention", "scale"): "sa_no_scale"}


def test_the_reference_gets_no_diagnosis(graded_run, solution_path):
    run = graded_run(solution_path)
    assert all(o.status == "passed" and o.diagnosis is None for o in run.graded.outcomes)
    assert not any("diagnosis" in t["extra_data"] for t in run.results["tests"])


# ---- store and report ---------------------------------------------------------------------------------
NO_SCALE = Outcome("SelfAttention", "reference_match", "failed", "reference_mismatch_at",
                   {"what": "output", "call": 1, "calls": 4, "index": [0, 0, 0], "got": 1.0, "expected": 2.0,
                    "tolerance": 1e-5, "scale": 1.0}, {"B": 1, "T": 2}, diagnosis="sa_no_scale")


def outcomes(*failures):
    failed = {(o.cls, o.prop): o for o in failures}
    return [failed.get((p.cls, p.name), Outcome(p.cls, p.name, "passed")) for p in CONFIG.properties]


def record(store, results):
    version, suite = suite_version(CONFIG)
    run, _ = store.begin_run("c", version, suite, CONFIG.source, "/cohort", False)
    for key, graded in results:
        store.record_grading(run, key, [], "hash-" + key, graded)
    store.finish_run(run.id)
    return run


def test_the_store_keeps_the_diagnosis(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    run = record(store, [("ana", outcomes(NO_SCALE))])
    [result] = store.results(run)
    by_key = {(o.cls, o.prop): o for o in result.outcomes}
    assert by_key[("SelfAttention", "reference_match")].diagnosis == "sa_no_scale"
    assert by_key[("SelfAttention", "shapes")].diagnosis is None
    store.close()


def test_a_store_from_before_diagnoses_opens_and_gains_the_column(tmp_path):
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    with old:
        old.execute("CREATE TABLE outcomes (grading_id INTEGER NOT NULL, position INTEGER NOT NULL, cls TEXT NOT NULL,"
                    " prop TEXT NOT NULL, status TEXT NOT NULL, code TEXT, params TEXT NOT NULL, example TEXT NOT NULL,"
                    " duration REAL NOT NULL, output TEXT NOT NULL, PRIMARY KEY (grading_id, position))")
        old.execute("INSERT INTO outcomes VALUES"
                    " (99, 0, 'SelfAttention', 'scale', 'passed', NULL, '{}', '{}', 0.1, '')")
    old.close()
    store = Store(path)
    columns = [row[1] for row in store.db.execute("PRAGMA table_info(outcomes)")]
    assert columns[-1] == "diagnosis"
    old_row = store.db.execute("SELECT status, diagnosis FROM outcomes WHERE grading_id = 99").fetchall()
    assert old_row == [("passed", None)]
    run = record(store, [("ana", outcomes(NO_SCALE))])
    [result] = store.results(run)
    assert [o.diagnosis for o in result.outcomes if o.diagnosis] == ["sa_no_scale"]
    store.close()


def test_the_cohort_report_counts_students_per_misconception(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    scale = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0, "expected": 0.5, "d_k": 4},
                    {}, diagnosis="sa_no_scale")  # a second property naming it: still one student
    record(store, [("ana", outcomes(NO_SCALE, scale)), ("luis", outcomes(NO_SCALE)), ("marta", outcomes())])
    report.write_reports(store, "c", tmp_path / "es", CONFIG)
    page = (tmp_path / "es" / "index.html").read_text(encoding="utf-8")
    assert "Errores diagnosticados" in page and "<strong>2 estudiantes</strong>" in page
    assert "sa_no_scale" in page and "No escalas los puntajes por 1/√d_k" in page
    report.write_reports(store, "c", tmp_path / "en", grading_config.load(language="en"))
    english = (tmp_path / "en" / "index.html").read_text(encoding="utf-8")
    assert "<strong>2 students</strong>" in english and "You do not scale the scores by 1/√d_k" in english
    [row] = report.diagnosis_counts(report.build_view(store, "c", CONFIG).graded, "es")
    assert (row["id"], row["count"], row["props"]) == ("sa_no_scale", 2, ["reference_match", "scale"])
    store.close()
