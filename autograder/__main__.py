"""Entry point. On first use, without the dependencies, it creates .venv/ and installs into it.

Standard library only until the dependencies are known to be importable, so that
`python3 -m autograder ...` works on a fresh machine with nothing but Python >= 3.10.
"""
import importlib.util
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = ("yaml", "numpy", "pytest", "hypothesis", "rich", "jinja2", "matplotlib", "torch")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _missing():
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def _torch_index():
    """PyTorch's CPU wheel index when reachable: a plain PyPI torch is the multi-GB CUDA build."""
    try:
        urllib.request.urlopen(TORCH_CPU_INDEX + "/", timeout=3).close()
    except OSError:
        return []
    return ["--extra-index-url", TORCH_CPU_INDEX]


def _bootstrap():
    """Create ROOT/.venv with the project installed, then re-run this command inside it."""
    venv_python = ROOT / ".venv" / "bin" / "python"
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve() or not (ROOT / "pyproject.toml").exists():
        sys.exit(f"missing dependencies {_missing()}: install them with pip install -e '{ROOT}[test]'")
    if not venv_python.exists():
        print(f"first use: installing the autograder and CPU torch into {ROOT / '.venv'} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(ROOT / ".venv")], check=True)
        subprocess.run([str(venv_python), "-m", "pip", "install", "-q", *_torch_index(),
                        "-e", f"{ROOT}[test]"], check=True)
    os.execv(str(venv_python), [str(venv_python), "-m", "autograder", *sys.argv[1:]])


if __name__ == "__main__":
    if _missing():
        _bootstrap()
    from autograder.cli import main

    sys.exit(main())
