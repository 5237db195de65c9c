"""Correct submission (from an outside round) that runs forward inside its own `with` block which sets
torch.set_num_threads(1) and puts the count back on exit, as the statement allows for an adjustment
undone inside forward (lost 9 points while any call to set_num_threads counted as a change)."""
import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


@dataclass
class Cfg:
    n_embd: int = 32
    n_head: int = 4
    block_size: int = 16
    dropout: float = 0.0


@contextlib.contextmanager
def num_threads(n):
    """Cambia el número de hilos de torch y lo restaura al salir, pase lo que pase."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _no_autocast(device):
    return torch.autocast(device_type=device.type, enabled=False)


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None):
        super().__init__()
        d_k = d_k or d_model
        self.d_k = d_k
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        with num_threads(1), _no_autocast(x.device):
            Q, K, V = self.W_Q(x), self.W_K(x), self.W_V(x)
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
        return x.reshape(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        with num_threads(1), _no_autocast(query.device):
            B = query.size(0)
            Q = self.split_heads(self.W_Q(query), B)
            K = self.split_heads(self.W_K(key), B)
            V = self.split_heads(self.W_V(value), B)
            scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
            if mask is not None:
                if mask.dim() == 3:
                    mask = mask.unsqueeze(1)
                scores = scores.masked_fill(mask == 0, float("-inf"))
            weights = self.dropout(torch.softmax(scores, dim=-1))
            out = self.W_O((weights @ V).transpose(1, 2).reshape(B, -1, self.d_model))
        return out, weights


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        n = cfg.block_size
        self.register_buffer("mask", torch.tril(torch.ones(n, n, dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)

    def forward(self, x, fused=False):
        with num_threads(1), _no_autocast(x.device):
            B, T, C = x.shape
            hs = C // self.n_head
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.reshape(B, T, self.n_head, hs).transpose(1, 2)
            k = k.reshape(B, T, self.n_head, hs).transpose(1, 2)
            v = v.reshape(B, T, self.n_head, hs).transpose(1, 2)
            if fused:
                with sdpa_kernel([SDPBackend.MATH, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
                    y = F.scaled_dot_product_attention(
                        q, k, v, is_causal=True, dropout_p=self.attn_drop.p if self.training else 0.0)
            else:
                att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
                att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
                att = self.attn_drop(F.softmax(att, dim=-1))
                y = att @ v
            y = y.transpose(1, 2).reshape(B, T, C)
            return self.resid_drop(self.proj(y))
