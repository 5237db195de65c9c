"""Student-facing text: test titles, failure messages and hints, in Spanish or English.

Two catalogs per language are merged: the engine's (this folder: labels, the loader's, worker's
and grader's own failures, report and statement words) and the exercise's (its suite folder's
feedback/, exercise.yml's `feedback`: titles, its properties' failures, hints, words, checks).

Messages are rendered from an outcome's code and parameters at the last moment, so the same
raw outcome can be shown in either language, in results.json or in a regenerated report.

An outcome of a notebook whose failure has a place carries `cell` (the code cell, counted from 1)
and `line` (the line within that cell): its message is the code's ".in_cell" form, which names both.

What fails many tests at once is said once: render() gives results.json and the student pages an
overview for their top (a file that could not be read or imported, a class not written yet), and
each of those tests one line pointing there.
"""
import dataclasses
import re
import string
import sys
from functools import lru_cache
from pathlib import Path

from .. import yaml_reader
from ..errors import UsageError
from ..exercise import EXERCISE
from ..worker.submission_errors import call_does_not_fit

CATALOG_DIR = Path(__file__).resolve().parent  # the engine's catalogs
_MODULE_LINE = re.compile(r" \([^()\n]*, line \d+\)$")  # str(SyntaxError) adds a line of the module, not of the cell
_NO_MODULE = re.compile(r"No module named '([^']+)'")
_NO_NAME = re.compile(r"cannot import name '([^']+)' from '([^']+)'")  # a name a newer version has
_NOT_DEFINED = re.compile(r"name '([^']+)' is not defined")  # Python's English, reworded by the catalog


class _Missing(str):
    """A parameter the message needs but the outcome lacks (or holds None): shown as '?'."""


_MISSING = _Missing("?")


class _Lenient(dict):
    """format_map helper: a parameter the message needs but the outcome lacks shows as '?'."""

    def __missing__(self, key):
        return _MISSING


class _Word(str):
    """A value of a catalog's `words` table, which knows whether what agrees with it takes the
    plural: "los pesos difieren", not "los pesos difiere"."""

    def __new__(cls, text, plural=False):
        word = super().__new__(cls, text)
        word.plural = plural
        return word


class _Formatter(string.Formatter):
    """str.format, plus what a message needs to read naturally in any language:

    - "{value:one|many}" is the form that agrees with the value: `many` for a number other than 1,
      a list of other than one item, a plural word of the table, or True; `one` otherwise. So a
      template says "{count} {count:valor|valores}" or "{what} {what:difiere|difieren}".
    - a list of names is written "W_Q.weight, W_K.weight" (the first LISTED_NAMES, then how many
      more); a list of integers (a shape, an index)
      as a tuple, "(2, 3, 4)", as the call in the example line writes shapes; "{got:shape}" writes
      a shape so even when it is empty, "()".
    """

    def format_field(self, value, spec):
        if "|" in spec:
            one, many = spec.split("|", 1)
            return value if isinstance(value, _Missing) else many if _plural(value) else one
        if isinstance(value, list) and spec == "shape":  # a 0-d tensor's too: "()", as torch writes it
            return str(tuple(value))
        if isinstance(value, list) and not spec:
            return _listed(value)
        return super().format_field(value, spec)


_FORMATTER = _Formatter()


