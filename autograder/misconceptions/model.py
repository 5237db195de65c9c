"""Float64 numpy attention with one switch per way of getting it wrong.

`self_attention`, `multi_head_attention` and `causal_self_attention` take the arguments of
autograder/properties/reference.py's functions of the same name (the parameters as the grader
loaded them, float64, under the module's own names: W_Q.weight, ..., qkv.weight, qkv.bias,
proj.weight, proj.bias) plus keyword switches. With every switch at its default they compute
what the reference computes (tests/test_misconceptions.py checks it); each misconception of the
catalog is one or two switches away from that.

Dropout. The reference has no train mode; here a module's dropout is described by the keep
masks it drew, given as `drop` (0/1 arrays, 1 = kept): drop["weights"] for the attention weights
(or the scores, for a module that drops scores), (B, h, Tq, Tk) or (B, T, T); drop["output"] for
the output, (B, T, C) (CausalSelfAttention's resid_drop, or a dropout misplaced on the output).
A dropout with rate p keeps x·mask/(1-p). `train` says whether the module is in train mode and `p`
is the rate it was built with. Where a computation needs masks that were not given, ValueError.
"""
from __future__ import annotations

import math

import numpy as np

from ..properties import reference

SCALES = ("sqrt_d_k", "none", "d_k", "sqrt_d_model", "isqrt_d_k", "sqrt_keys")


def softmax(scores, axis=-1):
    """Softmax along `axis` (reference.softmax is the axis=-1 case); a slice of -inf only is NaN, as in torch."""
    with np.errstate(invalid="ignore"):
        shifted = scores - scores.max(axis=axis, keepdims=True)
        exp = np.exp(shifted)
        return exp / exp.sum(axis=axis, keepdims=True)


def scale_factor(kind, d_k, d_model, keys):
    """What the scores are multiplied by: 1/√d_k (correct), 1 (none), 1/d_k, 1/√d_model, 1 over
    the integer square root of d_k (math.isqrt: right only where d_k is a square), 1/√(the number
    of keys) (the sequence's length, read off K's shape)."""
    if kind == "sqrt_d_k":
        return 1.0 / np.sqrt(d_k)
    if kind == "none":
        return 1.0
    if kind == "d_k":
        return 1.0 / d_k
    if kind == "sqrt_d_model":
        return 1.0 / np.sqrt(d_model)
    if kind == "isqrt_d_k":
        return 1.0 / math.isqrt(d_k)
    if kind == "sqrt_keys":
        return 1.0 / np.sqrt(keys)
    raise ValueError(f"unknown scale {kind!r}: one of {SCALES}")


def dropout(x, where, drop, p):
    """x with the dropout whose keep mask is drop[where] at rate p (identity for p == 0)."""
    if p == 0:
        return x
    if drop is None or where not in drop:
        raise ValueError(f"this computation applies dropout to the {where} (p={p}): give drop[{where!r}], "
                         "the 0/1 keep mask the module drew")
    keep = np.asarray(drop[where])
    if keep.shape != np.shape(x):  # read off a module's output of another shape: broadcast, it could be GBs
        raise ValueError(f"the keep mask for the {where} has shape {keep.shape}, not {np.shape(x)}")
    return x * keep.astype(np.float64) / (1.0 - p)


