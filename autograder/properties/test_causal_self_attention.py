"""CausalSelfAttention(cfg): forward(x, fused=False) -> (B,T,C) for any T <= block_size."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from . import checks, reference
from .failures import PropertyFailure, call_at_fault, calling, close, example, example_dims, expect_close, require
from .harness import (unless_autograd_is_off, BUILD_CONFIG, INPUT_SCALES, LONG_TIMES, Remote, also_at, copy_calls, params_in_turn, gaussian, mid_dims, gradient_batch, graded, last_rows, long_time, one_row,
                      runs_until_failure)
from .strategies import another_rate, DROPOUT_RATES, EDGE_RATES_CAUSAL, FARTHEST_CAUSAL, FARTHEST_GRADIENTS_CAUSAL, LONGEST_CAUSAL, ODD_HEADS_CAUSAL, SIMILARITY_CAUSAL, EXACT_P, NEAR_ONE_P, RARE_CALLS, RARE_CAUSAL, RARE_P, SMALL_P, WIDE_CAUSAL, causal_dims, dropout_rates, integers, parameter_seed, rng_for, seeds
from ..worker.submission_errors import SubmissionError

CLS = "CausalSelfAttention"


def build(worker, dims, dropout=0.0, load_seed=None, **load):
    """The example's module. load: Remote's other options (load_scale, required, then_set)."""
    example(**dims, dropout=dropout)
    return another(worker, dims, dropout, load_seed, **load)


def another(worker, dims, dropout=0.0, load_seed=None, **load):
    """One more module in the same example (what was recorded of the example stays)."""
    C = dims["n_embd"]
    return Remote(worker, CLS, load_seed, **load, layer_shapes={"qkv": (3 * C, C), "proj": (C, C)},
                  n_embd=C, n_head=dims["n_head"], block_size=dims["block_size"], dropout=dropout)

def loaded(worker, dims, dropout=0.0):
    """A module with the grader's parameters (module.params) and the rng of its inputs."""
    return build(worker, dims, dropout, load_seed=parameter_seed(dims)), rng_for(dims)


def output(reply, dims):
    return reply.output(0, (dims["B"], dims["T"], dims["n_embd"]), "output")


def inputs(rng, dims, scale=1.0):
    return gaussian(rng, dims["B"], dims["T"], dims["n_embd"], scale=scale)


def expected(params, dims, x):
    return reference.causal_self_attention(params, dims["n_head"], x.astype(np.float64))


# causality's long calls: the statement's longest sequence (300), past 256: a mask built from
# positions of a narrow dtype (uint8 wraps after 255) leaks only there.
LONG_CAUSALITY = LONGEST_CAUSAL["T"]

# What the worker calls the input (positional by index) -> the statement's name.
INPUT_NAMES = {"0": "x"}


def two_lengths(dims, longer):
    """Two lengths T1 < T2 <= block_size (equal only when block_size is 1)."""
    T, block = dims["T"], dims["block_size"]
    if T < block:
        return T, min(block, T + longer)
    return max(1, T - longer), T


@graded(CLS, "shapes")
@given(dims=causal_dims(), longer=st.integers(1, 3), fused=st.booleans())
def test_shapes(worker, dims, longer, fused):
    """One module, any length up to block_size in any order, any memory layout: T1, then a longer T2
    on the same module, then that input laid out non-contiguously, on one path or the other (drawn)."""
    module = build(worker, dims)
    first, second = two_lengths(dims, longer)
    short, long = {**dims, "T": first}, {**dims, "T": second}
    example(**short, T2=second)
    rng = rng_for(dims)
    x, x2 = inputs(rng, short), inputs(rng, long)
    path = {"fused": True} if fused else {}
    calls = [((x,), {}), ((x2,), path), ((x2,), {**path, "noncontiguous": True})]
    checks.shapes_across_calls(module, calls, lambda i, reply: [output(reply, short if i == 0 else long)],
                               lambda: build(worker, short), (first, second), INPUT_NAMES)


@graded(CLS, "parameter_count")
@given(dims=causal_dims())
def test_parameter_count(worker, dims):
    module = build(worker, dims)
    C = dims["n_embd"]
    checks.parameters_are(module, 4 * C * C + 4 * C, "4·C² + 4·C", biased=True)


@graded(CLS, "mask_buffer")
@also_at(dims=LONGEST_CAUSAL)  # a mask built from positions of a narrow dtype (uint8) is wrong past 256 only
@given(dims=causal_dims())
def test_mask_buffer(worker, dims):
    module = build(worker, dims)
    bs = dims["block_size"]
    require("mask" not in module.param_shapes, "mask_is_parameter")
    require("mask" in module.buffers, "mask_missing", found=sorted(module.buffers))
    buffer = module.buffers["mask"]
    require(buffer["shape"] == [1, 1, bs, bs], "shape_mismatch", what="mask",
            expected=[1, 1, bs, bs], got=buffer["shape"])
    require(buffer["dtype"] == "bool", "mask_dtype", got=buffer["dtype"])
    require(not buffer["persistent"] and "mask" not in module.state_dict, "mask_persistent")
    # The state_dict holds the parameters alone (the statement): a checkpoint of the statement's
    # module loads into this one with strict=True, and this one's into the statement's. Another
    # persistent buffer (nanoGPT's "bias", a registered scale) breaks that both ways.
    extra = sorted(set(module.state_dict) - set(module.param_shapes))
    require(not extra, "state_dict_extra", names=extra)
    values = buffer["values"]
    require(isinstance(values, np.ndarray) and values.shape == (1, 1, bs, bs)
            and np.array_equal(values[0, 0], np.tril(np.ones((bs, bs), bool))), "mask_not_lower_triangular")


@graded(CLS, "causality")
@given(dims=causal_dims(min_time=2), data=st.data())
def test_causality(worker, dims, data):
    module, rng = loaded(worker, dims)
    T = dims["T"]
    position = data.draw(integers(1, T - 1), label="position")
    example(**dims, position=position)
    x = inputs(rng, dims)
    before = output(module.run(x), dims)
    changed_later = x.copy()
    changed_later[:, position] = gaussian(rng, dims["B"], dims["n_embd"])
    after = output(module.run(changed_later), dims)
    expect_close(after[:, :position], before[:, :position], "future_leak", atol=1e-6, position=position)
    # NaN on ordinary inputs: a row of the causal mask with no open position, not even the token's own.
    nan = ~np.isfinite(before)
    if nan.any():
        raise PropertyFailure("output_not_finite", count=int(nan.sum()), position=int(np.argwhere(nan)[0][1]))
    # ...and the past does reach the future: changing token 0 moves the last output.
    perturbed = x.copy()
    perturbed[:, 0] = gaussian(rng, dims["B"], dims["n_embd"], scale=3.0)
    after = output(module.run(perturbed), dims)
    require(np.abs(after[:, -1] - before[:, -1]).max() > 1e-6, "past_ignored", T=T)
    # The fused path in eval, the same way: sdpa called without is_causal=True (or with a mask of
    # another convention) lets the future in; then under torch.inference_mode() (a validation pass:
    # is_causal=not torch.is_inference_mode_enabled() leaks there only). A fused path that raises is
    # fused_equivalence's.
    for mode in ({"fused": True}, {"fused": True, "inference": True}):
        replies, failed = runs_until_failure(module, ((x,), mode), ((changed_later,), mode))
        if not failed:
            fused_before, fused_after = (output(reply, dims) for reply in replies)
            calling(replies[1].call)
            expect_close(fused_after[:, :position], fused_before[:, :position], "future_leak_fused", atol=1e-6,
                         position=position)
    # In train mode too, on both paths, under one seed (the same dropout masks for both inputs): a
    # fused path that asks for is_causal=True in eval only lets the future in there.
    # Judged on a path only where it runs in train mode (a call that raises there is train_dropout's)
    # and where, in eval, it gives the explicit path's output (a fused path wrong in eval too, not
    # causal say, is fused_equivalence's).
    trained = loaded(worker, dims, dropout=0.25)[0]
    future = x.copy()
    future[:, position] = gaussian(rng, dims["B"], dims["n_embd"])
    evaluated, failed = runs_until_failure(trained, ((x,), {"fused": True}))
    fused_right = not failed and np.allclose(output(evaluated[0], dims), before, atol=1e-5, rtol=1e-4)
    for fused in (False, True):
        if fused and not fused_right:
            continue
        switches = {"train": True, "seed": 1, "fused": fused}
        replies, failed = runs_until_failure(trained, *(((data,), switches) for data in (x, future, x)))
        if failed:  # train_dropout's, where its form of the call (another p and seed) fails too, first on its module
            theirs = loaded(worker, dims, dropout=0.3)[0]
            if checks.attempted(lambda: theirs.run(x, train=True, seed=7, fused=fused))[1] is None:
                raise failed[1]
            continue
        before_t, after_t, again = (output(reply, dims)[:, :position + 1] for reply in replies)
        if checks.train_output_leaks(before_t, after_t, again):
            expect_close(after_t[:, :position], before_t[:, :position], "future_leak_train", atol=1e-6,
                         position=position, path=f"fused={fused}")
    # ...and at a length beyond every other example's, on a module with a block_size that long and
    # the same parameters: a mask of a fixed size (or anything else made for short sequences) leaks there.
    # Two tokens changed in turn: one drawn, and the last (every earlier row must ignore it).
    long = {**dims, "B": 1, "T": LONG_CAUSALITY, "block_size": LONG_CAUSALITY}
    positions = sorted({int(rng.integers(1, LONG_CAUSALITY)), LONG_CAUSALITY - 1})
    example(**long, positions=positions)  # what a failure below is about
    x = inputs(rng, long)
    perturbed = [x.copy() for _ in positions]
    for changed, position in zip(perturbed, positions):
        changed[:, position] = gaussian(rng, 1, dims["n_embd"])
    replies, failed = runs_until_failure(another(worker, long, 0.0, load_seed=parameter_seed(dims)),
                                         ((x,), {}), *(((changed,), {}) for changed in perturbed))
    if not failed:  # a length the module cannot take is reference_match's to name
        before, *afters = (output(reply, long) for reply in replies)
        for after, position in zip(afters, positions):
            expect_close(after[:, :position], before[:, :position], "future_leak_long", atol=1e-6,
                         position=position, T=LONG_CAUSALITY)


