"""The known submissions keep their verdicts at another grading.yml seed.

tests/test_variants.py grades each file at the shipped seed; an instructor who changes the seed
(say, per semester) draws other examples. Graded here in one batch at seed 1: correct files keep
full marks, each single-mistake file still loses the properties of its mistake and nothing in the
other classes, files that compute no attention stay at or under 15% of the points, the stub at 0.
"""
import pytest

import corpus

SEED = 1


# What each test that is not one file's needs graded.
NEEDS = {"test_correct_files_keep_full_marks": ("solution", "correct"), "test_stub_scores_zero": ("stub",),
         "test_files_without_attention_earn_at_most_15_percent": ("fakes",)}


@pytest.fixture(scope="module")
def at_second_seed(request):
    """The files this module's selected tests need, graded in one batch at SEED."""
    selected = [item for item in request.session.items if item.module is request.module]
    paths = corpus.files(tuple({kind for item in selected for kind in NEEDS.get(item.originalname, ())}))
    buggy = corpus.files(("buggy",))
    paths.update({f"buggy/{name}": buggy[f"buggy/{name}"] for item in selected
                  if (name := getattr(getattr(item, "callspec", None), "params", {}).get("name"))})
    return corpus.grade_all(paths, SEED)


def test_correct_files_keep_full_marks(at_second_seed):
    below = {name: graded.lost() for name, graded in at_second_seed.items()
             if (name == "solution" or name.startswith("correct/")) and graded.lost()}
    assert below == {}


def test_stub_scores_zero(at_second_seed):
    assert at_second_seed["stub"].total[0] == 0


@pytest.mark.parametrize("name", sorted(corpus.MANIFEST["buggy"]))
def test_buggy_file_loses_its_mistake_and_nothing_elsewhere(at_second_seed, name):
    entry, graded = corpus.MANIFEST["buggy"][name], at_second_seed[f"buggy/{name}"]
    lost = graded.lost()
    assert [p for p in entry["must_fail"] if (entry["class"], p) not in lost] == [], entry["mistake"]
    assert [k for k in lost if k[0] != entry["class"]] == [], entry["mistake"]


def test_files_without_attention_earn_at_most_15_percent(at_second_seed):
    fakes = {name: graded.total for name, graded in at_second_seed.items() if name.startswith("fakes/")}
    assert fakes, "tests/submissions/fakes is empty"
    assert {name: total for name, total in fakes.items() if total[0] > 0.15 * total[1]} == {}
