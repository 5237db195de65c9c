"""Drive a module that lives in the worker: build it, load parameters, run it, read it back.

The grader chooses every input and every parameter value itself (from a seed hypothesis drew),
so the reference it computes describes exactly the module the worker ran.
"""
import numpy as np

from ..worker import parameters
from .failures import PropertyFailure, as_array

# The contract's layers, per class: what the reference reads (a missing bias counts as zero).
CONTRACT_LAYERS = {
    "SelfAttention": ("W_Q", "W_K", "W_V"),
    "MultiHeadAttention": ("W_Q", "W_K", "W_V", "W_O"),
    "CausalSelfAttention": ("qkv", "proj"),
}


class Reply:
    def __init__(self, raw):
        self.outputs = raw.get("outputs", [])
        self.grads = raw.get("grads", {})
        self.sdpa_calls = raw.get("sdpa_calls", 0)

    def output(self, index, shape, what):
        if index >= len(self.outputs):
            raise PropertyFailure("missing_output", what=what, count=len(self.outputs))
        return as_array(self.outputs[index], shape, what)


class Remote:
    """A module built inside the worker.

    With load_seed, the worker loads the parameters the grader chose for the contract layers
    while it builds the module (worker/parameters.py draws them from np.random.default_rng(load_seed));
    the grader draws the same values into `params` (float64, for its reference) and leaves `rng`
    where they end, to draw the inputs from. A bias present or missing against the contract is
    parameter_count's business: the reference uses whichever the module has. Parameters outside
    the contract's layers (say a mask stored as a Parameter) keep the submission's own values,
    so that the other checks still judge the student's module rather than one filled with noise.
    """

    def __init__(self, worker, cls, load_seed=None, **kwargs):
        self.worker, self.cls = worker, cls
        layers = CONTRACT_LAYERS[cls]
        load = None if load_seed is None else {"seed": load_seed, "layers": list(layers)}
        info = worker.call(cls, "build", cls=cls, kwargs=kwargs, load=load)
        self.handle = info["handle"]
        self.param_shapes = {k: tuple(v) for k, v in info["params"].items()}
        self._description = None
        if load_seed is not None:
            missing = [f"{layer}.weight" for layer in layers if f"{layer}.weight" not in self.param_shapes]
            if missing:
                raise PropertyFailure("missing_parameters", names=missing, found=sorted(self.param_shapes))
            self.rng = np.random.default_rng(load_seed)
            chosen = parameters.draw(self.rng, self.param_shapes, layers)
            self.params = {k: v.astype(np.float64) for k, v in chosen.items()}

    def _describe(self, key):
        if self._description is None:
            self._description = self.worker.call(self.cls, "describe", handle=self.handle)
        return self._description[key]

    @property
    def buffers(self):
        return self._describe("buffers")

    @property
    def state_dict(self):
        return self._describe("state_dict")

    @property
    def linear_bias(self):
        return self._describe("linear_bias")

    def run(self, *args, method="forward", train=False, seed=0, grad=False, trace_sdpa=False,
            device="cpu", **kwargs):
        raw = self.worker.call(
            self.cls, "call", handle=self.handle, method=method, args=list(args), kwargs=kwargs,
            train=train, seed=seed, grad=grad, trace_sdpa=trace_sdpa, device=device,
        )
        return Reply(raw)

    @property
    def parameter_count(self):
        return int(sum(np.prod(s, dtype=np.int64) for s in self.param_shapes.values()))


def gaussian(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def random_mask(rng, *shape):
    """A 0/1 mask with column 0 always open, so that no row is fully masked."""
    mask = (rng.random(shape) < 0.6).astype(np.float32)
    mask[..., 0] = 1.0
    return mask


def graded(cls, prop):
    """Tag a test with the (class, property) whose points grading.yml assigns."""
    import pytest

    return pytest.mark.graded(cls=cls, prop=prop)