def _plural(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 1
    if isinstance(value, list):
        return len(value) != 1
    return getattr(value, "plural", False)


def _listed(values):
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return str(tuple(values))
    if all(isinstance(v, str) for v in values):
        shown = ", ".join(values[:LISTED_NAMES]) or "—"
        # a module with thousands of parameters would fill the page; the count reads in any language
        return shown if len(values) <= LISTED_NAMES else f"{shown}, … (+{len(values) - LISTED_NAMES})"
    return str(values)


LISTED_NAMES = 8


class CatalogError(UsageError):
    """A feedback catalog cannot be read, or the exercise's redefines a key of the engine's: the
    message names the file and the keys; each text has one home (see this module's docstring)."""


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml_reader.safe_load(handle)
    except (OSError, yaml_reader.Error) as exc:
        raise CatalogError(f"cannot read the feedback catalog {path}: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise CatalogError(f"{path}: expected sections (labels, failures, ...) that map keys to texts")
    return data


@lru_cache(maxsize=None)
def catalog(language):
    """The engine's catalog of `language` with the exercise's merged in, section by section."""
    merged = _read(CATALOG_DIR / f"{language}.yml")
    exercise_path = EXERCISE.feedback / f"{language}.yml"
    for section, texts in _read(exercise_path).items():
        clash = sorted(set(merged.get(section, {})) & set(texts))
        if clash:
            raise CatalogError(f"{exercise_path}: {section}.{', '.join(clash)} already in the engine's "
                               f"{CATALOG_DIR / f'{language}.yml'}: keep each text in one of them")
        merged[section] = {**merged.get(section, {}), **texts}
    return merged


# What every template may name besides its outcome's parameters: the file the engine's texts say.
GIVEN = {"submission": EXERCISE.submission}


# Parameters that name something in the student's code or Python's words, shown as they are: a
# method called split_heads is not the words table's "split_heads" (its output), nor is what an
# exception of the student's said.
LITERAL = frozenset({"cls", "op", "exc_type", "message", "function", "error"})


def _fill(template, params, words):
    values = {**GIVEN, **params}
    return _FORMATTER.vformat(template, (), _Lenient({k: v if k in LITERAL else _value(v, words)
                                                      for k, v in values.items()}))


def _value(value, words):
    """A parameter as a message shows it: a code of the words table as its words ("weights": "los
    pesos", or {text: "los pesos", plural: true} for a word that takes the plural)."""
    if value is None:
        return _MISSING
    word = words.get(value) if isinstance(value, str) else None
    if isinstance(word, dict):
        return _Word(word["text"], word.get("plural", False))
    return value if word is None else _Word(word)


def label(key, language, **params):
    return _fill(catalog(language)["labels"][key], params, {})


def title(cls, prop, language):
    return f"{cls}: {catalog(language)['titles'].get(prop, prop)}"


def message(outcome, language, context=None):
    """The full feedback for one outcome: what went wrong, the minimal example, a hint, what the
    code printed. With `context` (the Context of the submission's outcomes), a failure that the
    top of the results explains is one line pointing there, a wrong output shape in a test other
    than `shapes` says that this property cannot be judged until `shapes` passes, and an exception
    where `shapes` fails too gets the hint to start there."""
    texts = catalog(language)
    if outcome.status == "passed":
        return texts["labels"]["passed"]
    if context is not None and context.explains(outcome):
        lines = [context.short(outcome, language)]
    else:
        outcome = context.as_shown(outcome) if context is not None else outcome
        upstream = context is not None and context.upstream(outcome)
        lines = [headline(outcome, language, upstream)]
        if outcome.example and not _input_free(outcome.code):
            lines.append(f"{texts['labels']['example']}: {_example(outcome, texts['labels'])}")
        named = diagnosis(outcome, language)
        if named:
            lines.append(named)
        hint = None
        if not upstream and not _unkept_name(outcome):
            hint = (context and context.shapes_first(outcome, language)) or _hint(outcome, texts["hints"])
        if hint:
            lines.append(f"{texts['labels']['hint']}: {hint}")
    if outcome.output:
        lines.append(f"{texts['labels']['printed']}:\n{outcome.output}")
    return "\n".join(lines)


def diagnosis(outcome, language):
    """The sentence naming the catalog misconception whose output the submission's matched on every
    failing example, or, for a structural one, whose failure only that mistake raises
    (properties/diagnosis.py); None: no diagnosis, or an id this catalog no longer has (an outcome
    stored by another version)."""
    from .. import misconceptions

    entry = misconceptions.BY_ID.get(getattr(outcome, "diagnosis", None) or "")
    if entry is None:
        return None
    return label("diagnosis_structural" if entry.kind == "structural" else "diagnosis", language,
                 explanation=entry.explanation(language))


def fill(template, **params):
    """A template of the catalogs filled as messages are ("{count:estudiante|estudiantes}")."""
    return _fill(template, params, {})


def headline(outcome, language, upstream=False):
    """The first line of an outcome's feedback: what went wrong. `upstream`: the form of a wrong
    output shape or type that names the `shapes` test as the one to fix first."""
    texts = catalog(language)
    template, params = _template(outcome, texts["failures"])
    if upstream:
        template = texts["failures"][f"{outcome.code}.upstream"]
        params = {**params, "shapes": title(outcome.cls, "shapes", language)}
    return _fill(template, params, texts["words"])


# Failures that name the mask of a call that breaks with it alone (checks._named_for_the_mask).
MASK_UPSTREAM = ("mask_raised_upstream", "mask_shape_mismatch_upstream")


def _hint(outcome, hints):
    """The hint of a failed property, in its class's own form ("CausalSelfAttention.train_dropout")
    where the classes differ, or its form for one failure code ("scale.scale_unmeasurable", or
    "*.layer_shape" for every property) where that failure points elsewhere, in one class's form
    ("MultiHeadAttention.gradients.output_depends_on_grad_mode") where the fix names its layers. For an exception
    the submission raised, the property's form for errors ("gradients.error") where its usual
    hint would mislead, or the constructor's when the module could not even be built; none for
    other errors (a timeout, code not written yet), which no hint about the property explains."""
    cls, prop = outcome.cls, outcome.prop
    if outcome.status == "failed":
        keys = (f"{cls}.{prop}.{outcome.code}", f"{prop}.{outcome.code}", f"*.{outcome.code}", f"{cls}.{prop}", prop)
    elif outcome.code == "submission.exception" and _call_does_not_fit(outcome.params):
        keys = ("signature.error",)  # the call itself did not fit: nothing the property checks was reached
    elif outcome.code == "submission.exception" and outcome.params.get("op") == "__init__":
        keys = ("constructor.error",)  # the module was never built: nothing the property checks was reached
    elif outcome.code == "submission.exception":
        keys = (f"{cls}.{prop}.error", f"{prop}.error", f"{cls}.{prop}", prop)
    else:
        return None
    return next((hints[key] for key in keys if key in hints), None)


def _call_does_not_fit(params):
    return call_does_not_fit(params.get("exc_type"), params.get("message"))


# Switches of a failing call said in words after it ("en modo entrenamiento"), and those not shown:
# the seed of dropout's randomness tells a student nothing they can use, and the gradient fed to
# backward is the grader's instrument ("seguida de backward" says enough).
CALL_MODES = ("train", "grad", "noncontiguous", "in_place", "inference", "copied", "device")
CALL_HIDDEN = ("method", "seed", "manual_seed", "trace", "upstream", "input_grads", "backward_from")


def _example(outcome, labels):
    """The example line: the sizes drawn, then the call that failed ("call", when the outcome has
    one), as the student would write it. The seed of the inputs stays in the raw outcome only; a
    drawn input size (exercise.yml's input_sizes) that the failing call's inputs do not have where
    it sizes them is left out: that call was built from the drawn one (sequences cut into single
    tokens, a key of one position), and its shapes say what it was."""
    example = outcome.example
    call = example.get("call")
    parts = [", ".join(f"{k}={v}" for k, v in example.items() if k not in ("seed", "call") and _shown_size(k, v, call))]
    if isinstance(call, dict):
        parts.append(_call(call, outcome.cls, labels))
    return "; ".join(part for part in parts if part)


def _shown_size(name, value, call):
    """Whether a drawn size shows beside the failing call: unless it is an input size
    (exercise.yml's input_sizes) and the call has one of the inputs it sizes, none with it there."""
    axes = EXERCISE.input_sizes.get(name)
    if not axes or not isinstance(call, dict):
        return True
    found = []
    for name, axis in axes:
        shape = call.get(call.get(f"{name}_is"), call.get(name))  # value=key: the key's shape
        if _is_shape(shape) and axis < len(shape):
            found.append(shape[axis])
    return not found or value in found


def _is_shape(value):
    """Whether a call description's value is a tensor's shape (a list of ints)."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _call(call, cls, labels):
    """forward(x (2, 3, 4), mask (2, 3, 3) float32, fused=True) (or forward(query (1, 2, 4), key
    (1, 2, 4), value=key) where an argument is an earlier one's tensor) and how it ran, from a call's
    description (harness.describe_call): shapes for tensors, name=value for anything else, so a
    key this code does not know still shows."""
    method = call.get("method") or "forward"
    arguments = []
    for key, value in call.items():
        if key.endswith("_is"):  # the same tensor as an earlier argument: value=key
            arguments.append(f"{key[:-3]}={value}")
            continue
        if key == "args" and isinstance(value, str):  # a constructor's arguments by position: 8, 2
            arguments.append(value)
            continue
        if key in CALL_MODES or key in CALL_HIDDEN or key.endswith("_dtype"):
            continue
        if _is_shape(value):
            dtype = call.get(f"{key}_dtype")
            arguments.append(f"{key} {tuple(value)}" + (f" {dtype}" if dtype else ""))
        elif value is None:  # a keyword argument passed as None (describe_call keeps no other None)
            arguments.append(f"{key}=None")
        elif value is not False:
            arguments.append(f"{key}={value!r}")
    shown = labels["call"].format(call=f"{cls if method == '__init__' else method}({', '.join(arguments)})")
    modes = [labels["call_train"]] if call.get("train") else []
    if call.get("grad"):
        modes.append(labels["call_grad_from_weights" if call.get("backward_from") == 1 else "call_grad"])
    if call.get("noncontiguous"):
        modes.append(labels["call_noncontiguous"])
    if call.get("in_place"):
        modes.append(labels["call_in_place"])
    if call.get("inference"):
        modes.append(labels["call_inference"])
    if call.get("copied"):
        modes.append(labels["call_copied"])
    if call.get("device") not in (None, "cpu"):
        modes.append(labels["call_device"].format(device=call["device"]))
    return f"{shown} {', '.join(modes)}" if modes else shown


def _whole_submission(code):
    """Whether a code is a failure of the whole file, before any class ran: it could not be read
    (load.*) or imported (its syntax, an import, a limit passed while importing)."""
    return (code or "").startswith(("load.", "submission.import_", "submission.syntax_error"))


# Codes that, in every test of a class, mean the class is not written yet (the handout's stub).
UNWRITTEN = ("submission.not_implemented", "submission.missing_class", "submission.missing_class_in_notebook")
# Failures of forward's results themselves: in a test other than `shapes`, the same bug as its.
UPSTREAM = ("shape_mismatch", "missing_output", "not_a_tensor", "dtype_mismatch")
FORWARD_RESULTS = ("output", "weights")


def _input_free(code):
    """Whether a failure is the same for every input, so that an example would say nothing."""
    return _whole_submission(code) or code in UNWRITTEN


class Context:
    """What one test's feedback may say about the other tests of the same submission: whether the
    file itself failed (then every test failed the same way), which classes are not written yet
    (every test of the class raised NotImplementedError, or the class is missing, but for the
    grader's own errors), and which classes fail their `shapes` test."""

    def __init__(self, outcomes):
        outcomes = list(outcomes)
        by_class = {}
        for outcome in outcomes:
            by_class.setdefault(outcome.cls, []).append(outcome)
        self.classes = list(by_class)
        self.whole = next((o for o in outcomes if _whole_submission(o.code)), None)
        self.unwritten = {}
        for cls, found in by_class.items():
            stub = [o for o in found if o.code in UNWRITTEN]
            if stub and all(o.code in UNWRITTEN or o.code == "grader_error" for o in found):  # not the student's
                self.unwritten[cls] = stub[0]
        self.bad_shapes = {o.cls for o in outcomes if o.prop == "shapes" and o.status != "passed"}
        self.masks_taken = {o.cls for o in outcomes if o.prop == "masked_zero" and o.status == "passed"}

    def as_shown(self, outcome):
        """The outcome as its message should read: a mask named upstream of a property whose class
        passes masked_zero (the module takes that property's masks, just not this one) is not sent
        back to masked_zero first (its `.alone` form)."""
        if outcome.code in MASK_UPSTREAM and outcome.cls in self.masks_taken:
            return dataclasses.replace(outcome, code=f"{outcome.code}.alone")
        return outcome

    def explains(self, outcome):
        """Whether the top of the results (overview) already says what went wrong in this test."""
        return _whole_submission(outcome.code) or (outcome.cls in self.unwritten and outcome.code in UNWRITTEN)

    def short(self, outcome, language):
        """The one line a test explained at the top shows instead of the whole message."""
        if _whole_submission(outcome.code):
            return label("see_top_load" if outcome.code.startswith("load.") else "see_top_import", language)
        return f"{headline(outcome, language)} {label('see_top', language)}"

    def shapes_first(self, outcome, language):
        """The hint for an exception in a property other than `shapes` of a class whose `shapes` test
        fails too: forward breaks on plain inputs already, so that test (and its hint) comes first.
        Not for an exception in __init__, which the constructor's own hint is about, nor for a call
        that does not fit the signature, which the signature's hint is about."""
        if (outcome.code != "submission.exception" or outcome.prop == "shapes" or outcome.cls not in self.bad_shapes
                or outcome.params.get("op") == "__init__" or _call_does_not_fit(outcome.params)):
            return None
        hints = catalog(language)["hints"]
        first = label("shapes_first", language, shapes=title(outcome.cls, "shapes", language))
        return " ".join(filter(None, (first, hints.get(f"{outcome.cls}.shapes", hints.get("shapes")))))

    def upstream(self, outcome):
        """Whether a failure is the wrong shape or type of forward's results, in a property other than
        `shapes` of a class whose `shapes` test fails too: this property cannot be judged yet."""
        return (outcome.code in UPSTREAM and outcome.prop != "shapes" and outcome.cls in self.bad_shapes
                and outcome.params.get("what") in FORWARD_RESULTS)


def overview(outcomes, language, graded_file=None):
    """The text for the top of the results: which file was graded, when the submission held others
    (graded_file), then what made whole groups of tests fail at once, said once (each of those
    tests shows Context.short). "" when there is nothing to say."""
    lines = [label("graded_file", language, file=graded_file)] if graded_file else []
    context = Context(outcomes)
    if context.whole is not None:
        return "\n".join([*lines, headline(context.whole, language), label("whole_submission", language)])
    unwritten = [f"{headline(o, language)} {label('unwritten_class', language, cls=cls)}"
                 for cls, o in context.unwritten.items()]
    if len(context.unwritten) == len(context.classes) and all(
            o.code == "submission.not_implemented" for o in context.unwritten.values()):
        unwritten.insert(0, label("stub", language))
    return "\n".join(lines + unwritten)


def render(scored, outcomes, language):
    """The scored tests with each one's feedback rendered knowing the others (scoring.score calls
    it): what results.json and the student pages show, under overview(). A test already sent
    elsewhere (to the top, to `shapes`) does not also name its unmet prerequisites: one place to
    start is enough."""
    context = Context(outcomes)
    by_key = {(o.cls, o.prop): o for o in outcomes}
    tests = []
    for test in scored:
        outcome = by_key[(test.cls, test.prop)]
        text = message(outcome, language, context)
        if test.blocked_by and not (context.explains(outcome) or context.upstream(outcome)):
            text = blocked(test.cls, test.blocked_by, outcome, text, language)
        tests.append(dataclasses.replace(test, output=text))
    return _unseen_tests_unnamed(tests, language)


# When a student sees each visibility's tests: a test may name another only if it is seen no later.
SEEN = {"visible": 0, "after_due_date": 1, "after_published": 1, "hidden": 2}


def _unseen_tests_unnamed(tests, language):
    """tests, with the title of a test the student does not see yet (grading.yml's visibility)
    replaced, in the output of one they do see, by words that do not name it: "fix the test
    «CausalSelfAttention: the future does not leak» first" told of a hidden test what it checks."""
    later = [(SEEN.get(t.visibility, 2), f"«{title(t.cls, t.prop, language)}»", t.cls)
             for t in tests if SEEN.get(t.visibility, 2) > 0]
    if not later:
        return tests
    shown = []
    for test in tests:
        text, when = test.output, SEEN.get(test.visibility, 2)
        for seen, name, cls in later:
            if seen > when and name in text:
                text = text.replace(name, f"«{label('unseen_test', language, cls=cls)}»")
        shown.append(test if text == test.output else dataclasses.replace(test, output=text))
    return shown


# A NameError in a notebook, on import or in a call: most often a name bound in code not kept
# (inside a for or with block), which its message explains instead of the property's hint.
NAME_ERRORS = {"submission.import_error": "submission.name_error", "submission.exception": "submission.name_error_in_call"}


def _missing_name(params, found):
    """submission.missing_name for `from typing import override` where the grader's Python or
    library lacks the name (most often one a newer version added, as Colab's has)."""
    params["name"], params["module"] = found.group(1), found.group(2)
    return "submission.missing_name"


def _newer_syntax(code, message):
    """submission.syntax_error_fstring for a syntax error inside an f-string where the grader runs a
    Python older than 3.12: most often the quotes of the f-string reused inside it (f"{d["n"]}"),
    which 3.12 reads, so the file ran where the student tried it (Colab). Else code as it is."""
    if code == "submission.syntax_error" and isinstance(message, str) and message.startswith("f-string"):
        return "submission.syntax_error_fstring" if sys.version_info < (3, 12) else code
    return code


def _unkept_name(outcome):
    params = outcome.params
    return (outcome.code in NAME_ERRORS and isinstance(params.get("cell"), int) and params.get("exc_type") == "NameError"
            and isinstance(params.get("message"), str) and _NOT_DEFINED.search(params["message"]) is not None)


def _template(outcome, failures):
    """(template, parameters) of an outcome's first line: for a notebook's, the form naming its cell."""
    cell = outcome.params.get("cell")
    if isinstance(cell, int) and not isinstance(cell, bool):
        code, params = _read_message(outcome, in_cell=True)
        template = failures.get(f"{code}.in_cell")
        if template:
            return _fitted(_in_function(template, params, failures), params), params
    code, params = _read_message(outcome, in_cell=False)
    return _fitted(_in_function(failures.get(code, code or ""), params, failures), params), params


def _read_message(outcome, in_cell):
    """(code, parameters) of an outcome once Python's message is read: a missing module or name, a
    name the notebook binds in code not kept, a syntax only a newer Python reads each get their own
    text. The message loses the worker's module line where it would mislead: always in a cell,
    whose lines are not the module's, and for a syntax error (the student's file has another name)."""
    params, code = {"cls": outcome.cls, **outcome.params}, outcome.code
    message = params.get("message")
    if not isinstance(message, str):
        return code, params
    if in_cell or (code or "").startswith("submission.syntax_error"):
        params["message"] = _MODULE_LINE.sub("", message)
    missing, no_name = _NO_MODULE.search(message), _NO_NAME.search(message)
    if code == "submission.import_error" and params.get("exc_type") == "ModuleNotFoundError" and missing:
        code, params["module"] = "submission.missing_module", missing.group(1)
    elif code == "submission.import_error" and no_name:
        code = _missing_name(params, no_name)
    elif in_cell and _unkept_name(outcome):
        # most often a name the notebook binds in code not kept; get_ipython, IPython's own:
        # a line the classes depend on needs IPython (`x = !cmd`), which the grader lacks
        params["name"] = _NOT_DEFINED.search(message).group(1)
        code = "submission.ipython_needed" if params["name"] == "get_ipython" else NAME_ERRORS[code]
    return _newer_syntax(code, params["message"]), params


def _in_function(template, params, failures):
    """The template naming, after the line, the submission's function that line is in, where that is
    not the method called (a module-level helper forward calls: its line is not one of forward's)."""
    function, method = params.get("function"), params.get("op") or "forward"
    if not isinstance(function, str) or function == method or "{line}" not in template:
        return template
    return template.replace("{line}", "{line}" + failures["line.in_function"], 1)


# Where a template names the submission's line: left out when the exception came from torch's own
# code, with no line of the submission on its way (once shown as "en la línea ?").
_LINE_PHRASE = re.compile(r" (?:en la línea|on line|at line) \{line\}(?=[ :,.])|,? \((?:línea|line) \{line\}\)"
                          r"|,? (?:línea|line) \{line\}(?=[,:)])")


def _fitted(template, params):
    """The template, fitted to what the submission's exception said. `raise ValueError()` has no
    message: the sentence ends where it would have begun. A message that ends its own sentence
    ("... instead.", "... device cpu!") where the template puts a full stop after it loses its own
    mark (params is the caller's copy): no line reads "instead.." or "cpu!." any more."""
    if params.get("line") is None and "{line}" in template:  # raised inside torch: no line of theirs
        template = _LINE_PHRASE.sub("", template)
    if params.get("message") == "" and template.endswith(": {message}"):
        return template[:-len(": {message}")] + "."
    for key in ("error", "message"):
        if isinstance(params.get(key), str) and f"{{{key}}}." in template:
            params[key] = params[key].rstrip().rstrip(".!")
    return template


def blocked(cls, prerequisites, outcome, own_message, language):
    """The feedback of a property whose prerequisites failed: why it earns nothing, which test to
    fix first, then what the property itself found (passing alone is worth saying: fixing the
    prerequisite will give these points back)."""
    names = ", ".join(f"«{title(cls, r, language)}»" for r in prerequisites)
    first = label("blocked" if len(prerequisites) == 1 else "blocked_many", language, names=names)
    if outcome.status == "passed":
        return f"{first}\n{label('blocked_alone_passes', language)}"
    return f"{first}\n{own_message}"
