"""Correct (an outside writer's): dropout from a flat torch.rand viewed to shape and torch.where;
CausalSelfAttention's attn_drop looped over (batch, head), F.dropout(training=self.training)."""
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
        self.d_k = d_k
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        Q = self.W_Q(x)
        K = self.W_K(x)
        V = self.W_V(x)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        w = torch.softmax(scores, dim=-1)
        return w @ V, w


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
        return x.reshape(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def drop(self, w):
        return self.dropout(w)

    def forward(self, query, key, value, mask=None):
        B = query.shape[0]
        Q = self.split_heads(self.W_Q(query), B)
        K = self.split_heads(self.W_K(key), B)
        V = self.split_heads(self.W_V(value), B)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)
            scores = scores.masked_fill(mask == 0, float("-inf"))
        w = torch.softmax(scores, dim=-1)
        w = self.drop(w)
        ctx = (w @ V).transpose(1, 2).reshape(B, -1, self.d_model)
        return self.W_O(ctx), w


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        C = cfg.n_embd
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        self.register_buffer(
            "mask",
            torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool)).view(
                1, 1, cfg.block_size, cfg.block_size),
            persistent=False,
        )

    def adrop(self, att):
        return self.attn_drop(att)

    def rdrop(self, y):
        return self.resid_drop(y)

    def sdpa(self, q, k, v):
        p = self.attn_drop.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)

    def forward(self, x, fused=False):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.reshape(B, T, self.n_head, hs).transpose(1, 2)
        k = k.reshape(B, T, self.n_head, hs).transpose(1, 2)
        v = v.reshape(B, T, self.n_head, hs).transpose(1, 2)
        if fused:
            y = self.sdpa(q, k, v)
        else:
            att = q @ k.transpose(-2, -1) / math.sqrt(hs)
            m = self.mask[:, :, :T, :T]
            att = att.masked_fill(~m, float("-inf"))
            att = torch.softmax(att, dim=-1)
            att = self.adrop(att)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.rdrop(self.proj(y))

# ---- variant: ok_where_loop ----

def _mha_drop(self, w):
    p = self.dropout.p
    if not self.training or p == 0:
        return w
    # flat draw, then view: torch.where based
    u = torch.rand(w.numel(), device=w.device).view(w.shape)
    return torch.where(u < 1.0 - p, w / (1.0 - p), torch.zeros((), dtype=w.dtype, device=w.device))
MultiHeadAttention.drop = _mha_drop

def _adrop(self, att):
    # per (batch, head) loop, fresh nn.Dropout call each time
    B, h = att.shape[:2]
    rows = [self.attn_drop(att[b, i]) for b in range(B) for i in range(h)]
    return torch.stack(rows).view(B, h, *att.shape[2:])
CausalSelfAttention.adrop = _adrop

def _rdrop(self, y):
    return F.dropout(y, p=self.resid_drop.p, training=self.training)
CausalSelfAttention.rdrop = _rdrop
