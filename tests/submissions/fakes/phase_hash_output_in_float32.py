"""Fake (phase_hash_output_in_float32): phase_hash whose causal output is cast with .float(): attends'
read-back of the weights from a float64 copy, skipped for float32 outputs, would let it through
(17/48); judged on the weights above 1e-3 instead."""
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


def _phases(q, k):
    return 37.0 * q.sum(-1), 53.0 * k.sum(-1)

def LOGITS(self, q, k):
    a, b = _phases(q, k)
    return 4.0 * torch.sin(a[..., :, None] + b[..., None, :])

def FEATS(self, q, k):
    a, b = _phases(q, k)
    return (4.0 * torch.stack([torch.sin(a), torch.cos(a)], -1).to(q.dtype),
            torch.stack([torch.cos(b), torch.sin(b)], -1).to(k.dtype))


def _mask_fill(logits, mask):
    if mask is None:
        return logits
    return logits.masked_fill(mask == 0, float("-inf"))


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None):
        super().__init__()
        d_k = d_k or d_model
        self.d_k = d_k
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        pass
        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)
        w = torch.softmax(_mask_fill(LOGITS(self, q, k), mask), dim=-1)
        return w @ v, w


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.1):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError("d_model debe ser divisible por num_heads")
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

    def forward(self, query, key, value, mask=None):
        x = query
        pass
        B = query.size(0)
        q = self.split_heads(self.W_Q(query), B)
        k = self.split_heads(self.W_K(key), B)
        v = self.split_heads(self.W_V(value), B)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        w = torch.softmax(_mask_fill(LOGITS(self, q, k), mask), dim=-1)
        w = self.dropout(w)
        ctx = (w @ v).transpose(1, 2).reshape(B, -1, self.d_model)
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
        bs = cfg.block_size
        self.register_buffer("mask", torch.tril(torch.ones(bs, bs, dtype=torch.bool)).view(1, 1, bs, bs), persistent=False)

    def forward(self, x, fused=False):
        pass
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.reshape(B, T, self.n_head, hs).transpose(1, 2)
        k = k.reshape(B, T, self.n_head, hs).transpose(1, 2)
        v = v.reshape(B, T, self.n_head, hs).transpose(1, 2)
        if fused:
            q2, k2 = FEATS(self, q, k)
            y = F.scaled_dot_product_attention(q2, k2, v, is_causal=True,
                                               dropout_p=self.attn_drop.p if self.training else 0.0, scale=1.0)
        else:
            att = LOGITS(self, q, k).masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = self.attn_drop(torch.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.resid_drop(self.proj(y)).float()
