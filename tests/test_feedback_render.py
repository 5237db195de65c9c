"""Feedback rendered from Outcome objects made by hand (no grading), compared with the exact text a
student must read, in Spanish and English; and results.build/write turning scored tests into a
results.json that Gradescope's schema accepts."""
import dataclasses
import json
import os
import stat
from pathlib import Path

import jsonschema
import pytest

from autograder import config as grading_config
from autograder import feedback, results, scoring
from autograder.config import GradingConfig, Limits, Property
from autograder.outcomes import Outcome

pytestmark = pytest.mark.unit

SCHEMA = json.loads((Path(__file__).resolve().parent / "gradescope_results.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
SHIPPED = grading_config.load()

WRONG_SCALE = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0, "expected": 0.5, "d_k": 4},
                      {"B": 2, "T": 3, "d_model": 4, "seed": 77})
EXCEPTION = {"kind": "exception", "exc_type": "RuntimeError", "line": 12, "cls": "SelfAttention", "op": "forward",
             "limit": None, "message": "mat1 and mat2 shapes cannot be multiplied (6x4 and 5x4)"}
CALL = {"method": "forward", "x": [2, 3, 4], "mask": [2, 3, 3], "mask_dtype": "float32", "train": True, "grad": True,
        "manual_seed": 3}


def gradients_error(output=""):
    return Outcome("SelfAttention", "gradients", "error", "submission.exception", dict(EXCEPTION),
                   {"B": 2, "T": 3, "seed": 1, "call": dict(CALL)}, output=output)


# ---- one outcome ---------------------------------------------------------------------------------

@pytest.mark.parametrize("language, expected", [
    ("es", "La escala medida de los puntajes es 1.0; se esperaba 1/√d_k = 0.5 (d_k = 4).\n"
           "Ejemplo mínimo que falla: B=2, T=3, d_model=4\n"
           "Pista: Divide los puntajes QKᵀ por √d_k, donde d_k es la dimensión de cada cabeza (no d_model, y con "
           "raíz)."),
    ("en", "The measured score scale is 1.0; expected 1/√d_k = 0.5 (d_k = 4).\n"
           "Minimal failing example: B=2, T=3, d_model=4\n"
           "Hint: Divide the QKᵀ scores by √d_k, where d_k is the per-head dimension (not d_model, and take the square "
           "root)."),
])
def test_a_failure_says_what_with_its_parameters_the_example_without_its_seed_and_the_hint(language, expected):
    assert feedback.message(WRONG_SCALE, language) == expected


@pytest.mark.parametrize("language, one, many", [
    ("es", "Hay 1 peso distinto de cero donde mask == 0 (el mayor vale 0.25).",
           "Hay 3 pesos distintos de cero donde mask == 0 (el mayor vale 0.25)."),
    ("en", "There is 1 nonzero weight where mask == 0 (the largest is 0.25).",
           "There are 3 nonzero weights where mask == 0 (the largest is 0.25)."),
])
def test_a_message_agrees_in_number_with_its_count(language, one, many):
    for count, expected in ((1, one), (3, many)):
        outcome = Outcome("SelfAttention", "masked_zero", "failed", "masked_weight_not_zero",
                          {"count": count, "max_weight": 0.25})
        assert feedback.headline(outcome, language) == expected


@pytest.mark.parametrize("language, verb", [("es", "no reciben gradiente"), ("en", "receive no gradient")])
def test_a_long_list_of_names_shows_the_first_and_how_many_more(language, verb):
    """A module with thousands of parameters without a gradient once had every name on the page."""
    names = [f"extra.{i}" for i in range(3000)]
    outcome = Outcome("SelfAttention", "gradients", "failed", "no_gradient", {"names": names})
    line = feedback.headline(outcome, language)
    assert ", ".join(names[:feedback.LISTED_NAMES]) + ", … (+2992) " + verb in line
    assert len(line) < 300 and "extra.8," not in line
    few = Outcome("SelfAttention", "gradients", "failed", "no_gradient", {"names": names[:feedback.LISTED_NAMES]})
    assert "…" not in feedback.headline(few, language)


