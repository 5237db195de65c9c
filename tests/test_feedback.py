"""The feedback a student reads, rendered from outcomes made by hand: no worker, no grading.

Every lost point must come with a message a student can act on: a problem of the whole file or of
a whole class said once at the top, hints for errors as well as failures, a wrong output shape in
another test sent back to `shapes`, the failing call in words, and sentences that agree.
"""
import json
import re
import string

import pytest

from autograder import config as grading_config
from autograder import feedback, grade, results, scoring
from autograder.cohort import report
from autograder.cohort.store import Store, Submitter
from autograder.outcomes import Outcome
from autograder.package import otter_case
from autograder.scoring import ScoredTest

pytestmark = pytest.mark.unit

CONFIG = {language: grading_config.load(language=language) for language in ("es", "en")}
LANGUAGES = ("es", "en")
CAUSAL_MASK_ERROR = {"kind": "exception", "exc_type": "RuntimeError", "line": 41, "cls": "CausalSelfAttention",
                     "op": "forward", "limit": None,
                     "message": "The size of tensor a (3) must match the size of tensor b (5) at non-singleton "
                                "dimension 3"}
CAUSAL_EXAMPLE = {"B": 2, "T": 3, "block_size": 5, "n_head": 2, "n_embd": 4, "seed": 4242, "dropout": 0.0,
                  "call": {"method": "forward", "x": [2, 3, 4], "fused": True, "train": True, "manual_seed": 7}}


def everywhere(code, params, example=None, status="error"):
    """The same outcome for every property of grading.yml, as a file that cannot be loaded gives."""
    return [Outcome(p.cls, p.name, status, code, {**params}, dict(example or {})) for p in CONFIG["es"].properties]


def unwritten(cls, line=45):
    return {"kind": "not_implemented", "message": f"Falta implementar {cls}.__init__", "line": line,
            "exc_type": "NotImplementedError", "cls": cls, "op": "__init__", "limit": None}


def all_but(cls, make):
    """Every property passed except those of `cls`, each of which gets make(property)."""
    return [make(p) if p.cls == cls else Outcome(p.cls, p.name, "passed") for p in CONFIG["es"].properties]


def stub_outcomes():
    return [Outcome(p.cls, p.name, "error", "submission.not_implemented", unwritten(p.cls), {"B": 1, "seed": 0})
            for p in CONFIG["es"].properties]


def fake_grading(monkeypatch, outcomes):
    """grade.grade with collect_outcomes answering `outcomes`: what grade() makes of them, no worker."""
    monkeypatch.setattr(grade, "collect_outcomes", lambda *args, **kwargs: grade.Collected(outcomes, 0.0, []))


def written(tmp_path, outcomes, monkeypatch, language="es", previous=None):
    fake_grading(monkeypatch, outcomes)
    grade.grade(tmp_path / "attention.py", CONFIG[language], out_dir=tmp_path / "out", previous=previous)
    return json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))


# ---- 1. a problem of the whole file, or of a whole class, is said once, at the top --------------

SYNTAX = {"kind": "syntax_error", "message": "invalid syntax", "line": 12, "exc_type": "SyntaxError",
          "cls": None, "op": "import", "limit": None}


@pytest.mark.parametrize("language, short", [
    ("es", "No se pudo importar tu código: mira el mensaje al principio."),
    ("en", "Your code could not be imported: see the message at the top."),
])
def test_a_syntax_error_is_said_once_at_the_top_of_results_json(tmp_path, monkeypatch, language, short):
    data = written(tmp_path, everywhere("submission.syntax_error", SYNTAX, {"B": 1, "seed": 0}), monkeypatch, language)
    full = feedback.catalog(language)["failures"]["submission.syntax_error"].format(line=12, message="invalid syntax")
    assert data["output"].splitlines()[0] == full
    assert data["output"].count(full) == 1
    assert {test["output"] for test in data["tests"]} == {short}
    assert data["score"] == 0


def test_the_top_message_comes_before_the_previous_score(tmp_path, monkeypatch):
    data = written(tmp_path, everywhere("submission.syntax_error", SYNTAX), monkeypatch,
                   previous="Puntaje de tu entrega anterior: 3 / 5")
    top, previous = data["output"].split("\n\n")
    assert top.startswith("Tu archivo tiene un error de sintaxis en la línea 12")
    assert previous == "Puntaje de tu entrega anterior: 3 / 5"


