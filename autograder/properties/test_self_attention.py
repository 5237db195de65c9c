"""SelfAttention(d_model, d_k=None): forward(x, mask=None) -> (output (B,T,d_k), weights (B,T,T))."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from . import checks, reference
from .failures import PropertyFailure, example, expect_close, require  # require: what a new property fails through (README)
from .harness import (unless_autograd_is_off, INPUT_SCALES, WIDE_BATCH, Remote, also_at, closing_one, copy_calls, params_in_turn, gaussian, gradient_batch, first_rows_one_key, graded, last_rows, large_input_mode, left_padded, mid_dims, long_time, masks_in_turn, masks_of_every_dtype, one_row, other_mask,
                      random_mask, runs_skipping, edge_batches_then_no_mask)
from .strategies import FARTHEST_SELF_ATTENTION, LONGEST_SELF_ATTENTION, SIMILARITY_SELF_ATTENTION, WIDE_SELF_ATTENTION, integers, mask_turns, parameter_seed, rng_for, self_attention_dims
from ..worker.submission_errors import SubmissionError

CLS = "SelfAttention"


def build(worker, dims, load_seed=None, **load):
    """load: Remote's other load options (load_scale, required). A module the grader loads is built
    with d_k=d_model passed where the submission's default for d_k is another (default_d_k_wrong):
    that mistake is parameter_count's and shapes' to name, and the properties of the attention it
    computes judge that attention instead of failing on the layers' size."""
    example(**dims)
    kwargs = {"d_model": dims["d_model"]}
    if dims["d_k"] is not None:
        kwargs["d_k"] = dims["d_k"]
    elif load_seed is not None and default_d_k_wrong(worker, dims["d_model"]):
        kwargs["d_k"] = dims["d_model"]
    shape = (d_k_of(dims), dims["d_model"])
    return Remote(worker, CLS, load_seed, **load, layer_shapes={"W_Q": shape, "W_K": shape, "W_V": shape}, **kwargs)


def default_d_k_wrong(worker, d_model):
    """The shape of W_Q in SelfAttention(d_model), without d_k, where it takes d_model inputs but
    gives another number than d_model (a default for d_k other than d_model); else None. Asked once
    per d_model of a submission (one build). A module without W_Q, one whose W_Q takes another
    input size, or whose constructor raises: None, for its usual build to name."""
    key = (CLS, "default_d_k", d_model)
    if key not in worker.facts:
        query = None
        try:
            query = Remote(worker, CLS, d_model=d_model).param_shapes.get("W_Q.weight")
        except (SubmissionError, PropertyFailure) as error:
            if isinstance(error, SubmissionError) and not error.raised:
                raise
        wrong = query is not None and len(query) == 2 and query[1] == d_model != query[0]
        worker.facts[key] = list(query) if wrong else None
    return worker.facts[key]


def default_d_k_is_d_model(worker, dims):
    """Without d_k, the layers of d_k = d_model: the statement's default (default_d_k_wrong)."""
    if dims["d_k"] is None:
        wrong = default_d_k_wrong(worker, dims["d_model"])
        require(wrong is None, "default_d_k_not_d_model", d_model=dims["d_model"], got=wrong)

def loaded(worker, dims):
    """A module with the grader's parameters (module.params) and the rng of its inputs."""
    return build(worker, dims, load_seed=parameter_seed(dims)), rng_for(dims)


def d_k_of(dims):
    return dims["d_k"] or dims["d_model"]


def outputs(reply, dims):
    B, T = dims["B"], dims["T"]
    return reply.output(0, (B, T, d_k_of(dims)), "output"), reply.output(1, (B, T, T), "weights")


def inputs(rng, dims, scale=1.0):
    return gaussian(rng, dims["B"], dims["T"], dims["d_model"], scale=scale)


# What the worker calls the inputs (positional by index) -> the statement's names.
INPUT_NAMES = {"0": "x", "1": "mask", "mask": "mask"}


def mask_shapes(dims):
    """The mask shapes the statement allows SelfAttention: (B, T, T), (1, T, T) and (T, T)."""
    B, T = dims["B"], dims["T"]
    return (B, T, T), (1, T, T), (T, T)


