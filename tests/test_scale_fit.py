"""The scale fit behind the `scale` property (checks.fitted_scale, checks.scale_is), on weights made
here as a module would return them (float32 softmax of c·QKᵀ): it recovers c, whatever c is
(1/√d_k, 1, 1/d_k), per head too; and it says "unmeasurable" instead of a number when the weights
are softmax(c·S) for no c at all, and nothing when there is nothing to measure."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from autograder.properties import checks, reference
from autograder.properties.failures import PropertyFailure

pytestmark = pytest.mark.unit

EXAMPLES = settings(max_examples=25, deadline=None, derandomize=True)
SCALES = {"1/sqrt(d_k)": lambda d_k: 1 / math.sqrt(d_k), "1": lambda d_k: 1.0, "1/d_k": lambda d_k: 1 / d_k}


def module_weights(scores, c, mask=None, dim=-1):
    """What a module returns: torch float32 softmax of c·scores (-inf where mask == 0), read in float64."""
    scaled = c * torch.from_numpy(scores).float()
    if mask is not None:
        scaled = scaled.masked_fill(torch.from_numpy(mask) == 0, float("-inf"))
    return torch.softmax(scaled, dim=dim).double().numpy()


def verdict(weights, scores, d_k):
    """(failure code, its parameters), (None, {}) when scale_is accepts the weights."""
    try:
        checks.scale_is(weights, scores, d_k)
    except PropertyFailure as failure:
        return failure.code, failure.params
    return None, {}


@st.composite
def projections(draw, heads=False):
    """Q, K (B, [h,] T, d_k) as W_Q x and W_K x give them, with T >= 2 keys to compare; a head
    axis when `heads` (None: drawn)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    heads = draw(st.booleans()) if heads is None else heads
    d_k = draw(st.integers(1, 8))
    shape = (draw(st.integers(1, 3)),) + ((draw(st.integers(1, 4)),) if heads else ()) + (draw(st.integers(2, 6)), d_k)
    magnitude = draw(st.sampled_from((0.5, 1.0, 2.0)))
    q, k = (rng.standard_normal(shape) * magnitude for _ in range(2))
    return q, k, d_k, rng


@EXAMPLES
@given(case=projections(heads=None), scale=st.sampled_from(sorted(SCALES)))
def test_the_fit_recovers_the_scale_the_weights_were_made_with(case, scale):
    q, k, d_k, _ = case
    c = SCALES[scale](d_k)
    scores = reference.unscaled_scores(q, k)
    fit = checks.fitted_scale(module_weights(scores, c), scores)
    assert fit is not None
    measured, residual = fit
    assert measured == pytest.approx(c, rel=1e-4)
    assert residual < checks.FIT_RESIDUAL / 10  # float32's rounding is far below the threshold


@EXAMPLES
@given(case=projections(), scale=st.sampled_from(sorted(SCALES)))
def test_scale_is_accepts_one_over_root_d_k_and_reports_any_other_scale_as_measured(case, scale):
    q, k, d_k, _ = case
    c = SCALES[scale](d_k)
    scores = reference.unscaled_scores(q, k)
    code, params = verdict(module_weights(scores, c), scores, d_k)
    if math.isclose(c, 1 / math.sqrt(d_k)):  # d_k = 1 makes all three the same
        assert code is None
    else:
        assert code == "wrong_scale"
        assert params["measured"] == pytest.approx(c, abs=1e-4)
        assert params["expected"] == round(1 / math.sqrt(d_k), 5) and params["d_k"] == d_k


@EXAMPLES
@given(case=projections())
def test_masked_weights_are_left_out_of_the_fit(case):
    """Exact zeros where mask == 0 carry no log: the fit reads the open positions only."""
    q, k, d_k, rng = case
    scores = reference.unscaled_scores(q, k)
    mask = (rng.random(scores.shape) < 0.6).astype(np.float64)
    two = rng.permuted(np.tile(np.arange(scores.shape[-1]), scores.shape[:-1] + (1,)), axis=-1)[..., :2]
    np.put_along_axis(mask, two, 1.0, axis=-1)  # two open keys per row at least, anywhere (the first one too)
    c = 1 / math.sqrt(d_k)
    measured, _ = checks.fitted_scale(module_weights(scores, c, mask), scores)
    assert measured == pytest.approx(c, rel=1e-4)
    assert verdict(module_weights(scores, c, mask), scores, d_k) == (None, {})