def test_nothing_at_the_top_when_no_group_of_tests_failed_together(tmp_path, monkeypatch):
    failure = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0, "expected": 0.5, "d_k": 4})
    outcomes = [failure if (p.cls, p.name) == ("SelfAttention", "scale") else Outcome(p.cls, p.name, "passed")
                for p in CONFIG["es"].properties]
    assert written(tmp_path, outcomes, monkeypatch)["output"] == ""


@pytest.mark.parametrize("language, line", [
    ("es", "Archivo calificado: tarea/attention.ipynb (el único de tu entrega que se revisa; "
           "si no es el que querías, entrega solo el que quieres que se corrija)."),
    ("en", "File graded: tarea/attention.ipynb (the only one of your submission that is checked; "
           "if it is not the one you meant, submit only the one you want graded)."),
])
def test_the_file_graded_from_a_folder_or_zip_is_named_first(tmp_path, monkeypatch, language, line):
    passed = [Outcome(p.cls, p.name, "passed") for p in CONFIG["es"].properties]
    monkeypatch.setattr(grade, "collect_outcomes",
                        lambda *args, **kwargs: grade.Collected(passed, 0.0, [], "tarea/attention.ipynb"))
    grade.grade(tmp_path, CONFIG[language], out_dir=tmp_path / "out")
    assert json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["output"] == line


class _NoWorker:
    """collect_outcomes' worker, for tests that look only at what is loaded."""
    peak_rss, layers = 0, []

    def __init__(self, *args, **kwargs):
        pass

    def start(self):
        pass

    def stop(self):
        pass


@pytest.mark.parametrize("where, named", [("folder of two", "attention.py"), ("folder of one", None), ("file", None)])
def test_collect_outcomes_names_the_chosen_file_where_another_could_have_been_meant(tmp_path, monkeypatch, where,
                                                                                   named):
    from autograder import suite_runner
    (tmp_path / "attention.py").write_text("x = 1\n", encoding="utf-8")
    if where == "folder of two":
        (tmp_path / "borrador.py").write_text("y = 2\n", encoding="utf-8")
    monkeypatch.setattr(suite_runner, "run_properties", lambda worker, config: [])
    path = tmp_path / "attention.py" if where == "file" else tmp_path
    assert grade.collect_outcomes(path, CONFIG["es"], worker_class=_NoWorker).graded_file == named


def test_an_import_error_of_a_notebook_names_its_cell_once(tmp_path, monkeypatch):
    params = {"kind": "import_error", "message": "No module named 'einops'", "exc_type": "ModuleNotFoundError",
              "line": 2, "cell": 3, "cls": None, "op": "import", "limit": None}
    data = written(tmp_path, everywhere("submission.import_error", params), monkeypatch)
    assert data["output"].startswith("Tu notebook importa el módulo einops (celda de código 3, línea 2)")
    assert not any("einops" in test["output"] for test in data["tests"])


def test_a_module_of_the_submission_or_not_installed_is_named_with_what_to_do(tmp_path, monkeypatch):
    """A .py importing `utils` (its zip's helper, which is not run, or a package the grader lacks)."""
    params = {"kind": "import_error", "message": "No module named 'utils'", "exc_type": "ModuleNotFoundError",
              "line": 2, "cls": None, "op": "import", "limit": None}
    data = written(tmp_path, everywhere("submission.import_error", params), monkeypatch)
    assert data["output"].startswith("Tu archivo importa el módulo utils (línea 2), que el corrector no tiene")
    assert "copia en ese archivo lo que usas de él" in data["output"]


def test_an_unreadable_submission_is_said_once(tmp_path):
    """A file that does not exist: grade() loads nothing, starts no worker, and says why at the top."""
    grade.grade(tmp_path / "nada.py", CONFIG["es"], out_dir=tmp_path / "out")
    data = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert data["output"].startswith(f"No existe el archivo {tmp_path / 'nada.py'}.")
    assert {test["output"] for test in data["tests"]} == {"No se pudo leer tu entrega: mira el mensaje al principio."}


@pytest.mark.parametrize("language, words", [("es", ("NotImplementedError", "falta implementar", "al principio")),
                                             ("en", ("NotImplementedError", "not been implemented", "at the top"))])