@pytest.mark.parametrize("error", ["expected device cpu!", "use .reshape(...) instead.", "use .reshape(...) instead. "])
def test_an_error_that_ends_its_own_sentence_is_not_given_a_second_stop(error):
    """torch's messages end in "." or "!"; templates put a full stop after {error}: "instead.." once."""
    outcome = Outcome("MultiHeadAttention", "masked_zero", "failed", "mask_not_accepted",
                      {"exc_type": "RuntimeError", "line": 3, "shape": [2, 2], "dtype": "bool", "error": error})
    line = feedback.headline(outcome, "es")
    assert error.rstrip().rstrip(".!") + ". La máscara" in line and "!." not in line and "instead.." not in line


def test_a_parameter_the_outcome_lacks_shows_as_a_question_mark_not_an_error():
    outcome = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0})
    assert feedback.headline(outcome, "es") == ("La escala medida de los puntajes es 1.0; se esperaba 1/√d_k = ? "
                                                "(d_k = ?).")


@pytest.mark.parametrize("language, expected", [
    ("es", "SelfAttention.forward lanzó RuntimeError en la línea 12: mat1 and mat2 shapes cannot be multiplied "
           "(6x4 and 5x4)\n"
           "Ejemplo mínimo que falla: B=2, T=3; falló la llamada forward(x (2, 3, 4), mask (2, 3, 3) float32) "
           "en modo entrenamiento, seguida de backward\n"
           "Pista: Esta prueba hace backward sobre la salida: si el error aparece solo aquí, suele venir de una "
           "operación in-place (masked_fill_, +=, x[...] = ...) sobre un tensor que autograd necesita. Usa la versión "
           "que devuelve un tensor nuevo (masked_fill en vez de masked_fill_).\n"
           "Tu código imprimió:\ndebug: 6x4"),
    ("en", "SelfAttention.forward raised RuntimeError on line 12: mat1 and mat2 shapes cannot be multiplied "
           "(6x4 and 5x4)\n"
           "Minimal failing example: B=2, T=3; the failing call was forward(x (2, 3, 4), mask (2, 3, 3) float32) "
           "in training mode, followed by backward\n"
           "Hint: This test runs backward on the output: if the error shows up only here, it usually comes from an "
           "in-place operation (masked_fill_, +=, x[...] = ...) on a tensor autograd needs. Use the version that "
           "returns a new tensor (masked_fill instead of masked_fill_).\n"
           "Your code printed:\ndebug: 6x4"),
])
def test_an_error_says_the_call_that_failed_and_gets_its_propertys_hint_for_errors(language, expected):
    assert feedback.message(gradients_error(output="debug: 6x4"), language) == expected


@pytest.mark.parametrize("language, named", [("es", "en la línea 12 (en la función atender):"),
                                             ("en", "on line 12 (in function atender):")])
def test_an_error_in_a_helper_names_the_helper_after_its_line(language, named):
    """A line of a module-level helper forward calls is not one of forward's: the message says where."""
    in_helper = Outcome("SelfAttention", "scale", "error", "submission.exception", {**EXCEPTION, "function": "atender"},
                        {"B": 1, "T": 2})
    in_forward = Outcome("SelfAttention", "scale", "error", "submission.exception", {**EXCEPTION, "function": "forward"},
                         {"B": 1, "T": 2})
    assert named in feedback.message(in_helper, language).splitlines()[0]
    assert "atender" not in feedback.message(in_forward, language) and "forward" in feedback.message(in_forward, language)


@pytest.mark.parametrize("language, named", [("es", "en la línea 12 (en la función split_heads):"),
                                             ("en", "on line 12 (in function split_heads):")])
def test_a_helper_named_as_a_word_of_the_catalog_keeps_its_name(language, named):
    """A method called split_heads is the student's code, not the words table's "split_heads" (its
    output): once shown as "(en la función la salida de split_heads)"."""
    outcome = Outcome("MultiHeadAttention", "gradients", "error", "submission.exception",
                      {**EXCEPTION, "function": "split_heads"}, {"B": 1, "Tq": 2})
    assert named in feedback.message(outcome, language).splitlines()[0]


