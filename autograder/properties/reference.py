"""Float64 numpy references for the three classes, computed from the parameters the grader loaded.

numpy instead of torch keeps the trusted process free of torch (faster start, less memory) and
means the reference cannot be affected by anything the submission does to torch in the worker.
"""
import numpy as np


def softmax(scores):
    shifted = scores - scores.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def attention(q, k, v, mask=None):
    """Scaled dot-product attention on (..., T, d) arrays; mask == 0 means 'may not attend'."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(np.broadcast_to(mask, scores.shape) == 0, -np.inf, scores)
    weights = softmax(scores)
    return weights @ v, weights


def linear(x, params, name):
    out = x @ params[f"{name}.weight"].T
    bias = params.get(f"{name}.bias")
    return out if bias is None else out + bias


def split_heads(x, heads):
    batch, time, width = x.shape
    return x.reshape(batch, time, heads, width // heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    batch, heads, time, width = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, time, heads * width)


def self_attention(params, x, mask=None):
    q, k, v = (linear(x, params, name) for name in ("W_Q", "W_K", "W_V"))
    return attention(q, k, v, mask)


def multi_head_attention(params, heads, query, key, value, mask=None):
    q, k, v = (split_heads(linear(t, params, n), heads)
               for t, n in ((query, "W_Q"), (key, "W_K"), (value, "W_V")))
    if mask is not None and mask.ndim == 3:
        mask = mask[:, None]
    context, weights = attention(q, k, v, mask)
    return linear(merge_heads(context), params, "W_O"), weights


def multi_head_output_from_weights(params, heads, value, weights):
    """MultiHeadAttention's output computed from given attention weights (B,h,Tq,Tk), say the ones
    a module returned in train mode: W_O(merge(weights @ V))."""
    v = split_heads(linear(value, params, "W_V"), heads)
    return linear(merge_heads(weights @ v), params, "W_O")


def causal_attention(params, heads, x):
    """CausalSelfAttention's attention weights (B,h,T,T) and values (B,h,T,hs)."""
    width = x.shape[-1]
    qkv = linear(x, params, "qkv")
    q, k, v = (split_heads(qkv[..., i * width:(i + 1) * width], heads) for i in range(3))
    time = x.shape[1]
    _, weights = attention(q, k, v, np.tril(np.ones((time, time))))
    return weights, v


def causal_self_attention(params, heads, x):
    weights, v = causal_attention(params, heads, x)
    return linear(merge_heads(weights @ v), params, "proj")


def unscaled_scores(q, k):
    """q·k for every pair, without the 1/sqrt(d_k): what the scale fit regresses against."""
    return q @ np.swapaxes(k, -1, -2)


# ---- float32 rounding bounds -------------------------------------------------------------------
# A correct module computes in float32 (or better), in any order of operations: einsum, baddbmm,
# SDPA, a loop over heads, float64 inside. Its result differs from the float64 reference by
# rounding alone, by at most what the functions below bound, entry by entry: each value is carried
# with a bound on its error, propagated through every operation with the classic worst-case bound
# γ(n) = n·u on a sum of n products (u = 2⁻²⁴, float32's unit roundoff). The bound grows with the
# inputs' magnitude as the rounding does (scale 30 gives scores in the thousands, where float32
# leaves errors of ~1e-3), and holds whatever the summation order.
UNIT_ROUNDOFF = 2.0 ** -24


def _gamma(n):
    return n * UNIT_ROUNDOFF


def linear_bounded(x, error, params, name):
    """linear(), and a bound on a float32 module's error in it given `error` on x."""
    weight = np.abs(params[f"{name}.weight"])
    bias = params.get(f"{name}.bias")
    magnitude = np.abs(x) @ weight.T + (0.0 if bias is None else np.abs(bias))
    return linear(x, params, name), error @ weight.T + _gamma(weight.shape[-1] + 1) * magnitude