@graded(CLS, "shapes")
@given(dims=self_attention_dims(), longer=st.integers(1, 3), masked=st.booleans())
def test_shapes(worker, dims, longer, masked):
    """One module, any length in any order, any memory layout: T, then a longer T2 on the same
    module (with a mask or not, drawn), then that input laid out non-contiguously."""
    module = build(worker, dims)
    default_d_k_is_d_model(worker, dims)
    longer_dims = {**dims, "T": dims["T"] + longer}
    example(**dims, T2=longer_dims["T"])
    rng = rng_for(dims)
    x, x2 = inputs(rng, dims), inputs(rng, longer_dims)
    mask = random_mask(rng, dims["B"], longer_dims["T"], longer_dims["T"])
    options = {"mask": mask} if masked else {}
    calls = [((x,), {}), ((x2,), options), ((x2,), {**options, "noncontiguous": True})]
    checks.shapes_across_calls(module, calls, lambda i, reply: outputs(reply, dims if i == 0 else longer_dims),
                               lambda: build(worker, dims), (dims["T"], longer_dims["T"]), INPUT_NAMES)


@graded(CLS, "parameter_count")
@given(dims=self_attention_dims())
def test_parameter_count(worker, dims):
    module = build(worker, dims)
    default_d_k_is_d_model(worker, dims)
    checks.parameters_are(module, 3 * dims["d_model"] * d_k_of(dims), "3·d_model·d_k", biased=False)


@graded(CLS, "rows_sum_to_one")
@given(dims=self_attention_dims())
def test_rows_sum_to_one(worker, dims):
    module, rng = loaded(worker, dims)
    for mask in (None, random_mask(rng, dims["B"], dims["T"], dims["T"])):
        x = inputs(rng, dims)
        got = checks.taken(lambda **masked: module.run(x, **masked), mask, lambda reply: outputs(reply, dims))
        weights = got[1]
        expected = reference.self_attention(module.params, x.astype(np.float64), mask)[1]
        checks.rows_sum_to_one_in_eval(weights, expected, masked=mask is not None)


@graded(CLS, "masked_zero")
@given(dims=self_attention_dims(min_time=2), turn=mask_turns)
def test_masked_zero(worker, dims, turn):
    """Every mask the statement allows, on one module: no mask, reference_match's float32 (B, T, T),
    then each shape of mask_shapes as bool, long or float32 in turn (every pairing of shape and
    dtype over the examples: harness.masks_in_turn), then another mask of that form, passed by
    position."""
    module, rng = loaded(worker, dims)
    T = dims["T"]
    first = random_mask(rng, dims["B"], T, T)
    masks = [None, first, *masks_in_turn(rng, mask_shapes(dims), turn), other_mask(first)]
    x = inputs(rng, dims)
    # the last mask passed by position, as forward(x, mask) allows
    calls, masks = edge_batches_then_no_mask(rng, [*(((x,), {"mask": mask}) for mask in masks[:-1]), ((x, masks[-1]), {})],
                                             masks, lambda batch: (inputs(rng, {**dims, "B": batch}),), (T, T), turn)

    def expected(i):
        given = calls[i][0][0]
        out, weights, e_out, e_weights = reference.self_attention_bounded(module.params, given.astype(np.float64), masks[i])
        return [(out, e_out, 1.0, "output"), (weights, e_weights, 1.0, "weights")]

    def canonical(mask, batch):
        return [(np.broadcast_to(mask, (batch, T, T)).astype(np.float32), None)]

    checks.masks_accepted(module, calls, lambda i, reply: outputs(reply, {**dims, "B": len(calls[i][0][0])}),
                          masks, expected, INPUT_NAMES, lambda: loaded(worker, dims)[0], canonical)


@graded(CLS, "scale")
@also_at(dims=WIDE_SELF_ATTENTION)
@given(dims=self_attention_dims(min_time=2))
def test_scale(worker, dims):
    module, rng = loaded(worker, dims)
    x = inputs(rng, dims)
    reply = module.run(x)
    _, weights = outputs(reply, dims)
    q, k = (reference.linear(x.astype(np.float64), module.params, n) for n in ("W_Q", "W_K"))
    transposed = None
    if d_k_of(dims) == dims["d_model"]:  # square layers can be applied as x @ W.weight too
        q_t, k_t = (x.astype(np.float64) @ module.params[f"{n}.weight"] for n in ("W_Q", "W_K"))
        transposed = reference.unscaled_scores(q_t, k_t)
    checks.scale_is(weights, reference.unscaled_scores(q, k), d_k_of(dims), transposed, reply.settings_changed)


