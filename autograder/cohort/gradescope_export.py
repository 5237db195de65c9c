"""Read a Gradescope "Export Submissions" archive: one folder per submission, plus who sent it.

The archive (a .zip, or the folder it unpacks to) holds `submission_metadata.yml`, mapping each
submission folder (`submission_123456`) to its submitters, with Ruby-style keys:

    submission_123456:
      :submitters:
      - :name: Ana Pérez
        :email: ana@example.edu
        :sid: '2024001'
      :created_at: 2026-03-01 10:00:00.000000000 Z
      :score: 48.0

Plain keys (`submitters`, `name`, ...) are accepted too. Only the metadata is read here; the
submission folders are graded like any other folder submission.
"""
from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from .store import Submitter

METADATA = "submission_metadata.yml"


class ExportError(Exception):
    """The archive is not a readable Gradescope export."""


@dataclass(frozen=True)
class ExportedSubmission:
    key: str  # the submission's folder name
    path: Path
    submitters: tuple


def _field(mapping, name):
    value = mapping.get(":" + name, mapping.get(name))
    return "" if value is None else str(value).strip()


def find_metadata(root):
    """The metadata file at the root of the export or one folder down (assignment_N_export/), if any."""
    root = Path(root)
    for candidate in (root / METADATA, *sorted(root.glob(f"*/{METADATA}"))):
        if candidate.is_file():
            return candidate
    return None


def unpack(archive, into):
    """Extract a zipped export into `into` (zipfile drops absolute paths and '..' parts)."""
    try:
        with zipfile.ZipFile(archive) as handle:
            handle.extractall(into)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ExportError(f"cannot unpack {archive}: {exc}") from None
    return Path(into)


def read(metadata_path):
    """The export's submissions, in folder order, each with its submitters."""
    metadata_path = Path(metadata_path)
    try:
        data = yaml.safe_load(metadata_path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ExportError(f"cannot read {metadata_path}: {exc}") from None
    if not isinstance(data, dict):
        raise ExportError(f"{metadata_path}: expected a mapping of submission folders")
    found = []
    for folder, entry in sorted(data.items(), key=lambda item: str(item[0])):
        path = metadata_path.parent / str(folder)
        if not path.exists() or not isinstance(entry, dict):
            continue
        people = entry.get(":submitters", entry.get("submitters")) or []
        submitters = tuple(
            Submitter(_field(p, "name"), _field(p, "email"), _field(p, "sid")) for p in people if isinstance(p, dict)
        )
        found.append(ExportedSubmission(str(folder), path, submitters))
    return found


class Export:
    """Context manager: the submissions of an export given as a folder or a .zip."""

    def __init__(self, path):
        self.path = Path(path)
        self._tmp = None

    def __enter__(self):
        root = self.path
        if self.path.is_file():
            self._tmp = tempfile.TemporaryDirectory(prefix="autograder-export-")
            root = unpack(self.path, self._tmp.name)
        metadata = find_metadata(root)
        if metadata is None:
            raise ExportError(f"{self.path} has no {METADATA}")
        return read(metadata)

    def __exit__(self, *exc):
        if self._tmp is not None:
            self._tmp.cleanup()
