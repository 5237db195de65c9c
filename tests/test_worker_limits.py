"""Worker.check_limits: whether a test passes never depends on where the memory samples fell.

The watch samples a running worker every RESOURCE_CHECK_S; on a loaded machine a request can
fill memory and answer before a sample falls, and the next few with it. The suite therefore
samples again as each test ends. Here no periodic sample falls at all (as on the slowest
machine), and the memory a forward kept is still caught, named after that forward.
"""
import textwrap

import numpy as np
import pytest

from autograder.config import Limits
from autograder.worker import watch
from autograder.worker.client import Worker
from autograder.worker.submission_errors import SubmissionHalted

SOURCE = textwrap.dedent('''
    import torch
    from torch import nn

    _kept = []

    class SelfAttention(nn.Module):
        def __init__(self, d_model, d_k=None):
            super().__init__()
            self.W_Q = nn.Linear(d_model, d_k or d_model, bias=False)

        def forward(self, x):
            if x.shape[-1] == 3 and not _kept:
                _kept.append(torch.ones(150 << 20))  # 600 MiB, every page touched
            return self.W_Q(x)
''')


@pytest.fixture
def worker(monkeypatch):
    monkeypatch.setattr(watch, "RESOURCE_CHECK_S", 1e9)  # no sample ever falls while a request runs
    started = Worker(SOURCE, Limits(request_s=30, memory_mib=400))  # a worker holds ~230 MiB
    started.start()
    yield started
    started.stop()


def forward(worker, d_model):
    worker.call("SelfAttention", "build", cls="SelfAttention", kwargs={"d_model": d_model}, handle=f"m{d_model}",
                load={"seed": 0, "layers": ["W_Q"]})
    return worker.call("SelfAttention", "call", handle=f"m{d_model}", method="forward",
                       args=[np.ones((1, 2, d_model), np.float32)])


def test_an_honest_test_ends_within_its_limits(worker):
    forward(worker, 2)
    worker.check_limits("SelfAttention")
    assert 0 < worker.peak_rss < 400 << 20


def test_memory_kept_by_a_quick_request_fails_the_test_that_made_it(worker):
    forward(worker, 3)  # answered before any sample: the request itself passes
    with pytest.raises(SubmissionHalted) as raised:
        worker.check_limits("SelfAttention")
    error = raised.value.error
    assert (error.kind, error.cls, error.op, error.limit) == ("memory", "SelfAttention", "forward", 400)
    with pytest.raises(SubmissionHalted) as again:  # the class stays stopped
        forward(worker, 2)
    assert again.value.error.kind == "memory"


PAGE_TABLE_HOG = textwrap.dedent('''
    import ctypes, mmap, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    base, step = 0x200000000000, 2 << 20
    for i in range(20000):  # a 4 KiB region every 2 MiB, each read once: the zero page, a new page table
        at = libc.mmap(base + i * step, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x100000, -1, 0)
        ctypes.c_char.from_address(at).value
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()
''')


def test_page_tables_count_as_the_memory_of_the_process_that_made_them():
    """Read faults map only the shared zero page: RSS stays flat while each 2 MiB region costs the
    kernel a page table (4 KiB): 20,000 regions, ~80 MB that RSS alone does not show."""
    import subprocess
    import sys

    from autograder.worker import procfs

    hog = subprocess.Popen([sys.executable, "-c", PAGE_TABLE_HOG], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline() == "ready\n"
        plain, = (p.rss for p in procfs.processes() if p.pid == hog.pid)
        counted, = (p.rss for p in procfs.processes(page_tables=True) if p.pid == hog.pid)
        assert plain < 60 << 20 and counted - plain > 60 << 20, (plain >> 20, counted >> 20)
    finally:
        hog.kill()
        hog.wait()
