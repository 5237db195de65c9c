"""Worker.calls: several requests sent at once, every answer read, each failure named and ordered.

The suite sends a module's build together with its first call; these tests pin down what that
must never change: answers arrive in order, a failed build leaves no answer behind for the next
exchange, a failure that no input avoids still halts the test, and a hang is blamed on the
request that hung.
"""
import textwrap

import numpy as np
import pytest

from autograder.config import Limits
from autograder.worker import parameters
from autograder.worker.client import Worker
from autograder.worker.submission_errors import SubmissionError, SubmissionHalted

SOURCE = textwrap.dedent('''
    import time
    import torch
    from torch import nn

    class SelfAttention(nn.Module):
        def __init__(self, d_model, d_k=None):
            super().__init__()
            if d_model == 3:
                raise ValueError("three is not allowed")
            if d_model == 5:
                time.sleep(60)
            self.W_Q = nn.Linear(d_model, d_k or d_model, bias=False)

        def forward(self, x):
            return self.W_Q(x) * 2

    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, num_heads):
            raise NotImplementedError
''')


@pytest.fixture
def worker():
    started = Worker(SOURCE, Limits(request_s=3, memory_mib=1024))
    started.start()
    yield started
    started.stop()


def build(handle, d_model):
    return ("build", {"cls": "SelfAttention", "kwargs": {"d_model": d_model}, "handle": handle,
                      "load": {"seed": 0, "layers": ["W_Q"]}})


def call(handle, x):
    return ("call", {"handle": handle, "method": "forward", "args": [x]})


def test_build_and_call_sent_together_answer_in_order(worker):
    x = np.ones((1, 2, 4), np.float32)
    built, ran = worker.calls("SelfAttention", [build("a", 4), call("a", x)])
    assert built == {"params": {"W_Q.weight": [4, 4]}}
    weight = parameters.draw(np.random.default_rng(0), {"W_Q.weight": (4, 4)}, ["W_Q"])["W_Q.weight"]
    np.testing.assert_allclose(ran["outputs"][0], 2 * x @ weight.T, rtol=1e-6)
    again = worker.call("SelfAttention", "call", handle="a", method="forward", args=[x])
    np.testing.assert_array_equal(again["outputs"][0], ran["outputs"][0])


def test_a_failed_build_leaves_no_answer_behind(worker):
    x = np.ones((1, 2, 3), np.float32)
    failed_build, failed_call = worker.calls("SelfAttention", [build("b", 3), call("b", x)])
    assert isinstance(failed_build, SubmissionError) and failed_build.op == "__init__"
    assert failed_build.exc_type == "ValueError" and "three" in failed_build.message
    assert isinstance(failed_call, SubmissionError) and failed_call.op == "forward"
    # The next exchange gets its own answers, not the ones of the failed pair.
    built, ran = worker.calls("SelfAttention", [build("c", 2), call("c", np.ones((1, 1, 2), np.float32))])
    assert built["params"] == {"W_Q.weight": [2, 2]}
    assert ran["outputs"][0].shape == (1, 1, 2)


def test_a_halting_failure_is_raised_and_its_pair_drained(worker):
    with pytest.raises(SubmissionHalted) as halted:
        worker.calls("MultiHeadAttention", [
            ("build", {"cls": "MultiHeadAttention", "kwargs": {"d_model": 4, "num_heads": 2}, "handle": "m"}),
            ("call", {"handle": "m", "method": "forward", "args": []}),
        ])
    assert halted.value.error.kind == "not_implemented" and halted.value.error.op == "__init__"
    built, = worker.calls("SelfAttention", [build("d", 2)])
    assert built["params"] == {"W_Q.weight": [2, 2]}


def test_a_hang_is_blamed_on_the_request_that_hung(worker):
    with pytest.raises(SubmissionHalted) as halted:
        worker.calls("SelfAttention", [build("e", 5), call("e", np.ones((1, 1, 5), np.float32))])
    error = halted.value.error
    assert (error.kind, error.op, error.limit) == ("timeout", "__init__", 3)
    with pytest.raises(SubmissionHalted):  # the class is dead: it fails at once from now on
        worker.call("SelfAttention", "build", **build("f", 2)[1])


