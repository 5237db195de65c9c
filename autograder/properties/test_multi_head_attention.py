"""MultiHeadAttention(d_model, num_heads, dropout=0.1):
forward(query, key, value, mask=None) -> (output (B,Tq,d_model), weights (B,h,Tq,Tk))."""
import math

import numpy as np
from hypothesis import example as explicit_example
from hypothesis import given
from hypothesis import strategies as st

from . import checks, reference
from .failures import PropertyFailure, calling, example, example_dims, expect_close, require  # require: what a new property fails through (README)
from .harness import (unless_autograd_is_off, INPUT_SCALES, WIDE_BATCH, Remote, also_at, call_failure, closing_one, copy_calls, params_in_turn, mid_dims, gaussian, gradient_batch, first_rows_one_key, graded, last_rows, large_input_mode, left_padded, long_time, masks_in_turn, masks_of_every_dtype, one_row, other_mask,
                      random_mask, runs_skipping, runs_until_failure, edge_batches_then_no_mask)
from .strategies import another_rate, DROPOUT_RATES, EDGE_RATES_MULTI_HEAD, FARTHEST_MULTI_HEAD, LONGEST_MULTI_HEAD, ODD_HEADS_MULTI_HEAD, SIMILARITY_MULTI_HEAD, EXACT_P, RARE_CALLS, RARE_MULTI_HEAD, RARE_P, SMALL_P, NEAR_ONE_P, TINY_P, WIDE_MULTI_HEAD, dropout_rates, integers, mask_turns, multi_head_dims, parameter_seed, rng_for, seeds
from ..worker.submission_errors import SubmissionError

CLS = "MultiHeadAttention"


def build(worker, dims, dropout=0.0, load_seed=None, **load):
    """load: Remote's other load options (load_scale, required)."""
    example(**dims, dropout=dropout)
    square = (dims["d_model"], dims["d_model"])
    return Remote(worker, CLS, load_seed, **load, layer_shapes=dict.fromkeys(("W_Q", "W_K", "W_V", "W_O"), square),
                  d_model=dims["d_model"], num_heads=dims["h"], dropout=dropout)

DEFAULT_DROPOUT = 0.1  # the statement's signature: MultiHeadAttention(d_model, num_heads, dropout=0.1)


def loaded(worker, dims, dropout=0.0):
    """A module with the grader's parameters (module.params) and the rng of its inputs."""
    return build(worker, dims, dropout, load_seed=parameter_seed(dims)), rng_for(dims)


def outputs(reply, dims):
    B, Tq, Tk = dims["B"], dims["Tq"], dims["Tk"]
    return (reply.output(0, (B, Tq, dims["d_model"]), "output"),
            reply.output(1, (B, dims["h"], Tq, Tk), "weights"))


def train_weights_are_dropout(reply, expected, p):
    """Whether a train-mode call's weights are the reference's (`expected`) under some dropout draw."""
    weights = reply.values(1)
    return (isinstance(weights, np.ndarray) and weights.shape == expected.shape
            and checks.dropout_factor(weights, expected, p) is not None)


def cross_inputs(rng, dims, scale=1.0):
    """query (B,Tq,d), key and value (B,Tk,d), key != value: cross-attention."""
    B, d = dims["B"], dims["d_model"]
    return (gaussian(rng, B, dims["Tq"], d, scale=scale), gaussian(rng, B, dims["Tk"], d, scale=scale),
            gaussian(rng, B, dims["Tk"], d, scale=scale))


def masks(rng, dims):
    """The mask shapes the contract accepts: (B,Tq,Tk), (B,1,Tq,Tk) and broadcastable (1,Tq,Tk)."""
    B, Tq, Tk = dims["B"], dims["Tq"], dims["Tk"]
    return random_mask(rng, B, Tq, Tk), random_mask(rng, B, 1, Tq, Tk), random_mask(rng, 1, Tq, Tk)


def mask_shapes(dims):
    """Every mask shape the statement allows: (Tq, Tk); (B, Tq, Tk) or (1, Tq, Tk), the same for every
    head (a 3-D mask gets the heads' axis with unsqueeze(1)); and (B, h, Tq, Tk) with B and h each
    possibly 1."""
    B, h, Tq, Tk = dims["B"], dims["h"], dims["Tq"], dims["Tk"]
    return ((Tq, Tk), (B, Tq, Tk), (1, Tq, Tk), (B, 1, Tq, Tk), (1, 1, Tq, Tk), (B, h, Tq, Tk), (1, h, Tq, Tk))


# What the worker calls the inputs (positional by index) -> the statement's names.
INPUT_NAMES = {"0": "query", "1": "key", "2": "value", "3": "mask", "mask": "mask"}


@graded(CLS, "shapes")
@given(dims=multi_head_dims(), longer_q=st.integers(0, 2), longer_k=st.integers(1, 3), masked=st.booleans())
def test_shapes(worker, dims, longer_q, longer_k, masked):
    """One module, any lengths in any order, any memory layout: (Tq, Tk), then longer ones on the same
    module (with a mask or not, drawn), then those inputs laid out non-contiguously."""
    module = build(worker, dims)
    longer = {**dims, "Tq": dims["Tq"] + longer_q, "Tk": dims["Tk"] + longer_k}
    example(**dims, Tq2=longer["Tq"], Tk2=longer["Tk"])
    rng = rng_for(dims)
    args, longer_args = cross_inputs(rng, dims), cross_inputs(rng, longer)
    mask = random_mask(rng, dims["B"], longer["Tq"], longer["Tk"])
    options = {"mask": mask} if masked else {}
    calls = [(args, {}), (longer_args, options), (longer_args, {**options, "noncontiguous": True})]
    checks.shapes_across_calls(module, calls, lambda i, reply: outputs(reply, dims if i == 0 else longer),
                               lambda: build(worker, dims),
                               ((dims["Tq"], dims["Tk"]), (longer["Tq"], longer["Tk"])), INPUT_NAMES)


@graded(CLS, "parameter_count")
@given(dims=multi_head_dims())
def test_parameter_count(worker, dims):
    module = build(worker, dims)
    checks.parameters_are(module, 4 * dims["d_model"] ** 2, "4·d_model²", biased=False)


@graded(CLS, "divisibility_error")
@given(heads=st.integers(2, 6), per_head=st.integers(1, 5), offset=st.integers(1, 5))
def test_divisibility_error(worker, heads, per_head, offset):
    d_model = heads * per_head + 1 + offset % (heads - 1)  # never a multiple of heads
    example(d_model=d_model, h=heads)
    try:
        Remote(worker, CLS, d_model=d_model, num_heads=heads).build()
    except SubmissionError as exc:
        if {"AssertionError", "ValueError"} & set(exc.exc_types):  # a subclass of either is one too
            # A ValueError says why (the statement: a clear message); a bare `assert` is accepted as it is.
            require((exc.message or "").strip() or "AssertionError" in exc.exc_types, "divisibility_no_message",
                    got=exc.exc_type, d_model=d_model, h=heads)
            raised_before_layers(worker, d_model, heads, per_head)
            return
        if not exc.raised:
            raise
        raise PropertyFailure("divisibility_wrong_error", got=exc.exc_type, d_model=d_model, h=heads) from None
    raise PropertyFailure("divisibility_no_error", d_model=d_model, h=heads)


