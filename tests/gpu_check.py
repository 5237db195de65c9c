"""Grade the reference, a correct variant and two device mutants with CUDA visible and with CUDA
hidden, and check that each file scores the same both ways: full marks for the correct ones, the
device point lost (and nothing else) for the mutants. Run it wherever a CUDA GPU is present:

    tests/gpu_check.sh              # both halves; without a GPU: says so, checks nothing, exits 0
    tests/gpu_check.sh --cpu-only   # the CUDA-hidden half alone (works on any machine)

Exit status: 0 when every file scored as expected in every half run (or when there is no GPU and
--cpu-only was not given: nothing was checked, and the output says so); 1 on any disagreement; 2
when a grade could not run or CUDA could not be hidden.

Hiding CUDA: the grader starts its worker with an environment of its own (worker/sandbox.py,
Sandbox.env), so CUDA_VISIBLE_DEVICES set for `grade` never reaches the code under test. The
CUDA-hidden half therefore also runs the worker through a small wrapper (AUTOGRADER_WORKER_PYTHON)
that empties CUDA_VISIBLE_DEVICES before it starts Python, and first checks that torch behind that
wrapper sees no GPU.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# file -> the (class, property) tests it must fail, on every device
FILES = {
    "solutions/attention.py": set(),
    "tests/submissions/correct/einsum.py": set(),
    "tests/submissions/buggy/sa_device_bug.py": {("SelfAttention", "device")},
    "tests/submissions/buggy/causal_device_bug.py": {("CausalSelfAttention", "device")},
}


class CheckError(Exception):
    """The check itself could not run (a grade failed to run, CUDA could not be hidden)."""


def hidden_cuda_python(folder):
    """A Python that sees no GPU: a wrapper reachable by the worker's uid (0755, outside the project)."""
    bin_dir = Path(folder) / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python"
    wrapper.write_text(f"#!/bin/sh\nCUDA_VISIBLE_DEVICES= exec {shlex.quote(sys.executable)} \"$@\"\n")
    for path in (folder, bin_dir, wrapper):
        os.chmod(path, 0o755)
    return str(wrapper)


def sees_cuda(python, env):
    probe = subprocess.run([python, "-c", "import torch; print(torch.cuda.is_available())"], env=env,
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        raise CheckError(f"{python} could not import torch: {probe.stderr.strip()[-500:]}")
    return probe.stdout.strip() == "True"


def grade(path, env, scratch):
    """(score, max score, {(class, property) failed}) from `python -m autograder grade`'s results.json."""
    out = Path(tempfile.mkdtemp(prefix="out-", dir=scratch))
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", str(ROOT / path), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    written = out / "results.json"
    if done.returncode != 0 or not written.exists():
        raise CheckError(f"grading {path} failed (exit {done.returncode}): {done.stderr.strip()[-1000:]}")
    data = json.loads(written.read_text(encoding="utf-8"))
    failed = {tuple(t["tags"]) for t in data["tests"] if t["status"] != "passed"}
    return data["score"], sum(t["max_score"] for t in data["tests"]), failed


def halves(cpu_only, scratch):
    """[(name, environment for `grade`)]: CUDA visible (unless cpu_only), then CUDA hidden."""
    found = []
    if not cpu_only:
        if not sees_cuda(sys.executable, dict(os.environ)):
            raise CheckError(f"{sys.executable} sees no GPU")
        found.append(("cuda", dict(os.environ)))
    wrapper = hidden_cuda_python(tempfile.mkdtemp(prefix="python-", dir=scratch))
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "AUTOGRADER_WORKER_PYTHON": wrapper}
    if sees_cuda(wrapper, {"PATH": "/usr/local/bin:/usr/bin:/bin"}):  # the worker's bare environment
        raise CheckError(f"CUDA could not be hidden: torch behind {wrapper} still sees a GPU")
    found.append(("cpu", hidden))
    return found


def check(cpu_only):
    scratch = tempfile.mkdtemp(prefix="gpu-check-")
    os.chmod(scratch, 0o755)  # the worker's uid must reach the wrapper inside it
    try:
        return compare(halves(cpu_only, scratch), scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def compare(modes, scratch):
    print(f"{'file':48} " + "  ".join(f"{name:>12}" for name, _ in modes) + "  verdict")
    bad = 0
    for path, must_fail in FILES.items():
        seen = {}
        for name, env in modes:
            started = time.monotonic()
            seen[name] = grade(path, env, scratch)
            print(f"  graded {path} ({name}) in {time.monotonic() - started:.0f} s", file=sys.stderr)
        problems = []
        for name, (score, top, failed) in seen.items():
            if failed != must_fail:
                lost = ", ".join(".".join(t) for t in sorted(failed)) or "nothing"
                wanted = ", ".join(".".join(t) for t in sorted(must_fail)) or "nothing"
                problems.append(f"{name}: lost {lost}, expected to lose {wanted}")
        scores = {score for score, _, _ in seen.values()}
        if len(scores) > 1 or len({frozenset(f) for _, _, f in seen.values()}) > 1:
            problems.append("the halves disagree")
        shown = "  ".join(f"{f'{score:g}/{top:g}':>12}" for score, top, _ in seen.values())
        agree = "agree" if len(seen) > 1 and not problems else ""
        print(f"{path:48} {shown}  {'; '.join(problems) or ' '.join(filter(None, (agree, 'as expected')))}")
        bad += bool(problems)
    print(f"{len(FILES) - bad} of {len(FILES)} files as expected in {' and '.join(n for n, _ in modes)}")
    return 1 if bad else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-only", action="store_true", help="run only the CUDA-hidden half (any machine)")
    args = parser.parse_args(argv)
    import torch

    if not args.cpu_only and not torch.cuda.is_available():
        print("no GPU here: nothing checked (torch.cuda.is_available() is False). "
              "Run it on a machine with a CUDA GPU, or with --cpu-only for the CUDA-hidden half.")
        return 0
    try:
        return check(args.cpu_only)
    except CheckError as exc:
        print(f"gpu check could not run: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