def test_the_stub_is_said_once_and_each_test_keeps_one_informative_line(tmp_path, monkeypatch, language, words):
    data = written(tmp_path, stub_outcomes(), monkeypatch, language)
    top = data["output"].splitlines()
    assert top[0] == feedback.label("stub", language)
    assert [line.split(".")[0] for line in top[1:]] == ["SelfAttention", "MultiHeadAttention", "CausalSelfAttention"]
    for test in data["tests"]:
        assert "\n" not in test["output"] and all(w in test["output"] for w in words), test["output"]
        assert test["output"].startswith(test["tags"][0] + ".__init__")
    example = feedback.label("example", language)
    assert not any(example in test["output"] for test in data["tests"])


def test_one_class_not_written_yet_is_said_at_the_top_without_calling_the_file_a_template():
    outcomes = all_but("MultiHeadAttention", lambda p: Outcome(
        p.cls, p.name, "error", "submission.not_implemented", unwritten(p.cls, 94), {"B": 1, "seed": 0}))
    tests = scoring.score(outcomes, CONFIG["es"])
    overview = feedback.overview(outcomes, "es")
    assert overview == ("MultiHeadAttention.__init__ todavía lanza NotImplementedError (línea 94): falta "
                        "implementarlo. Por eso ninguna prueba de MultiHeadAttention puede pasar todavía.")
    shown = {t.prop: t.output for t in tests if t.cls == "MultiHeadAttention"}
    assert set(shown.values()) == {"MultiHeadAttention.__init__ todavía lanza NotImplementedError (línea 94): "
                                   "falta implementarlo. Mira el mensaje al principio."}


def test_a_grader_error_does_not_hide_that_a_class_is_not_written():
    outcomes = stub_outcomes()
    outcomes[3] = Outcome(outcomes[3].cls, outcomes[3].prop, "error", "grader_error", {"error": "TypeError: boom"})
    tests = scoring.score(outcomes, CONFIG["es"])
    overview = feedback.overview(outcomes, "es")
    assert overview.splitlines()[0] == feedback.label("stub", "es")
    assert "Error interno del corrector" in tests[3].output


def test_a_method_not_written_in_some_tests_only_is_said_in_each_without_an_example():
    """forward not written, __init__ written: parameter_count passes, so the class is not all stub."""
    def make(p):
        if p.name in ("parameter_count", "mask_buffer"):
            return Outcome(p.cls, p.name, "passed")
        return Outcome(p.cls, p.name, "error", "submission.not_implemented",
                       {**unwritten(p.cls, 188), "op": "forward"}, CAUSAL_EXAMPLE)

    outcomes = all_but("CausalSelfAttention", make)
    tests = scoring.score(outcomes, CONFIG["es"])
    overview = feedback.overview(outcomes, "es")
    assert overview == ""
    causality = next(t for t in tests if (t.cls, t.prop) == ("CausalSelfAttention", "causality"))
    last = causality.output.splitlines()[-1]  # after any prerequisite's notice
    assert last == "CausalSelfAttention.forward todavía lanza NotImplementedError (línea 188): falta implementarlo."
    assert "Ejemplo" not in causality.output


def test_a_prerequisite_notice_does_not_bury_the_one_line_of_a_broken_file():
    outcome = Outcome("SelfAttention", "rows_sum_to_one", "error", "submission.syntax_error", SYNTAX)
    test = ScoredTest("SelfAttention", "rows_sum_to_one", "1.3", "x", 0.0, 1.0, "failed", "error", "visible", "old",
                      blocked_by=("scale",))
    (shown,) = feedback.render([test], [outcome], "es")
    assert shown.output == "No se pudo importar tu código: mira el mensaje al principio."


def test_results_json_of_a_stub_built_by_hand_is_valid_and_says_it_once():
    """The same, one level down: results.build of what render gives, as grade() writes it."""
    outcomes = stub_outcomes()
    scored = scoring.score(outcomes, CONFIG["es"])
    overview = feedback.overview(outcomes, "es")
    data = results.build(scored, execution_time=1.0, output=overview)
    text = json.dumps(data, ensure_ascii=False)
    assert text.count(feedback.label("stub", "es")) == 1
    assert len(data["tests"]) == len(CONFIG["es"].properties)


