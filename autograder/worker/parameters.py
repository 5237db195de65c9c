"""The parameter values the grader chooses for a module, drawn from a seed so both sides can compute them.

The worker draws and loads them while it builds the module (one request, not two); the grader
draws the same values for its reference. A worker that loads anything else only makes its own
outputs disagree with that reference. Copied next to the worker like wire.py: numpy only.
"""
import numpy as np


# Bound on a scale factor: enough to move every softmax row, never enough to overflow float32.
MAX_FACTOR = 16.0


def draw(rng, shapes, layers, scale=None, unbiased=()):
    """float32 values for every parameter of `layers` among `shapes` (name -> shape), drawn from
    rng in the order of `shapes` (the module's named_parameters order), scaled by 1/sqrt(fan-in).
    The biases of the layers in `unbiased` are then zero, after the same draws: a zero input gives
    queries and keys of zero there, so scores exactly 0 (which a mask must not be taken for).

    scale={"layer", "rows": [start, stop] | None, "factor"} then multiplies those output rows of
    that layer (weight and bias) by factor, after the same draws: a module that differs from the
    unscaled one in its keys alone, say (the `attends` property). The grader checks the option's
    form (scaled_rows) before it sends it: here, in the worker, nothing relies on a builtin or a
    library function the submission may have replaced (abs, say) to apply it."""
    values = {}
    for name, shape in shapes.items():
        if name.rsplit(".", 1)[0] not in layers:
            continue
        fan_in = shape[-1] if len(shape) > 1 else 4
        values[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    if scale is not None:
        rows = slice(None) if scale["rows"] is None else slice(*scale["rows"])
        for name in (f"{scale['layer']}.weight", f"{scale['layer']}.bias"):
            if name in values:  # rows past a layer's end (a student's wrong shape) are not there to scale
                values[name][rows] *= np.float32(scale["factor"])
    for layer in unbiased:
        if f"{layer}.bias" in values:
            values[f"{layer}.bias"] = np.zeros_like(values[f"{layer}.bias"])
    return values


def scaled_rows(scale, layers):
    """The rows a scale option names, after checking its form (ValueError: the grader's bug, never
    the module's): a contract layer, rows [start, stop) or all, a finite factor within
    [1/MAX_FACTOR, MAX_FACTOR] in absolute value."""
    if not (isinstance(scale, dict) and set(scale) == {"layer", "rows", "factor"}):
        raise ValueError("scale must be {layer, rows, factor}")
    layer, rows, factor = scale["layer"], scale["rows"], scale["factor"]
    if layer not in layers:
        raise ValueError(f"scale names no contract layer: {layer!r}")
    if not (type(factor) in (int, float) and 1 / MAX_FACTOR <= abs(factor) <= MAX_FACTOR):
        raise ValueError(f"scale factor out of bounds: {factor!r}")
    if rows is None:
        return slice(None)
    if not (isinstance(rows, list) and len(rows) == 2 and all(type(r) is int for r in rows) and 0 <= rows[0] < rows[1]):
        raise ValueError(f"scale rows must be [start, stop): {rows!r}")
    return slice(*rows)


def direction(seed, shapes):
    """A float32 direction in parameter space, one standard normal array per parameter of `shapes`
    (name -> shape), drawn from default_rng(seed) in sorted name order: the worker moves the
    parameters along it (op_call's perturb) and the grader takes the gradient along it."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(tuple(shapes[name])).astype(np.float32) for name in sorted(shapes)}

