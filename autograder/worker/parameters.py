"""The parameter values the grader chooses for a module, drawn from a seed so both sides can compute them.

The worker draws and loads them while it builds the module (one request, not two); the grader
draws the same values for its reference. A worker that loads anything else only makes its own
outputs disagree with that reference. Copied next to the worker like wire.py: numpy only.
"""
import numpy as np


def draw(rng, shapes, layers):
    """float32 values for every parameter of `layers` among `shapes` (name -> shape), drawn from
    rng in the order of `shapes` (the module's named_parameters order), scaled by 1/sqrt(fan-in)."""
    values = {}
    for name, shape in shapes.items():
        if name.rsplit(".", 1)[0] not in layers:
            continue
        fan_in = shape[-1] if len(shape) > 1 else 4
        values[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    return values