def reference_beyond_examples(worker, dims, size, fused=False):
    """reference_match (fused_equivalence with fused) at a real model's width and head count
    (size "wide"), at a head count the strategies never draw (size "heads"), on the longest
    sequence (size "longest") or past it with the widest heads (size "farthest"): one input, on
    the explicit path (or the fused one); at the real model's width, on the explicit path, passed
    by keyword, as the statement names forward's parameters (forward(x=x, fused=False))."""
    module, rng = loaded(worker, dims, dropout=0.2)
    example(**dims, dropout=0.2)
    x = inputs(rng, dims)
    call = ((), {"x": x, "fused": fused}) if size == "wide" and not fused else ((x,), {"fused": fused})
    said = ({"width": f"n_embd = {dims['n_embd']}, n_head = {dims['n_head']}"} if size in ("wide", "heads")
            else {"positions": dims["T"], "head_size": dims["n_embd"] // dims["n_head"]})
    checks.matches_beyond_examples(
        module, [call], lambda i, reply: [output(reply, dims)],
        lambda i: [(expected(module.params, dims, x), "output")],
        f"{'fused' if fused else 'reference'}_mismatch_{size}", **said)


@graded(CLS, "reference_match")
@also_at(reference_beyond_examples, dims=FARTHEST_CAUSAL, size="farthest")  # last: past 512 positions, heads of 160
@also_at(reference_beyond_examples, dims=LONGEST_CAUSAL, size="longest")  # after the wide one
@also_at(reference_beyond_examples, dims=WIDE_CAUSAL, size="wide")
@also_at(reference_beyond_examples, dims=ODD_HEADS_CAUSAL, size="heads")
@given(dims=causal_dims(min_block=LONG_TIMES[0], max_block=LONG_TIMES[1]), short=st.integers(2, 7),
       scales=st.permutations(INPUT_SCALES))
def test_reference_match(worker, dims, short, scales):
    """Calls on one module, an input at each scale: one of the full block_size, as long as the
    other classes' long call (a window over the last few tokens, or anything else that goes wrong
    only on long sequences, shows there), then two short ones (nothing kept from the longer call:
    a mask cut from its end sees the future), then the first short one again, once more under
    torch.inference_mode(), a batch of sizes in between (harness.MID_TIMES), before and after the
    parameters change in place (through .data, then as optimizer.step() writes them, which
    `_version` counts). Longer after shorter is
    `shapes`' business. Short ones of 2 positions at least: with one, every weight row is [1] and
    a mistake in the heads or the weights matches there, so a miss of the long call alone would
    wrongly read as one about length."""
    dims = {**dims, "T": short}
    module, rng = loaded(worker, dims, dropout=0.2)
    lengths = [dims["block_size"], short, short, short, short, short]
    example(**dims, dropout=0.2, scales=list(scales), lengths=lengths)
    first, second, third = scales
    xs = [inputs(rng, {**dims, "T": T}, scale) for T, scale in zip(lengths, scales)]
    reload, _ = module.reloading(int(rng.integers(2 ** 31)))
    copy_reload, _ = module.reloading(int(rng.integers(2 ** 31)))
    # in_place: the input written into the tensor of the call before (a cache keyed on a tensor's
    # identity or address sees other values, or the same after the parameters changed)
    # a batch of sizes in between (harness.MID_TIMES) after the long call (longer after shorter is
    # shapes' business), and the second input under torch.inference_mode() (a validation pass)
    # before the parameters change
    between = mid_dims(rng, dims, "T")
    calls = [((xs[0],), {}), ((inputs(rng, between),), {}), ((xs[1],), {}), ((xs[2],), {"in_place": True}),
             ((xs[1],), {}), ((xs[1],), {"inference": True}),
             ((xs[1],), {"reload": reload, "in_place": True}), ((xs[1],), {"reload": {**reload, "step": True}}),
             *copy_calls((xs[2],), copy_reload)]
    magnitudes = [first, 1.0, second, third, second, second, second, second, third, third]
    shapes = [{**dims, "T": dims["block_size"]}, between, *({**dims, "T": short} for _ in range(8))]
    params = params_in_turn(module, calls)[0]

    def wanted(i):
        (x,), options = calls[i]
        out, bound = reference.causal_self_attention_bounded(params[i], dims["n_head"], x.astype(np.float64))
        return [(out, bound, magnitudes[i], "output")]

    heads = dims["n_head"] % 4 + 1  # another head count, head size and block_size
    checks.reference_across_calls(module, calls, lambda i, reply: [output(reply, shapes[i])], wanted,
                                  lambda: loaded(worker, dims, dropout=0.2)[0], INPUT_NAMES,
                                  {0: ("causal_reference_mismatch_long", {"positions": dims["block_size"]}, {1}),
                                   1: ("reference_mismatch_mid", {"batch": between["B"], "positions": between["T"]}),
                                   5: ("inference_mode_changes_output", {}),
                                   7: ("reference_mismatch_after_step", {}),
                                   8: ("copy_computes_with_the_original", {}), 9: ("original_changed_by_its_copy", {})},
                                  another=lambda: another_configuration(worker, {
                                      **dims, "n_head": heads, "block_size": dims["block_size"] + 1,
                                      "n_embd": heads * (dims["n_embd"] // dims["n_head"] + 1)}))
    trains_without_dropout_as_in_eval(worker, {**dims, "T": short}, xs[1], second)
    scores_of_a_zero_input(worker, {**dims, "T": short}, xs[1], rng)


def scores_of_a_zero_input(worker, dims, x, rng):
    """Once more, with qkv's bias at zero and one position's input a zero vector (a padding token):
    its query and key are zero, so its row of scores and its column are exactly 0, which a mask
    read from the scores (`att * mask`, then `masked_fill(att == 0, ...)`) takes for masked
    positions. The other classes' zero-vector calls need no bias set: their layers have none."""
    module = loaded(worker, dims)[0]
    reload, changed = module.reloading(int(rng.integers(2 ** 31)), unbiased=("qkv",))
    position = int(rng.integers(dims["T"]))
    zeroed = x.copy()
    zeroed[:, position] = 0.0
    reply = module.run(zeroed, reload=reload)
    want, bound = reference.causal_self_attention_bounded(changed, dims["n_head"], zeroed.astype(np.float64))
    calling(reply.call)
    checks.matches_reference(output(reply, dims), want, bound, "causal_reference_mismatch_zero_input",
                             what="output", position=position)


def trains_without_dropout_as_in_eval(worker, dims, x, magnitude):
    """In train() with dropout 0 (Cfg's default, nanoGPT's), both paths give the reference's output,
    as in eval: a branch taken when there is no dropout to apply (sdpa without is_causal=True, say)
    is met nowhere else. Judged on a path only where its eval call matches (a fused path wrong in
    eval is fused_equivalence's) and the train call runs (a refusal is train_dropout's)."""
    module = loaded(worker, dims, dropout=0.0)[0]
    want, bound = reference.causal_self_attention_bounded(module.params, dims["n_head"], x.astype(np.float64))
    replies, failed = runs_until_failure(module, *(((x,), {"fused": fused, **mode})
                                                   for fused in (False, True) for mode in ({}, {"train": True})))
    if failed:
        return
    for (evaluated, trained), fused in zip((replies[:2], replies[2:]), (False, True)):
        if checks.within_reference([output(evaluated, dims)], [(want, bound, magnitude, "output")]):
            calling(trained.call)
            checks.matches_reference(output(trained, dims), want, bound, "train_without_dropout_mismatch", magnitude,
                                     what="output", path=f"fused={fused}")


def another_configuration(worker, dims):
    """Build and call a module of these dims (another configuration); its description."""
    module, rng = loaded(worker, dims)
    module.run(inputs(rng, dims))
    return f"n_embd={dims['n_embd']}, n_head={dims['n_head']}, block_size={dims['block_size']}"


def layers_not_holding(module, p):
    """The dropout layers of a module built with dropout p that hold another p, as the message names them."""
    return [f"{name} (p={value})" for name, value in module.dropout_p.items()
            if name in ("attn_drop", "resid_drop") and value != p]


def another_dropout(worker, dims, p):
    """Build a module of these dims with another dropout p and call it in train mode on both paths; its description."""
    other = another_rate(p)
    module, rng = loaded(worker, dims, dropout=other)
    data = inputs(rng, dims)
    module.runs(((data,), {"train": True}), ((data,), {"train": True, "fused": True}))
    return f"n_embd={dims['n_embd']}, n_head={dims['n_head']}, dropout={other}"


@graded(CLS, "batch_independence")
@given(dims=causal_dims(min_batch=2))
def test_batch_independence(worker, dims):
    module, rng = loaded(worker, dims)
    checks.batch_independent(module.run, [inputs(rng, dims)], rng, lambda r, b: output(r, {**dims, "B": b}),
                             gradient_batch(dims["B"] + 1, dims["T"]))


@graded(CLS, "eval_deterministic")
@given(dims=causal_dims(min_time=2), seed=seeds)
def test_eval_deterministic(worker, dims, seed):
    """In eval, on each path, the same input twice in a row (other seeds: dropout must be off),
    then another input, then the first input again: always the same output."""
    module, rng = loaded(worker, dims, dropout=0.5)
    x = inputs(rng, dims)
    xs = [x, x, inputs(rng, dims), x]
    for fused in (False, True):
        checks.eval_repeatable(module, [((x_i,), {"seed": seed + i, "fused": fused}) for i, x_i in enumerate(xs)],
                               lambda i, reply: [output(reply, dims)])


def rare_dropout(worker, dims):
    """train_dropout at a rate no strategy draws (strategies.RARE_P), RARE_CALLS calls on each
    path: resid_drop's zeros in the outputs, then, with resid_drop off (as the statement lets a
    user set it on a built module), attn_drop's drops, each of which moves its row of the output
    away from both eval's and eval's with the weights divided by (1 - p) (an attention dropout
    that drops none of a row, or does not act at all). Where eval's output is the reference's,
    what each layer left whole is rescaled by 1/(1 - p) (checks.left_whole_rescaled: a dropout
    that skips the rescale where p is small), resid_drop's on a module with attn_drop off."""
    module, rng = loaded(worker, dims, dropout=RARE_P)
    attn_only = another(worker, dims, RARE_P, load_seed=parameter_seed(dims), then_set={"resid_drop.p": 0.0})
    resid_only = another(worker, dims, RARE_P, load_seed=parameter_seed(dims), then_set={"attn_drop.p": 0.0})
    x = inputs(rng, dims)
    weights = RARE_CALLS * dims["B"] * dims["n_head"] * dims["T"] * (dims["T"] + 1) // 2
    for fused in (False, True):
        path = f"fused={fused}"
        trained = [output(reply, dims) for reply in rare_calls(module, x, fused)]
        checks.drops_at_a_rare_rate([t == 0 for t in trained], RARE_P, RARE_CALLS, trained[0].size * RARE_CALLS,
                                    f"resid_drop ({path})")
        bias = attn_only.params.get("proj.bias", 0.0)
        evaluated = output(attn_only.run(x, fused=fused), dims)
        undropped = (evaluated - bias) / (1.0 - RARE_P) + bias
        attn_trained = [output(reply, dims) for reply in rare_calls(attn_only, x, fused)]
        moved = [~checks.near(got, undropped) & ~checks.near(got, evaluated) for got in attn_trained]
        checks.drops_at_a_rare_rate(moved, RARE_P, RARE_CALLS, weights, f"attn_drop ({path})")
        if np.allclose(evaluated, expected(attn_only.params, dims, x), atol=1e-5, rtol=1e-4):
            for got in attn_trained:
                checks.left_whole_rescaled(got, evaluated, undropped, RARE_P, "attn_drop", path)
            got = output(resid_only.run(x, fused=fused, train=True, seed=0), dims)
            checks.left_whole_rescaled(got, np.where(got == 0, 0.0, evaluated), np.where(got == 0, 0.0, evaluated / (1.0 - RARE_P)),
                                       RARE_P, "resid_drop", path)
    one_token = {**dims, "n_head": 1, "T": 1}
    high_rate_dropout(worker, {**one_token, "B": HIGH_RATE_ROWS}, EXACT_P)
    high_rate_dropout(worker, {**one_token, "B": NEAR_ONE_ROWS, "n_embd": 2}, NEAR_ONE_P)


# high_rate_dropout's calls: one token each, one head, so that each row of the output draws one
# attn_drop decision (its only weight is 1): ~6 rows kept at EXACT_P, ~51 under a cap at 0.9 (all
# of them dropped with probability 0.9^512 < 1e-23); at NEAR_ONE_P, ~3 rows kept of NEAR_ONE_ROWS,
# ~33 under a cap at 0.999 (none with probability e^-33), two entries a row for resid_drop.
HIGH_RATE_ROWS = 512
NEAR_ONE_ROWS = 32768


def high_rate_dropout(worker, rows, p):
    """Each layer drops with its p where forward uses it, at a rate near 1 that no example draws
    (EXACT_P, NEAR_ONE_P): the layers may keep p as given (dropout_p_not_kept passes) while forward
    caps it (F.dropout(att, min(self.attn_drop.p, 0.9)), dropout_p=min(p, 0.9) in the fused path),
    which every rate drawn leaves right. With one head and one token (rows), attn_drop keeps or
    drops a row's only weight: the row is proj's bias, or bias + proj(v)/(1 - p); resid_drop alone
    keeps entries of eval's output divided by (1 - p). Judged on each path whose eval output is the
    reference's (its miss is reference_match's)."""
    attn_only = another(worker, rows, p, load_seed=parameter_seed(rows), then_set={"resid_drop.p": 0.0})
    resid_only = another(worker, rows, p, load_seed=parameter_seed(rows), then_set={"attn_drop.p": 0.0})
    x = inputs(rng_for(rows), rows)
    want = expected(attn_only.params, rows, x)
    bias = attn_only.params.get("proj.bias", 0.0)
    example_dims(**rows, dropout=p)  # what a failure below is about: these calls
    for fused in (False, True):
        path = f"fused={fused}"
        evaluated, trained = (output(reply, rows) for reply in attn_only.runs(
            ((x,), {"fused": fused}), ((x,), {"fused": fused, "train": True, "seed": 7})))
        if not np.allclose(evaluated, want, atol=1e-5, rtol=1e-4):
            continue
        checks.used_at_a_high_rate((trained - bias)[:, 0, :1], (evaluated - bias)[:, 0, :1], p,
                                   "attention_weights", "attn_drop", path)
        evaluated, trained = (output(reply, rows) for reply in resid_only.runs(
            ((x,), {"fused": fused}), ((x,), {"fused": fused, "train": True, "seed": 8})))
        checks.used_at_a_high_rate(trained, evaluated, p, "output", "resid_drop", path)


def rare_calls(module, x, fused):
    """The replies of RARE_CALLS train-mode calls on x, each under its own seed."""
    return module.runs_in_exchanges([((x,), {"fused": fused, "train": True, "seed": s}) for s in range(RARE_CALLS)])


# resid_drop at SMALL_P: rows of one token as wide as the longest call's, ~40 of their entries dropped
# (none with probability e^-40).
SMALL_RATE_ROWS = 6250


def longest_dropout(worker, dims):
    """train_dropout on the longest sequence (strategies.LONGEST_*), on each path whose eval output
    there is the reference's (a miss in eval is reference_match's or fused_equivalence's, dropout
    left on in eval eval_deterministic's): resid_drop and attn_drop both act
    (checks.dropout_acts_at_shape); and at SMALL_P too, where a dropout skipped below some rate
    acts at none: attn_drop over these ~180k weights (~36 drops, each moving its row away from
    eval's rescaled by 1/(1 - p)), resid_drop over SMALL_RATE_ROWS rows (explicit path: the layer
    is the same on both)."""
    p = 0.2
    module, rng = loaded(worker, dims, dropout=p)
    small = another(worker, dims, SMALL_P, load_seed=parameter_seed(dims), then_set={"resid_drop.p": 0.0})
    x = inputs(rng, dims)
    want = expected(module.params, dims, x)
    bias = module.params.get("proj.bias", 0.0)
    weights = dims["B"] * dims["n_head"] * dims["T"] * (dims["T"] + 1) // 2
    for fused in (False, True):
        path = f"fused={fused}"
        example_dims(**dims, dropout=p)
        evaluated, trained = (output(reply, dims) for reply in module.runs(
            ((x,), {"fused": fused}), ((x,), {"fused": fused, "train": True, "seed": 1})))
        if not np.allclose(evaluated, want, atol=1e-5, rtol=1e-4):
            continue
        checks.dropout_acts_at_shape(want, trained, p, path, f"T={dims['T']}")
        example_dims(**dims, dropout=SMALL_P)
        got = output(small.run(x, fused=fused, train=True, seed=2), dims)
        moved = ~checks.near(got, (evaluated - bias) / (1.0 - SMALL_P) + bias) & ~checks.near(got, evaluated)
        checks.drops_at_a_rare_rate([moved], SMALL_P, 1, weights, f"attn_drop ({path})")
        if not fused:
            rows = {**dims, "T": 1, "B": SMALL_RATE_ROWS}
            resid_only = another(worker, rows, SMALL_P, load_seed=parameter_seed(rows), then_set={"attn_drop.p": 0.0})
            wide = inputs(rng_for(rows), rows)
            live = expected(resid_only.params, rows, wide) != 0
            example_dims(**rows, dropout=SMALL_P)
            got = output(resid_only.run(wide, train=True, seed=3), rows)
            checks.drops_at_a_rare_rate([(got == 0) & live], SMALL_P, 1, int(live.sum()), f"resid_drop ({path})")


@graded(CLS, "train_dropout")
@also_at(longest_dropout, dims=LONGEST_CAUSAL)  # after the rare rate (decorators apply upwards)
@also_at(rare_dropout, dims=RARE_CAUSAL)
@also_at(dims=EDGE_RATES_CAUSAL, seed=11, p=max(DROPOUT_RATES))  # before the rare rate: the examples' own checks at each end
@also_at(dims=EDGE_RATES_CAUSAL, seed=11, p=min(DROPOUT_RATES))
@given(dims=causal_dims(min_time=2), seed=seeds, p=dropout_rates)
def test_train_dropout(worker, dims, seed, p):
    # A batch large enough for checks.DROPOUT_DRAWS output entries (B·T·C) and B·h >= 128
    # attention heads at t = 0: see checks.causal_dropout.
    per_example = dims["T"] * dims["n_embd"]
    dims = {**dims, "B": max(dims["B"], -(-checks.DROPOUT_DRAWS // per_example), -(-128 // dims["n_head"]))}
    module, rng = loaded(worker, dims, dropout=p)
    x = inputs(rng, dims)
    future = x.copy()
    future[:, -1] = gaussian(rng, dims["B"], dims["n_embd"])
    reference_output = expected(module.params, dims, x)
    # Per path: eval, train, train again with no new seed (the next step of a training loop: a new
    # dropout mask), then train under the first seed with the last token changed and unchanged (the
    # same masks, unless the module draws them by what it kept from earlier calls: what came before
    # the last token must not move).
    calls = ((x, False, 0), (x, True, 0), (x, True, None), (future, True, 0), (x, True, 0))
    replies = module.runs(*(((data,), {"fused": fused, "train": train, "seed": None if again is None else seed + again})
                            for fused in (False, True) for data, train, again in calls))
    clean = []  # the paths whose eval output is the reference's and whose train output leaks nothing
    for fused, evaluated, trained, redrawn, changed, again in ((False, *replies[:5]), (True, *replies[5:])):
        path = f"fused={fused}"
        trained = output(trained, dims)
        if np.array_equal(trained, output(evaluated, dims), equal_nan=True):  # nothing dropped under no_grad
            checks.dropout_not_tied_to_autograd(module, ((x,), {"fused": fused, "train": True, "seed": seed}),
                                                output(evaluated, dims), p=p, path=path)
        leaks = checks.train_output_leaks(trained, output(changed, dims), output(again, dims))
        if not leaks and np.allclose(output(evaluated, dims), reference_output, atol=1e-5, rtol=1e-4):
            clean.append(fused)
            first, second = (checks.causal_dropout(module.params, dims["n_head"], x.astype(np.float64), p, y, path)
                             for y in (trained, output(redrawn, dims)))
            seen = (first >= 0) & (second >= 0)  # B·h >= 128 weights drawn twice: see checks.dropout_redrawn
            # Judged where the choices tell drops apart: without proj's bias, a row whose every weight
            # was dropped is all zeros, as if resid_drop had dropped it, so one head shows only "kept".
            if len(np.unique(first[seen])) > 1:
                checks.dropout_redrawn(first[seen], second[seen], p, "first_token_weights")
            if "proj.bias" in module.params:
                checks.first_token_not_shared(first, p)
                checks.first_token_dropout_rate(np.concatenate([first, second]), dims["n_head"], p)
            checks.dropout_kept_under_inference_mode(
                module, ((x,), {"fused": fused, "train": True, "seed": seed}),
                lambda reply: checks.causal_dropout(module.params, dims["n_head"], x.astype(np.float64), p,
                                                    output(reply, dims), path), p=p, path=path)
        else:
            # A bug outside dropout (reference_match's, fused_equivalence's, NaN rows from a mask read
            # the other way or a future seen in train mode: causality's): judge only what does not
            # depend on it, resid_drop's zeros. That bug may be a proj.bias the module has but does
            # not add, which gives the zeros of a proj without bias: either count will do. Unless
            # the bug is x added to the output (the transformer block's residual, written inside
            # the attention): that hides every zero.
            require(not np.allclose(output(evaluated, dims) - x, reference_output, atol=1e-5, rtol=1e-4),
                    "residual_added_upstream", path=path)
            biased = "proj.bias" in module.params
            try:
                checks.resid_dropout_zeros(trained, p, dims["n_head"], biased, path)
            except PropertyFailure as failure:
                if not biased or failure.code != "dropout_wrong_rate":
                    raise
                checks.resid_dropout_zeros(trained, p, dims["n_head"], False, path)
        # Last on this path: a mask kept from an earlier call also changes the draw under one seed,
        # and is dropout_redrawn's to name, right above.
        checks.dropout_follows_seed(trained, output(again, dims), p, "output", path, call=again.call)
    checks.train_draw_unchanged_by_another_instance(lambda: loaded(worker, dims, dropout=p)[0],
                                                    [((x,), {"fused": fused, "train": True, "seed": seed}) for fused in (False, True)],
                                                    lambda reply: output(reply, dims), lambda: another_dropout(worker, dims, p))
    # Dropout acts at every shape the statement allows, on the paths found right above: one example
    # (B=1, a long sequence on a module with a longer block_size and the same parameters) and one
    # token (T=1, many examples): no shape check or shortcut (`if T == 1: y = v`) skips it. Judged
    # against the reference's output (these paths matched it in eval): a module wrong at these
    # shapes in eval too moves away from it anyway, and is reference_match's or causality's.
    long = {**dims, "B": 1, "T": 64, "block_size": 64}
    wide = another(worker, long, p, load_seed=parameter_seed(dims))
    one_token = {**dims, "T": 1, "B": max(checks.DROPOUT_DRAWS // dims["n_embd"], -(-128 // dims["n_head"]))}
    for case, shaped, on in (("B=1", long, wide), ("T=1", one_token, module)):
        data = inputs(rng, shaped)
        for fused in clean:  # a call the module raises on is reference_match's or device's to name
            replies, failed = runs_until_failure(on, ((data,), {"fused": fused, "train": True, "seed": seed}))
            if failed:
                continue
            want = expected(on.params, shaped, data)
            try:
                checks.dropout_acts_at_shape(want, output(replies[0], shaped), p, f"fused={fused}", case)
            except PropertyFailure:
                # wrong at this shape in eval too (NaN rows from a mask cropped from the wrong
                # corner at T=1): reference_match's or causality's, not a dropout skipped here
                evaluated, failed = runs_until_failure(on, ((data,), {"fused": fused}))
                if not failed and np.allclose(output(evaluated[0], shaped), want, atol=1e-5, rtol=1e-4):
                    raise
    # dropout_p is attn_drop's p, read when the call runs (the statement): the same module built
    # without dropout, its attn_drop.p set afterwards (as a user turns dropout on or off in a model
    # already built), drops attention weights on each path; resid_drop stays off. Judged on the
    # paths found right above, on the first rows of x: with B·h >= 64 heads of T >= 2 tokens (192
    # weights at least), a correct dropout leaves every weight whole with probability < 1e-23.
    rows = {**dims, "B": -(-64 // dims["n_head"])}
    example(**rows, dropout=p)  # what a failure below is about: these rows, this module
    later = another(worker, dims, 0.0, load_seed=parameter_seed(dims), then_set={"attn_drop.p": p})
    # Two layers (the statement): setting attn_drop's p leaves resid_drop's at 0.
    require(not clean or later.dropout_p.get("resid_drop") != p, "dropout_layers_shared", p=p)
    # Each layer holds cfg.dropout as given (no cap, no rounding), read from a module built with EXACT_P.
    exact = another(worker, dims, EXACT_P)
    changed = layers_not_holding(exact, EXACT_P)
    require(not changed, "dropout_p_not_kept", p=EXACT_P, layers=changed)
    # The submission's own Cfg given that p keeps it too (a __post_init__ that rounds it to two
    # decimals keeps every rate drawn): the module above was built on the grader's dataclass.
    require(not exact.config_not_kept, "cfg_fields_not_kept", names=exact.config_not_kept)
    for fused in clean:
        evaluated, trained = (output(reply, rows) for reply in later.runs(
            *(((x[:rows["B"]],), {"fused": fused, "train": train, "seed": seed}) for train in (False, True))))
        require(not np.array_equal(evaluated, trained), "attn_drop_p_not_read", path=f"fused={fused}", p=p)
        # With resid_drop's p still 0, no entry of the output is dropped: attn_drop acts on the
        # weights only (a module that applies it to the output too, and never resid_drop, would
        # pass every check where the two share one p). Judged where proj has a bias: without one,
        # a token whose every weight was dropped is rightly all zeros.
        zeroed = int(((trained == 0) & (evaluated != 0)).sum())
        require(not zeroed or "proj.bias" not in module.params, "attn_drop_on_output", path=f"fused={fused}",
                p=p, count=zeroed)
        # One draw per weight, as nn.Dropout on the whole (B, h, T, T) weights makes: not one mask
        # for every head, every query row or every key of a row (dropout of torch.ones(B, 1, T, T)),
        # told from the weights each head kept (resid_drop is off here; see causal_weights_dropped).
        # With one channel per head, dropout on v drops key s for every query, and dropout on the
        # context y row t for every key, exactly: misplaced, not shared (causal_dropout's to name
        # where a head has more channels), so only the heads axis is judged there.
        kept = checks.causal_weights_dropped(module.params, dims["n_head"], x[:rows["B"]].astype(np.float64), p,
                                             trained)
        live = ~np.isnan(kept)
        axes = ((1, "axis_heads"), (2, "axis_queries"), (3, "axis_keys"))
        judged = axes if dims["n_embd"] > dims["n_head"] else axes[:1]
        for axis, name in judged:
            checks.not_shared_along(live & (kept == 0), live, axis, name, p, "attention_weights")
        checks.not_paired(live & (kept == 0), live, p, judged, "attention_weights")
    # resid_drop's p is read when forward runs too, on each path: the same module with only
    # resid_drop.p set afterwards zeroes entries of the output (proj's bias makes them nonzero
    # otherwise: at least 128 entries, all kept with probability < 1e-15).
    if clean and "proj.bias" in module.params:
        resid_later = another(worker, dims, 0.0, load_seed=parameter_seed(dims), then_set={"resid_drop.p": p})
        replies = resid_later.runs(*(((x[:rows["B"]],), {"fused": fused, "train": train, "seed": seed})
                                     for fused in clean for train in (False, True)))
        for fused, evaluated, trained in zip(clean, replies[::2], replies[1::2]):
            evaluated, trained = output(evaluated, rows), output(trained, rows)
            require(((trained == 0) & (evaluated != 0)).any(), "resid_drop_p_not_read", path=f"fused={fused}", p=p)
    # The submission's own Cfg keeps what it is given (the module was built on the grader's
    # dataclass where it did not, so that its other checks are about the module).
    require(not module.config_not_kept, "cfg_fields_not_kept", names=module.config_not_kept)
    # Cfg(n_embd, n_head), by position as the statement writes it, without block_size and dropout:
    # the two values kept as n_embd and n_head (a Cfg whose fields come in another order swaps
    # them), and the statement's defaults, a mask of block_size 16 and dropout layers of p 0.0,
    # read from the module as built. Judged where the submission's own Cfg takes the other fields
    # by name and has defaults for these (else the build fails, and the grader's Cfg is used
    # everywhere else), and where the module built with block_size (later) registers a mask of
    # that size and dropout layers of the p it was given (else mask_buffer's, or the checks above).
    fields = BUILD_CONFIG[CLS]["fields"]
    # sizes unlike each other and the defaults, whatever the example's: a swap then shows
    sizes = {"n_embd": 2 * fields["n_embd"], "n_head": 2 * fields["n_head"]}
    default = Remote(worker, CLS, defaulted=("dropout", "block_size"), positional=("n_embd", "n_head"), **sizes)
    try:
        mask, layers = default.buffers.get("mask"), default.dropout_p
    except SubmissionError as error:
        if not error.raised:
            raise
        return
    example_dims(**sizes)  # what the failures below are about: that module, not the example's
    built_by_position = call_at_fault()  # Cfg(n_embd, n_head)'s build
    cfg_by_position(default, sizes)
    calling(built_by_position)  # cfg_by_position built others since
    given = later.buffers.get("mask")
    if mask is not None and given is not None and given["shape"] == [1, 1, dims["block_size"], dims["block_size"]]:
        block = fields["block_size"]
        if len(mask["shape"]) != 4:  # a placeholder (a 0-d mask, say) instead of one of block_size
            raise PropertyFailure("cfg_default_mask_shape", default=block, shape=str(tuple(mask["shape"])))
        require(mask["shape"][-1] == block, "cfg_default_not_the_statements", field="block_size", default=block,
                got=mask["shape"][-1], call="Cfg(n_embd, n_head)")
    for name in ("attn_drop", "resid_drop"):
        if later.dropout_p.get(name) == (p if name == "attn_drop" else 0.0) and name in layers:
            if layers[name] != fields["dropout"]:
                # given the default by name, do the layers hold it? Else the module changes it
                # (`nn.Dropout(cfg.dropout or 0.1)`), not the Cfg's default
                at_fault = call_at_fault()
                replaced = layers_not_holding(another(worker, dims, fields["dropout"]), fields["dropout"])
                require(not replaced, "dropout_p_not_kept", p=fields["dropout"], layers=replaced)
                calling(at_fault)  # the failure below is the build by Cfg(n_embd, n_head)'s
            require(layers[name] == fields["dropout"], "cfg_default_not_the_statements", field="dropout",
                    default=fields["dropout"], got=layers[name], call="Cfg(n_embd, n_head)")
    if clean:
        cfg_sizes_default(worker, rng)


def cfg_by_position(default, sizes):
    """Cfg(n_embd, n_head) by position kept both (default: the module built so); then every field
    by position, in the statement's order (Cfg(64, 8, 24, 0.25): block_size and dropout swapped
    show only there). One build more, after the first holds."""
    fields = BUILD_CONFIG[CLS]["fields"]
    for built, given in ((default, sizes), (None, {**sizes, "block_size": fields["block_size"] + 8, "dropout": 0.25})):
        if built is None:
            built = Remote(default.worker, CLS, positional=tuple(given), **given)
            try:
                built.build()
            except SubmissionError as error:
                if not error.raised:
                    raise
                return  # a constructor that raises with these: the other checks' to name
        if built.config_not_kept:
            # by name too? Then the fields are not kept at all (a __post_init__ that rounds dropout),
            # whatever their order: said as such, not as an order to fix
            by_position = call_at_fault()
            named = Remote(default.worker, CLS, **given)
            named.build()
            require(not named.config_not_kept, "cfg_fields_not_kept", names=named.config_not_kept)
            calling(by_position)  # the failure below is the build by position's
        call = f"Cfg({', '.join(repr(v) for v in given.values())})"
        require(not built.config_not_kept, "cfg_fields_out_of_order", call=call,
                given=", ".join(f"{k}={v!r}" for k, v in given.items()))


def cfg_sizes_default(worker, rng):
    """Cfg() with no field: the statement's n_embd (qkv's weight is (3·n_embd, n_embd)) and n_head
    (the output of the heads the statement gives, from one call with the grader's parameters; a
    default of another count matches the reference with that count). Judged where the module is
    otherwise right (its eval output on the given sizes is the reference's: the caller's `clean`)
    and its own Cfg has a default for every field; a module of Cfg() that matches no head count
    is reference_match's."""
    fields = BUILD_CONFIG[CLS]["fields"]
    C, heads = fields["n_embd"], fields["n_head"]
    example(B=2, T=5, config="Cfg()")  # what a failure below is about
    default = Remote(worker, CLS, load_seed=int(rng.integers(2 ** 31)), defaulted=tuple(fields))
    try:
        shapes = default.param_shapes
    except (SubmissionError, PropertyFailure) as error:
        if isinstance(error, SubmissionError) and not error.raised:
            raise
        return  # no default for some field, or parameters another check names
    weight = shapes.get("qkv.weight")
    if weight is None or len(weight) != 2:
        return
    require(weight[1] == C, "cfg_default_not_the_statements", field="n_embd", default=C, got=weight[1], call="Cfg()")
    statement = {"qkv.weight": (3 * C, C), "qkv.bias": (3 * C,), "proj.weight": (C, C), "proj.bias": (C,)}
    if any(shapes.get(name, shape) != shape for name, shape in statement.items()):
        return  # layers of other sizes: parameter_count's and the loaded module's to name
    x = gaussian(rng, 2, 5, C)
    try:
        y = default.run(x).output(0, (2, 5, C), "output")
    except (SubmissionError, PropertyFailure) as error:
        if isinstance(error, SubmissionError) and not error.raised:
            raise
        return
    matches = [h for h in range(1, C + 1) if C % h == 0 and
               np.allclose(y, reference.causal_self_attention(default.params, h, x.astype(np.float64)), atol=1e-5, rtol=1e-4)]
    if matches and heads not in matches:
        raise PropertyFailure("cfg_default_not_the_statements", field="n_head", default=heads, got=matches[0], call="Cfg()")


def longest_gradients(worker, dims):
    """gradients on the longest sequence (past 512 positions),
    on the explicit path, the parameters' and x's judged against the reference: a backward that
    goes wrong only past a block of positions (a chunked forward that detaches the keys beyond its
    first 128 or 512, say) shows there, and only there: the loss is on the last rows alone
    (harness.last_rows), whose gradient a mistake past the first block is all of."""
    module, rng = loaded(worker, dims)
    example(**dims, dropout=0.0)
    x = inputs(rng, dims)
    x64, upstream = x.astype(np.float64), last_rows(gaussian(rng, dims["B"], dims["T"], dims["n_embd"]))
    calls = [((x,), {"grad": True, "upstream": upstream, "input_grads": ["0"]})]

    def checked(i, reply):
        checks.gradients_reach_every_parameter(reply)
        out, bound = reference.causal_self_attention_bounded(module.params, dims["n_head"], x64)
        checks.gradients_judged(module, calls[0], reply, out, bound, lambda p, changed: reference.causal_self_attention(
            p, dims["n_head"], changed.get("0", x64)), upstream, rng, {"0": x64}, INPUT_NAMES)

    checks.gradients_in_calls(module, calls, checked)


@graded(CLS, "gradients")
@also_at(longest_gradients, dims=FARTHEST_GRADIENTS_CAUSAL)  # last: past 512 positions
@given(dims=causal_dims(min_time=2), fused=st.booleans(), p=dropout_rates, seed=seeds, data=st.data())
def test_gradients(worker, dims, fused, p, seed, data):
    """Every parameter gets a finite, nonzero gradient in eval and in train mode (dropout p), on both
    paths; and no gradient reaches a token from the outputs of the tokens before it."""
    # Enough tokens (B·T >= 64) that dropout cannot silence every path of a correct module.
    dims = {**dims, "B": gradient_batch(dims["B"], dims["T"])}
    module, rng = loaded(worker, dims, dropout=p)
    B, T, C = dims["B"], dims["T"], dims["n_embd"]
    row = data.draw(integers(0, T - 2), label="row")
    # no `fused` here: the calls take both paths, and each failing call names its own
    example(**dims, dropout=p, dropout_seed=seed, row=row)
    x = inputs(rng, dims)
    upstream = one_row((B, T, C), row, rng)
    train = {"grad": True, "train": True}
    everywhere = gaussian(rng, B, T, C)
    # the eval call with autograd on, the input requiring grad too (as the output of a layer that trains)
    calls = [((x,), {"grad": True, "fused": fused, "upstream": everywhere, "input_grads": ["0"]}),
             ((x,), {**train, "seed": seed, "upstream": everywhere, "input_grads": ["0"]}),
             ((x,), {**train, "seed": seed + 1, "fused": True, "upstream": everywhere, "input_grads": ["0"]}),
             ((x,), {**train, "seed": seed + 2, "fused": fused, "upstream": upstream, "input_grads": ["0"]}),
             # at the largest magnitude reference_match compares, gradients must be finite (one written by
             # hand without the softmax's max overflows there; their values are float32's to round)
             ((x * np.float32(max(INPUT_SCALES)),), {"grad": True, "fused": fused, "upstream": everywhere,
                                                     "input_grads": ["0"]})]

    right = []  # whether the eval forward pass (call 0, the same path as call 3) is the reference's
    rows = []  # whether train-mode calls must reach every row: the eval call's do

    def checked(i, reply):
        if i == 4:
            if checks.outputs_finite(reply):  # else large_inputs' or reference_match's to name
                checks.gradients_finite_when_large(reply)
            return
        if i > 0 and right[0] and not checks.outputs_finite(reply):
            checks.not_finite_for_autograd_alone(module, calls[i])
            return  # NaN in train mode alone (dropout before the softmax, 0 · -inf): train_dropout's, as a raise there
        checks.forward_finite(reply, "output_nan_upstream")  # NaN rows (a mask that closes a whole row): causality's
        if i == 0:
            out, bound = reference.causal_self_attention_bounded(module.params, dims["n_head"], x.astype(np.float64))
            checks.gradients_reach_every_parameter(reply)
            right.append(checks.gradients_judged(
                module, calls[0], reply, out, bound, lambda p, changed: reference.causal_self_attention(
                    p, dims["n_head"], changed.get("0", x.astype(np.float64))),
                everywhere, rng, {"0": x.astype(np.float64)}, INPUT_NAMES))
            rows.append(right[0] or checks.rows_reached(reply, module.params))
        elif i < 3:  # the gradients of the train-mode forward pass, under its own dropout draw
            # every row where the eval call's reach them, on the same path: the other path's forward
            # may be wrong (a fused path that attends over the heads), which is fused_equivalence's
            same_path = calls[i][1].get("fused", False) == fused
            checks.gradients_reach_every_parameter_in_train(module, calls[i], reply, rows=rows[0] and same_path)
            checks.gradients_are_the_forwards(module, calls[i], reply, everywhere)
        else:
            future = np.zeros((B, T), bool)
            future[:, row + 1:] = True
            if right[0]:
                checks.no_gradient_where_blocked(reply.input_grads.get("0"), future, "x", row)
            else:  # a future its forward pass reads is causality's business
                checks.no_gradient_where_its_forward_is_blind(module, calls[3], reply, future, row, {"0": "x"})

    checks.gradients_in_calls(module, calls, checked)
    # The module as it builds itself, proj and qkv's value rows given the grader's values (either
    # may start at zero, and trains from the first step: the query and key rows from the second):
    # qkv's query and key rows get a gradient.
    C = dims["n_embd"]
    checks.trains_from_its_own_start(lambda: build(worker, dims), (x,),
                                     reload={"seed": parameter_seed(dims), "layers": ["proj", "qkv"],
                                             "rows": {"qkv": [2 * C, 3 * C]}},
                                     rows={"qkv.weight": [(0, C), (C, 2 * C)]})


@graded(CLS, "large_inputs")
@also_at(dims=LONGEST_CAUSAL, fused=False)  # a fill chosen by the length (-1e4 past 64 positions, say)
@given(dims=causal_dims(min_time=2), fused=st.booleans())
def test_large_inputs(worker, dims, fused):
    module, rng = loaded(worker, dims)
    # in eval, in train() (dropout 0: nothing drawn) with autograd, or under torch.inference_mode(),
    # drawn: a fill chosen by the mode (-1e4 in training, -inf in eval) must keep the future out as well
    mode = {"fused": fused, **({}, {"train": True, "grad": True}, {"inference": True})[rng.integers(3)]}
    example(**dims, dropout=0.0, fused=fused)
    x = inputs(rng, dims, scale=1e3)
    # Scores of magnitude ~1e6, on either path (`fused` drawn): the future must stay out even where
    # a finite fill such as -1e4 would be outscored. Changing the last token must leave every
    # earlier position as it was.
    perturbed = x.copy()
    perturbed[:, -1] = gaussian(rng, dims["B"], dims["n_embd"], scale=1e3)
    replies, ((_, mode), _) = unless_autograd_is_off(lambda calls: module.runs(*calls), [((x,), mode), ((perturbed,), mode)])
    before, after = (output(reply, dims) for reply in replies)
    T = dims["T"]

    def at_magnitude_1000():
        checks.finite(before, "output")
        expect_close(after[:, :-1], before[:, :-1], "future_leak_large", atol=1e-3, rtol=1e-6, position=T - 1)

    def already_leaking():
        """The same change at scale 1: a future that leaks there is causality's mistake (a mask off
        by one, flipped, cut from the wrong corner), not a fill too small for large scores; on the
        fused path, where the explicit one does not leak at scale 1, fused_equivalence's (causality
        judges the explicit path in eval: heads merged without their transpose mix the tokens)."""
        def leaks(path):
            plain, plain_after = (output(reply, dims) for reply in module.runs(((x / 1e3,), {**mode, "fused": path}),
                                                                                ((perturbed / 1e3,), {**mode, "fused": path})))
            return not np.allclose(plain_after[:, :-1], plain[:, :-1], atol=1e-5, rtol=1e-4)  # NaN is not close either

        if leaks(fused):
            code = "future_leak_upstream_fused" if fused and not leaks(False) else "future_leak_upstream"
            raise PropertyFailure(code, position=T - 1)

    checks.unless_wrong_at_magnitude_1(at_magnitude_1000, already_leaking)

    def right_below():  # at ~1 and ~30 (reference_match's largest): else reference_match's mistake
        for magnitude in (1.0, max(INPUT_SCALES)):
            scaled = (x * np.float32(magnitude / 1e3)).astype(np.float32)
            got = output(module.run(scaled, **mode), dims)
            out, error = reference.causal_self_attention_bounded(module.params, dims["n_head"], scaled.astype(np.float64))
            if not np.all(np.abs(got - out) <= checks.reference_tolerance(out, error)):
                return False
        return True

    # Where in every head one score beats all others by far, the output is proj of the winners'
    # values: unless the module changed large scores (clamped them, say).
    checks.outputs_kept_when_large([before], [reference.causal_decided(module.params, dims["n_head"], x.astype(np.float64))],
                                   right_below, "large_scores_changed_output")


@graded(CLS, "fused_equivalence")
@also_at(reference_beyond_examples, dims=FARTHEST_CAUSAL, size="farthest", fused=True)  # last: past 512, heads of 160
@also_at(reference_beyond_examples, dims=LONGEST_CAUSAL, size="longest", fused=True)  # after the wide one
@also_at(reference_beyond_examples, dims=WIDE_CAUSAL, size="wide", fused=True)
@also_at(reference_beyond_examples, dims=ODD_HEADS_CAUSAL, size="heads", fused=True)
@given(dims=causal_dims())
def test_fused_equivalence(worker, dims):
    """The fused path gives the reference's output: on the example's input, then (once that
    matches) on a module of a longer block_size (LONG_TIMES) with an input of that length and short
    inputs at the smallest and largest INPUT_SCALES: a fused path that clips q and k, or takes the
    queries in chunks, is right only on short inputs of magnitude 1."""
    module, rng = loaded(worker, dims, dropout=0.3)  # dropout > 0: the fused path must still not drop in eval
    x = inputs(rng, dims)
    # Against the reference alone: a mistake only in the explicit path is reference_match's.
    want = expected(module.params, dims, x)
    fused_reply = module.run(x, fused=True)
    fused = output(fused_reply, dims)
    if not close(fused, want):
        # Where the explicit path matches on this input, what both paths share (the qkv split, the
        # heads, proj) is right: the mistake is in the fused path's own code, whatever catalog
        # mistake its output also matches (k and q swapped in the sdpa call match a swapped split).
        explicit = output(module.run(x), dims)
        code = "fused_only_mismatch" if close(explicit, want) else "both_paths_mismatch"
        calling(fused_reply.call)  # the failure is the fused call's, not the explicit one just read
        expect_close(fused, want, code, against="reference")
    fused_at_every_scale_and_length(worker, dims, rng)
    if worker.sees_cuda(CLS):
        for path in (False, True):
            on_gpu = output(module.run(x, fused=path, device="cuda"), dims)
            expect_close(on_gpu, expected(module.params, dims, x), "fused_mismatch", against="cuda_fused" if path else "cuda_explicit")


def fused_at_every_scale_and_length(worker, dims, rng):
    """fused_equivalence's calls beyond the example's: block_size from LONG_TIMES, a call of that
    length at magnitude 1, then the example's length at the smallest and largest input scales. A
    miss the explicit path shares (the same output on both paths) is reference_match's."""
    long_dims = {**dims, "block_size": long_time(rng)}
    module = another(worker, long_dims, 0.3, load_seed=parameter_seed(long_dims))
    shapes = [{**long_dims, "T": long_dims["block_size"]}, long_dims, long_dims]
    scales = [1.0, min(INPUT_SCALES), max(INPUT_SCALES)]
    xs = [inputs(rng, shape, scale) for shape, scale in zip(shapes, scales)]
    replies = module.runs(*(((x,), {"fused": True}) for x in xs))
    for x, reply, shape, scale in zip(xs, replies, shapes, scales):
        want, bound = reference.causal_self_attention_bounded(module.params, dims["n_head"], x.astype(np.float64))
        fused = output(reply, shape)
        if checks.within_reference([fused], [(want, bound, scale, "output")]):
            continue
        # the explicit path as the first call of a twin: a module can replay on an input it saw
        explicit = output(module.twin().run(x), shape)
        right = checks.within_reference([explicit], [(want, bound, scale, "output")])
        if not right and close(fused, explicit, atol=checks.REFERENCE_ATOL * scale):
            continue  # one mistake on both paths: reference_match's
        example_dims(**shape, dropout=0.3)
        calling(reply.call)
        checks.matches_reference(fused, want, bound, "fused_only_mismatch_at" if right else "both_paths_mismatch_at",
                                 scale, positions=shape["T"], block_size=shape["block_size"], scale=scale)


@graded(CLS, "fused_calls_sdpa")
@given(dims=causal_dims(min_time=2))
def test_fused_calls_sdpa(worker, dims):
    """The fused path calls scaled_dot_product_attention and its output comes from what that
    returns: the same call with sdpa's result rolled by one entry (each value in a neighbour's
    place: no mark that a module could look for, short of computing attention itself) must give
    another output (a path that computes the explicit version and calls sdpa only to discard the
    result does not). T >= 2: then rolling changes the result, whatever layout sdpa was given. And forward(x), with fused left
    at its default, is forward(x, fused=False): the same output and the same sdpa calls (a default
    of fused=True gives, on a CPU, about the same output, but calls sdpa where the explicit path
    does not; an explicit path may call sdpa too, with the mask: then both call it alike)."""
    module, rng = loaded(worker, dims)  # the grader's values: a proj that starts at zero hides nothing
    x = inputs(rng, dims)
    sdpa = ["scaled_dot_product_attention"]
    reply, rolled, default, explicit = module.runs(
        ((x,), {"fused": True, "trace": sdpa}), ((x,), {"fused": True, "rolled": sdpa}),
        ((x,), {"trace": sdpa}), ((x,), {"fused": False, "trace": sdpa}))
    got = output(reply, dims)
    calling(reply.call)
    require(reply.traced.get(sdpa[0], 0) >= 1, "sdpa_not_called")
    calling(rolled.call)
    # An output alike at every position (values all alike, as n_embd = 1 behind a LayerNorm gives)
    # comes from a result that rolls into itself: nothing to tell there.
    alike = np.array_equal(got, np.broadcast_to(got[:1, :1], got.shape), equal_nan=True)
    require(alike or not np.array_equal(got, output(rolled, dims), equal_nan=True), "sdpa_result_unused")
    calling(default.call)
    require(default.traced.get(sdpa[0], 0) == explicit.traced.get(sdpa[0], 0)
            and np.array_equal(output(default, dims), output(explicit, dims), equal_nan=True), "fused_not_false_by_default")
    # in train mode and with autograd on too: a fused path taken only in eval without autograd
    # (`if fused and not self.training`) gives the explicit path's output on a CPU. A call that
    # fails there is train_dropout's or gradients' to name (grad mode turned off for good, say),
    # where the same call in their form (dropout on; inputs requiring grad), first on its module,
    # fails too: a module that refuses only this call's form is judged on it.
    for train in (True, False):
        try:
            traced, = module.runs(((x,), {"fused": True, "trace": sdpa, **({"train": True} if train else {"grad": True})}))
        except SubmissionError as error:
            theirs = loaded(worker, dims, dropout=0.3)[0] if train else module.twin()
            if error.raised and checks.attempted(lambda: theirs.run(
                    x, fused=True, **({"train": True} if train else {"grad": True, "input_grads": ["0"]})))[1] is None:
                raise
            continue
        require(traced.traced.get(sdpa[0], 0) >= 1, "sdpa_not_called_when", train=train)


@graded(CLS, "device")
@given(dims=causal_dims(), fused=st.booleans())
def test_device(worker, dims, fused):
    """On meta (and cuda), in eval and in train mode, after one call on the CPU (what forward keeps
    in self must move with the module): a dropout mask made without device= only shows in train mode."""
    module, rng = loaded(worker, dims, dropout=0.2)
    x = inputs(rng, dims)
    shapes = [(dims["B"], dims["T"], dims["n_embd"])]
    checks.ran_once_on_cpu(lambda: module.runs(((x,), {}), ((x,), {"fused": True})))  # both paths' leftovers
    for train in (False, True):  # in train mode, a call that fails on the CPU too is train_dropout's
        checks.runs_on_device(lambda device: module.run(x, fused=fused, device=device, train=train), "meta", shapes,
                              cpu_failure_is_mine=not train, fresh=lambda device, **moved: loaded(worker, dims, dropout=0.2)[0]
                              .run(x, fused=fused, device=device, train=train, **moved))
    if worker.sees_cuda(CLS):
        checks.runs_on_device(lambda device: module.run(x, fused=fused, device=device, train=True), "cuda", shapes)
        reply = checks.runs_on_device(lambda device: module.run(x, fused=fused, device=device), "cuda", shapes)
        expect_close(output(reply, dims), expected(module.params, dims, x), "reference_mismatch",
                     what="output_cuda", masked=True)
    checks.runs_after_moving(module, ((x,), {"fused": fused}), "meta")  # last: the module itself stays there


def attends_by_similarity(worker, dims):
    """attends once more, on the explicit path, with one head as wide as the sequence is long: the
    weights read back from the output of a float64 copy of the module (checks.weights_behind_output;
    that output must be the float32 one's, checks.same_in_float64), with the input and twice it,
    are a softmax of scores quadratic in the input (checks.scores_from_similarity), not anything
    else that moves with queries and keys. Where the output is no combination of the values (a mistake in V or proj,
    reference_match's), or the module cannot run in float64, nothing is judged here; where it returns
    float32 there (a correct `.float()` at the end: 35/48 once), only weights above
    checks.FLOAT32_FLOOR are fitted."""
    module = build(worker, dims, load_seed=parameter_seed(dims))
    x = inputs(rng_for(dims), dims)
    x64 = x.astype(np.float64)
    scaled = x64 * checks.INPUT_FACTOR
    # read back from a float64 copy of the module (float32 leaves the smallest weights' logarithm
    # to rounding), which must compute what the module computes in float32; each call on a module
    # of its own (a mask a call changes is mask_changed_by_call's, not this property's)
    replies = []
    for call in (((x,), {}), ((x64,), {"float64": True}), ((scaled,), {"float64": True})):
        answered, failed = runs_until_failure(module.twin(), call)
        if failed:
            return  # a module that cannot run in float64 is judged by the drawn examples alone
        replies += answered
    # an output cast back to float32 (`.float()`, `.to(torch.float32)`, correct) holds the weights
    # to float32's rounding: only the larger ones are fitted
    in_float32 = any(isinstance(reply.outputs[0] if reply.outputs else None, np.ndarray)
                     and reply.outputs[0].dtype == np.float32 for reply in replies[1:])
    single, double, grown = (output(reply, dims) for reply in replies)
    checks.same_in_float64(single, double)
    weights = [checks.weights_behind_output(module.params, given, out) for given, out in ((x64, double), (scaled, grown))]
    if all(w is not None for w in weights):
        checks.scores_from_similarity(*(w[:, None] for w in weights),
                                      floor=checks.FLOAT32_FLOOR if in_float32 else checks.SIMILARITY_FLOOR)


@graded(CLS, "attends")
@also_at(attends_by_similarity, dims=SIMILARITY_CAUSAL)
@given(dims=causal_dims(min_time=3))
def test_attends(worker, dims):
    """The weights come from query–key similarity: the same module with its keys multiplied (the
    K rows of qkv scaled by checks.SCALE_FACTOR), or its queries (the Q rows), must return another
    output (the weights are not returned here, so the queries are judged by their rows of qkv);
    so must keys of the other sign (checks.key_sign_matters). T >= 3: then even a flipped mask
    leaves a row with two positions to weigh. A module that attends only at T = block_size (its
    mask cropped from the wrong corner leaves shorter rows no key, or one) attends: its mask is
    what is wrong, and causality and reference_match say so; `attends` would take the whole
    class for it."""
    try:
        responds_at(worker, dims)
    except PropertyFailure as failure:
        if failure.code == "output_ignores_input" or dims["T"] == dims["block_size"]:
            raise
        try:
            responds_at(worker, {**dims, "T": dims["block_size"]})
        except PropertyFailure:
            example_dims(**dims)  # the failure is the drawn example's
            raise failure from None


def responds_at(worker, dims):
    """test_attends' checks on one example."""
    C = dims["n_embd"]
    scalings = (("keys", "qkv", [C, 2 * C]), ("queries", "qkv", [0, C]))
    modules = [build(worker, dims, load_seed=parameter_seed(dims), load_scale=scale)
               for scale in (None, *(checks.layer_scale(layer, rows) for _, layer, rows in scalings),
                             checks.layer_scale("qkv", [C, 2 * C], factor=-1.0))]
    rng = rng_for(dims)
    x = inputs(rng, dims)
    got = [output(module.run(x), dims) for module in modules]
    want = [expected(module.params, dims, x) for module in modules]
    # An output that no input moves is no mistake of keys or queries: said as what it is (a
    # LayerNorm on x inside the module leaves only zeros at n_embd = 1, where it failed as keys ignored).
    other = inputs(rng, dims)  # on a module of its own: a mask a call changes is mask_changed_by_call's
    require(not np.allclose(output(modules[0].twin().run(other), dims), got[0], atol=1e-6, rtol=1e-5)
            or np.allclose(expected(modules[0].params, dims, other), want[0], atol=1e-6, rtol=1e-5),
            "output_ignores_input", n_embd=C)
    for i, (role, layer, rows) in enumerate(scalings, 1):
        checks.responds_to(role, got[0], got[i], want[0], want[i], "output", f"{layer}_{role}_rows")
    checks.key_sign_matters((got[0], got[3], want[0], want[3]), lambda: (got[0], got[2], want[0], want[2]), "output",
                            "qkv_key_sign_rows")