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

Plain keys (`submitters`, `name`, ...) are accepted too, and a node with a tag YAML does not
know (`!ruby/object:...`) is read as the plain mapping, list or text under it. Only the metadata
is read here; the submission folders are graded like any other folder submission.

Every submission key must be Gradescope's `submission_N` and name a folder of the export: any
other key (one that is empty, `.` or `..`, holds a slash, backslash or NUL, or names a student's
file), or one whose path is a symlink or resolves outside the export, is refused with
ExportError, and the batch stops before grading anything: such a file is not a genuine export,
and grading the rest would hide that. A student's own folder can hold a file of that name: it
makes no export (find_metadata), so it never chooses the keys or the names of other students'
submissions.
"""
from __future__ import annotations

import itertools
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from .. import submission, yaml_reader
from ..errors import UsageError
from ..text import clean_line
from .store import SUBMISSION_KEY, Submitter

METADATA = "submission_metadata.yml"
# Gradescope's metadata holds a few lines per submission: 16 MiB is hundreds of thousands of them.
MAX_METADATA_BYTES = 16 * 2**20
# Names Gradescope gives: the folder a zipped export unpacks to, and each submission's folder.
EXPORT_FOLDER = re.compile(r"assignment_[0-9]+_export")


class ExportError(UsageError):
    """The archive is not a readable Gradescope export."""


@dataclass(frozen=True)
class ExportedSubmission:
    key: str  # the submission's folder name
    path: Path
    submitters: tuple


def _field(mapping, name):
    """A submitter's field as text; "" for one that is missing or not a single value (a list or
    mapping there is no name, and text made of one, aliases nested in aliases, can be gigabytes)."""
    value = mapping.get(":" + name, mapping.get(name))
    # as one clean line: escape sequences in a name reached the TA's terminal through batch's summary
    return clean_line(str(value)).strip() if isinstance(value, (str, int, float)) else ""


def find_metadata(root):
    """The metadata file at the root of the export, or in the one folder the root holds when it is
    the one a zip unpacks to (assignment_N_export/), if any. Never deeper, nor beside other
    entries, nor in a folder of another name: a folder of plain submissions in which one
    student's folder holds a submission_metadata.yml (say, the only one of a folder of late work)
    is a folder of plain submissions, not an export that student wrote."""
    root = Path(root)
    if (root / METADATA).is_file():
        return root / METADATA
    entries = [entry for entry in root.iterdir() if not entry.name.startswith(".") and entry.name != "__MACOSX"]
    if (len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink()
            and EXPORT_FOLDER.fullmatch(entries[0].name) and (entries[0] / METADATA).is_file()):
        return entries[0] / METADATA
    return None


def renamed_export(root):
    """The one folder `root` holds when it looks like an export under another name (a copy named
    "assignment_7_export 2" by the file manager): a submission_metadata.yml beside submission_N
    folders. Not read as one (a student's folder could hold both), but not graded as one student
    either: batch says so. None otherwise."""
    entries = [entry for entry in Path(root).iterdir() if not entry.name.startswith(".") and entry.name != "__MACOSX"]
    if len(entries) != 1 or not entries[0].is_dir() or entries[0].is_symlink():
        return None
    inner = entries[0]
    if not (inner / METADATA).is_file():
        return None
    return inner if any(SUBMISSION_KEY.fullmatch(child.name) and child.is_dir() for child in inner.iterdir()) else None


def holds_export(path):
    """Whether a plain folder's entry (a student's, by its place) is or holds an export: a folder
    with the metadata at its top or in an assignment_N_export/ among its first entries, a .zip with
    it there (read within the loader's bounds). Graded as one student all the same (a student's
    folder may hold a file of that name), but batch says so: the TA who gives the folder holding an
    export and its zip got two "students" at full marks."""
    if path.is_symlink():
        return False
    if path.is_dir():
        if (path / METADATA).is_file():
            return True
        with os.scandir(path) as children:
            return any(EXPORT_FOLDER.fullmatch(child.name) and child.is_dir(follow_symlinks=False)
                       and (Path(child.path) / METADATA).is_file() for child in itertools.islice(children, 1000))
    if path.suffix.lower() != ".zip":
        return False
    try:
        names = submission.zip_names(path)
    except submission.SubmissionUnreadable:
        return False
    return any(PurePosixPath(name).name == METADATA and len(PurePosixPath(name).parts) <= 2 for name in names)


def unpack(archive, into):
    """Extract a zipped export into `into` (zipfile drops absolute paths and '..' parts)."""
    try:
        with zipfile.ZipFile(archive) as handle:
            handle.extractall(into)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ExportError(f"cannot unpack {archive}: {exc}") from None
    return Path(into)


class _MetadataLoader(yaml.SafeLoader):
    """SafeLoader that reads a node of unknown tag as its untagged value instead of failing."""


def _untagged(loader, tag_suffix, node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


_MetadataLoader.add_multi_constructor("", _untagged)


def _folder(root, key):
    """The export's folder for `key`, or ExportError if the key is not Gradescope's name of a folder inside it."""
    if not SUBMISSION_KEY.fullmatch(key):
        raise ExportError(f"{METADATA} names {key!r}, which is not a submission folder name (Gradescope's are submission_N)")
    path = root / key
    if path.is_symlink() or (path.exists() and path.resolve().parent != root.resolve()):
        raise ExportError(f"{METADATA} names {key!r}, a symlink or a path outside the export")
    return path


def read(metadata_path, notes=None):
    """The export's submissions, in folder order, each with its submitters. `notes`, if given, gets
    (name, reason) of what does not match: a submission_N folder the metadata does not name
    ("not_in_metadata": graded, with no submitters) and a key whose folder is missing ("no_folder")."""
    metadata_path = Path(metadata_path)
    try:
        if metadata_path.stat().st_size > MAX_METADATA_BYTES:
            raise ExportError(f"{metadata_path} is over {MAX_METADATA_BYTES // 2**20} MiB: not an export's metadata")
        data = yaml_reader.load(metadata_path.read_text(encoding="utf-8"), _MetadataLoader) or {}
    except (OSError, ValueError, yaml_reader.Error) as exc:  # ValueError: not UTF-8, or an impossible date
        raise ExportError(f"cannot read {metadata_path}: {exc}") from None
    if not isinstance(data, dict):
        raise ExportError(f"{metadata_path}: expected a mapping of submission folders")
    found, notes = [], [] if notes is None else notes
    for folder, entry in sorted(data.items(), key=lambda item: str(item[0])):
        if not isinstance(folder, str):
            raise ExportError(f"{METADATA} has a key that is not a folder name: {str(folder)[:80]!r}")
        path = _folder(metadata_path.parent, folder)
        people = entry.get(":submitters", entry.get("submitters")) if isinstance(entry, dict) else None
        submitters = tuple(
            Submitter(_field(p, "name"), _field(p, "email"), _field(p, "sid"))
            for p in (people if isinstance(people, list) else []) if isinstance(p, dict)
        )
        if not path.is_dir():
            who = ", ".join(s.name or s.email or s.sid for s in submitters)
            notes.append((f"{folder} ({who})" if who else folder, "no_folder"))
            continue
        found.append(ExportedSubmission(str(folder), path, submitters))
    named = {submission.key for submission in found}
    for path in sorted(metadata_path.parent.iterdir()):
        if SUBMISSION_KEY.fullmatch(path.name) and path.is_dir() and not path.is_symlink() and path.name not in named \
                and path.name not in data:
            notes.append((path.name, "not_in_metadata"))
            found.append(ExportedSubmission(path.name, path, ()))
    return sorted(found, key=lambda submission: submission.key)


class Export:
    """Context manager: the submissions of an export given as a folder or a .zip."""

    def __init__(self, path, notes=None):
        self.path = Path(path)
        self.notes = notes
        self._tmp = None

    def __enter__(self):
        root = self.path
        if self.path.is_file():
            self._tmp = tempfile.TemporaryDirectory(prefix="autograder-export-")
            root = unpack(self.path, self._tmp.name)
        metadata = find_metadata(root)
        if metadata is None:
            raise ExportError(f"{self.path} has no {METADATA}")
        return read(metadata, self.notes)

    def __exit__(self, *exc):
        if self._tmp is not None:
            self._tmp.cleanup()