def raised_before_layers(worker, d_model, heads, per_head):
    """Right after MultiHeadAttention(d_model, heads) raised: the statement checks divisibility
    first, before creating any layer, so that constructor drew nothing from torch's generator. A
    module built next without a new seed then starts where a seeded build starts, and computes
    what one does; a layer made before the raise drew its initial values, and the next module's
    differ. Judged only where the module runs (a forward that fails is other properties' business)
    and, after a difference, where two seeded builds agree (an initialisation reproducible at all).
    """
    dims = {"d_model": heads * per_head, "num_heads": heads, "dropout": 0.0}
    x = gaussian(np.random.default_rng(d_model), 1, 2, dims["d_model"])

    def output(unseeded):
        return Remote(worker, CLS, unseeded=unseeded, **dims).run(x, x, x).output(0, x.shape, "output")

    try:
        after, seeded = output(True), output(False)
        if not np.array_equal(after, seeded, equal_nan=True):
            again = output(False)
            calling(None)  # the failure is the constructor's that raised (its message names it), not these calls'
            require(not np.array_equal(seeded, again, equal_nan=True), "divisibility_after_layers",
                    d_model=d_model, h=heads)
    except SubmissionError as error:
        if not error.raised:
            raise
    except PropertyFailure as failure:
        if failure.code == "divisibility_after_layers":
            raise


