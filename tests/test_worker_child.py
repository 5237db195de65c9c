"""The worker's own start-up: what it defers must change no answer, only what it costs."""
import subprocess
import sys
import types
from functools import partial
from pathlib import Path

import pytest

from autograder.cohort.warm import Zygote, ZygoteWorker
from autograder.config import Limits
from autograder.worker.client import Worker

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
for name in ("torch._dynamo", "sympy", "torch.fx.experimental.symbolic_shapes"):
    print("deferred", name, type(sys.modules[name]).__name__)
print("real", callable(torch._dynamo.is_compiling), type(sys.modules["torch._dynamo"]).__name__)
import sympy  # a stand-in gives every module back: the next import of each is the real one
print("real sympy", type(sys.modules["sympy"]).__name__, sympy.Symbol("x").is_Symbol)
"""

STAR_IMPORT = r"""
import sys
sys.path.insert(0, {child_dir!r})
import child
worker = child.Worker(__file__)
from sympy import *  # a submission's own use of sympy, from the stand-in: every name is sympy's
print(type(sys.modules["sympy"]).__name__, Symbol("x").is_Symbol, callable(simplify))
"""


def _run_probe(tmp_path, source):
    """stdout lines of a script run by a fresh interpreter, with child.py importable."""
    script = tmp_path / "probe.py"
    script.write_text(source.format(child_dir=str(CHILD_DIR)))
    found = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    return found.stdout.splitlines()


@pytest.fixture
def deferred():
    """worker/deferred.py, imported as the worker imports it (beside child.py)."""
    sys.path.insert(0, str(CHILD_DIR))
    try:
        import deferred
    finally:
        sys.path.remove(str(CHILD_DIR))
    return deferred


def test_meta_kernels_run_on_stand_ins_and_the_real_modules_load_on_demand(tmp_path):
    """The meta device's reference kernels give their shapes, and refuse a tensor left on the CPU,
    with torch._dynamo, sympy and symbolic_shapes only stood in for; anything else asked of them
    (torch.compile, say) gets the real modules."""
    assert _run_probe(tmp_path, PROBE) == ["meta (2, 3, 3) meta", "refused True",
                     "deferred torch._dynamo _StandIn", "deferred sympy _StandIn",
                     "deferred torch.fx.experimental.symbolic_shapes _StandIn",
                     "real True module", "real sympy module True"]


def _outcome(function, args):
    try:
        value = function(*args)
    except Exception as exc:
        return "raises", type(exc)
    return "returns", type(value), value


def test_the_stand_in_guards_answer_plain_values_as_torch_does(deferred):
    """deferred.py answers symbolic_shapes' guards itself for plain Python values: for each, over
    bools, ints, floats, None, lists, tuples and torch.Size (alone and in pairs, as those guards
    take them), the same value of the same type, or the same exception type, as torch's own."""
    import torch
    import torch.fx.experimental.symbolic_shapes as real

    values = [True, False, 0, 1, 7, -3, 2.5, None, (), [], (1, 2), [1, 2], (1, 3), (1, 2, 3),
              torch.Size([2, 3]), [True, 1], [(1, 2), (1, 2)], [(1, 2), 2.0]]
    stand_ins = deferred._ANSWERS[deferred.SYMBOLIC_SHAPES]
    assert set(stand_ins) == {guard.__name__ for guard in deferred._GUARDS}
    compared = 0
    for name, stand_in in stand_ins.items():
        arities = {"sym_eq": [2], "sym_and": [1, 2, 3], "sym_or": [1, 2, 3]}.get(name, [1])
        for arity in arities:
            for args in ([(v,) for v in values] if arity == 1 else
                         [(a, b) for a in values for b in values] if arity == 2 else
                         [(a, b, c) for a in (True, False, 1) for b in (True, False, 0) for c in (True, 3)]):
                assert _outcome(stand_in, args) == _outcome(getattr(real, name), args), (name, args)
                compared += 1
    assert compared > 700


def test_the_stand_ins_hand_symbolic_values_to_torch(deferred, monkeypatch):
    """A symbolic value is never answered by a stand-in: the real guard gets it."""
    asked = []

    class Symbolic:  # what a SymBool is to the stand-in: not a plain value
        pass

    real = types.SimpleNamespace(expect_true=lambda a, skip=0: asked.append(a) or "real answer")
    monkeypatch.setattr(deferred, "_real", lambda name: real)
    stand_in = deferred._ANSWERS[deferred.SYMBOLIC_SHAPES]["expect_true"]
    value = Symbolic()
    assert stand_in(value) == "real answer" and asked == [value]
    assert stand_in(True) is True and asked == [value]