def test_the_student_page_shows_the_problem_at_the_top(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    version, suite = grade.suite_version(CONFIG["es"])
    run, _ = store.begin_run("c", version, suite, CONFIG["es"].source, "/cohort", False)
    store.record_grading(run, "ana", [Submitter("Ana", "ana@example.edu", "1")], "hash", stub_outcomes())
    store.finish_run(run.id)
    try:
        report.write_reports(store, "c", tmp_path / "out", CONFIG["es"])
    finally:
        store.close()
    page = (tmp_path / "out" / "students" / "ana.md").read_text(encoding="utf-8")
    top = page.index("## Sobre toda la entrega")
    assert top < page.index("| # |") and page.index(feedback.label("stub", "es")) > top
    assert page.count(feedback.label("stub", "es")) == 1
    html = (tmp_path / "out" / "students" / "ana.html").read_text(encoding="utf-8")
    assert html.index("Sobre toda la entrega") < html.index("<table>")


def test_otter_puts_the_top_message_before_each_test(tmp_path, monkeypatch):
    data = {"output": "Tu archivo tiene un error.", "tests": [
        {"tags": ["SelfAttention", "shapes"], "status": "failed", "output": "No se pudo importar tu código."}]}

    def fake_run(command, **kwargs):
        out = command[command.index("--out") + 1]
        with open(f"{out}/results.json", "w", encoding="utf-8") as handle:
            json.dump(data, handle)

    monkeypatch.setattr(otter_case.subprocess, "run", fake_run)
    monkeypatch.setattr(otter_case, "submission_file", lambda: tmp_path / "attention.py")
    otter_case.verdicts.cache_clear()
    try:
        with pytest.raises(AssertionError, match="Tu archivo tiene un error.\nNo se pudo importar tu código."):
            otter_case.check("SelfAttention", "shapes")
    finally:
        otter_case.verdicts.cache_clear()


# ---- 2. hints for errors as well as failures -------------------------------------------------------

@pytest.mark.parametrize("language, crop", [("es", "recórtala al largo real"), ("en", "slice it to the actual length")])
def test_an_uncropped_mask_error_gets_the_hint_that_says_to_crop_it(language, crop):
    error = Outcome("CausalSelfAttention", "causality", "error", "submission.exception", CAUSAL_MASK_ERROR,
                    CAUSAL_EXAMPLE)
    hint = message_lines(error, language)[-1]
    assert hint.startswith(feedback.label("hint", language)) and crop in hint
    shapes = Outcome("CausalSelfAttention", "shapes", "error", "submission.exception", CAUSAL_MASK_ERROR,
                     CAUSAL_EXAMPLE)
    assert "self.mask[:, :, :T, :T]" in message_lines(shapes, language)[-1]


@pytest.mark.parametrize("language, words", [("es", "in-place"), ("en", "in-place")])
def test_an_error_where_the_usual_hint_would_mislead_gets_the_hint_for_errors(language, words):
    gradients = Outcome("CausalSelfAttention", "gradients", "error", "submission.exception", CAUSAL_MASK_ERROR,
                        CAUSAL_EXAMPLE)
    assert words in message_lines(gradients, language)[-1]
    assert ".detach()" not in feedback.message(gradients, language)
    rows = Outcome("SelfAttention", "rows_sum_to_one", "error", "submission.exception",
                   {**CAUSAL_MASK_ERROR, "cls": "SelfAttention"}, {"B": 1, "T": 2})
    assert message_lines(rows, language)[-1] == (f"{feedback.label('hint', language)}: "
                                                 f"{feedback.catalog(language)['hints']['error']}")


@pytest.mark.parametrize("language, start", [("es", "forward también falla en la prueba «CausalSelfAttention: "
                                                   "formas de la salida»: empieza por esa."),
                                             ("en", "forward fails in the test «CausalSelfAttention: output shapes» "
                                                   "too: start with that one.")])
def test_an_error_where_shapes_fails_too_gets_the_hint_to_start_there(language, start):
    """An uncropped mask breaks every test with T < block_size: the dropout test's hint would mislead."""
    outcomes = [Outcome("CausalSelfAttention", prop, "error", "submission.exception", CAUSAL_MASK_ERROR, CAUSAL_EXAMPLE)
                for prop in ("shapes", "train_dropout")]
    hint = feedback.message(outcomes[1], language, feedback.Context(outcomes)).splitlines()[-1]
    assert hint == (f"{feedback.label('hint', language)}: {start} "
                    f"{feedback.catalog(language)['hints']['CausalSelfAttention.shapes']}")


@pytest.mark.parametrize("code", ["submission.timeout", "submission.crash", "grader_error"])
def test_errors_no_hint_explains_get_none(code):
    outcome = Outcome("SelfAttention", "scale", "timeout" if code == "submission.timeout" else "error", code,
                      {"cls": "SelfAttention", "op": "forward", "limit": 10, "message": "x", "error": "x"}, {"B": 1})
    assert not any(line.startswith("Pista") for line in feedback.message(outcome, "es").splitlines())


# ---- 3. a wrong output shape in another test points at `shapes` ---------------------------------

def shape_failure(prop, what="weights", code="shape_mismatch", cls="MultiHeadAttention"):
    got = "int64" if code == "dtype_mismatch" else [2, 2, 3, 3]
    params = {"what": what, "expected": [2, 2, 3, 4], "got": got, "count": 1}
    return Outcome(cls, prop, "failed", code, params, {"B": 2, "Tq": 3, "Tk": 4, "h": 2, "d_model": 4, "seed": 9})


@pytest.mark.parametrize("code", ["shape_mismatch", "missing_output", "not_a_tensor", "dtype_mismatch"])
@pytest.mark.parametrize("language, fix", [("es", "Arregla primero la prueba «MultiHeadAttention: formas de la "
                                                 "salida»"),
                                           ("en", "Fix the test «MultiHeadAttention: output shapes» first")])
def test_a_shape_cascade_says_the_property_cannot_be_judged_and_points_at_shapes(code, language, fix):
    outcomes = [shape_failure("shapes", code=code), shape_failure("masked_zero", code=code)]
    context = feedback.Context(outcomes)
    lines = feedback.message(outcomes[1], language, context).splitlines()
    assert fix in lines[0] and ("no se puede juzgar" in lines[0] or "cannot be judged" in lines[0])
    assert "((" not in lines[0] and "))" not in lines[0]
    assert not any(line.startswith(feedback.label("hint", language)) for line in lines)
    own = feedback.message(outcomes[0], language, context)  # the shapes test itself: its own message and hint
    assert fix not in own and feedback.catalog(language)["hints"]["MultiHeadAttention.shapes"] in own


def test_the_cascade_names_what_was_expected_and_what_came_back():
    outcomes = [shape_failure("shapes"), shape_failure("reference_match")]
    first = feedback.message(outcomes[1], "es", feedback.Context(outcomes)).splitlines()[0]
    assert first == ("Esta propiedad no se puede juzgar todavía, porque los pesos tienen la forma (2, 2, 3, 3) en vez "
                     "de (2, 2, 3, 4). Arregla primero la prueba «MultiHeadAttention: formas de la salida».")


def test_a_wrong_shape_where_shapes_passes_keeps_its_own_message_and_hint():
    """Say a 4D mask broadcast wrong: only tests with that mask see it, and `shapes` is not to blame."""
    outcomes = [Outcome("MultiHeadAttention", "shapes", "passed"), shape_failure("masked_zero")]
    lines = feedback.message(outcomes[1], "es", feedback.Context(outcomes)).splitlines()
    assert lines[0] == "Forma incorrecta en los pesos: se esperaba (2, 2, 3, 4) y se obtuvo (2, 2, 3, 3)."
    hints = feedback.catalog("es")["hints"]
    assert lines[-1] == "Pista: " + hints.get("MultiHeadAttention.masked_zero", hints["masked_zero"])


def test_a_cascade_points_at_shapes_alone_not_also_at_its_prerequisites():
    outcomes = [shape_failure("shapes"), shape_failure("attends"), shape_failure("masked_zero")]
    test = ScoredTest("MultiHeadAttention", "masked_zero", "2.6", "x", 0.0, 1.0, "failed", "failed", "visible", "",
                      blocked_by=("attends",))
    (shown,) = feedback.render([test], outcomes, "es")
    assert shown.output.startswith("Esta propiedad no se puede juzgar todavía") and "Sin puntos" not in shown.output


def test_the_mask_buffer_shape_is_its_own_failure():
    outcomes = [shape_failure("shapes", cls="CausalSelfAttention"),
                shape_failure("mask_buffer", what="mask", cls="CausalSelfAttention")]
    first = feedback.message(outcomes[1], "es", feedback.Context(outcomes)).splitlines()[0]
    assert first.startswith("Forma incorrecta en el buffer mask:")


# ---- 4. the failing call, in words; no seed ---------------------------------------------------------

@pytest.mark.parametrize("language, expected", [
    ("es", "Ejemplo mínimo que falla: B=2, T=3, d_model=4, d_k=None; falló la llamada forward(x (2, 3, 4), "
           "mask (2, 3, 3) float32, fused=True) en modo entrenamiento, seguida de backward, en el dispositivo meta"),
    ("en", "Minimal failing example: B=2, T=3, d_model=4, d_k=None; the failing call was forward(x (2, 3, 4), "
           "mask (2, 3, 3) float32, fused=True) in training mode, followed by backward, on device meta"),
])
def test_the_example_line_says_the_failing_call_in_words(language, expected):
    call = {"method": "forward", "x": [2, 3, 4], "mask": [2, 3, 3], "mask_dtype": "float32", "fused": True,
            "train": True, "manual_seed": 5, "device": "meta", "grad": True}
    outcome = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0, "expected": 0.5, "d_k": 4},
                      {"B": 2, "T": 3, "d_model": 4, "d_k": None, "seed": 31337, "call": call})
    assert message_lines(outcome, language)[1] == expected
    shown = feedback.message(outcome, language)
    assert "31337" not in shown and "manual_seed" not in shown
    assert outcome.example["seed"] == 31337  # the raw outcome keeps it


