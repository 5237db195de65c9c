"""What a call request can ask of the worker about its inputs (child.op_call): masks arrive with
the dtype they were sent with, `noncontiguous` passes the same values laid out out of order, the
reply names the inputs the call changed in place, and `upstream`/`input_grads` give the gradients
the `gradients` property judges."""
import textwrap

import numpy as np
import pytest

from autograder.config import Limits
from autograder.worker.client import Worker

SOURCE = textwrap.dedent('''
    import torch
    from torch import nn

    CODES = {torch.bool: 1.0, torch.int64: 2.0, torch.float32: 3.0}

    class SelfAttention(nn.Module):
        """forward reports what it got: the mask's dtype code, and whether x is contiguous."""
        def __init__(self, d_model, d_k=None):
            super().__init__()
            self.W_Q = nn.Linear(d_model, d_model, bias=False)

        def forward(self, x, mask=None, inplace=False, rewrite=False):
            if inplace:
                mask.unsqueeze_(0)
            if rewrite:
                mask.clamp_(0, 1)  # the same values, written in place
            code = CODES.get(mask.dtype, 0.0) if mask is not None else 0.0
            total = mask.to(torch.float32).sum() if mask is not None else torch.zeros(())
            return self.W_Q(x), torch.tensor([code, float(x.is_contiguous()), float(total)])
''')


@pytest.fixture(scope="module")
def worker():
    started = Worker(SOURCE, Limits(request_s=10, memory_mib=1024))
    started.start()
    yield started
    started.stop()


def run(worker, handle, *args, **options):
    request = {"handle": handle, "method": "forward", "args": list(args), "kwargs": options.pop("kwargs", {}),
               **options}
    return worker.call("SelfAttention", "call", **request)


@pytest.fixture(scope="module")
def handle(worker):
    worker.call("SelfAttention", "build", cls="SelfAttention", kwargs={"d_model": 3}, handle="m",
                load={"seed": 0, "layers": ["W_Q"]})
    return "m"


@pytest.mark.parametrize("dtype, code", [("bool", 1.0), ("int64", 2.0), ("float32", 3.0)])
def test_a_mask_keeps_its_dtype_and_values(worker, handle, dtype, code):
    mask = (np.arange(8).reshape(2, 2, 2) % 3 != 0).astype(dtype)
    reply = run(worker, handle, np.ones((2, 2, 3), np.float32), kwargs={"mask": mask})
    assert reply["outputs"][1].tolist() == [code, 1.0, float(mask.astype(np.float32).sum())]
    assert reply["modified"] == []


def test_noncontiguous_inputs_have_the_same_values(worker, handle):
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    plain = run(worker, handle, x)
    strided = run(worker, handle, x, noncontiguous=True)
    assert plain["outputs"][1][1] == 1.0 and strided["outputs"][1][1] == 0.0
    np.testing.assert_allclose(strided["outputs"][0], plain["outputs"][0], rtol=1e-6)
    # one axis longer than 1 is enough: every other element of a longer one
    single = run(worker, handle, x[:1, :1], noncontiguous=True)
    assert single["outputs"][1][1] == 0.0


def test_an_input_changed_in_place_is_named(worker, handle):
    mask = np.ones((2, 2), np.float32)
    reply = run(worker, handle, np.ones((1, 2, 3), np.float32), kwargs={"mask": mask, "inplace": True})
    assert reply["modified"] == ["mask"]
    assert mask.shape == (2, 2)  # the grader's array is untouched


def test_an_input_written_in_place_with_the_same_values_is_named(worker, handle):
    """mask.clamp_(0, 1) on a 0/1 mask leaves its values, not its _version: it fails on an
    expanded mask or one made under inference_mode (an outside writer's 48 before)."""
    mask = np.ones((2, 2), np.int64)
    reply = run(worker, handle, np.ones((1, 2, 3), np.float32), kwargs={"mask": mask, "rewrite": True})
    assert reply["modified"] == ["mask"]
    assert run(worker, handle, np.ones((1, 2, 3), np.float32), kwargs={"mask": mask})["modified"] == []


def test_input_gradients_from_a_given_upstream(worker, handle):
    x = np.random.default_rng(1).standard_normal((1, 2, 3)).astype(np.float32)
    upstream = np.zeros((1, 2, 3), np.float32)
    upstream[0, 1] = [1.0, 2.0, 3.0]
    reply = run(worker, handle, x, grad=True, upstream=upstream, input_grads=["0"])
    weight = reply["grads"]["W_Q.weight"]
    np.testing.assert_allclose(weight, upstream[0].T @ x[0], rtol=1e-6)
    grad_x = reply["input_grads"]["0"]
    assert np.all(grad_x[0, 0] == 0) and np.any(grad_x[0, 1] != 0)
