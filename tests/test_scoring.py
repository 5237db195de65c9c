"""scoring.py on small configs and outcomes made by hand: points, partial totals, numbering and
names, visibility, `requires` (transitive, per class) and blocked_by; and the grading.yml errors
that tests/test_config.py does not reach."""
import dataclasses
import random

import pytest

from autograder import config as grading_config
from autograder import scoring
from autograder.config import ConfigError, GradingConfig, Limits, Property
from autograder.outcomes import Outcome

pytestmark = pytest.mark.unit


def config(*properties, language="es"):
    """A GradingConfig holding just these (cls, name, points, visibility, requires) properties."""
    return GradingConfig(language=language, max_examples=1, seed=0, limits=Limits(),
                         properties=tuple(Property(*p) for p in properties))


def outcomes(cfg, failed=(), errors=(), timeouts=()):
    """One outcome per property of cfg: passed, except those named (as "Class.prop")."""
    found = []
    for p in cfg.properties:
        key = f"{p.cls}.{p.name}"
        if key in failed:
            found.append(Outcome(p.cls, p.name, "failed", "rows_do_not_sum_to_one", {"index": [0, 1], "got": 0.5}))
        elif key in errors:
            found.append(Outcome(p.cls, p.name, "error", "submission.exception",
                                 {"op": "forward", "exc_type": "RuntimeError", "line": 3, "message": "boom"}))
        elif key in timeouts:
            found.append(Outcome(p.cls, p.name, "timeout", "submission.timeout", {"op": "forward", "limit": 10}))
        else:
            found.append(Outcome(p.cls, p.name, "passed"))
    return found


def by_key(scored):
    return {f"{t.cls}.{t.prop}": t for t in scored}


SMALL = config(
    ("SelfAttention", "shapes", 1, "visible"),
    ("SelfAttention", "scale", 2, "hidden"),
    ("SelfAttention", "reference_match", 0.5, "after_due_date"),
    ("MultiHeadAttention", "shapes", 3, "after_published"),
    ("MultiHeadAttention", "scale", 1.5, "visible"),
)


def test_every_passed_property_earns_its_points_and_nothing_else_does():
    scored = scoring.score(outcomes(SMALL), SMALL)
    assert [t.score for t in scored] == [1, 2, 0.5, 3, 1.5]
    assert scored.total == (8.0, 8.0) == (SMALL.max_score, SMALL.max_score)
    card = scoring.score(outcomes(SMALL, failed={"SelfAttention.scale"}, errors={"MultiHeadAttention.shapes"},
                                  timeouts={"SelfAttention.reference_match"}), SMALL)
    partial = by_key(card)
    assert {k: t.score for k, t in partial.items()} == {
        "SelfAttention.shapes": 1, "SelfAttention.scale": 0, "SelfAttention.reference_match": 0,
        "MultiHeadAttention.shapes": 0, "MultiHeadAttention.scale": 1.5}
    assert card.total == (2.5, 8.0)
    assert card.class_totals() == {"SelfAttention": 1, "MultiHeadAttention": 1.5}
    assert all(t.max_score == p.points for t, p in zip(partial.values(), SMALL.properties))


def test_status_is_gradescopes_and_the_outcome_keeps_ours():
    scored = by_key(scoring.score(outcomes(SMALL, failed={"SelfAttention.scale"}, errors={"MultiHeadAttention.shapes"},
                                           timeouts={"SelfAttention.reference_match"}), SMALL))
    assert {k: (t.status, t.outcome_status) for k, t in scored.items()} == {
        "SelfAttention.shapes": ("passed", "passed"), "SelfAttention.scale": ("failed", "failed"),
        "SelfAttention.reference_match": ("failed", "timeout"), "MultiHeadAttention.shapes": ("failed", "error"),
        "MultiHeadAttention.scale": ("passed", "passed")}


def test_tests_follow_the_configs_order_numbered_per_class_with_titles_in_its_language():
    shuffled = outcomes(SMALL)
    random.Random(0).shuffle(shuffled)
    scored = scoring.score(shuffled, SMALL)
    assert [(t.cls, t.prop, t.number) for t in scored] == [
        ("SelfAttention", "shapes", "1.1"), ("SelfAttention", "scale", "1.2"),
        ("SelfAttention", "reference_match", "1.3"),
        ("MultiHeadAttention", "shapes", "2.1"), ("MultiHeadAttention", "scale", "2.2")]
    assert scored[1].name == "SelfAttention: escala 1/√d_k"
    english = scoring.score(shuffled, dataclasses.replace(SMALL, language="en"))
    assert english[1].name == "SelfAttention: 1/√d_k scaling" and english[3].name == "MultiHeadAttention: output shapes"