def test_the_example_line_shows_keys_it_does_not_know_and_names_the_class_for_a_build():
    build = {"method": "__init__", "d_model": 5, "num_heads": 2, "novelty": "x"}
    outcome = Outcome("MultiHeadAttention", "divisibility_error", "failed", "divisibility_no_error",
                      {"d_model": 5, "h": 2}, {"d_model": 5, "h": 2, "call": build})
    assert message_lines(outcome, "es")[1] == ("Ejemplo mínimo que falla: d_model=5, h=2; falló la llamada "
                                               "MultiHeadAttention(d_model=5, num_heads=2, novelty='x')")
    backward = {"method": "forward", "x": [3, 2, 4], "upstream": [3, 2, 4], "upstream_dtype": "float32",
                "input_grads": True, "grad": True, "noncontiguous": True}
    outcome = Outcome("SelfAttention", "gradients", "failed", "no_gradient", {"names": ["W_Q.weight"]},
                      {"call": backward})
    assert message_lines(outcome, "es")[1] == ("Ejemplo mínimo que falla: falló la llamada forward(x (3, 2, 4)) "
                                               "seguida de backward, con entradas no contiguas en memoria")
    split = {"method": "split_heads", "x": [1, 2, 4], "batch_size": 1, "device": "cpu"}
    outcome = Outcome("MultiHeadAttention", "split_heads", "failed", "split_heads_mismatch",
                      {"index": [0, 1, 0, 0], "got": 1.0, "expected": 2.0}, {"call": split})
    assert message_lines(outcome, "en")[1] == ("Minimal failing example: the failing call was "
                                               "split_heads(x (1, 2, 4), batch_size=1)")


