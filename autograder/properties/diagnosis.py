"""Which misconception of the catalog explains a failed value comparison, if exactly one does.

After a property has already failed on values (never on a passing submission), the grader asks
every misconception of the class whose mistake shows in values what a module with that mistake
would have returned on the calls of the failing example, with the same inputs and parameters:
its float64 numpy alternative to the reference (misconceptions/model.py). A misconception matches
the example when the module's outputs equal its alternative on every call, within reference_match's
tolerance (checks.reference_tolerance, with the reference's float32 rounding bound), and its
alternative differs, on at least one of those calls, from what a correct module computes (so
that the example did show that mistake). Hypothesis may fail several examples before it replays
the minimal one last: the ids that matched are intersected over every failing example compared
for the same (class, property), and a misconception is named only while exactly one is left and
it is one that explains the property (misconceptions.explaining(cls, prop)). Comparing all of the
class's misconceptions, not only those, means that two mistakes the example cannot tell apart
(a -1e4 fill and a 0 fill, where every open score is below both) name neither.

Where it runs: reference_match calls diagnose() from checks.reference_across_calls with its own
calls and expected values. The other properties of VALUE_CODES are diagnosed where their failure
is raised (failures.PropertyFailure), from the calls their example made (failures.exchanged
remembers every harness.Remote.runs of the example), for the property that suite_runner said is
running (begin). A correct submission raises no failure, so none of this runs for it.

What it claims: the module computed, on every failing example that was compared, what that
mistake computes. Not that its code contains that mistake (another mistake that computes the
same, written otherwise, gets the same name), and nothing when no catalog entry or several fit.

Dropout. A misconception whose outputs depend on the keep masks the module drew (model.py's
`drop`) is compared only where the masks can be read off what the module returned: the weights
it returns (SelfAttention, MultiHeadAttention: a kept weight is never exactly 0) and the output,
where the dropout acts last (its zeros). Elsewhere (CausalSelfAttention's attention dropout, a
dropout before the softmax) that call cannot be computed and is left out of the comparison.

numpy only, in the trusted process: nothing here runs the submission again. The catalog is
imported at the first failure, so a correct submission's grading never loads it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import reference

KIND_ORDER = ("numeric", "dropout")  # structural mistakes return the reference's values: never a value match

# The properties diagnosed where they fail, and the failure codes that are comparisons of values
# (not the output's form, a missing layer, an exception): only those are diagnosed.
VALUE_CODES = {
    "rows_sum_to_one": ("rows_do_not_sum_to_one",),
    "masked_zero": ("masked_weight_not_zero", "masked_weight_not_zero_mask"),
    "scale": ("wrong_scale", "scale_unmeasurable"),
    "causality": ("future_leak", "future_leak_long", "past_ignored"),
    "large_inputs": ("masked_weight_not_zero_large", "not_finite", "rows_do_not_sum_to_one", "future_leak_large",
                     "future_leak_upstream", "large_scores_changed", "large_scores_changed_output"),
    "fused_equivalence": ("fused_mismatch", "fused_only_mismatch", "both_paths_mismatch", "fused_only_mismatch_at",
                          "both_paths_mismatch_at"),
    "batch_independence": ("batch_leak",),
    "eval_deterministic": ("eval_not_deterministic", "eval_depends_on_earlier_calls"),
    "train_dropout": ("dropout_not_applied", "dropout_ignores_p", "dropout_applied_twice", "dropout_wrong_factor", "dropout_not_rescaled", "dropout_not_rescaled_in_reduced_precision",
                      "layer_dropout_wrong_factor", "dropout_wrong_rate",
                      "dropout_output_mismatch", "resid_dropout_missing", "attn_dropout_missing",
                      "attn_dropout_misplaced"),
}

# The property being graded, and the ids that matched every failing example compared so far.
_state = {"key": None, "ids": None}


@dataclass(frozen=True)
class Call:
    """One call of a failing example: the module's float64 parameters and constructor arguments,
    the call as sent (args, options), what the module returned (reply.outputs) and, per output,
    the property's (reference, rounding bound, magnitude of the inputs, what)."""

    params: dict
    build: dict
    args: tuple
    options: dict
    outputs: list
    wanted: list


