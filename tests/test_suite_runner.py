"""The suite runner's promise on examples: they follow from grading.yml's seed and the property
alone, not from which of the grader's modules happen to be loaded."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

DRAW = r"""
import json, sys
sys.path[:0] = {paths!r}
{imports}
from hypothesis import Phase, given, seed, settings, strategies as st
{setup}
values = []

@seed(20261201)
@settings(max_examples=400, database=None, phases=[Phase.generate])
@given(st.integers(0, 2**16), st.floats(0.001, 100.0))
def draw(seed_value, scale):
    values.append([seed_value, scale])

draw()
print(json.dumps(values))
"""

# A module of the grader's kind ("local" to hypothesis: outside site-packages and the stdlib),
# full of constants a draw could take: the seeds and scales the suite draws in.
LOCAL_MODULE = "LIMITS = [{}]\nSCALES = [{}]\n".format(
    ", ".join(str(n) for n in range(1000, 60000, 777)), ", ".join(f"{x / 7:.6f}" for x in range(1, 600, 13)))


def _draws(tmp_path, with_local_module, runner_setup):
    folder = tmp_path / "grader_code"
    folder.mkdir(exist_ok=True)
    (folder / "grader_constants.py").write_text(LOCAL_MODULE)
    script = DRAW.format(
        paths=[str(ROOT), str(folder)],
        imports="import grader_constants" if with_local_module else "",
        setup="from autograder.suite_runner import draw_without_local_constants\n"
              "draw_without_local_constants()" if runner_setup else "")
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert found.returncode == 0, found.stderr[-2000:]
    return json.loads(found.stdout)


def test_examples_do_not_depend_on_the_modules_loaded(tmp_path):
    """The same seeds and scales are drawn whether or not another module of the grader's, full of
    constants in their ranges, has been imported: `grade`, `batch` and Otter load different ones."""
    assert _draws(tmp_path, True, True) == _draws(tmp_path, False, True)


def test_without_the_runner_hypothesis_draws_a_loaded_modules_constants(tmp_path):
    """The control: hypothesis on its own does draw them, so the check above can fail."""
    from hypothesis.internal.conjecture import providers

    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this hypothesis draws no local constants: nothing for the runner to turn off")
    assert _draws(tmp_path, True, False) != _draws(tmp_path, False, False)


LOADING = r"""
import gc, sys
sys.path.insert(0, {root!r})
gc.disable()  # as a cold grade's entry point does
from autograder.suite_runner import loading_done
loading_done()
first = gc.get_freeze_count()
kept = [[] for _ in range(1000)]  # what a first grading leaves alive: the next one must not freeze it
loading_done()
print(gc.isenabled(), first > 0, gc.get_freeze_count() == first)
"""


def test_the_collector_is_on_once_the_suite_is_loaded_and_frozen_once(tmp_path):
    """A cold grade loads with the cyclic collector off; once the suite is loaded it is on, with
    what was loaded frozen, and a later grading in the same process (a batch slot) freezes nothing
    more: objects alive then are a grading's, not the grader's."""
    found = subprocess.run([sys.executable, "-c", LOADING.format(root=str(ROOT))], capture_output=True, text=True,
                           timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.split() == ["True", "True", "True"]