def attend(q, k, v, mask=None, *, scale=None, fill=-np.inf, mask_blocks=0, mask_after_softmax=False,
           softmax_axis=-1, swap_qk=False, no_softmax=False, drop_scores=None, drop_weights=None,
           output_from_undropped=False, weights_transposed=False):
    """(output, weights) of attention on (..., T, d) arrays; a switch for each way of getting it wrong.

    scale: the factor on q·k (default 1/√d); fill: what masked scores become; mask_blocks: the
    mask value that blocks (0 correct, 1 inverted); mask_after_softmax: zero the masked weights
    after the softmax instead (no renormalisation); softmax_axis: -1 (keys, correct) or -2;
    swap_qk: scores k·qᵀ; no_softmax: the scaled, masked scores are the weights; drop_scores /
    drop_weights: a function applied to the scores before the softmax / to the weights after it;
    output_from_undropped: the output uses the weights before drop_weights (returned: after);
    weights_transposed: the weights returned are transposed (the output is right).
    """
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = (k @ np.swapaxes(q, -1, -2) if swap_qk else q @ np.swapaxes(k, -1, -2)) * scale
    blocked = None
    if mask is not None:  # as torch's out-of-place masked_fill: scores and mask broadcast together
        shape = np.broadcast_shapes(np.shape(mask), scores.shape)
        blocked = np.broadcast_to(mask, shape) == mask_blocks
        scores = np.broadcast_to(scores, shape)
    if blocked is not None and not mask_after_softmax:
        scores = np.where(blocked, fill, scores)
    if drop_scores is not None:
        with np.errstate(invalid="ignore"):
            scores = drop_scores(scores)
    weights = scores if no_softmax else softmax(scores, softmax_axis)
    if blocked is not None and mask_after_softmax:
        weights = np.where(blocked, 0.0, weights)
    used = weights
    if drop_weights is not None:
        weights = drop_weights(weights)
        used = used if output_from_undropped else weights
    with np.errstate(invalid="ignore", over="ignore"):
        return used @ v, np.swapaxes(weights, -1, -2) if weights_transposed else weights


def self_attention(params, x, mask=None, *, scale="sqrt_d_k", value_from_key=False, **switches):
    """SelfAttention.forward(x, mask) -> (output (B,T,d_k), weights (B,T,T)).

    scale: one of SCALES; value_from_key: the output is weights @ K; further switches: attend's."""
    q, k, v = (reference.linear(x, params, name) for name in ("W_Q", "W_K", "W_V"))
    factor = scale_factor(scale, q.shape[-1], x.shape[-1], k.shape[-2])
    return attend(q, k, k if value_from_key else v, mask, scale=factor, **switches)


def multi_head_attention(params, heads, query, key, value, mask=None, *, train=False, p=0.0, drop=None,
                         scale="sqrt_d_k", key_value_swapped=False, value_from_key=False,
                         split_transpose=True, merge_transpose=True, output_projection=True,
                         mask_head_axis=True, dropout_at="weights", dropout_in_eval=False,
                         dropout_rate=None, projections_transposed=False, **switches):
    """MultiHeadAttention.forward(query, key, value, mask) -> (output (B,Tq,d), weights (B,h,Tq,Tk)).

    key_value_swapped: K from `value`, V from `key`; value_from_key: V from `key`;
    split_transpose / merge_transpose: False splits (B,T,d) straight into (B,h,T,d_k), or merges
    (B,h,T,d_k) straight into (B,T,d), without the transpose; output_projection: False returns the
    merged heads without W_O; mask_head_axis: False leaves a (B,Tq,Tk) mask without the head axis
    (it then broadcasts against (h,Tq,Tk)); dropout_at: "weights" (correct), "none", "scores"
    (before the softmax), "output" (after W_O) or "undropped_output" (weights dropped, output
    from the weights before dropout); dropout_in_eval: dropout acts in eval too; dropout_rate: the
    rate the module actually uses, when it ignores p (say a hard-coded 0.1); projections_transposed:
    Q, K and V as x @ W.weight (the weight itself, not its transpose as nn.Linear applies it)."""
    d_model = query.shape[-1]
    d_k = d_model // heads
    rate = p if dropout_rate is None else dropout_rate
    active = (train or dropout_in_eval) and dropout_at != "none"
    rate = rate if active else 0.0

    def split(x):
        batch, time, _ = x.shape
        if split_transpose:
            return reference.split_heads(x, heads)
        return x.reshape(batch, heads, time, d_k)

    k_source, v_source = (value, key) if key_value_swapped else (key, key if value_from_key else value)
    def project(x, name):
        return x @ params[f"{name}.weight"] if projections_transposed else reference.linear(x, params, name)

    q, k, v = split(project(query, "W_Q")), split(project(k_source, "W_K")), split(project(v_source, "W_V"))
    if mask is not None and np.ndim(mask) == 3 and mask_head_axis:
        mask = np.asarray(mask)[:, None]

    def drop_weights(a):
        return dropout(a, "weights", drop, rate)

    context, weights = attend(q, k, v, mask, scale=scale_factor(scale, d_k, d_model, k.shape[-2]),
                              drop_scores=drop_weights if dropout_at == "scores" else None,
                              drop_weights=drop_weights if dropout_at in ("weights", "undropped_output") else None,
                              output_from_undropped=dropout_at == "undropped_output", **switches)
    # as the module's .view(batch_size, -1, d_model): a mask that broadcast the heads against the
    # batch (mask_head_axis=False with h = 1) makes more "tokens", not an error
    batch = query.shape[0]
    merged = (context.transpose(0, 2, 1, 3) if merge_transpose else context).reshape(batch, -1, d_model)
    output = reference.linear(merged, params, "W_O") if output_projection else merged
    if dropout_at == "output":
        output = dropout(output, "output", drop, rate)
    return output, weights