def test_classes_are_numbered_in_the_configs_order_not_a_fixed_one():
    cfg = config(("CausalSelfAttention", "shapes", 1, "visible"), ("SelfAttention", "shapes", 1, "visible"))
    assert [t.number for t in scoring.score(outcomes(cfg), cfg)] == ["1.1", "2.1"]


def test_visibility_is_each_propertys_own():
    scored = scoring.score(outcomes(SMALL, failed={"SelfAttention.scale"}), SMALL)
    assert [t.visibility for t in scored] == ["visible", "hidden", "after_due_date", "after_published", "visible"]


def test_every_test_gets_its_rendered_feedback():
    scored = by_key(scoring.score(outcomes(SMALL, failed={"SelfAttention.scale"}), SMALL))
    assert scored["SelfAttention.shapes"].output == "Correcto."
    assert scored["SelfAttention.scale"].output.startswith(
        "La fila de los pesos en la posición (0, 1) suma 0.5 en vez de 1.")


GATED = config(
    ("SelfAttention", "attends", 0, "visible"),
    ("SelfAttention", "rows_sum_to_one", 1, "visible", ("attends",)),
    ("SelfAttention", "masked_zero", 2, "visible", ("rows_sum_to_one",)),
    ("SelfAttention", "gradients", 1, "visible", ("attends", "shapes")),
    ("SelfAttention", "shapes", 1, "visible"),
    ("MultiHeadAttention", "attends", 0, "visible"),
    ("MultiHeadAttention", "rows_sum_to_one", 1, "visible", ("attends",)),
)


def test_a_failed_prerequisite_takes_the_points_of_what_requires_it_transitively():
    card = scoring.score(outcomes(GATED, failed={"SelfAttention.attends"}), GATED)
    scored = by_key(card)
    assert {k: (t.score, t.status, t.outcome_status, t.blocked_by) for k, t in scored.items()} == {
        "SelfAttention.attends": (0, "failed", "failed", ()),
        "SelfAttention.rows_sum_to_one": (0, "failed", "passed", ("attends",)),
        # passes, its own prerequisite passes, but that one earns nothing: blocked by it, named
        "SelfAttention.masked_zero": (0, "failed", "passed", ("rows_sum_to_one",)),
        "SelfAttention.gradients": (0, "failed", "passed", ("attends",)),  # shapes passed: not named
        "SelfAttention.shapes": (1, "passed", "passed", ()),
        "MultiHeadAttention.attends": (0, "passed", "passed", ()),  # another class's attends is not this one
        "MultiHeadAttention.rows_sum_to_one": (1, "passed", "passed", ()),
    }
    assert card.total == (2, 6)


def test_a_property_earns_when_all_its_prerequisites_earn_and_names_only_those_that_do_not():
    scored = by_key(scoring.score(outcomes(GATED, failed={"SelfAttention.shapes"}), GATED))
    assert (scored["SelfAttention.gradients"].score, scored["SelfAttention.gradients"].blocked_by) == (0, ("shapes",))
    assert scored["SelfAttention.masked_zero"].score == 2 and scored["SelfAttention.masked_zero"].blocked_by == ()
    both = by_key(scoring.score(outcomes(GATED, failed={"SelfAttention.shapes", "SelfAttention.attends"}), GATED))
    assert both["SelfAttention.gradients"].blocked_by == ("attends", "shapes")


def test_a_blocked_property_that_fails_itself_earns_nothing_and_still_names_its_prerequisite():
    scored = by_key(scoring.score(outcomes(GATED, failed={"SelfAttention.attends", "SelfAttention.rows_sum_to_one"}),
                                  GATED))
    rows = scored["SelfAttention.rows_sum_to_one"]
    assert (rows.score, rows.outcome_status, rows.blocked_by) == (0, "failed", ("attends",))
    assert rows.output.startswith("Sin puntos por ahora") and "La fila de los pesos" in rows.output