def wide_reference_match(worker, dims):
    """reference_match at a real model's width: one input, without and with a mask, that one
    passed by keyword, as the statement names forward's parameters (forward(x=x, mask=mask))."""
    module, rng = loaded(worker, dims)
    example(**dims)
    x = inputs(rng, dims)
    mask = closing_one(random_mask(rng, dims["B"], dims["T"], dims["T"]))

    def expected(i):
        return zip(reference.self_attention(module.params, x.astype(np.float64), None if i == 0 else mask),
                   ("output", "weights"))

    checks.matches_beyond_examples(module, [((x,), {}), ((), {"x": x, "mask": mask})], lambda i, reply: outputs(reply, dims),
                                   expected, "reference_mismatch_wide", width=f"d_model = {dims['d_model']}, d_k = {dims['d_k']}")


def longest_reference_match(worker, dims, size="longest"):
    """reference_match on the longest sequence (strategies.LONGEST_*; size "farthest": FARTHEST_*,
    also with the widest heads), with a mask that closes a long prefix of keys in every other row
    (harness.left_padded)."""
    module, rng = loaded(worker, dims)
    example(**dims)
    x, mask = inputs(rng, dims), left_padded(random_mask(rng, dims["B"], dims["T"], dims["T"]))
    checks.matches_beyond_examples(
        module, [((x,), {"mask": mask})], lambda i, reply: outputs(reply, dims),
        lambda i: zip(reference.self_attention(module.params, x.astype(np.float64), mask), ("output", "weights")),
        f"reference_mismatch_{size}", positions=dims["T"], head_size=dims["d_k"])