def scores_bounded(q, eq, k, ek):
    """The scaled scores q·k/√d, and a bound on a float32 module's error in them given bounds on q and k."""
    d = q.shape[-1]
    qa, ka = np.abs(q), np.abs(k)
    kt = lambda a: np.swapaxes(a, -1, -2)  # noqa: E731
    return q @ kt(k) / np.sqrt(d), (eq @ kt(ka) + qa @ kt(ek) + _gamma(d + 3) * (qa @ kt(ka))) / np.sqrt(d)


def attention_bounded(q, eq, k, ek, v, ev, mask=None):
    """attention() with bounds: (output, weights, output's bound, weights' bound), given bounds on
    q, k and v. Scores are off by at most es; a softmax weight w_ij then by at most
    w_ij·(es_ij + Σ_k w_ik·es_ik) plus its own rounding; masked weights are exactly 0 either way."""
    time = k.shape[-2]
    out, weights = attention(q, k, v, mask)
    _, es = scores_bounded(q, eq, k, ek)
    if mask is not None:
        es = np.where(np.broadcast_to(mask, es.shape) == 0, 0.0, es)
    ew = weights * (es + (weights * es).sum(axis=-1, keepdims=True) + _gamma(time + 6))
    eo = ew @ np.abs(v) + weights @ ev + _gamma(time + 2) * (weights @ np.abs(v))
    return out, weights, eo, ew


def self_attention_bounded(params, x, mask=None):
    """self_attention() with its bounds: (output, weights, output's bound, weights' bound)."""
    (q, eq), (k, ek), (v, ev) = (linear_bounded(x, np.zeros_like(x), params, n) for n in ("W_Q", "W_K", "W_V"))
    return attention_bounded(q, eq, k, ek, v, ev, mask)


def head_mask(mask):
    """A MultiHeadAttention mask as it broadcasts against (B, h, Tq, Tk): a 3-D mask is (B, Tq, Tk)
    (or (1, Tq, Tk)), the same for every head; 2-D and 4-D masks broadcast as they are."""
    return mask[:, None] if mask is not None and mask.ndim == 3 else mask


def multi_head_attention_bounded(params, heads, query, key, value, mask=None):
    """multi_head_attention() with its bounds: (output, weights, output's bound, weights' bound)."""
    projected = [linear_bounded(t, np.zeros_like(t), params, n)
                 for t, n in ((query, "W_Q"), (key, "W_K"), (value, "W_V"))]
    (q, eq), (k, ek), (v, ev) = ((split_heads(t, heads), split_heads(e, heads)) for t, e in projected)
    context, weights, econtext, eweights = attention_bounded(q, eq, k, ek, v, ev, head_mask(mask))
    out, eout = linear_bounded(merge_heads(context), merge_heads(econtext), params, "W_O")
    return out, weights, eout, eweights


def causal_self_attention_bounded(params, heads, x):
    """causal_self_attention() with its bound: (output, output's bound)."""
    width, time = x.shape[-1], x.shape[1]
    qkv, eqkv = linear_bounded(x, np.zeros_like(x), params, "qkv")
    (q, eq), (k, ek), (v, ev) = ((split_heads(qkv[..., i * width:(i + 1) * width], heads),
                                  split_heads(eqkv[..., i * width:(i + 1) * width], heads)) for i in range(3))
    context, _, econtext, _ = attention_bounded(q, eq, k, ek, v, ev, np.tril(np.ones((time, time))))
    return linear_bounded(merge_heads(context), merge_heads(econtext), params, "proj")


# ---- where the softmax is an argmax ------------------------------------------------------------
# At large magnitudes most rows of scores have one allowed score above all others by far more than
# any rounding: there every correct module puts all the row's weight on it, however it computes.
DECIDED_GAP = 40.0  # e^-40: the weight left for the other positions of a decided row


