"""grading.yml: the single source of scoring, visibility, timeouts, limits and language.

Loaded and validated once, before any grading, so that a typo in the file is reported to the
instructor with the key at fault instead of silently changing scores.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import feedback, yaml_reader
from .errors import UsageError
from .exercise import EXERCISE

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
LANGUAGES = ("es", "en")
CLASSES = EXERCISE.class_names  # grading.yml may name these classes only
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "grading.yml"


def add_options(parser):
    """--config and --lang, for every command that reads grading.yml."""
    parser.add_argument("--config", default=str(DEFAULT_PATH), help="grading.yml to use")
    parser.add_argument("--lang", choices=LANGUAGES, help="feedback language (default: grading.yml's)")


class ConfigError(UsageError):
    """grading.yml is missing, unreadable or inconsistent with the suite."""


@dataclass(frozen=True)
class Limits:
    import_s: float = 30
    request_s: float = 10
    class_s: float = 60
    submission_s: float = 240
    memory_mib: int = 512
    cpu_s: int = 300
    processes: int = 64
    open_files: int = 256
    file_size_mib: int = 16
    disk_mib: int = 64
    output_kib: int = 4


@dataclass(frozen=True)
class Property:
    cls: str
    name: str
    points: float
    visibility: str
    requires: tuple[str, ...] = ()  # properties of the same class that must pass for these points to count


@dataclass(frozen=True)
class GradingConfig:
    language: str
    max_examples: int
    seed: int
    limits: Limits
    properties: tuple[Property, ...] = field(default_factory=tuple)
    source: str = ""

    @property
    def max_score(self):
        return sum(p.points for p in self.properties)

    @property
    def classes(self):
        """The graded classes in grading.yml's order (the order of numbers, columns and pages)."""
        return tuple(dict.fromkeys(p.cls for p in self.properties))


def _section(data, key, path):
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: '{key}' must be a mapping")
    return value


def _number(value, where, kind=float):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{where} must be a non-negative number, got {value!r}")
    if kind is int and value != int(value):  # int() would truncate it without a word
        raise ConfigError(f"{where} must be a whole number, got {value!r}")
    return kind(value)


def _requires(value, siblings, name, where):
    """A property's prerequisites: names of other properties of its own class."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}.requires must be a list of property names of the same class")
    for required in value:
        if required == name or required not in siblings:
            raise ConfigError(f"{where}.requires: {required!r} is not another property of this class")
    return tuple(dict.fromkeys(value))


def _check_no_cycle(cls, requires, path):
    """Prerequisites must not loop back (a requires b requires a): no property could ever count."""
    done, active = set(), []

    def visit(name):
        if name in active:
            loop = " -> ".join(active[active.index(name):] + [name])
            raise ConfigError(f"{path}: classes.{cls}: prerequisites form a cycle: {loop}")
        if name not in done:
            active.append(name)
            for required in requires[name]:
                visit(required)
            active.pop()
            done.add(name)

    for name in requires:
        visit(name)


def _titled_properties(language):
    """The property names the exercise's catalog of `language` gives a title, as every property of
    the suite has one: a misspelt name in grading.yml is refused here, before anything is graded,
    instead of failing every loadable submission as a grader bug once the suite is collected. None
    where the catalog cannot be read (the feedback layer then reports it)."""
    try:
        titles = feedback.catalog(language).get("titles")
    except feedback.CatalogError:
        return None
    return frozenset(titles) if isinstance(titles, dict) and titles else None


def load(path=DEFAULT_PATH, language=None):
    """Read and validate grading.yml; `language` overrides the file's feedback language."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    return parse(text, path, language)


def parse(text, path, language=None):
    """Validate the text of a grading.yml; `path` names it in errors (a batch's slots get only the text)."""
    try:
        data = yaml_reader.safe_load(text) or {}
    except yaml_reader.Error as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")

    language = language or data.get("language", "es")
    if language not in LANGUAGES:
        raise ConfigError(f"{path}: language must be one of {LANGUAGES}, got {language!r}")

    hyp = _section(data, "hypothesis", path)
    unknown = sorted(set(hyp) - {"max_examples", "seed"})
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) hypothesis.{', hypothesis.'.join(unknown)}; "
                          "only max_examples and seed are read")
    seed = hyp.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"{path}: hypothesis.seed must be an integer")

    limit_values = {}
    for section, suffix in (("timeouts", "_s"), ("limits", "")):
        for key, value in _section(data, section, path).items():
            name = key + suffix if section == "timeouts" else key
            if name not in Limits.__dataclass_fields__:
                raise ConfigError(f"{path}: unknown key {section}.{key}")
            kind = Limits.__dataclass_fields__[name].type
            limit_values[name] = _number(value, f"{path}: {section}.{key}", int if kind == "int" else float)

    properties = []
    classes = _section(data, "classes", path)
    titled = _titled_properties(language)
    for cls, props in classes.items():
        if cls not in CLASSES:
            raise ConfigError(f"{path}: unknown class {cls!r}; expected one of {CLASSES}")
        if not isinstance(props, dict) or not props:
            raise ConfigError(f"{path}: classes.{cls} must map property names to points")
        for name, spec in props.items():
            where = f"{path}: classes.{cls}.{name}"
            if titled is not None and name not in titled:
                raise ConfigError(f"{where}: the suite has no property {name!r} (its catalog titles: "
                                  f"{', '.join(sorted(titled))}); a new one needs its check and its catalog "
                                  "lines too (README: Adding a property)")
            if not isinstance(spec, dict) or "points" not in spec:
                raise ConfigError(f"{where} needs 'points'")
            visibility = spec.get("visibility", "visible")
            if visibility not in VISIBILITIES:
                raise ConfigError(f"{where}: visibility must be one of {VISIBILITIES}")
            unknown = sorted(set(spec) - {"points", "visibility", "requires"})
            if unknown:
                raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; only points, visibility "
                                  "and requires are read")
            properties.append(Property(cls, name, _number(spec["points"], where + ".points"), visibility,
                                       _requires(spec.get("requires", []), props, name, where)))
        _check_no_cycle(cls, {p.name: p.requires for p in properties if p.cls == cls}, path)

    max_examples = hyp.get("max_examples", 8)
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1:
        raise ConfigError(f"{path}: hypothesis.max_examples must be a positive integer")
    return GradingConfig(
        language=language,
        max_examples=max_examples,
        seed=seed,
        limits=Limits(**limit_values),
        properties=tuple(properties),
        source=text,
    )