@pytest.mark.parametrize("example, shown", [
    ({"B": 1, "T": 2, "d_model": 3, "seed": 0}, "B=1, T=2, d_model=3"),   # stored before calls were recorded
    ({"B": 1, "seed": 0, "call": "forward"}, "B=1"),                          # not a description: left out
    ({"B": 1, "call": {"x": [1, 2, 3]}}, "B=1; falló la llamada forward(x (1, 2, 3))"),  # no method: forward
    # a call built from the drawn one (its sequences cut into single tokens): its shapes, not B and T
    ({"B": 1024, "T": 2, "block_size": 2, "n_embd": 1, "call": {"x": [2048, 1, 1], "train": True}},
     "block_size=2, n_embd=1; falló la llamada forward(x (2048, 1, 1)) en modo entrenamiento"),
    ({"B": 2, "Tq": 3, "Tk": 5, "d_model": 4, "call": {"query": [2, 3, 4], "key": [2, 5, 4], "value_is": "key"}},
     "B=2, Tq=3, Tk=5, d_model=4; falló la llamada forward(query (2, 3, 4), key (2, 5, 4), value=key)"),
    # a key of one position, built from the drawn Tk: Tk left out, though the queries have 2 positions
    ({"B": 32, "Tq": 2, "Tk": 2, "h": 1, "call": {"query": [32, 2, 1], "key": [32, 1, 1], "value_is": "key"}},
     "B=32, Tq=2, h=1; falló la llamada forward(query (32, 2, 1), key (32, 1, 1), value=key)"),
    ({"B": 2, "n_embd": 64, "call": {"method": "__init__", "args": "Cfg(64, 8)"}},   # no shape: nothing to compare
     "B=2, n_embd=64; falló la llamada SelfAttention(Cfg(64, 8))"),
])
def test_the_example_line_of_old_or_odd_outcomes(example, shown):
    outcome = Outcome("SelfAttention", "scale", "failed", "wrong_scale", {"measured": 1.0, "expected": 0.5, "d_k": 4},
                      example)
    assert message_lines(outcome, "es")[1] == f"Ejemplo mínimo que falla: {shown}"


