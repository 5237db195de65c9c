"""Entry point. On first use, without the dependencies, it creates .venv/ and installs into it.

Standard library only until the dependencies are known to be importable, so that
`python3 -m autograder ...` works on a fresh machine with nothing but Python >= 3.10.
The install follows requirements.lock (the versions Gradescope's image gets) when this Python is
at least the one the lock was made with, and pyproject's ranges otherwise, or if that fails.
"""
import gc
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from autograder.package import lock

ROOT = Path(__file__).resolve().parent.parent
GRADING = ("yaml", "numpy", "pytest", "hypothesis", "rich", "torch")  # what grading imports
REPORTS = ("jinja2", "matplotlib")  # only `report` (and the project's tests of it) need these
TORCH_CPU_INDEX = lock.TORCH_CPU_INDEX


def _missing(command=None):
    """The modules this command needs that cannot be imported here (every one without a command)."""
    needed = GRADING + (REPORTS if command in (None, "report", "test", "audit") else ())
    return [name for name in needed if importlib.util.find_spec(name) is None]


def _torch_index():
    """PyTorch's CPU wheel index when reachable: a plain PyPI torch is the multi-GB CUDA build."""
    import urllib.request  # here, not at the top: only an install needs it (~35 ms of every grade)

    try:
        urllib.request.urlopen(TORCH_CPU_INDEX + "/", timeout=3).close()
    except OSError:
        return []
    return ["--extra-index-url", TORCH_CPU_INDEX]


def _locked():
    """pip arguments that install requirements.lock, or [] with a note when this Python is older
    than the lock's (then pyproject's ranges are installed: grades may differ from the image's)."""
    try:
        locked = lock.read(ROOT / "requirements.lock")
    except (OSError, ValueError) as exc:
        print(f"note: {exc}; installing pyproject's ranges instead of the locked versions", file=sys.stderr)
        return []
    if sys.version_info[:2] < locked.python:
        print(f"note: requirements.lock was made with Python {'.'.join(map(str, locked.python))}; with this "
              f"Python {sys.version_info[0]}.{sys.version_info[1]} the versions are pyproject's ranges, not the "
              "ones Gradescope's image gets, and a grade may differ", file=sys.stderr)
        return []
    return ["-r", str(ROOT / "requirements.lock")]


def _bootstrap(command):
    """Create ROOT/.venv with the project installed, then re-run this command inside it."""
    venv_python = ROOT / ".venv" / "bin" / "python"
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve() or not (ROOT / "pyproject.toml").exists():
        sys.exit(f"missing dependencies {_missing(command)}: install them with pip install -e '{ROOT}[test]'")
    if not venv_python.exists():
        print(f"first use: installing the autograder and CPU torch into {ROOT / '.venv'} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(ROOT / ".venv")], check=True)
        install = [str(venv_python), "-m", "pip", "install", "-q", *_torch_index(), "-e", f"{ROOT}[test]"]
        locked = _locked()
        if not locked or subprocess.run([*install, *locked], check=False).returncode != 0:
            if locked:
                print("note: installing requirements.lock failed (above); installing pyproject's ranges instead, "
                      "and a grade may differ from the image's", file=sys.stderr)
            subprocess.run(install, check=True)
    os.execv(str(venv_python), [str(venv_python), "-m", "autograder", *sys.argv[1:]])


if __name__ == "__main__":
    COMMAND = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    if COMMAND == "grade":
        gc.disable()  # while the grader loads: suite_runner.loading_done() turns it on
    if _missing(COMMAND):
        _bootstrap(COMMAND)
    from autograder.cli import main

    sys.exit(main())
