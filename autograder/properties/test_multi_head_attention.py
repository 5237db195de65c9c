"""MultiHeadAttention(d_model, num_heads, dropout=0.1):
forward(query, key, value, mask=None) -> (output (B,Tq,d_model), weights (B,h,Tq,Tk))."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from . import checks, reference
from .failures import PropertyFailure, example, expect_close, require
from .harness import Remote, gaussian, graded, random_mask
from .strategies import dropout_rates, multi_head_dims, parameter_seed, rng_for, seeds
from ..worker.client import SubmissionError

CLS = "MultiHeadAttention"


def build(worker, dims, dropout=0.0, load_seed=None):
    example(**dims, dropout=dropout)
    return Remote(worker, CLS, load_seed, d_model=dims["d_model"], num_heads=dims["h"], dropout=dropout)

def loaded(worker, dims, dropout=0.0):
    """A module with the grader's parameters (module.params) and the rng of its inputs."""
    return build(worker, dims, dropout, load_seed=parameter_seed(dims)), rng_for(dims)


def outputs(reply, dims):
    B, Tq, Tk = dims["B"], dims["Tq"], dims["Tk"]
    return (reply.output(0, (B, Tq, dims["d_model"]), "output"),
            reply.output(1, (B, dims["h"], Tq, Tk), "weights"))


def cross_inputs(rng, dims, scale=1.0):
    """query (B,Tq,d), key and value (B,Tk,d), key != value: cross-attention."""
    B, d = dims["B"], dims["d_model"]
    return (gaussian(rng, B, dims["Tq"], d, scale=scale), gaussian(rng, B, dims["Tk"], d, scale=scale),
            gaussian(rng, B, dims["Tk"], d, scale=scale))


def masks(rng, dims):
    """The mask shapes the contract accepts: (B,Tq,Tk), (B,1,Tq,Tk) and broadcastable (1,Tq,Tk)."""
    B, Tq, Tk = dims["B"], dims["Tq"], dims["Tk"]
    return random_mask(rng, B, Tq, Tk), random_mask(rng, B, 1, Tq, Tk), random_mask(rng, 1, Tq, Tk)


@graded(CLS, "shapes")
@given(dims=multi_head_dims())
def test_shapes(worker, dims):
    module = build(worker, dims)
    outputs(module.run(*cross_inputs(rng_for(dims), dims)), dims)


@graded(CLS, "parameter_count")
@given(dims=multi_head_dims())
def test_parameter_count(worker, dims):
    module = build(worker, dims)
    biased = sorted(name for name, has in module.linear_bias.items() if has)
    require(not biased, "unexpected_bias", names=biased)
    expected = 4 * dims["d_model"] ** 2
    require(module.parameter_count == expected, "parameter_count", expected=expected,
            got=module.parameter_count, formula="4·d_model²")


@graded(CLS, "divisibility_error")
@given(heads=st.integers(2, 6), per_head=st.integers(1, 5), offset=st.integers(1, 5))
def test_divisibility_error(worker, heads, per_head, offset):
    d_model = heads * per_head + 1 + offset % (heads - 1)  # never a multiple of heads
    example(d_model=d_model, h=heads)
    try:
        Remote(worker, CLS, d_model=d_model, num_heads=heads).build()
    except SubmissionError as exc:
        if exc.exc_type in ("AssertionError", "ValueError"):
            return
        if exc.kind != "exception":
            raise
        raise PropertyFailure("divisibility_wrong_error", got=exc.exc_type, d_model=d_model, h=heads) from None
    raise PropertyFailure("divisibility_no_error", d_model=d_model, h=heads)


