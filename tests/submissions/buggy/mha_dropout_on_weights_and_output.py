"""Single mistake (mha_dropout_on_weights_and_output): self.dropout on the weights, as it should, and again on W_O's output (an outside writer's): told to multiply V by the dropped weights, which it did."""
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
        weights = torch.softmax(scores, dim=-1)
        out = weights @ V
        return out, weights


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
        x = x.reshape(batch_size, -1, self.num_heads, self.d_k)
        return x.transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        B = query.size(0)
        Q = self.split_heads(self.W_Q(query), B)
        K = self.split_heads(self.W_K(key), B)
        V = self.split_heads(self.W_V(value), B)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        weights = self.dropout(weights)
        ctx = weights @ V
        ctx = ctx.transpose(1, 2).contiguous().view(B, -1, self.d_model)
        return self.dropout(self.W_O(ctx)), weights


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
        self.register_buffer(
            "mask",
            torch.tril(torch.ones(bs, bs, dtype=torch.bool)).view(1, 1, bs, bs),
            persistent=False,
        )

    def forward(self, x, fused=False):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.reshape(B, T, self.n_head, hs).transpose(1, 2)
        k = k.reshape(B, T, self.n_head, hs).transpose(1, 2)
        v = v.reshape(B, T, self.n_head, hs).transpose(1, 2)
        if fused:
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=True,
                dropout_p=self.attn_drop.p if self.training else 0.0,
            )
        else:
            att = q @ k.transpose(-2, -1) / math.sqrt(hs)
            m = self.mask[:, :, :T, :T]
            att = att.masked_fill(~m, float("-inf"))
            att = torch.softmax(att, dim=-1)
            att = self.attn_drop(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))