def test_each_head_is_measured_against_its_own_d_k():
    """MultiHeadAttention scaled by √d_model instead of √(d_model/h) measures 1/√d_model."""
    rng = np.random.default_rng(2)
    heads, d_k = 4, 3
    q, k = (reference.split_heads(rng.standard_normal((2, 5, heads * d_k)), heads) for _ in range(2))
    scores = reference.unscaled_scores(q, k)
    code, params = verdict(module_weights(scores, 1 / math.sqrt(heads * d_k)), scores, d_k)
    assert code == "wrong_scale" and params["measured"] == pytest.approx(1 / math.sqrt(12), abs=1e-5)


@EXAMPLES
@given(case=projections(), wrong=st.sampled_from(("keys_as_queries", "transposed", "random_weights", "noisy_scores")))
def test_weights_that_are_no_scaled_softmax_of_q_k_are_unmeasurable(case, wrong):
    q, k, d_k, rng = case
    c = 1 / math.sqrt(d_k)
    scores = reference.unscaled_scores(q, k)
    if wrong == "keys_as_queries":  # Q from W_K
        weights = module_weights(reference.unscaled_scores(k, k), c)
    elif wrong == "transposed":  # K·Qᵀ
        weights = module_weights(np.swapaxes(scores, -1, -2), c)
    elif wrong == "random_weights":
        weights = rng.dirichlet(np.ones(scores.shape[-1]), size=scores.shape[:-1])
    else:  # the right scores plus as much again of something else
        weights = module_weights(scores + np.abs(scores).mean() * rng.standard_normal(scores.shape), c)
    code, params = verdict(weights, scores, d_k)
    assert code == "scale_unmeasurable" and params["residual"] > checks.FIT_RESIDUAL
    assert params["d_k"] == d_k


def test_the_wrong_weights_above_are_unmeasurable_on_a_fixed_case():
    """The same four mistakes on one case where none of them is a scaled softmax by accident."""
    rng = np.random.default_rng(8)
    q, k = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4))
    scores = reference.unscaled_scores(q, k)
    wrong = [module_weights(reference.unscaled_scores(k, k), 0.5), module_weights(np.swapaxes(scores, -1, -2), 0.5),
             rng.dirichlet(np.ones(5), size=(2, 5)), module_weights(scores + rng.standard_normal(scores.shape), 0.5)]
    for weights in wrong:
        code, params = verdict(weights, scores, 4)
        assert code == "scale_unmeasurable" and params["residual"] > 0.05, (code, params)


@EXAMPLES
@given(case=projections(), wrong=st.sampled_from(("softmax_over_queries", "output_in_their_place")))
def test_weights_that_are_no_distribution_point_at_rows_sum_to_one(case, wrong):
    """Rows that do not sum to 1 are no softmax over the keys at all: rows_sum_to_one's mistake
    (softmax over dim=-2), or the output returned where the weights go (a (B, T, d_k) output
    has the weights' shape when d_k = T), named as that test's, with the first such row."""
    q, k, d_k, rng = case
    scores = reference.unscaled_scores(q, k)
    weights = module_weights(scores, 1 / math.sqrt(d_k), dim=-2 if wrong == "softmax_over_queries" else -1)
    if wrong == "output_in_their_place":
        weights = weights @ rng.standard_normal(weights.shape[:-2] + (weights.shape[-1], weights.shape[-1]))
    code, params = verdict(weights, scores, d_k)
    sums = weights.sum(axis=-1)
    if np.all(np.abs(sums - 1) <= checks.ROW_SUM_ATOL):  # T = 1 after all, or a product that happens to sum to 1
        return
    assert code == "weights_not_a_distribution_upstream"
    assert abs(sums[tuple(params["index"])] - 1) > checks.ROW_SUM_ATOL and params["got"] == sums[tuple(params["index"])]


def test_nothing_to_measure_judges_nothing():
    """One key per row, or scores that do not differ: no difference to fit, no verdict."""
    rng = np.random.default_rng(9)
    one_key = reference.unscaled_scores(rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 1, 3)))
    assert checks.fitted_scale(module_weights(one_key, 5.0), one_key) is None
    assert verdict(module_weights(one_key, 5.0), one_key, 3) == (None, {})
    flat = np.zeros((2, 4, 4))
    assert checks.fitted_scale(np.full(flat.shape, 0.25), flat) is None


def test_uniform_weights_over_differing_scores_measure_zero():
    """Weights that ignore the scores are softmax(0·S): a scale of 0, reported as wrong."""
    rng = np.random.default_rng(10)
    scores = reference.unscaled_scores(rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 3)))
    measured, residual = checks.fitted_scale(np.full(scores.shape, 0.2), scores)
    assert measured == 0.0 and residual == 0.0
    assert verdict(np.full(scores.shape, 0.2), scores, 3)[0] == "wrong_scale"