def test_an_error_where_the_usual_hint_would_mislead_gets_the_generic_hint_for_errors():
    outcome = Outcome("SelfAttention", "scale", "error", "submission.exception", dict(EXCEPTION), {"B": 1, "T": 2})
    hint = feedback.message(outcome, "es").splitlines()[-1]
    assert hint == ("Pista: El error salió de tu código con el ejemplo de arriba: reproduce esa llamada con tensores "
                    "de esas formas (torch.randn) y lee el mensaje, que suele nombrar las dimensiones que no encajan.")


@pytest.mark.parametrize("prop", ["rows_sum_to_one", "scale", "gradients", "parameter_count"])
def test_an_error_in_the_constructor_gets_the_constructors_hint_not_the_propertys(prop):
    """The module was never built: what the property checks of forward was not reached."""
    raised = Outcome("MultiHeadAttention", prop, "error", "submission.exception",
                     {**EXCEPTION, "cls": "MultiHeadAttention", "op": "__init__"}, {"call": {"method": "__init__", "d_model": 6, "num_heads": 4}})
    for language in ("es", "en"):
        hint = feedback.message(raised, language).splitlines()[-1]
        assert hint.endswith(feedback.catalog(language)["hints"]["constructor.error"]), (language, hint)
        assert hint.startswith(("Pista: ", "Hint: "))
    in_forward = Outcome("MultiHeadAttention", prop, "error", "submission.exception", dict(EXCEPTION), {"B": 1})
    assert feedback.catalog("es")["hints"]["constructor.error"] not in feedback.message(in_forward, "es")
    # with `shapes` failing too (the same __init__ error): still the constructor's hint, not "start at shapes"
    shapes = dataclasses.replace(raised, prop="shapes")
    context = feedback.Context([shapes, raised])
    if prop != "shapes":
        hint = feedback.message(raised, "es", context).splitlines()[-1]
        assert hint.endswith(feedback.catalog("es")["hints"]["constructor.error"]), hint


@pytest.mark.parametrize("message", [
    "SelfAttention.forward() got an unexpected keyword argument 'mask'",
    "SelfAttention.forward() takes 2 positional arguments but 3 were given",
    "MultiHeadAttention.__init__() missing 1 required positional argument: 'num_heads'",
])
def test_a_call_that_does_not_fit_the_signature_gets_the_signatures_hint(message):
    """Python's TypeError at the call itself: no hint about shapes or the property, which the call never reached."""
    raised = Outcome("SelfAttention", "masked_zero", "error", "submission.exception",
                     {**EXCEPTION, "exc_type": "TypeError", "message": message}, {"B": 1, "T": 2})
    shapes = dataclasses.replace(raised, prop="shapes")
    for outcome in (raised, shapes):
        for language in ("es", "en"):
            hint = feedback.message(outcome, language, feedback.Context([shapes, raised])).splitlines()[-1]
            assert hint.endswith(feedback.catalog(language)["hints"]["signature.error"]), (language, hint)
    inside = Outcome("SelfAttention", "masked_zero", "error", "submission.exception",
                     {**EXCEPTION, "exc_type": "TypeError", "message": "unsupported operand type(s) for +: 'int' and 'NoneType'"},
                     {"B": 1, "T": 2})
    assert feedback.catalog("es")["hints"]["signature.error"] not in feedback.message(inside, "es")


def test_a_timeout_gets_no_hint_about_the_property():
    outcome = Outcome("SelfAttention", "scale", "timeout", "submission.timeout",
                      {"cls": "SelfAttention", "op": "forward", "limit": 10}, {"B": 1, "T": 2})
    assert feedback.message(outcome, "en") == (
        "SelfAttention.forward did not finish within 10 s (an infinite loop?). The remaining tests for SelfAttention "
        "were skipped.\nMinimal failing example: B=1, T=2")


