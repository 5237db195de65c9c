"""requirements.lock: exact versions, the part that grading ships, and what decides outcomes."""
import sys

import pytest

from autograder import __main__ as entry
from autograder.package import build as builder
from autograder.package import lock

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def locked():
    return lock.read()


def test_the_lock_is_this_environment(locked):
    """The versions the tests pass with are the ones that ship; after an upgrade, rewrite the lock
    (python -m autograder.package.lock) or install it (pip install -r requirements.lock)."""
    assert locked.mismatches() == []
    assert lock.render(lock.from_environment(lock.project_dependencies()), lock.LOCK_HEADER) == \
        lock.LOCK_PATH.read_text(encoding="utf-8")
    assert locked.python == sys.version_info[:2]


def test_grading_in_an_environment_unlike_the_lock_says_so(monkeypatch, capsys):
    """A CUDA torch 2.14.1 installed over the lock's made every correct file fail for memory at
    import (530 MiB against 512), with no word about the environment."""
    versions = {"torch": "2.14.1"}
    real = lock.importlib.metadata.version
    monkeypatch.setattr(lock.importlib.metadata, "version", lambda name: versions.get(name) or real(name))
    lock.note_if_unlike_the_lock()
    assert "torch 2.14.1 (lock: 2.13.0+cpu)" in capsys.readouterr().err
    versions.clear()
    lock.note_if_unlike_the_lock()
    assert capsys.readouterr().err == ""


def test_the_lock_pins_every_dependency_exactly(locked):
    text = lock.LOCK_PATH.read_text(encoding="utf-8")
    pins = [line for line in text.splitlines() if "==" in line]
    assert len(pins) == len(locked.pins) and all(lock.PIN.match(line) for line in pins)
    assert not [line for line in text.splitlines() if any(op in line for op in (">=", "<=", "~=", "!=", " @ "))]
    for name in ("torch", "numpy", "hypothesis", "pytest", "pyyaml", "rich", "jinja2", "matplotlib"):
        assert lock.DIRECT in locked.via[name], name
    assert locked.pins["torch"].endswith("+cpu")  # the CPU build, from the index the lock names
    assert f"--extra-index-url {lock.TORCH_CPU_INDEX}" in locked.options


def test_grading_requirements_are_the_locked_closure_of_what_grading_imports(locked):
    shipped = lock.parse(builder.requirements())
    assert shipped.python == locked.python and shipped.options == locked.options
    assert shipped.pins == {name: locked.pins[name] for name in locked.closure(lock.GRADING_PACKAGES)}
    assert {"torch", "numpy", "hypothesis", "pytest", "pyyaml", "rich", "sortedcontainers", "pluggy"} <= set(shipped.pins)
    assert not {"matplotlib", "contourpy", "pillow", "kiwisolver", "fonttools"} & set(shipped.pins)
    # closed: every locked dependency of a shipped pin is shipped too
    assert not [(name, parents) for name, parents in locked.via.items()
                if parents & set(shipped.pins) and name not in shipped.pins]


def test_outcome_versions_are_the_installed_ones_of_the_four_that_decide(locked):
    versions = lock.outcome_versions()
    assert list(versions) == ["torch", "numpy", "hypothesis", "pytest"]
    assert versions == {name: locked.pins[name] for name in versions}


def test_parse_refuses_ranges_and_a_lock_without_its_python():
    with pytest.raises(ValueError, match="unexpected line"):
        lock.parse("# python: 3.11\nnumpy>=1.24\n")
    with pytest.raises(ValueError, match="which Python"):
        lock.parse("numpy==2.4.6\n")
    with pytest.raises(ValueError, match="not in the lock"):
        lock.parse("# python: 3.11\nnumpy==2.4.6\n    # via attention-autograder\n").closure(["torch"])


def test_grading_needs_no_report_packages_and_the_bootstrap_installs_the_lock(monkeypatch):
    assert entry._missing("grade") == []
    monkeypatch.setattr(entry.importlib.util, "find_spec", lambda name: None if name == "matplotlib" else object())
    assert entry._missing("grade") == [] and entry._missing("build") == []
    assert entry._missing("report") == entry._missing() == ["matplotlib"]
    assert entry._locked() == ["-r", str(lock.LOCK_PATH)]
    monkeypatch.setattr(entry.sys, "version_info", (3, 10, 12))
    assert entry._locked() == []  # older than the lock's Python: pyproject's ranges, with a note