def begin(cls, prop):
    """A property starts: nothing matched yet (suite_runner calls it before each test)."""
    _state.update(key=(cls, prop), ids=None)


def reset():
    _state.update(key=None, ids=None)


def candidates(cls, prop):
    """The catalog entries that may be named for a failure of (cls, prop): those that explain it."""
    from .. import misconceptions

    return [entry for entry in misconceptions.explaining(cls, prop) if entry.kind in KIND_ORDER]


def rivals(cls):
    """Every entry of `cls` whose mistake shows in values, numeric first: all are compared, so that
    a name is given only when no other known mistake explains the outputs as well (an `explains`
    list that leaves out a property costs a name, never gives a wrong one)."""
    from .. import misconceptions

    return [entry for kind in KIND_ORDER for entry in misconceptions.of_class(cls) if entry.kind == kind]


def diagnose(module, prop, calls, returned, expected):
    """The id of the one misconception that explains this failing example and every failing
    example of (module.cls, prop) compared before it, or None.

    module: the harness.Remote the calls ran on (its class, build arguments and float64 params);
    calls: its (args, options) pairs, as sent; returned: each call's outputs as the worker sent
    them (reply.outputs); expected: for each call, the property's list of (reference, rounding
    bound, magnitude of the inputs, what), in the order of the outputs."""
    from .harness import params_in_turn

    example = [Call(params, module.kwargs, *by_position(module.cls, args, options), outputs, wanted)
               for (args, options), params, outputs, wanted
               in zip(calls, params_in_turn(module, calls)[0], returned, expected, strict=True)]
    return _narrowed((module.cls, prop), matching(module.cls, example))


def on_failure(code, exchanges):
    """The diagnosis of a failure `code` raised now, in the property begin() named, from the calls
    of its example ((module, calls, replies) of each Remote.runs, as failures.exchanged kept them), or None
    when that property and code are not a comparison of values diagnosed here."""
    key = _state["key"]
    if key is None:
        return None
    marked = structural(*key, code)
    if marked is not None or code not in VALUE_CODES.get(key[1], ()):
        return marked
    from .harness import params_in_turn

    cls, prop = key
    example, now = [], {}  # now: each module's parameters after the exchanges so far
    for module, calls, replies in exchanges:
        if module.cls != cls or getattr(module, "load_seed", None) is None:
            continue  # a module without the grader's parameters: no alternative can be computed
        taken, now[id(module)] = params_in_turn(module, calls, now.get(id(module)))
        for (args, options), reply, params in zip(calls, replies, taken):
            args, options = by_position(cls, args, options)
            wanted = reference_of(cls, params, module.kwargs, args, options)
            if wanted is not None:
                example.append(Call(params, module.kwargs, args, options, reply.outputs, wanted))
    return _narrowed(key, matching(cls, example) if example else [])


def by_position(cls, args, options):
    """(args, options) of a call with the inputs it passed by name (mha(query=x, key=x, value=x))
    moved to their places among args, as the models here take them; the mask an option, also
    where the call passed it by position (mha(q, k, v, mask))."""
    from .harness import argument_names

    every = argument_names(cls, options.get("method", "forward"))
    if "mask" in every and len(args) > every.index("mask"):
        at = every.index("mask")
        args, options = args[:at], {**options, "mask": args[at]}
    names = [name for name in every if name != "mask"]
    named = [name for name in names[len(args):] if name in options]
    if not named:
        return args, options
    return (*args, *(options[name] for name in named)), {k: v for k, v in options.items() if k not in named}


