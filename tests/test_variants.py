"""The hidden suite proves itself on known submissions (tests/submissions/manifest.yml).

The reference solution scores full marks, the untouched stub scores zero, each buggy variant
loses the properties that name its mistake and nothing in the other two classes, and every
correct variant in another style keeps full marks. Every buggy variant computes attention, and
every fake (a file that computes none) fails `attends` in each class.

The reference and the stub are graded as an instructor grades one file (`grade`: a cold worker,
results.json). The corpus files the selected tests name are graded once per session in one batch,
as a TA grades a cohort (warm slots, two at a time: minutes for the whole corpus, against one cold
start per file); the DETERMINISM files are graded once more alone and cold, and must get the same
outcomes.
"""
import json
import string
from pathlib import Path

import pytest
import yaml

import corpus

from autograder import feedback
from autograder.config import CLASSES
from autograder.grade import collect_outcomes

SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
MANIFEST = yaml.safe_load((SUBMISSIONS / "manifest.yml").read_text(encoding="utf-8"))
BUGGY = sorted(MANIFEST["buggy"])
CORRECT = sorted(MANIFEST["correct"])
FAKES = sorted(MANIFEST["fakes"])
DETERMINISM = ["sa_softmax_wrong_dim", "mha_split_without_transpose", "causal_mask_not_sliced", "sa_baddbmm_onto_empty"]


def buggy_path(name):
    return SUBMISSIONS / "buggy" / f"{name}.py"


def kind_of(name):
    return "buggy" if name in MANIFEST["buggy"] else "correct" if name in MANIFEST["correct"] else "fakes"


@pytest.fixture(scope="module")
def graded_corpus(request):
    """name -> corpus.Graded of every corpus file a selected test of this module names."""
    names = {item.callspec.params["name"] for item in request.session.items
             if item.module is request.module and "name" in getattr(getattr(item, "callspec", None), "params", {})}
    return corpus.grade_all({name: SUBMISSIONS / kind_of(name) / f"{name}.py" for name in names})


def failed_properties(run):
    return sorted(f"{cls}.{prop}" for (cls, prop), o in run.outcomes.items() if o.status != "passed")


def missing_parameters(outcome, language):
    """Fields the outcome's message template needs but the outcome does not provide (the line of
    an exception with no line of the submission on its way is left out of the sentence)."""
    template = feedback.catalog(language)["failures"][outcome.code]
    if outcome.params.get("line") is None:
        template = feedback._LINE_PHRASE.sub("", template)
    given = {"cls": outcome.cls, **{k: v for k, v in outcome.params.items() if v is not None}}
    fields = {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}
    return sorted(fields - set(given))


def test_manifest_lists_every_variant_file():
    assert not (set(BUGGY) & set(CORRECT) or set(BUGGY) & set(FAKES) or set(CORRECT) & set(FAKES))  # one name, one file
    on_disk = {p.stem for p in (SUBMISSIONS / "buggy").glob("*.py")}
    assert on_disk == set(BUGGY)
    assert {p.stem for p in (SUBMISSIONS / "correct").glob("*.py")} == set(CORRECT)
    assert {p.stem for p in (SUBMISSIONS / "fakes").glob("*.py")} == set(FAKES)
    for name, entry in MANIFEST["buggy"].items():
        assert entry["class"] in CLASSES, name
        assert entry["must_fail"] and entry["mistake"], name


def test_solution_scores_full_marks(graded_run, solution_path, grading):
    run = graded_run(solution_path)
    assert failed_properties(run) == []
    assert run.graded.score == (grading.max_score, grading.max_score)


def test_stub_scores_zero(graded_run, stub_path, grading):
    run = graded_run(stub_path)
    assert run.graded.score == (0, grading.max_score)
    for test in run.graded.scored:
        assert test.score == 0, test.name
        assert "NotImplementedError" in test.output and "falta implementar" in test.output, test.output
        assert "\n" not in test.output, test.output  # one line: the whole story is told once, at the top
    top = run.results["output"].splitlines()
    assert top[0] == feedback.label("stub", "es")
    assert [line.split(".")[0] for line in top[1:]] == list(CLASSES)