def test_a_submissions_own_star_import_gets_the_real_module(tmp_path):
    assert _run_probe(tmp_path, STAR_IMPORT) == ["module True True"]


COLLECTOR_PROBE = '''
import gc
import torch
print("collector on:", gc.isenabled(), "frozen:", gc.get_freeze_count() > 0)

class SelfAttention(torch.nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.W_Q = torch.nn.Linear(d_model, d_model, bias=False)
'''


@pytest.mark.parametrize("kind", ["cold", "forked from a zygote"])
def test_the_submission_runs_with_the_cyclic_collector_on(kind):
    """The worker loads torch with the collector off; the student's code must meet it on again (a
    submission making cycles would otherwise grow until the memory limit), with torch frozen."""
    zygote = Zygote() if kind != "cold" else None
    make = Worker if zygote is None else partial(ZygoteWorker, zygote=zygote)
    worker = make(COLLECTOR_PROBE, Limits(request_s=30, memory_mib=1024))
    worker.start()
    try:
        assert worker.call("SelfAttention", "build", cls="SelfAttention", kwargs={"d_model": 4}, handle="a")
        assert worker.take_output().strip() == "collector on: True frozen: True"
    finally:
        worker.stop()
        if zygote is not None:
            zygote.close()


LAYOUT_PROBE = '''
import os, sys
import torch
print("fds:", sorted(int(fd) for fd in os.listdir("/proc/self/fd")), "argv:", [os.path.basename(a) for a in sys.argv])

class SelfAttention(torch.nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.W_Q = torch.nn.Linear(d_model, d_model, bias=False)
'''


def _layout(zygote):
    make = Worker if zygote is None else partial(ZygoteWorker, zygote=zygote)
    worker = make(LAYOUT_PROBE, Limits(request_s=30, memory_mib=1024))
    worker.start()
    try:
        assert worker.call("SelfAttention", "build", cls="SelfAttention", kwargs={"d_model": 4}, handle="a")
        return worker.take_output().strip()
    finally:
        worker.stop()


def test_a_submission_sees_the_same_descriptors_and_argv_cold_and_forked():
    """`grade` starts the worker cold, `batch` forks it from a zygote: a submission that writes to
    (or closes) a descriptor by number, or reads sys.argv, must meet the same in both, so that it
    scores the same (a dup2 onto the reply pipe's number cost points in one mode only)."""
    cold = _layout(None)
    zygote = Zygote()
    try:
        forked = _layout(zygote)
    finally:
        zygote.close()
    # 0-2, the pipes at 3 and 4, and the descriptor listdir itself holds open
    assert cold == forked == "fds: [0, 1, 2, 3, 4, 5] argv: ['attention.py']", (cold, forked)


MEMBERS = r"""
import sys
sys.path.insert(0, {child_dir!r})
import child
import torch
import torch.nn as nn


class Honest(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2, bias=False))
        self.tied = self.inner[0]  # the same layer under a second name
        self.register_buffer("kept", torch.ones(2))
        self.register_buffer("mask", torch.ones(2, 2, dtype=torch.bool), persistent=False)


class Lying(Honest):
    def named_parameters(self, *args, **kwargs):
        return iter([("a.weight", self.a.weight)])

    def named_modules(self, *args, **kwargs):
        return iter([("", self)])

    def named_buffers(self, *args, **kwargs):
        return iter([])

    def state_dict(self, *args, **kwargs):
        return {{}}


honest = Honest()
params, buffers, transient, modules, persistent = child.members(honest)
print("params", list(params) == [n for n, _ in honest.named_parameters()])
print("buffers", list(buffers) == [n for n, _ in honest.named_buffers()])
print("modules", list(modules) == [n for n, _ in honest.named_modules(remove_duplicate=False)])
print("persistent", sorted(set(persistent)) == sorted(honest.state_dict()))
chosen = child.members(honest, ("tied",))[0]
print("preferred", "tied.weight" in chosen and "inner.0.weight" not in chosen and len(chosen) == len(params))
print("lying", [list(part) for part in child.members(Lying())[:2]] == [list(params), list(buffers)])
dotted = Honest()
extra = nn.Parameter(torch.ones(1))
dotted._parameters["a.weight"] = extra  # a key register_parameter refuses, met before a's own weight
dotted._modules["inner.0"] = nn.Linear(1, 1)  # and a module whose weight spells inner.0.weight
found = child.members(dotted)[0]
print("dotted", found["a.weight"] is dotted.a.weight and found["(a.weight)"] is extra
      and found["inner.0.weight"] is dotted.inner[0].weight and len(found) == len(params) + 3)


class Same(nn.Module):
    def forward(self, weight):
        return weight


watched = Honest()
torch.nn.utils.parametrize.register_parametrization(watched.a, "weight", Same())
torch.nn.utils.parametrizations.weight_norm(watched.inner[2])  # two tensors: no one weight to name
found, _, _, _, persistent = child.members(watched)
print("parametrized", found["a.weight"] is watched.a.parametrizations.weight.original and "a.weight" in persistent
      and "inner.2.parametrizations.weight.original0" in found and "inner.2.weight" not in found)
"""