def test_an_error_or_timeout_in_a_prerequisite_blocks_like_a_failure():
    for kind in ("errors", "timeouts"):
        scored = by_key(scoring.score(outcomes(GATED, **{kind: {"SelfAttention.attends"}}), GATED))
        assert scored["SelfAttention.rows_sum_to_one"].blocked_by == ("attends",)
        assert scored["SelfAttention.rows_sum_to_one"].score == 0


def test_rescoring_is_pure_the_same_outcomes_under_other_weights():
    """score() neither changes the outcomes nor keeps anything between calls: a report can rescore
    stored outcomes under an edited grading.yml."""
    found = outcomes(GATED, failed={"SelfAttention.attends"})
    before = [o.as_dict() for o in found]
    first = scoring.score(found, GATED).total
    ungated = dataclasses.replace(GATED, properties=tuple(dataclasses.replace(p, requires=())
                                                          for p in GATED.properties))
    assert scoring.score(found, ungated).total == (6, 6)
    assert scoring.score(found, GATED).total == first == (2, 6)
    assert [o.as_dict() for o in found] == before


def test_an_outcome_missing_for_a_configured_property_is_refused_not_scored_as_zero():
    found = outcomes(SMALL)[:-1]
    with pytest.raises(KeyError):
        scoring.score(found, SMALL)


# ---- grading.yml errors that tests/test_config.py does not reach -----------------------------------

@pytest.fixture
def load_text(tmp_path):
    def load(text):
        path = tmp_path / "grading.yml"
        path.write_text(text, encoding="utf-8")
        return grading_config.load(path)
    return load


@pytest.mark.parametrize("text, error", [
    ("classes: [SelfAttention]\n", "'classes' must be a mapping"),
    ("- a\n- b\n", "the top level must be a mapping"),
    ("classes: {SelfAttention: {shapes: {points: 1}}\n", "cannot read"),  # YAML that does not parse
    ("classes: {SelfAttention: {}}\n", "classes.SelfAttention must map property names to points"),
    ("classes: {SelfAttention: {shapes: 1}}\n", "SelfAttention.shapes needs 'points'"),
    ("hypothesis: {max_examples: true}\n", "max_examples must be a positive integer"),
    ("hypothesis: {max_examples: 2.5}\n", "max_examples must be a positive integer"),
    ("hypothesis: {seed: true}\n", "seed must be an integer"),
    ("limits: {memory_mib: -1}\n", "limits.memory_mib must be a non-negative number"),
    ("limits: {memory_gib: 1}\n", "unknown key limits.memory_gib"),
    ("timeouts: {request: fast}\n", "timeouts.request must be a non-negative number"),
    ("timeouts: 10\n", "'timeouts' must be a mapping"),
    ("classes: {SelfAttention: {shapes: {points: 1, requires: [scale]}, scale: {points: 1, requires: shapes}}}\n",
     "cycle: shapes -> scale -> shapes"),
])
def test_a_bad_grading_yml_is_refused_naming_the_key(load_text, text, error):
    with pytest.raises(ConfigError, match=error):
        load_text(text)


def test_a_small_grading_yml_loads_with_defaults_for_what_it_leaves_out(load_text):
    cfg = load_text("classes:\n  SelfAttention:\n    shapes: {points: 2}\n    scale: {points: 1, requires: shapes}\n")
    assert (cfg.language, cfg.max_examples, cfg.seed, cfg.limits) == ("es", 8, 0, Limits())
    assert cfg.properties == (Property("SelfAttention", "shapes", 2.0, "visible"),
                              Property("SelfAttention", "scale", 1.0, "visible", ("shapes",)))
    assert cfg.max_score == 3.0


@pytest.mark.parametrize("text", ["limits: {processes: 0.5}\n", "limits: {memory_mib: 512.9}\n"])
def test_a_fractional_integer_limit_is_refused_not_truncated(load_text, text):
    """config.py's promise: a typo is reported with its key "instead of silently changing scores"
    (or limits): `memory_mib: 512.9` would load as 512 and `processes: 0.5` as 0."""
    key = text.split("{")[1].split(":")[0]
    with pytest.raises(ConfigError, match=f"limits.{key} must be a whole number"):
        load_text(text)


def test_a_whole_float_integer_limit_is_accepted(load_text):
    assert load_text("limits: {memory_mib: 512.0}\n").limits.memory_mib == 512