def structural(cls, prop, code):
    """The structural misconception whose mistake alone raises this failure (its `shows_as`), or
    None: such a module returns the reference's values, so its failure code is what names it."""
    from .. import misconceptions

    found = [entry.id for entry in misconceptions.of_class(cls) if (prop, code) in entry.shows_as]
    return found[0] if len(found) == 1 else None


def _narrowed(key, found):
    """The running intersection for `key`, with this example's ids; the one id left, if it may be
    named for that property."""
    found = set(found)
    if _state["key"] == key and _state["ids"] is not None:
        found &= _state["ids"]
    _state.update(key=key, ids=found)
    named = next(iter(found)) if len(found) == 1 else None
    return named if named in {entry.id for entry in candidates(*key)} else None


def reference_of(cls, params, build, args, options):
    """The reference for one call with its float32 rounding bounds, as reference_match compares:
    [(reference, bound, magnitude of the inputs, what)] per output; None for a call that is not a
    forward pass on values (another method, the meta device)."""
    if options.get("method", "forward") != "forward" or options.get("device", "cpu") not in ("cpu", "cuda"):
        return None
    arrays = [np.asarray(a, dtype=np.float64) for a in args if isinstance(a, np.ndarray)]
    if not arrays:
        return None
    magnitude = float(np.sqrt(np.mean(np.square(arrays[0])))) or 1.0  # the scale the inputs were drawn at
    mask = options.get("mask")
    mask = None if mask is None else np.asarray(mask, dtype=np.float64)
    try:
        if cls == "SelfAttention":
            out, weights, e_out, e_weights = reference.self_attention_bounded(params, arrays[0], mask)
        elif cls == "MultiHeadAttention":
            out, weights, e_out, e_weights = reference.multi_head_attention_bounded(
                params, build["num_heads"], *arrays, mask)
        else:
            out, e_out = reference.causal_self_attention_bounded(params, build["n_head"], arrays[0])
            return [(out, e_out, magnitude, "output")]
    except (KeyError, ValueError):  # a layer the module lacks, inputs of shapes the reference refuses
        return None
    return [(out, e_out, magnitude, "output"), (weights, e_weights, 1.0, "weights")]


def matching(cls, example):
    """The ids of the entries of `cls` (rivals) that explain the example (a list of Call): on every
    call whose alternative can be computed, each output equals it within the tolerance; and on
    one of them at least, the alternative differs from what a correct module computes."""
    found = []
    for entry in rivals(cls):
        shown = False
        for call in example:
            verdict = _compare(entry, call)
            if verdict is False:
                break
            shown = shown or verdict == "shown"
        else:
            if shown:
                found.append(entry.id)
    return found


def _compare(entry, call):
    """False: the module's outputs are not this misconception's; None: this call cannot tell
    (the alternative cannot be computed); "same": they are, and so is a correct module's;
    "shown": they are, and a correct module's are not."""
    computed = alternative_of(entry, call)
    if computed is None:
        return None
    alternative, drop = computed
    correct = _correct(entry.cls, call, drop)
    # a dropout multiplies values, and their rounding, by up to 1/(1-p)
    stretch = 1.0 if drop is None else 1.0 / (1.0 - float(call.build.get("dropout", 0.0)))
    if len(alternative) < len(call.wanted):
        return False
    differs = False
    for index, (_, bound, magnitude, _what) in enumerate(call.wanted):
        actual = call.outputs[index] if index < len(call.outputs) else None
        if not (isinstance(actual, np.ndarray) and actual.dtype.kind == "f"):
            return False
        if not within(actual.astype(np.float64), alternative[index], bound * stretch, magnitude):
            return False
        if correct is not None and index < len(correct):  # in exact arithmetic: no rounding to allow for
            differs = differs or not within(correct[index], alternative[index], np.zeros_like(bound), magnitude)
    if correct is None:
        # No correct module can be computed here (dropout whose masks do not show, on a causal
        # path): a dropout mistake, in train mode, is what this call shows, the property having
        # failed on it; anything else cannot be told from a correct module here.
        differs = entry.kind == "dropout" and bool(call.options.get("train")) and call.build.get("dropout", 0) > 0
    return "shown" if differs else "same"