def test_the_worker_reads_a_modules_members_as_nn_module_keeps_them(tmp_path):
    """Names and order as nn.Module's own methods give them (a shared layer under every name; its
    parameters once, under a contract layer's name where one is), the state_dict's keys; a
    submission overriding those methods (to hide a parameter without a gradient, say) hides
    nothing from the worker. A weight torch.nn.utils.parametrize computes from one tensor is that
    tensor, under the layer's name for it."""
    script = tmp_path / "members.py"
    script.write_text(MEMBERS.format(child_dir=str(CHILD_DIR)), encoding="utf-8")
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert printed.stdout.split() == ["params", "True", "buffers", "True", "modules", "True", "persistent", "True",
                                      "preferred", "True", "lying", "True", "dotted", "True",
                                      "parametrized", "True"], printed.stderr


IN_PLACE = r"""
import sys
sys.path.insert(0, {child_dir!r})
import numpy as np
import child
worker = child.Worker({submission!r})
worker.load_submission()
worker.op_build("Probe", {{}}, "probe")
for value, shape, in_place in ((1, (2, 3), False), (2, (2, 3), True), (3, (2, 4), True), (4, (2, 4), False)):
    worker.op_call("probe", "forward", [np.full(shape, value, np.float32)], in_place=in_place)
seen = worker.module.SEEN
print(seen[0][0] == seen[1][0], [s[1] for s in seen], seen[2][0] != seen[1][0], seen[3][0] != seen[2][0])
"""


def test_an_in_place_call_writes_its_values_into_the_previous_calls_tensors(tmp_path):
    """in_place: the module gets the very tensor of its previous call, holding the new values (a cache
    keyed on the tensor's address sees them); of another shape, or without in_place, a new tensor."""
    submission = tmp_path / "probe.py"
    submission.write_text("import torch\nSEEN = []\n\nclass Probe(torch.nn.Module):\n"
                          "    def forward(self, x):\n        SEEN.append((x.data_ptr(), float(x.sum())))\n"
                          "        return x * 1\n", encoding="utf-8")
    script = tmp_path / "in_place.py"
    script.write_text(IN_PLACE.format(child_dir=str(CHILD_DIR), submission=str(submission)), encoding="utf-8")
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert printed.stdout.split() == ["True", "[6.0,", "12.0,", "24.0,", "32.0]", "True", "True"], printed.stderr



NEVER_REUSED = r"""
import sys
sys.path.insert(0, {child_dir!r})
import numpy as np
import child
worker = child.Worker({submission!r})
worker.load_submission()
for handle in ("a", "b"):
    worker.op_build("Probe", {{}}, handle)
for call in range(200):  # freed between calls, the allocator gives the same few addresses back
    worker.op_call("ab"[call % 2], "forward", [np.full((2, 3), call, np.float32)], noncontiguous=call % 3 == 0)
seen = worker.module.SEEN
print(len(seen), len(set(address for address, _ in seen)), len(set(ident for _, ident in seen)))
"""


def test_no_input_gets_the_address_or_id_of_an_earlier_one(tmp_path):
    """A module that caches by a tensor's address or id is wrong (in_place's refill shows it, always):
    no other call may hit that cache by chance, or the same file would score by where the
    allocator put a tensor, which another process (a batch slot, a cold grade) does differently."""
    submission = tmp_path / "probe.py"
    submission.write_text("import torch\nSEEN = []\n\nclass Probe(torch.nn.Module):\n"
                          "    def forward(self, x):\n        SEEN.append((x.data_ptr(), id(x)))\n"
                          "        return x * 1\n", encoding="utf-8")
    script = tmp_path / "never_reused.py"
    script.write_text(NEVER_REUSED.format(child_dir=str(CHILD_DIR), submission=str(submission)), encoding="utf-8")
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert printed.stdout.split() == ["200", "200", "200"], printed.stderr