@graded(CLS, "reference_match")
@also_at(longest_reference_match, dims=FARTHEST_SELF_ATTENTION, size="farthest")  # last: past 512 positions, heads of 160
@also_at(longest_reference_match, dims=LONGEST_SELF_ATTENTION)  # after the wide one (decorators apply upwards)
@also_at(wide_reference_match, dims=WIDE_SELF_ATTENTION)
@given(dims=self_attention_dims(min_time=2), scales=st.permutations(INPUT_SCALES))
def test_reference_match(worker, dims, scales):
    """Calls on one module: an input at each scale, the first again in train mode (SelfAttention
    has no dropout: train() changes nothing), the last scale with a mask (again in train mode, then
    with another mask of that shape written into the same tensor), a longer sequence
    (harness.LONG_TIMES) with a mask, whose last position is a zero vector (a padding token: its
    scores are exactly 0, which a mask must not be confused with), a larger batch (WIDE_BATCH)
    with one mask for all of it, then the first input again, the masked one in train mode, the
    second under torch.inference_mode() (a validation pass), a batch of sizes in between
    (harness.MID_TIMES), before and after the parameters change in place (as an optimizer step changes them; then as
    optimizer.step() writes them, which `_version` counts). T >= 2:
    then the short calls can tell a mistake of the weights (with one position, every row is [1]),
    and a miss first seen in the long call is about length."""
    module, rng = loaded(worker, dims)
    B, T = dims["B"], dims["T"]
    first, second, third = scales
    xs = [inputs(rng, dims, first), inputs(rng, dims, second), inputs(rng, dims, third)]
    mask = closing_one(random_mask(rng, B, T, T))  # the short calls try the mask too
    reload, _ = module.reloading(int(rng.integers(2 ** 31)))
    copy_reload, _ = module.reloading(int(rng.integers(2 ** 31)))
    long_dims = {**dims, "B": 1, "T": long_time(rng)}  # B=1: weights under wire's frame cap
    example(**dims, scales=list(scales), T2=long_dims["T"])
    padded = inputs(rng, long_dims)
    padded[:, -1] = 0.0
    long_mask = random_mask(rng, 1, long_dims["T"], long_dims["T"])
    # a batch larger than the strategies draw, with one (1, T, T) mask for all of it (a module that
    # cuts the batch in pieces and slices the mask by example goes wrong there)
    wide_dims = {**dims, "B": int(rng.integers(WIDE_BATCH[0], WIDE_BATCH[1] + 1))}
    wide = (inputs(rng, wide_dims), random_mask(rng, 1, T, T))  # float32: other dtypes are masked_zero's
    between = mid_dims(rng, dims, "T")
    middle = (inputs(rng, between), random_mask(rng, between["B"], between["T"], between["T"]))
    # another mask of the same shape and dtype, written into the tensor of the call before: a
    # module that keeps what it made of a mask, rebuilt only when the shape changes or keyed on
    # the tensor's address, applies the old one (drawn last: the draws above stay as they were)
    other = closing_one(random_mask(rng, B, T, T))
    # in_place: the input written into the tensors of the call before (a cache keyed on a tensor's
    # identity or address sees other values, or the same after the parameters changed)
    calls = [((xs[0],), {}), ((xs[0],), {"train": True}), ((xs[1],), {"in_place": True}), ((xs[2],), {"mask": mask}),
             ((padded,), {"mask": long_mask}), ((wide[0],), {"mask": wide[1]}), ((xs[0],), {}),
             ((xs[2],), {"mask": mask, "train": True}), ((xs[2],), {"mask": other, "in_place": True}),
             ((xs[1],), {"inference": True}), ((middle[0],), {"mask": middle[1]}),
             ((xs[0],), {"reload": reload, "in_place": True}), ((xs[0],), {"reload": {**reload, "step": True}}),
             *copy_calls((xs[1],), copy_reload)]
    magnitudes = [first, first, second, third, 1.0, 1.0, first, third, third, second, 1.0, first, first, second, second]
    shapes = [dims, dims, dims, dims, long_dims, wide_dims, dims, dims, dims, dims, between, dims, dims, dims, dims]
    params = params_in_turn(module, calls)[0]

    def expected(i):
        (x,), options = calls[i]
        out, weights, e_out, e_weights = reference.self_attention_bounded(
            params[i], x.astype(np.float64), options.get("mask"))
        return [(out, e_out, magnitudes[i], "output"), (weights, e_weights, 1.0, "weights")]

    checks.reference_across_calls(module, calls, lambda i, reply: outputs(reply, shapes[i]), expected,
                                  lambda: loaded(worker, dims)[0], INPUT_NAMES,
                                  {1: ("train_mode_changes_output", {}, {7}), 7: ("train_mode_changes_output", {}, {1}),
                                   4: ("reference_mismatch_long", {"positions": long_dims["T"]}, {10}),
                                   9: ("inference_mode_changes_output", {}),
                                   10: ("reference_mismatch_mid", {"batch": between["B"], "positions": between["T"]}),
                                   12: ("reference_mismatch_after_step", {}),
                                   13: ("copy_computes_with_the_original", {}), 14: ("original_changed_by_its_copy", {})},
                                  lambda: another_configuration(worker, {**dims, "d_model": dims["d_model"] + 1, "d_k": d_k_of(dims) + 1}))


def another_configuration(worker, dims):
    """Build and call a module of these dims (another configuration); its description."""
    module, rng = loaded(worker, dims)
    module.run(inputs(rng, dims))
    return f"d_model={dims['d_model']}, d_k={dims['d_k']}"


@graded(CLS, "batch_independence")
@given(dims=self_attention_dims(min_batch=2))
def test_batch_independence(worker, dims):
    module, rng = loaded(worker, dims)
    checks.batch_independent(module.run, [inputs(rng, dims)], rng, lambda r, b: outputs(r, {**dims, "B": b})[0],
                             gradient_batch(dims["B"] + 1, dims["T"]), lambda b: random_mask(rng, b, dims["T"], dims["T"]))


def longest_gradients(worker, dims):
    """gradients on the longest sequence (past 512 positions),
    the parameters' and x's judged against the reference: a backward that goes wrong only past a
    block of queries or keys (a chunked forward that detaches K beyond its first 128 or 512 rows,
    say) shows there, and only there: the loss is on the last rows alone
    (harness.last_rows), whose gradient a mistake past the first block is all of."""
    module, rng = loaded(worker, dims)
    example(**dims)
    x = inputs(rng, dims)
    x64, upstream = x.astype(np.float64), last_rows(gaussian(rng, dims["B"], dims["T"], d_k_of(dims)))
    calls = [((x,), {"grad": True, "upstream": upstream, "input_grads": ["0"]})]

    def checked(i, reply):
        checks.gradients_reach_every_parameter(reply, biased=False)
        out, _, e_out, _ = reference.self_attention_bounded(module.params, x64)
        checks.gradients_judged(module, calls[0], reply, out, e_out,
                                lambda p, changed: reference.self_attention(p, changed.get("0", x64))[0],
                                upstream, rng, {"0": x64}, INPUT_NAMES)

    checks.gradients_in_calls(module, calls, checked)


