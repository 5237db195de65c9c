"""The suite's checks on plain arrays, without a worker: the scale fit knows when it measures
nothing, `attends` tells attention from its absence, the key scaling both sides draw, and the call
a failure names."""
import json
import math

import numpy as np
import pytest
import torch

from autograder.properties import checks, failures, harness, reference
from autograder.properties.failures import PropertyFailure
from autograder.worker import parameters
from autograder.properties.strategies import EXACT_P

pytestmark = pytest.mark.unit


def softmax(scores, axis=-1):
    return reference.softmax(scores.swapaxes(axis, -1)).swapaxes(axis, -1)


def as_float32(weights):
    """What a module returns: float32 weights, judged in float64."""
    return weights.astype(np.float32).astype(np.float64)


@pytest.fixture
def projections():
    """x (B,T,d_model) and W_Q, W_K (d_k, d_model), drawn like the suite's."""
    rng = np.random.default_rng(7)
    d_model, d_k = 6, 4
    x = rng.standard_normal((3, 5, d_model))
    w_q, w_k = (rng.standard_normal((d_k, d_model)) / np.sqrt(d_model) for _ in range(2))
    return x, x @ w_q.T, x @ w_k.T, d_k


def failure_code(weights, scores, d_k):
    try:
        checks.scale_is(weights, scores, d_k)
    except PropertyFailure as failure:
        return failure.code, failure.params
    return None, {}


@pytest.mark.parametrize("scale, measured", [(0.5, None), (1.0, 1.0), (0.25, 0.25), (1 / np.sqrt(6), 0.40825)])
def test_a_wrong_scale_alone_is_measured(projections, scale, measured):
    _, q, k, d_k = projections
    scores = reference.unscaled_scores(q, k)
    code, params = failure_code(as_float32(softmax(scale * scores)), scores, d_k)
    if measured is None:  # 1/sqrt(4): right
        assert code is None
    else:
        assert code == "wrong_scale" and params["measured"] == pytest.approx(measured, abs=1e-5)


def test_a_scale_missed_by_a_call_that_changed_torchs_settings_names_the_settings(projections):
    """Weights a matmul in bfloat16 moved (`torch.backends.mkldnn.matmul.fp32_precision = 'bf16'`
    in forward): no scale, or another, fits, and the setting the call changed is the mistake named
    (an outside writer's file was told to fix its projections). A scale that fits names nothing."""
    _, q, k, d_k = projections
    scores = reference.unscaled_scores(q, k)
    changed = ["torch.backends.mkldnn.matmul.fp32_precision"]
    for wrong in (softmax(0.3 * scores), softmax(scores.swapaxes(-1, -2))):
        with pytest.raises(PropertyFailure) as caught:
            checks.scale_is(as_float32(wrong), scores, d_k, settings_changed=changed)
        assert caught.value.code == "global_settings_changed" and caught.value.params["names"] == changed
    checks.scale_is(as_float32(softmax(scores / np.sqrt(d_k))), scores, d_k, settings_changed=changed)


def test_weights_of_other_scores_cannot_be_measured(projections):
    """Right scale, wrong scores (Q from W_K, K·Qᵀ): no c fits. The softmax's other axis leaves
    rows that do not sum to 1: named as rows_sum_to_one's mistake, not as a fit."""
    _, q, k, d_k = projections
    scores = reference.unscaled_scores(q, k)
    c = 1 / np.sqrt(d_k)
    for weights in (softmax(c * reference.unscaled_scores(k, k)),
                    softmax(c * reference.unscaled_scores(k, q))):
        code, params = failure_code(as_float32(weights), scores, d_k)
        assert code == "scale_unmeasurable" and params["residual"] > 0.1
    assert failure_code(as_float32(softmax(c * scores, axis=-2)), scores, d_k)[0] == "weights_not_a_distribution_upstream"


def test_heads_split_as_strided_columns_cannot_be_measured():
    rng = np.random.default_rng(3)
    B, T, h, d_k = 2, 5, 2, 3
    q, k = (rng.standard_normal((B, T, h * d_k)) for _ in range(2))

    def strided(t):
        return t.reshape(B, T, d_k, h).transpose(0, 3, 1, 2)

    scores = reference.unscaled_scores(reference.split_heads(q, h), reference.split_heads(k, h))
    weights = softmax(reference.unscaled_scores(strided(q), strided(k)) / np.sqrt(d_k))
    assert failure_code(as_float32(weights), scores, d_k)[0] == "scale_unmeasurable"


def test_uniform_weights_measure_a_scale_of_zero(projections):
    _, q, k, d_k = projections
    scores = reference.unscaled_scores(q, k)
    code, params = failure_code(np.full(scores.shape, 1 / scores.shape[-1]), scores, d_k)
    assert code == "wrong_scale" and params["measured"] == 0.0


def test_keys_scaled_move_attention_and_nothing_else(projections):
    x, q, k, d_k = projections
    v = x[..., :d_k]

    def attend(keys):
        return reference.attention(q, keys, v)

    (out, weights), (out_scaled, weights_scaled) = attend(k), attend(checks.SCALE_FACTOR * k)
    checks.responds_to("keys", as_float32(weights), as_float32(weights_scaled), weights, weights_scaled, "weights", "W_K")
    # A wrong scale (no 1/sqrt(d_k)) still attends.
    checks.responds_to("keys", *(reference.softmax(reference.unscaled_scores(q, keys)) for keys in (k, 3 * k)),
                       weights, weights_scaled, "weights", "W_K")
    uniform = np.full(weights.shape, 1 / weights.shape[-1])
    with pytest.raises(PropertyFailure) as failed:
        checks.responds_to("keys", uniform, uniform + 1e-30, weights, weights_scaled, "weights", "W_K")
    assert failed.value.code == "keys_ignored" and failed.value.params["change"] == 0.0
    # NaN where it was NaN is no change; NaN that appears is one.
    stuck = np.where(np.arange(out.shape[-1]) == 0, np.nan, out)
    with pytest.raises(PropertyFailure):
        checks.responds_to("keys", stuck, stuck.copy(), out, out_scaled, "output", "W_K")
    checks.responds_to("keys", out, np.full(out.shape, np.nan), out, out_scaled, "output", "W_K")
    # An example where the reference barely moves cannot tell, and judges nothing.
    checks.responds_to("keys", uniform, uniform, weights, weights + 1e-3, "weights", "W_K")