RELEASED = r"""
import sys, weakref
sys.path.insert(0, {child_dir!r})
import numpy as np
import child
worker = child.Worker({submission!r})
worker.load_submission()
worker.op_build("Probe", {{}}, "a")
worker.op_call("a", "forward", [np.ones((2, 3), np.float32)])
first = weakref.ref(worker.instances["a"])
worker.op_build("Probe", {{}}, "b", release=["a", "never-built"])
print(sorted(worker.instances), first() is None, sorted(worker.last_inputs), sorted(worker.last_outputs))
"""


def test_a_build_lets_go_of_the_modules_the_grader_released(tmp_path):
    """harness.Remote's finalizer releases its handle; the next build lets go of that module, its
    last inputs and outputs (a module with a large buffer, built hundreds of times, once filled
    the worker's memory), and ignores handles it never built."""
    submission = tmp_path / "probe.py"
    submission.write_text("import torch\n\nclass Probe(torch.nn.Module):\n"
                          "    def forward(self, x):\n        return x * 1\n", encoding="utf-8")
    script = tmp_path / "released.py"
    script.write_text(RELEASED.format(child_dir=str(CHILD_DIR), submission=str(submission)), encoding="utf-8")
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert printed.stdout.split() == ["['b']", "True", "[]", "[]"], printed.stderr


def test_a_remote_that_is_gone_is_released_with_the_next_build():
    from autograder.config import Limits
    from autograder.properties import harness
    from autograder.worker.client import Worker

    worker = Worker("", Limits(request_s=1, memory_mib=64))
    kept, gone = (harness.Remote(worker, "SelfAttention", d_model=2) for _ in range(2))
    del gone
    assert worker.released == ["1"]
    held = worker.released  # the list the finalizers append to stays the same object
    sent = []
    worker._send_requests = lambda cls, requests: sent.extend(requests)
    worker._answer = lambda cls, op, args: {}
    worker.calls("SelfAttention", [kept._pending_build])
    assert sent[0][1]["release"] == ["1"] and worker.released == [] and worker.released is held


SEEDED = r"""
import sys
sys.path.insert(0, {child_dir!r})
import numpy as np
import child
worker = child.Worker({submission!r})
worker.load_submission()
worker.op_build("Draws", {{}}, "draws")
for seed in (3, 3, 4):
    worker.op_call("draws", "forward", [np.zeros(2, np.float32)], train=True, seed=seed)
print(*worker.module.DRAWN)
"""


def test_numpy_and_python_generators_are_seeded_the_same_each_grading_but_not_by_torchs_seed(tmp_path):
    """A hand-written dropout may draw from np.random or random: seeded from the count of seedings,
    every grading draws the same (unseeded, a correct module once lost causality's 3 points in 1
    grading of 6); but torch.manual_seed does not fix them, for a user as for the grader (the
    statement asks torch's generator), so two calls under one seed draw alike from torch alone."""
    submission = tmp_path / "draws.py"
    submission.write_text("import random\nimport numpy as np\nimport torch\nDRAWN = []\n\n"
                          "class Draws(torch.nn.Module):\n    def forward(self, x):\n"
                          "        DRAWN.append((float(np.random.random_sample()), random.random(), float(torch.rand(1))))\n"
                          "        return x * 1\n", encoding="utf-8")
    script = tmp_path / "seeded.py"
    script.write_text(SEEDED.format(child_dir=str(CHILD_DIR), submission=str(submission)), encoding="utf-8")
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120) for _ in range(2)]
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout, runs[0].stderr
    first, again, other = (tuple(float(v) for v in draw.strip("()\n").split(", ")) for draw in runs[0].stdout.split(") ("))
    assert first[2] == again[2] != other[2]  # torch's: fixed by the seed
    assert first[0] != again[0] and first[1] != again[1]  # numpy's and Python's: not by torch's seed


ALIASED = r"""
import sys
sys.path.insert(0, {child_dir!r})
import numpy as np
import child
worker = child.Worker({submission!r})
worker.load_submission()
worker.op_build("Probe", {{}}, "probe")
for values, in_place in (((1, 1, 2), False), ((1, 3, 2), True), ((2, 2, 2), True), ((1, 1, 2), False)):
    worker.op_call("probe", "forward", [np.full((2, 3), v, np.float32) for v in values], in_place=in_place)
print(*worker.module.SEEN)
"""