@graded(CLS, "gradients")
@also_at(longest_gradients, dims=FARTHEST_SELF_ATTENTION)  # last: past 512 positions
@given(dims=self_attention_dims(min_time=2), data=st.data())
def test_gradients(worker, dims, data):
    """Every parameter gets a finite, nonzero gradient, with and without a mask (in train mode too);
    the gradients of the parameters are the reference's with and without a mask (with x requiring grad
    or not), and x's without; and from
    a query row, no gradient reaches the positions its mask closes (apart from its own: x_i makes q_i)."""
    module, rng = loaded(worker, dims)
    B, T = dims["B"], dims["T"]
    row = data.draw(integers(0, T - 1), label="row")
    example(**dims, row=row)
    x, mask = inputs(rng, dims), random_mask(rng, B, T, T)
    mask[:, (row + 1) % T, :] = 1  # a row open everywhere: the masked call's W_Q and W_K get a gradient
    upstream = one_row((B, T, d_k_of(dims)), row, rng)
    everywhere = gaussian(rng, B, T, d_k_of(dims))
    # the calls with autograd on, the input requiring grad too (as the output of a layer that trains);
    # the masked one in train mode (which changes nothing in SelfAttention: it has no dropout), with
    # an input that does not require grad (as the embeddings of a first layer): its parameters train
    # too; then in train mode again, x's gradient judged there as well, on a long sequence (a
    # backward written by hand that works in blocks of keys goes wrong only beyond the first block);
    # last, x at the largest magnitude reference_match compares, where gradients must be finite (one
    # written by hand without the softmax's max overflows there; their values are float32's to round)
    x_long = inputs(rng, {**dims, "B": 1, "T": long_time(rng)})
    on_long = gaussian(rng, *x_long.shape[:2], d_k_of(dims))
    calls = [((x,), {"grad": True, "upstream": everywhere, "input_grads": ["0"]}),
             ((x,), {"grad": True, "mask": mask, "train": True, "upstream": everywhere}),
             ((x,), {"grad": True, "mask": mask, "upstream": upstream, "input_grads": ["0"]}),
             ((x_long,), {"grad": True, "train": True, "upstream": on_long, "input_grads": ["0"]}),
             ((x * np.float32(max(INPUT_SCALES)),), {"grad": True, "upstream": everywhere, "input_grads": ["0"]})]

    def checked(i, reply):
        if i > 0 and not checks.outputs_finite(reply):
            checks.not_finite_for_autograd_alone(module, calls[i])
            return  # NaN out of the masked forward pass itself (a mask read the other way): not a gradient's fault
        if i == 4:
            checks.gradients_finite_when_large(reply)
            return
        if i != 2:
            checks.gradients_reach_every_parameter(reply, biased=False)
            # judged against the reference where the forward pass is right: a wrong one is reference_match's
            given, (given_x,) = calls[i][1].get("mask"), (t.astype(np.float64) for t in calls[i][0])
            out, _, e_out, _ = reference.self_attention_bounded(module.params, given_x, given)
            checks.gradients_judged(
                module, calls[i], reply, out, e_out,
                lambda p, changed: reference.self_attention(p, changed.get("0", given_x), given)[0],
                calls[i][1]["upstream"], rng, {"0": given_x} if calls[i][1].get("input_grads") else None, INPUT_NAMES)
            return
        blocked = mask[:, row, :] == 0
        blocked[:, row] = False
        out, weights, e_out, e_weights = reference.self_attention_bounded(module.params, x.astype(np.float64), mask)
        if checks.agrees_with_reference(reply, 0, out, e_out) and checks.agrees_with_reference(reply, 1, weights, e_weights):
            checks.no_gradient_where_blocked(reply.input_grads.get("0"), blocked, "x", row)
            checks.gradients_match_reference(
                reply, module.params, lambda p, changed: reference.self_attention(
                    p, changed.get("0", x.astype(np.float64)), mask)[0],
                upstream, rng, {"0": x.astype(np.float64)}, INPUT_NAMES)
        else:  # judged against its own forward pass: a leak there is masked_zero's, not a second loss here
            checks.no_gradient_where_its_forward_is_blind(module, calls[2], reply, blocked, row, {"0": "x"})

    checks.gradients_in_calls(module, calls, checked)
    # A loss on the weights it returns trains W_Q and W_K through them.
    x64, on_weights = x.astype(np.float64), gaussian(rng, B, T, T)
    checks.gradients_through_weights(module, ((x,), {"grad": True, "backward_from": 1, "upstream": on_weights}),
                                     lambda params: reference.self_attention(params, x64)[1],
                                     reference.self_attention_bounded(module.params, x64)[3], on_weights, rng)
    # The module as it builds itself can train, from the weights it returns too.
    checks.trains_from_its_own_start(lambda: build(worker, dims), (x,), weights=("W_Q.weight", "W_K.weight"),
                                     one_key=(x[:, :1],))


