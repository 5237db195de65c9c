"""Hypothesis strategies: shapes and an RNG seed, never raw tensors.

Drawing integers keeps shrinking meaningful (the smallest failing B, T, heads...) and lets the
grader rebuild every tensor from the seed. Sizes stay small: the suite must grade a submission
in a few seconds on half a CPU.
"""
import functools

import numpy as np
from hypothesis import strategies as st

from .harness import MASK_DTYPES


@functools.lru_cache(maxsize=None)
def integers(low, high):
    """st.integers(low, high), made once. Hypothesis validates a strategy and works out its
    properties the first time it is drawn from: a new one on every draw of every example paid
    that each time, about a fifth of the grader's CPU in batch. Same draws as st.integers."""
    return st.integers(low, high)


@functools.lru_cache(maxsize=None)
def _d_k_apart_from(d_model):
    """A d_k other than d_model, or None (the class's default), made once per d_model."""
    return st.one_of(integers(1, 8).filter(lambda k: k != d_model), st.none())


seeds = st.integers(min_value=0, max_value=2**16)

# Dropout rates the train-mode checks ask for: far enough from each other and from the values a
# student might hard-code (0.1, nn.Dropout()'s 0.5) that a module ignoring its p shows it.
DROPOUT_RATES = (0.5, 0.25, 0.75)
dropout_rates = st.sampled_from(DROPOUT_RATES)

# Where the mask dtypes start their turns along the mask shapes (harness.masks_in_turn).
mask_turns = st.integers(0, len(MASK_DTYPES) - 1)


@st.composite
def self_attention_dims(draw, min_batch=1, min_time=1):
    d_model = draw(integers(2, 12))
    # d_k differs from d_model most of the time: a scale by sqrt(d_model) must show.
    d_k = draw(_d_k_apart_from(d_model))
    return {
        "B": draw(integers(min_batch, 3)),
        "T": draw(integers(min_time, 6)),
        "d_model": d_model,
        "d_k": d_k,
        "seed": draw(seeds),
    }


@st.composite
def multi_head_dims(draw, min_batch=1, min_time=1, min_heads=1):
    heads = draw(integers(min_heads, 4))
    d_k = draw(integers(1, 4))
    return {
        "B": draw(integers(min_batch, 3)),
        "Tq": draw(integers(min_time, 5)),
        "Tk": draw(integers(min_time, 7)),
        "h": heads,
        "d_model": heads * d_k,
        "seed": draw(seeds),
    }


@st.composite
def causal_dims(draw, min_batch=1, min_time=1, min_block=1, max_block=None):
    """min_block: a property that must see long sequences (a window that reads only the last few
    tokens is wrong only beyond it) asks for a block_size of at least that, up to max_block."""
    heads = draw(integers(1, 4))
    block = draw(integers(max(min_time, min_block), max_block or max(8, min_block + 2)))
    return {
        "B": draw(integers(min_batch, 3)),
        "T": draw(integers(min_time, block)),
        "block_size": block,
        "n_head": heads,
        "n_embd": heads * draw(integers(1, 4)),
        "seed": draw(seeds),
    }


# Sizes of real models, far above what the strategies draw: the base Transformer's d_model = 512
# with 8 heads of d_k = 64, for every class. scale, reference_match and
# fused_equivalence run once more at them (harness.also_at): a mistake written only for wide layers
# or many heads (a scale of 1/d_k above some width, say) shows there. The statement names these sizes
# (feedback catalogs, checks/statement: scale, reference_match, fused_equivalence): keep them in step.
WIDE_SELF_ATTENTION = {"B": 2, "T": 5, "d_model": 512, "d_k": 64, "seed": 5}
WIDE_MULTI_HEAD = {"B": 2, "Tq": 5, "Tk": 6, "h": 8, "d_model": 512, "seed": 5}
WIDE_CAUSAL = {"B": 2, "T": 6, "block_size": 8, "n_head": 8, "n_embd": 512, "seed": 5}
# attends once more, on enough positions that the log-weights' fit (checks.scores_from_similarity,
# one unknown per row and per column) has several equations for each unknown.
SIMILARITY_SELF_ATTENTION = {"B": 2, "T": 12, "d_model": 6, "d_k": 3, "seed": 9}
SIMILARITY_MULTI_HEAD = {"B": 2, "Tq": 12, "Tk": 12, "h": 2, "d_model": 6, "seed": 9}
# CausalSelfAttention returns no weights: one head as wide as the sequence is long, so that they can
# be read back from the output (checks.weights_behind_output).
SIMILARITY_CAUSAL = {"B": 24, "T": 10, "block_size": 10, "n_head": 1, "n_embd": 10, "seed": 9}
# A head count the strategies never draw (they draw 1 to 4; the wide sizes have 8), and a prime one:
# heads taken in groups of any size from 2 to 40 (or in groups larger than it), by a loop with a
# fixed step that rounds the number of groups down, leave some out only there (6 heads, once,
# caught groups of 4 and missed groups of 8; 17 caught those and missed groups of 32).
ODD_HEADS_MULTI_HEAD = {"B": 2, "Tq": 5, "Tk": 6, "h": 41, "d_model": 82, "seed": 7}
ODD_HEADS_CAUSAL = {"B": 2, "T": 6, "block_size": 8, "n_head": 41, "n_embd": 82, "seed": 7}