def test_a_passed_outcome_says_correct():
    assert [feedback.message(Outcome("SelfAttention", "scale", "passed"), lang) for lang in ("es", "en")] == [
        "Correcto.", "Correct."]


# ---- a whole submission --------------------------------------------------------------------------

def scored_tests(outcomes, cfg=SHIPPED, language="es"):
    return scoring.score(outcomes, dataclasses.replace(cfg, language=language))


def everywhere(code, params, status="error"):
    return [Outcome(p.cls, p.name, status, code, dict(params), {"B": 1, "seed": 0}) for p in SHIPPED.properties]


@pytest.mark.parametrize("language, headline, short, whole", [
    ("es", "Tu archivo tiene un error de sintaxis en la línea 7 (Python dice: «invalid syntax»).",
     "No se pudo importar tu código: mira el mensaje al principio.",
     "Por eso no se pudo ejecutar ninguna prueba: corrígelo y vuelve a entregar."),
    ("en", "Your file has a syntax error on line 7 (Python says: “invalid syntax”).",
     "Your code could not be imported: see the message at the top.",
     "So no test could run: fix it and submit again."),
])
def test_a_syntax_error_is_said_once_at_the_top_and_each_test_points_there(language, headline, short, whole):
    # Python's own suffix names the worker's copy, attention.py, whatever the student's file is called
    outcomes = everywhere("submission.syntax_error", {"line": 7, "message": "invalid syntax (attention.py, line 7)"})
    overview = feedback.overview(outcomes, language)
    assert overview == f"{headline}\n{whole}"
    tests = scored_tests(outcomes, language=language)
    assert {t.output for t in tests} == {short}
    data = results.build(tests, execution_time=1.0, output=overview)
    assert json.dumps(data, ensure_ascii=False).count(headline) == 1  # once, at the top
    assert data["score"] == 0 and all(t["score"] == 0 for t in data["tests"])
    assert not list(VALIDATOR.iter_errors(data))


def test_an_unreadable_upload_points_at_the_top_with_the_load_line():
    outcomes = everywhere("load.bad_zip", {"error": "File is not a zip file"})
    assert feedback.overview(outcomes, "es").startswith("El .zip no se pudo abrir (Python dice: «File is not a zip file»): vuelve a crear")
    assert {t.output for t in scored_tests(outcomes)} == {"No se pudo leer tu entrega: mira el mensaje al principio."}


def test_a_class_not_written_yet_is_said_once_and_its_tests_keep_one_line():
    def make(p):
        if p.cls != "MultiHeadAttention":
            return Outcome(p.cls, p.name, "passed")
        return Outcome(p.cls, p.name, "error", "submission.not_implemented",
                       {"cls": p.cls, "op": "__init__", "line": 40}, {"B": 1})
    outcomes = [make(p) for p in SHIPPED.properties]
    headline = "MultiHeadAttention.__init__ todavía lanza NotImplementedError (línea 40): falta implementarlo."
    assert feedback.overview(outcomes, "es") == (f"{headline} Por eso ninguna prueba de MultiHeadAttention puede "
                                                 "pasar todavía.")
    tests = [t for t in scored_tests(outcomes) if t.cls == "MultiHeadAttention"]
    assert {t.output for t in tests} == {f"{headline} Mira el mensaje al principio."}
    assert feedback.overview([o for o in outcomes if o.cls != "MultiHeadAttention"], "es") == ""


# ---- prerequisites -------------------------------------------------------------------------------

GATED = GradingConfig(language="es", max_examples=1, seed=0, limits=Limits(), properties=(
    Property("SelfAttention", "attends", 0, "visible"),
    Property("SelfAttention", "shapes", 1, "visible"),
    Property("SelfAttention", "rows_sum_to_one", 1, "visible", ("attends",)),
    Property("SelfAttention", "gradients", 1, "visible", ("attends", "shapes")),
))