def decided(scores, bound, mask=None):
    """(winner index, decided) per row of `scores` (..., Tq, Tk): the best allowed position, and
    whether it beats the next one by DECIDED_GAP more than both their rounding bounds."""
    if mask is not None:
        scores = np.where(np.broadcast_to(mask, scores.shape) == 0, -np.inf, scores)
    order = np.argsort(scores, axis=-1)
    winner = order[..., -1]
    top = np.take_along_axis(scores, order[..., -1:], -1)[..., 0]
    top_bound = np.take_along_axis(bound, order[..., -1:], -1)[..., 0]
    if scores.shape[-1] < 2:
        return winner, np.ones(winner.shape, bool)
    second = np.take_along_axis(scores, order[..., -2:-1], -1)[..., 0]
    second_bound = np.where(np.isfinite(second), np.take_along_axis(bound, order[..., -2:-1], -1)[..., 0], 0.0)
    with np.errstate(invalid="ignore"):
        return winner, (top - second) - top_bound - second_bound > DECIDED_GAP


def self_attention_scores_bounded(params, x):
    """SelfAttention's scaled scores (B,T,T) and their float32 bound."""
    (q, eq), (k, ek) = (linear_bounded(x, np.zeros_like(x), params, n) for n in ("W_Q", "W_K"))
    return scores_bounded(q, eq, k, ek)


def multi_head_scores_bounded(params, heads, query, key):
    """MultiHeadAttention's scaled scores (B,h,Tq,Tk) and their float32 bound."""
    (q, eq), (k, ek) = ((split_heads(t, heads), split_heads(e, heads))
                        for t, e in (linear_bounded(a, np.zeros_like(a), params, n) for a, n in ((query, "W_Q"), (key, "W_K"))))
    return scores_bounded(q, eq, k, ek)


def self_attention_decided(params, x, mask=None):
    """SelfAttention where the softmax is an argmax: (output, its float32 bound, rows (B,T) decided).
    There the output is the winner's value."""
    (q, eq), (k, ek), (v, ev) = (linear_bounded(x, np.zeros_like(x), params, n) for n in ("W_Q", "W_K", "W_V"))
    winner, sure = decided(*scores_bounded(q, eq, k, ek), mask)
    pick = lambda a: np.take_along_axis(a, winner[..., None], -2)  # noqa: E731  (B,T,d_k): the winner's row
    return pick(v), pick(ev), sure


def multi_head_decided(params, heads, query, key, value, mask=None):
    """MultiHeadAttention where the softmax is an argmax in every head: (output, its float32 bound,
    rows (B,Tq) where every head's row is decided). There a head's context is its winner's value."""
    (q, eq), (k, ek), (v, ev) = ((split_heads(t, heads), split_heads(e, heads)) for t, e in (
        linear_bounded(x, np.zeros_like(x), params, n) for x, n in ((query, "W_Q"), (key, "W_K"), (value, "W_V"))))
    winner, sure = decided(*scores_bounded(q, eq, k, ek), head_mask(mask))
    pick = lambda a: np.take_along_axis(a, winner[..., None], -2)  # noqa: E731  (B,h,Tq,hs): the winner's row
    out, bound = linear_bounded(merge_heads(pick(v)), merge_heads(pick(ev)), params, "W_O")
    return out, bound, sure.all(axis=1)


def causal_decided(params, heads, x):
    """CausalSelfAttention where the softmax is an argmax in every head: (output, its float32 bound,
    rows (B,T) where every head's row is decided). There a head's context is its winner's value."""
    width, time = x.shape[-1], x.shape[1]
    qkv, eqkv = linear_bounded(x, np.zeros_like(x), params, "qkv")
    (q, eq), (k, ek), (v, ev) = ((split_heads(qkv[..., i * width:(i + 1) * width], heads),
                                  split_heads(eqkv[..., i * width:(i + 1) * width], heads)) for i in range(3))
    winner, sure = decided(*scores_bounded(q, eq, k, ek), np.tril(np.ones((time, time))))
    pick = lambda a: np.take_along_axis(a, winner[..., None], -2)  # noqa: E731  (B,h,T,hs): the winner's row
    out, bound = linear_bounded(merge_heads(pick(v)), merge_heads(pick(ev)), params, "proj")
    return out, bound, sure.all(axis=1)