def test_a_failure_names_the_call_the_worker_failed_on(worker):
    """The outcome of a failed request carries, under example["call"], that request: the build's
    when the constructor raised, the second call's when the second of two raised."""
    from autograder.outcomes import outcome_from_exception
    from autograder.properties.failures import example
    from autograder.properties.harness import Remote

    def failed(attempt):
        example(B=1)
        with pytest.raises((SubmissionError, SubmissionHalted)) as raised:
            attempt()
        return outcome_from_exception("SelfAttention", "shapes", raised.value).example

    x = np.ones((1, 2, 4), np.float32)
    assert failed(lambda: Remote(worker, "SelfAttention", d_model=3).run(x)) == {
        "B": 1, "call": {"method": "__init__", "d_model": 3}}
    wrong = np.ones((1, 2, 5), np.float32)
    assert failed(lambda: Remote(worker, "SelfAttention", d_model=4).runs(((x,), {}), ((wrong,), {"seed": 3}))) == {
        "B": 1, "call": {"method": "forward", "x": [1, 2, 5], "manual_seed": 3}}
    halted = failed(lambda: Remote(worker, "MultiHeadAttention", d_model=4, num_heads=2).run(x, x, x))
    assert halted["call"] == {"method": "__init__", "d_model": 4, "num_heads": 2}
    hung = failed(lambda: Remote(worker, "SelfAttention", d_model=5).run(x))
    assert hung["call"] == {"method": "__init__", "d_model": 5}
    # The class is stopped now: a later request never reaches the worker, and no call is at fault.
    assert failed(lambda: Remote(worker, "SelfAttention", d_model=4).run(x)) == {"B": 1}


@pytest.mark.unit
@pytest.mark.parametrize("said", [["memory"], {"k": 1}, 7, None, "timeout", "crash", "no_such_kind", "exception"])
def test_an_error_kind_the_worker_may_not_claim_is_shown_as_an_exception(said, monkeypatch):
    """The worker names its own failure kind; a kind it may not claim (a timeout, a crash) or any
    other JSON value is read as an exception of its code, never trusted or crashing the grader."""
    worker = Worker("", Limits())
    monkeypatch.setattr(worker, "_timed", lambda cls, label, wait: {"error": {"kind": said, "message": "m"}})
    with pytest.raises(SubmissionError) as caught:
        worker._answer("SelfAttention", "call", {"method": "forward"})
    assert caught.value.kind == "exception" and caught.value.op == "forward"


def test_requests_and_replies_larger_than_both_pipes_do_not_deadlock(worker):
    """Twelve calls of 64 KiB inputs sent at once: the worker's replies fill their pipe before the
    grader has written every request, and a worker blocked writing reads no more requests. The
    grader reads replies while it writes (a seed of the corpus timed out on 10 calls of 14 KiB)."""
    x = np.ones((16, 256, 4), np.float32)  # 64 KiB in, 64 KiB out
    answers = worker.calls("SelfAttention", [build("big", 4), *[call("big", x) for _ in range(12)]])
    assert all(np.array_equal(a["outputs"][0], answers[1]["outputs"][0]) for a in answers[1:])


SETTINGS_SOURCE = textwrap.dedent('''
    import torch
    from torch import nn

    torch.set_default_dtype(torch.float64)  # a script's own setting at import: undone, not graded

    class SelfAttention(nn.Module):
        def __init__(self, d_model, d_k=None):
            super().__init__()
            torch.backends.cuda.matmul.allow_tf32 = True  # every float32 matmul of the program, on a GPU
            torch.backends.cuda.enable_flash_sdp(False)  # which attention kernels the program may use
            self.W_Q = nn.Linear(d_model, d_k or d_model, bias=False)
            torch.set_default_device("meta")  # every tensor made after it, anywhere, has no values

        def forward(self, x):
            # the older getters raise once the newer fp32_precision is set, unless it was put back
            flags = [torch.get_default_dtype() == torch.float32, torch.backends.cuda.matmul.allow_tf32,
                     torch.get_float32_matmul_precision() == "highest", torch.backends.cuda.flash_sdp_enabled()]
            previous = torch.get_float32_matmul_precision()  # saved, set and put back: nothing to report
            torch.set_float32_matmul_precision("highest")  # (torch reads mkldnn.matmul's "none" as "ieee" after it)
            torch.set_float32_matmul_precision(previous)
            torch.backends.cudnn.allow_tf32 = False  # on by default: cudnn's convolutions of the program in full fp32
            torch.backends.mkldnn.matmul.fp32_precision = "bf16"  # float32 matmuls in bfloat16, on this CPU too
            with torch.autocast("cpu", enabled=False):  # full precision asked for: nothing to report
                pass
            with torch.autocast("cuda", dtype=torch.bfloat16):  # lower, asked for: reported even without a GPU
                pass
            flags.append(torch.zeros(1).device.type == "cpu")  # the build's default device undone
            return self.W_Q(x), torch.tensor([float(flag) for flag in flags])
''')