def test_weights_from_the_keys_alone_move_with_the_keys_but_not_with_the_queries(projections):
    _, q, k, _ = projections

    def key_only(keys):  # a score per key, the same for every query: not attention
        return reference.softmax(np.broadcast_to(keys.sum(-1)[..., None, :], q.shape[:-1] + keys.shape[-2:-1]))

    expected = [reference.attention(queries, keys, keys)[1] for queries, keys in ((q, k), (q, 3 * k), (3 * q, k))]
    checks.responds_to("keys", key_only(k), key_only(3 * k), expected[0], expected[1], "weights", "W_K")
    with pytest.raises(PropertyFailure) as failed:
        checks.responds_to("queries", key_only(k), key_only(k), expected[0], expected[2], "weights", "W_Q")
    assert failed.value.code == "queries_ignored"
    checks.responds_to("queries", expected[0], expected[2], expected[0], expected[2], "weights", "W_Q")


def test_weights_from_norms_ignore_the_keys_sign_and_fail(projections):
    """|q|·|k| scores move with the keys' size and differ by query, but not with their sign; q·kᵀ
    with any scale (or none) does."""
    _, q, k, d_k = projections

    def norms(keys):
        return reference.softmax(np.linalg.norm(q, axis=-1)[..., :, None] * np.linalg.norm(keys, axis=-1)[..., None, :])

    expected = [reference.attention(q, keys, keys)[1] for keys in (k, -k)]
    with pytest.raises(PropertyFailure) as failed:
        checks.responds_to("key_sign", norms(k), norms(-k), *expected, "weights", "W_K", factor=-1.0)
    assert failed.value.code == "key_sign_ignored" and failed.value.params["factor"] == -1.0
    for scale in (1.0, 1 / np.sqrt(d_k), 1 / d_k):
        got = [reference.softmax(scale * reference.unscaled_scores(q, keys)) for keys in (k, -k)]
        checks.responds_to("key_sign", *got, *expected, "weights", "W_K", factor=-1.0)
    # Judged where the queries (W_Q) move the weights: norms do, and fail; queries taken from W_K
    # (K·Kᵀ, blind to the sign too, but a mistake of the projections) do not, and are left alone.
    with_queries = [reference.attention(queries, k, k)[1] for queries in (q, checks.SCALE_FACTOR * q)]

    def norms_of(queries, keys):
        return reference.softmax(np.linalg.norm(queries, axis=-1)[..., :, None] * np.linalg.norm(keys, axis=-1)[..., None, :])

    with pytest.raises(PropertyFailure):
        checks.key_sign_matters((norms_of(q, k), norms_of(q, -k), *expected),
                                lambda: (norms_of(q, k), norms_of(checks.SCALE_FACTOR * q, k), *with_queries),
                                "weights", "W_K")
    from_keys = [reference.attention(keys, keys, keys)[1] for keys in (k, -k)]
    checks.key_sign_matters((*from_keys, *expected), lambda: (from_keys[0], from_keys[0], *with_queries),
                            "weights", "W_K")
    asked = []  # where the sign moves the weights, the queries are never asked for
    got = [reference.softmax(reference.unscaled_scores(q, keys)) for keys in (k, -k)]
    checks.key_sign_matters((*got, *expected), lambda: asked.append(1), "weights", "W_K")
    assert asked == []


def test_rows_of_weights_from_the_keys_alone_are_all_alike_and_fail(projections):
    x, q, k, _ = projections
    keys_only = reference.softmax(np.broadcast_to(k.sum(-1)[..., None, :], q.shape[:-1] + k.shape[-2:-1]))
    expected = reference.attention(q, k, k)[1]
    with pytest.raises(PropertyFailure) as failed:
        checks.rows_differ(as_float32(keys_only), expected)
    assert failed.value.code == "same_weights_for_every_query" and failed.value.params["change"] == 0.0
    checks.rows_differ(as_float32(expected), expected)
    checks.rows_differ(as_float32(reference.attention(k, k, k)[1]), expected)  # Q from W_K: still attention
    uniform = np.full(expected.shape, 1 / expected.shape[-1])
    checks.rows_differ(uniform, uniform)  # nothing to tell: judges nothing


def test_the_key_scale_multiplies_those_rows_after_the_same_draws():
    shapes = {"qkv.weight": (12, 4), "qkv.bias": (12,), "proj.weight": (4, 4), "proj.bias": (4,)}
    layers = ("qkv", "proj")
    plain = parameters.draw(np.random.default_rng([5, 1]), shapes, layers)
    scaled = parameters.draw(np.random.default_rng([5, 1]), shapes, layers, checks.layer_scale("qkv", [4, 8]))
    for name in ("qkv.weight", "qkv.bias"):
        np.testing.assert_array_equal(scaled[name][4:8], plain[name][4:8] * np.float32(3))
        rest = np.s_[4:8]
        np.testing.assert_array_equal(np.delete(scaled[name], rest, axis=0), np.delete(plain[name], rest, axis=0))
        assert scaled[name].dtype == np.float32
    for name in ("proj.weight", "proj.bias"):
        np.testing.assert_array_equal(scaled[name], plain[name])
    # Rows past a layer's end (a module with the wrong shape) are simply not there to scale.
    short = parameters.draw(np.random.default_rng(0), {"qkv.weight": (6, 4)}, layers, checks.layer_scale("qkv", [4, 8]))
    assert short["qkv.weight"].shape == (6, 4)


def test_unbiased_layers_get_zero_biases_after_the_same_draws():
    shapes = {"qkv.weight": (12, 4), "qkv.bias": (12,), "proj.weight": (4, 4), "proj.bias": (4,)}
    layers = ("qkv", "proj")
    plain = parameters.draw(np.random.default_rng([5, 1]), shapes, layers)
    unbiased = parameters.draw(np.random.default_rng([5, 1]), shapes, layers, unbiased=["qkv"])
    assert np.any(plain["qkv.bias"]) and not np.any(unbiased["qkv.bias"])
    assert unbiased["qkv.bias"].dtype == np.float32
    for name in ("qkv.weight", "proj.weight", "proj.bias"):
        np.testing.assert_array_equal(unbiased[name], plain[name])
    # A layer without a bias (the student's bias=False) has none to set: nothing is added.
    assert "qkv.bias" not in parameters.draw(np.random.default_rng(0), {"qkv.weight": (6, 4)}, layers, unbiased=["qkv"])


