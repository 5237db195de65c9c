"""Checks shared by the three classes: each takes plain arrays or a Remote and raises
PropertyFailure with a message code when the property does not hold."""
import numpy as np

from .failures import PropertyFailure, expect_close, require

ROW_SUM_ATOL = 1e-5


def rows_sum_to_one(weights):
    sums = weights.sum(axis=-1)
    expect_close(sums, np.ones_like(sums), "rows_do_not_sum_to_one", atol=ROW_SUM_ATOL, rtol=0)


def masked_weights_zero(weights, mask):
    blocked = np.broadcast_to(mask, weights.shape) == 0
    leaked = np.abs(weights[blocked])
    require(not blocked.any() or leaked.max() == 0.0, "masked_weight_not_zero",
            max_weight=float(leaked.max()) if leaked.size else 0.0,
            count=int((leaked != 0).sum()))


def fitted_scale(weights, scores):
    """Fit c in log w_ij - log w_i0 = c (s_ij - s_i0) over every row with usable weights."""
    log_w = np.log(np.where(weights > 1e-30, weights, np.nan))
    dy = (log_w - log_w[..., :1]).ravel()
    dx = (scores - scores[..., :1]).ravel()
    usable = np.isfinite(dy) & (np.abs(dx) > 1e-3)
    if usable.sum() < 2:
        return None
    return float(dy[usable] @ dx[usable] / (dx[usable] @ dx[usable]))


def scale_is(weights, scores, d_k):
    expected = 1.0 / np.sqrt(d_k)
    measured = fitted_scale(weights, scores)
    if measured is None:
        return
    require(abs(measured - expected) <= 1e-3 * expected, "wrong_scale",
            measured=round(measured, 5), expected=round(expected, 5), d_k=d_k)


def batch_independent(run, inputs, rng, outputs_shape_checker):
    """Changing batch element b (every input at once) must leave every other element alone."""
    batch = inputs[0].shape[0]
    before = outputs_shape_checker(run(*inputs))
    victim = int(rng.integers(batch))
    changed = [x.copy() for x in inputs]
    for x in changed:
        x[victim] = rng.standard_normal(x[victim].shape).astype(x.dtype)
    after = outputs_shape_checker(run(*changed))
    others = [b for b in range(batch) if b != victim]
    expect_close(after[others], before[others], "batch_leak", atol=1e-6, changed=victim)


def gradients_reach_every_parameter(reply):
    grads = reply.grads
    missing = sorted(n for n, g in grads.items() if g is None)
    require(not missing, "no_gradient", names=missing)
    bad = sorted(n for n, g in grads.items() if not np.isfinite(g).all())
    require(not bad, "gradient_not_finite", names=bad)
    zero = sorted(n for n, g in grads.items() if not np.any(g))
    require(not zero, "zero_gradient", names=zero)


def finite(array, what):
    require(np.isfinite(array).all(), "not_finite", what=what,
            count=int((~np.isfinite(array)).sum()))


def stable(output, weights):
    """No NaN or inf anywhere, and weight rows still sum to one (large inputs, say)."""
    finite(output, "output")
    finite(weights, "weights")
    rows_sum_to_one(weights)


def runs_on_device(attempt, device, expected_shapes):
    """Run forward with module and inputs on `device`; a tensor made elsewhere fails it."""
    from ..worker.client import SubmissionError

    try:
        reply = attempt(device)
    except SubmissionError as exc:
        if exc.kind != "exception":
            raise
        raise PropertyFailure("wrong_device", device=device, error=exc.message, line=exc.line) from None
    for what, value, shape in zip(("output", "weights"), reply.outputs, expected_shapes):
        got = value.get("meta_shape") if isinstance(value, dict) else list(getattr(value, "shape", []))
        require(got == list(shape), "shape_mismatch", what=what, expected=list(shape), got=got)
    return reply


def cuda_available(worker, owner):
    """Whether the worker sees a GPU: then device checks run there too, in fp32 without TF32."""
    if not hasattr(worker, "cuda"):
        worker.cuda = worker.call(owner, "probe")["cuda"]
    return worker.cuda
