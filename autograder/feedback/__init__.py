"""Student-facing text: test titles, failure messages and hints, in Spanish or English.

Messages are rendered from an outcome's code and parameters at the last moment, so the same
raw outcome can be shown in either language, in results.json or in a regenerated report.

An outcome of a notebook whose failure has a place carries `cell` (the code cell, counted from 1)
and `line` (the line within that cell): its message is the code's ".in_cell" form, which names both.
"""
import re
import string
from functools import lru_cache
from pathlib import Path

import yaml

CATALOG_DIR = Path(__file__).resolve().parent
CLASS_NUMBER = {"SelfAttention": 1, "MultiHeadAttention": 2, "CausalSelfAttention": 3}
_MODULE_LINE = re.compile(r" \([^()\n]*, line \d+\)$")  # str(SyntaxError) adds a line of the module, not of the cell
_NO_MODULE = re.compile(r"No module named '([^']+)'")


class _Lenient(dict):
    """format_map helper: a parameter the message needs but the outcome lacks shows as '?'."""

    def __missing__(self, key):
        return "?"


@lru_cache(maxsize=None)
def catalog(language):
    with open(CATALOG_DIR / f"{language}.yml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _fill(template, params, words):
    values = _Lenient({k: ("?" if v is None else words.get(v, v) if isinstance(v, str) else v)
                       for k, v in params.items()})
    return string.Formatter().vformat(template, (), values)


def label(key, language, **params):
    return _fill(catalog(language)["labels"][key], params, {})


def title(cls, prop, language):
    return f"{cls}: {catalog(language)['titles'].get(prop, prop)}"


def message(outcome, language):
    """The full feedback for one outcome: what went wrong, the minimal example, a hint."""
    texts = catalog(language)
    if outcome.status == "passed":
        return texts["labels"]["passed"]
    template, params = _template(outcome, texts["failures"])
    lines = [_fill(template, params, texts["words"])]
    if outcome.example:
        shown = ", ".join(f"{k}={v}" for k, v in outcome.example.items())
        lines.append(f"{texts['labels']['example']}: {shown}")
    hint = texts["hints"].get(outcome.prop)
    if hint and outcome.status == "failed":
        lines.append(f"{texts['labels']['hint']}: {hint}")
    if outcome.output:
        lines.append(f"{texts['labels']['printed']}:\n{outcome.output}")
    return "\n".join(lines)


def _template(outcome, failures):
    """(template, parameters) of an outcome's first line: for a notebook's, the form naming its cell."""
    params = {"cls": outcome.cls, **outcome.params}
    cell = params.get("cell")
    if isinstance(cell, int) and not isinstance(cell, bool):
        code, message = outcome.code, params.get("message")
        if isinstance(message, str):
            params["message"] = _MODULE_LINE.sub("", message)
            missing = _NO_MODULE.search(message)
            if code == "submission.import_error" and params.get("exc_type") == "ModuleNotFoundError" and missing:
                code, params["module"] = "submission.missing_module", missing.group(1)
        template = failures.get(f"{code}.in_cell")
        if template:
            return template, params
    return failures.get(outcome.code, outcome.code or ""), {"cls": outcome.cls, **outcome.params}
