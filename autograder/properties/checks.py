"""Checks shared by the three classes: each takes plain arrays or a Remote and raises
PropertyFailure with a message code when the property does not hold."""
import functools
import math

import numpy as np

from . import reference
from .failures import PropertyFailure, as_array, call_at_fault, calling, diagnose_again, expect_close, require, second_opinion
from ..worker.submission_errors import SubmissionError, call_does_not_fit

ROW_SUM_ATOL = 1e-5


def parameters_are(module, expected, formula, biased):
    """The parameter_count property: every projection with a bias (biased) or every one without,
    named before the count they change; then `expected` parameters in all (`formula` says why)."""
    wrong = sorted(name for name, has in module.linear_bias.items() if has != biased)
    require(not wrong, "missing_bias" if biased else "unexpected_bias", names=wrong)
    require(module.parameter_count == expected, "parameter_count", expected=expected,
            got=module.parameter_count, formula=formula)


def rows_sum_to_one(weights):
    sums = weights.sum(axis=-1)
    if not np.all(np.abs(sums - 1) <= ROW_SUM_ATOL):
        not_reduced_precision(weights)
    expect_close(sums, np.ones_like(sums), "rows_do_not_sum_to_one", atol=ROW_SUM_ATOL, rtol=0)


def not_reduced_precision(weights, what="weights"):
    """After a miss on weights (or on `what` else): float32 values that all fit float16 or bfloat16
    were computed in that precision (.half(), .bfloat16(), autocast): named as such, not as the
    miss it causes.
    Judged on the weights that are not multiples of 1/64 (uniform weights over a few positions
    fit every precision), one at least (a minimal example may have no more): one float32
    softmax weight fits float16 with probability ~2^-13, on a path that already failed."""
    if not isinstance(weights, np.ndarray) or weights.dtype.kind != "f":
        return
    finite = weights[np.isfinite(weights)]
    values = finite[finite * 64 != np.round(finite * 64)]
    telling = values.astype(np.float32)
    if not telling.size or not np.all(telling == values):
        return  # none to judge, or not float32 values (a module that returns float64)
    in_bfloat16 = not np.any(telling.view(np.uint32) & 0xFFFF)
    with np.errstate(over="ignore"):
        in_float16 = bool(np.all(telling.astype(np.float16).astype(np.float32) == telling))
    require(not (in_bfloat16 or in_float16), "reduced_precision", dtype="bfloat16" if in_bfloat16 else "float16",
            what=what)


def dropout_factor(weights, expected, p):
    """c when every weight is either 0 or c times the reference's (`expected`), one c > 1 for all,
    in a module built with dropout p > 0: dropout's pattern. c is measured from the weights that
    survived (another c than 1/(1-p) is a dropout with another p), but must be 1/(1-p) when none
    was dropped: a constant factor alone is not dropout. None when the weights are not that."""
    if p <= 0 or not np.isfinite(weights).all():
        return None
    kept = weights != 0
    if np.any(kept & (expected == 0)):
        return None
    factor = float(np.median(weights[kept] / expected[kept])) if kept.any() else 1.0 / (1.0 - p)
    dropped = ~kept & (expected != 0)
    if not dropped.any() and not math.isclose(factor, 1.0 / (1.0 - p), rel_tol=1e-3):
        return None
    if factor <= 1 + 1e-3 or not np.allclose(weights[kept], factor * expected[kept], rtol=1e-3, atol=1e-6):
        return None
    return factor


def rows_sum_to_one_in_eval(weights, expected, p=0.0, masked=False):
    """The rows_sum_to_one property on one call in eval: `expected` is the reference's weights for
    it, p the module's dropout, masked whether the call had a mask (one that leaves every row an
    open position: harness.random_mask). Two mistakes of other properties show here first and are
    named as theirs: rows of NaN under such a mask (positions the mask allows are closed: the
    mask is read wrongly, masked_zero's business), and weights that are the reference's after
    dropout (dropout still active in eval: eval_deterministic's). Rows that are not finite
    without a mask come from something before the softmax: named as such, not as a sum."""
    nan_rows = ~np.isfinite(weights).all(axis=-1)
    if masked and nan_rows.any():
        raise PropertyFailure("masked_rows_nan_upstream", count=int(nan_rows.sum()),
                              index=[int(i) for i in np.argwhere(nan_rows)[0]])
    if nan_rows.any():
        raise PropertyFailure("weights_not_finite", index=[int(i) for i in np.argwhere(nan_rows)[0]])
    off = first_row_off(weights)
    if off is not None:
        factor = dropout_factor(weights, expected, p)
        if factor is not None:
            raise PropertyFailure("rows_dropped_in_eval", **off, factor=round(factor, 4))
    rows_sum_to_one(weights)


def first_row_off(weights):
    """{index, got}: the first row of the weights that does not sum to 1 (NaN included), and its
    sum; None when every row does. For the failures that name that row."""
    sums = weights.sum(axis=-1)
    off = ~(np.abs(sums - 1) <= ROW_SUM_ATOL)
    if not off.any():
        return None
    index = tuple(int(i) for i in np.argwhere(off)[0])
    return {"index": list(index), "got": float(sums[index])}


def masked_weights_zero(weights, mask, code="masked_weight_not_zero"):
    blocked = np.broadcast_to(mask, weights.shape) == 0
    leaked = np.abs(weights[blocked])
    require(not blocked.any() or leaked.max() == 0.0, code,
            max_weight=float(leaked.max()) if leaked.size else 0.0,
            count=int((leaked != 0).sum()))


# Largest relative residual of the scale fit that is still a measurement. Weights that are
# softmax(c·scores), computed in float32, leave about 1e-7; weights that are not (Q from W_K, heads
# split as strided columns, K·Qᵀ, softmax over the queries) leave 0.1 and more.
FIT_RESIDUAL = 1e-3
# Scores closer than this are one score to the fit: their difference measures nothing.
SCORE_STEP = 1e-3


def fitted_scale(weights, scores):
    """Fit c in log w_ij - log w_im = c (s_ij - s_im) over every row with usable weights, m being
    the row's largest weight (a position a mask leaves open): (c, the fit's relative residual), or
    None with fewer than two usable differences. A residual far from zero means the weights are
    softmax(c·scores) for no c at all, so c measures nothing."""
    log_w = np.log(np.where(weights > 1e-30, weights, np.nan))
    top = np.nan_to_num(weights, nan=-np.inf).argmax(axis=-1)[..., None]
    dy = (log_w - np.take_along_axis(log_w, top, -1)).ravel()
    dx = (scores - np.take_along_axis(scores, top, -1)).ravel()
    usable = np.isfinite(dy) & (np.abs(dx) > SCORE_STEP)
    if usable.sum() < 2:
        return None
    dy, dx = dy[usable], dx[usable]
    scale = float(dy @ dx / (dx @ dx))
    residual = float(np.linalg.norm(dy - scale * dx) / np.linalg.norm(dy)) if dy.any() else 0.0
    return scale, residual


def scale_is(weights, scores, d_k, transposed=None, settings_changed=()):
    """The weights are softmax(scores / sqrt(d_k)), scores being the reference's unscaled QKᵀ. When
    no scale fits them, the mistake is upstream of the scale (projections, head split, a transposed
    product, the softmax's axis): reported as that, not as a measured value that means nothing.
    transposed: the unscaled scores of projections applied as x @ W.weight (square layers only),
    measured on where the reference's fit nothing: a mistake of the projections, reference_match's
    to name, that leaves the scale measurable and, when right, this property's points.
    settings_changed: torch's global settings the call changed (a matmul in bfloat16 through
    mkldnn moves every weight): where no scale or another fits, that is the mistake named."""
    expected = 1.0 / np.sqrt(d_k)
    fit = fitted_scale(weights, scores)
    if transposed is not None and (fit is None or fit[1] > FIT_RESIDUAL):
        other = fitted_scale(weights, transposed)
        if other is not None and other[1] <= FIT_RESIDUAL:
            fit = other
    if fit is None:  # one key per row, or scores that do not differ: nothing to measure; but where
        # they differ, rows without two positive weights (zeros, NaN, one-hot) are no softmax at all
        differing = int((np.abs(scores - scores[..., :1]) > SCORE_STEP).sum())
        if differing >= 2:
            settings_left_alone("forward", settings_changed)
            unmeasurable(weights, d_k, None)
        return
    measured, residual = fit
    if residual > FIT_RESIDUAL or abs(measured - expected) > 1e-3 * expected:
        settings_left_alone("forward", settings_changed)
    if residual > FIT_RESIDUAL:
        unmeasurable(weights, d_k, round(residual, 3))
    require(abs(measured - expected) <= 1e-3 * expected, "wrong_scale",
            measured=round(measured, 5), expected=round(expected, 5), d_k=d_k)


def unmeasurable(weights, d_k, residual):
    """Why no scale fits the weights: they are in reduced precision, or no distribution at all (a
    row that does not sum to 1: rows_sum_to_one's mistake, or the output returned in the weights'
    place, named as that test's), or a distribution that is not softmax(c·QKᵀ) for the reference's
    Q and K (the projections, the head split, the product's order)."""
    not_reduced_precision(weights)
    off = first_row_off(weights)
    if off is not None:
        raise PropertyFailure("weights_not_a_distribution_upstream", **off)
    raise PropertyFailure("scale_unmeasurable", d_k=d_k, residual=residual)


# The `attends` property: multiplying the keys (W_K's output) by SCALE_FACTOR multiplies every
# score by it, which moves every softmax row with two or more allowed positions. Weights from the
# keys alone (softmax of a score per key) move with the keys too but are the same for every query:
# where the weights are returned, their rows must differ as the reference's do (rows_differ);
# where only the output is, multiplying the queries must move it as well.
SCALE_FACTOR = 3.0
# An example can tell when the reference itself moves by ATTENDS_VISIBLE or more; the module must
# then move by at least ATTENDS_FRACTION of what the reference moves. Every honest mistake of the
# corpus (a wrong scale, a flipped mask, softmax over the queries...) moves by far more: at least
# 0.20 of it over its examples (q, k, v split in another order; measured on the 98 single-mistake
# files of tests/ and a helper's 36); a module that computes no attention (uniform weights, a
# running mean, a 1e-30 term in the scores) does not move at all, and one that mixes a few percent
# of softmax into uniform weights (2% moved 0.02) moves too little.
ATTENDS_VISIBLE = 1e-2
ATTENDS_FRACTION = 5e-2


def layer_scale(layer, rows=None, factor=SCALE_FACTOR):
    """The load option (parameters.draw's scale) that multiplies `layer`'s output (its `rows`) by
    `factor`: SCALE_FACTOR, or -1 (keys of the other sign, which move weights made of q·kᵀ, and
    not weights made of the norms |q|·|k|, or of anything else that ignores k's sign)."""
    return {"layer": layer, "rows": rows, "factor": factor}


def responds_to(role, before, after, expected_before, expected_after, what, layer, factor=SCALE_FACTOR):
    """`before` and `after` are what the module returned with its `role` ("keys" or "queries";
    "key_sign" for keys multiplied by -1) as drawn and multiplied by `factor` (layer: where they
    come from), the expected_* the reference's for the same. Outputs with no finite value where
    the reference's are finite cannot move: named as such (something before the softmax), not
    as keys ignored."""
    if not np.isfinite(before).any() and np.isfinite(expected_before).all():
        raise PropertyFailure("attends_not_finite", what=what)
    moved = movement(before, after, expected_before, expected_after)
    if moved is None:
        return  # this example cannot tell (scores nearly equal along every row); others can
    change, expected = moved
    require(change >= ATTENDS_FRACTION * expected, f"{role}_ignored", what=what, layer=layer,
            factor=factor, change=float(f"{change:.3g}"), expected=float(f"{expected:.3g}"))


def movement(before, after, expected_before, expected_after):
    """(how far the module's outputs moved, how far the reference's did), or None where the
    reference barely moves (by less than ATTENDS_VISIBLE): that example cannot tell."""
    expected = float(np.abs(expected_after - expected_before).max())
    if expected < ATTENDS_VISIBLE:
        return None
    with np.errstate(invalid="ignore"):
        moved = np.abs(after - before)
    moved[(after == before) | (np.isnan(after) & np.isnan(before))] = 0.0  # NaN only where it was NaN
    return float(np.nan_to_num(moved, nan=np.inf).max()), expected


def key_sign_matters(signs, queries, what, layer):
    """Keys of the other sign must move the weights (signs: responds_to's before, after and
    expected_* for W_K times -1), where the queries from W_Q move them (queries(): the same for
    W_Q times SCALE_FACTOR, asked for only when the sign moved nothing): a module whose queries
    come from W_K (K·Kᵀ, a mistake of the projections) is blind to the keys' sign as norms |q|·|k|
    are, but not to W_Q."""
    moved = movement(*signs)
    if moved is None or moved[0] >= ATTENDS_FRACTION * moved[1]:
        return
    by_queries = movement(*queries())
    if by_queries is not None and by_queries[0] >= ATTENDS_FRACTION * by_queries[1]:
        responds_to("key_sign", *signs, what, layer, factor=-1.0)


def rows_differ(weights, expected):
    """Weights from query–key similarity differ from one query (row) to the next where the
    reference's do; weights from the keys alone are the same in every row. A module that takes its
    queries from another projection (Q from W_K) still attends: its rows differ too."""
    def spread(w):  # the largest difference between two rows of one (batch, head)
        with np.errstate(invalid="ignore"):
            gaps = np.abs(w[..., :, None, :] - w[..., None, :, :])
        return float(np.nan_to_num(gaps, nan=np.inf).max()) if gaps.size else 0.0

    want = spread(expected)
    if want < ATTENDS_VISIBLE:
        return  # this example cannot tell (rows nearly equal in the reference too); others can
    got = spread(weights)
    require(got >= ATTENDS_FRACTION * want, "same_weights_for_every_query", change=float(f"{got:.3g}"),
            expected=float(f"{want:.3g}"))


# Weights above this enter scores_from_similarity's fit (their log is defined); its residual may be
# SIMILARITY_RTOL of the log-weights' spread, plus SIMILARITY_ATOL: a softmax taken in bfloat16 (3
# digits) leaves ~4e-3 there, float32 ~1e-6; weights that are no similarity leave 0.3 to 0.8 of it.
SIMILARITY_FLOOR, SIMILARITY_RTOL, SIMILARITY_ATOL = 1e-12, 0.05, 0.01
# scores_from_similarity's floor for weights read back from an output returned in float32 (its
# rounding, ~1e-7 of the output, leaves weights above this with logs right to ~1e-3).
FLOAT32_FLOOR = 1e-3
# The factor on the input of scores_from_similarity's second call.
INPUT_FACTOR = 2.0


def scores_from_similarity(weights, scaled_weights, factor=INPUT_FACTOR, floor=SIMILARITY_FLOOR):
    """Weights of attention are a softmax, over keys, of scores that are quadratic forms of the
    input (q_i·k_j with q and k linear in it, whatever projection, layout of the heads or scale):
    with the input multiplied by `factor`, log w_ij grows by factor² times itself plus a term of
    the row (the softmax's normaliser; a bias of the keys) and one of the column (a bias of the
    queries; a softmax over the queries). weights and scaled_weights (B, H, Tq, Tk): the module's
    at the input and at factor times it. Weights that move with queries and keys in any other way
    (a hash of their values, a function of their sums: no similarity) leave a residual. floor:
    the smallest weight fitted (FLOAT32_FLOOR for weights read back from a float32 output, whose
    rounding leaves the log of smaller ones to noise)."""
    B, H, Tq, Tk = weights.shape
    rows = np.zeros((B, Tq, Tk, B * Tq))
    cols = np.zeros((B, Tq, Tk, B * Tk))
    for b in range(B):
        rows[b, np.arange(Tq), :, b * Tq + np.arange(Tq)] = 1.0
        cols[b, :, np.arange(Tk), b * Tk + np.arange(Tk)] = 1.0
    design = np.concatenate([rows, cols], axis=-1)
    for head in range(H):
        w, scaled = weights[:, head], scaled_weights[:, head]
        with np.errstate(invalid="ignore"):
            used = np.isfinite(w) & np.isfinite(scaled) & (w > floor) & (scaled > floor)
        # These calls have no mask: a softmax gives every key a weight, far above SIMILARITY_FLOOR at
        # these inputs. Too few to fit is most keys kept out of every row (a window of one or two
        # keys, a top-k), which no similarity of queries and keys does.
        require(used.sum() >= 1.5 * design.shape[-1], "weights_mostly_zero", kept=int(used.sum()),
                total=int(used.size))
        grown = factor ** 2 * np.log(w[used])
        target = np.log(scaled[used]) - grown
        fit, *_ = np.linalg.lstsq(design[used], target, rcond=None)
        residual = float(np.sqrt(np.mean((design[used] @ fit - target) ** 2)))
        spread = float(np.std(grown))
        require(residual <= SIMILARITY_RTOL * spread + SIMILARITY_ATOL, "weights_not_from_similarity",
                residual=float(f"{residual:.3g}"), spread=float(f"{spread:.3g}"))