def gated(failing, language="es"):
    outcomes = [Outcome(p.cls, p.name, "failed", "keys_ignored", {}) if p.name in failing and p.name == "attends"
                else Outcome(p.cls, p.name, "failed", "shape_mismatch", {"what": "weights", "expected": [1, 2, 2],
                                                                         "got": [1, 2]})
                if p.name in failing else Outcome(p.cls, p.name, "passed") for p in GATED.properties]
    return {t.prop: t.output for t in scored_tests(outcomes, GATED, language)}


@pytest.mark.parametrize("language, one, alone", [
    ("es", "Sin puntos por ahora: esta prueba solo cuenta cuando pasa «SelfAttention: calcula atención (pesos según "
           "la similitud entre query y key)», y esa prueba falló. Arregla primero esa.",
     "Por sí sola, esta propiedad se cumple: recuperarás estos puntos al arreglar la otra prueba."),
    ("en", "No points for now: this test only counts when «SelfAttention: computes attention (weights from query–key "
           "similarity)» passes, and that test failed. Fix that one first.",
     "On its own, this property holds: you will get these points back once the other test passes."),
])
def test_a_blocked_test_that_holds_alone_names_its_prerequisite_and_says_it_holds(language, one, alone):
    assert gated({"attends"}, language)["rows_sum_to_one"] == f"{one}\n{alone}"


@pytest.mark.parametrize("language, many", [
    ("es", "Sin puntos por ahora: esta prueba solo cuenta cuando pasan «SelfAttention: calcula atención (pesos según "
           "la similitud entre query y key)», «SelfAttention: formas de la salida», y alguna falló. Arregla primero "
           "esas."),
    ("en", "No points for now: this test only counts when «SelfAttention: computes attention (weights from query–key "
           "similarity)», «SelfAttention: output shapes» pass, and one of them failed. Fix those first."),
])
def test_a_test_blocked_by_several_names_them_all(language, many):
    assert gated({"attends", "shapes"}, language)["gradients"].splitlines()[0] == many


def test_a_blocked_test_that_fails_itself_shows_its_own_message_after_the_notice():
    outcomes = [Outcome("SelfAttention", "attends", "failed", "keys_ignored", {}),
                Outcome("SelfAttention", "shapes", "passed"),
                Outcome("SelfAttention", "rows_sum_to_one", "failed", "rows_do_not_sum_to_one", {"index": [0, 1],
                                                                                              "got": 0.5}),
                Outcome("SelfAttention", "gradients", "passed")]
    rows = {t.prop: t for t in scored_tests(outcomes, GATED)}["rows_sum_to_one"]
    lines = rows.output.splitlines()
    assert lines[0].startswith("Sin puntos por ahora: esta prueba solo cuenta cuando pasa «SelfAttention: calcula")
    assert lines[1] == "La fila de los pesos en la posición (0, 1) suma 0.5 en vez de 1."
    assert "Por sí sola" not in rows.output


def test_a_shape_cascade_points_at_shapes_and_not_also_at_its_prerequisites():
    """gradients fails on the wrong shape `shapes` already reports: one place to start."""
    text = gated({"attends", "shapes", "gradients"})["gradients"]
    assert text.startswith("Esta propiedad no se puede juzgar todavía, porque los pesos tienen la forma (1, 2) en "
                           "vez de (1, 2, 2). Arregla primero la prueba «SelfAttention: formas de la salida».")
    assert "Sin puntos por ahora" not in text


# ---- results.json --------------------------------------------------------------------------------

