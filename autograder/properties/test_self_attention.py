"""SelfAttention(d_model, d_k=None): forward(x, mask=None) -> (output (B,T,d_k), weights (B,T,T))."""
import numpy as np
from hypothesis import given

from . import checks, reference
from .failures import example, expect_close, require
from .harness import Remote, gaussian, graded, random_mask
from .strategies import parameter_seed, rng_for, self_attention_dims

CLS = "SelfAttention"


def build(worker, dims, load_seed=None):
    example(**dims)
    kwargs = {"d_model": dims["d_model"]}
    if dims["d_k"] is not None:
        kwargs["d_k"] = dims["d_k"]
    return Remote(worker, CLS, load_seed, **kwargs)

def loaded(worker, dims):
    """A module with the grader's parameters (module.params) and the rng of its inputs."""
    return build(worker, dims, load_seed=parameter_seed(dims)), rng_for(dims)


def d_k_of(dims):
    return dims["d_k"] or dims["d_model"]


def outputs(reply, dims):
    B, T = dims["B"], dims["T"]
    return reply.output(0, (B, T, d_k_of(dims)), "output"), reply.output(1, (B, T, T), "weights")


def inputs(rng, dims, scale=1.0):
    return gaussian(rng, dims["B"], dims["T"], dims["d_model"], scale=scale)


@graded(CLS, "shapes")
@given(dims=self_attention_dims())
def test_shapes(worker, dims):
    module = build(worker, dims)
    outputs(module.run(inputs(rng_for(dims), dims)), dims)


@graded(CLS, "parameter_count")
@given(dims=self_attention_dims())
def test_parameter_count(worker, dims):
    module = build(worker, dims)
    biased = sorted(name for name, has in module.linear_bias.items() if has)
    require(not biased, "unexpected_bias", names=biased)
    expected = 3 * dims["d_model"] * d_k_of(dims)
    require(module.parameter_count == expected, "parameter_count", expected=expected,
            got=module.parameter_count, formula="3·d_model·d_k")


@graded(CLS, "rows_sum_to_one")
@given(dims=self_attention_dims())
def test_rows_sum_to_one(worker, dims):
    module, rng = loaded(worker, dims)
    for mask in (None, random_mask(rng, dims["B"], dims["T"], dims["T"])):
        _, weights = outputs(module.run(inputs(rng, dims), mask=mask), dims)
        checks.rows_sum_to_one(weights)


@graded(CLS, "masked_zero")
@given(dims=self_attention_dims(min_time=2))
def test_masked_zero(worker, dims):
    module, rng = loaded(worker, dims)
    B, T = dims["B"], dims["T"]
    for mask in (random_mask(rng, B, T, T), random_mask(rng, 1, T, T), np.tril(np.ones((T, T), np.float32))):
        _, weights = outputs(module.run(inputs(rng, dims), mask=mask), dims)
        checks.masked_weights_zero(weights, mask)


@graded(CLS, "scale")
@given(dims=self_attention_dims(min_time=2))
def test_scale(worker, dims):
    module, rng = loaded(worker, dims)
    x = inputs(rng, dims)
    _, weights = outputs(module.run(x), dims)
    q, k = (reference.linear(x.astype(np.float64), module.params, n) for n in ("W_Q", "W_K"))
    checks.scale_is(weights, reference.unscaled_scores(q, k), d_k_of(dims))


@graded(CLS, "reference_match")
@given(dims=self_attention_dims())
def test_reference_match(worker, dims):
    module, rng = loaded(worker, dims)
    x = inputs(rng, dims)
    for mask in (None, random_mask(rng, dims["B"], dims["T"], dims["T"])):
        out, weights = outputs(module.run(x, mask=mask), dims)
        ref_out, ref_weights = reference.self_attention(module.params, x.astype(np.float64), mask)
        expect_close(weights, ref_weights, "reference_mismatch", what="weights", masked=mask is not None)
        expect_close(out, ref_out, "reference_mismatch", what="output", masked=mask is not None)


@graded(CLS, "batch_independence")
@given(dims=self_attention_dims(min_batch=2))
def test_batch_independence(worker, dims):
    module, rng = loaded(worker, dims)
    checks.batch_independent(module.run, [inputs(rng, dims)], rng, lambda r: outputs(r, dims)[0])


@graded(CLS, "gradients")
@given(dims=self_attention_dims(min_time=2))
def test_gradients(worker, dims):
    module, rng = loaded(worker, dims)
    checks.gradients_reach_every_parameter(module.run(inputs(rng, dims), grad=True))


@graded(CLS, "large_inputs")
@given(dims=self_attention_dims(min_time=2))
def test_large_inputs(worker, dims):
    module, rng = loaded(worker, dims)
    x = inputs(rng, dims, scale=1e3)
    # Scores of magnitude ~1e6: a finite fill such as -1e4 no longer keeps masked weights at 0,
    # while -inf (or -1e9, finfo.min) still does.
    B, T = dims["B"], dims["T"]
    mask = random_mask(rng, B, T, T)
    plain, masked = module.runs(((x,), {}), ((inputs(rng, dims, scale=1e3),), {"mask": mask}))
    checks.stable(*outputs(plain, dims))
    out, weights = outputs(masked, dims)
    checks.stable(out, weights)
    checks.masked_weights_zero(weights, mask, "masked_weight_not_zero_large")


@graded(CLS, "device")
@given(dims=self_attention_dims())
def test_device(worker, dims):
    module, rng = loaded(worker, dims)
    B, T = dims["B"], dims["T"]
    x, mask = inputs(rng, dims), random_mask(rng, B, T, T)
    shapes = [(B, T, d_k_of(dims)), (B, T, T)]
    checks.runs_on_device(lambda device: module.run(x, mask=mask, device=device), "meta", shapes,
                          fallbacks=[lambda device: module.run(x, device=device)])
    if checks.cuda_available(worker, CLS):
        reply = checks.runs_on_device(lambda device: module.run(x, mask=mask, device=device), "cuda", shapes)
        expect_close(outputs(reply, dims)[0], reference.self_attention(module.params, x.astype(np.float64), mask)[0],
                     "reference_mismatch", what="output_cuda", masked=True)
