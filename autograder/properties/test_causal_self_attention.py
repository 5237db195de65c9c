"""CausalSelfAttention(cfg): forward(x, fused=False) -> (B,T,C) for any T <= block_size."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from . import checks, reference
from .failures import example, expect_close, require
from .harness import Remote, gaussian, graded
from .strategies import causal_dims, dropout_rates, parameter_seed, rng_for, seeds

CLS = "CausalSelfAttention"


def build(worker, dims, dropout=0.0, load_seed=None):
    example(**dims, dropout=dropout)
    return Remote(worker, CLS, load_seed, n_embd=dims["n_embd"], n_head=dims["n_head"],
                  block_size=dims["block_size"], dropout=dropout)

def loaded(worker, dims, dropout=0.0):
    """A module with the grader's parameters (module.params) and the rng of its inputs."""
    return build(worker, dims, dropout, load_seed=parameter_seed(dims)), rng_for(dims)


def output(reply, dims):
    return reply.output(0, (dims["B"], dims["T"], dims["n_embd"]), "output")


def inputs(rng, dims, scale=1.0):
    return gaussian(rng, dims["B"], dims["T"], dims["n_embd"], scale=scale)


def expected(params, dims, x):
    return reference.causal_self_attention(params, dims["n_head"], x.astype(np.float64))


@graded(CLS, "shapes")
@given(dims=causal_dims(), fused=st.booleans())
def test_shapes(worker, dims, fused):
    module = build(worker, dims)
    output(module.run(inputs(rng_for(dims), dims), fused=fused), dims)


@graded(CLS, "parameter_count")
@given(dims=causal_dims())
def test_parameter_count(worker, dims):
    module = build(worker, dims)
    unbiased = sorted(name for name, has in module.linear_bias.items() if not has)
    require(not unbiased, "missing_bias", names=unbiased)
    C = dims["n_embd"]
    require(module.parameter_count == 4 * C * C + 4 * C, "parameter_count", expected=4 * C * C + 4 * C,
            got=module.parameter_count, formula="4·C² + 4·C")


@graded(CLS, "mask_buffer")
@given(dims=causal_dims())
def test_mask_buffer(worker, dims):
    module = build(worker, dims)
    bs = dims["block_size"]
    require("mask" not in module.param_shapes, "mask_is_parameter")
    require("mask" in module.buffers, "mask_missing", found=sorted(module.buffers))
    buffer = module.buffers["mask"]
    require(buffer["shape"] == [1, 1, bs, bs], "shape_mismatch", what="mask",
            expected=[1, 1, bs, bs], got=buffer["shape"])
    require(buffer["dtype"] == "bool", "mask_dtype", got=buffer["dtype"])
    require(not buffer["persistent"] and "mask" not in module.state_dict, "mask_persistent")
    values = buffer["values"]
    require(isinstance(values, np.ndarray) and values.shape == (1, 1, bs, bs)
            and np.array_equal(values[0, 0], np.tril(np.ones((bs, bs), bool))), "mask_not_lower_triangular")


@graded(CLS, "causality")
@given(dims=causal_dims(min_time=2), data=st.data())
def test_causality(worker, dims, data):
    module, rng = loaded(worker, dims)
    T = dims["T"]
    position = data.draw(st.integers(1, T - 1), label="position")
    example(**dims, position=position)
    x = inputs(rng, dims)
    before = output(module.run(x), dims)
    perturbed = x.copy()
    perturbed[:, position] = gaussian(rng, dims["B"], dims["n_embd"])
    after = output(module.run(perturbed), dims)
    expect_close(after[:, :position], before[:, :position], "future_leak", atol=1e-6, position=position)
    # ...and the past does reach the future: changing token 0 moves the last output.
    perturbed = x.copy()
    perturbed[:, 0] = gaussian(rng, dims["B"], dims["n_embd"], scale=3.0)
    after = output(module.run(perturbed), dims)
    require(np.abs(after[:, -1] - before[:, -1]).max() > 1e-6, "past_ignored", T=T)


@graded(CLS, "reference_match")
@given(dims=causal_dims())
def test_reference_match(worker, dims):
    module, rng = loaded(worker, dims, dropout=0.2)
    x = inputs(rng, dims)
    expect_close(output(module.run(x), dims), expected(module.params, dims, x), "reference_mismatch",
                 what="output", masked=True)


@graded(CLS, "batch_independence")
@given(dims=causal_dims(min_batch=2))
def test_batch_independence(worker, dims):
    module, rng = loaded(worker, dims)
    checks.batch_independent(module.run, [inputs(rng, dims)], rng, lambda r: output(r, dims))


