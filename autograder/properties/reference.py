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