@pytest.mark.parametrize("scale", [
    {"layer": "W_K", "rows": None},
    {"layer": "mask", "rows": None, "factor": 3.0},
    {"layer": "qkv", "rows": None, "factor": 1e6},
    {"layer": "qkv", "rows": None, "factor": float("nan")},
    {"layer": "qkv", "rows": None, "factor": True},
    {"layer": "qkv", "rows": [4, 2], "factor": 3.0},
    {"layer": "qkv", "rows": [-1, 2], "factor": 3.0},
    {"layer": "qkv", "rows": [0, 2.5], "factor": 3.0},
])
def test_a_malformed_key_scale_is_refused_by_the_grader_before_it_is_sent(scale):
    with pytest.raises(ValueError):
        parameters.scaled_rows(scale, ["qkv"])
    with pytest.raises(ValueError):
        harness.Remote(None, "CausalSelfAttention", 0, scale, n_embd=2)


def test_the_worker_applies_the_key_scale_without_builtins_a_submission_may_replace(monkeypatch):
    """The worker runs in the submission's process: sa_monkeypatch sets builtins.abs to return 0,
    and a worker that re-checked the grader's option with abs refused it (attends failed)."""
    import builtins

    shapes, layers = {"qkv.weight": (6, 2)}, ["qkv"]
    honest = parameters.draw(np.random.default_rng(0), shapes, layers, checks.layer_scale("qkv", [2, 4]))
    monkeypatch.setattr(builtins, "abs", lambda value: 0)
    patched = parameters.draw(np.random.default_rng(0), shapes, layers, checks.layer_scale("qkv", [2, 4]))
    assert np.array_equal(patched["qkv.weight"], honest["qkv.weight"])


def test_a_call_is_described_as_plain_json_and_a_failure_carries_it():
    x = np.zeros((2, 3, 4), np.float32)
    mask = np.ones((2, 3, 3), bool)
    request = harness._call("7", x, mask=mask, fused=True, seed=11, trace=["scaled_dot_product_attention"])
    described = harness.describe_call("SelfAttention", "call", request)
    assert described == {"method": "forward", "x": [2, 3, 4], "mask": [2, 3, 3], "mask_dtype": "bool",
                         "fused": True, "manual_seed": 11}
    assert harness.describe_call("MultiHeadAttention", "call", harness._call("1", x, x, x, device="meta")) == {
        "method": "forward", "query": [2, 3, 4], "key_is": "query", "value_is": "query", "device": "meta"}
    memory = np.zeros((2, 5, 4), np.float32)  # equal values: one tensor in the worker, as described
    assert harness.describe_call("MultiHeadAttention", "call", harness._call("1", x, memory, memory.copy())) == {
        "method": "forward", "query": [2, 3, 4], "key": [2, 5, 4], "value_is": "key"}
    assert harness.describe_call("MultiHeadAttention", "call", harness._call("1", x, memory, memory + 1)) == {
        "method": "forward", "query": [2, 3, 4], "key": [2, 5, 4], "value": [2, 5, 4]}
    assert harness.describe_call("CausalSelfAttention", "build", {"kwargs": {"n_embd": 4, "dropout": 0.0}}) == {
        "method": "__init__", "n_embd": 4}
    assert harness.describe_call("SelfAttention", "describe", {"handle": "7"}) is None
    json.dumps(described, allow_nan=False)

    failures.example(B=2, T=3)
    failures.calling(described)
    with pytest.raises(PropertyFailure) as failed:
        failures.require(False, "code")
    assert failed.value.example == {"B": 2, "T": 3, "call": described}
    failures.example(B=1)  # a new example starts with no call
    assert failures.current_example() == {"B": 1}


@pytest.mark.parametrize("weights", ["zeros", "nan", "one_hot"])
def test_weights_with_nothing_to_fit_are_not_a_right_scale(projections, weights):
    """Zero, NaN or one-hot rows leave no two positive weights to compare: no softmax gives such
    rows, so no scale is measured and none passes. Rows of zeros or NaN do not even sum to 1:
    rows_sum_to_one's mistake, named as such."""
    _, q, k, d_k = projections
    scores = reference.unscaled_scores(q, k)
    chosen = {"zeros": np.zeros(scores.shape), "nan": np.full(scores.shape, np.nan),
              "one_hot": (scores == scores.max(-1, keepdims=True)).astype(np.float64)}[weights]
    expected = "scale_unmeasurable" if weights == "one_hot" else "weights_not_a_distribution_upstream"
    assert failure_code(as_float32(chosen), scores, d_k)[0] == expected


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_weights_computed_in_reduced_precision_are_named_so(dtype):
    """A bfloat16 softmax cast back to float32: rows off by ~2e-3 and a scale that fits nothing,
    once reported as a softmax over the wrong axis and a problem before the scale."""
    torch = pytest.importorskip("torch")
    scores = torch.tensor(np.random.default_rng(0).standard_normal((1, 2, 2)), dtype=torch.float32)
    weights = torch.softmax(scores.to(getattr(torch, dtype)), dim=-1).float().numpy().astype(np.float64)
    with pytest.raises(PropertyFailure) as failed:
        checks.not_reduced_precision(weights)
    assert failed.value.code == "reduced_precision" and failed.value.params["dtype"] == dtype


@pytest.mark.parametrize("weights", [
    softmax(np.random.default_rng(1).standard_normal((4, 6, 6))).astype(np.float32),  # float32's own
    softmax(np.random.default_rng(2).standard_normal((4, 6, 6))),  # a module that returns float64
    np.array([[0.25, 0.0, 0.25, 0.25]], np.float32),  # uniform over a few positions: fits any precision
])
def test_float32_and_dyadic_weights_are_not_called_reduced_precision(weights):
    checks.not_reduced_precision(weights.astype(np.float64))


def test_float32_softmax_weights_are_never_called_reduced_precision_over_many_draws():
    rng = np.random.default_rng(3)
    for _ in range(2000):
        scores = (rng.standard_normal((1, 2, 2)) * rng.choice([0.01, 1.0, 30.0])).astype(np.float32)
        checks.not_reduced_precision(softmax(scores).astype(np.float32).astype(np.float64))  # float64 math, float32 out