# How far an output may be from a combination of the values (relative) for the weights behind it
# to be read back (weights_behind_output): float32 leaves ~1e-5 there; a mistake in V or proj, O(1).
READ_BACK_RTOL = 1e-3


def same_in_float64(single, double):
    """A module's output in float32 and that of its float64 copy on the same input differ by
    rounding alone (~1e-6 of their size): a module that computes something else in float64 would
    have its float64 copy judged in its place."""
    both_nan = np.isnan(double) & np.isnan(single)  # a row with every key masked: NaN in any precision
    with np.errstate(invalid="ignore"):
        gaps = np.where(both_nan, 0.0, np.nan_to_num(np.abs(double - single), nan=np.inf))
    size = float(np.sqrt(np.mean(np.where(np.isfinite(double), double, 0.0) ** 2))) + 1e-12
    change = float(gaps.max()) / size if gaps.size else 0.0
    require(change <= READ_BACK_RTOL, "output_depends_on_precision", change=float(f"{change:.3g}"))


def weights_behind_output(params, x, output):
    """The causal weights (B, T, T) of a one-head module, read back from its output: proj undone
    (its weight is square, so invertible in practice), then each row's combination of the values
    v_j = W_V x_j + b_V (j <= i) solved for, exactly where the head is at least as wide as the
    sequence is long. None where the output is no such combination (a mistake in V or in proj):
    the weights cannot be told from the output there."""
    B, T, C = x.shape
    W, bias = params["qkv.weight"], params.get("qkv.bias", np.zeros(3 * C))
    combined = np.linalg.solve(params["proj.weight"], (output - params.get("proj.bias", 0.0)).transpose(0, 2, 1))
    combined = combined.transpose(0, 2, 1)
    values = x @ W[2 * C:].T + bias[2 * C:]
    weights = np.zeros((B, T, T))
    for b in range(B):
        for i in range(T):
            if not np.isfinite(combined[b, i]).all():
                weights[b, i] = np.nan  # no weights to read (a row with every key masked): not judged
                continue
            basis = values[b, :i + 1].T
            solved, *_ = np.linalg.lstsq(basis, combined[b, i], rcond=None)
            if np.linalg.norm(basis @ solved - combined[b, i]) > READ_BACK_RTOL * np.linalg.norm(combined[b, i]) + 1e-9:
                return None
            weights[b, i, :i + 1] = solved
    return weights


def batch_independent(run, inputs, rng, outputs_of, grown, masks=None):
    """Changing batch element b (every input at once) must leave every other element alone; and
    the elements must give the same outputs at the end of a batch grown to `grown` elements (the
    others new), without a mask and, where masks(batch) makes one mask per example, with one: a
    module whose output depends on how many examples it is given (a shift, a leak, a cache, or
    chunks of the batch that read the wrong rows of the mask, beyond some batch size) is right at
    the small sizes every other property draws and wrong at the sizes of gradients' calls, which
    `grown` reaches. outputs_of(reply, batch): the reply's output, shape-checked for a batch of
    that size."""
    batch = inputs[0].shape[0]
    before = outputs_of(run(*inputs), batch)
    victim = int(rng.integers(batch))
    changed = [x.copy() for x in inputs]
    for x in changed:
        x[victim] = rng.standard_normal(x[victim].shape).astype(x.dtype)
    after = outputs_of(run(*changed), batch)
    others = [b for b in range(batch) if b != victim]
    expect_close(after[others], before[others], "batch_leak", atol=1e-6, changed=victim)
    extra = grown - batch
    larger = [np.concatenate([rng.standard_normal((extra, *x.shape[1:])).astype(x.dtype), x]) for x in inputs]
    expect_close(outputs_of(run(*larger), grown)[extra:], before, "batch_size_changes_output", batch=batch, grown=grown)
    if masks is not None:  # as bool: a mask of another dtype the module cannot take is masked_zero's
        mask = masks(batch).astype(bool)
        before = taken(lambda **masked: run(*inputs, **masked), mask, lambda reply: outputs_of(reply, batch))
        after = outputs_of(run(*larger, mask=np.concatenate([masks(extra).astype(bool), mask])), grown)[extra:]
        expect_close(after, before, "batch_size_changes_output", batch=batch, grown=grown)


def gradients_reach_every_parameter(reply, biased=True):
    """Every parameter gets a finite, nonzero gradient. biased=False: the contract has no biases,
    and one the module has anyway is parameter_count's mistake, not a gradient's; its gradient may
    be exactly 0 (a key projection's bias shifts every score of a row alike, which the softmax
    ignores) without failing here."""
    grads = reply.grads
    missing = sorted(n for n, g in grads.items() if g is None)
    require(not missing, "no_gradient", names=missing)
    bad = sorted(n for n, g in grads.items() if not np.isfinite(g).all())
    require(not bad, "gradient_not_finite", names=bad)
    zero = sorted(n for n, g in grads.items() if not np.any(g) and (biased or not n.endswith(".bias")))
    require(not zero, "zero_gradient", names=zero)


def gradients_finite_when_large(reply):
    """At the largest input magnitude reference_match compares, the gradients (of the parameters
    and of the inputs) are finite numbers: their values are left to float32's rounding there (a
    saturated softmax's are tiny and may be 0), but a backward written by hand that recomputes the
    softmax without subtracting the row's max overflows to inf and NaN."""
    grads = {**{n: g for n, g in reply.grads.items() if g is not None},
             **{f"input {n}": g for n, g in reply.input_grads.items() if g is not None}}
    bad = sorted(n for n, g in grads.items() if not np.isfinite(g).all())
    require(not bad, "gradient_not_finite_large", names=bad)


def trains_from_its_own_start(fresh, args, weights=(), biased=True, reload=None, rows=None, one_key=None):
    """The module as a user starts with it (fresh(): one built with its own initial parameters,
    not values the grader loaded), evaluated once under torch.inference_mode() (a check before
    training), then run on `args` with autograd in eval, backward from its weights (output 1)
    where `weights` names the layers that make them, else from its output. reload (the call
    option): layers (or rows of one) given the grader's values first, whose own start is free (a
    proj, or value rows, that start at zero give the query and key rows no gradient at the first
    step alone: they train, then the rest does). rows:
    {name: [(start, stop)]}, blocks of a parameter's rows that must each get a gradient: qkv's
    query and key rows set to zero (bias included) make every score 0 and get none, ever, while its
    value rows get one.
    - The first call runs under inference_mode as it runs without it (an evaluation loop's
      torch.inference_mode() is as ordinary as torch.no_grad(); fails_under_inference_mode).
    - That call runs: a tensor forward kept from the first call is an inference tensor, which
      autograd cannot save (grad_after_inference_mode; confirmed on a second fresh module, where
      the same call alone runs).
    - The weights lead back to `weights` (W_Q, W_K): a loss on them (an entropy regulariser,
      supervised attention) trains those layers; weights returned detached (.detach(), .data,
      through numpy) make backward raise or reach nothing (weights_detached).
    - Gradients are not all zero (initial_gradients_zero): W_Q and W_K set to zero make every
      score 0, and neither gets a gradient, while with any values the grader loads they look
      right. From the output (no weights): every parameter, as gradients_reach_every_parameter.
    - With weights, one_key (args with a single key): the weights still lead back to `weights`
      (all zero there: the softmax of one score is 1 whatever it is), so that a shortcut for one
      position that returns constant weights (torch.ones, cut from the graph) is weights_detached.
    Anything else (a call that fails for another reason, gradients not finite) is the loaded
    module's to name, in the property's other checks."""
    from .harness import call_failure, runs_until_failure

    graded = (args, {"grad": True, **({"backward_from": 1} if weights else {}), **({"reload": reload} if reload else {})})
    replies, failed = runs_until_failure(fresh(), (args, {"inference": True}), graded)
    if failed:
        if failed[0] == 0:  # a forward that runs, but not under inference_mode (an evaluation loop's)
            _, plain = runs_until_failure(fresh(), (args, {}))
            if plain is None:
                raise call_failure(failed[1], "fails_under_inference_mode")
            return
        _, error = runs_until_failure(fresh(), graded)
        if error is None:
            raise call_failure(failed[1], "grad_after_inference_mode")
        if not (error[1].message or "").startswith("backward(): "):
            # a forward that raises with autograd on, here alone: one that raises without it too
            # is the loaded module's to name; one that runs without it, this call's own
            _, plain = runs_until_failure(fresh(), (args, without_autograd(graded[1])))
            if plain is None:
                raise error[1]
        require(not (weights and (error[1].message or "").startswith("backward(): ")), "weights_detached",
                names=list(weights))
        return
    grads = replies[-1].grads
    if not weights:
        try:
            gradients_reach_every_parameter(replies[-1], biased)
        except PropertyFailure as failure:
            if failure.code == "zero_gradient":
                raise PropertyFailure("initial_gradients_zero", names=failure.params["names"]) from None
            return
        # (a layer the fresh module no longer has, or has of another shape, replaced by its own
        # code since it was built, is not judged here: what it computes is, with the grader's
        # parameters, everywhere else)
        dead = _dead_blocks(grads, rows or {}, SUSPECT_GRADIENT)
        if dead:  # maybe rounding alone: judged again in float64, where a module can run so
            confirmed, failed = runs_until_failure(fresh(), (tuple(as_float64(a) for a in args), {**graded[1], "float64": True}))
            dead = [] if failed else _dead_blocks(confirmed[-1].grads, rows, DEAD_GRADIENT_64)
            calling(replies[-1].call)  # the example is the student's call, not the grader's float64 copy
        require(not dead, "initial_gradients_zero", names=[f"{name}[{start}:{stop}]" for name, start, stop in dead])
        return
    cut = [name for name in weights if grads.get(name) is None]
    require(not cut, "weights_detached", names=cut)
    zero = [name for name in weights if np.isfinite(grads[name]).all() and not np.any(grads[name])]
    require(not zero, "initial_gradients_zero", names=zero)
    if one_key is not None:
        replies, failed = runs_until_failure(fresh(), (one_key, {"grad": True, "backward_from": 1}))
        if failed:  # a forward that fails on one key is the loaded module's to name, elsewhere
            require(not (failed[1].message or "").startswith("backward(): "), "weights_detached", names=list(weights))
            return
        cut = [name for name in weights if replies[-1].grads.get(name) is None]
        require(not cut, "weights_detached", names=cut)


# A block of rows whose gradient stays below SUSPECT_GRADIENT of the largest entry of any gradient
# in the same call may hold rounding alone: keys that are all one vector (qkv's key rows at zero,
# the bias left) give every query the same scores, and the query rows get float32 noise (~1e-9 of
# it), not a gradient, while an honest small start gives them 1e-7 of it and more (normal(0,
# 0.002); nanoGPT's 0.02: 6e-5). Such blocks are judged again in float64 (a copy of the module in
# double), where that noise is ~1e-16 of it: below DEAD_GRADIENT_64 a block gets none.
SUSPECT_GRADIENT, DEAD_GRADIENT_64 = 1e-4, 1e-11


def _dead_blocks(grads, rows, below):
    """(name, start, stop) of each block of rows whose gradient is at most `below` times the
    largest entry of any finite gradient in grads (exactly zero, when every gradient is)."""
    finite = [np.abs(g).max() for g in grads.values() if isinstance(g, np.ndarray) and g.size and np.isfinite(g).all()]
    largest = float(max(finite, default=0.0))
    return [(name, start, stop) for name, blocks in rows.items() for start, stop in blocks
            if _has_rows(grads.get(name), stop) and float(np.abs(grads[name][start:stop]).max(initial=0.0)) <= below * largest]


def as_float64(value):
    """An input array in float64 (a mask or anything else as it is)."""
    return value.astype(np.float64) if isinstance(value, np.ndarray) and value.dtype == np.float32 else value


def _has_rows(grad, stop):
    return isinstance(grad, np.ndarray) and grad.ndim == 2 and grad.shape[0] >= stop


DROPOUT_REDRAWS = 2


def gradients_reach_every_parameter_in_train(module, call, reply, biased=True, rows=True):
    """gradients_reach_every_parameter for a call in train mode; with rows (where the module's eval
    forward pass is the reference's: a wrong one can leave rows without a gradient, and is
    reference_match's), every row (output unit) of each contract layer's weight gets a gradient
    too: a fused layer (qkv) whose query or key rows get none, because the scores are detached
    while training, still has a nonzero gradient as a whole, and in train mode no reference
    gradient is compared (the dropout draw is the module's).
    A zero that this call's dropout draw gives but another seed's does not was silenced by that draw
    (every weight on its paths dropped: likelier with one mask shared along an axis, which is
    train_dropout's business), not cut from the graph: only a zero every draw repeats fails.
    Costs an exchange only after a zero."""
    try:
        _train_gradients_reach(reply, module.params if rows else {}, biased)
    except PropertyFailure as failure:
        if failure.code not in ("zero_gradient", "zero_gradient_rows"):
            raise
        args, options = call
        for redraw in range(1, DROPOUT_REDRAWS + 1):
            again, error = attempted(lambda: module.run(*args, **{**options, "seed": options.get("seed", 0) + 7919 * redraw}))
            if error is None and not _zero_anywhere(again.grads, failure.params["names"], rows):
                return
        raise


def _train_gradients_reach(reply, contract, biased):
    gradients_reach_every_parameter(reply, biased)
    rows = {name: _zero_rows(reply.grads[name]) for name in sorted(contract)
            if name.endswith(".weight") and reply.grads.get(name) is not None and reply.grads[name].ndim == 2}
    zero = {name: count for name, count in rows.items() if count}
    if zero:
        name = next(iter(zero))
        raise PropertyFailure("zero_gradient_rows", names=list(zero), name=name, count=zero[name],
                              rows=reply.grads[name].shape[0])


def _zero_rows(grad):
    return int((~np.any(grad, axis=1)).sum())


def _zero_anywhere(grads, names, rows):
    """Whether any of these parameters' gradients is missing, or zero as a whole (or, with rows, in a row)."""
    for name in names:
        grad = grads.get(name)
        if grad is None or not np.any(grad) or (rows and grad.ndim == 2 and _zero_rows(grad)):
            return True
    return False


# gradients_match_reference: the central difference's step (float64: its error is ~1e-10 here), and
# the tolerance of the module's float32 gradient: relative to the size of the sum it is, plus, for a
# gradient whose true value is ~0 (a key bias's: float32 leaves ~1e-7 there), to the largest one's.
GRADIENT_STEP = 1e-6
GRADIENT_RTOL = 1e-3
GRADIENT_FLOOR = 1e-4


def gradients_match_reference(reply, params, output_of, upstream, rng, inputs=None, input_names=None):
    """The parameter gradients of sum(upstream · output) (reply.grads, a call with that upstream)
    are the reference's: along a random direction per parameter, each must give the central
    difference of that sum computed by output_of(params, {}) in float64 (two forward passes); and
    so must the gradient of each input in `inputs` ({name as the worker names it: float64 array},
    reply.input_grads; output_of(params, {name: changed input}); input_names: the names to show),
    a missing one counting as 0. A
    backward written by hand (torch.autograd.Function) or a graph cut on the way (.detach(), .data,
    torch.tensor(x)) shows here. Call it only where the forward pass is the reference's: a wrong
    forward pass is reference_match's, and its gradients are wrong with it."""
    names = [n for n in sorted(set(reply.grads) & set(params))
             if reply.grads[n] is not None and reply.grads[n].shape == params[n].shape]  # else not ours
    varied = [(name, params[name], reply.grads[name], lambda name, value: output_of({**params, name: value}, {}))
              for name in names]
    for name, value in sorted((inputs or {}).items()):
        grad = reply.input_grads.get(name)
        grad = np.zeros_like(value) if grad is None or grad.shape != value.shape else grad  # cut off: no gradient
        varied.append(((input_names or {}).get(name, name), value, grad,
                       lambda _, changed, name=name: output_of(params, {name: changed})))
    directions = [rng.standard_normal(value.shape) for _, value, _, _ in varied]
    terms = [grad.astype(np.float64) * direction for (_, _, grad, _), direction in zip(varied, directions)]
    largest = max((float(np.abs(t).sum()) for t in terms), default=0.0)
    for (name, value, _, output), direction, term in zip(varied, directions, terms):
        def summed(step):
            return float((upstream * output(name, value + step * direction)).sum())

        expected = (summed(GRADIENT_STEP) - summed(-GRADIENT_STEP)) / (2 * GRADIENT_STEP)
        got = float(term.sum())
        tolerance = GRADIENT_RTOL * max(float(np.abs(term).sum()), abs(expected)) + GRADIENT_FLOOR * largest
        require(abs(got - expected) <= tolerance, "gradient_mismatch", name=name, got=float(f"{got:.4g}"),
                expected=float(f"{expected:.4g}"))


