"""Drive a module that lives in the worker: build it with chosen parameters, run it, read it back.

The grader chooses every input and every parameter value itself (from a seed hypothesis drew),
so the reference it computes describes exactly the module the worker ran.
"""
import itertools
import math

import numpy as np

from ..worker import parameters
from ..worker.client import SubmissionError
from .failures import PropertyFailure, as_array

# Parameters the grader will draw float64 values for, summed over a module: far above any
# module of the exercise, and a bound on what a forged build reply can make the grader allocate.
MAX_PARAMETER_ELEMENTS = 1 << 22

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
    """A module built inside the worker, lazily: the build request goes out with the module's
    first other request (worker.calls), so building and first use cost one exchange.

    With load_seed, the worker loads the parameters the grader chose for the contract layers
    while it builds the module (worker/parameters.py draws them from default_rng(load_seed)); the
    grader draws the same values into `params` (float64, for its reference). A bias present or
    missing against the contract is parameter_count's business: the reference uses whichever the
    module has. Parameters outside the contract's layers (say a mask stored as a Parameter) keep
    the submission's own values, so that the other checks still judge the student's module
    rather than one filled with noise.
    """

    def __init__(self, worker, cls, load_seed=None, **kwargs):
        self.worker, self.cls = worker, cls
        self.handle = str(next(_handles))
        self.layers = CONTRACT_LAYERS[cls]
        self.load_seed = load_seed
        load = None if load_seed is None else {"seed": load_seed, "layers": list(self.layers)}
        self._pending_build = ("build", {"cls": cls, "kwargs": kwargs, "handle": self.handle, "load": load})
        self._description = None

    def build(self):
        """Build now, if not done yet (say, a test that expects the constructor itself to fail)."""
        if self._pending_build:
            self._send()
        return self

    def _send(self, *requests):
        """Send requests, after the build if it is still pending; return their answers, in order,
        raising the build's failure first, then the contract's, then each request's own."""
        pending = [self._pending_build] if self._pending_build else []
        answers = self.worker.calls(self.cls, [*pending, *requests])
        if pending:
            self._built(_answer(answers.pop(0)))
        return [_answer(answer) for answer in answers]

    def _built(self, info):
        """Take the build's reply (its form checked by worker/protocol.py): the parameters' total
        size is bounded before anything is drawn for them."""
        self._pending_build = None
        params = info["params"]
        count = sum(math.prod(shape) for shape in params.values())
        if count > MAX_PARAMETER_ELEMENTS:
            raise PropertyFailure("too_many_parameters", count=count, limit=MAX_PARAMETER_ELEMENTS)
        self._param_shapes = shapes = {k: tuple(v) for k, v in params.items()}
        if self.load_seed is not None:
            missing = [f"{layer}.weight" for layer in self.layers if f"{layer}.weight" not in shapes]
            if missing:
                raise PropertyFailure("missing_parameters", names=missing, found=sorted(shapes))
            chosen = parameters.draw(np.random.default_rng(self.load_seed), shapes, self.layers)
            self._params = {k: v.astype(np.float64) for k, v in chosen.items()}

    @property
    def param_shapes(self):
        return self.build()._param_shapes

    @property
    def params(self):
        """The contract layers' parameters as loaded (float64): only for a module built with load_seed."""
        return self.build()._params

    def _describe(self, key):
        if self._description is None:
            self._description, = self._send(("describe", {"handle": self.handle}))
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

    def run(self, *args, **options):
        reply, = self.runs((args, options))
        return reply

    def runs(self, *calls):
        """Several run(*args, **options) calls, given as (args, options) pairs, sent in one exchange
        with the worker (one round trip instead of one each); their Replies, in order. A failure
        is raised as run would raise it, the first failing call's first."""
        return [Reply(raw) for raw in self._send(*(("call", _call(self.handle, *args, **options))
                                                   for args, options in calls))]

    @property
    def parameter_count(self):
        return int(sum(np.prod(s, dtype=np.int64) for s in self.param_shapes.values()))


def _call(handle, *args, method="forward", train=False, seed=0, grad=False, trace_sdpa=False,
          device="cpu", **kwargs):
    """A call request: run `method` of module `handle` with these inputs and switches."""
    return {"handle": handle, "method": method, "args": list(args), "kwargs": kwargs, "train": train,
            "seed": seed, "grad": grad, "trace_sdpa": trace_sdpa, "device": device}


_handles = itertools.count()  # the grader names the modules, so a request can follow a build unanswered


def _answer(answer):
    if isinstance(answer, SubmissionError):
        raise answer
    return answer


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