def test_torchs_global_settings_and_autocast_changed_by_a_module_are_named_and_put_back():
    started = Worker(SETTINGS_SOURCE, Limits(request_s=10, memory_mib=1024))
    started.start()
    try:
        x = np.ones((1, 1, 2), np.float32)
        built, ran, again = started.calls("SelfAttention", [build("s", 2), call("s", x), call("s", x)])
    finally:
        started.stop()
    assert built["settings_changed"] == ["torch.set_float32_matmul_precision", "torch.backends.cuda.matmul.allow_tf32",
                                         "torch.backends.cuda.matmul.fp32_precision", "torch.backends.cuda.enable_flash_sdp",
                                         "torch.set_default_device"]
    assert ran["settings_changed"] == ["torch.set_float32_matmul_precision", "torch.backends.cudnn.allow_tf32",
                                       "torch.backends.cudnn.conv.fp32_precision", "torch.backends.cudnn.rnn.fp32_precision",
                                       "torch.backends.mkldnn.matmul.fp32_precision",
                                       "torch.autocast(device_type='cuda', dtype=torch.bfloat16)"]
    # each call ran with the import's default dtype, the build's TF32 and kernels undone, and the
    # call before's bfloat16 undone so that the older getters read again
    assert ran["outputs"][1].tolist() == again["outputs"][1].tolist() == [1.0, 0.0, 1.0, 1.0, 1.0]


DETERMINISM_SOURCE = textwrap.dedent('''
    import torch
    from torch import nn

    class SelfAttention(nn.Module):
        def __init__(self, d_model, d_k=None):
            super().__init__()
            self.W_Q = nn.Linear(d_model, d_k or d_model, bias=False)

        def forward(self, x):
            saved = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
            torch.use_deterministic_algorithms(True)
            torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
            if x.shape[1] == 2:
                torch.use_deterministic_algorithms(True)
            return self.W_Q(x), torch.empty(2, 3), torch.tensor([float(saved[0]), float(saved[1])])
''')


def test_memory_read_before_written_holds_nan_and_the_modules_deterministic_mode_is_its_own():
    """The worker runs torch's deterministic algorithms, so torch.empty holds NaN in every grading;
    a module sees them off, as a program starts, and one that turns them on is named (saving and
    restoring them is no change)."""
    started = Worker(DETERMINISM_SOURCE, Limits(request_s=10, memory_mib=1024))
    started.start()
    try:
        built, kept, turned_on, again = started.calls("SelfAttention", [
            build("s", 2), call("s", np.ones((1, 1, 2), np.float32)), call("s", np.ones((1, 2, 2), np.float32)),
            call("s", np.ones((1, 1, 2), np.float32))])
    finally:
        started.stop()
    assert "settings_changed" not in kept and np.isnan(kept["outputs"][1]).all()
    assert kept["outputs"][2].tolist() == [0.0, 0.0]
    assert turned_on["settings_changed"] == ["torch.use_deterministic_algorithms"]
    assert "settings_changed" not in again and again["outputs"][2].tolist() == [0.0, 0.0]  # put back


DRAWN_AT_IMPORT_SOURCE = textwrap.dedent('''
    import random
    import numpy as np
    import torch
    from torch import nn

    DRAWN = [torch.rand(1).item(), float(np.random.rand()), random.random()]

    class SelfAttention(nn.Module):
        def __init__(self, d_model, d_k=None):
            super().__init__()
            self.W_Q = nn.Linear(d_model, d_k or d_model, bias=False)

        def forward(self, x):
            return self.W_Q(x), torch.tensor(DRAWN)
''')