def causal_self_attention(params, heads, x, *, block_size=None, fused=False, train=False, p=0.0, drop=None,
                          scale="sqrt_d_k", order="qkv", heads_transpose=True, merge_transpose=True,
                          tril_diagonal=0, mask_rows="first", mask_blocks=0, attn_drop="weights",
                          attn_drop_in_eval=False, resid_drop="after_proj", fused_is_causal=True,
                          fused_dropout="train", **switches):
    """CausalSelfAttention.forward(x, fused) -> (B,T,C), for the module built with `block_size`
    (default T) and dropout rate p.

    order: the order in which q, k, v are split from qkv ("qkv" correct, "kqv"...); heads_transpose
    / merge_transpose: False reshapes (B,T,C) straight into (B,h,T,hs) or back, without the
    transpose; the explicit path (fused=False): scale (one of SCALES, of the head size),
    tril_diagonal (the causal mask is tril(..., diagonal): 1 lets a token see the next one, -1
    hides the token from itself, one past block_size masks nothing), mask_rows ("first": mask[:T, :T], correct; "last": mask[-T:, :T]),
    mask_blocks (True blocks: the mask without ~), attn_drop ("weights" or "none"),
    attn_drop_in_eval, and attend's switches (fill, mask_after_softmax, softmax_axis...); the fused
    path: fused_is_causal (False: SDPA without is_causal), fused_dropout ("train" correct, "always":
    dropout_p in eval too, "never"); both: resid_drop ("after_proj" correct, "none", "before_proj").
    """
    batch, time, width = x.shape
    block_size = time if block_size is None else block_size
    hs = width // heads
    qkv = reference.linear(x, params, "qkv")
    parts = dict(zip(order, (qkv[..., i * width:(i + 1) * width] for i in range(3))))

    def split(t):
        if heads_transpose:
            return reference.split_heads(t, heads)
        return t.reshape(batch, heads, time, hs)

    q, k, v = (split(parts[name]) for name in "qkv")
    if fused:
        rate = p if (fused_dropout == "always" or (fused_dropout == "train" and train)) else 0.0
        mask = np.tril(np.ones((time, time))) if fused_is_causal else None
        y, _ = attend(q, k, v, mask, drop_weights=lambda a: dropout(a, "weights", drop, rate))
    else:
        full = np.tril(np.ones((block_size, block_size), bool), tril_diagonal)
        rows = full[:time, :time] if mask_rows == "first" else full[block_size - time:, :time]
        if rows.shape != (time, time):
            raise ValueError(f"the mask rows {mask_rows} of block_size {block_size} do not fit T={time}")
        # mask_blocks=0: False (the future) blocks; 1: True (the past and the token itself) blocks
        rate = p if attn_drop == "weights" and (train or attn_drop_in_eval) else 0.0
        y, _ = attend(q, k, v, rows.astype(np.float64), scale=scale_factor(scale, hs, width, k.shape[-2]), mask_blocks=mask_blocks,
                      drop_weights=lambda a: dropout(a, "weights", drop, rate), **switches)
    merged = reference.merge_heads(y) if merge_transpose else y.reshape(batch, time, width)
    rate = p if train else 0.0
    if resid_drop == "before_proj":
        merged = dropout(merged, "output", drop, rate)
    output = reference.linear(merged, params, "proj")
    if resid_drop == "after_proj":
        output = dropout(output, "output", drop, rate)
    return output