@graded(CLS, "large_inputs")
@also_at(dims=LONGEST_SELF_ATTENTION, turn=1)  # a fill chosen by the length (-1e4 past 64 positions, say)
@given(dims=self_attention_dims(min_time=2), turn=mask_turns)
def test_large_inputs(worker, dims, turn):
    module, rng = loaded(worker, dims)
    x = inputs(rng, dims, scale=1e3)
    # Scores of magnitude ~1e6: a finite fill such as -1e4 no longer keeps masked weights at 0,
    # while -inf (or -1e9, finfo.min) still does; masks of every dtype and shape (a fill chosen by
    # the mask's dtype). Where that fails, the same calls at magnitude ~1: what fails there already
    # (a mask read the other way, a softmax over the wrong axis) is masked_zero's or
    # rows_sum_to_one's mistake, not a matter of magnitude.
    masks = masks_of_every_dtype(rng, mask_shapes(dims), turn)
    if dims["T"] >= LONGEST_SELF_ATTENTION["T"]:  # a fill chosen by the length: rows with one open key show it
        masks = [first_rows_one_key(mask) for mask in masks]
    # each masked call in one of the modes a model is run in (harness.LARGE_INPUT_MODES)
    calls = [((x,), {}), *(((inputs(rng, dims, scale=1e3),), {"mask": mask, **large_input_mode(i, turn)})
                           for i, mask in enumerate(masks))]
    B, T = dims["B"], dims["T"]  # a mask form it cannot take (or answers with other shapes): masked_zero's
    (replies, kept), calls = unless_autograd_is_off(lambda calls: runs_skipping(
        module, calls, range(1, len(calls)), [(B, T, d_k_of(dims)), (B, T, T)],
        below=lambda call: ((shrunk(call[0][0]),), call[1])), calls)
    calls, masks = [calls[i] for i in kept], [masks[i - 1] for i in kept[1:]]
    small = [((shrunk(big),), options) for (big,), options in calls]
    large = [outputs(reply, dims) for reply in replies]
    checks.stable_when_large(large, masks, lambda: [outputs(reply, dims) for reply in module.runs(*small)],
                             [reply.call for reply in replies])
    # Where a score beats all others by far, its weight is 1: unless the module changed the scores.
    winners = [reference.decided(*reference.self_attention_scores_bounded(module.params, big.astype(np.float64)),
                                 options.get("mask")) for (big,), options in calls]

    def right_below():
        """The same calls at magnitudes ~1 and ~30 give the reference's outputs and weights: a module
        wrong at 30 already (scores clamped to ±50, say) is reference_match's to name."""
        for factor in (1.0, max(INPUT_SCALES)):
            scaled = [((shrunk(big, factor),), options) for (big,), options in calls]
            got = [outputs(reply, dims) for reply in module.runs(*scaled)]
            if not all(checks.is_the_reference(g, reference.self_attention_bounded(
                    module.params, x_i.astype(np.float64), options.get("mask"))) for g, ((x_i,), options) in zip(got, scaled)):
                return False
        return True

    checks.winners_kept_when_large([weights for _, weights in large], winners, right_below)
    # There the output is the winner's value too: unless it comes from another path than the
    # weights (scaled_dot_product_attention with a finite mask fill, say).
    checks.outputs_kept_when_large([out for out, _ in large], [reference.self_attention_decided(
        module.params, big.astype(np.float64), options.get("mask")) for (big,), options in calls],
        right_below, "large_output_not_from_weights")


