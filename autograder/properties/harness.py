"""Drive a module that lives in the worker: build it, load parameters, run it, read it back.

The grader chooses every input and every parameter value itself (from a seed hypothesis drew),
so the reference it computes describes exactly the module the worker ran.
"""
import numpy as np

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
    """A module built inside the worker."""

    def __init__(self, worker, cls, **kwargs):
        self.worker, self.cls = worker, cls
        info = worker.call(cls, "build", cls=cls, kwargs=kwargs)
        self.handle = info["handle"]
        self.param_shapes = {k: tuple(v) for k, v in info["params"].items()}
        self.buffers = info["buffers"]
        self.state_dict = info["state_dict"]
        self.linear_bias = info["linear_bias"]

    def load_random(self, rng):
        """Draw fresh values for the contract layers' parameters, load them, return them as float64.

        A bias present or missing against the contract is parameter_count's business: the
        reference uses whichever the module has. Parameters outside the contract's layers (say a
        mask stored as a Parameter) keep the submission's own values, so that the other checks
        still judge the student's module rather than one the grader filled with noise.
        """
        layers = CONTRACT_LAYERS[self.cls]
        missing = [f"{layer}.weight" for layer in layers if f"{layer}.weight" not in self.param_shapes]
        if missing:
            raise PropertyFailure("missing_parameters", names=missing, found=sorted(self.param_shapes))
        values = {}
        for name, shape in self.param_shapes.items():
            if name.rsplit(".", 1)[0] not in layers:
                continue
            fan_in = shape[-1] if len(shape) > 1 else 4
            values[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        self.worker.call(self.cls, "set_params", handle=self.handle, params=values)
        return {k: v.astype(np.float64) for k, v in values.items()}

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
