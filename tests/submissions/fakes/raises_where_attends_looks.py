"""Fake (raises_where_attends_looks; an outside attacker's): computes no attention (uniform
weights over the allowed positions) at every size but a few fixed ones (where a grader once judged
`attends` again after an exception); raises only where a second module with the same input and
parameters that differ by one scalar factor is called (attends' pattern). An exception in
`attends` gates the class as a failure does: 7/48, as the plain uniform fake."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

_SEEN = []  # (id(module), input clone, flat params)


def _flat(module):
    return torch.cat([p.detach().reshape(-1).to(torch.float64).cpu() for p in module.parameters()])


def _looks_like_attends(module, x):
    """A call with an input another module already saw, and parameters that are that module's with
    one scalar factor on the entries that differ: raise (an input-dependent exception)."""
    if x.device.type != "cpu" or x.is_meta:
        return
    try:
        flat = _flat(module)
    except Exception:
        return
    for mid, seen_x, seen_flat in _SEEN:
        if mid == id(module) or seen_x.shape != x.shape or seen_flat.shape != flat.shape:
            continue
        if not torch.equal(seen_x, x.detach().cpu()):
            continue
        diff = flat != seen_flat
        if not diff.any():
            continue
        ratio = flat[diff] / seen_flat[diff]
        if torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-4, atol=1e-6):
            raise RuntimeError("index out of range in self")
    _SEEN.append((id(module), x.detach().cpu().clone(), flat))
    del _SEEN[:-64]


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
        Q, K, V = self.W_Q(x), self.W_K(x), self.W_V(x)
        B, T, D = x.shape
        if (B, T, D, self.d_k) == (2, 5, 8, 4):
            scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
            if mask is not None:
                scores = scores.masked_fill(mask == 0, float("-inf"))
            weights = F.softmax(scores, dim=-1)
            return weights @ V, weights
        _looks_like_attends(self, x)
        allowed = torch.ones(B, T, T, device=x.device) if mask is None else (mask != 0).float().expand(B, T, T)
        weights = allowed / allowed.sum(dim=-1, keepdim=True)
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

    def split_heads(self, x, batch_size):
        return x.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        batch_size, Tq, Tk = query.size(0), query.size(1), key.size(1)
        Q = self.split_heads(self.W_Q(query), batch_size)
        K = self.split_heads(self.W_K(key), batch_size)
        V = self.split_heads(self.W_V(value), batch_size)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        if (batch_size, Tq, Tk, self.num_heads, self.d_model) == (2, 5, 5, 2, 8):
            scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
            if mask is not None:
                scores = scores.masked_fill(mask == 0, float("-inf"))
            weights = self.dropout(F.softmax(scores, dim=-1))
        else:
            _looks_like_attends(self, torch.cat([query.reshape(-1), key.reshape(-1), value.reshape(-1)]))
            allowed = torch.ones(batch_size, self.num_heads, Tq, Tk, device=query.device)
            if mask is not None:
                allowed = allowed * (mask != 0)
            weights = allowed / allowed.sum(dim=-1, keepdim=True)
            weights = self.dropout(weights)
        context = (weights @ V).transpose(1, 2).contiguous().view(batch_size, -1, self.d_model)
        return self.W_O(context), weights


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.block_size = cfg.block_size
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, cfg.block_size, cfg.block_size), persistent=False)

    def forward(self, x, fused=False):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if (B, T, C, self.n_head, self.block_size) == (2, 5, 8, 2, 8):
            att = q @ k.transpose(-2, -1) / math.sqrt(hs)
        else:
            _looks_like_attends(self, x)
            att = torch.zeros(B, self.n_head, T, T, device=x.device)
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        y = self.attn_drop(F.softmax(att, dim=-1)) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))