def train_gradients_match_reference(reply, params, weights, p, output_from, weights_of, upstream, rng, inputs=None,
                                    input_names=None):
    """A train-mode call with autograd on (reply: output, the weights after dropout, and the
    gradients of sum(upstream · output)), where the weights returned are a dropout of the
    reference's (`weights`: each kept one multiplied by 1/(1-p), the others 0; else the dropout is
    train_dropout's business): the output must be the one those weights give (output_from(params,
    weights, {}), and the gradients those of that function with the same entries dropped
    (gradients_match_reference, weights_of(params, {}) being the reference's weights before
    dropout; both take {name: changed input} for the gradients of `inputs`, as there).
    Dropout that autograd does not see (applied through .data, a mask drawn again when a checkpoint
    recomputes it) or an output that, with autograd on, comes from another draw shows here.
    Whether it judged: where it did not, gradients_are_the_forwards can."""
    returned = reply.values(1)
    if returned is None or returned.shape != weights.shape:
        return False
    kept = returned != 0
    if not np.allclose(returned[kept], weights[kept] / (1 - p), rtol=1e-4, atol=1e-6):
        return False  # not a dropout of the reference's weights: not judged against the reference
    factor = kept / (1 - p)
    output = reply.values(0)
    expected = output_from(params, returned, {})
    require(isinstance(output, np.ndarray) and output.shape == expected.shape
            and np.allclose(output, expected, rtol=1e-4, atol=1e-5), "train_output_not_from_weights", p=p)
    gradients_match_reference(reply, params, lambda changed, moved: output_from(changed, weights_of(changed, moved) * factor, moved),
                              upstream, rng, inputs, input_names)
    return True


def gradients_judged(module, call, reply, expected, bound, output_of, upstream, rng, inputs=None, input_names=None):
    """The gradients of an eval call with autograd on (call, its reply), judged against the
    reference (gradients_match_reference, output_of as there) where its output is the reference's
    (right_with_autograd, expected and bound as there), else against its own forward pass
    (gradients_are_the_forwards): one mistake of the forward pass is reference_match's and does not
    cost this property too, and a wrong forward pass still has a backward to judge.
    Whether the forward pass was the reference's."""
    if right_with_autograd(module, call, reply, expected, bound):
        gradients_match_reference(reply, module.params, output_of, upstream, rng, inputs, input_names)
        return True
    gradients_are_the_forwards(module, call, reply, upstream)
    return False


# The central difference of a module's own forward pass: a step along a standard normal direction in
# parameter space, small enough that the second-order term stays below float32's rounding of the
# outputs it sums.
PERTURB_STEP = 1e-3
PERTURB_RTOL = 0.02


def gradients_are_the_forwards(module, call, reply, upstream):
    """A call with autograd on (call, its reply, `upstream` the gradient of the output it calls
    backward from, backward_from: 0 the output, 1 the weights): along a direction in parameter
    space and in the inputs whose gradients it asks for, the gradients must give the central
    difference of sum(upstream · output) that the same forward pass gives, under the same seed (so
    the same dropout draw), with the parameters (the worker's perturb option) and those inputs
    moved a step either way (two calls). No reference is needed: in train mode the draw is the
    module's, and in eval it judges the backward pass of a forward pass that is not the
    reference's (a forward pass wrong only at gradients' sizes must not hide a backward pass that
    is wrong too). The same call without autograd, under the same seed, must give the same output
    (same_without_autograd). Dropout that autograd does not see, a mask drawn again when the
    backward pass recomputes the forward one (checkpoint without preserve_rng_state), a backward
    written by hand or a graph cut shows here."""
    from ..worker import parameters

    args, options = call
    plain = without_autograd(options)
    seed = int(options.get("seed", 0)) + 104729
    # the inputs whose gradients the call asks for move too, along directions of their own
    moving = {int(name): np.random.default_rng([seed, int(name)]).standard_normal(args[int(name)].shape)
              for name in options.get("input_grads", ())}

    def moved(step):
        return tuple((t + step * moving[i]).astype(t.dtype) if i in moving else t for i, t in enumerate(args))

    # the moved calls as the call itself was made (autograd on), before any without it: a module
    # that keeps something from a call without autograd (a copy of a weight) is reference_match's
    plus, minus, again = module.runs((moved(PERTURB_STEP), {**options, "perturb": {"seed": seed, "step": PERTURB_STEP}}),
                                     (moved(-PERTURB_STEP), {**options, "perturb": {"seed": seed, "step": -PERTURB_STEP}}),
                                     (args, plain))
    index = int(options.get("backward_from", 0))
    outputs = [r.values(index) for r in (reply, again, plus, minus)]
    if not all(isinstance(o, np.ndarray) and o.shape == upstream.shape for o in outputs):
        return
    _same_without_autograd(reply, again, module, call)
    direction = parameters.direction(seed, module.param_shapes)
    terms = [reply.grads[name].astype(np.float64) * direction[name] for name in sorted(direction)
             if isinstance(reply.grads.get(name), np.ndarray) and reply.grads[name].shape == direction[name].shape]
    for position, along in moving.items():  # an input's gradient cut off (missing, another shape) counts as 0
        grad = reply.input_grads.get(str(position))
        if isinstance(grad, np.ndarray) and grad.shape == along.shape:
            terms.append(grad.astype(np.float64) * along)
    got = float(sum(t.sum() for t in terms))
    expected = float((upstream * (outputs[2].astype(np.float64) - outputs[3])).sum()) / (2 * PERTURB_STEP)
    scale = float(sum(np.abs(t).sum() for t in terms))
    calling(reply.call)
    missed = abs(got - expected) > PERTURB_RTOL * max(scale, abs(expected))
    if missed:  # a difference of outputs rounded to bfloat16 or float16 is mostly rounding: said so
        for moved_reply in (reply, plus, minus):  # as is a matmul's precision lowered for the program
            settings_left_alone("forward", moved_reply.settings_changed)
        not_reduced_precision(outputs[0], "output" if index == 0 else "weights")
    require(not missed, "train_gradient_mismatch" if options.get("train") else "own_gradient_mismatch",
            got=float(f"{got:.4g}"), expected=float(f"{expected:.4g}"))


def same_without_autograd(module, call, reply):
    """The output of a call made with autograd on (reply) is that of the same call without it,
    under the same seed: every other property calls without autograd, so a forward pass that
    changes with it (dropout, a mask or the scale skipped in training steps, another dropout
    draw) would be judged nowhere in the steps that train it."""
    args, options = call
    _same_without_autograd(reply, module.run(*args, **without_autograd(options)), module, call)


def _same_without_autograd(reply, again, module, call):
    """reply (autograd on) against `again`, the same call without autograd. Where they differ,
    they are told apart before autograd is blamed:
    - in train mode, the call without autograd is made once more: if that one differs too, the
      draw does not follow torch's seed at all (a torch.Generator of the module's, numpy's
      generator): said as that, which train_dropout names too;
    - the call with autograd is made once more: if that one differs from the first, the output
      depends on the calls made before it (a dropout mask or a result kept in self), not on
      autograd."""
    plain, raw = again.values(0), (reply.outputs[0] if reply.outputs else None)
    if plain is not None and isinstance(raw, np.ndarray) and raw.shape == plain.shape:
        calling(reply.call)
        got = as_array(raw, plain.shape, "output")  # of another dtype with autograd on (bool, say): dtype_mismatch
        if not np.allclose(got, plain, atol=1e-6, rtol=1e-5, equal_nan=True):
            if call[1].get("train"):
                once_more = module.run(*call[0], **without_autograd(call[1]))
                redrawn = once_more.values(0)
                if isinstance(redrawn, np.ndarray) and redrawn.shape == plain.shape:
                    dropout_follows_seed(plain, redrawn, module.kwargs.get("dropout"), "output", call=once_more.call)
            repeated = module.run(*call[0], **call[1]).values(0)  # values(): float64, or None
            calling(reply.call)
            if isinstance(repeated, np.ndarray) and repeated.shape == plain.shape:
                expect_close(repeated, got, "grad_call_depends_on_earlier_calls", atol=1e-6, rtol=1e-5)
        expect_close(got, plain, "output_changes_with_grad_mode", atol=1e-6, rtol=1e-5)


def gradients_through_weights(module, call, weights_of, bound, upstream, rng):
    """A loss on the weights a module returns (entropy regularisation, supervised attention) trains
    W_Q and W_K through them: backward from the weights (call: backward_from 1, `upstream` of the
    weights' shape), the parameters' gradients must be those of weights_of(params) (the reference's
    weights, float64; bound: their rounding bound) where the weights are the reference's, else those
    of the module's own forward pass. Weights whose values are right but whose backward is not (a
    softmax written with a detached normaliser, a custom autograd.Function) show here; a backward
    that cannot run from the weights at all is trains_from_its_own_start's to name."""
    from .harness import runs_until_failure

    replies, failed = runs_until_failure(module, call)
    if failed:
        return
    reply = replies[0]
    if agrees_with_reference(reply, 1, weights_of(module.params), bound):
        calling(reply.call)
        gradients_match_reference(reply, module.params, lambda params, _: weights_of(params), upstream, rng)
    else:
        gradients_are_the_forwards(module, call, reply, upstream)


def rows_reached(reply, contract):
    """Whether every row (output unit) of each contract layer's weight gets a gradient in this call:
    where an eval call's do, a train-mode call's must too (gradients_reach_every_parameter_in_train),
    whether or not the forward pass is the reference's."""
    return not any(_negligible_rows(reply.grads[name]) for name in contract if name.endswith(".weight")
                   and isinstance(reply.grads.get(name), np.ndarray) and reply.grads[name].ndim == 2)


def _negligible_rows(grad):
    """Rows of a gradient at most 1e-6 of its largest entry: what a kernel's rounding leaves where
    the exact gradient is 0 (sdpa's softmax over one key gives ~1e-9, not 0), as good as none."""
    scale = float(np.abs(grad).max()) if grad.size else 0.0
    if not np.isfinite(scale):
        return _zero_rows(grad)
    return int((np.abs(grad).max(axis=1) <= 1e-6 * scale).sum()) if scale > 0 else grad.shape[0]


def no_gradient_where_its_forward_is_blind(module, call, reply, blocked, row, names):
    """no_gradient_where_blocked for a call whose forward pass is not the reference's, judged
    against the module's own forward pass: the inputs `names` ({index as the worker names it: what
    to call it}) given other values at the positions `blocked` (B, T) closes to query row `row`;
    where the row's output does not change (the forward pass does not read them), no gradient may
    reach them. Where it changes, the forward pass reads what it may not, which is the masking's or
    the batch size's mistake (masked_zero, causality, batch_independence), not the backward's."""
    args, options = call
    plain = without_autograd(options)
    rng = np.random.default_rng(row)
    moved = [t.copy() for t in args]
    for index in names:
        moved[int(index)][blocked] = rng.standard_normal(moved[int(index)][blocked].shape).astype(moved[int(index)].dtype)
    before, after = module.runs((args, plain), (tuple(moved), plain))
    rows = [None if (output := r.values(0)) is None or output.ndim < 2 else output[..., row, :]
            for r in (reply, before, after)]
    if any(r is None or r.shape != rows[0].shape for r in rows):
        return  # outputs of another shape: shapes' to name
    _same_without_autograd(reply, before, module, call)
    if not np.allclose(rows[1], rows[2], rtol=0, atol=1e-6):
        return
    for index, what in names.items():
        no_gradient_where_blocked(reply.input_grads.get(index), blocked, what, row)


def finite(array, what):
    require(np.isfinite(array).all(), "not_finite", what=what,
            count=int((~np.isfinite(array)).sum()))


def stable(output, weights):
    """No NaN or inf anywhere, and weight rows still sum to one (large inputs, say)."""
    finite(output, "output")
    finite(weights, "weights")
    rows_sum_to_one(weights)


def stable_when_large(large, masks, at_scale_1, described):
    """large_inputs for modules that return their weights: `large` holds (output, weights) at
    magnitude ~1000 for a call without a mask, then one for each of `masks` (as each broadcasts
    against the weights: every shape and dtype, which a module may read another way); described:
    each call's description (Reply.call), for the failure to name the call it is about.
    Only when they fail is at_scale_1() asked for: the same calls with the inputs divided by
    1000. What already goes wrong at magnitude ~1 (weights that are not 0 where the mask is 0,
    NaN rows from a mask read the other way, rows that do not sum to one) is not about magnitude:
    it is named as the problem of the property that tests it (rows_sum_to_one, masked_zero), the
    unmasked call's rows first: a softmax over the wrong axis also leaves NaN under a mask."""

    def at_magnitude_1000():
        calling(described[0])
        stable(*large[0])
        for got, mask, call in zip(large[1:], masks, described[1:]):
            calling(call)
            stable(*got)
            masked_weights_zero(got[1], mask, "masked_weight_not_zero_large")

    unless_wrong_at_magnitude_1(at_magnitude_1000, lambda: already_wrong_at_scale_1(at_scale_1(), masks, described))


def is_the_reference(got, bounded):
    """Whether the (output, weights) a module returned are the reference's (bounded: what
    reference.*_bounded returns: output, weights, their bounds), up to float32 rounding; never fails."""
    return _within_reference(got[0], bounded[0], bounded[2]) and _within_reference(got[1], bounded[1], bounded[3])


WINNER_SLACK = 1e-3


def winners_kept_when_large(weights, winners, right_below):
    """At magnitude ~1000, on the rows where the reference's softmax is an argmax (`winners`: one
    (winner, decided) pair of reference.decided per call), the weights (one array per call) put
    all but WINNER_SLACK of the row on that position, as any correct module does, whatever its
    order of operations. A module that changes large scores (clamps them, say) spreads it. Judged
    only when the same calls at the magnitudes reference_match compares are right (right_below()):
    a module that computes other scores, or is already wrong there, is reference_match's mistake."""
    for got_weights, (winner, sure) in zip(weights, winners):
        got = np.take_along_axis(got_weights, winner[..., None], -1)[..., 0]
        bad = sure & ~(got >= 1 - WINNER_SLACK)
        if bad.any():
            if not right_below():
                return
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            raise PropertyFailure("large_scores_changed", index=list(index), got=round(float(got[index]), 4),
                                  position=int(winner[index]))


def outputs_kept_when_large(outputs, decided, right_below, code):
    """At magnitude ~1000, on the rows where the reference's softmax is an argmax in every head
    (`decided`: one (output, bound, rows) of reference.*_decided per call), each output (one array
    per call) is the winners' values, as any correct module gives, whatever its order of
    operations. Judged only when the same calls at the magnitudes reference_match compares are
    right (right_below()); else `code`: a module that changes large scores (clamps them), or
    computes its output by another path than its weights (with another, finite, mask fill)."""
    for got, (wanted, bound, sure) in zip(outputs, decided):
        tolerance = reference_tolerance(wanted, bound, magnitude=1e3)
        with np.errstate(invalid="ignore"):
            bad = sure[..., None] & ~(np.abs(got - wanted) <= tolerance)
        if bad.any():
            if not right_below():
                return
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            raise PropertyFailure(code, index=list(index), got=round(float(got[index]), 4),
                                  expected=round(float(wanted[index]), 4))


