"""What a newcomer meets as root on a fresh machine: the interpreter and the clone in folders
other users cannot enter (a 0700 home), and the README's first command run as it is."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the worker gets a uid of its own only as root")


@pytest.fixture
def private_home():
    home = Path(tempfile.mkdtemp(prefix="fresh-home-"))  # 0700, as /root is on a fresh machine
    yield home
    shutil.rmtree(home)


def copy_checkout(into):
    """The working tree as a clean clone has it: tracked files and new ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def test_the_first_command_grades_with_a_venv_in_a_0700_folder(private_home):
    """The grader opens the search bit (only) on the way to the worker's interpreter, and says so."""
    assert private_home.stat().st_mode & 0o777 == 0o700
    clone = private_home / "attention-autograder"
    copy_checkout(clone)
    venv = private_home / "venv"  # its python sits in a folder uid 61000 could not enter
    # Made as a newcomer makes it (umask 022), whatever umask this test process inherited: a venv
    # whose files only root can read is one the grader must not open up, and no worker could run.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   preexec_fn=lambda: os.umask(0o022))
    done = subprocess.run([str(venv / "bin" / "python3"), "-m", "autograder", "grade", "solutions/attention.py",
                           "--out", "out/"], cwd=clone, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("AUTOGRADER_")})
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((clone / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == 48 and results["extra_data"]["isolation"][0].startswith("uid ")
    assert "added the search permission" in done.stderr and str(private_home) in done.stderr
    assert private_home.stat().st_mode & 0o777 == 0o701  # searchable, never listable or readable
    assert clone.stat().st_mode & 0o007 == 0  # the project itself stays closed
