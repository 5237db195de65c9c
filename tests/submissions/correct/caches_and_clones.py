"""Correct submission that keeps harmless state and uses in-place operations only on its own
tensors: a cache of causal masks per length and device (each built from the inputs' length, never
from an earlier call's, and never under torch.inference_mode(), whose tensors autograd cannot save
later), clones of the inputs before changing them in place, masks turned into booleans with != 0
and torch.where (must keep full marks)."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Cfg:
    n_embd: int = 32
    n_head: int = 4
    block_size: int = 16
    dropout: float = 0.0


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None):
        super().__init__()
        d_k = d_k or d_model
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        x = x.clone()
        x.mul_(1.0)  # in place, on our own copy: the caller's x is untouched
        Q, K, V = self.W_Q(x), self.W_K(x), self.W_V(x)
        scores = Q @ K.transpose(-2, -1)
        scores.div_(math.sqrt(self.d_k))
        if mask is not None:
            allowed = mask.clone()
            allowed.ne_(0)  # in place on the clone: 1 where allowed, whatever the dtype
            scores = torch.where(allowed.bool(), scores, torch.full_like(scores, float("-inf")))
        weights = torch.softmax(scores, dim=-1)
        return weights @ V, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.1):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError("d_model must be divisible by num_heads")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.W_Q = nn.Linear(d_model, d_model, bias=False)
        self.W_K = nn.Linear(d_model, d_model, bias=False)
        self.W_V = nn.Linear(d_model, d_model, bias=False)
        self.W_O = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.calls = 0  # harmless state: counted, never used in the result

    def split_heads(self, x, batch_size):
        return x.reshape(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        self.calls += 1
        B = query.size(0)
        Q = self.split_heads(self.W_Q(query), B)
        K = self.split_heads(self.W_K(key), B)
        V = self.split_heads(self.W_V(value), B)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            mask = mask.clone()
            if mask.dim() == 3:
                mask.unsqueeze_(1)  # in place, on the clone
            scores.masked_fill_(mask == 0, float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        context = (weights @ V).transpose(1, 2).reshape(B, -1, self.d_model)
        return self.W_O(context), weights


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        bs = cfg.block_size
        self.register_buffer("mask", torch.tril(torch.ones(bs, bs, dtype=torch.bool)).view(1, 1, bs, bs),
                             persistent=False)
        self._forbidden = {}  # (T, device) -> where the future is, built once per length

    def _future(self, T, device):
        if torch.is_inference_mode_enabled():  # an inference tensor kept would break training later
            return ~self.mask[:, :, :T, :T]
        key = (T, str(device))
        if key not in self._forbidden:
            self._forbidden[key] = ~self.mask[:, :, :T, :T]
        return self._forbidden[key]

    def forward(self, x, fused=False):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = (t.reshape(B, T, self.n_head, hs).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        if fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(self._future(T, x.device), float("-inf"))
            y = self.attn_drop(F.softmax(att, dim=-1)) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.resid_drop(self.proj(y))