def _correct(cls, call, drop):
    """What a correct module returns for this call, with the keep masks the misconception took, else
    with those read off the module's outputs; None when it needs masks that do not show."""
    from .. import misconceptions

    compute = misconceptions.catalog.COMPUTE[cls]
    found = _run(compute, cls, call, {} if drop is None else {"drop": drop})
    if found is None:
        masks = read_masks(cls, {}, call.outputs)
        found = None if masks is None else _run(compute, cls, call, {"drop": masks})
    return found


def within(actual, alternative, bound, magnitude=1.0):
    """Whether `actual` is `alternative` within reference_match's tolerance (the reference's rounding
    `bound`, entry by entry). NaN and infinities match only themselves, as a module with that
    mistake returns them (a causal row with nothing to attend to, say)."""
    from .checks import reference_tolerance

    if actual.shape != alternative.shape or np.shape(bound) != alternative.shape:
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        tolerance = reference_tolerance(np.where(np.isfinite(alternative), alternative, 0.0), bound, magnitude)
        close = (np.abs(actual - alternative) <= tolerance) | (actual == alternative)
    close |= np.isnan(actual) & np.isnan(alternative)
    return bool(close.all())


def alternative_of(entry, call):
    """(what a module with `entry`'s mistake returns for this call, as a tuple of float64 arrays in
    the order of the module's outputs; the keep masks it took, or None), or None when it cannot be
    computed honestly: its dropout masks cannot be read off what the module returned."""
    computed = _run(entry.compute, entry.cls, call, {})
    if computed is not None:
        return computed, None
    drop = read_masks(entry.cls, entry.switches, call.outputs)
    if drop is None:
        return None
    computed = _run(entry.compute, entry.cls, call, {"drop": drop})
    return None if computed is None else (computed, drop)


def _run(compute, cls, call, more):
    """compute (entry.compute, or the correct model) on the call's inputs, as a tuple of float64
    arrays; None when it needs keep masks it was not given (or the inputs do not fit it)."""
    arrays = [np.asarray(a, dtype=np.float64) if isinstance(a, np.ndarray) else a for a in call.args]
    mask = call.options.get("mask")
    mask = None if mask is None else np.asarray(mask, dtype=np.float64)
    context = {"train": bool(call.options.get("train")), "p": float(call.build.get("dropout", 0.0)), **more}
    try:
        if cls == "SelfAttention":
            return tuple(compute(call.params, *arrays, mask))
        if cls == "MultiHeadAttention":
            return tuple(compute(call.params, call.build["num_heads"], *arrays, mask, **context))
        context.update(block_size=call.build["block_size"], fused=bool(call.options.get("fused")))
        return (compute(call.params, call.build["n_head"], *arrays, **context),)
    except (ValueError, KeyError):  # keep masks it was not given, a layer the module lacks
        return None


def read_masks(cls, switches, outputs):
    """The keep masks model.py needs for a module of class `cls` with these switches (a catalog
    entry's, or none: a correct module), read off what the module returned, where they show: a
    dropout on the returned weights (SelfAttention, MultiHeadAttention; a kept weight is never
    exactly 0, a dropped one always is) and a dropout applied last, to the output. None when
    neither can be read."""
    drop = {}
    first = outputs[0] if outputs else None
    second = outputs[1] if len(outputs) > 1 else None
    if cls != "CausalSelfAttention" and switches.get("dropout_at") != "scores" and isinstance(second, np.ndarray):
        drop["weights"] = second != 0
    last = (switches.get("dropout_at") == "output" if cls == "MultiHeadAttention"
            else cls == "CausalSelfAttention" and switches.get("resid_drop", "after_proj") == "after_proj")
    if last and isinstance(first, np.ndarray):
        drop["output"] = first != 0
    return drop or None
