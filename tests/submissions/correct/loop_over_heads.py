"""Correct submission that loops over heads explicitly (must keep full marks)."""
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
        d_k = d_model if d_k is None else d_k
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        Q, K, V = self.W_Q(x), self.W_K(x), self.W_V(x)
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.matmul(weights, V), weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.1):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.W_Q = nn.Linear(d_model, d_model, bias=False)
        self.W_K = nn.Linear(d_model, d_model, bias=False)
        self.W_V = nn.Linear(d_model, d_model, bias=False)
        self.W_O = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x, batch_size):
        heads = [x[..., i * self.d_k:(i + 1) * self.d_k] for i in range(self.num_heads)]
        return torch.stack(heads, dim=1).reshape(batch_size, self.num_heads, -1, self.d_k)

    def forward(self, query, key, value, mask=None):
        Q, K, V = self.W_Q(query), self.W_K(key), self.W_V(value)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # (B, 1, Tq, Tk): the same mask for every head
        contexts, weights = [], []
        for i in range(self.num_heads):
            sl = slice(i * self.d_k, (i + 1) * self.d_k)
            q, k, v = Q[..., sl], K[..., sl], V[..., sl]
            s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
            if mask is not None:
                m = mask
                if m.dim() == 4:
                    m = m[:, i] if m.size(1) > 1 else m[:, 0]
                s = s.masked_fill(m == 0, float("-inf"))
            w = self.dropout(F.softmax(s, dim=-1))
            contexts.append(w @ v)
            weights.append(w)
        context = torch.cat(contexts, dim=-1)  # heads back side by side: (B, Tq, d_model)
        return self.W_O(context), torch.stack(weights, dim=1)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
        self.register_buffer("mask", mask[None, None], persistent=False)

    def forward(self, x, fused=False):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        p = self.attn_drop.p if self.training else 0.0
        ys = []
        for i in range(self.n_head):
            sl = slice(i * hs, (i + 1) * hs)
            qi, ki, vi = q[..., sl], k[..., sl], v[..., sl]  # (B, T, hs)
            if fused:
                yi = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, dropout_p=p)
            else:
                att = qi @ ki.transpose(-2, -1) / math.sqrt(hs)
                att = att.masked_fill(~self.mask[0, :, :T, :T], float("-inf"))
                yi = self.attn_drop(F.softmax(att, dim=-1)) @ vi
            ys.append(yi)
        y = torch.cat(ys, dim=-1)
        return self.resid_drop(self.proj(y))