@graded(CLS, "split_heads")
@given(dims=multi_head_dims())
def test_split_heads(worker, dims):
    rng = rng_for(dims)
    module = build(worker, dims)
    B, T, h = dims["B"], dims["Tq"], dims["h"]
    x = gaussian(rng, B, T, dims["d_model"])
    got = module.run(x, B, method="split_heads").output(0, (B, h, T, dims["d_model"] // h), "split_heads")
    expect_close(got, reference.split_heads(x.astype(np.float64), h), "split_heads_mismatch", atol=0, rtol=0)


@graded(CLS, "rows_sum_to_one")
@given(dims=multi_head_dims())
def test_rows_sum_to_one(worker, dims):
    module, rng = loaded(worker, dims, dropout=0.3)
    for mask in (None, *masks(rng, dims)):
        checks.rows_sum_to_one(outputs(module.run(*cross_inputs(rng, dims), mask=mask), dims)[1])


@graded(CLS, "masked_zero")
@given(dims=multi_head_dims(min_time=2))
def test_masked_zero(worker, dims):
    module, rng = loaded(worker, dims)
    for mask in masks(rng, dims):
        _, weights = outputs(module.run(*cross_inputs(rng, dims), mask=mask), dims)
        checks.masked_weights_zero(weights, mask if mask.ndim == 4 else mask[:, None])


@graded(CLS, "scale")
@given(dims=multi_head_dims(min_time=2, min_heads=2))
def test_scale(worker, dims):
    module, rng = loaded(worker, dims)
    query, key, value = cross_inputs(rng, dims)
    _, weights = outputs(module.run(query, key, value), dims)
    q, k = (reference.split_heads(reference.linear(t.astype(np.float64), module.params, n), dims["h"])
            for t, n in ((query, "W_Q"), (key, "W_K")))
    checks.scale_is(weights, reference.unscaled_scores(q, k), dims["d_model"] // dims["h"])


@graded(CLS, "reference_match")
@given(dims=multi_head_dims(), use_mask=st.booleans())
def test_reference_match(worker, dims, use_mask):
    module, rng = loaded(worker, dims, dropout=0.2)
    query, key, value = cross_inputs(rng, dims)
    mask = masks(rng, dims)[0] if use_mask else None
    out, weights = outputs(module.run(query, key, value, mask=mask), dims)
    ref_out, ref_weights = reference.multi_head_attention(
        module.params, dims["h"], *(t.astype(np.float64) for t in (query, key, value)), mask)
    expect_close(weights, ref_weights, "reference_mismatch", what="weights", masked=use_mask)
    expect_close(out, ref_out, "reference_mismatch", what="output", masked=use_mask)


@graded(CLS, "batch_independence")
@given(dims=multi_head_dims(min_batch=2))
def test_batch_independence(worker, dims):
    module, rng = loaded(worker, dims)
    checks.batch_independent(module.run, list(cross_inputs(rng, dims)), rng, lambda r: outputs(r, dims)[0])


@graded(CLS, "eval_deterministic")
@given(dims=multi_head_dims(min_time=2), seed=seeds)
def test_eval_deterministic(worker, dims, seed):
    module, rng = loaded(worker, dims, dropout=0.5)
    args = cross_inputs(rng, dims)
    first, second = (outputs(module.run(*args, seed=s), dims) for s in (seed, seed + 1))
    for what, a, b in zip(("output", "weights"), first, second):
        expect_close(b, a, "eval_not_deterministic", atol=0, rtol=0, what=what)


@graded(CLS, "train_dropout")
@given(dims=multi_head_dims(min_time=2), seed=seeds, p=dropout_rates)
def test_train_dropout(worker, dims, seed, p):
    # A batch large enough for checks.DROPOUT_DRAWS weights: see checks.dropout_rate.
    per_example = dims["h"] * dims["Tq"] * dims["Tk"]
    dims = {**dims, "B": max(dims["B"], -(-checks.DROPOUT_DRAWS // per_example))}
    module, rng = loaded(worker, dims, dropout=p)
    args = cross_inputs(rng, dims)
    (evaluated, eval_weights), (trained, train_weights) = (
        outputs(reply, dims) for reply in module.runs((args, {}), (args, {"train": True, "seed": seed})))
    checks.dropout_on_weights(train_weights, eval_weights, p)
    # The output is computed from the weights returned (after dropout): W_O(merge(weights @ V)).
    # Judged only when the module's eval output is that function of its eval weights, so that a
    # bug elsewhere (reference_match's) does not cost this point too.
    value = args[2].astype(np.float64)
    from_eval = reference.multi_head_output_from_weights(module.params, dims["h"], value, eval_weights)
    if np.allclose(evaluated, from_eval, atol=1e-5, rtol=1e-4):
        expected = reference.multi_head_output_from_weights(module.params, dims["h"], value, train_weights)
        expect_close(trained, expected, "dropout_output_mismatch", p=p)


@graded(CLS, "gradients")
@given(dims=multi_head_dims(min_time=2))
def test_gradients(worker, dims):
    module, rng = loaded(worker, dims)
    checks.gradients_reach_every_parameter(module.run(*cross_inputs(rng, dims), grad=True))


@graded(CLS, "large_inputs")
@given(dims=multi_head_dims(min_time=2))
def test_large_inputs(worker, dims):
    module, rng = loaded(worker, dims)
    # Scores of magnitude ~1e6: a finite fill such as -1e4 no longer keeps masked weights at 0.
    args, mask = cross_inputs(rng, dims, scale=1e3), masks(rng, dims)[0]
    plain, masked = module.runs((args, {}), (cross_inputs(rng, dims, scale=1e3), {"mask": mask}))
    checks.stable(*outputs(plain, dims))
    out, weights = outputs(masked, dims)
    checks.stable(out, weights)
    checks.masked_weights_zero(weights, mask[:, None], "masked_weight_not_zero_large")


@graded(CLS, "device")
@given(dims=multi_head_dims())
def test_device(worker, dims):
    module, rng = loaded(worker, dims)
    args, mask = cross_inputs(rng, dims), masks(rng, dims)[0]
    B, Tq, Tk, h, d = dims["B"], dims["Tq"], dims["Tk"], dims["h"], dims["d_model"]
    shapes = [(B, Tq, d), (B, h, Tq, Tk)]
    checks.runs_on_device(lambda device: module.run(*args, mask=mask, device=device), "meta", shapes,
                          fallbacks=[lambda device: module.run(*args, device=device)])
    if checks.cuda_available(worker, CLS):
        reply = checks.runs_on_device(lambda device: module.run(*args, mask=mask, device=device), "cuda", shapes)
        expected = reference.multi_head_attention(module.params, h, *(t.astype(np.float64) for t in args), mask)[0]
        expect_close(outputs(reply, dims)[0], expected, "reference_mismatch", what="output_cuda", masked=True)
