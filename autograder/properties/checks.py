"""Checks shared by the three classes: each takes plain arrays or a Remote and raises
PropertyFailure with a message code when the property does not hold."""
import math

import numpy as np

from . import reference
from .failures import PropertyFailure, expect_close, require

ROW_SUM_ATOL = 1e-5


def rows_sum_to_one(weights):
    sums = weights.sum(axis=-1)
    expect_close(sums, np.ones_like(sums), "rows_do_not_sum_to_one", atol=ROW_SUM_ATOL, rtol=0)


def masked_weights_zero(weights, mask, code="masked_weight_not_zero"):
    blocked = np.broadcast_to(mask, weights.shape) == 0
    leaked = np.abs(weights[blocked])
    require(not blocked.any() or leaked.max() == 0.0, code,
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


# Sizes of the train-mode dropout checks: enough independent dropout draws that a correct dropout,
# whatever order it draws its randomness in, lands inside the bounds below except with negligible
# probability (the figures are next to each check).
DROPOUT_DRAWS = 2048
RATE_SIGMAS = 7


def dropout_rate(dropped, total, p, what):
    """`dropped` of `total` independent Bernoulli(p) draws must be within RATE_SIGMAS standard
    deviations (+1) of total·p. For total >= 2048 and p in strategies.dropout_rates, the exact
    binomial tail outside that band is below 5e-12 (about 2e-9 at 6 sigmas), so a correct dropout
    never fails it in practice. The band is at most ±0.078 wide there, so a dropout whose rate is
    0.15 or more away from p (a hard-coded 0.1 where p = 0.25, nn.Dropout()'s 0.5 where p = 0.25
    or 0.75) falls outside it but with a probability below 1e-9."""
    bound = RATE_SIGMAS * math.sqrt(total * p * (1 - p)) + 1
    require(abs(dropped - total * p) <= bound, "dropout_wrong_rate", what=what, p=p,
            fraction=round(dropped / total, 3), dropped=dropped, total=total)


def dropout_on_weights(trained, evaluated, p):
    """Weights returned in train mode against the same module's weights in eval mode: each one
    either dropped (exactly 0) or divided by (1 - p), with about a fraction p dropped."""
    live = evaluated != 0
    total = int(live.sum())
    dropped = (trained == 0) & live
    require(dropped.any(), "dropout_not_applied", p=p, dropped=0, total=total)
    kept = (trained != 0) & live
    scale = 1.0 / (1.0 - p)
    expected = np.where(kept, evaluated * scale, trained)
    if not np.allclose(trained, expected, atol=1e-5, rtol=1e-4):
        ratio = trained[kept] / evaluated[kept]
        factor = float(np.median(ratio)) if ratio.size else 1.0
        if factor > 1 + 1e-3 and np.allclose(ratio, factor, rtol=1e-3, atol=0):
            # One constant factor, not 1/(1-p): the dropout runs with some other p (nn.Dropout(0.1)).
            raise PropertyFailure("dropout_ignores_p", p=p, factor=round(factor, 4), measured=round(1 - 1 / factor, 3),
                                  fraction=round(float(dropped.sum()) / total, 3))
        expect_close(trained, expected, "dropout_not_rescaled", p=p, scale=round(scale, 4))
    dropout_rate(int(dropped.sum()), total, p, "weights")


def causal_dropout(params, heads, x, p, trained, path):
    """CausalSelfAttention's train-mode output `trained` (B,T,C) for input x, judged by structure
    (torch's dropout masks cannot be predicted, and a correct module may draw them in any order):

        trained = R ⊙ proj(merge(((D ⊙ A) / (1-p)) @ v)) / (1-p)

    with A, v the attention weights and values (computed here in float64 from the grader's
    parameters), D (B,h,T,T) and R (B,T,C) unknown 0/1 masks.

    1. resid_drop after proj: entries of proj's output are never exactly 0 otherwise (its bias is
       drawn from a continuous distribution), so the zeros of `trained` are R's: about a fraction p
       of them (dropout_rate). resid_drop missing, or applied before proj, leaves none.
    2. attn_drop present: without it (or with dropout_p=0 in the fused path) the nonzero entries
       are eval's output divided by (1 - p). A correct module never matches that on a row (b, 0)
       with a nonzero entry: there each head has a single weight A = 1, either dropped (0) or
       scaled to 1/(1-p), never 1. The B·C >= 2048/T >= 256 entries of row 0 are all dropped by
       R with probability p^256 <= 0.75^256 < 1e-31.
    3. attn_drop on the weights, after the softmax: a row (b, t) must be matched, on its nonzero
       entries, by one of the 2^(h(t+1)) choices of D[b, :, t, :t+1]; and some row must need a D
       with a zero in it (some weight was dropped). A row whose weights were all kept is matched
       by D = 1. Checked on every row t = 0 (2^h choices) and, to keep it cheap, on the first
       ROWS_CHECKED examples' rows t >= 1 while h·(t+1) <= 8.
       A correct module drops the single weight of row t=0 of head h (A = 1) with probability p,
       and that shows on any kept entry of row (b, 0) unless all C of them were dropped by R: per
       (b, h) a visible drop has probability >= p(1-p) >= 3/16 for p in strategies.dropout_rates
       (C >= 1). The check uses B·h >= 128 such independent pairs, so a correct module shows no
       drop with probability <= (13/16)^128 < 3e-12.
    """
    B, T, C = x.shape
    hs = C // heads
    weights, v = reference.causal_attention(params, heads, x)
    proj = params["proj.weight"].reshape(C, heads, hs)  # proj[:, h, d] multiplies context[h, d]
    bias = params.get("proj.bias", np.zeros(C))
    scale = 1.0 / (1.0 - p)

    zero = trained == 0  # 1. resid_drop, after proj
    require(zero.any(), "resid_dropout_missing", p=p, path=path)
    dropout_rate(int(zero.sum()), trained.size, p, "output")

    kept = ~zero
    tolerance = 1e-4 + 1e-4 * np.abs(trained)
    # 2. No attention dropout at all: the kept entries are eval's output divided by (1 - p).
    undropped = (bias + np.einsum("chd,bhtd->btc", proj, weights @ v)) * scale
    require(np.any(kept & (np.abs(undropped - trained) > tolerance)), "attn_dropout_missing", p=p, path=path)

    dropped_rows = 0  # 3. where attn_drop acts
    for t in range(T):
        n = heads * (t + 1)
        rows = B if t == 0 else min(B, ROWS_CHECKED)
        if n > 8:
            break
        # what weight (t, s) of head h adds to proj's output when it is kept: (rows, n, C)
        contributions = np.einsum("chd,bhs,bhsd->bhsc", proj, weights[:rows, :, t, :t + 1],
                                  v[:rows, :, :t + 1], optimize=True).reshape(rows, n, C) * scale
        choices = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(np.float64)  # last: all kept
        predicted = (bias + choices @ contributions) * scale  # (rows, 2^n, C)
        mine = kept[:rows, t, None]
        excess = np.where(mine, np.abs(predicted - trained[:rows, t, None]) - tolerance[:rows, t, None], -np.inf)
        worst = excess.max(axis=-1)  # (rows, 2^n): the worst kept entry of each choice
        seen = mine[:, 0].any(axis=-1)
        unexplained = seen & (worst.min(axis=-1) > 0)
        if unexplained.any():
            b = int(np.argmax(unexplained))
            raise PropertyFailure("attn_dropout_misplaced", p=p, path=path, batch=b, token=t)
        dropped_rows += int((seen & (worst[:, -1] > 0)).sum())
    require(dropped_rows > 0, "attn_dropout_missing", p=p, path=path)


ROWS_CHECKED = 32


def runs_on_device(attempt, device, expected_shapes, fallbacks=()):
    """Run forward with module and inputs on `device`; a tensor made elsewhere fails it.

    The meta device has no data, so code that reads values (an `if torch.all(mask ...)` check,
    .item(), boolean indexing) cannot run there, whatever device it puts its tensors on. Such an
    error is not a device bug: then each of `fallbacks` (the same call with less data-dependent
    input, say without the mask) is tried on meta instead, a device error there still failing,
    and finally the call itself must run on the CPU. Other errors on meta (a tensor made on the
    CPU, .cpu(), .numpy()) fail as before.
    """
    from ..worker.client import SubmissionError

    def shapes_of(reply):
        for what, value, shape in zip(("output", "weights"), reply.outputs, expected_shapes):
            got = value.get("meta_shape") if isinstance(value, dict) else list(getattr(value, "shape", []))
            require(got == list(shape), "shape_mismatch", what=what, expected=list(shape), got=got)
        return reply

    def judged(call):
        """call's reply, or None when it needed data the meta device does not have."""
        try:
            return shapes_of(call(device))
        except SubmissionError as exc:
            if exc.kind != "exception":
                raise
            if not (device == "meta" and meta_limitation(exc.message)):
                where = {"line": exc.line, **({"cell": exc.cell} if exc.cell is not None else {})}
                raise PropertyFailure("wrong_device", device=device, error=exc.message, **where) from None
            return None

    reply = judged(attempt)
    if reply is not None:
        return reply
    for fallback in fallbacks:
        if judged(fallback) is not None:
            break
    return shapes_of(attempt("cpu"))


# What torch says when code needs a meta tensor's values (it has none): data-dependent Python
# control flow (.item(), bool(), float()), data-dependent shapes (nonzero, boolean indexing), an
# operator without a meta kernel. Not "Cannot copy out of meta tensor" (.cpu(), .tolist()) nor
# numpy conversion: .cpu() and .numpy() in forward are device bugs.
META_LIMITATIONS = (
    "cannot be called on meta tensors",
    "data-independent implementation does not exist",
    "no fake impl or Meta kernel registered",
)


def meta_limitation(message):
    return any(text in (message or "") for text in META_LIMITATIONS)


def cuda_available(worker, owner):
    """Whether the worker sees a GPU: then device checks run there too, in fp32 without TF32."""
    if not hasattr(worker, "cuda"):
        worker.cuda = worker.call(owner, "probe")["cuda"]
    return worker.cuda
