"""grading.yml: validation of every section, and scoring that follows it with no code change."""
import dataclasses
from pathlib import Path

import pytest
import yaml

from autograder import config as grading_config
from autograder import feedback, results, scoring
from autograder.config import ConfigError
from autograder.outcomes import SuiteError
from autograder.suite_runner import run_properties

NO_SCALING = Path(__file__).resolve().parent / "submissions" / "buggy" / "sa_no_scaling.py"


@pytest.fixture
def write_config(tmp_path):
    """write_config(edit): a copy of the shipped grading.yml, changed by edit(data), loaded."""

    def write(edit, language=None):
        data = yaml.safe_load(grading_config.DEFAULT_PATH.read_text(encoding="utf-8"))
        edit(data)
        path = tmp_path / "grading.yml"
        path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
        return grading_config.load(path, language)

    return write


@pytest.mark.unit
def test_shipped_config_loads(grading):
    assert grading.language == "es"
    assert len(grading.properties) == len({(p.cls, p.name) for p in grading.properties}) > 30
    assert {p.cls for p in grading.properties} == set(grading_config.CLASSES)
    assert grading.max_score == sum(p.points for p in grading.properties) > 0


@pytest.mark.unit
def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        grading_config.load(tmp_path / "nope.yml")


@pytest.mark.unit
def test_unknown_class(write_config):
    with pytest.raises(ConfigError, match="unknown class 'SelfAtention'"):
        write_config(lambda d: d["classes"].update(SelfAtention={"shapes": {"points": 1}}))


@pytest.mark.unit
def test_bad_visibility(write_config):
    with pytest.raises(ConfigError, match="SelfAttention.scale: visibility"):
        write_config(lambda d: d["classes"]["SelfAttention"]["scale"].update(visibility="secret"))


@pytest.mark.unit
@pytest.mark.parametrize("points", [-1, "two", True])
def test_points_must_be_a_non_negative_number(write_config, points):
    with pytest.raises(ConfigError, match="SelfAttention.scale.points"):
        write_config(lambda d: d["classes"]["SelfAttention"]["scale"].update(points=points))


@pytest.mark.unit
def test_property_without_points(write_config):
    with pytest.raises(ConfigError, match="needs 'points'"):
        write_config(lambda d: d["classes"]["SelfAttention"].update(scale={"visibility": "hidden"}))


@pytest.mark.unit
def test_unknown_timeout_key(write_config):
    with pytest.raises(ConfigError, match="unknown key timeouts.requests"):
        write_config(lambda d: d["timeouts"].update(requests=5))


@pytest.mark.unit
def test_timeouts_and_limits_reach_the_worker_limits(write_config):
    def edit(data):
        data["timeouts"]["request"] = 3
        data["limits"]["memory_mib"] = 900

    limits = write_config(edit).limits
    assert (limits.request_s, limits.memory_mib) == (3.0, 900)
    assert isinstance(limits.memory_mib, int)


@pytest.mark.unit
def test_language_override(write_config):
    assert write_config(lambda d: None).language == "es"
    assert write_config(lambda d: None, language="en").language == "en"
    assert write_config(lambda d: d.update(language="en")).language == "en"
    with pytest.raises(ConfigError, match="language"):
        write_config(lambda d: d.update(language="fr"))


@pytest.mark.unit
def test_hypothesis_settings(write_config):
    seeded = write_config(lambda d: d["hypothesis"].update(seed=1234, max_examples=3))
    assert (seeded.seed, seeded.max_examples) == (1234, 3)
    with pytest.raises(ConfigError, match="max_examples"):
        write_config(lambda d: d["hypothesis"].update(max_examples=0))
    with pytest.raises(ConfigError, match="seed"):
        write_config(lambda d: d["hypothesis"].update(seed="abc"))
    with pytest.raises(ConfigError, match="hypothesis.derandomise"):
        write_config(lambda d: d["hypothesis"].update(derandomise=True))