class Redrawn:
    """A module in train mode whose gradients depend on the dropout seed: under the seeds in
    `silenced` the draw drops every weight on the paths to W_Q (its gradient exactly zero).
    With `detached_rows`, the first rows of the fused qkv weight (the queries') never get any."""

    params = {"W_Q.weight": None, "qkv.weight": None, "qkv.bias": None}

    def __init__(self, silenced=(), detached_rows=0):
        self.silenced, self.detached_rows, self.seeds = silenced, detached_rows, []

    def run(self, *args, seed=0, **options):
        from types import SimpleNamespace

        self.seeds.append(seed)
        qkv = np.ones((6, 2))
        qkv[:self.detached_rows] = 0
        return SimpleNamespace(grads={"W_Q.weight": np.zeros((2, 2)) if seed in self.silenced else np.ones((2, 2)),
                                      "qkv.weight": qkv, "qkv.bias": np.ones(6)})


def judged(module):
    call = ((), {"train": True, "seed": 3})
    try:
        checks.gradients_reach_every_parameter_in_train(module, call, module.run(**call[1]))
    except PropertyFailure as failure:
        return failure
    return None


def test_a_zero_gradient_that_another_dropout_draw_does_not_repeat_passes():
    """One draw silenced W_Q (a mask shared by the batch makes that likely): not a detach."""
    module = Redrawn(silenced={3})
    assert judged(module) is None
    assert len(module.seeds) == 2  # the call, then one redraw under another seed


def test_a_zero_gradient_that_every_dropout_draw_repeats_fails():
    """A parameter cut from the graph in train mode (detached there) has no gradient under any draw."""
    module = Redrawn(silenced=range(10**6))
    failure = judged(module)
    assert failure.code == "zero_gradient" and failure.params["names"] == ["W_Q.weight"]
    assert len(module.seeds) == 1 + checks.DROPOUT_REDRAWS


def test_rows_of_a_fused_weight_without_a_gradient_fail_though_the_weight_has_one():
    """Scores detached while training: the query and key rows of qkv get nothing, its value rows do."""
    failure = judged(Redrawn(detached_rows=4))
    assert failure.code == "zero_gradient_rows"
    assert (failure.params["name"], failure.params["count"], failure.params["rows"]) == ("qkv.weight", 4, 6)


def test_rows_are_not_judged_where_the_eval_forward_pass_is_wrong():
    """A forward pass that is not the reference's can leave rows without a gradient (heads split
    without a transpose): reference_match's mistake, not a second one here."""
    module = Redrawn(detached_rows=4)
    call = ((), {"train": True, "seed": 3})
    checks.gradients_reach_every_parameter_in_train(module, call, module.run(**call[1]), rows=False)


class Seeded:
    """A module whose eval output follows the seed of each call (random) or not."""

    def __init__(self, random):
        self.random = random

    def runs(self, *calls):
        return [np.full(3, float(options["seed"] if self.random else 1.0)) for _, options in calls]


@pytest.mark.parametrize("random", [True, False])
def test_an_eval_call_made_twice_under_two_seeds_tells_random_outputs(random):
    """Dropout left on in eval: the same call under another seed gives other outputs; a module that
    is only wrong gives the same wrong outputs, and keeps its own failure."""
    call = ((np.zeros(3),), {"seed": 0, "reload": {"seed": 1}})
    assert checks.changes_when_repeated(Seeded(random), call, 0, lambda i, reply: [reply]) is random


# ---- dropout masks shared along an axis, and the causal mask read off the output ----------------

@pytest.mark.parametrize("p", [0.25, 0.5, 0.75])
def test_a_mask_drawn_per_entry_is_never_called_shared_along_any_axis(p):
    rng = np.random.default_rng(int(p * 100))
    for _ in range(200):
        dropped = rng.random((16, 2, 4, 4)) < p
        live = np.broadcast_to(np.tril(np.ones((4, 4), bool)), dropped.shape)
        for axis in range(4):
            checks.not_shared_along(dropped, live, axis, "axis_heads", p, "weights")


@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_one_mask_for_every_index_of_an_axis_is_called_shared(axis):
    rng = np.random.default_rng(axis)
    shape = [16, 2, 4, 4]
    shape[axis] = 1
    dropped = np.broadcast_to(rng.random(shape) < 0.5, (16, 2, 4, 4))
    live = np.broadcast_to(np.tril(np.ones((4, 4), bool)), dropped.shape)
    with pytest.raises(PropertyFailure) as failure:
        checks.not_shared_along(dropped, live, axis, "axis_keys", 0.5, "weights")
    assert failure.value.code == "dropout_mask_shared"


def test_too_few_live_positions_to_tell_are_not_judged():
    dropped = np.zeros((2, 1, 2, 2), bool)  # alike everywhere, but a per-entry draw does that often here
    checks.not_shared_along(dropped, np.ones_like(dropped), 0, "axis_batch", 0.5, "weights")


AXES = list(enumerate(["axis_batch", "axis_heads", "axis_queries", "axis_keys"]))


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.75])
def test_a_mask_drawn_per_entry_is_never_called_paired(p):
    rng = np.random.default_rng(int(p * 1000))
    for shape in [(64, 4, 6, 6), (683, 1, 3, 1), (256, 2, 4, 1)] * 20:
        dropped = rng.random(shape) < p
        live = rng.random(shape) < 0.9  # masked-out weights are left out of every pair
        checks.not_paired(dropped, live, p, AXES, "weights")


def test_a_symmetric_mask_is_called_mirrored():
    keep = np.random.default_rng(0).random((64, 2, 4, 4)) < 0.75
    keep = np.tril(keep) | np.swapaxes(np.tril(keep, -1), -1, -2)
    with pytest.raises(PropertyFailure) as failure:
        checks.not_paired(~keep, np.ones_like(keep), 0.25, AXES, "weights")
    assert failure.value.code == "dropout_mask_mirrored"