@pytest.mark.parametrize("name", BUGGY)
def test_buggy_variant_loses_the_property_of_its_mistake(graded_corpus, name):
    entry = MANIFEST["buggy"][name]
    run = graded_corpus[name]
    missed = [p for p in entry["must_fail"] if run.outcomes[(entry["class"], p)].status == "passed"]
    assert missed == [], f"{name} ({entry['mistake']}) passed {missed}"
    cost = [p for p in entry.get("must_pass", []) if run.outcomes[(entry["class"], p)].status != "passed"]
    assert cost == [], f"{name} ({entry['mistake']}) lost {cost}, another property's business"
    codes = {p: run.outcomes[(entry["class"], p)].code for p in entry.get("codes", {})}
    assert codes == entry.get("codes", {}), name
    collateral = [f"{cls}.{prop}" for (cls, prop), o in run.outcomes.items()
                  if cls != entry["class"] and o.status != "passed"]
    assert collateral == [], f"{name} lost points in other classes: {collateral}"


@pytest.mark.parametrize("name", [*BUGGY, *CORRECT])
def test_no_corpus_file_meets_an_error_of_the_graders(graded_corpus, name):
    """A grader error is the project's bug, whatever the file (a diagnosis once raised TypeError
    on a call that passed its inputs by name, and the failing property still counted as lost)."""
    errors = [(cls, prop, o.params.get("error")) for (cls, prop), o in graded_corpus[name].outcomes.items()
              if o.code == "grader_error"]
    assert errors == [], name


@pytest.mark.parametrize("name", [name for name in BUGGY
                                  if not {"loads_nothing", "nothing_finite", "ignores_input"} & set(MANIFEST["buggy"][name])])
def test_buggy_variant_attends(graded_corpus, name):
    """A single honest mistake (a wrong scale, a flipped mask, qkv split in the wrong order...) still
    computes attention."""
    run = graded_corpus[name]
    assert [cls for cls in CLASSES if run.outcomes[(cls, "attends")].status != "passed"] == [], name


@pytest.mark.parametrize("language", ["es", "en"])
@pytest.mark.parametrize("name", FAKES)
def test_fake_fails_attends_in_every_class(graded_corpus, name, language):
    run = graded_corpus[name]
    for cls in CLASSES:
        outcome = run.outcomes[(cls, "attends")]
        # an exception gates as a failure does (fakes/raises_where_attends_looks raises on purpose)
        assert outcome.status == "failed" or outcome.code == "submission.exception", (name, cls, outcome.code)
        assert missing_parameters(outcome, language) == [], (name, cls, outcome.code, outcome.params)
        json.dumps(outcome.as_dict(), allow_nan=False)


@pytest.mark.parametrize("language", ["es", "en"])
@pytest.mark.parametrize("name", BUGGY)
def test_buggy_variant_messages_are_complete(graded_corpus, name, language):
    entry = MANIFEST["buggy"][name]
    run = graded_corpus[name]
    for prop in entry["must_fail"]:
        outcome = run.outcomes[(entry["class"], prop)]
        assert outcome.code in feedback.catalog(language)["failures"], (prop, outcome.code)
        assert missing_parameters(outcome, language) == [], (prop, outcome.code, outcome.params)
        text = feedback.message(outcome, language)
        assert text.strip() and "?" not in text.splitlines()[0], (prop, text)


@pytest.mark.parametrize("name", BUGGY)
def test_buggy_outcomes_are_strict_json(graded_corpus, name):
    """Outcomes go to the store as JSON: no NaN or Infinity (invalid JSON) in parameters or examples."""
    for outcome in graded_corpus[name].outcomes.values():
        json.dumps(outcome.as_dict(), allow_nan=False)


@pytest.mark.parametrize("name", CORRECT)
def test_correct_variant_scores_full_marks(graded_corpus, grading, name):
    run = graded_corpus[name]
    assert failed_properties(run) == []
    assert run.total == (grading.max_score, grading.max_score)


@pytest.mark.parametrize("name", DETERMINISM)
def test_grading_twice_gives_identical_outcomes(graded_corpus, grading, name):
    """Once in the batch's warm slot, once alone in a cold worker: the same outcomes."""
    first = list(graded_corpus[name].outcomes.values())
    second = collect_outcomes(buggy_path(name), grading).outcomes

    def verdicts(outcomes):
        return sorted((o.cls, o.prop, o.status, o.code, json.dumps(o.params, sort_keys=True), json.dumps(o.example, sort_keys=True))
                      for o in outcomes)

    assert any(o.status != "passed" for o in first)
    assert verdicts(second) == verdicts(first)