@pytest.mark.unit
@pytest.mark.parametrize("language", ["es", "en"])
def test_a_misspelt_property_is_refused_when_grading_yml_is_read(write_config, language):
    """Before any submission is graded (a batch once failed every loadable one as a grader bug), with
    the names the suite does have."""
    def misspell(data):
        data["classes"]["SelfAttention"]["scael"] = data["classes"]["SelfAttention"].pop("scale")

    with pytest.raises(ConfigError, match=r"SelfAttention\.scael: the suite has no property 'scael' .*\bscale\b"):
        write_config(misspell, language)


@pytest.mark.unit
def test_property_unknown_to_the_suite_stops_grading(grading):
    """Checked when the suite is collected, before the worker is ever asked anything."""
    extra = grading_config.Property("SelfAttention", "telepathy", 1.0, "visible")
    config = dataclasses.replace(grading, properties=(*grading.properties, extra))
    with pytest.raises(SuiteError, match="telepathy"):
        run_properties(None, config)


@pytest.mark.unit
def test_property_missing_from_config_stops_grading(grading):
    config = dataclasses.replace(grading, properties=grading.properties[1:])
    dropped = grading.properties[0]
    with pytest.raises(SuiteError, match=f"no entry for .*'{dropped.name}'"):
        run_properties(None, config)


def test_points_and_visibility_change_results_without_code_change(graded_run, write_config, grading):
    """Rescoring the same outcomes under an edited grading.yml changes results.json accordingly."""
    outcomes = graded_run(NO_SCALING).graded.outcomes

    def edit(data):
        data["classes"]["SelfAttention"]["scale"] = {"points": 5, "visibility": "hidden"}
        data["classes"]["SelfAttention"]["shapes"] = {"points": 4, "visibility": "after_published"}

    edited = write_config(edit)

    def tests_of(config):
        built = results.build(scoring.score(outcomes, config), execution_time=1.0)
        return built, {tuple(t["tags"]): t for t in built["tests"]}

    before, before_tests = tests_of(grading)
    after, after_tests = tests_of(edited)
    scale, shapes = ("SelfAttention", "scale"), ("SelfAttention", "shapes")
    assert (before_tests[scale]["max_score"], before_tests[scale]["score"]) == (2, 0)
    assert (after_tests[scale]["max_score"], after_tests[scale]["score"]) == (5, 0)
    assert after_tests[scale]["visibility"] == "hidden" != before_tests[scale]["visibility"]
    assert (after_tests[shapes]["score"], after_tests[shapes]["visibility"]) == (4, "after_published")
    assert after["score"] == before["score"] + 3
    unchanged = set(before_tests) - {scale, shapes}
    assert all(before_tests[k] == after_tests[k] for k in unchanged)


def test_english_config_renders_english_feedback(graded_run, write_config):
    outcomes = graded_run(NO_SCALING).graded.outcomes
    english = {t.prop: t for t in scoring.score(outcomes, write_config(lambda d: d.update(language="en")))
               if t.cls == "SelfAttention"}
    spanish = {t.prop: t for t in scoring.score(outcomes, grading_config.load()) if t.cls == "SelfAttention"}
    assert english["scale"].output != spanish["scale"].output
    assert "Pista" in spanish["scale"].output and "Hint" in english["scale"].output


def _all_passed(config):
    from autograder.outcomes import Outcome
    return [Outcome(p.cls, p.name, "passed") for p in config.properties]


