"""Los puntajes, el softmax y los pesos se calculan en float64 y los pesos se devuelven así,
en float64 (la forma pedida, (B, T, T) / (B, h, Tq, Tk)); la salida vuelve al dtype de x."""
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


def precise_attention(q, k, v, mask=None, drop=None):
    q64, k64, v64 = q.double(), k.double(), v.double()
    s = torch.matmul(q64, k64.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask == 0, float("-inf"))
    w = torch.softmax(s, dim=-1)
    if drop is not None:
        w = drop(w)
    return torch.matmul(w, v64).to(v.dtype), w


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None):
        super().__init__()
        d_k = d_k or d_model
        self.d_k = d_k
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        return precise_attention(self.W_Q(x), self.W_K(x), self.W_V(x), mask)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.1):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError("d_model no es divisible por num_heads")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.W_Q = nn.Linear(d_model, d_model, bias=False)
        self.W_K = nn.Linear(d_model, d_model, bias=False)
        self.W_V = nn.Linear(d_model, d_model, bias=False)
        self.W_O = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x, batch_size):
        return x.unflatten(-1, (self.num_heads, self.d_k)).movedim(2, 1).reshape(
            batch_size, self.num_heads, -1, self.d_k)

    def forward(self, query, key, value, mask=None):
        B = query.shape[0]
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        y, w = precise_attention(self.split_heads(self.W_Q(query), B), self.split_heads(self.W_K(key), B),
                                 self.split_heads(self.W_V(value), B), mask, self.dropout)
        return self.W_O(y.movedim(1, 2).flatten(2)), w


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
        n = cfg.block_size
        self.register_buffer("mask", torch.tril(torch.ones(n, n, dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)

    def forward(self, x, fused=False):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.unflatten(-1, (self.n_head, -1)).movedim(2, 1) for t in (q, k, v))
        if fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            y, _ = precise_attention(q, k, v, self.mask[:, :, :T, :T], self.attn_drop)
        return self.resid_drop(self.proj(y.movedim(1, 2).flatten(2)))
