"""The exercise being graded, as its suite folder declares it (properties/exercise.yml).

The engine (loader, worker, runner, packaging, cohorts) takes every exercise-specific fact from
here: the submission's file name, the classes in grading order, how each is built, its contract
layers, the torch functions the worker may count, the handout, solution and warm-up paths, and
the folder of its feedback catalogs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from . import yaml_reader
from .errors import UsageError

PROJECT = Path(__file__).resolve().parent.parent
DESCRIPTOR = Path(__file__).resolve().parent / "properties" / "exercise.yml"
# an input's axis, as input_sizes names it: `x.1`, `query.0`
_AXIS = re.compile(r"[A-Za-z_]\w*\.\d")
KEYS = {"name", "submission", "handout", "solution", "notebook_names", "classes", "traced", "input_sizes",
        "warm_up", "feedback"}


class ExerciseError(UsageError):
    """exercise.yml is missing a key, has an unknown one, or a value of the wrong form: the
    message names it; see properties/exercise.yml for the expected form."""


@dataclass(frozen=True)
class GradedClass:
    name: str
    layers: tuple  # contract layers: the grader chooses their parameters
    config_class: str | None = None  # built from one config object of this name, else from keywords
    config_fields: dict = field(default_factory=dict)  # that object's fields and defaults


@dataclass(frozen=True)
class Exercise:
    name: str
    suite: Path  # the folder of the hidden suite (and of exercise.yml)
    submission: str  # file name students hand in; the worker imports it under its stem
    handout: Path
    solution: Path
    classes: tuple  # GradedClass, in grading order
    notebook_names: tuple = ()
    traced: tuple = ()
    # sizes of the inputs an example draws -> the (input, axis) pairs each sizes (feedback shows one
    # only where the failing call's inputs have it there)
    input_sizes: dict = field(default_factory=dict)
    warm_up: Path | None = None
    feedback: Path | None = None  # the folder of the exercise's catalogs, <language>.yml (feedback/__init__.py)

    @property
    def class_names(self):
        return tuple(c.name for c in self.classes)

    @property
    def stub(self):
        return self.handout / self.submission


def load(path=DESCRIPTOR):
    try:
        raw = yaml_reader.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml_reader.Error) as exc:
        raise ExerciseError(f"cannot read {path}: {exc}") from None
    if not isinstance(raw, dict) or set(raw) - KEYS or not {"name", "submission", "classes"} <= set(raw):
        raise ExerciseError(f"{path}: expected the keys {sorted(KEYS)} (name, submission and classes required)")
    suite = Path(path).resolve().parent
    classes = []
    for name, spec in (raw["classes"] or {}).items():
        spec = spec or {}
        layers, config = spec.get("layers", []), spec.get("config")
        if not isinstance(layers, list) or not all(isinstance(layer, str) for layer in layers):
            raise ExerciseError(f"{path}: classes.{name}.layers must be a list of attribute names")
        if config is not None and not (isinstance(config, dict) and set(config) == {"class", "fields"}
                                       and isinstance(config["fields"], dict)):
            raise ExerciseError(f"{path}: classes.{name}.config must have `class` and `fields`")
        classes.append(GradedClass(name, tuple(layers), config and config["class"], dict(config["fields"]) if config else {}))
    if not classes:
        raise ExerciseError(f"{path}: no classes")
    input_sizes = raw.get("input_sizes") or {}
    if not isinstance(input_sizes, dict) or not all(
            isinstance(size, str) and isinstance(axes, list) and all(isinstance(axis, str) and _AXIS.fullmatch(axis)
                                                                   for axis in axes)
            for size, axes in input_sizes.items()):
        raise ExerciseError(f"{path}: input_sizes must map each size an example draws to the input axes it "
                            "sizes, as `T: [x.1]`")
    submission = raw["submission"]
    if not isinstance(submission, str) or Path(submission).name != submission or not submission.endswith(".py"):
        raise ExerciseError(f"{path}: submission must be a plain file name ending in .py, not {submission!r}")
    return Exercise(
        name=str(raw["name"]), suite=suite, submission=submission,
        handout=PROJECT / raw.get("handout", ""), solution=PROJECT / raw.get("solution", ""),
        classes=tuple(classes), notebook_names=tuple(raw.get("notebook_names") or ()),
        traced=tuple(raw.get("traced") or ()),
        input_sizes={size: tuple((axis.rpartition(".")[0], int(axis.rpartition(".")[2])) for axis in axes)
                     for size, axes in input_sizes.items()}, warm_up=suite / raw["warm_up"] if raw.get("warm_up") else None,
        feedback=suite / raw.get("feedback", "feedback"))


EXERCISE = load()