def unless_wrong_at_magnitude_1(check, upstream):
    """large_inputs' order of judgement: check() judges the calls at large magnitude; only when it
    fails does upstream() make the same calls at magnitude ~1 and raise the failure that names a
    mistake already there (another property's). Otherwise check's failure stands, diagnosed again
    with every call the example made."""
    try:
        check()
    except PropertyFailure as failure:
        about = call_at_fault()
        upstream()
        calling(about)  # the failure is about the large call, not the last one upstream() made
        diagnose_again(failure)  # the calls at magnitude ~1 are evidence too
        raise


def already_wrong_at_scale_1(small, masks, described):
    """Raise stable_when_large's *_upstream failures when the calls at magnitude ~1 (small: as
    stable_when_large's `large`; described: their calls, with the same shapes and masks) already
    fail, naming the call that does."""

    def rows_sum_to_one_at_scale_1(weights):
        off = first_row_off(weights)
        if off is not None:
            raise PropertyFailure("rows_do_not_sum_to_one_upstream", **off)

    calling(described[0])
    rows_sum_to_one_at_scale_1(small[0][1])
    for got, mask, call in zip(small[1:], masks, described[1:]):
        calling(call)
        weights = got[1]
        wrong = (np.broadcast_to(mask, weights.shape) == 0) & (weights != 0) | ~np.isfinite(weights)  # NaN != 0
        if wrong.any():
            raise PropertyFailure("masked_weight_not_zero_upstream", count=int(wrong.sum()))
        rows_sum_to_one_at_scale_1(weights)


def drops_at_a_rare_rate(dropped, p, calls, entries, layer):
    """dropped: of every one of `calls` train-mode calls at rate p (strategies.RARE_P), where the
    dropout `layer` acted (the weights or outputs it zeroed; the rows an attention weight dropped
    moved), of `entries` it draws for in all: somewhere at least."""
    require(any(bool(d.any()) for d in dropped), "dropout_never_at_rare_rate", p=p, calls=calls,
            entries=entries, expected=round(entries * p), layer=layer)


BFLOAT16_ROUNDOFF = 2.0 ** -8 * 1.01  # bfloat16's unit roundoff (8 bits of precision), and float32's noise on it