@graded(CLS, "split_heads")
@given(dims=multi_head_dims())
def test_split_heads(worker, dims):
    rng = rng_for(dims)
    module = build(worker, dims)
    B, T, h = dims["B"], dims["Tq"], dims["h"]
    x = gaussian(rng, B, T, dims["d_model"])
    # positionally, then by the statement's argument name (split_heads(x, batch_size=B), as a
    # user may call it: a parameter renamed B or bsz fails there)
    for reply in module.runs(((x, B), {"method": "split_heads"}), ((x,), {"method": "split_heads", "batch_size": B})):
        got = reply.output(0, (B, h, T, dims["d_model"] // h), "split_heads")
        expect_close(got, reference.split_heads(x.astype(np.float64), h), "split_heads_mismatch", atol=0, rtol=0)


@graded(CLS, "rows_sum_to_one")
@given(dims=multi_head_dims())
def test_rows_sum_to_one(worker, dims):
    """In eval with dropout > 0: the dropout must be off, and every row a softmax (judged on the
    calls the module can take: a mask it takes in no form is named as masked_zero's, and still costs the point)."""
    p = 0.3
    module, rng = loaded(worker, dims, dropout=p)
    for mask in (None, *masks(rng, dims)):
        args = cross_inputs(rng, dims)
        got = checks.taken(lambda **masked: module.run(*args, **masked), mask, lambda reply: outputs(reply, dims))
        weights = got[1]
        expected = reference.multi_head_attention(module.params, dims["h"], *(t.astype(np.float64) for t in args),
                                                  mask)[1]
        checks.rows_sum_to_one_in_eval(weights, expected, p, masked=mask is not None)


@graded(CLS, "masked_zero")
@given(dims=multi_head_dims(min_time=2), turn=mask_turns)
# Always one example with as many batch rows as heads: only there does a 3-D mask (B, Tq, Tk) taken
# for a per-head one (B read as h) still run, and give other weights.
@explicit_example(dims={"B": 2, "Tq": 3, "Tk": 4, "h": 2, "d_model": 4, "seed": 7}, turn=0)
def test_masked_zero(worker, dims, turn):
    """Every mask the statement allows, on one module in eval with dropout > 0: no mask,
    reference_match's float32 (B, Tq, Tk), then each shape of mask_shapes as bool, long or float32 in turn
    (every pairing of shape and dtype over the examples: harness.masks_in_turn), then another mask
    of that form, passed by position."""
    module, rng = loaded(worker, dims, dropout=0.3)
    first = random_mask(rng, dims["B"], dims["Tq"], dims["Tk"])
    masks = [None, first, *masks_in_turn(rng, mask_shapes(dims), turn), other_mask(first)]
    args = cross_inputs(rng, dims)
    # the last mask passed by position, as forward(query, key, value, mask) allows
    calls, masks = edge_batches_then_no_mask(rng, [*((args, {"mask": mask}) for mask in masks[:-1]), ((*args, masks[-1]), {})],
                                             masks, lambda batch: cross_inputs(rng, {**dims, "B": batch}),
                                             (dims["Tq"], dims["Tk"]), turn)

    def expected(i):
        given = calls[i][0][:3]
        out, weights, e_out, e_weights = reference.multi_head_attention_bounded(
            module.params, dims["h"], *(t.astype(np.float64) for t in given), masks[i])
        return [(out, e_out, 1.0, "output"), (weights, e_weights, 1.0, "weights")]

    def canonical(mask, batch):
        """The rule as float32 (B, Tq, Tk) masks: one for every head, or one per head if they differ."""
        full = np.broadcast_to(reference.head_mask(mask), (batch, dims["h"], dims["Tq"], dims["Tk"]))
        if (full == full[:, :1]).all():
            return [(full[:, 0].astype(np.float32), None)]
        return [(full[:, head].astype(np.float32), head) for head in range(dims["h"])]

    checks.masks_accepted(module, calls, lambda i, reply: outputs(reply, {**dims, "B": len(calls[i][0][0])}),
                          masks, expected, INPUT_NAMES, lambda: loaded(worker, dims, dropout=0.3)[0], canonical,
                          reference.head_mask)


@graded(CLS, "scale")
@also_at(dims=WIDE_MULTI_HEAD)
@given(dims=multi_head_dims(min_time=2, min_heads=2))
def test_scale(worker, dims):
    module, rng = loaded(worker, dims)
    query, key, value = cross_inputs(rng, dims)
    reply = module.run(query, key, value)
    _, weights = outputs(reply, dims)
    q, k = (reference.split_heads(reference.linear(t.astype(np.float64), module.params, n), dims["h"])
            for t, n in ((query, "W_Q"), (key, "W_K")))
    # W_Q and W_K are square: applied as x @ W.weight, a mistake of the projections, not the scale
    q_t, k_t = (reference.split_heads(t.astype(np.float64) @ module.params[f"{n}.weight"], dims["h"])
                for t, n in ((query, "W_Q"), (key, "W_K")))
    checks.scale_is(weights, reference.unscaled_scores(q, k), dims["d_model"] // dims["h"],
                    reference.unscaled_scores(q_t, k_t), reply.settings_changed)


def wide_reference_match(worker, dims, size="wide"):
    """reference_match at a real model's width and head count (size "wide"), or at a head count
    the strategies never draw (size "heads"): cross-attention without and with a mask, then
    self-attention (one tensor as query, key and value)."""
    module, rng = loaded(worker, dims, dropout=0.2)
    example(**dims, dropout=0.2)
    mask = closing_one(random_mask(rng, dims["B"], dims["Tq"], dims["Tk"]))
    args = cross_inputs(rng, dims)
    x = cross_inputs(rng, {**dims, "Tk": dims["Tq"]})[0]
    calls = [(args, {}), (args, {"mask": mask}), ((), {"query": x, "key": x, "value": x})]

    def expected(i):
        given = calls[i][0] or (x, x, x)
        return zip(reference.multi_head_attention(module.params, dims["h"], *(t.astype(np.float64) for t in given),
                                                  calls[i][1].get("mask")), ("output", "weights"))

    checks.matches_beyond_examples(module, calls, lambda i, reply: outputs(reply, {**dims, "Tk": dims["Tq"]} if i == 2 else dims),
                                   expected, f"reference_mismatch_{size}",
                                   width=f"d_model = {dims['d_model']}, num_heads = {dims['h']}")


def longest_reference_match(worker, dims, size="longest"):
    """reference_match on the longest sequences (strategies.LONGEST_*; size "farthest": FARTHEST_*,
    also with the widest heads), cross-attention with a mask that closes a long prefix of keys in
    every other row (harness.left_padded)."""
    module, rng = loaded(worker, dims, dropout=0.2)
    example(**dims, dropout=0.2)
    args, mask = cross_inputs(rng, dims), left_padded(random_mask(rng, dims["B"], dims["Tq"], dims["Tk"]))
    want = reference.multi_head_attention(module.params, dims["h"], *(t.astype(np.float64) for t in args), mask)
    checks.matches_beyond_examples(module, [(args, {"mask": mask})], lambda i, reply: outputs(reply, dims),
                                   lambda i: zip(want, ("output", "weights")), f"reference_mismatch_{size}",
                                   positions=dims["Tq"], head_size=dims["d_model"] // dims["h"])


@graded(CLS, "reference_match")
@also_at(longest_reference_match, dims=FARTHEST_MULTI_HEAD, size="farthest")  # last: past 512 positions, heads of 160
@also_at(longest_reference_match, dims=LONGEST_MULTI_HEAD)  # after the wide one (decorators apply upwards)
@also_at(wide_reference_match, dims=WIDE_MULTI_HEAD)
@also_at(wide_reference_match, dims=ODD_HEADS_MULTI_HEAD, size="heads")
@given(dims=multi_head_dims(min_time=2), scales=st.permutations(INPUT_SCALES))
def test_reference_match(worker, dims, scales):
    """Calls on one module: inputs at each scale, the last with a mask (then another mask of that
    shape written into the same tensor), longer sequences
    (harness.LONG_TIMES) with a mask, whose last key is a zero vector (a padding token: its scores
    are exactly 0, which a mask must not be confused with), one query against a memory that is
    both key and value in a larger batch (WIDE_BATCH) with one mask for all of it,
    self-attention (one tensor as query, key and value), then the first inputs again, the second under
    torch.inference_mode(), a batch of sizes in between (harness.MID_TIMES) with a mask, before and after the parameters change in place (as an
    optimizer step changes them; then as optimizer.step() writes them, which `_version` counts). Tq, Tk >= 2: then the short calls can tell a mistake of the
    weights (with one key, every row is [1]), and a miss first seen in the long call is about length."""
    module, rng = loaded(worker, dims, dropout=0.2)
    first, second, third = scales
    mask = closing_one(random_mask(rng, dims["B"], dims["Tq"], dims["Tk"]))  # the short calls try the mask too
    # in_place: the inputs written into the tensors of the call before (a cache keyed on a tensor's
    # identity or address sees other values, or the same after the parameters changed)
    calls = [(cross_inputs(rng, dims, first), {}), (cross_inputs(rng, dims, second), {"in_place": True}),
             (cross_inputs(rng, dims, third), {"mask": mask})]
    reload, _ = module.reloading(int(rng.integers(2 ** 31)))
    copy_reload, _ = module.reloading(int(rng.integers(2 ** 31)))
    long_dims = {**dims, "B": 1, "Tq": long_time(rng), "Tk": long_time(rng)}  # B=1: weights under wire's frame cap
    example(**dims, dropout=0.2, scales=list(scales), Tq2=long_dims["Tq"], Tk2=long_dims["Tk"])
    padded = cross_inputs(rng, long_dims)
    padded[1][:, -1] = 0.0
    long_mask = random_mask(rng, 1, long_dims["Tq"], long_dims["Tk"])
    # one query (as when decoding token by token) in a batch larger than the strategies draw, with
    # one (1, Tq, Tk) mask for all of it
    one_query = {**dims, "Tq": 1, "B": int(rng.integers(WIDE_BATCH[0], WIDE_BATCH[1] + 1))}
    query, memory, _ = cross_inputs(rng, one_query)
    # then self-attention, mha(query=x, key=x, value=x): one tensor for all three (the worker passes
    # inputs sent equal as one tensor), as the memory above is key and value (a shortcut taken when
    # `key is value` shows), by keyword (the statement's names for forward's arguments)
    self_dims = {**dims, "Tk": dims["Tq"]}
    x = cross_inputs(rng, self_dims)[0]
    calls += [(padded, {"mask": long_mask}),
              ((query, memory, memory), {"mask": random_mask(rng, 1, 1, dims["Tk"])}),  # float32, as above
              ((), {"query": x, "key": x, "value": x}), calls[0]]
    # the second inputs under torch.inference_mode() (a validation pass), then a batch of sizes in
    # between (harness.MID_TIMES) with a mask, before the parameters change
    between = mid_dims(rng, dims, "Tq", "Tk")
    calls += [(calls[1][0], {"inference": True, "mask": mask}),
              (cross_inputs(rng, between), {"mask": random_mask(rng, between["B"], between["Tq"], between["Tk"])}),
              (calls[0][0], {"reload": reload, "in_place": True}), (calls[0][0], {"reload": {**reload, "step": True}})]
    # right after the masked call, another mask of the same shape and dtype written into its tensor:
    # a module that keeps what it made of a mask, rebuilt only when the shape changes or keyed on the
    # tensor's address, applies the old one (drawn last: the draws above stay as they were)
    calls.insert(3, (calls[2][0], {"mask": closing_one(random_mask(rng, dims["B"], dims["Tq"], dims["Tk"])),
                                   "in_place": True}))
    calls += copy_calls(calls[1][0], copy_reload)
    magnitudes = [first, second, third, third, 1.0, 1.0, 1.0, first, second, 1.0, first, first, second, second]
    shapes = [dims, dims, dims, dims, long_dims, one_query, self_dims, dims, dims, between, dims, dims, dims, dims]
    params = params_in_turn(module, calls)[0]

    def expected(i):
        args, options = calls[i]
        given = args or tuple(options[name] for name in ("query", "key", "value"))  # the call by keyword
        out, weights, e_out, e_weights = reference.multi_head_attention_bounded(
            params[i], dims["h"], *(t.astype(np.float64) for t in given), options.get("mask"))
        return [(out, e_out, magnitudes[i], "output"), (weights, e_weights, 1.0, "weights")]

    heads = dims["h"] % 4 + 1  # another head count and head size
    checks.reference_across_calls(module, calls, lambda i, reply: outputs(reply, shapes[i]), expected,
                                  lambda: loaded(worker, dims, dropout=0.2)[0], INPUT_NAMES,
                                  {4: ("reference_mismatch_long", {"positions": long_dims["Tk"]}, {9}),
                                   8: ("inference_mode_changes_output", {}),
                                   9: ("reference_mismatch_mid", {"batch": between["B"], "positions": between["Tk"]}),
                                   11: ("reference_mismatch_after_step", {}),
                                   12: ("copy_computes_with_the_original", {}), 13: ("original_changed_by_its_copy", {})},
                                  lambda: another_configuration(worker, {**dims, "h": heads,
                                                           "d_model": heads * (dims["d_model"] // dims["h"] + 1)}))


def another_configuration(worker, dims):
    """Build and call a module of these dims (another configuration); its description."""
    module, rng = loaded(worker, dims)
    module.run(*cross_inputs(rng, dims))
    return f"d_model={dims['d_model']}, num_heads={dims['h']}"


def another_dropout(worker, dims, p):
    """Build a module of these dims with another dropout p and call it in train mode; its description."""
    other = another_rate(p)
    module, rng = loaded(worker, dims, dropout=other)
    module.run(*cross_inputs(rng, dims), train=True)
    return f"d_model={dims['d_model']}, num_heads={dims['h']}, dropout={other}"


@graded(CLS, "batch_independence")
@given(dims=multi_head_dims(min_batch=2))
def test_batch_independence(worker, dims):
    module, rng = loaded(worker, dims)
    checks.batch_independent(module.run, list(cross_inputs(rng, dims)), rng, lambda r, b: outputs(r, {**dims, "B": b})[0],
                             gradient_batch(dims["B"] + 1, dims["h"] * dims["Tq"]),
                             lambda b: random_mask(rng, b, dims["Tq"], dims["Tk"]))


@graded(CLS, "eval_deterministic")
@given(dims=multi_head_dims(min_time=2), seed=seeds)
def test_eval_deterministic(worker, dims, seed):
    """In eval, the same inputs twice in a row (other seeds: dropout must be off), then other
    ones, then the first inputs again: always the same outputs."""
    module, rng = loaded(worker, dims, dropout=0.5)
    args = cross_inputs(rng, dims)
    inputs = [args, args, cross_inputs(rng, dims), args]
    checks.eval_repeatable(module, [(a, {"seed": seed + i}) for i, a in enumerate(inputs)],
                           lambda i, reply: outputs(reply, dims))


def rare_dropout(worker, dims):
    """train_dropout at a rate no strategy draws (strategies.RARE_P), the weights of RARE_CALLS
    calls: dropped somewhere, and the survivors divided by (1 - p) (checks.survivors_rescaled:
    a dropout that skips the rescale where p is small); then at EXACT_P, near 1. The rescale is
    judged where eval gives the same weights under two seeds (dropout left on in eval is
    eval_deterministic's)."""
    module, rng = loaded(worker, dims, dropout=RARE_P)
    args = cross_inputs(rng, dims)
    replies = module.runs_in_exchanges([(args, {"seed": s}) for s in range(2)]
                                       + [(args, {"train": True, "seed": s}) for s in range(RARE_CALLS)])
    evaluated, again, *weights = (outputs(reply, dims)[1] for reply in replies)
    checks.drops_at_a_rare_rate([w == 0 for w in weights], RARE_P, RARE_CALLS, weights[0].size * RARE_CALLS, "self.dropout")
    if np.array_equal(evaluated, again, equal_nan=True):
        for trained in weights:
            checks.survivors_rescaled(trained, evaluated, RARE_P)
        # and at a rate near 1 (EXACT_P; ~3 weights of a call kept, ~24 under a cap at 0.9): the
        # rate the layer holds is the one forward uses (F.dropout(weights, min(self.dropout.p, 0.9),
        # ...) keeps p as given, and is right at every rate drawn)
        example_dims(**dims, dropout=EXACT_P)
        high = loaded(worker, dims, dropout=EXACT_P)[0]
        checks.used_at_a_high_rate(outputs(high.run(*args, train=True, seed=5), dims)[1], evaluated, EXACT_P, "weights")


def longest_dropout(worker, dims):
    """train_dropout on the longest sequences (strategies.LONGEST_*): the weights dropped as at
    the strategies' sizes, at the rare rate too (RARE_P, its rate measured), and the output
    computed from them. Judged where eval gives the same
    weights twice (dropout left on in eval is eval_deterministic's to name), the output from them
    only where the eval output is that function of the eval weights (a W_O or W_V mistake after
    the weights is reference_match's: it claimed the weights held no dropout zeros)."""
    p = 0.2
    module, rng = loaded(worker, dims, dropout=p)
    example(**dims, dropout=p)
    args = cross_inputs(rng, dims)
    (eval_output, evaluated), (_, again), (trained_output, trained) = (outputs(reply, dims) for reply in module.runs(
        (args, {}), (args, {"seed": 2}), (args, {"train": True, "seed": 1})))
    if not np.array_equal(evaluated, again, equal_nan=True):
        return
    try:
        checks.dropout_on_weights(trained, evaluated, p)
    except PropertyFailure as failure:
        if failure.code != "dropout_not_applied":
            raise
        raise PropertyFailure("weights_not_dropped_at_shape", case=f"Tq={dims['Tq']}, Tk={dims['Tk']}", **failure.params) from None
    # the rate, at the rare p, over this call's ~174k weights: a dropout drawn in bfloat16
    # (torch.rand_like(w, dtype=torch.bfloat16) < p) drops 0.0059 there, 12 standard deviations off
    rare = loaded(worker, dims, dropout=RARE_P)[0]
    live = evaluated != 0
    checks.dropout_rate(int(((outputs(rare.run(*args, train=True, seed=3), dims)[1] == 0) & live).sum()),
                        int(live.sum()), RARE_P, "weights")
    # and at a rate whose expected drops here are far below one: a draw in float16 drops ~42
    tiny = loaded(worker, dims, dropout=TINY_P)[0]
    checks.dropped_at_a_tiny_rate(int(((outputs(tiny.run(*args, train=True, seed=4), dims)[1] == 0) & live).sum()),
                                  int(live.sum()), TINY_P, "weights")
    # and at each end of the rates (SMALL_P, NEAR_ONE_P): a dropout skipped below some rate, or capped
    small = loaded(worker, dims, dropout=SMALL_P)[0]
    checks.drops_at_a_rare_rate([(outputs(small.run(*args, train=True, seed=5), dims)[1] == 0) & live], SMALL_P, 1,
                                int(live.sum()), "self.dropout")
    near_one = loaded(worker, dims, dropout=NEAR_ONE_P)[0]
    checks.used_at_a_high_rate(outputs(near_one.run(*args, train=True, seed=6), dims)[1], evaluated, NEAR_ONE_P,
                               "weights")
    value = args[2].astype(np.float64)
    from_eval = reference.multi_head_output_from_weights(module.params, dims["h"], value, evaluated)
    if not np.allclose(eval_output, from_eval, atol=1e-5, rtol=1e-4):
        return
    from_weights = reference.multi_head_output_from_weights(module.params, dims["h"], value, trained)
    require(np.allclose(trained_output, from_weights, atol=1e-5, rtol=1e-4), "returned_weights_before_dropout", p=p)


def dropout_own_at(worker, dims, p, args, seed):
    """Where the module built without the dropout argument does not drop as dropout=p would: the
    same call on a module built with dropout=p explicitly, whose failure is then the dropout's own
    (a keep probability taken for the drop probability, right only at p = 0.5), not the default's."""
    example_dims(**dims, dropout=p)
    explicit = build(worker, dims, p)
    replies, failed = runs_until_failure(explicit, (args, {}), (args, {"train": True, "seed": seed}))
    if not failed:
        (_, ev), (_, tr) = (outputs(reply, dims) for reply in replies)
        checks.dropout_on_weights(tr, ev, p)
    example_dims(**dims)  # built without dropout: the example names none


@graded(CLS, "train_dropout")
@also_at(longest_dropout, dims=LONGEST_MULTI_HEAD)  # after the rare rate (decorators apply upwards)
@also_at(rare_dropout, dims=RARE_MULTI_HEAD)
@also_at(dims=EDGE_RATES_MULTI_HEAD, seed=11, p=max(DROPOUT_RATES))  # before the rare rate: the examples' own checks at each end
@also_at(dims=EDGE_RATES_MULTI_HEAD, seed=11, p=min(DROPOUT_RATES))
@given(dims=multi_head_dims(min_time=2), seed=seeds, p=dropout_rates)
def test_train_dropout(worker, dims, seed, p):
    # A batch large enough for checks.DROPOUT_DRAWS weights: see checks.dropout_rate.
    per_example = dims["h"] * dims["Tq"] * dims["Tk"]
    dims = {**dims, "B": max(dims["B"], -(-checks.DROPOUT_DRAWS // per_example))}
    module, rng = loaded(worker, dims, dropout=p)
    args = cross_inputs(rng, dims)
    mask = random_mask(rng, dims["B"], dims["Tq"], dims["Tk"])  # dropout acts under a mask too
    replies = module.runs((args, {}), (args, {"seed": seed + 1}), (args, {"train": True, "seed": seed}),
                          # the next step of a training loop: no new seed; then the first seed again: the same draw
                          (args, {"train": True, "seed": None}), (args, {"train": True, "seed": seed}),
                          (args, {"mask": mask}), (args, {"mask": mask, "train": True, "seed": seed + 3}))
    (evaluated, eval_weights), (_, again), (trained, train_weights), (_, redrawn), (_, reseeded), (_, masked), \
        (_, masked_trained) = (outputs(reply, dims) for reply in replies)
    trained_call = replies[2].call
    # The output is computed from the weights returned (after dropout): W_O(merge(weights @ V)).
    # Judged only when the module's eval output is that function of its eval weights, so that a
    # bug elsewhere (reference_match's) does not cost this point too.
    value = args[2].astype(np.float64)
    from_eval = reference.multi_head_output_from_weights(module.params, dims["h"], value, eval_weights)
    output_from_weights = np.allclose(evaluated, from_eval, atol=1e-5, rtol=1e-4)
    from_train = reference.multi_head_output_from_weights(module.params, dims["h"], value, train_weights)
    if np.array_equal(eval_weights, again, equal_nan=True):
        if np.array_equal(trained, evaluated, equal_nan=True):  # nothing dropped under no_grad
            checks.dropout_not_tied_to_autograd(module, (args, {"train": True, "seed": seed}), evaluated, p=p)
        try:
            checks.dropout_on_weights(train_weights, eval_weights, p)
        except PropertyFailure as failure:
            # No drop in the weights returned, yet a train output they do not explain: the module
            # drops its output's entries, or drops its weights but returns them from before dropout.
            if failure.code == "dropout_not_applied" and output_from_weights and not np.allclose(
                    trained, from_train, atol=1e-5, rtol=1e-4):
                dropped_output = checks.dropped_entrywise(trained, evaluated, p)
                raise PropertyFailure("dropout_on_output" if dropped_output else "returned_weights_before_dropout",
                                      p=p) from None
            if failure.code == "dropout_not_applied" and np.all(np.isfinite(masked)) and np.allclose(
                    masked.sum(axis=-1), 1.0, atol=1e-4):  # none dropped without a mask: with one?
                try:
                    checks.dropout_on_weights(masked_trained, masked, p)
                except PropertyFailure:
                    raise failure from None
                raise PropertyFailure("dropout_not_applied_unmasked", **failure.params) from None
            raise
        checks.dropout_redrawn(train_weights, redrawn, p, "weights")
        checks.dropout_follows_seed(train_weights, reseeded, p, "weights", call=replies[4].call)

        # the output from the weights is judged here only where the no_grad call's was (a dropout on
        # the output too is named further on, whatever the grad mode)
        trained_from_weights = output_from_weights and np.allclose(trained, from_train, atol=1e-5, rtol=1e-4)

        def dropped_as_under_no_grad(reply):
            output, weights = outputs(reply, dims)
            checks.dropout_on_weights(weights, eval_weights, p)
            require(not trained_from_weights or np.allclose(output, reference.multi_head_output_from_weights(
                module.params, dims["h"], value, weights), atol=1e-5, rtol=1e-4), "returned_weights_before_dropout", p=p)

        checks.dropout_kept_under_inference_mode(module, (args, {"train": True, "seed": seed}),
                                                 dropped_as_under_no_grad, p=p)
        checks.train_draw_unchanged_by_another_instance(lambda: loaded(worker, dims, dropout=p)[0],
                                                        [(args, {"train": True, "seed": seed})],
                                                        lambda reply: outputs(reply, dims)[1],
                                                        lambda: another_dropout(worker, dims, p))
        # Judged where the masked eval weights are weights (finite rows summing to one): a mask
        # read wrongly is masked_zero's mistake.
        if np.all(np.isfinite(masked)) and np.allclose(masked.sum(axis=-1), 1.0, atol=1e-4):
            try:
                checks.dropout_on_weights(masked_trained, masked, p)
            except PropertyFailure as failure:
                if failure.code != "dropout_not_applied":
                    raise
                raise PropertyFailure("dropout_not_applied_masked", **failure.params) from None
        # Dropout acts at every shape the statement allows: one example (B=1), one query (Tq=1) and
        # one key (Tk=1: every weight is 1 before dropout), each with thousands of weights; no shape
        # check or shortcut skips it. A call the module raises on (a length it cannot take) is
        # reference_match's to name.
        side = math.isqrt(-(-checks.DROPOUT_DRAWS // dims["h"])) + 1
        many = -(-checks.DROPOUT_DRAWS // (dims["h"] * dims["Tk"]))
        for case, shape in (("B=1", {"B": 1, "Tq": side, "Tk": side}), ("Tq=1", {"B": many, "Tq": 1}),
                            ("Tk=1", {"B": -(-checks.DROPOUT_DRAWS // (dims["h"] * dims["Tq"])), "Tk": 1})):
            shaped = {**dims, **shape}
            example_dims(**shaped, dropout=p)  # what a failure here is about: this call's sizes
            data = cross_inputs(rng, shaped)
            replies, failed = runs_until_failure(module, (data, {}), (data, {"train": True, "seed": seed + 4}))
            if failed:
                continue
            (_, ev), (_, tr) = (outputs(reply, shaped) for reply in replies)
            try:
                checks.dropout_on_weights(tr, ev, p)
            except PropertyFailure as failure:
                if failure.code != "dropout_not_applied":
                    raise
                raise PropertyFailure("weights_not_dropped_at_shape", case=case, **failure.params) from None
        # Built as MultiHeadAttention(d_model, num_heads), by position as the signature orders them:
        # the default, dropout=0.1 (and no other order, such as the Annotated Transformer's).
        example_dims(**dims)  # built without dropout: the example names none
        default = Remote(worker, CLS, positional=("d_model", "num_heads"), d_model=dims["d_model"], num_heads=dims["h"])
        try:
            default.build()
        except SubmissionError as error:
            if not error.raised:
                raise
            raise call_failure(error, "built_by_position_failed") from None
        replies, failed = runs_until_failure(default, (args, {}), (args, {"train": True, "seed": seed + 5}))
        if not failed:
            (_, ev), (_, tr) = (outputs(reply, dims) for reply in replies)
            try:
                checks.dropout_on_weights(tr, ev, DEFAULT_DROPOUT)
            except PropertyFailure as failure:
                if failure.code not in ("dropout_not_applied", "dropout_wrong_rate", "dropout_ignores_p"):
                    raise  # a mistake of the dropout itself (its factor, say), seen at this rate first
                dropout_own_at(worker, dims, DEFAULT_DROPOUT, args, seed + 5)
                raise PropertyFailure("default_dropout_not_the_statements", default=DEFAULT_DROPOUT) from None
        # The layer the statement names: self.dropout, an nn.Dropout of the constructor's p (what
        # a user reads or sets to turn dropout off in a model already built).
        # With dropout=0 too: no nn.Identity (built only then: its example is dropout=0); and at
        # EXACT_P, the p as given (no cap, no rounding).
        for rate in (p, 0.0, EXACT_P):
            example_dims(**dims, dropout=rate)
            built = module if rate == p else build(worker, dims, rate)
            found = built.dropout_p
            require("dropout" not in found or found["dropout"] == rate, "dropout_p_not_kept", p=rate,
                    layers=[f"dropout (p={found.get('dropout')})"])
            require(found.get("dropout") == rate, "dropout_layer_missing", p=rate,
                    found=", ".join(f"{name} (p={value})" for name, value in found.items()) or "no_layers")
    else:
        # Dropout still active in eval (eval_deterministic's mistake): eval's weights are no baseline,
        # the reference's are. Weights that are not the reference's after dropout cannot be judged.
        q, k = (reference.split_heads(reference.linear(t.astype(np.float64), module.params, n), dims["h"])
                for t, n in ((args[0], "W_Q"), (args[1], "W_K")))
        try:
            checks.dropout_on_weights(train_weights, reference.attention(q, k, k)[1], p)
        except PropertyFailure:
            raise PropertyFailure("eval_random_upstream", p=p) from None
    if output_from_weights:
        calling(trained_call)  # the train call the output is read from, not a build made since
        example_dims(**dims, dropout=p)
        # the output the weights give, with dropout once more on W_O's output: dropout twice
        require(np.allclose(trained, from_train, atol=1e-5, rtol=1e-4)
                or not checks.dropped_entrywise(trained, from_train, p), "dropout_on_output_too", p=p)
        expect_close(trained, from_train, "dropout_output_mismatch", p=p)


def longest_gradients(worker, dims):
    """gradients on the longest sequence (past 512 queries),
    the parameters' and the inputs' judged against the reference: a backward that goes wrong only
    past a block of queries or keys (a chunked forward that detaches K beyond its first 128 or 512
    rows, say) shows there, and only there: the loss is on the last rows alone
    (harness.last_rows), whose gradient a mistake past the first block is all of."""
    module, rng = loaded(worker, dims)
    example(**dims, dropout=0.0)
    args = cross_inputs(rng, dims)
    given = tuple(t.astype(np.float64) for t in args)
    upstream = last_rows(gaussian(rng, dims["B"], dims["Tq"], dims["d_model"]))
    calls = [(args, {"grad": True, "upstream": upstream, "input_grads": ["0", "1", "2"]})]

    def checked(i, reply):
        checks.gradients_reach_every_parameter(reply, biased=False)
        out, _, e_out, _ = reference.multi_head_attention_bounded(module.params, dims["h"], *given)
        checks.gradients_judged(module, calls[0], reply, out, e_out, lambda p, changed: reference.multi_head_attention(
            p, dims["h"], *(changed.get(str(k), t) for k, t in enumerate(given)))[0],
            upstream, rng, {str(k): t for k, t in enumerate(given)}, INPUT_NAMES)

    checks.gradients_in_calls(module, calls, checked)


@graded(CLS, "gradients")
@also_at(longest_gradients, dims=FARTHEST_MULTI_HEAD)  # last: past 512 queries
@given(dims=multi_head_dims(min_time=2), p=dropout_rates, seed=seeds, data=st.data())
def test_gradients(worker, dims, p, seed, data):
    """Every parameter gets a finite, nonzero gradient in eval, and in train mode (dropout p) with a
    mask; and, with a mask, no gradient reaches from a query row the keys and values it closes."""
    # Enough query rows (B·h·Tq >= 64) that dropout cannot silence every weight of a correct module.
    dims = {**dims, "B": gradient_batch(dims["B"], dims["h"] * dims["Tq"])}
    module, rng = loaded(worker, dims, dropout=p)
    B, Tq, Tk = dims["B"], dims["Tq"], dims["Tk"]
    row = data.draw(integers(0, Tq - 1), label="row")
    example(**dims, dropout=p, dropout_seed=seed, row=row)
    args, mask = cross_inputs(rng, dims), random_mask(rng, B, Tq, Tk)
    upstream = one_row((B, Tq, dims["d_model"]), row, rng)
    train = {"grad": True, "train": True, "mask": mask}
    everywhere = gaussian(rng, B, Tq, dims["d_model"])
    # the eval call with autograd on, the inputs requiring grad too (as the outputs of layers that train)
    calls = [(args, {"grad": True, "upstream": everywhere, "input_grads": ["0", "1", "2"]}),
             (args, {**train, "seed": seed, "upstream": everywhere, "input_grads": ["0", "1", "2"]}),
             (args, {"grad": True, "mask": mask, "upstream": upstream, "input_grads": ["0", "1", "2"]})]
    # self-attention on a long sequence, one tensor as query, key and value (as a transformer calls
    # it: a module that packs K and V when key is value trains them too; a backward written by hand
    # in blocks of keys goes wrong only beyond the first block); last, the inputs at the largest
    # magnitude reference_match compares, where gradients must be finite (one written by hand
    # without the softmax's max overflows there; their values are float32's to round)
    x_long = gaussian(rng, 1, long_time(rng), dims["d_model"])
    on_long = gaussian(rng, *x_long.shape)
    calls += [((x_long, x_long, x_long), {"grad": True, "upstream": on_long}),
              (tuple(t * np.float32(max(INPUT_SCALES)) for t in args),
               {"grad": True, "upstream": everywhere, "input_grads": ["0", "1", "2"]})]

    right = []  # whether the eval forward pass (call 0) is the reference's
    rows = []  # whether the train-mode call must reach every row: the eval call's do

    def checked(i, reply):
        if i > 0 and not checks.outputs_finite(reply):
            checks.not_finite_for_autograd_alone(module, calls[i])
            return  # NaN out of the masked forward pass itself (a mask read the other way): not a gradient's fault
        inputs64 = [t.astype(np.float64) for t in args]
        if i == 4:
            checks.gradients_finite_when_large(reply)
        elif i == 0:
            checks.gradients_reach_every_parameter(reply, biased=False)
            out, _, e_out, _ = reference.multi_head_attention_bounded(module.params, dims["h"], *inputs64)
            right.append(checks.gradients_judged(
                module, calls[0], reply, out, e_out, lambda p, changed: reference.multi_head_attention(
                    p, dims["h"], *(changed.get(str(i), t) for i, t in enumerate(inputs64)))[0],
                everywhere, rng, dict(zip("012", inputs64)), INPUT_NAMES))
            rows.append(right[0] or checks.rows_reached(reply, module.params))
        elif i == 1:
            eval_weights = reference.multi_head_attention(module.params, dims["h"], *inputs64, mask)[1]
            # rows left without a gradient by train-mode weights that are no dropout of eval's
            # (renormalized after it: a row of one survivor is a constant 1) are train_dropout's
            checks.gradients_reach_every_parameter_in_train(module, calls[i], reply, biased=False, rows=rows[0] and (
                not right[0] or train_weights_are_dropout(reply, eval_weights, p)))
            # train mode with autograd on, as training runs: judged from the weights returned where
            # they are a dropout of the reference's, else against its own forward pass; either way its
            # output must be the one without autograd, which train_dropout judges
            def moved(changed):
                return [changed.get(str(i), t) for i, t in enumerate(inputs64)]

            if right[0] and checks.train_gradients_match_reference(
                    reply, module.params, eval_weights, p, lambda params, weights, changed: reference.multi_head_output_from_weights(
                        params, dims["h"], moved(changed)[2], weights),
                    lambda params, changed: reference.multi_head_attention(params, dims["h"], *moved(changed), mask)[1],
                    everywhere, rng, dict(zip("012", inputs64)), INPUT_NAMES):
                checks.same_without_autograd(module, calls[i], reply)
            else:
                checks.gradients_are_the_forwards(module, calls[i], reply, everywhere)
        elif i == 3:
            checks.gradients_reach_every_parameter(reply, biased=False)
            long64 = x_long.astype(np.float64)
            out, _, e_out, _ = reference.multi_head_attention_bounded(module.params, dims["h"], long64, long64, long64)
            checks.gradients_judged(module, calls[3], reply, out, e_out, lambda p, _: reference.multi_head_attention(
                p, dims["h"], long64, long64, long64)[0], on_long, rng)
        else:
            blocked = mask[:, row, :] == 0
            out, weights, e_out, e_weights = reference.multi_head_attention_bounded(module.params, dims["h"], *inputs64, mask)
            if checks.agrees_with_reference(reply, 0, out, e_out) and checks.agrees_with_reference(reply, 1, weights, e_weights):
                for key, what in (("1", "key"), ("2", "value")):
                    checks.no_gradient_where_blocked(reply.input_grads.get(key), blocked, what, row)
                checks.gradients_match_reference(
                    reply, module.params, lambda p, changed: reference.multi_head_attention(
                        p, dims["h"], *(changed.get(str(i), t) for i, t in enumerate(inputs64)), mask)[0],
                    upstream, rng, dict(zip("012", inputs64)), INPUT_NAMES)
            else:  # judged against its own forward pass: a leak there is masked_zero's, not a second loss here
                checks.no_gradient_where_its_forward_is_blind(module, calls[2], reply, blocked, row, {"1": "key", "2": "value"})

    checks.gradients_in_calls(module, calls, checked)
    # A loss on the weights it returns trains W_Q and W_K through them.
    inputs64, on_weights = [t.astype(np.float64) for t in args], gaussian(rng, B, dims["h"], Tq, Tk)
    checks.gradients_through_weights(module, (args, {"grad": True, "backward_from": 1, "upstream": on_weights}),
                                     lambda params: reference.multi_head_attention(params, dims["h"], *inputs64)[1],
                                     reference.multi_head_attention_bounded(module.params, dims["h"], *inputs64)[3],
                                     on_weights, rng)
    # The module as it builds itself can train, from the weights it returns too.
    checks.trains_from_its_own_start(lambda: build(worker, dims, 0.0), args, weights=("W_Q.weight", "W_K.weight"),
                                     one_key=(args[0], args[1][:, :1], args[2][:, :1]))


@graded(CLS, "large_inputs")
@also_at(dims=LONGEST_MULTI_HEAD, turn=1)  # a fill chosen by the length (-1e4 past 64 positions, say)
@given(dims=multi_head_dims(min_time=2), turn=mask_turns)
def test_large_inputs(worker, dims, turn):
    module, rng = loaded(worker, dims)
    # Scores of magnitude ~1e6: a finite fill such as -1e4 no longer keeps masked weights at 0;
    # masks of every dtype and, over the examples, every shape (a fill chosen by the mask's dtype or
    # rank: an additive -1e4 for 4-D masks, say). Where that fails, the same calls at magnitude ~1:
    # what fails there already (a mask read the other way, a softmax over the wrong axis) is
    # masked_zero's or rows_sum_to_one's mistake, not a matter of magnitude.
    args, masks = cross_inputs(rng, dims, scale=1e3), masks_of_every_dtype(rng, mask_shapes(dims), turn)
    if dims["Tq"] >= LONGEST_MULTI_HEAD["Tq"]:  # a fill chosen by the length: rows with one open key show it
        masks = [first_rows_one_key(mask) for mask in masks]
    # each masked call in one of the modes a model is run in (harness.LARGE_INPUT_MODES)
    calls = [(args, {}), *((cross_inputs(rng, dims, scale=1e3), {"mask": mask, **large_input_mode(i, turn)})
                           for i, mask in enumerate(masks))]
    B, Tq, Tk = dims["B"], dims["Tq"], dims["Tk"]  # a mask form it cannot take (or answers with other shapes): masked_zero's
    def shrunk(call):
        return tuple((t / np.float32(1e3)).astype(np.float32) for t in call[0]), call[1]

    (replies, kept), calls = unless_autograd_is_off(lambda calls: runs_skipping(
        module, calls, range(1, len(calls)), [(B, Tq, dims["d_model"]), (B, dims["h"], Tq, Tk)], below=shrunk), calls)
    calls, masks = [calls[i] for i in kept], [masks[i - 1] for i in kept[1:]]
    small = [shrunk(call) for call in calls]
    large = [outputs(reply, dims) for reply in replies]
    checks.stable_when_large(large, [reference.head_mask(mask) for mask in masks],
                             lambda: [outputs(reply, dims) for reply in module.runs(*small)],
                             [reply.call for reply in replies])
    # Where a score beats all others by far, its weight is 1: unless the module changed the scores.
    h = dims["h"]
    winners = [reference.decided(*reference.multi_head_scores_bounded(module.params, h, *(t.astype(np.float64) for t in big[:2])),
                                 reference.head_mask(options.get("mask"))) for big, options in calls]

    def right_below():
        """The same calls at magnitudes ~1 and ~30 give the reference's outputs and weights: a module
        wrong at 30 already (scores clamped to ±50, say) is reference_match's to name."""
        for factor in (1.0, max(INPUT_SCALES)):
            scaled = [(tuple((t * np.float32(factor / 1e3)).astype(np.float32) for t in big), options) for big, options in calls]
            got = [outputs(reply, dims) for reply in module.runs(*scaled)]
            if not all(checks.is_the_reference(g, reference.multi_head_attention_bounded(
                    module.params, h, *(t.astype(np.float64) for t in args_i), options.get("mask")))
                    for g, (args_i, options) in zip(got, scaled)):
                return False
        return True

    checks.winners_kept_when_large([weights for _, weights in large], winners, right_below)
    # Where every head's is, the output is W_O of the winners' values: unless it comes from another
    # path than the weights (scaled_dot_product_attention with a finite mask fill, say).
    checks.outputs_kept_when_large([out for out, _ in large], [reference.multi_head_decided(
        module.params, h, *(t.astype(np.float64) for t in big), options.get("mask")) for big, options in calls],
        right_below, "large_output_not_from_weights")


@graded(CLS, "device")
@given(dims=multi_head_dims())
def test_device(worker, dims):
    """On meta (and cuda), in eval and in train mode, after one call on the CPU (what forward keeps
    in self must move with the module): a dropout mask made without device= only shows in train mode."""
    module, rng = loaded(worker, dims, dropout=0.2)
    args, mask = cross_inputs(rng, dims), masks(rng, dims)[0]
    B, Tq, Tk, h, d = dims["B"], dims["Tq"], dims["Tk"], dims["h"], dims["d_model"]
    shapes = [(B, Tq, d), (B, h, Tq, Tk)]
    checks.ran_once_on_cpu(lambda: module.run(*args, mask=mask))
    for train in (False, True):  # in train mode, a call that fails on the CPU too is train_dropout's
        checks.runs_on_device(lambda device: module.run(*args, mask=mask, device=device, train=train), "meta", shapes,
                              fallbacks=[lambda device: module.run(*args, device=device, train=train)],
                              cpu_failure_is_mine=not train, fresh=lambda device, **moved: loaded(worker, dims, dropout=0.2)[0]
                              .run(*args, mask=mask, device=device, train=train, **moved))
    if worker.sees_cuda(CLS):
        checks.runs_on_device(lambda device: module.run(*args, mask=mask, device=device, train=True), "cuda", shapes)
        reply = checks.runs_on_device(lambda device: module.run(*args, mask=mask, device=device), "cuda", shapes)
        expected = reference.multi_head_attention(module.params, h, *(t.astype(np.float64) for t in args), mask)[0]
        expect_close(outputs(reply, dims)[0], expected, "reference_mismatch", what="output_cuda", masked=True)
    checks.runs_after_moving(module, (args, {"mask": mask}), "meta")  # last: the module itself stays there


def attends_by_similarity(worker, dims):
    """attends once more, on more positions, in self-attention (one tensor as query, key and
    value), with the input and twice it: each head's weights are a softmax of scores quadratic in
    the input (checks.scores_from_similarity), not anything else that moves with queries and keys."""
    module = build(worker, dims, load_seed=parameter_seed(dims), required=("W_Q", "W_K"))
    x = cross_inputs(rng_for(dims), dims)[0]
    scaled = x * np.float32(checks.INPUT_FACTOR)
    # each call on a module of its own: a module that keeps something from a call is reference_match's
    replies = [module.run(x, x, x), module.twin().run(scaled, scaled, scaled)]
    checks.scores_from_similarity(*(outputs(reply, dims)[1] for reply in replies))


@graded(CLS, "attends")
@also_at(attends_by_similarity, dims=SIMILARITY_MULTI_HEAD)
@given(dims=multi_head_dims(min_time=2))
def test_attends(worker, dims):
    """The weights come from query–key similarity: the same module with its keys multiplied
    (W_K scaled by checks.SCALE_FACTOR) must return other weights, and another output; and the
    rows of each head must differ from one query to the next (checks.rows_differ); keys of the other sign must move
    them too (checks.key_sign_matters). W_Q and W_K are
    all it takes: a module without W_O (parameter_count's business) is judged on its weights."""
    def module(scale):
        return build(worker, dims, load_seed=parameter_seed(dims), load_scale=scale, required=("W_Q", "W_K"))

    def weights(params):
        q, k = (reference.split_heads(reference.linear(t, params, n), dims["h"])
                for t, n in ((query, "W_Q"), (key, "W_K")))
        return reference.attention(q, k, k)[1]

    modules = [module(scale) for scale in (None, checks.layer_scale("W_K"), checks.layer_scale("W_K", factor=-1.0))]
    args = cross_inputs(rng_for(dims), dims)
    got = [outputs(m.run(*args), dims) for m in modules]
    query, key, value = (t.astype(np.float64) for t in args)
    expected = [weights(m.params) for m in modules]
    checks.responds_to("keys", got[0][1], got[1][1], *expected[:2], "weights", "W_K")
    queried = module(checks.layer_scale("W_Q"))
    checks.key_sign_matters((got[0][1], got[2][1], expected[0], expected[2]),
                            lambda: (got[0][1], outputs(queried.run(*args), dims)[1], expected[0], weights(queried.params)),
                            "weights", "W_K")
    checks.rows_differ(got[0][1], expected[0])
    if not modules[0].missing_layers:
        want = [reference.multi_head_attention(m.params, dims["h"], query, key, value)[0] for m in modules[:2]]
        checks.responds_to("keys", got[0][0], got[1][0], *want, "output", "W_K")