def test_what_a_submission_draws_at_import_is_the_same_in_every_worker():
    """Unseeded, a fresh process draws from the system's entropy: a file deciding anything on a
    draw at import scored 43 or 48 by chance (and the forks of one zygote shared its state)."""
    drawn = []
    for _ in range(2):
        started = Worker(DRAWN_AT_IMPORT_SOURCE, Limits(request_s=10, memory_mib=1024))
        started.start()
        try:
            _, ran = started.calls("SelfAttention", [build("s", 2), call("s", np.ones((1, 1, 2), np.float32))])
        finally:
            started.stop()
        drawn.append(ran["outputs"][1].tolist())
    assert drawn[0] == drawn[1]


EVERY_SETTING_SOURCE = textwrap.dedent('''
    import torch
    from torch import nn

    class SelfAttention(nn.Module):
        def __init__(self, d_model, d_k=None):
            super().__init__()
            backends = torch.backends
            for owner in (backends, backends.cuda.matmul, backends.cudnn):
                owner.fp32_precision = "tf32"
            for owner in (backends.cudnn.conv, backends.cudnn.rnn):  # TF32 by default (cudnn.allow_tf32)
                owner.fp32_precision = "ieee"
            for owner in (backends.mkldnn, backends.mkldnn.matmul, backends.mkldnn.conv, backends.mkldnn.rnn):
                owner.fp32_precision = "bf16"
            backends.cuda.matmul.allow_fp16_reduced_precision_reduction ^= True
            backends.cuda.matmul.allow_bf16_reduced_precision_reduction ^= True
            for kernel in ("flash", "mem_efficient", "math", "cudnn"):
                getattr(backends.cuda, f"enable_{kernel}_sdp")(False)
            backends.cudnn.enabled ^= True
            backends.cudnn.benchmark ^= True
            backends.cudnn.deterministic ^= True
            backends.mkldnn.enabled ^= True
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.set_default_dtype(torch.float64)
            torch.set_anomaly_enabled(True)
            torch.set_num_threads(torch.get_num_threads() + 1)
            for device in ("cpu", "cuda", "xpu", "hpu", "mps", "xla", "mtia", "ipu", "maia", "privateuseone"):
                for dtype in (torch.float16, torch.bfloat16):
                    try:
                        with torch.autocast(device, dtype=dtype):
                            pass
                    except Exception:
                        pass
            torch.set_default_device("meta")
            self.W_Q = nn.Linear(d_model, d_k or d_model, bias=False, device="cpu", dtype=torch.float32)

        def forward(self, x):
            return self.W_Q(x), torch.tensor([torch.get_default_dtype() == torch.float32], device="cpu")
''')


def test_a_module_that_changes_more_settings_than_a_reply_may_name_is_answered_within_the_protocol():
    """27 settings and 8 autocasts would exceed the protocol's 32 names: the reply names the first
    32 (the settings first) and is still a well-formed reply, every setting put back."""
    started = Worker(EVERY_SETTING_SOURCE, Limits(request_s=20, memory_mib=1024))
    started.start()
    try:
        x = np.ones((1, 1, 2), np.float32)
        built, ran = started.calls("SelfAttention", [build("s", 2), call("s", x)])
    finally:
        started.stop()
    from autograder.worker import wire
    assert not isinstance(built, Exception), (built.kind, built.message)
    assert len(built["settings_changed"]) == wire.MAX_DIMENSIONS
    assert "torch.set_default_device" in built["settings_changed"]
    assert sum(name.startswith("torch.autocast(") for name in built["settings_changed"]) >= 1
    assert "settings_changed" not in ran and ran["outputs"][1].tolist() == [1.0]


def test_a_precision_saved_set_and_put_back_is_no_change_and_a_lower_one_is():
    """set_float32_matmul_precision("highest") turns mkldnn.matmul's "none" into "ieee": the same
    precision, which a module saving and restoring the setting inside forward must not be blamed for."""
    import torch
    from autograder.worker.child import GlobalSettings

    settings = GlobalSettings(torch)
    before = settings.read()
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    torch.set_float32_matmul_precision(previous)
    assert settings.restored(before) == []
    torch.set_float32_matmul_precision("medium")
    assert "torch.backends.mkldnn.matmul.fp32_precision" in settings.restored(before)
    assert settings.read() == before