def test_results_of_a_mixed_submission_validate_and_carry_scores_outcomes_and_blocked_by():
    outcomes = {(o.cls, o.prop): o for o in (Outcome(p.cls, p.name, "passed") for p in SHIPPED.properties)}
    outcomes[("SelfAttention", "scale")] = WRONG_SCALE
    outcomes[("SelfAttention", "gradients")] = gradients_error()
    outcomes[("MultiHeadAttention", "attends")] = Outcome("MultiHeadAttention", "attends", "failed", "keys_ignored", {})
    tests = scored_tests(list(outcomes.values()))
    data = results.build(tests, execution_time=3.14159, output="", extra_data={"language": "es"})
    assert not list(VALIDATOR.iter_errors(data))
    blocked = [p.name for p in SHIPPED.properties if p.cls == "MultiHeadAttention" and "attends" in p.requires]
    lost = 2 + 1 + sum(p.points for p in SHIPPED.properties if p.cls == "MultiHeadAttention" and p.name in blocked)
    assert data["score"] == SHIPPED.max_score - lost and data["execution_time"] == 3.14
    by_tags = {tuple(t["tags"]): t for t in data["tests"]}
    assert by_tags[("SelfAttention", "scale")] == {
        "score": 0.0, "max_score": 2.0, "status": "failed", "name": "SelfAttention: escala 1/√d_k", "number": "1.6",
        "visibility": "visible", "output": feedback.message(WRONG_SCALE, "es"), "tags": ["SelfAttention", "scale"],
        "extra_data": {"outcome": "failed"}}
    assert by_tags[("SelfAttention", "gradients")]["extra_data"] == {"outcome": "error"}
    assert by_tags[("MultiHeadAttention", "split_heads")]["extra_data"] == {"outcome": "passed",
                                                                          "blocked_by": ["attends"]}
    assert by_tags[("SelfAttention", "device")]["visibility"] == "after_due_date"
    assert data["extra_data"] == {"language": "es"}


def test_long_outputs_are_clipped_and_still_validate():
    long = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0, "expected": 0.5, "d_k": 4},
                   output="x" * 50_000)
    outcomes = [long if (p.cls, p.name) == ("SelfAttention", "scale") else Outcome(p.cls, p.name, "passed")
                for p in SHIPPED.properties]
    data = results.build(scored_tests(outcomes), execution_time=1, output="y" * 50_000)
    clipped = next(t for t in data["tests"] if t["tags"] == ["SelfAttention", "scale"])["output"]
    assert len(clipped) <= results.MAX_OUTPUT_CHARS and clipped.endswith("\n[... recortado]")
    assert len(data["output"]) <= 20_000 and data["output"].endswith("\n[... recortado]")
    assert not list(VALIDATOR.iter_errors(data))


def test_text_that_reorders_or_hides_what_is_shown_is_removed():
    """A student's exception message with a right-to-left override shows "48 / 48" where the text
    says otherwise; zero-width characters hide text. Both go; joiners that scripts need stay."""
    from autograder.text import clean

    assert clean("Total: \u202e84 / 84\u202c\u200b ok\u2028next") == "Total: 84 / 84 ok\nnext"
    assert clean("\u2066a\u2069\u200eb\ufeff") == "ab"
    assert clean("👩\u200d💻 ک\u200cه") == "👩\u200d💻 ک\u200cه"


def test_every_format_character_but_the_joiners_is_removed():
    """Interlinear annotations (U+FFF9..FFFB), U+206A..206F, musical format marks: any Cf character
    hides text or shows nothing; ZWJ and ZWNJ alone stay (scripts and emoji need them)."""
    import unicodedata

    from autograder.text import clean

    kept = {"\u200c", "\u200d"}
    hidden = [chr(c) for c in range(0x80, 0x110000) if unicodedata.category(chr(c)) == "Cf" and chr(c) not in kept]
    assert clean("a" + "".join(hidden) + "b") == "ab"
    assert clean("ana\u206f.py \ufff9=1+1\ufffa\ufffb \u034f\u17b4\u2800x") == "ana.py =1+1 x"


def test_write_makes_a_private_valid_utf8_file_even_from_lone_surrogates(tmp_path):
    outcome = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0, "expected": 0.5, "d_k": 4},
                      output="print \ud800 and \x1b[31mred\r\n")
    outcomes = [outcome if (p.cls, p.name) == ("SelfAttention", "scale") else Outcome(p.cls, p.name, "passed")
                for p in SHIPPED.properties]
    path = tmp_path / "new" / "results.json"
    results.write(path, results.build(scored_tests(outcomes), execution_time=1, output="top \udfff"))
    raw = path.read_bytes()
    written = json.loads(raw.decode("utf-8"))  # strict UTF-8: a lone surrogate would not decode
    assert not list(VALIDATOR.iter_errors(written))
    output = next(t for t in written["tests"] if t["tags"] == ["SelfAttention", "scale"])["output"]
    assert output.endswith("print \ufffd and [31mred\n") and written["output"] == "top \ufffd"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]  # no temporary file left behind