# ---- 5. sentences that agree, and catalogs in sync -------------------------------------------------

@pytest.mark.parametrize("what, masked, expected", [
    ("weights", False, "Los valores de los pesos no coinciden con la referencia calculada con tus propios "
                       "parámetros (sin máscara): en (0, 1, 2) vale 0.25 y se esperaba 0.5."),
    ("output", True, "Los valores de la salida no coinciden con la referencia calculada con tus propios "
                     "parámetros (con máscara): en (0, 1, 2) vale 0.25 y se esperaba 0.5."),
])
def test_reference_mismatch_agrees_and_says_the_mask_in_words(what, masked, expected):
    outcome = Outcome("SelfAttention", "reference_match", "failed", "reference_mismatch",
                      {"what": what, "index": [0, 1, 2], "got": 0.25, "expected": 0.5, "masked": masked})
    assert message_lines(outcome, "es")[0] == expected


@pytest.mark.parametrize("code, params, es, en", [
    ("not_finite", {"what": "weights", "count": 1},
     "Con entradas de magnitud ~1000 hay 1 valor NaN o infinito en los pesos.",
     "With inputs of magnitude ~1000 there is 1 NaN or infinite value in the weights."),
    ("not_finite", {"what": "output", "count": 3},
     "Con entradas de magnitud ~1000 hay 3 valores NaN o infinitos en la salida.",
     "With inputs of magnitude ~1000 there are 3 NaN or infinite values in the output."),
    ("missing_output", {"what": "weights", "count": 1}, "forward devolvió 1 valor: faltan los pesos.",
     "forward returned 1 value: the weights are missing."),
    ("missing_output", {"what": "output", "count": 0}, "forward devolvió 0 valores: falta la salida.",
     "forward returned 0 values: the output is missing."),
    ("no_gradient", {"names": ["W_V.weight"]},
     "El parámetro W_V.weight no recibe gradiente: no participa en la salida, o el grafo se corta antes de ella "
     "(.detach(), .data, torch.no_grad(), torch.set_grad_enabled(False)).",
     "Parameter W_V.weight receives no gradient: it does not contribute to the output, or the graph is cut before it "
     "(.detach(), .data, torch.no_grad(), torch.set_grad_enabled(False))."),
    ("unexpected_bias", {"names": ["W_Q", "W_K"]},
     "Las capas W_Q, W_K tienen sesgo (bias): deben crearse con bias=False.",
     "Layers W_Q, W_K have a bias: they must be created with bias=False."),
    ("masked_weight_not_zero", {"count": 1, "max_weight": 0.5},
     "Hay 1 peso distinto de cero donde mask == 0 (el mayor vale 0.5).",
     "There is 1 nonzero weight where mask == 0 (the largest is 0.5)."),
    ("mask_missing", {"found": []}, "No hay un buffer llamado 'mask' (buffers encontrados: —).",
     "There is no buffer named 'mask' (buffers found: —)."),
])
def test_messages_agree_in_number(code, params, es, en):
    outcome = Outcome("SelfAttention", "gradients", "failed", code, params)
    assert (message_lines(outcome, "es")[0], message_lines(outcome, "en")[0]) == (es, en)


def test_each_class_gets_its_own_dropout_hints():
    def hint(cls, prop):
        return message_lines(Outcome(cls, prop, "failed", "eval_not_deterministic", {"what": "output", "index": [0]}),
                             "es")[-1]

    causal = hint("CausalSelfAttention", "eval_deterministic")
    assert "self.attn_drop" in causal and "self.resid_drop" in causal and not re.search(r"self\.dropout\b", causal)
    assert "self.dropout" in hint("MultiHeadAttention", "eval_deterministic")
    assert "resid_drop" in hint("CausalSelfAttention", "train_dropout")
    assert "attn_drop" not in hint("MultiHeadAttention", "train_dropout")


