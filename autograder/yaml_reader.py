"""Reads the project's YAML (grading.yml, the exercise descriptor, the feedback catalogs).

With libyaml's parser when PyYAML was built with it (its wheels are): the pure-Python SafeLoader
spent ~0.17 CPU-s of every cold grade on these files, ten times libyaml's, for the same data.
"""
import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Error = yaml.YAMLError


def safe_load(stream):
    """yaml.safe_load, through libyaml where available: plain data only, no Python objects."""
    return yaml.load(stream, Loader=_LOADER)