def shrunk(x, magnitude=1.0):
    """An input of large_inputs brought back to magnitude ~1, or `magnitude` (float32, as the worker expects)."""
    return (x * np.float32(magnitude / 1e3)).astype(np.float32)


@graded(CLS, "device")
@given(dims=self_attention_dims())
def test_device(worker, dims):
    """On meta (and cuda), after one call on the CPU: what forward keeps in self must move with the module."""
    module, rng = loaded(worker, dims)
    B, T = dims["B"], dims["T"]
    x, mask = inputs(rng, dims), random_mask(rng, B, T, T)
    shapes = [(B, T, d_k_of(dims)), (B, T, T)]
    checks.ran_once_on_cpu(lambda: module.run(x, mask=mask))
    checks.runs_on_device(lambda device: module.run(x, mask=mask, device=device), "meta", shapes,
                          fallbacks=[lambda device: module.run(x, device=device)],
                          fresh=lambda device, **moved: loaded(worker, dims)[0].run(x, mask=mask, device=device, **moved))
    if worker.sees_cuda(CLS):
        reply = checks.runs_on_device(lambda device: module.run(x, mask=mask, device=device), "cuda", shapes)
        expect_close(outputs(reply, dims)[0], reference.self_attention(module.params, x.astype(np.float64), mask)[0],
                     "reference_mismatch", what="output_cuda", masked=True)
    checks.runs_after_moving(module, ((x,), {"mask": mask}), "meta")  # last: the module itself stays there


def attends_by_similarity(worker, dims):
    """attends once more, on more positions, with the input and twice it: the weights are a softmax
    of scores quadratic in the input (checks.scores_from_similarity), not anything else that
    moves with queries and keys."""
    module = build(worker, dims, load_seed=parameter_seed(dims), required=("W_Q", "W_K"))
    x = inputs(rng_for(dims), dims)
    # each call on a module of its own: a module that keeps something from a call is reference_match's
    replies = [module.run(x), module.twin().run(x * np.float32(checks.INPUT_FACTOR))]
    checks.scores_from_similarity(*(outputs(reply, dims)[1][:, None] for reply in replies))


@graded(CLS, "attends")
@also_at(attends_by_similarity, dims=SIMILARITY_SELF_ATTENTION)
@given(dims=self_attention_dims(min_time=2))
def test_attends(worker, dims):
    """The weights come from query–key similarity: the same module with its keys multiplied
    (W_K scaled by checks.SCALE_FACTOR) must return other weights, and another output; and its rows
    must differ from one query to the next (checks.rows_differ); keys of the other sign must move
    them too (checks.key_sign_matters). W_Q and W_K are all it takes: a
    module without W_V (parameter_count's business) is judged on its weights."""
    def module(scale):
        return build(worker, dims, load_seed=parameter_seed(dims), load_scale=scale, required=("W_Q", "W_K"))

    def weights(m):
        return reference.attention(*(reference.linear(x64, m.params, n) for n in ("W_Q", "W_K", "W_K")))[1]

    def run(m):
        return outputs(m.run(x), dims)

    modules = [module(scale) for scale in (None, checks.layer_scale("W_K"), checks.layer_scale("W_K", factor=-1.0))]
    x = inputs(rng_for(dims), dims)
    x64 = x.astype(np.float64)
    got = [run(m) for m in modules]
    expected = [weights(m) for m in modules]
    checks.responds_to("keys", got[0][1], got[1][1], *expected[:2], "weights", "W_K")
    queried = module(checks.layer_scale("W_Q"))
    checks.key_sign_matters((got[0][1], got[2][1], expected[0], expected[2]),
                            lambda: (got[0][1], run(queried)[1], expected[0], weights(queried)), "weights", "W_K")
    checks.rows_differ(got[0][1], expected[0])
    if not modules[0].missing_layers:
        want = [reference.self_attention(m.params, x64)[0] for m in modules[:2]]
        checks.responds_to("keys", got[0][0], got[1][0], *want, "output", "W_K")