# A sequence longer than any other call's (harness.LONG_TIMES stops at 112) and than 256, the
# largest block a student who computes attention in chunks of queries or keys is likely to pick:
# reference_match and fused_equivalence run once more on it, and train_dropout in training mode
# (harness.also_at). A chunk of 128 or 256 that reuses its first mask rows, or skips dropout, is
# right on every shorter call. Two heads: weights in float64 stay under wire.MAX_FRAME_BYTES. The
# statement names this length.
LONGEST_SELF_ATTENTION = {"B": 1, "T": 300, "d_model": 16, "d_k": 8, "seed": 6}
LONGEST_MULTI_HEAD = {"B": 1, "Tq": 300, "Tk": 290, "h": 2, "d_model": 32, "seed": 6}
LONGEST_CAUSAL = {"B": 1, "T": 300, "block_size": 300, "n_head": 4, "n_embd": 32, "seed": 6}
# Past both, once: a sequence past 512 (GPT-2's block, and a chunk of queries a student may pick)
# with heads of 160 (past 64, every other call's widest, and 128): queries taken in chunks of 512
# that reuse the first chunk's mask rows, a mask buffer capped at 512, or a scale capped at some
# head size (√min(d_k, 64)) are right on every other call. reference_match and fused_equivalence
# run once more on it. Replies stay under wire.MAX_FRAME_BYTES with weights and output in float64
# (a correct module may return them so): SelfAttention's (T, T) weights, MultiHeadAttention with one
# head and 200 keys (the queries are the ones taken in chunks). The statement names these sizes.
FARTHEST_SELF_ATTENTION = {"B": 1, "T": 600, "d_model": 16, "d_k": 160, "seed": 8}
FARTHEST_MULTI_HEAD = {"B": 1, "Tq": 600, "Tk": 200, "h": 1, "d_model": 160, "seed": 8}
FARTHEST_CAUSAL = {"B": 1, "T": 600, "block_size": 600, "n_head": 2, "n_embd": 320, "seed": 8}
# gradients past 512 positions: a reply holds the output, x's gradient and qkv's and proj's, each
# under the frame cap only at a narrower width than FARTHEST_CAUSAL's
FARTHEST_GRADIENTS_CAUSAL = {"B": 1, "T": 600, "block_size": 600, "n_head": 1, "n_embd": 64, "seed": 9}


# train_dropout once more at a rate no strategy draws (harness.also_at): RARE_P, not a whole
# percentage, over RARE_CALLS calls of fewer than 1/RARE_P entries each that a dropout draws for
# (MultiHeadAttention's weights; CausalSelfAttention's outputs, for resid_drop, and its attention
# weights, 2 heads of 15·16/2, for attn_drop). A dropout that rounds p (to whole percentages: 0)
# or zeroes floor(p·N) entries of each call never drops one; nn.Dropout drops none of the 7,200
# with probability (1 - p)^7200 < 1e-12.
RARE_P, RARE_CALLS = 0.004, 30
# longest_dropout once more at a rate whose drops, over the longest call's weights, are expected
# far below one (checks.dropped_at_a_tiny_rate): a draw with a floor above it shows.
TINY_P = 1e-6
# The p every dropout layer must hold exactly as given, read from a module built with it (no draw):
# above any cap a module might put on p (min(p, 0.9)) and changed by any rounding (round(p, 3)).
EXACT_P = 0.987654321
# Rates at the ends no other call reaches, drawn over the longest calls' weights (and over
# CausalSelfAttention's many rows of one token): at SMALL_P ~35 of MultiHeadAttention's 174k weights drop (none with
# probability e^-35), at NEAR_ONE_P ~17 are kept (~174 under a cap at 0.999). A dropout skipped below
# some rate (`if p > 1e-3`) or capped above one (min(p, 0.99)) is right at every rate in between.
SMALL_P = 2e-4
NEAR_ONE_P = 0.9999
RARE_MULTI_HEAD = {"B": 1, "Tq": 12, "Tk": 10, "h": 2, "d_model": 8, "seed": 8}  # 240 weights a call
RARE_CAUSAL = {"B": 1, "T": 15, "block_size": 15, "n_head": 2, "n_embd": 16, "seed": 8}  # 240 of each


# train_dropout once more at each end of DROPOUT_RATES (harness.also_at), whatever rates the
# examples drew: eight examples of three rates leave one out about one time in twenty, and a dropout
# that caps p (min(p, 0.5)) or raises it to a floor is wrong only at one end.
EDGE_RATES_MULTI_HEAD = {"B": 2, "Tq": 4, "Tk": 5, "h": 2, "d_model": 6, "seed": 10}
EDGE_RATES_CAUSAL = {"B": 2, "T": 5, "block_size": 6, "n_head": 2, "n_embd": 6, "seed": 10}


def rng_for(dims):
    """The rng of an example's inputs."""
    return np.random.default_rng(dims["seed"])


def parameter_seed(dims):
    """The seed of an example's parameters: a stream apart from the inputs', so that the inputs
    can be drawn before the worker has said what shapes the parameters have."""
    return [dims["seed"], 1]


def another_rate(p):
    """A dropout rate whose draws are told from p's on a few hundred weights: none dropped, or half."""
    return 0.0 if p >= 0.25 else 0.5