@pytest.mark.parametrize("language", ["es", "en"])
@pytest.mark.parametrize("prop, code", [("gradients", "output_depends_on_grad_mode"),
                                        ("train_dropout", "dropout_depends_on_grad_mode")])
def test_dropout_tied_to_autograd_gets_its_classs_layers(language, prop, code):
    """Only CausalSelfAttention has a fused path and attn_drop/resid_drop; only MultiHeadAttention
    has self.dropout: each class's hint for this failure names its own layers."""
    def hint(cls):
        return message_lines(Outcome(cls, prop, "failed", code, {"p": 0.1}), language)[-1]

    causal, heads = hint("CausalSelfAttention"), hint("MultiHeadAttention")
    assert "fused=True" in causal and "self.attn_drop" in causal and not re.search(r"self\.dropout\b", causal)
    assert "self.dropout" in heads and "fused" not in heads and "attn_drop" not in heads


@pytest.mark.parametrize("language, explained", [("es", "forma pero no datos"), ("en", "a shape but no data")])
def test_the_device_hint_explains_the_meta_device(language, explained):
    outcome = Outcome("SelfAttention", "device", "failed", "wrong_device",
                      {"device": "meta", "line": 3, "error": "Expected all tensors to be on the same device"})
    hint = message_lines(outcome, language)[-1]
    assert "meta" in hint and explained in hint


def fields(text):
    return sorted({name for _, name, _, _ in string.Formatter().parse(text) if name})


def flat(section):
    return {key: value for key, value in section.items() if isinstance(value, str)}


@pytest.mark.parametrize("section", ["labels", "titles", "failures", "hints", "words", "report"])
def test_spanish_and_english_have_the_same_keys_and_placeholders(section):
    es, en = (feedback.catalog(language)[section] for language in LANGUAGES)
    assert set(es) == set(en)
    for key in flat(es):
        assert fields(es[key]) == fields(en[key]), key


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_agreement_has_two_forms_and_no_message_hedges_a_plural(language):
    """(or is the one other spec, "shape", which writes a shape: "()" for a 0-d tensor's)"""
    texts = feedback.catalog(language)
    for section in ("labels", "failures", "hints"):
        for key, text in flat(texts[section]).items():
            for _, name, spec, _ in string.Formatter().parse(text):
                assert not name or not spec or spec.count("|") == 1 or spec == "shape", (key, spec)
            assert not re.search(r"\w\((s|es)\)", text), (key, text)  # "valor(es)": say the right form


@pytest.mark.parametrize("language", LANGUAGES)
def test_no_student_message_shows_a_raw_python_bool_or_list(language):
    outcomes = [
        Outcome("SelfAttention", "reference_match", "failed", "reference_mismatch",
                {"what": "weights", "index": [0, 1], "got": 1.0, "expected": 2.0, "masked": False}),
        Outcome("SelfAttention", "parameter_count", "failed", "missing_parameters",
                {"names": ["W_Q.weight"], "found": ["q.weight"]}),
        Outcome("SelfAttention", "shapes", "failed", "shape_mismatch",
                {"what": "output", "expected": [1, 2, 3], "got": [1, 2, 2]}),
    ]
    for outcome in outcomes:
        first = message_lines(outcome, language)[0]
        assert "False" not in first and "True" not in first and "[" not in first, first


def message_lines(outcome, language):
    return feedback.message(outcome, language).splitlines()


@pytest.mark.parametrize("language, expected", [
    ("es", "MultiHeadAttention.split_heads lanzó AttributeError en la línea 3: sin atributo"),
    ("en", "MultiHeadAttention.split_heads raised AttributeError on line 3: sin atributo"),
], ids=["es", "en"])
def test_a_method_named_like_a_word_of_the_catalog_keeps_its_name(language, expected):
    """The words table says "split_heads" (the value compared) as "la salida de split_heads"; the
    method that raised is named as it is in the student's code."""
    found = Outcome("MultiHeadAttention", "split_heads", "error", "submission.exception",
                    {"op": "split_heads", "exc_type": "AttributeError", "message": "sin atributo", "line": 3})
    assert feedback.headline(found, language) == expected


def test_a_shape_is_written_as_torch_writes_it_even_when_empty():
    """A 0-d tensor returned where weights were due was shown as "se obtuvo —"."""
    assert feedback.fill("{expected:shape} {got:shape}", expected=[1, 1, 2], got=[]) == "(1, 1, 2) ()"
    assert feedback.fill("{names}", names=[]) == "—"  # an empty list of names reads as none