@graded(CLS, "eval_deterministic")
@given(dims=causal_dims(min_time=2), seed=seeds)
def test_eval_deterministic(worker, dims, seed):
    module, rng = loaded(worker, dims, dropout=0.5)
    x = inputs(rng, dims)
    first, second = (output(module.run(x, seed=s), dims) for s in (seed, seed + 1))
    expect_close(second, first, "eval_not_deterministic", atol=0, rtol=0, what="output")


@graded(CLS, "train_dropout")
@given(dims=causal_dims(min_time=2), seed=seeds, p=dropout_rates)
def test_train_dropout(worker, dims, seed, p):
    # A batch large enough for checks.DROPOUT_DRAWS output entries (B·T·C) and B·h >= 128
    # attention heads at t = 0: see checks.causal_dropout.
    per_example = dims["T"] * dims["n_embd"]
    dims = {**dims, "B": max(dims["B"], -(-checks.DROPOUT_DRAWS // per_example), -(-128 // dims["n_head"]))}
    module, rng = loaded(worker, dims, dropout=p)
    x = inputs(rng, dims)
    reference_output = expected(module.params, dims, x)
    replies = module.runs(*(((x,), {"fused": fused, "train": train, "seed": seed})
                            for fused in (False, True) for train in (False, True)))
    for fused, evaluated, trained in ((False, *replies[:2]), (True, *replies[2:])):
        path = f"fused={fused}"
        trained = output(trained, dims)
        if np.allclose(output(evaluated, dims), reference_output, atol=1e-5, rtol=1e-4):
            checks.causal_dropout(module.params, dims["n_head"], x.astype(np.float64), p, trained, path)
        else:
            # A bug outside dropout (reference_match's, fused_equivalence's): judge only what does
            # not depend on it, resid_drop's zeros.
            zero = trained == 0
            require(zero.any(), "resid_dropout_missing", p=p, path=path)
            checks.dropout_rate(int(zero.sum()), trained.size, p, "output")


@graded(CLS, "gradients")
@given(dims=causal_dims(min_time=2), fused=st.booleans())
def test_gradients(worker, dims, fused):
    module, rng = loaded(worker, dims)
    checks.gradients_reach_every_parameter(module.run(inputs(rng, dims), fused=fused, grad=True))


@graded(CLS, "large_inputs")
@given(dims=causal_dims(min_time=2))
def test_large_inputs(worker, dims):
    module, rng = loaded(worker, dims)
    x = inputs(rng, dims, scale=1e3)
    # Scores of magnitude ~1e6: the future must stay out even where a finite fill such as -1e4
    # would be outscored. Changing the last token must leave every earlier position as it was.
    perturbed = x.copy()
    perturbed[:, -1] = gaussian(rng, dims["B"], dims["n_embd"], scale=1e3)
    before, after = (output(reply, dims) for reply in module.runs(((x,), {}), ((perturbed,), {})))
    checks.finite(before, "output")
    T = dims["T"]
    expect_close(after[:, :-1], before[:, :-1], "future_leak_large", atol=1e-3, rtol=1e-6, position=T - 1)


@graded(CLS, "fused_equivalence")
@given(dims=causal_dims())
def test_fused_equivalence(worker, dims):
    module, rng = loaded(worker, dims, dropout=0.3)  # dropout > 0: the fused path must still not drop in eval
    x = inputs(rng, dims)
    explicit = output(module.run(x), dims)
    fused = output(module.run(x, fused=True), dims)
    expect_close(fused, expected(module.params, dims, x), "fused_mismatch", against="reference")
    expect_close(fused, explicit, "fused_mismatch", against="forward(x)")
    if checks.cuda_available(worker, CLS):
        for path in (False, True):
            on_gpu = output(module.run(x, fused=path, device="cuda"), dims)
            expect_close(on_gpu, expected(module.params, dims, x), "fused_mismatch", against="cuda_fused" if path else "cuda_explicit")


@graded(CLS, "fused_calls_sdpa")
@given(dims=causal_dims())
def test_fused_calls_sdpa(worker, dims):
    module = build(worker, dims)
    reply = module.run(inputs(rng_for(dims), dims), fused=True, trace_sdpa=True)
    output(reply, dims)
    require(reply.sdpa_calls >= 1, "sdpa_not_called")


@graded(CLS, "device")
@given(dims=causal_dims(), fused=st.booleans())
def test_device(worker, dims, fused):
    module, rng = loaded(worker, dims)
    x = inputs(rng, dims)
    shapes = [(dims["B"], dims["T"], dims["n_embd"])]
    checks.runs_on_device(lambda device: module.run(x, fused=fused, device=device), "meta", shapes)
    if checks.cuda_available(worker, CLS):
        reply = checks.runs_on_device(lambda device: module.run(x, fused=fused, device=device), "cuda", shapes)
        expect_close(output(reply, dims), expected(module.params, dims, x), "reference_mismatch",
                     what="output_cuda", masked=True)