def test_inputs_sent_equal_reach_the_module_as_one_tensor(tmp_path):
    """mha(x, x, x) as a user calls it: arrays sent equal are one tensor (`key is value`), others
    are not; an in-place refill writes one tensor's values once, never another input's into it."""
    submission = tmp_path / "probe.py"
    submission.write_text("import torch\nSEEN = []\n\nclass Probe(torch.nn.Module):\n"
                          "    def forward(self, q, k, v):\n"
                          "        SEEN.append((q is k, k is v, float(q.sum()), float(k.sum()), float(v.sum())))\n"
                          "        return q * 1\n", encoding="utf-8")
    script = tmp_path / "aliased.py"
    script.write_text(ALIASED.format(child_dir=str(CHILD_DIR), submission=str(submission)), encoding="utf-8")
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert printed.stdout.split() == ["(True,", "False,", "6.0,", "6.0,", "12.0)",
                                      "(False,", "False,", "6.0,", "18.0,", "12.0)",
                                      "(True,", "True,", "12.0,", "12.0,", "12.0)",
                                      "(True,", "False,", "6.0,", "6.0,", "12.0)"], printed.stderr


PERTURBED = r"""
import sys
sys.path.insert(0, {child_dir!r})
import numpy as np
import child, parameters
worker = child.Worker({submission!r})
worker.load_submission()
worker.op_build("Probe", {{}}, "probe")
before = worker.instances["probe"].weight.detach().clone()
x = np.zeros((1, 2), np.float32)
worker.op_call("probe", "forward", [x], perturb={{"seed": 5, "step": 0.5}})
moved = worker.module.SEEN[-1]
after = worker.instances["probe"].weight.detach()
expected = before.numpy() + 0.5 * parameters.direction(5, {{"weight": [2, 2]}})["weight"]
print(np.allclose(moved, expected), bool((after == before).all()))
"""


def test_a_perturbed_call_moves_the_parameters_along_the_shared_direction_and_puts_them_back(tmp_path):
    """perturb: the call sees every parameter moved by step along parameters.direction(seed), the
    grader's own direction; afterwards they are exactly what they were."""
    submission = tmp_path / "probe.py"
    submission.write_text("import torch\nSEEN = []\n\nclass Probe(torch.nn.Module):\n"
                          "    def __init__(self):\n        super().__init__()\n"
                          "        self.weight = torch.nn.Parameter(torch.randn(2, 2))\n"
                          "    def forward(self, x):\n        SEEN.append(self.weight.detach().numpy().copy())\n"
                          "        return x @ self.weight\n", encoding="utf-8")
    script = tmp_path / "perturbed.py"
    script.write_text(PERTURBED.format(child_dir=str(CHILD_DIR), submission=str(submission)), encoding="utf-8")
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert printed.stdout.split() == ["True", "True"], printed.stderr


GRAD_OFF = r"""
import sys
sys.path.insert(0, {child_dir!r})
import numpy as np
import child
worker = child.Worker({submission!r})
worker.load_submission()
worker.op_build("Probe", {{}}, "probe")
worker.op_call("probe", "forward", [np.ones((1, 2), np.float32)])  # without grad: fine
try:
    worker.op_call("probe", "forward", [np.ones((1, 2), np.float32)], grad=True)
except child.StudentError as exc:
    print(exc.payload["kind"])
"""


def test_autograd_turned_off_by_the_import_is_named_not_blamed_on_an_in_place_operation(tmp_path):
    """torch.set_grad_enabled(False) at a file's top level: its importer can no longer train; the
    gradient request says so (it once read as an in-place operation on a saved tensor)."""
    submission = tmp_path / "probe.py"
    submission.write_text("import torch\ntorch.set_grad_enabled(False)\n\nclass Probe(torch.nn.Module):\n"
                          "    def __init__(self):\n        super().__init__()\n"
                          "        self.weight = torch.nn.Parameter(torch.ones(2, 2))\n"
                          "    def forward(self, x):\n        return x @ self.weight\n", encoding="utf-8")
    script = tmp_path / "grad_off.py"
    script.write_text(GRAD_OFF.format(child_dir=str(CHILD_DIR), submission=str(submission)), encoding="utf-8")
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert printed.stdout.split() == ["grad_disabled"], printed.stderr