@pytest.mark.parametrize("code, params, gone", [
    ("submission.exception", {"op": "forward", "exc_type": "RuntimeError", "message": "size mismatch"}, "línea"),
    ("submission.exception.in_cell", {"op": "forward", "exc_type": "RuntimeError", "message": "x", "cell": 3}, "línea"),
])
def test_an_exception_raised_inside_torch_names_no_line_rather_than_a_question_mark(code, params, gone):
    """No line of the submission on the exception's way (torch raised it in its own code): the
    sentence leaves the line out ("en la línea ?" was shown)."""
    outcome = Outcome("SelfAttention", "shapes", "error", code.removesuffix(".in_cell"), {**params, "line": None}, {})
    for language in ("es", "en"):
        text = feedback.message(outcome, language).splitlines()[0]
        assert "?" not in text and gone not in text and " line" not in text, text
        assert "RuntimeError" in text, text


@pytest.mark.parametrize("language, alone, sent_back", [
    ("es", "sí las aceptas: falla con esta forma de máscara en particular", "Arregla primero la prueba"),
    ("en", "you do take the masks of", "first."),
])
def test_a_mask_named_upstream_does_not_send_back_to_masked_zero_when_that_passed(language, alone, sent_back):
    """batch_independence said "fix «peso cero donde la máscara es 0» first" of a module that passed it
    (a mask.squeeze() that breaks only at T = 1)."""
    params = {"exc_type": "RuntimeError", "line": 35, "error": "bad size", "shape": [2, 1, 1], "dtype": "bool"}
    failing = Outcome("SelfAttention", "batch_independence", "failed", "mask_raised_upstream", params, {"B": 2})

    def rendered(masked_zero):
        outcomes = [failing if (p.cls, p.name) == ("SelfAttention", "batch_independence") else
                    Outcome(p.cls, p.name, masked_zero if p.name == "masked_zero" and p.cls == "SelfAttention"
                            else "passed") for p in SHIPPED.properties]
        return feedback.message(failing, language, feedback.Context(outcomes))

    assert alone in rendered("passed") and sent_back not in rendered("passed").split("\n")[0]
    assert sent_back in rendered("failed") and alone not in rendered("failed")


@pytest.mark.parametrize("language", ["es", "en"])
def test_a_test_the_student_sees_never_names_one_they_do_not(language):
    """With causality hidden (an instructor's grading.yml), large_inputs' pointer and a blocked
    prerequisite used to name it: «CausalSelfAttention: the future does not leak»."""
    cls = "CausalSelfAttention"
    properties = tuple(
        dataclasses.replace(p, visibility="hidden" if p.name in ("causality", "attends") else
                            "visible" if p.name == "large_inputs" else p.visibility)
        for p in SHIPPED.properties)
    cfg = dataclasses.replace(SHIPPED, properties=properties)
    outcomes = [Outcome(p.cls, p.name, "passed") for p in SHIPPED.properties]
    leak = {"position": 7}
    outcomes = [Outcome(o.cls, o.prop, "failed", "future_leak_upstream", leak, {"B": 1, "seed": 0})
                if (o.cls, o.prop) in ((cls, "large_inputs"), (cls, "causality"), (cls, "attends")) else o
                for o in outcomes]
    tests = {(t.cls, t.prop): t for t in scored_tests(outcomes, cfg, language)}
    hidden = [feedback.title(cls, prop, language) for prop in ("causality", "attends")]
    shown = tests[(cls, "large_inputs")].output
    assert not any(name in shown for name in hidden), shown
    assert feedback.label("unseen_test", language, cls=cls) in shown
    said = feedback.message(next(o for o in outcomes if (o.cls, o.prop) == (cls, "large_inputs")), language)
    assert hidden[0] in said  # what the message names before the visible output is made