@pytest.mark.parametrize("axis", [0, 1, 2, 3])
@pytest.mark.parametrize("period", [1, 2, 3, 4])
def test_a_mask_tiled_or_repeated_along_an_axis_is_called_paired(axis, period):
    """Drawn for `period` entries of the axis and tiled (head i reuses head i % period's), or
    each draw repeated along the axis (period 1: one mask for the whole axis, not_shared_along's
    to name first, and paired too)."""
    shape = [64, 8, 8, 8]
    shape[axis] = period
    draw = np.random.default_rng(axis * 10 + period).random(shape) < 0.5
    for dropped, distance in ((np.concatenate([draw] * (8 // period), axis=axis), period),
                              (np.repeat(draw, 8 // period, axis=axis), 1)):
        with pytest.raises(PropertyFailure) as failure:
            checks.not_paired(dropped, np.ones_like(dropped), 0.5, AXES, "weights")
        assert (failure.value.code, failure.value.params["pairs"]) == ("dropout_mask_paired", f"along_{AXES[axis][1]}")
        assert failure.value.params["apart"] <= distance


@pytest.mark.parametrize("axis", [0, 1, 2, 3])
@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.75])
def test_draws_turned_against_each_other_are_called_paired(axis, p):
    """1 - u for the second half of an axis: the right rate, but both halves are never dropped
    together (p < 1/2) or never kept together (p > 1/2)."""
    shape = [64, 6, 6, 6] if axis else [3, 12, 12, 12]  # enough pairs 3 apart to tell at p = 0.1
    shape[axis] = 3
    u = np.random.default_rng(axis).random(shape)
    dropped = np.concatenate([u, 1 - u], axis=axis) < p
    with pytest.raises(PropertyFailure) as failure:
        checks.not_paired(dropped, np.ones_like(dropped), p, AXES, "weights")
    assert failure.value.code == "dropout_mask_paired"
    assert (failure.value.params["pairs"], failure.value.params["apart"]) == (f"along_{AXES[axis][1]}", 3)
    assert failure.value.params["agree"] < failure.value.params["expected"]


def test_a_mask_reversed_along_an_axis_is_called_paired():
    """Key j's draw reused for key T-1-j: keys 0 and T-1 are the only pair at distance T-1."""
    draw = np.random.default_rng(1).random((256, 2, 4, 4)) < 0.5
    dropped = np.concatenate([draw, draw[..., ::-1]], axis=-1)
    with pytest.raises(PropertyFailure) as failure:
        checks.not_paired(dropped, np.ones_like(dropped), 0.5, AXES, "weights")
    assert failure.value.code == "dropout_mask_paired"
    assert (failure.value.params["pairs"], failure.value.params["apart"]) == ("along_axis_keys", 7)


def test_a_mask_reused_at_scattered_positions_is_caught_along_its_axis():
    """Key j's draw reused for key π(j), π a permutation no single distance describes: the pairs
    at some distances are partly tied (dropout_mask_paired), each tied pair wholly (linked)."""
    draw = np.random.default_rng(1).random((512, 2, 3, 5)) < 0.5
    dropped = np.concatenate([draw, draw[..., [3, 0, 4, 1, 2]]], axis=-1)
    with pytest.raises(PropertyFailure) as failure:
        checks.not_paired(dropped, np.ones_like(dropped), 0.5, AXES, "weights")
    assert failure.value.code in ("dropout_mask_paired", "dropout_mask_linked")
    assert failure.value.params["pairs"] == "along_axis_keys"


def test_a_mask_tied_across_heads_and_queries_is_called_linked_within_a_row():
    """Head 1's draw at (query i, key j) is head 0's at (query i + 1, key j + 2), cyclically: no
    single axis shows it."""
    draw = np.random.default_rng(2).random((256, 1, 5, 5)) < 0.25
    dropped = np.concatenate([draw, np.roll(draw, (-1, -2), axis=(-2, -1))], axis=1)
    with pytest.raises(PropertyFailure) as failure:
        checks.not_paired(dropped, np.ones_like(dropped), 0.25, AXES, "weights")
    assert (failure.value.code, failure.value.params["pairs"]) == ("dropout_mask_linked", "within_heads_queries_keys")


def test_too_few_pairs_to_tell_are_not_judged():
    dropped = np.zeros((2, 1, 3, 3), bool)  # every pair agrees, as a per-entry draw often does on so few
    checks.not_paired(dropped, np.ones_like(dropped), 0.5, AXES, "weights")

def causal_module(rng, heads, width):
    """Parameters of a CausalSelfAttention (float64) and a function running it in train mode with a
    given attention dropout mask D (B, h, T, T) and resid_drop off."""
    params = {"qkv.weight": rng.normal(size=(3 * width, width)) / np.sqrt(width), "qkv.bias": rng.normal(size=3 * width) * 0.1,
              "proj.weight": rng.normal(size=(width, width)) / np.sqrt(width), "proj.bias": rng.normal(size=width) * 0.1}

    def trained(x, kept, p):
        weights, v = reference.causal_attention(params, heads, x)
        context = ((weights * kept) / (1 - p)) @ v
        merged = context.transpose(0, 2, 1, 3).reshape(x.shape)
        return (merged @ params["proj.weight"].T + params["proj.bias"]).astype(np.float32).astype(np.float64)

    return params, trained


@pytest.mark.parametrize("heads, per_head, p", [(1, 1, 0.5), (2, 3, 0.25), (4, 2, 0.75), (3, 4, 0.5)])
def test_the_causal_dropout_mask_comes_back_from_the_output_or_not_at_all(heads, per_head, p):
    rng = np.random.default_rng(heads * 10 + per_head)
    width, B, T = heads * per_head, 32, 5
    params, trained = causal_module(rng, heads, width)
    x = rng.normal(size=(B, T, width))
    kept = (rng.random((B, heads, T, T)) >= p).astype(np.float64)
    found = checks.causal_weights_dropped(params, heads, x, p, trained(x, kept, p))
    known = ~np.isnan(found)
    assert np.array_equal(found[known], kept[known])  # never a wrong bit
    lower = np.broadcast_to(np.tril(np.ones((T, T), bool)), known.shape)
    assert known[lower].mean() > 0.8 and not known[~lower].any()  # most rows told apart, nothing above them


def test_the_modules_of_each_submission_are_named_from_zero():
    """A batch slot grades one submission after another in one grader process: the names of the
    modules built (which a submission's code can read off its own calls) start again with each
    worker, so that none tells the next submission how far the one before it got."""
    from autograder.config import Limits
    from autograder.worker.client import Worker

    first, second = (Worker("", Limits(request_s=1, memory_mib=64)) for _ in range(2))
    built = [harness.Remote(first, "SelfAttention", d_model=2).handle for _ in range(3)]
    assert built == ["0", "1", "2"]
    assert harness.Remote(second, "SelfAttention", d_model=2).handle == "0"


@pytest.mark.parametrize("dtype", [np.bool_, np.int64, np.uint8])
def test_an_output_of_another_dtype_reaches_no_arithmetic_and_fails_as_its_dtype(dtype):
    """A bool output with autograd on and another without once reached numpy's subtraction: a
    TypeError, graded as the grader's own error. values() hands arithmetic floats only; the
    autograd comparison names the dtype."""
    odd = harness.Reply({"outputs": [np.ones((1, 2, 3), dtype)]})
    plain = harness.Reply({"outputs": [np.zeros((1, 2, 3), np.float32)]})
    assert odd.values(0) is None and harness.Reply({"outputs": []}).values(0) is None
    assert plain.values(0).dtype == np.float64
    with pytest.raises(PropertyFailure) as failed:
        checks._same_without_autograd(odd, plain, None, ((), {}))
    assert failed.value.code == "dtype_mismatch"
    checks._same_without_autograd(odd, odd, None, ((), {}))  # nothing float to compare: another property's to name



class _ScriptedModule:
    """A module handle whose train-mode output is `output(options, calls before)`: enough to tell
    apart what makes a call with autograd differ from the same call without it."""

    def __init__(self, output):
        self.output, self.calls, self.kwargs = output, 0, {"dropout": 0.5}

    def run(self, *args, **options):
        reply = harness.Reply({"outputs": [np.full((1, 2, 3), self.output(options, self.calls), np.float32)]})
        self.calls += 1
        return reply

    def runs(self, *calls):
        return [self.run(*args, **options) for args, options in calls]


@pytest.mark.parametrize("output, code", [
    (lambda options, calls: 1.0 if options.get("grad") else 2.0, "output_changes_with_grad_mode"),
    (lambda options, calls: 1.0 if calls == 0 else 2.0, "grad_call_depends_on_earlier_calls"),
    (lambda options, calls: float(calls), "dropout_ignores_seed"),
])
def test_a_call_that_changes_with_autograd_is_told_from_one_that_changes_with_earlier_calls(output, code):
    """The same train-mode call with autograd and without it, under one seed, differ: because the
    forward pass reads autograd's state, because it reuses something an earlier call kept (a
    dropout mask kept in self, reused while a torch coin says so), or because its draw ignores the
    seed. Each is said as what it is: the second was once told that it depends on autograd."""
    module = _ScriptedModule(output)
    call = ((), {"train": True, "grad": True, "seed": 3})
    reply = module.run(*call[0], **call[1])
    with pytest.raises(PropertyFailure) as failed:
        checks.same_without_autograd(module, call, reply)
    assert failed.value.code == code


@pytest.mark.parametrize("draw, code", [
    (lambda shared, calls: 1.0, None),                        # its own p: the same draw again
    (lambda shared, calls: shared["p"], "train_depends_on_other_instances"),  # the p of the last module built
    (lambda shared, calls: float(calls), None),               # a draw that changes with its own calls: not this check's
])
def test_a_train_draw_that_another_module_of_the_class_changes_is_named(draw, code):
    """A dropout rate kept on the class (`MultiHeadAttention.p = dropout`) is the last module's:
    after another module of the class is built with another p, the same train call under the same
    seed draws otherwise. A draw that changes with the module's own calls is left to the checks
    that name that (dropout_follows_seed, dropout_redrawn)."""
    shared = {"p": 1.0}
    module = _ScriptedModule(lambda options, calls: draw(shared, calls))
    calls = [((), {"train": True, "seed": 3})]

    def another():
        shared["p"] = 0.0
        return "dropout=0.0"

    def judged():
        checks.train_draw_unchanged_by_another_instance(lambda: module, calls, lambda reply: reply.values(0), another)

    if code is None:
        judged()
        return
    with pytest.raises(PropertyFailure) as failed:
        judged()
    assert failed.value.code == code and failed.value.params["other"] == "dropout=0.0"

def _softmax(scores, axis=-1):
    shifted = np.exp(scores - scores.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


def test_weights_of_quadratic_scores_pass_and_a_hash_of_the_same_inputs_does_not():
    """Any scale, biases on either side, a softmax over the wrong axis, heads that mix positions
    (a split without transpose, unbiased as MultiHeadAttention's layers are): scores still
    quadratic in the input. A function of the inputs'
    sums (which moves with queries and keys all the same) is not."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 12, 6))
    w_q, w_k = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
    b_q, b_k = rng.standard_normal(6), rng.standard_normal(6)

    def weights(x, form):
        q, k = x @ w_q.T + b_q, x @ w_k.T + b_k
        if form == "mixed":  # heads viewed without transpose (MultiHeadAttention's layers: no bias)
            q, k = (x @ w_q.T).reshape(2, 2, 12, 3)[:, 1], (x @ w_k.T).reshape(2, 2, 12, 3)[:, 1]
        scores = np.einsum("bid,bjd->bij", q, k)
        return {"scaled": _softmax(scores / np.sqrt(3)), "negative": _softmax(-0.3 * scores),
                "wrong_axis": _softmax(scores, axis=-2), "mixed": _softmax(scores)}[form]

    for form in ("scaled", "negative", "wrong_axis", "mixed"):
        checks.scores_from_similarity(weights(x, form)[:, None], weights(2 * x, form)[:, None])

    def hashed(x):
        sums = x.sum(-1)
        return _softmax(4 * np.sin(37 * sums[:, :, None] + 53 * sums[:, None, :]))[:, None]

    with pytest.raises(PropertyFailure) as failed:
        checks.scores_from_similarity(hashed(x), hashed(2 * x))
    assert failed.value.code == "weights_not_from_similarity"



@pytest.mark.parametrize("width", [1, 2])
def test_weights_that_keep_most_keys_out_of_an_unmasked_call_fail(width):
    """A window of one or two keys (a hash inside it) leaves too few weights for the fit: with no
    mask, a softmax gives every key a weight, so that is no similarity either."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 12, 6))

    def windowed(x):
        sums = x.sum(-1)
        scores = 4 * np.sin(37 * sums[:, :, None] + 53 * sums[:, None, :])
        offset = np.arange(12)[:, None] - np.arange(12)[None, :]
        return _softmax(np.where((offset >= 0) & (offset < width), scores, -np.inf))[:, None]

    with pytest.raises(PropertyFailure) as failed:
        checks.scores_from_similarity(windowed(x), windowed(2 * x))
    assert failed.value.code == "weights_mostly_zero"

def test_causal_weights_are_read_back_from_the_output_where_it_combines_the_values():
    rng = np.random.default_rng(4)
    B, T, C = 3, 5, 6
    x = rng.standard_normal((B, T, C))
    params = {"qkv.weight": rng.standard_normal((3 * C, C)), "qkv.bias": rng.standard_normal(3 * C),
              "proj.weight": rng.standard_normal((C, C)), "proj.bias": rng.standard_normal(C)}
    q, k, v = np.split(x @ params["qkv.weight"].T + params["qkv.bias"], 3, axis=-1)
    scores = np.where(np.tril(np.ones((T, T), bool)), q @ k.transpose(0, 2, 1) / np.sqrt(C), -np.inf)
    weights = _softmax(scores)
    output = (weights @ v) @ params["proj.weight"].T + params["proj.bias"]
    np.testing.assert_allclose(checks.weights_behind_output(params, x, output), weights, atol=1e-9)
    other_values = (weights @ (v + 1.0)) @ params["proj.weight"].T + params["proj.bias"]  # a mistake in V
    assert checks.weights_behind_output(params, x, other_values) is None


# ---- a causal dropout layer scaling its survivors by another factor -----------------------------

@pytest.mark.parametrize("attn, resid, code, layer", [
    (2.0, 4.0, "layer_dropout_ignores_p", "attn_drop"),      # attn_drop capped at 0.5 where p = 0.75
    (4.0, 2.0, "layer_dropout_ignores_p", "resid_drop"),
    (1 / 0.75, 4.0, "layer_dropout_wrong_factor", "attn_drop"),  # divided by p
    (1.0, 4.0, "layer_dropout_wrong_factor", "attn_drop"),       # not rescaled
])
def test_a_layer_scaled_by_another_factor_is_named_with_it(attn, resid, code, layer):
    def explains(attn_factor, resid_factor):
        return math.isclose(attn_factor, attn) and math.isclose(resid_factor, resid)

    with pytest.raises(PropertyFailure) as failure:
        checks.wrong_factor(explains, 0.75, "fused=False")
    assert (failure.value.code, failure.value.params["layer"]) == (code, layer)


def test_a_layer_explained_only_by_the_right_factor_is_left_to_the_caller():
    checks.wrong_factor(lambda attn_factor, resid_factor: math.isclose(attn_factor, 4.0) and math.isclose(resid_factor, 4.0),
                        0.75, "fused=False")


# ---- the survivors of a dropout at a small p are rescaled too ------------------------------------

def test_survivors_divided_by_one_minus_p_pass_and_survivors_left_alone_fail():
    rng = np.random.default_rng(6)
    evaluated = rng.random((2, 3, 4, 5)) + 0.1
    dropped = rng.random(evaluated.shape) < 0.004
    checks.survivors_rescaled(np.where(dropped, 0.0, evaluated / 0.996), evaluated, 0.004)
    with pytest.raises(PropertyFailure) as failure:
        checks.survivors_rescaled(np.where(dropped, 0.0, evaluated), evaluated, 0.004)
    assert failure.value.code == "dropout_not_rescaled"



def _survivors(rescale):
    rng = np.random.default_rng(8)
    evaluated = rng.dirichlet(np.ones(5), size=(64, 2, 4)).astype(np.float32)
    keep = rng.random(evaluated.shape) >= 0.5
    return np.where(keep, rescale(evaluated, keep), 0.0), evaluated


@pytest.mark.parametrize("rescale, code", [
    (lambda w, keep: (w / 0.5).astype(np.float16).astype(np.float32), "dropout_not_rescaled_in_reduced_precision"),
    (lambda w, keep: (torch.from_numpy(w / 0.5).bfloat16().float()).numpy(), "dropout_not_rescaled_in_reduced_precision"),
    (lambda w, keep: w / 0.5 * 0.996, "dropout_not_rescaled"),                      # a factor off by 0.4%, alike
    (lambda w, keep: w * keep / np.maximum((w * keep).sum(-1, keepdims=True), 1e-9), "dropout_not_rescaled"),  # rows renormalised
])
def test_survivors_missed_by_rounding_are_told_from_a_rescale_left_out(rescale, code):
    """Only a miss that varies from weight to weight, within bfloat16's rounding, is said to come
    from reduced precision: a row renormalised after dropout was once sent to look for a float16."""
    trained, evaluated = _survivors(rescale)
    with pytest.raises(PropertyFailure) as failure:
        checks.survivors_rescaled(trained, evaluated, 0.5)
    assert failure.value.code == code

def test_a_causal_row_left_whole_must_be_the_rescaled_one():
    rng = np.random.default_rng(7)
    evaluated = rng.standard_normal((1, 6, 8))
    rescaled = evaluated / 0.996
    moved = rescaled.copy()
    moved[0, 2] += 0.3  # a row where a weight was dropped: neither eval's nor rescaled, not judged here
    checks.left_whole_rescaled(moved, evaluated, rescaled, 0.004, "attn_drop", "fused=False")
    with pytest.raises(PropertyFailure) as failure:
        checks.left_whole_rescaled(np.where(np.arange(6)[None, :, None] == 4, evaluated, moved), evaluated, rescaled,
                                   0.004, "attn_drop", "fused=False")
    assert (failure.value.code, failure.value.params["factor"]) == ("layer_dropout_wrong_factor", 1.0)


def test_a_tiny_rate_is_judged_against_its_chance_not_a_normal_band():
    """At p = 1e-6 over 174k entries (0.17 drops expected): up to 8 drops pass (chance of 9 or
    more below 1e-11), float16's ~42 fail."""
    checks.dropped_at_a_tiny_rate(8, 174_000, 1e-6, "weights")
    with pytest.raises(PropertyFailure) as failure:
        checks.dropped_at_a_tiny_rate(42, 174_000, 1e-6, "weights")
    assert failure.value.code == "dropout_rate_floor"
    rng = np.random.default_rng(0)
    assert all(rng.binomial(174_000, 1e-6) < 9 for _ in range(10_000))


def _mask_taking(rule):
    """A module's run(mask=...) for taken(): rule(mask) -> the output's shape, or raises."""
    from autograder.worker.submission_errors import SubmissionError

    def run(mask=None):
        shape = rule(mask)
        if shape is None:
            raise SubmissionError("exception", "size mismatch", line=7, exc_type="RuntimeError")
        return shape
    return run


def _shaped(shape):
    failures.require(shape == (2, 3), "shape_mismatch", what="output", expected=[2, 3], got=list(shape))
    return shape


@pytest.mark.parametrize("rule, outcome", [
    (lambda mask: (2, 3), (2, 3)),                                            # takes it
    (lambda mask: (2, 3) if mask is None or mask.dtype == bool else None, (2, 3)),  # takes it as bool
    (lambda mask: (2, 3) if mask is None else None, "mask_raised_upstream"),  # raises with it alone: the mask named
    (lambda mask: (2, 3) if mask is None else (3, 3), "mask_shape_mismatch_upstream"),  # other shapes with it alone
    (lambda mask: None, "size mismatch"),                                     # raises without it too: its own error
    (lambda mask: (3, 3), "shape_mismatch"),                                  # wrong shapes without it too
])
def test_a_mask_the_module_cannot_take_is_named_and_still_costs_the_point(rule, outcome):
    """rows_sum_to_one and batch_independence: a mask a module breaks on (an exception, or outputs
    of other shapes, as mask.squeeze() gives) while the same call without it is right is named as
    the mask's, masked_zero's to judge (an outside writer's mha_mask_squeezed lost both with the
    heads' hint); it still costs the point (skipping it let a module that raises where only masked
    calls judge a property buy it: hostile/sa_refuses_masks_where_only_masks_are_judged)."""
    from autograder.worker.submission_errors import SubmissionError

    mask = np.ones((2, 3), np.float32)
    try:
        got = checks.taken(_mask_taking(rule), mask, _shaped)
    except SubmissionError as error:
        got = error.message
    except PropertyFailure as failure:
        got = failure.code
    assert got == outcome


class _Reply:
    """What runs_on_device reads of a worker's reply: its outputs' shapes."""

    def __init__(self, *shapes):
        self.outputs = shapes

    def shape(self, index):
        return list(self.outputs[index])


@pytest.mark.parametrize("masked, plain, outcome", [
    ((2, 3), (2, 3), "reply"),                 # right shapes with the mask
    ((2, 2, 3), (2, 3), None),                 # other shapes with the mask alone: masked_zero's
    ((2, 2, 3), (3, 3), "shape_mismatch"),     # wrong without the mask too: the device check's own failure
])
def test_a_mask_that_changes_the_shapes_on_the_device_is_left_to_masked_zero(masked, plain, outcome):
    """device judges devices: a masked call whose outputs take another shape on meta (a mask
    squeezed, then broadcast wrong) while the same call without the mask is right there is
    masked_zero's mistake (an outside writer's mha_mask_squeezed lost `device` at one seed)."""
    try:
        got = checks.runs_on_device(lambda device: _Reply(masked), "meta", [(2, 3)],
                                    fallbacks=[lambda device: _Reply(plain)])
    except PropertyFailure as failure:
        got = failure.code
    assert (got if got is None or isinstance(got, str) else "reply") == outcome


def test_a_dropout_used_at_its_p_passes_the_high_rate_check_and_a_capped_one_never_does():
    """used_at_a_high_rate at EXACT_P on 240 weights (rare_dropout's call): a correct dropout
    (float32, any draw) passes every one of 3000 draws, including those where it keeps nothing; one
    whose rate is capped at 0.9 where forward uses it fails every one, as a wrong factor."""
    rng = np.random.default_rng(0)
    evaluated = _softmax(rng.standard_normal((1, 2, 12, 10))).astype(np.float32)
    p = EXACT_P
    codes = []
    for rate, trials in ((p, 3000), (0.9, 300)):
        for _ in range(trials):
            keep = rng.random(evaluated.shape) >= rate
            trained = np.where(keep, evaluated / np.float32(1 - rate), 0).astype(np.float32)
            try:
                checks.used_at_a_high_rate(trained, evaluated, p, "weights")
                codes.append((rate, None))
            except PropertyFailure as failure:
                codes.append((rate, failure.code))
    assert {code for rate, code in codes if rate == p} == {None}
    assert {code for rate, code in codes if rate == 0.9} == {"dropout_ignores_p"}


@pytest.mark.parametrize("message, judges", [
    ("Expected all tensors to be on the same device, but found at least two devices, meta and cpu!", True),
    ("Cannot copy out of meta tensor; no data!", True),
    ("Tensor.item() cannot be called on meta tensors", False),
    # torch.autocast(device_type=x.device.type, ...): autocast has no meta mode (an outside writer's
    # file lost the device point to it, where it runs on every real device)
    ("User specified an unsupported autocast device_type 'meta'", False),
    ("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)", False),
])
def test_an_error_on_meta_judges_devices_only_where_it_names_them_and_is_no_lack_of_data(message, judges):
    assert checks.device_error(message, "meta") is judges
    assert checks.device_error(message, "cuda") is True  # on a real device every error does


@pytest.mark.parametrize("reply, kinds, code", [
    ({"modified": ["1"], "requires_grad_changed": ["0"]}, None, "input_modified"),  # values first
    ({"requires_grad_changed": ["0"]}, None, "input_requires_grad_changed"),
    ({"rebound": ["0"]}, None, "input_rebound"),
    ({"requires_grad_changed": ["0"]}, ("rebound",), None),  # shapes' non-contiguous twin judges memory only
    ({"rebound": ["0"]}, ("rebound",), "input_rebound"),
    ({}, None, None),
])
def test_inputs_left_as_they_came_are_judged_by_values_then_requires_grad_then_memory(reply, kinds, code):
    """x.requires_grad_() and `x.data = x.data.contiguous()` leave the caller's values as they were,
    and no `_version` counts them; the worker reports them apart (an outside writer's three files
    scored 48 with them)."""
    raw = {"outputs": [], **reply}
    judged = (lambda: checks.inputs_unchanged(harness.Reply(raw), {"0": "x", "1": "mask"})) if kinds is None else (
        lambda: checks.inputs_unchanged(harness.Reply(raw), {"0": "x", "1": "mask"}, kinds=kinds))
    if code is None:
        judged()
    else:
        with pytest.raises(PropertyFailure) as failure:
            judged()
        assert failure.value.code == code and failure.value.params["names"] == [["mask"], ["x"]][code != "input_modified"]