def survivors_rescaled(trained, evaluated, p):
    """What dropout kept (entries of `trained` that are not 0 where `evaluated`, eval's, are not)
    is eval's divided by (1 - p), at any p: a dropout that skips the rescale where p is small
    (1/(1 - 0.004) = 1.004: invisible to the eye, but the expectation of every weight 0.4% low)."""
    kept = (trained != 0) & (evaluated != 0)
    expected = np.where(kept, evaluated / (1.0 - p), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        off = np.abs(trained[kept] / expected[kept] - 1.0)
    # Rounding (float16, bfloat16) misses each survivor by its own amount, at most bfloat16's unit
    # roundoff; a factor left out misses them all alike, and a row renormalised after dropout by far more.
    rounding = off.size > 0 and np.all(np.isfinite(off)) and off.max() <= BFLOAT16_ROUNDOFF and np.ptp(off) > off.max() / 2
    expect_close(np.where(kept, trained, 0.0), expected, "dropout_not_rescaled_in_reduced_precision" if rounding
                 else "dropout_not_rescaled", p=p, scale=round(1.0 / (1.0 - p), 4))


def used_at_a_high_rate(trained, evaluated, p, what, layer=None, path=None):
    """At a rate no example draws (strategies.EXACT_P, near 1), dropout acts with that rate: what
    it kept (entries of `trained` that are not 0 where eval's `evaluated` are not) is eval's divided
    by (1 - p), and about a fraction p was dropped. A layer that keeps p as given while forward uses
    another (F.dropout(w, min(self.dropout.p, 0.9)), dropout_p=round(p, 2) in the fused path) is
    right at every rate drawn and shows only here. With no entry kept nothing is judged on the
    factor (a correct module keeps none with probability (1 - p)^total). Named as a layer's
    (`layer`, `path`: CausalSelfAttention's, read from its output) or as the weights'."""
    live = evaluated != 0
    kept = (trained != 0) & live
    total, dropped = int(live.sum()), int(((trained == 0) & live).sum())
    scale = 1.0 / (1.0 - p)
    if kept.any() and not np.all(near(trained[kept], evaluated[kept] * scale)):
        ratios = trained[kept] / evaluated[kept]
        factor = float(np.median(ratios[np.abs(evaluated[kept]) >= np.median(np.abs(evaluated[kept]))]))
        measured = round(1.0 - 1.0 / factor, 3) if factor > 1 else 0.0
        if layer is not None:
            raise PropertyFailure("layer_dropout_ignores_p", p=p, path=path, layer=layer, factor=round(factor, 4),
                                  scale=round(scale, 4), measured=measured)
        raise PropertyFailure("dropout_ignores_p", p=p, factor=round(factor, 4), measured=measured,
                              fraction=round(dropped / total, 3), scale=round(scale, 4))
    dropout_rate(dropped, total, p, what)


def near(got, want):
    """Entrywise: got within float32's rounding of a train-mode output (1e-4 relative, plus 1e-4)
    of want; far enough apart that a rescale by 1/(1 - 0.004) shows."""
    return np.abs(got - want) <= 1e-4 * (1.0 + np.abs(want))


def left_whole_rescaled(trained, evaluated, rescaled, p, layer, path):
    """CausalSelfAttention's train-mode output (B, T, C) with only `layer` dropping, against eval's
    output (`evaluated`) and what a row the layer left whole must be (`rescaled`: eval's with the
    survivors divided by (1 - p)). No row may be eval's and not that: the rescale skipped (where p
    is small, 1/(1 - 0.004) = 1.004), as a hand-written dropout that rescales only from some p on."""
    unscaled = np.all(near(trained, evaluated), axis=-1) & ~np.all(near(trained, rescaled), axis=-1)
    require(not unscaled.any(), "layer_dropout_wrong_factor", p=p, path=path, layer=layer, factor=1.0,
            scale=round(1.0 / (1.0 - p), 4))


# Sizes of the train-mode dropout checks: enough independent dropout draws that a correct dropout,
# whatever order it draws its randomness in, lands inside the bounds below except with negligible
# probability (the figures are next to each check).
DROPOUT_DRAWS = 2048
RATE_SIGMAS = 7


def dropout_not_tied_to_autograd(module, call, evaluated, **params):
    """Called where a train-mode call, made under torch.no_grad() as train_dropout's are, dropped
    nothing (its output is `evaluated`, the eval one): the same call with autograd on that does drop
    shows dropout tied to torch.is_grad_enabled() or requires_grad instead of self.training
    (dropout_depends_on_grad_mode); one that does not leaves the failure to the caller's checks.
    Costs an exchange only on that path."""
    args, options = call
    again = module.run(*args, **{**options, "grad": True})
    first = again.values(0)
    # an output of another form with autograd (a meta tensor, another shape) moved too
    moved = not (isinstance(first, np.ndarray) and first.shape == np.shape(evaluated)
                 and np.array_equal(first, evaluated, equal_nan=True))
    require(not moved, "dropout_depends_on_grad_mode", **params)


def dropout_kept_under_inference_mode(module, call, judge, **params):
    """Called where a train-mode call, made under torch.no_grad() as train_dropout's are, dropped
    as it should: the same call under torch.inference_mode() (a validation pass left in train(),
    Monte Carlo dropout) must pass the caller's checks of it too (`judge`, given the reply), since
    dropout follows self.training, never the grad mode (dropout_off_under_inference_mode: one that
    skips all or part of it there, through torch.is_inference_mode_enabled(), say). Costs an
    exchange."""
    args, options = call
    reply = module.run(*args, **options, inference=True)
    try:
        judge(reply)
    except PropertyFailure:
        raise PropertyFailure("dropout_off_under_inference_mode", **params) from None


def dropout_rate(dropped, total, p, what):
    """`dropped` of `total` independent Bernoulli(p) draws must be within RATE_SIGMAS standard
    deviations (+1) of total·p. For total >= 2048 and p in strategies.dropout_rates, the exact
    binomial tail outside that band is below 5e-12 (about 2e-9 at 6 sigmas), so a correct dropout
    never fails it in practice. The band is at most ±0.078 wide there, so a dropout whose rate is
    0.15 or more away from p (a hard-coded 0.1 where p = 0.25, nn.Dropout()'s 0.5 where p = 0.25
    or 0.75) falls outside it but with a probability below 1e-9."""
    require(_rate_fits(dropped, total, p), "dropout_wrong_rate", what=what, p=p,
            fraction=round(dropped / total, 3), dropped=dropped, total=total)


# dropped_at_a_tiny_rate fails where so many drops have a chance below this (Chernoff's bound).
TINY_RATE_CHANCE = 1e-11


def dropped_at_a_tiny_rate(dropped, total, p, what):
    """At a rate far below 1/total (strategies.TINY_P), a dropout drawn in float32 drops about
    total·p entries, almost always none; one whose draw has a floor above p drops more: uniforms
    drawn in float16 or bfloat16 are exactly 0 once in 4096 or 512 draws, and `u < p` drops those
    (42 of 174k weights in float16, where 0.17 are expected). Fails where `dropped` or more has a
    chance below TINY_RATE_CHANCE: Chernoff's bound, exp(-n·KL(dropped/n || p)), never below it."""
    expected = total * p
    if dropped <= expected:
        return
    divergence = float(_divergence(np.float64(dropped / total), p))
    require(total * divergence < -math.log(TINY_RATE_CHANCE), "dropout_rate_floor", what=what, p=p,
            dropped=dropped, total=total, expected=round(expected, 2))


def _rate_fits(dropped, total, p):
    return abs(dropped - total * p) <= RATE_SIGMAS * math.sqrt(total * p * (1 - p)) + 1


def dropout_on_weights(trained, evaluated, p, axes=("axis_batch", "axis_heads", "axis_queries", "axis_keys")):
    """Weights returned in train mode against the same module's weights in eval mode: each one
    either dropped (exactly 0) or divided by (1 - p), with about a fraction p dropped, each drawn
    apart (not one mask for every index of an axis of `axes`, the leading ones)."""
    live = evaluated != 0
    total = int(live.sum())
    dropped = (trained == 0) & live
    require(dropped.any(), "dropout_not_applied", p=p, dropped=0, total=total)
    for axis, name in enumerate(axes):
        not_shared_along(dropped, live, axis, name, p, "weights")
    not_paired(dropped, live, p, enumerate(axes), "weights")
    kept = (trained != 0) & live
    scale = 1.0 / (1.0 - p)
    expected = np.where(kept, evaluated * scale, trained)
    if not np.allclose(trained, expected, atol=1e-5, rtol=1e-4):
        ratio = trained[kept] / evaluated[kept]
        factor = float(np.median(ratio)) if ratio.size else 1.0
        # (a factor that rounds to 1/(1-p) is a rescale in reduced precision: survivors_rescaled's)
        if factor > 1 + 1e-3 and abs(factor - scale) > 1e-3 * scale and np.allclose(ratio, factor, rtol=1e-3, atol=0):
            # One constant factor, not 1/(1-p): with the rate of p, a hand-written rescale (1/p);
            # 1/(1-p)² with the rate 1-(1-p)², the same dropout applied twice; with another rate,
            # the dropout runs with some other p (nn.Dropout(0.1)).
            fraction = round(float(dropped.sum()) / total, 3)
            code = ("dropout_wrong_factor" if _rate_fits(int(dropped.sum()), total, p)
                    else "dropout_applied_twice" if abs(factor * (1 - p) ** 2 - 1) < 1e-3
                    and _rate_fits(int(dropped.sum()), total, 1 - (1 - p) ** 2)
                    else "dropout_ignores_p")
            raise PropertyFailure(code, p=p, factor=round(factor, 4), measured=round(1 - 1 / factor, 3),
                                  fraction=fraction, scale=round(scale, 4))
        survivors_rescaled(trained, evaluated, p)
    dropout_rate(int(dropped.sum()), total, p, "weights")


# first_token_not_shared's floor: positions where two batch rows can disagree, each agreeing with
# probability <= 5/8 for the rates of strategies.dropout_rates, so that 64 of them all agree with
# probability < 1e-13.
SHARED_MASK_POSITIONS = 64

# not_shared_along judges an axis only where a mask drawn per entry looks shared along it with
# probability below this (dropout_rate's band is left with about 2e-9).
SHARED_MASK_CHANCE = 1e-9


def not_shared_along(dropped, live, axis, name, p, what):
    """dropped (where dropout zeroed an entry) varies along `axis` somewhere: one mask for every
    index of it (torch.rand_like(weights[:1]), dropout of torch.ones(B, 1, T, T)) leaves each line
    along the axis all dropped or all kept on its live entries. A mask drawn per entry does that
    with probability Π p^k + (1-p)^k over the lines (k live entries each): judged only where that
    is below SHARED_MASK_CHANCE, so a correct dropout fails with no more than that."""
    k = live.sum(axis=axis)
    chance = np.where(k >= 2, p ** k + (1 - p) ** k, 1.0)
    if np.log(chance).sum() > math.log(SHARED_MASK_CHANCE):
        return  # too few positions to tell
    varies = (dropped & live).any(axis=axis) & ~(dropped | ~live).all(axis=axis)
    require(varies.any(), "dropout_mask_shared", p=p, axis=name, size=dropped.shape[axis], what=what)


# not_paired's families of tests (see there) share this chance of failing a correct dropout, in
# one call: each family an equal part of it, split evenly among that family's tests.
PAIRED_MASK_CHANCE = 1e-11
# Below this many samples of a pair, no count of not_paired's can be out of chance's reach (the
# most telling, both dropped every time at rate 0.1, has chance 0.01^8 = 1e-16).
MIN_PAIR_SAMPLES = 8
# not_paired's third and fourth families are left out where an axis or a batch row has more
# positions than this: their table of pairs grows as the square (512: 3 MiB a count).
MAX_ROW_POSITIONS = 512
# The distances not_paired's first family judges along an axis longer than MAX_ROW_POSITIONS (besides
# its half): a mask drawn for a few batch rows and tiled.
LONG_AXIS_DISTANCES = 64
# Cells of a pair of entries' 2x2 table (both dropped, both kept, one of each) a family judges.
PAIR_CELLS = 3


def not_paired(dropped, live, p, axes, what):
    """dropped (where dropout zeroed an entry) is drawn apart for every entry, as nn.Dropout draws
    it: no draw repeated (a mask tiled over heads, made symmetric, repeated for blocks of keys) nor
    turned against another (1 - u for the other half of the heads, a mask and its complement).
    For a pair of live entries drawn apart, both are dropped with probability r², both kept
    with (1 - r)², one of each otherwise (r: the rate they were drawn at, read from `dropped`
    itself, so that a rate other than p is dropout_rate's to name). not_paired counts those three
    outcomes over families of pairs, and fails where one count is out of reach of chance:
    1. along each (axis, name) of `axes`, entries d apart, for every d (disjoint pairs: i in every
       other block of d; _shifts), all pairs at one d together ("dropout_mask_paired");
    2. where the last two axes are both judged and as long, a weight and its transpose
       ((i, j) and (j, i), "dropout_mask_mirrored");
    3. along each axis, each pair of positions i < j on its own, counted over the other axes
       ("dropout_mask_linked");
    4. where two axes or more besides the batch are judged, each pair of positions of a batch row
       on its own (across heads, queries and keys at once), counted over the batch.
    Each count's chance is bounded by Chernoff's bound on the binomial's tail (never below the
    true chance), the rate taken at the end of dropout_rate's band around r that is kindest to
    it; a family fails below PAIRED_MASK_CHANCE / 4 shared among its tests. The first family
    that fails names the mistake, by its most telling pair."""
    axes = list(axes)
    drawn = dropped & live
    total = int(live.sum())
    if not total or not drawn.any() or drawn.sum() == total:
        return
    rate = drawn.sum() / total
    band = RATE_SIGMAS * math.sqrt(rate * (1 - rate) / total) + 1 / total
    rates = (max(rate - band, 0.0), min(rate + band, 1.0))
    for counts, describe in _pair_families(drawn, live, axes):
        failed = _most_telling(counts, rate, rates, math.log(PAIRED_MASK_CHANCE / 4))
        if failed is not None:
            count, agree, expected, at = failed
            code, params = describe(at)
            raise PropertyFailure(code, p=p, what=what, **params, count=count, agree=agree, expected=expected)


def _pair_families(drawn, live, axes):
    """not_paired's four families, each as (counts, describe): counts an array (..., 3) of (pairs
    with both entries live, both dropped, both kept) per test, describe(index of a test) -> its
    (code, params)."""
    judged = [axis for axis, _ in axes]
    name_of = dict(axes)
    rows = {axis: _pair_rows(drawn, live, [axis]) for axis in judged}
    along = {axis: _shift_counts(rows[axis]) for axis in judged}
    shifts = [(axis, distance) for axis in judged for distance in along[axis][1]]
    if shifts:
        counts = np.concatenate([along[axis][0] for axis in judged])
        yield counts, lambda at: ("dropout_mask_paired", {"pairs": f"along_{name_of[shifts[at][0]]}",
                                                          "apart": shifts[at][1]})
    last = drawn.ndim - 1
    if last >= 1 and {last - 1, last} <= set(judged) and drawn.shape[-1] == drawn.shape[-2]:
        upper = np.triu(np.ones(drawn.shape[-2:], dtype=bool), 1)
        both = live & np.swapaxes(live, -1, -2) & upper
        mirror = np.swapaxes(drawn, -1, -2)
        counts = np.array([[both.sum(), (drawn & mirror & both).sum(), (~drawn & ~mirror & both).sum()]])
        yield counts, lambda at: ("dropout_mask_mirrored", {})
    for axis in judged:
        yield from _each_pair(rows[axis], f"along_{name_of[axis]}", int)
    positions = [axis for axis in judged if axis != 0]
    if len(positions) >= 2:
        shape = [drawn.shape[axis] for axis in positions]
        within = "within_" + "_".join(name_of[axis].removeprefix("axis_") for axis in positions)
        yield from _each_pair(_pair_rows(drawn, live, positions), within,
                              lambda i: str(tuple(int(k) for k in np.unravel_index(i, shape))))


def _pair_rows(drawn, live, axes):
    """(both live, dropped, kept) as float (S, M) matrices: the positions over `axes` (flattened)
    against the samples (the other axes), whose products count pairs of positions; with their
    (S, S) products where S is at most MAX_ROW_POSITIONS (None beyond)."""
    def flat(flags):
        moved = np.moveaxis(flags, axes, range(len(axes)))
        return moved.reshape(math.prod(moved.shape[:len(axes)]), -1).astype(np.float64)

    rows = [flat(live), flat(drawn), flat(live & ~drawn)]
    tables = [r @ r.T for r in rows] if rows[0].shape[0] <= MAX_ROW_POSITIONS else None
    return rows, tables


@functools.lru_cache(maxsize=64)
def _shifts(size):
    """The disjoint pairs (i, i + d) of positions 0..size-1 (i in every other block of d) at each
    distance d that not_paired judges, as (first, second, index of d) arrays, and those distances:
    all of them up to MAX_ROW_POSITIONS positions; on a longer axis (the batch of the examples with
    few weights each), d up to LONG_AXIS_DISTANCES and the half (a mask drawn for half the batch)."""
    distances = range(1, size)
    if size > MAX_ROW_POSITIONS:
        distances = sorted({*range(1, LONG_AXIS_DISTANCES + 1), size // 2, (size + 1) // 2})
    pairs = []
    for index, distance in enumerate(distances):
        start = np.arange(size - distance)
        start = start[(start // distance) % 2 == 0]
        pairs.append((start, start + distance, np.full(start.size, index)))
    return tuple(np.concatenate(column) for column in zip(*pairs)), list(distances)


def _shift_counts(rows):
    """not_paired's counts summed over the disjoint pairs at each distance along _pair_rows'
    positions, and those distances: ((distances, 3), distances)."""
    rows, tables = rows
    size = rows[0].shape[0]
    if size < 2:
        return np.zeros((0, PAIR_CELLS)), []
    (first, second, index), distances = _shifts(size)
    if tables is not None:
        products = [table[first, second] for table in tables]
    else:
        products = [np.einsum("km,km->k", flags[first], flags[second]) for flags in rows]
    counts = np.stack([np.bincount(index, weights=p, minlength=len(distances)) for p in products], axis=-1)
    return counts, distances


def _each_pair(rows, pairs, position):
    """Family 3 or 4: each pair of positions of `rows` on its own, where there are at most
    MAX_ROW_POSITIONS positions (the table grows as their square) and MIN_PAIR_SAMPLES samples
    (fewer cannot tell, and would only share the family's chance)."""
    rows, tables = rows
    size, samples = rows[0].shape
    if tables is None or size < 2 or samples < MIN_PAIR_SAMPLES:
        return
    first, second = np.triu_indices(size, 1)
    table = np.stack([table[first, second] for table in tables], axis=-1)
    yield table, lambda at: ("dropout_mask_linked", {"pairs": pairs, "first": position(first[at]),
                                                     "second": position(second[at])})


def _most_telling(counts, rate, rates, log_chance):
    """The test of `counts` (T, 3) whose count is least likely by chance, as (pairs, agreeing
    pairs, agreeing pairs expected at `rate`, its index), if that is below exp(log_chance) / (6 K)
    for every rate in `rates` (low, high), K the tests that could get there at all (both tails of
    three cells: 6 K); else None."""
    counts = np.asarray(counts, dtype=np.float64).reshape(-1, PAIR_CELLS)
    low, high = rates
    chances = np.array([[low ** 2, high ** 2], [(1 - high) ** 2, (1 - low) ** 2],
                        sorted([2 * low * (1 - low), 2 * high * (1 - high)])])
    if low <= 0.5 <= high:
        chances[2, 1] = 0.5
    with np.errstate(divide="ignore"):  # the most one pair can tell: every pair in a cell, or none
        most = float(np.max([-np.log(chances[:, 1]), -np.log1p(-chances[:, 0])]))
    pairs = counts[:, 0]
    reachable = np.flatnonzero(pairs * most >= math.log(pairs.size * 2 * PAIR_CELLS) - log_chance)
    if not reachable.size:
        return None
    pairs, counts = pairs[reachable], counts[reachable]
    observed = np.stack([counts[:, 1], counts[:, 2], pairs - counts[:, 1] - counts[:, 2]], axis=-1)
    fraction = observed / pairs[:, None]
    # Chernoff: P(X/n >= f) <= exp(-n KL(f || c)) for f above the largest chance c, and below alike
    above = np.where(fraction > chances[:, 1], _divergence(fraction, chances[:, 1]), 0.0)
    below = np.where(fraction < chances[:, 0], _divergence(fraction, chances[:, 0]), 0.0)
    best = (np.maximum(above, below) * pairs[:, None]).max(axis=-1)
    at = int(np.argmax(best))
    if best[at] < math.log(reachable.size * 2 * PAIR_CELLS) - log_chance:
        return None
    agreeing = observed[at, 0] + observed[at, 1]
    expected = pairs[at] * (rate ** 2 + (1 - rate) ** 2)
    return int(pairs[at]), int(agreeing), int(round(expected)), int(reachable[at])


def _divergence(fraction, chance):
    """Kullback-Leibler divergence of Bernoulli(fraction) from Bernoulli(chance), elementwise;
    infinite where chance is 0 or 1 and fraction is not."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = [np.where(f > 0, f * np.log(f / c), 0.0) for f, c in ((fraction, chance), (1 - fraction, 1 - chance))]
    return np.nan_to_num(terms[0] + terms[1], nan=np.inf, posinf=np.inf)


def dropped_entrywise(trained, evaluated, p):
    """Whether `trained` is `evaluated` with some entries dropped (exactly 0) and the rest divided
    by (1 - p): nn.Dropout's mark, on whatever tensor it was applied to. Never fails."""
    dropped = (trained == 0) & (evaluated != 0)
    kept = ~dropped
    return bool(dropped.any()) and np.allclose(trained[kept], evaluated[kept] / (1 - p), atol=1e-5, rtol=1e-4)


def first_token_not_shared(choices, p):
    """causal_dropout's choices (which heads kept the first token's weight, per batch row; -1
    where resid_drop hid the row) differ between rows: one attention dropout mask for the whole
    batch (torch.rand_like(att[:1])) makes them all alike (see SHARED_MASK_POSITIONS)."""
    seen = choices[choices >= 0]
    if seen.size >= SHARED_MASK_POSITIONS:
        require(len(np.unique(seen)) > 1, "dropout_mask_shared", p=p, axis="axis_batch", size=int(seen.size),
                what="first_token_weights")


MIN_FIRST_TOKEN_DRAWS = 64


def first_token_dropout_rate(choices, heads, p):
    """The first token's attention weights that causal_dropout's choices say were dropped (a 0 bit
    of a row's choice, one bit per head) must be about a fraction p of those seen (rows that
    resid_drop did not wipe out, choice -1): dropout_rate's band. Judged where proj has a bias, so
    that a row whose every weight was dropped still shows (as proj's bias alone), and on at least
    MIN_FIRST_TOKEN_DRAWS weights, where the band is at most ±0.4 of them wide: a dropout that
    keeps with probability p instead of 1 - p (rate 0.75 for p = 0.25) falls outside it."""
    seen = choices[choices >= 0]
    total = seen.size * heads
    if total < MIN_FIRST_TOKEN_DRAWS:
        return
    kept = int(sum(int(c).bit_count() for c in seen))
    dropout_rate(total - kept, total, p, "first_token_weights")


def train_output_leaks(before, after, again):
    """Whether a train-mode output (B, T, C) moved before its last token when only that token
    changed (after), under one seed: the same dropout masks. Judged only if the same input again
    (again) gives the same output: a module that draws its masks by what it kept from earlier
    calls (dropout_redrawn's mistake) moves for that reason instead."""
    if not np.allclose(again, before, atol=1e-6, rtol=1e-5, equal_nan=True):
        return False
    return not np.allclose(after[:, :-1], before[:, :-1], atol=1e-6, rtol=1e-5, equal_nan=True)


def dropout_redrawn(first, second, p, what):
    """What dropout kept in two train-mode calls on the same input under other seeds (weights, or
    causal_dropout's choices) differs: dropout draws a new mask in each call. n independent draws
    agree everywhere with probability (p² + (1-p)²)^n; n >= 128 here (DROPOUT_DRAWS weights, or
    B·h >= 128 heads), so below 1e-26 for every p of strategies.dropout_rates."""
    require(not np.array_equal(first, second, equal_nan=True), "dropout_mask_reused", p=p, what=what)


def dropout_follows_seed(first, again, p, what, path=None, call=None):
    """Two train-mode calls on the same input under one seed (torch.manual_seed) give the same
    result: dropout draws from torch's global generator, whose state torch.utils.checkpoint restores
    to recompute a forward pass with the same masks, and a checkpoint saves to resume training. One
    the module makes itself (a torch.Generator kept from __init__) goes on from where it was and
    ignores both; numpy's and Python's, which the worker seeds per call but not with torch's seed
    (child.Worker._seed), as a user's torch.manual_seed leaves them. call: the second call's
    description (Reply.call)."""
    same = np.allclose(first, again, atol=1e-6, rtol=1e-5, equal_nan=True)
    if not same:
        calling(call)  # the failure is about the second call (its Reply.call), whichever was read last
    if path is None:
        require(same, "dropout_ignores_seed", p=p, what=what)
    else:
        require(same, "dropout_ignores_seed_on_path", p=p, what=what, path=path)


def causal_dropout(params, heads, x, p, trained, path):
    """CausalSelfAttention's train-mode output `trained` (B,T,C) for input x, judged by structure
    (torch's dropout masks cannot be predicted, and a correct module may draw them in any order):

        trained = R ⊙ proj(merge(((D ⊙ A) / (1-p)) @ v)) / (1-p)

    with A, v the attention weights and values (computed here in float64 from the grader's
    parameters), D (B,h,T,T) and R (B,T,C) unknown 0/1 masks.

    1. resid_drop after proj: entries of proj's output are never exactly 0 otherwise (its bias is
       drawn from a continuous distribution), so the zeros of `trained` are R's: about a fraction p
       of them (resid_dropout_zeros, which also models a proj without bias). resid_drop missing,
       or applied before proj, leaves none.
    2. attn_drop present: without it (or with dropout_p=0 in the fused path) the nonzero entries
       are eval's output divided by (1 - p). A correct module never matches that on a row (b, 0)
       with a nonzero entry: there each head has a single weight A = 1, either dropped (0) or
       scaled to 1/(1-p), never 1. The B·C >= 2048/T >= 256 entries of row 0 are all dropped by
       R with probability p^256 <= 0.75^256 < 1e-31.
    3. attn_drop on the weights, after the softmax: a row (b, t) must be matched, on its nonzero
       entries, by one of the 2^(h(t+1)) choices of D[b, :, t, :t+1]; and some row must need a D
       with a zero in it (some weight was dropped). A row whose weights were all kept is matched
       by D = 1. Checked on every row t = 0 (2^h choices) and, to keep it cheap, on the first
       ROWS_CHECKED examples' rows t >= 1 while h·(t+1) <= 8.
       A correct module drops the single weight of row t=0 of head h (A = 1) with probability p,
       and that shows on any kept entry of row (b, 0) unless all C of them were dropped by R: per
       (b, h) a visible drop has probability >= p(1-p) >= 3/16 for p in strategies.dropout_rates
       (C >= 1). The check uses B·h >= 128 such independent pairs, so a correct module shows no
       drop with probability <= (13/16)^128 < 3e-12.

    Returns, per batch row b, which heads' weight of token 0 were kept (the choice of D[b, :, 0, 0]
    that explains row (b, 0), as a number), or -1 where R dropped the whole row: what
    dropout_redrawn compares between two calls.
    """
    B, T, C = x.shape
    hs = C // heads
    weights, v = reference.causal_attention(params, heads, x)
    proj = params["proj.weight"].reshape(C, heads, hs)  # proj[:, h, d] multiplies context[h, d]
    bias = params.get("proj.bias", np.zeros(C))
    scale = 1.0 / (1.0 - p)

    resid_dropout_zeros(trained, p, heads, "proj.bias" in params, path)  # 1. resid_drop, after proj

    kept = trained != 0
    tolerance = 1e-4 + 1e-4 * np.abs(trained)
    # 2. No attention dropout at all: the kept entries are eval's output divided by (1 - p).
    undropped = (bias + np.einsum("chd,bhtd->btc", proj, weights @ v)) * scale
    require(np.any(kept & (np.abs(undropped - trained) > tolerance)), "attn_dropout_missing", p=p, path=path)

    dropped_rows = 0  # 3. where attn_drop acts
    for t in range(T):
        n = heads * (t + 1)
        rows = B if t == 0 else min(B, ROWS_CHECKED)
        if n > 8:
            break
        # what weight (t, s) of head h adds to proj's output when it is kept: (rows, n, C)
        contributions = np.einsum("chd,bhs,bhsd->bhsc", proj, weights[:rows, :, t, :t + 1],
                                  v[:rows, :, :t + 1], optimize=True).reshape(rows, n, C)
        choices = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(np.float64)  # last: all kept
        mine = kept[:rows, t, None]
        seen = mine[:, 0].any(axis=-1)

        def worst_of_each_choice(attn_factor, resid_factor):
            """(rows, 2^n): the worst kept entry of row t under each choice of D."""
            predicted = (bias + choices @ (contributions * attn_factor)) * resid_factor  # (rows, 2^n, C)
            excess = np.where(mine, np.abs(predicted - trained[:rows, t, None]) - tolerance[:rows, t, None], -np.inf)
            return excess.max(axis=-1)

        worst = worst_of_each_choice(scale, scale)
        unexplained = seen & (worst.min(axis=-1) > 0)
        if unexplained.any():
            if t == 0:
                def explains(attn_factor, resid_factor):
                    """Every row explained, some of them only by a choice that drops a weight: dropout
                    before the softmax leaves a first token's one weight at 1, which "kept, not
                    rescaled" explains too, though nothing was ever dropped."""
                    worst_here = worst_of_each_choice(attn_factor, resid_factor)
                    return not np.any(seen & (worst_here.min(axis=-1) > 0)) and np.any(seen & (worst_here[:, -1] > 0))

                wrong_factor(explains, p, path)
            b = int(np.argmax(unexplained))
            raise PropertyFailure("attn_dropout_misplaced", p=p, path=path, batch=b, token=t)
        dropped_rows += int((seen & (worst[:, -1] > 0)).sum())
        if t == 0:
            first_token = np.where(seen, worst.argmin(axis=-1), -1)
    require(dropped_rows > 0, "attn_dropout_missing", p=p, path=path)
    return first_token


# causal_weights_dropped recovers rows t < RECOVERED_ROWS: 2^(t+1) subsets of keys per head.
RECOVERED_ROWS = 6


def causal_weights_dropped(params, heads, x, p, trained):
    """The attention dropout mask D (B,h,t,s) behind CausalSelfAttention's train-mode output
    `trained` for input x, from a module whose resid_drop is off (p = 0), on rows t <
    RECOVERED_ROWS: 1 where weight (t, s) of head h was kept, 0 where it was dropped, NaN where
    that cannot be told. proj's weight is invertible (drawn from a continuous distribution), so
    each head's context row ctx[b,h,t] = Σ_s D[s]·A[t,s]·v[s] / (1 - p) comes back from the
    output; D[b,h,t] is the one subset of keys that gives it, within float32 rounding (relative
    1e-5 of the row, through proj's inverse). A row no subset explains, or two explain alike
    (keys whose values nearly coincide), is NaN: other checks name dropout in the wrong place."""
    B, T, C = x.shape
    weights, v = reference.causal_attention(params, heads, x)
    inverse = np.linalg.inv(params["proj.weight"])
    bias = params.get("proj.bias", np.zeros(C))
    ctx = ((trained - bias) @ inverse.T).reshape(B, T, heads, C // heads).transpose(0, 2, 1, 3)
    tolerance = 1e-5 * np.linalg.norm(inverse, 2) * np.linalg.norm(trained, axis=-1) + 1e-7  # (B, T)
    kept = np.full((B, heads, T, T), np.nan)
    for t in range(min(T, RECOVERED_ROWS)):
        subsets = ((np.arange(2 ** (t + 1))[:, None] >> np.arange(t + 1)) & 1).astype(np.float64)
        terms = weights[:, :, t, :t + 1, None] * v[:, :, :t + 1] / (1.0 - p)  # (B, h, t+1, hs)
        miss = np.abs(np.einsum("ns,bhsd->bhnd", subsets, terms) - ctx[:, :, t, None]).max(axis=-1)
        order = np.sort(miss, axis=-1)
        alone = (order[..., 0] <= tolerance[:, None, t]) & (order[..., 1] > 10 * tolerance[:, None, t])
        best = subsets[miss.argmin(axis=-1)]  # (B, h, t+1)
        kept[:, :, t, :t + 1] = np.where(alone[..., None], best, np.nan)
    return kept


def dropout_acts_at_shape(evaluated, trained, p, path, case):
    """CausalSelfAttention at a shape apart from the usual ones (B=1, T=1: `case`), one path whose
    dropout was found right at those: in train mode resid_drop zeroes some entries of the output,
    and attn_drop changes some kept ones, which are otherwise eval's output (`evaluated`, the
    reference's) divided by (1 - p). Both on thousands of draws: a correct module fails with
    probability < 1e-8."""
    require((trained == 0).any(), "not_dropped_at_shape", layer="resid_drop", case=case, p=p, path=path)
    kept = trained != 0
    tolerance = 1e-4 + 1e-4 * np.abs(trained)
    require(np.any(kept & (np.abs(evaluated / (1.0 - p) - trained) > tolerance)), "not_dropped_at_shape",
            layer="attn_drop", case=case, p=p, path=path)


ROWS_CHECKED = 32


def wrong_factor(explains, p, path):
    """Before blaming attn_drop's place: whether CausalSelfAttention's train-mode output is
    explained (explains(attn_factor, resid_factor): by choices that drop some weight, since a
    layer that never drops has no factor to blame) by dropout in the right places whose survivors
    were scaled by another factor than 1/(1 - p): by 1/p (a hand-written dropout that divides by
    the probability it drops), not at all, by 1/(1 - p)² (dropout applied twice: sdpa's dropout_p
    and attn_drop on its output), or by 1/(1 - q) for a rate q other than p
    (OTHER_RATES: a p capped, as min(p, 0.5), or hard-coded). Fails naming the layer and its
    factor, attn_drop first where both are off."""
    right = 1.0 / (1.0 - p)
    others = [1.0 / (1.0 - q) for q in OTHER_RATES if q != p]
    factors = (right, 1.0 / p, 1.0, right ** 2, *others)
    for attn_factor in factors:
        for resid_factor in factors:
            if (attn_factor, resid_factor) != (right, right) and explains(attn_factor, resid_factor):
                layer, factor = ("attn_drop", attn_factor) if attn_factor != right else ("resid_drop", resid_factor)
                code = ("layer_dropout_twice" if factor == right ** 2 else "layer_dropout_wrong_factor"
                        if factor in (1.0 / p, 1.0) else "layer_dropout_ignores_p")
                raise PropertyFailure(code, p=p, path=path, layer=layer, factor=round(factor, 4),
                                      scale=round(right, 4), measured=round(1.0 - 1.0 / factor, 3))


# The rates wrong_factor tries for a layer that does not use its p: those the examples draw
# (strategies.dropout_rates, a cap or a floor at one of them) and nn.Dropout's default and the
# usual hard-coded 0.1.
OTHER_RATES = (0.1, 0.25, 0.5, 0.75)


def resid_dropout_zeros(trained, p, heads, biased, path):
    """resid_drop's zeros in CausalSelfAttention's train-mode output `trained` (B,T,C). With proj's
    bias, an entry of proj's output is exactly 0 only where resid_drop zeroed it (the bias is drawn
    from a continuous distribution): a fraction p of them. Without it (biased False:
    parameter_count's mistake, not this property's), attention dropout zeroes proj's whole output
    row t whenever it drops every weight of that row in every head, which happens with
    probability q_t = p^(heads·(t+1)); so a row holds C zeros with probability q_t, else
    Binomial(C, p) of them. The count of zeros must be within RATE_SIGMAS standard deviations
    (+1) of its mean under that model (with q_t = 0, dropout_rate's bound exactly). Rows that are
    not finite (NaN from a row that sees no position: causality's mistake) are left out; when no
    row is finite, nothing can be judged and the failure points at causality."""
    finite = np.isfinite(trained).all(axis=-1)  # (B, T)
    require(finite.any(), "output_nan_upstream", count=int((~np.isfinite(trained)).sum()))
    zero = (trained == 0) & finite[..., None]
    require(zero.any(), "resid_dropout_missing", p=p, path=path)
    live = np.broadcast_to(finite[..., None], zero.shape)
    axes = [(0, "axis_batch")]
    if biased:  # R's zeros alone: drawn entry by entry, so not alike along time or a token's channels either
        axes += [(1, "axis_time"), (2, "axis_channels")]
    for axis, name in axes:
        not_shared_along(zero, live, axis, name, p, "output")
    not_paired(zero, live, p, axes, "output")
    B, T, C = trained.shape
    q = np.zeros(T) if biased else p ** (heads * (np.arange(T) + 1.0))
    mean_row = C * (q + (1 - q) * p)
    square_row = q * C ** 2 + (1 - q) * (C * p * (1 - p) + (C * p) ** 2)
    rows = finite.sum(axis=0)  # finite rows at each position t
    mean, variance = float(rows @ mean_row), float(rows @ (square_row - mean_row ** 2))
    dropped, total = int(zero.sum()), int(rows.sum()) * C
    require(abs(dropped - mean) <= RATE_SIGMAS * math.sqrt(variance) + 1, "dropout_wrong_rate", what="output",
            p=p, fraction=round(dropped / total, 3), dropped=dropped, total=total)


def attempted(call):
    """(call(), None); (None, the SubmissionError) when the submission's code raised in call. What
    no input avoids (a timeout, a crash) and the grader's own errors propagate."""
    from ..worker.submission_errors import SubmissionError

    try:
        return call(), None
    except SubmissionError as exc:
        if not exc.raised:
            raise
        return None, exc


def taken(run, mask, shaped):
    """The outputs (shaped(reply), shape-checked) of run(mask=mask), for a property that is not
    about masks, taken as bool where the module cannot take the mask as sent. Where it takes it in
    neither form (it raises, or gives outputs of another shape) but takes the same call without
    it, the failure names the mask (mask_raised_upstream, mask_shape_mismatch_upstream: how it is
    applied is masked_zero's to judge), and still costs this property: a module must not buy the
    point by raising where only masked calls judge it. A call that fails without a mask too raises
    its own error."""
    if mask is None:
        return shaped(run())
    failure = None
    for form in (mask, *(() if mask.dtype == bool else (mask.astype(bool),))):
        try:
            return shaped(run(mask=form))
        except (SubmissionError, PropertyFailure) as exc:
            if isinstance(exc, SubmissionError) and not exc.raised:
                raise
            if failure is None:
                failure, at_fault = exc, call_at_fault()
    try:
        shaped(run())
    except (SubmissionError, PropertyFailure):
        calling(at_fault)  # the example names the masked call that failed first
        raise failure from None
    calling(at_fault)
    raise _named_for_the_mask(failure, mask)


def _named_for_the_mask(failure, mask):
    """The failure of a call that breaks with `mask` alone, named as the mask's: an exception the
    submission raised (mask_raised_upstream) or outputs of another shape (mask_shape_mismatch_upstream);
    any other failure as it is."""
    from .harness import call_failure

    described = {"shape": list(mask.shape), "dtype": mask.dtype.name}
    if isinstance(failure, SubmissionError) and call_does_not_fit(failure.exc_type, failure.message):
        return failure  # `mask` is no argument of forward (renamed attn_mask, say): the signature's fault
    if isinstance(failure, SubmissionError):
        return call_failure(failure, "mask_raised_upstream", **described)
    if failure.code == "shape_mismatch":
        return PropertyFailure("mask_shape_mismatch_upstream", **failure.params, **described)
    return failure


def runs_after_moving(module, call, device):
    """module, which has run on the CPU and whose copies ran on `device` (runs_on_device), moved
    itself there (module.to(device), no copy: the caller's last use of it) runs `call` (args,
    options) there too: what it keeps by its own identity (an lru_cache on a method, which a copy
    misses) moved with it. An error that is not about devices, or one the meta device's lack of
    data explains, is runs_on_device's to judge, as there."""
    from .harness import call_failure

    args, options = call
    _, error = attempted(lambda: module.run(*args, **{**options, "device": device, "moved_for_good": True}))
    if error is not None and device_error(error.message, device):
        raise call_failure(error, "device_kept_from_call", device=device)


def ran_once_on_cpu(call):
    """Run call(), the module's first call, on the CPU, for what it leaves in the module (a model is
    tried before it is moved). An exception there is the business of the properties that make
    that call, not of the device check that follows."""
    attempted(call)


def runs_on_device(attempt, device, expected_shapes, fallbacks=(), cpu_failure_is_mine=True, fresh=None):
    """Run forward with module and inputs on `device`; a tensor made elsewhere fails it.

    The meta device has no data, so code that reads values (an `if torch.all(mask ...)` check,
    .item(), boolean indexing) cannot run there, whatever device it puts its tensors on. Such an
    error is not a device bug: then each of `fallbacks` (the same call with less data-dependent
    input, say without the mask) is tried on meta instead, a device error there still failing,
    and finally the call itself must run on the CPU. So is an error on meta whose message names
    no device (about_devices): meta's kernels check some arguments that the CPU's let through
    (F.scaled_dot_product_attention refuses attn_mask with is_causal=True there, in eval too),
    which is a mistake of those arguments, not of devices; should the call fail on the CPU as
    well, that error is the submission's, unless a fallback ran on meta (devices were judged
    there: the error is about what the fallback left out, a mask, whose property names it) or
    cpu_failure_is_mine is False (a call another property already makes on the CPU, which names
    its failure there); then None. Other errors
    on meta (a tensor made on the CPU, .cpu(), .numpy(): torch names the devices) fail as before.
    fresh: the same call on a module never called (attempt's has run on the CPU first, see
    ran_once_on_cpu), fresh(device, moved_for_good=True) on that module moved there itself; made
    only after a device error, which it turns into device_kept_from_call when the never-called
    module runs (forward kept a tensor in self that .to() does not move), and leaves to the CPU run
    when only the module moved itself runs: the call runs on a copy (copy.deepcopy(module).to(device)),
    and a copy that still reaches the original's layers (a closure over them) is reference_match's
    copy_computes_with_the_original, not a device bug.
    """
    from ..worker.submission_errors import SubmissionError
    from .harness import call_failure

    def shapes_of(reply):
        for index, what, shape in zip(range(len(reply.outputs)), ("output", "weights"), expected_shapes):
            got = reply.shape(index)  # a missing output is the property shapes' to name
            require(got == list(shape), "shape_mismatch", what=what, expected=list(shape), got=got)
        return reply

    def judged(call):
        """call's reply, or None when it needed data the meta device does not have."""
        try:
            return shapes_of(call(device))
        except SubmissionError as exc:
            if not exc.raised:
                raise
            if device_error(exc.message, device):
                kept = fresh is not None and second_opinion(lambda: attempted(lambda: fresh(device))[1] is None)
                if not kept and fresh is not None and second_opinion(
                        lambda: attempted(lambda: fresh(device, moved_for_good=True))[1] is None):
                    return None  # the copy's mistake (it reaches the original's layers): reference_match's
                raise call_failure(exc, "device_kept_from_call" if kept else "wrong_device", device=device) from None
            return None

    try:
        reply = judged(attempt)
    except PropertyFailure as failure:  # outputs of other shapes: the mask's doing, where a fallback's are right
        if failure.code != "shape_mismatch" or not _shaped_right_without(fallbacks, judged):
            raise
        return None
    if reply is not None:
        return reply
    # Where a fallback ran on meta, devices are judged: the call failing on the CPU too is then a
    # mistake of what the fallback left out (a mask shape), the business of the property about it.
    judged_by_fallback = any(judged(fallback) is not None for fallback in fallbacks)
    try:
        return shapes_of(attempt("cpu"))
    except SubmissionError as exc:
        if not exc.raised or (cpu_failure_is_mine and not judged_by_fallback):
            raise
        return None


def _shaped_right_without(fallbacks, judged):
    """Whether one of runs_on_device's fallbacks (the call without its mask) runs on the device with
    outputs of the right shapes (a device error there still fails): then outputs of other shapes
    with the mask are the mask's matter (how it broadcasts: masked_zero's), and devices were judged."""
    at_fault = call_at_fault()
    try:
        right = any(judged(fallback) is not None for fallback in fallbacks)
    except PropertyFailure as failure:  # a device error of the fallback's is raised as such
        if failure.code != "shape_mismatch":
            raise
        right = False
    calling(at_fault)
    return right


# What torch says when code needs a meta tensor's values (it has none): data-dependent Python
# control flow (.item(), bool(), float()), data-dependent shapes (nonzero, boolean indexing), an
# operator without a meta kernel. Not "Cannot copy out of meta tensor" (.cpu(), .tolist()) nor
# numpy conversion: .cpu() and .numpy() in forward are device bugs.
META_LIMITATIONS = (
    "cannot be called on meta tensors",
    "data-independent implementation does not exist",
    "no fake impl or Meta kernel registered",
    "device type not an accelerator",  # torch.Generator(device=x.device): there is no meta generator
    # masked_fill(mask, torch.tensor(-inf)): a 0-dim CPU value, which cuda, xpu, mps and hpu accept
    # (torch._refs.masked_fill); only meta refuses it
    "Expected `value` to be on same device as `a`",
    # torch.autocast(device_type=x.device.type): autocast has no meta mode, whatever the module's devices
    "unsupported autocast device_type 'meta'",
)


def meta_limitation(message):
    return any(text in (message or "") for text in META_LIMITATIONS)


# Words in every error torch raises about where tensors are: "Tensor on device cpu is not on the
# expected device meta!", "Expected all tensors to be on the same device", "Cannot copy out of
# meta tensor", "can't convert meta device type tensor to numpy".
DEVICE_WORDS = ("device", "meta", "cpu", "cuda", "mps")


def about_devices(message):
    text = (message or "").lower()
    return any(word in text for word in DEVICE_WORDS)


def device_error(message, device):
    """Whether an error on `device` judges devices: anywhere but meta, every error; on meta, one
    that names devices and is not the meta device's lack of data (runs_on_device)."""
    return not (device == "meta" and (meta_limitation(message) or not about_devices(message)))


# reference_match's tolerance: the old fixed one (the absolute part scaled with the magnitude of
# the inputs, for outputs) plus ROUNDING_SAFETY times the float32 rounding bound of reference.*_bounded.
REFERENCE_ATOL = 1e-5
REFERENCE_RTOL = 1e-4
ROUNDING_SAFETY = 2.0


def reference_tolerance(expected, bound, magnitude=1.0):
    return REFERENCE_ATOL * magnitude + ROUNDING_SAFETY * bound + REFERENCE_RTOL * np.abs(expected)


def matches_reference(actual, expected, bound, code, magnitude=1.0, tolerance=None, **params):
    """`actual` (what the module returned) is the float64 reference `expected` up to float32's
    rounding (`bound`, entry by entry) and the usual tolerance, or up to `tolerance` if given;
    else `code`, with the worst entry."""
    tolerance = reference_tolerance(expected, bound, magnitude) if tolerance is None else tolerance
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(actual - expected) <= tolerance)  # NaN never matches
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise PropertyFailure(code, index=list(index), got=float(actual[index]), expected=float(expected[index]),
                              tolerance=float(f"{tolerance[index]:.3g}"), **params)


# At a real model's width or length the worst-case rounding bound (reference.py: n·u on a sum of n
# products) outgrows the outputs themselves (measured: ~0.5 on outputs of ~0.7 at n_embd = 768),
# while float32's actual error there stays near 1e-5 of their size, whatever the order of summation:
# matches_beyond_examples allows BEYOND_RTOL of the outputs' root mean square plus of each entry.
BEYOND_RTOL = 1e-3


def matches_beyond_examples(module, calls, shaped, expected, code, **said):
    """At a real model's width or length (strategies.WIDE_*, LONGEST_*), after every drawn example
    matched at the strategies' small sizes: each call's outputs (shaped(i, reply)) are the
    reference's (expected(i): [(float64 reference, what it is)], unbounded: see BEYOND_RTOL), else
    `code` with `said`, a miss about that size (a condition on d_model, d_k or the number of
    heads; blocks or chunks of a fixed length)."""
    for i, reply in enumerate(module.runs(*calls)):
        calling(reply.call)
        for actual, (want, what) in zip(shaped(i, reply), expected(i)):
            tolerance = BEYOND_RTOL * (np.sqrt(np.mean(want ** 2)) + np.abs(want))
            matches_reference(actual, want, None, code, tolerance=tolerance, what=what, **said)


def inputs_unchanged(reply, names, kinds=("modified", "requires_grad_changed", "rebound")):
    """The call left its inputs as they were sent: their values and shape (modified), their
    requires_grad, their memory (rebound). names: the worker's keys for them ("0", "1"... for
    positional ones, "mask") -> the names the statement gives them. kinds: which of those to judge."""
    for kind, code in (("modified", "input_modified"), ("requires_grad_changed", "input_requires_grad_changed"),
                       ("rebound", "input_rebound")):
        changed = [names.get(key, key) for key in getattr(reply, kind)] if kind in kinds else []
        if changed:
            calling(reply.call)  # the failure is about this call, whichever reply was read last
            raise PropertyFailure(code, names=changed)


# A gradient an input must not get: exactly zero for every correct module tried (masked weights are
# exactly 0, so their backward terms are too); the relative bound absorbs rounding: a softmax that
# subtracts one max per matrix (not per row) sends float32's residue of that max, 1.2e-6 of the
# largest gradient, to a key the row cannot read (its mistake is the overflow at large inputs,
# named there). A fill that leaks forward is masked_zero's (any weight above 0 there).
GRADIENT_LEAK = 1e-5


def no_gradient_where_blocked(grad, blocked, what, row):
    """grad (B, T, d): an input's gradient from the outputs of query row `row` alone; blocked (B, T):
    the positions of that input this row may not read (masked, or in the future). They must get
    no gradient, as they got no weight; and the input must get one (None: cut from the graph, so
    that whatever made it would not train)."""
    require(grad is not None, "input_without_gradient", what=what)
    leak = np.abs(grad).max(axis=-1)
    bad = blocked & (leak > GRADIENT_LEAK * max(float(np.abs(grad).max()), 1e-30))
    if bad.any():
        batch, position = (int(i) for i in np.argwhere(bad)[0])
        raise PropertyFailure("gradient_through_mask", what=what, row=row, batch=batch, position=position,
                              gradient=float(f"{leak[batch, position]:.3g}"))


def shapes_across_calls(module, calls, shaped, fresh, lengths, names):
    """One module, several calls: calls[0] at a first length, calls[1] at another (longer) one,
    then any calls on that longer input, each non-contiguous one right after its contiguous twin.
    shaped(i, reply): call i's outputs, shape-checked; fresh(): a new module like `module`.

    A call that raises is named: the longer input failing on this module but not on a fresh one
    (something kept from the first length), or a non-contiguous input failing where its
    contiguous twin did not (a view on an input). A call with a mask that raises, or gives outputs
    of another shape, where the same call without it gives the right ones, is named as the mask's
    (how it broadcasts is masked_zero's matter). A non-contiguous twin must also give the same
    values as its contiguous one, and leave its inputs in the memory they came in (names:
    inputs_unchanged's): `x.data = x.data.contiguous()` there unties the caller's view from its
    buffer (what else a call changes, the other properties' calls see)."""
    from .harness import call_failure, runs_until_failure

    replies, failed = runs_until_failure(module, *calls)
    if failed:
        index, error = failed
        if index == 1 and second_opinion(lambda: runs_until_failure(fresh(), calls[1])[1] is None):
            raise call_failure(error, "length_change_failed", first=lengths[0], then=lengths[1])
        if calls[index][1].get("noncontiguous"):
            raise call_failure(error, "noncontiguous_input_failed")
        if _right_without_mask(fresh, calls[index], lambda reply: shaped(index, reply)):
            raise _named_for_the_mask(error, calls[index][1]["mask"])
        raise error
    got = []
    for i, reply in enumerate(replies):
        try:
            got.append(shaped(i, reply))
        except PropertyFailure as failure:
            if failure.code != "shape_mismatch" or not _right_without_mask(fresh, calls[i], lambda r: shaped(i, r)):
                raise
            raise _named_for_the_mask(failure, calls[i][1]["mask"]) from None
    for i, (_, options) in enumerate(calls):
        if options.get("noncontiguous"):
            for what, mine, twin in zip(("output", "weights"), got[i], got[i - 1]):
                expect_close(mine, twin, "noncontiguous_mismatch", what=what)
            inputs_unchanged(replies[i], names, kinds=("rebound",))


def _right_without_mask(fresh, call, shaped):
    """Whether `call` has a mask, and the same call without it, on a fresh module, gives outputs
    of the right shapes (shaped(reply) raises none)."""
    from .harness import runs_until_failure

    args, options = call
    if options.get("mask") is None:
        return False

    def right():
        replies, failed = runs_until_failure(fresh(), (args, {k: v for k, v in options.items() if k != "mask"}))
        if failed:
            return False
        try:
            shaped(replies[0])
        except PropertyFailure:
            return False
        return True

    return second_opinion(right)


def reference_across_calls(module, calls, shaped, expected, fresh, names, described=None, another=None):
    """One module, several calls (the same input again among them): each call's outputs
    (shaped(i, reply), a list) must match expected(i), a list of (reference, rounding bound,
    magnitude of the inputs, what) from reference.*_bounded, and leave its inputs unchanged
    (names: inputs_unchanged's). A later call that misses while the same call on a fresh module
    (fresh()) matches shows a module that depends on its earlier calls; when that call first gave
    the module new parameters (the option `reload`), on what it computed from the old ones.
    described: {call index: (failure code, its parameters[, indices of calls of the same kind])} for
    a call whose miss says more than reference_mismatch_at (the one of another form or length,
    say), used when every other call but those of its kind (the train-mode calls, the longer ones)
    matched: only then is the miss about what sets that call apart.
    another: once every call matched, builds and calls a module of the same class with another
    configuration (returning a description of it); then the first call again must still match:
    state kept in the class (type(self).n_head = ...) is shared by every instance."""
    from .harness import runs_until_failure

    replies, failed = runs_until_failure(module, *calls)
    if failed and failed[1].kind == "not_copyable":
        # copy.deepcopy refused the module (an attribute it cannot copy): what a copy computes
        # cannot be judged, as the device check, which copies too, leaves such a module to the
        # CPU; the calls before the copy are judged again, on a fresh module
        calls, module = calls[:failed[0]], fresh()
        replies, failed = runs_until_failure(module, *calls)
    if failed:
        index, error = failed
        raise raised_after_earlier_calls(module, calls, index, error) or error
    settings_left_alone("__init__", module.settings_changed)
    for i, reply in enumerate(replies):
        got = shaped(i, reply)
        inputs_unchanged(reply, names)
        settings_left_alone("forward", reply.settings_changed)  # first: a lower precision moves the outputs
        require(not reply.earlier_outputs_changed, "outputs_overwritten_later",
                previous=max(1, i + 1 - reply.earlier_outputs_changed), call=i + 1)
        code, said, *kind = (described or {}).get(i, ("reference_mismatch_at", {}))
        for actual, (want, bound, magnitude, what) in zip(got, expected(i)):
            params = {"what": what, "call": i + 1, "calls": len(calls), "scale": magnitude, **said}
            try:
                matches_reference(actual, want, bound, code, magnitude, **params)
            except PropertyFailure as failure:
                not_reduced_precision(actual, what)  # an output returned in bfloat16 or float16 (.half()): said so
                if i > 0 and second_opinion(lambda: matches_on_a_fresh_module(fresh(), calls[i], i, expected(i), shaped)):
                    code = "stale_after_new_parameters" if calls[i][1].get("reload") else "depends_on_earlier_calls"
                    raise PropertyFailure(code, **{**failure.params, **params}) from None
                if not calls[i][1].get("train") and second_opinion(lambda: changes_when_repeated(module, calls[i], i, shaped)):
                    raise PropertyFailure("eval_output_changes", **params) from None
                if calls[i][1].get("in_place"):
                    # a fresh module misses it too, where no earlier call's input tensors were reused:
                    # that is not the reason, and the example does not say it
                    calling(_described_without(reply.call, "in_place"))
                    failure = PropertyFailure(failure.code, **failure.params)
                at_fault = call_at_fault()
                if code != "reference_mismatch_at" and not others_match(replies, i, shaped, expected, *kind):
                    calling(at_fault)  # others_match read every reply: the failure is still this call's
                    failure = PropertyFailure("reference_mismatch_at", **{
                        k: v for k, v in failure.params.items() if k not in said})
                if what == "output" and not calls[i][1].get("train") and code not in ABOUT_A_COPY and weights_right_in_every_call(
                        replies, calls, shaped, expected):
                    # the weights it returns are the reference's: the output comes from elsewhere
                    calling(at_fault)  # as above
                    failure = PropertyFailure("output_not_from_weights", **{
                        k: v for k, v in failure.params.items() if k not in said})
                failure.diagnosis = diagnosed(module, "reference_match", calls, replies, expected)
                raise failure from None
    if another is not None:
        unchanged_by_another_instance(module, calls, shaped, expected, another)


# reference_match's codes for its calls on a copy made by deepcopy and on the module after it
# (harness.copy_calls): what the copy shares with the original is the mistake, whichever layer it is
# (W_V or W_O alone leave the weights right), not what lies between the weights and the output.
ABOUT_A_COPY = ("copy_computes_with_the_original", "original_changed_by_its_copy")


def _described_without(call, mode):
    """A call's description (as calling() takes it: data, or a function making it) less one mode."""
    return lambda: {key: value for key, value in (call() if callable(call) else call).items() if key != mode}


def weights_right_in_every_call(replies, calls, shaped, expected):
    """Whether the calls return weights (a class whose forward returns them) and, in every eval
    call, they match: at one call alone they say little (at magnitude 0.01, or with one key, any
    Q and K give the reference's weights)."""
    found = False
    for j, reply in enumerate(replies):
        if calls[j][1].get("train"):
            continue
        try:
            got = shaped(j, reply)
        except PropertyFailure:
            return False
        pairs = [(a, e) for a, e in zip(got, expected(j)) if e[3] == "weights"]
        if not all(within_reference([a], [e]) for a, e in pairs):
            return False
        found = found or bool(pairs)
    return found


def others_match(replies, index, shaped, expected, alike=()):
    """Whether every call's outputs but the index-th's (and those `alike` it) match the reference
    (as reference_across_calls compares them): a miss of those calls alone is about what sets them
    apart."""
    for j, reply in enumerate(replies):
        if j == index or j in alike:
            continue
        try:
            got = shaped(j, reply)
        except PropertyFailure:
            return False
        if not within_reference(got, expected(j)):
            return False
    return True


def within_reference(got, expected):
    """Whether every output in got matches its (reference, bound, magnitude, what) in expected."""
    with np.errstate(invalid="ignore"):
        return all(np.all(np.abs(a - w) <= reference_tolerance(w, b, m)) for a, (w, b, m, _) in zip(got, expected))


def settings_left_alone(where, changed):
    """A module's build or call (where: "__init__" or "forward") left torch's global settings as
    they were: `changed` names those it changed (the worker puts them back after each request:
    child.GlobalSettings). TF32 turned on in __init__ changes nothing on the CPU, yet every
    float32 matmul of the program on a GPU."""
    if changed:
        if where == "__init__":
            calling(None)  # no call of the example is at fault
        raise PropertyFailure("global_settings_changed", where=where, names=changed)


def changes_when_repeated(module, call, index, shaped):
    """Whether the index-th call, made twice more in a row, gives other outputs the second time: in
    eval, a module whose outputs are random (dropout left on) matches no reference, and says so
    here. The two calls seed torch's generator apart, as two calls of a user's do not share one
    draw; they are compared with each other, not with the first reply, which a later call may have
    given new parameters since."""
    args, options = call
    again = {k: v for k, v in options.items() if k != "reload"}
    reseeded = {**again, "seed": again.get("seed", 0) + 1}
    first, second = (shaped(index, reply) for reply in module.runs((args, again), (args, reseeded)))
    return any(not np.array_equal(a, b, equal_nan=True) for a, b in zip(first, second))


def unchanged_by_another_instance(module, calls, shaped, expected, another):
    """After another() built and called a module of the same class with another configuration,
    the module's last call (which matched; without its `reload`, whose parameters it keeps)
    still gives the reference's outputs."""
    last = len(calls) - 1
    args, options = calls[last]
    repeated = repeated_after_another_instance(module, [(args, {k: v for k, v in options.items() if k != "reload"})],
                                               another)
    if repeated is None:
        return
    other, (reply,) = repeated
    again = shaped(last, reply)
    for actual, (want, bound, magnitude, what) in zip(again, expected(last)):
        matches_reference(actual, want, bound, "depends_on_other_instances", magnitude, what=what, other=other)


def repeated_after_another_instance(module, calls, another):
    """(another()'s description of the module of the same class it built and called, the replies
    of `calls` made again on `module` after it), or None where that other configuration could not
    run (not this module's state). A call that raises now fails as other_instance_broke_call."""
    other, _ = attempted(lambda: second_opinion(another))
    if other is None:
        return None
    from .harness import call_failure

    replies = []
    for args, options in calls:
        reply, error = attempted(lambda: module.run(*args, **options))
        if error is not None:
            raise call_failure(error, "other_instance_broke_call", other=other)
        replies.append(reply)
    return other, replies


def train_draw_unchanged_by_another_instance(fresh, calls, shaped, another):
    """Train-mode `calls` on a module fresh() builds, made again under the same seeds after
    another() built and called in train mode a module of the same class with another dropout p,
    draw the same: a p, a dropout layer or a generator kept on the class (`MultiHeadAttention.p =
    dropout`) is one for every module of it, which eval never shows. Judged where the calls,
    repeated first with no other module built between, draw the same: a draw that changes with
    the module's own earlier calls is the other dropout checks' to name."""
    module = fresh()
    first = [shaped(reply) for reply in module.runs(*calls)]
    if any(not np.allclose(a, b, atol=1e-6, rtol=1e-5, equal_nan=True)
           for a, b in zip(first, (shaped(reply) for reply in module.runs(*calls)))):
        return
    repeated = repeated_after_another_instance(module, calls, another)
    if repeated is None:
        return
    other, replies = repeated
    for reply, before in zip(replies, first):
        calling(reply.call)
        expect_close(shaped(reply), before, "train_depends_on_other_instances", atol=1e-6, rtol=1e-5, other=other)


def matches_on_a_fresh_module(module, call, index, expected, shaped):
    """Whether `call` (the index-th) gives a freshly built `module` the reference's outputs
    (expected: as reference_across_calls'): then a miss on the module that had earlier calls comes
    from what it kept from them."""
    args, options = call
    return within_reference(shaped(index, module.run(*args, **options)), expected)


def diagnosed(module, prop, calls, replies, expected):
    """After a failed comparison only: the catalog misconception whose alternative the module's
    outputs match on every call (diagnosis.py), or None. expected(i): as reference_across_calls'."""
    from . import diagnosis

    return diagnosis.diagnose(module, prop, calls, [reply.outputs for reply in replies],
                              [expected(i) for i in range(len(calls))])


def eval_repeatable(module, calls, shaped):
    """In eval, on one module: calls[0] and calls[1] are the same input (with other seeds), then
    other inputs, and calls[0]'s input again last. Same input, same outputs: exactly, both right
    away (dropout off in eval) and after the other calls (nothing kept from one call for the next)."""
    replies = module.runs(*calls)
    got = [shaped(i, reply) for i, reply in enumerate(replies)]
    for code, later in (("eval_not_deterministic", 1), ("eval_depends_on_earlier_calls", len(calls) - 1)):
        for what, first, again in zip(("output", "weights"), got[0], got[later]):
            expect_close(again, first, code, atol=0, rtol=0, what=what, call=later + 1)


# Masked weights up to this size leave an output within reference_tolerance: their leak cannot tell
# whether the output was computed from the weights returned.
LEAK_THE_OUTPUT_SHOWS = 1e-4


def masks_accepted(module, calls, shaped, masks, expected, names, fresh, canonical, head_mask=lambda m: m):
    """Every mask the statement allows: each call (masks[i] its mask) must run, leave its inputs as
    they were sent (names: inputs_unchanged's), and its weights (shaped(i, reply)[1]) be exactly 0
    wherever the mask (as head_mask broadcasts it) is 0.

    calls[0] has no mask and calls[1] reference_match's own mask form, float32 (B, Tq, Tk): inputs
    they change are reference_match's to report, not this property's. Once both
    give the reference's outputs (expected(i): as reference_across_calls'), every other call must
    too: the same rule read from a bool or long mask, a 2-D or a per-head one, or another mask of
    the first form (nothing kept from an earlier mask), and a later call without a mask (none
    kept). A call that misses is blamed on its mask only if the same rule in the first form
    (canonical(mask, batch): [(float32 (batch, Tq, Tk) mask, the head it is for, or None for all)])
    gives a fresh module (fresh()) other outputs: a module whose attention is wrong whatever the
    form (on some inputs only) fails reference_match, not this."""
    from .harness import call_failure, mask_forms_judged, runs_until_failure

    with mask_forms_judged():
        replies, failed = runs_until_failure(module, *calls)
    if failed:
        index, error = failed
        if masks[index] is None:
            raise error
        # Made first, so that its example names the call that raised.
        by_name = "mask" in calls[index][1]  # or by position, as forward's signature allows
        failure = call_failure(error, "mask_not_accepted" if by_name else "mask_not_accepted_by_position",
                               shape=list(masks[index].shape), dtype=masks[index].dtype.name)
        failure = raised_after_earlier_calls(module, calls, index, error) or failure
        if index > 0 and masks[0] is None:  # outputs of the wrong shape without a mask: no mask could fit them
            args, options = calls[0]
            shaped(0, module.run(*args, **options))
        raise failure
    described = [mask is not None and {"shape": list(mask.shape), "dtype": mask.dtype.name} for mask in masks]
    # Inputs changed in place with no mask or the first one: reference_match's calls show it already.
    judge_inputs = not any(reply.modified for reply in replies[:2])
    for i, reply in enumerate(replies):
        if judge_inputs:
            inputs_unchanged(reply, names)
        if masks[i] is None:
            continue
        weights = shaped(i, reply)[1]
        blocked = np.broadcast_to(head_mask(masks[i]), weights.shape) == 0
        leaked = np.abs(weights[blocked])
        if blocked.any() and not leaked.max() == 0.0:
            column = nan_in_closed_columns(weights, blocked)
            if column is not None:
                raise PropertyFailure("masked_column_nan_upstream", column=column, **described[i])
            if i >= 2 and second_opinion(lambda: _closes_on_a_fresh_module(fresh(), calls[i], i, blocked, shaped)):
                raise PropertyFailure("mask_from_earlier_call", call=i + 1, **described[i])
            # the mask bound to another parameter (forward(self, x, need_weights=True, mask=None))
            if "mask" not in calls[i][1] and second_opinion(lambda: attempted(
                    lambda: _closes_on_a_fresh_module(fresh(), _by_name(calls[i]), i, blocked, shaped))[0]):
                raise PropertyFailure("mask_ignored_by_position", **described[i])
            want, bound, magnitude, _ = expected(i)[0]
            # leaks too small for the output to show (scores clamped to ±50 after the -inf: e^-100)
            # may be the weights it was computed with: those are masked_weight_not_zero_mask's
            visible = not np.isfinite(leaked).all() or leaked.max() > LEAK_THE_OUTPUT_SHOWS
            if visible and np.all(np.abs(shaped(i, reply)[0] - want) <= reference_tolerance(want, bound, magnitude)):
                raise PropertyFailure("returned_weights_not_used", **described[i], count=int((leaked != 0).sum()))
        # NaN where the mask is 0 comes with NaN rows: the next check names those.
        nonzero = leaked[np.isfinite(leaked) & (leaked != 0)]
        require(not nonzero.size, "masked_weight_not_zero_mask", **described[i],
                max_weight=float(nonzero.max()) if nonzero.size else 0.0, count=int(nonzero.size))
        # Rows of NaN where the mask leaves positions open (one in every row): positions it allows are closed.
        nan_rows = ~np.isfinite(weights).all(axis=-1)
        require(not nan_rows.any(), "masked_row_not_finite", **described[i], count=int(nan_rows.sum()))
    for i in range(min(2, len(calls))):
        for actual, (want, bound, magnitude, _) in zip(shaped(i, replies[i]), expected(i)):
            if not np.all(np.abs(actual - want) <= reference_tolerance(want, bound, magnitude)):
                return
    for i in range(2, len(calls)):
        got = shaped(i, replies[i])
        for actual, (want, bound, magnitude, what) in zip(got, expected(i)):
            try:
                matches_reference(actual, want, bound, "mask_form_mismatch", magnitude, what=what, call=i + 1,
                                  **(described[i] or {}), first_shape=described[1]["shape"],
                                  first_dtype=described[1]["dtype"])
            except PropertyFailure as failure:
                if second_opinion(lambda: matches_on_a_fresh_module(fresh(), calls[i], i, expected(i), shaped)):  # a mask kept from before
                    code = "depends_on_earlier_calls" if masks[i] is not None else "mask_kept_without_mask"
                    raise PropertyFailure(code, **{**failure.params, "calls": len(calls)}) from None
                batch = len(calls[i][0][0])
                if masks[i] is not None and second_opinion(
                        lambda: _differs_from_first_form(fresh(), calls[i], i, got, canonical(masks[i], batch), shaped)):
                    raise
                break


def raised_after_earlier_calls(module, calls, index, error):
    """After calls[index] raised `error` (a SubmissionError the submission raised): where the same
    call runs as the first call of a twin, the failure raised_after_earlier_calls (what earlier
    calls left in the module made it raise: a batch size or a mask kept in self, not the call's own
    form); else None. Costs an exchange only after such a raise."""
    from .harness import call_failure, mask_forms_judged

    if index == 0:
        return None
    args, options = calls[index]

    def runs_first():
        try:
            with mask_forms_judged():  # the same call: its mask as it is, not retried as bool
                module.twin().run(*args, **options)
        except SubmissionError as again:
            if not again.raised:
                raise
            return False
        return True

    failure = call_failure(error, "raised_after_earlier_calls", call=index + 1, calls=len(calls))
    return failure if second_opinion(runs_first) else None


def _by_name(call):
    """A call that passes its mask by position (its last argument), with the mask passed by name."""
    args, options = call
    return args[:-1], {**options, "mask": args[-1]}


def _closes_on_a_fresh_module(module, call, index, blocked, shaped):
    """Whether `call` (the index-th) on a freshly built module gives exactly 0 weight wherever its
    mask closes (blocked): then the module that leaked there read a mask kept from an earlier call."""
    args, options = call
    return bool(np.all(shaped(index, module.run(*args, **options))[1][blocked] == 0.0))


def _differs_from_first_form(module, call, index, got, twins, shaped):
    """Whether module, given the rule of call's (the index-th's) mask in the first form (twins:
    canonical's), returns other outputs than `got` (or, for a per-head mask, other weights for any
    head)."""
    from .harness import runs_until_failure

    args, options = call if "mask" in call[1] else _by_name(call)
    replies, failed = runs_until_failure(module, *[(args, {**options, "mask": mask}) for mask, _ in twins])
    if failed:
        return True
    for (_, head), reply in zip(twins, replies):
        out, weights = shaped(index, reply)
        pairs = [(got[0], out), (got[1], weights)] if head is None else [(got[1][:, head], weights[:, head])]
        if not all(np.allclose(a, b, rtol=REFERENCE_RTOL, atol=REFERENCE_ATOL, equal_nan=True) for a, b in pairs):
            return True
    return False


def nan_in_closed_columns(weights, blocked):
    """The first column whose weights are NaN, when the weights' only flaw at the blocked positions
    is NaN and only in columns the mask closes for every query: what a softmax over the queries
    (dim=-2) gives, 0/0 down a column of -inf. A softmax over the keys never does (each row keeps
    an open position), so that mistake is rows_sum_to_one's. None when the weights are not that."""
    bad = ~np.isfinite(weights)
    closed = np.broadcast_to(blocked.all(axis=-2, keepdims=True), weights.shape)
    finite_leak = np.where(blocked & ~bad, weights, 0.0)
    if not bad.any() or np.any(bad & ~closed) or np.any(finite_leak != 0):
        return None
    return int(np.argwhere(bad)[0][-1])


def gradients_in_calls(module, calls, checked):
    """Calls with grad=True in one exchange; checked(i, reply) judges each. A backward that raises
    (an in-place operation on a tensor autograd saved, say) fails as backward_failed, naming the
    situation of the call (train mode, mask). A forward pass that raises in train mode alone, with
    autograd on or off, is train_dropout's business: then the eval calls are judged alone; one
    that raises only with both is this property's."""
    from .harness import call_failure, runs_until_failure

    replies, failed = runs_until_failure(module, *calls)
    if failed:
        index, error = failed
        options = calls[index][1]
        if (error.message or "").startswith("backward(): "):
            situation = ("backward_train_mask" if options.get("train") and options.get("mask") is not None
                         else "backward_train" if options.get("train")
                         else "backward_mask" if options.get("mask") is not None else "backward_eval")
            message = error.message[len("backward(): "):].split(" Hint: enable anomaly detection")[0]
            # torch's words for an output with no graph behind it: gradients turned off or the
            # graph cut in forward, not an in-place operation
            code = ("backward_no_graph" if "does not require grad and does not have a grad_fn" in message
                    else "backward_failed" if "modified by an inplace operation" in message
                    else "backward_raised")  # a backward written by hand, a hook
            raise call_failure(error, code, message=message.rstrip("."), situation=situation)
        if not options.get("train"):
            raise raised_after_earlier_calls(module, calls, index, error) or error
        # train_dropout runs train mode without autograd: a forward that raises only with both
        # (a module that refuses to be trained) is this property's to name. Confirmed as the first
        # call of a twin: a module can remember this call's inputs and raise on them again.
        args, _ = calls[index]
        _, without_grad = runs_until_failure(module.twin(), (args, without_autograd(options)))
        if without_grad is None:
            raise error
        evaluated = [i for i, (_, o) in enumerate(calls) if not o.get("train")]
        replies = dict(zip(evaluated, module.runs(*(calls[i] for i in evaluated))))
        for i in evaluated:
            calling(replies[i].call)
            checked(i, replies[i])
        return
    for i, reply in enumerate(replies):
        calling(reply.call)  # a failure below is about this call, whichever call a check made last
        checked(i, reply)


def not_finite_for_autograd_alone(module, call):
    """A call whose outputs are not finite numbers (NaN, or meta tensors without values) is left to
    the property of its forward pass (a mask read the other way, dropout before the softmax)...
    unless the same call without autograd gives finite outputs: a module whose training steps
    alone give NaN (or nothing) cannot be trained, and no other property calls it that way. Each
    asked as the first call of a twin (a module can remember this call's inputs and give NaN on
    them again); where the call with autograd is finite there, it was not on this module because
    of earlier calls (twin_first_call_right). Costs exchanges only after such an output."""
    from .harness import runs_until_failure

    args, options = call
    replies, failed = runs_until_failure(module.twin(), (args, options))
    if failed is None and outputs_finite(replies[0]):
        raise PropertyFailure("gradients_call_depends_on_earlier_calls")
    replies, failed = runs_until_failure(module.twin(), (args, without_autograd(options)))
    require(failed is not None or not outputs_finite(replies[0]), "output_not_finite_with_autograd",
            train=bool(options.get("train")))


def outputs_finite(reply):
    """Whether a call's outputs are all finite numbers (no NaN from the forward pass itself)."""
    return all(isinstance(o, np.ndarray) and o.dtype.kind == "f" and np.isfinite(o).all() for o in reply.outputs)


def forward_finite(reply, code):
    """A property downstream of the forward pass (gradients) cannot be judged when that pass already
    returns NaN on ordinary inputs (a row that sees no position): every gradient is NaN then.
    `code` names the property to fix first. Outputs that are not float arrays are not this check's."""
    count = sum(int((~np.isfinite(o)).sum()) for o in reply.outputs
                if isinstance(o, np.ndarray) and o.dtype.kind == "f")
    require(count == 0, code, count=count)


def agrees_with_reference(reply, index, expected, bound):
    """Whether output `index` of a call is the reference's (its shape, within reference_match's
    tolerance), without failing: a property that judges something downstream of the forward pass
    (where gradients flow) judges it only on a forward pass that is right, so that one mistake of
    the forward pass does not cost this property as well."""
    return index < len(reply.outputs) and _within_reference(reply.outputs[index], expected, bound)


def right_with_autograd(module, call, reply, expected, bound):
    """Whether output 0 of `call`, an eval call made with autograd on and its inputs requiring grad
    (reply), is the reference's.
    Where it is not but the same call under torch.no_grad() (as every call outside the gradient
    checks is made) is, the forward pass depends on whether gradients are computed, not on
    train()/eval(): dropout tied to torch.is_grad_enabled(), say, which is on in eval too whenever
    a user evaluates without no_grad. Where both miss, the same two calls each as the first on a
    module built the same way (twin): a module can remember the inputs of its autograd call and
    miss again on them without autograd, and the gradient checks, skipped after a miss, would never
    judge its backward. A miss of the first call with autograd but not of the first without is
    the same dependence on autograd; a first call with autograd that is right shows that earlier
    calls made the miss (gradients_call_depends_on_earlier_calls: no other property may repeat
    this call's pattern). Costs exchanges only after a miss."""
    if agrees_with_reference(reply, 0, expected, bound):
        return True
    args, options = call
    again = module.run(*args, **without_autograd(options))
    calling(reply.call)  # the failure is about the call with autograd on
    require(not agrees_with_reference(again, 0, expected, bound), "output_depends_on_grad_mode")
    try:
        first = module.twin().run(*args, **options)
        alone = module.twin().run(*args, **without_autograd(options))
    except SubmissionError as error:  # the forward pass raises on a module of its own: not a gradient's matter
        if not error.raised:
            raise
        return False
    calling(reply.call)
    require(not agrees_with_reference(first, 0, expected, bound), "gradients_call_depends_on_earlier_calls")
    require(not agrees_with_reference(alone, 0, expected, bound), "output_depends_on_grad_mode")
    return False


def without_autograd(options):
    """A call's options with autograd's switches taken out: the same call, as train_dropout and
    every check outside the gradient ones make it."""
    return {k: v for k, v in options.items() if k not in ("grad", "upstream", "input_grads", "backward_from")}


def _within_reference(actual, expected, bound):
    """Whether `actual` is a float array of the reference's shape within reference_match's tolerance."""
    if not (isinstance(actual, np.ndarray) and actual.shape == expected.shape and actual.dtype.kind == "f"):
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(actual.astype(np.float64) - expected) <= reference_tolerance(expected, bound)))
