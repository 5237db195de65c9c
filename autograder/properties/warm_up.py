"""The attention exercise's warm-up: what each batch zygote (worker/zygote.py) runs once, before
it forks a worker per submission, so that every worker starts with these kernels initialised.

Run by path (runpy) in the zygote, which has loaded child.py: the worker's own request paths on a
one-layer module, then the functional operations attention code uses, forward and backward.
"""
import types


def warm_up(worker):
    """Initialise the torch kernels that attention code uses, forward and backward, with no module of ours left over.

    Runs child.py's own request paths on a one-layer module (build with chosen parameters,
    describe, call with gradients while counting SDPA calls, the meta device), then the functional
    operations.
    """
    import numpy as np

    torch = worker.torch

    class WarmUp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.proj(x)

    worker.module = types.SimpleNamespace(WarmUp=WarmUp)
    handle = "warm-up"
    worker.op_build("WarmUp", {}, handle, load={"seed": 0, "layers": ["proj"]})
    worker.op_describe(handle)
    x = np.ones((2, 3, 8), np.float32)
    for device in ("cpu", "meta"):
        worker.op_call(handle, "forward", args=[x], grad=device == "cpu", trace=["scaled_dot_product_attention"], device=device)
    worker.module, worker.instances = None, {}

    q = torch.randn(2, 2, 5, 4, requires_grad=True)
    mask = torch.tril(torch.ones(5, 5)).view(1, 1, 5, 5)
    scores = (q @ q.transpose(-2, -1)) / 2.0
    weights = torch.nn.functional.dropout(torch.softmax(scores.masked_fill(mask == 0, float("-inf")), dim=-1), 0.1)
    out = torch.einsum("bhij,bhjd->bhid", weights, q).transpose(1, 2).contiguous().reshape(2, 5, 8)
    fused = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    (out.sum() + fused.sum()).backward()
