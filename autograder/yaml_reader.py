"""Reads the project's YAML (grading.yml, the exercise descriptor, the feedback catalogs).

With libyaml's parser when PyYAML was built with it (its wheels are): the pure-Python SafeLoader
spent ~0.17 CPU-s of every cold grade on these files, ten times libyaml's, for the same data.
"""
import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Error = yaml.YAMLError


def safe_load(stream):
    """yaml.safe_load, through libyaml where available: plain data only, no Python objects."""
    return load(stream, _LOADER)


def load(stream, loader):
    """yaml.load with `loader`. Nesting deeper than the interpreter's recursion limit (5,000 `[`,
    say, in an export's metadata) is an Error, as any other malformed YAML, not a RecursionError."""
    try:
        return yaml.load(stream, Loader=loader)
    except RecursionError:
        raise Error("nested too deeply to read") from None
