"""The worker's own start-up: what it defers must change no answer, only what it costs."""
import subprocess
import sys
from pathlib import Path

CHILD_DIR = Path(__file__).resolve().parent.parent / "autograder" / "worker"

PROBE = r"""
import sys
sys.path.insert(0, {child_dir!r})
import child
worker = child.Worker(__file__)  # starts the meta device's warm-up thread
import torch
x = torch.zeros(2, 3, 3, device="meta")
masked = x.masked_fill(torch.ones(3, 3, dtype=torch.bool, device="meta").tril() == 0, float("-inf"))
weights = torch.softmax(masked @ x.transpose(-2, -1), dim=-1)
print("meta", tuple(weights.shape), weights.device.type)
try:  # a mask left on the CPU: the mistake the device check exists to catch
    x.masked_fill(torch.ones(3, 3, dtype=torch.bool).tril() == 0, float("-inf"))
except RuntimeError as exc:
    print("refused", "device" in str(exc))
print("deferred", "torch._dynamo" in sys.modules and type(sys.modules["torch._dynamo"]).__name__)
print("real", callable(torch._dynamo.is_compiling), type(sys.modules["torch._dynamo"]).__name__)
"""


def test_meta_kernels_run_without_dynamo_and_the_real_one_loads_on_demand(tmp_path):
    """The meta device's reference kernels give their shapes, and refuse a tensor left on the CPU,
    with torch._dynamo only stood in for; anything else asked of torch._dynamo (torch.compile,
    say) gets the real module."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE.format(child_dir=str(CHILD_DIR)))
    found = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    lines = found.stdout.splitlines()
    assert lines == ["meta (2, 3, 3) meta", "refused True", "deferred _DeferredDynamo", "real True module"]
