"""Student-facing text: test titles, failure messages and hints, in Spanish or English.

Messages are rendered from an outcome's code and parameters at the last moment, so the same
raw outcome can be shown in either language, in results.json or in a regenerated report.
"""
import string
from functools import lru_cache
from pathlib import Path

import yaml

CATALOG_DIR = Path(__file__).resolve().parent
CLASS_NUMBER = {"SelfAttention": 1, "MultiHeadAttention": 2, "CausalSelfAttention": 3}


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
    template = texts["failures"].get(outcome.code, outcome.code or "")
    lines = [_fill(template, {"cls": outcome.cls, **outcome.params}, texts["words"])]
    if outcome.example:
        shown = ", ".join(f"{k}={v}" for k, v in outcome.example.items())
        lines.append(f"{texts['labels']['example']}: {shown}")
    hint = texts["hints"].get(outcome.prop)
    if hint and outcome.status == "failed":
        lines.append(f"{texts['labels']['hint']}: {hint}")
    if outcome.output:
        lines.append(f"{texts['labels']['printed']}:\n{outcome.output}")
    return "\n".join(lines)