@pytest.mark.unit
def test_prerequisite_failing_takes_the_points_of_what_requires_it(write_config):
    """rows_sum_to_one requires scale, masked_zero requires rows_sum_to_one: scale failing blocks
    both (transitively), each says which test to fix, and results.json records why."""
    def edit(data):
        data["classes"]["SelfAttention"]["rows_sum_to_one"]["requires"] = ["scale"]
        data["classes"]["SelfAttention"]["masked_zero"]["requires"] = "rows_sum_to_one"

    config = write_config(edit)
    outcomes = _all_passed(config)
    full = scoring.score(outcomes, config).total
    assert full[0] == full[1] == config.max_score
    for outcome in outcomes:
        if (outcome.cls, outcome.prop) == ("SelfAttention", "scale"):
            outcome.status, outcome.code, outcome.params = "failed", "wrong_scale", {
                "measured": 1.0, "expected": 0.5, "d_k": 4}
    card = scoring.score(outcomes, config)
    scored = {(t.cls, t.prop): t for t in card}
    rows, masked = scored[("SelfAttention", "rows_sum_to_one")], scored[("SelfAttention", "masked_zero")]
    assert (rows.score, rows.status, rows.outcome_status, rows.blocked_by) == (0, "failed", "passed", ("scale",))
    assert (masked.score, masked.blocked_by) == (0, ("rows_sum_to_one",))
    assert "«SelfAttention: escala 1/√d_k»" in rows.output and "Por sí sola" in rows.output
    assert card.earned == config.max_score - 2 - 1 - 1
    untouched = {k: t for k, t in scored.items() if k[0] != "SelfAttention"}
    assert all(t.score == t.max_score and not t.blocked_by for t in untouched.values())
    built = {tuple(t["tags"]): t for t in results.build(card, execution_time=1)["tests"]}
    assert built[("SelfAttention", "rows_sum_to_one")]["extra_data"] == {"outcome": "passed", "blocked_by": ["scale"]}
    assert built[("SelfAttention", "shapes")]["extra_data"] == {"outcome": "passed"}


@pytest.mark.unit
def test_blocked_property_that_fails_itself_shows_its_own_message_too(write_config):
    config = write_config(lambda d: d["classes"]["SelfAttention"]["rows_sum_to_one"].update(requires=["scale"]))
    outcomes = _all_passed(config)
    for outcome in outcomes:
        if outcome.cls == "SelfAttention" and outcome.prop in ("scale", "rows_sum_to_one"):
            outcome.status, outcome.code = "failed", "rows_do_not_sum_to_one"
    own = next(o for o in outcomes if (o.cls, o.prop) == ("SelfAttention", "rows_sum_to_one"))
    rows = next(t for t in scoring.score(outcomes, config) if (t.cls, t.prop) == ("SelfAttention", "rows_sum_to_one"))
    assert rows.output.startswith("Sin puntos por ahora") and "Por sí sola" not in rows.output
    assert rows.output.endswith("\n" + feedback.message(own, "es"))


@pytest.mark.parametrize("requires, error", [
    (["telepathy"], "'telepathy' is not another property of this class"),
    (["rows_sum_to_one"], "'rows_sum_to_one' is not another property"),   # itself
    (["reference_match", 3], "must be a list of property names"),
    ({"scale": True}, "must be a list of property names"),
    (["fused_equivalence"], "not another property of this class"),      # another class's property
])
@pytest.mark.unit
def test_prerequisites_are_validated(write_config, requires, error):
    with pytest.raises(ConfigError, match=error):
        write_config(lambda d: d["classes"]["SelfAttention"]["rows_sum_to_one"].update(requires=requires))


@pytest.mark.unit
def test_prerequisite_cycle_is_refused(write_config):
    def edit(data):
        props = data["classes"]["MultiHeadAttention"]
        props["scale"]["requires"] = ["shapes"]
        props["shapes"]["requires"] = ["rows_sum_to_one"]
        props["rows_sum_to_one"]["requires"] = ["scale"]

    with pytest.raises(ConfigError, match="cycle: .*scale -> shapes -> rows_sum_to_one -> scale|cycle"):
        write_config(edit)


@pytest.mark.unit
def test_unknown_property_key_is_refused(write_config):
    with pytest.raises(ConfigError, match="unknown key.*pionts"):
        write_config(lambda d: d["classes"]["SelfAttention"]["scale"].update(pionts=3))


@pytest.mark.unit
def test_the_projects_yaml_reads_the_same_through_libyaml():
    """yaml_reader uses libyaml's parser for speed: every YAML file the grader reads must give
    the same data as PyYAML's own SafeLoader (and the parser must be libyaml's, or the speed-up
    is gone without a sign)."""
    from autograder import yaml_reader

    root = grading_config.DEFAULT_PATH.parent
    files = [grading_config.DEFAULT_PATH, *sorted((root / "autograder").rglob("*.yml"))]
    assert len(files) >= 5
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert yaml_reader.safe_load(text) == yaml.load(text, Loader=yaml.SafeLoader), path
    assert yaml.__with_libyaml__ and yaml_reader._LOADER is yaml.CSafeLoader
