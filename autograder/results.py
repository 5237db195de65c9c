"""Write results.json in Gradescope's schema, always valid and bounded in size.

Only the trusted process writes it, last, after the worker is gone; it goes to a temporary
name first and is renamed into place, so a reader never sees half a file. Every string in it is
cleaned once more as it is written (text.clean): whatever a worker said, the file is valid UTF-8.
"""
import json
import os
import secrets
import stat
from pathlib import Path

from .errors import UsageError
from .text import clean_tree

MAX_OUTPUT_CHARS = 8000  # per test; Gradescope cuts fields near 100k, and results stay < 1 MB


def _clip(text, limit=MAX_OUTPUT_CHARS):
    return text if len(text) <= limit else text[: limit - 20] + "\n[... recortado]"


def build(card, *, execution_time, output="", extra_data=None):
    """Gradescope's results.json of a scoring.Scorecard."""
    return {
        "score": round(card.earned, 4),
        "execution_time": round(execution_time, 2),
        "output": _clip(output, 20000),
        "output_format": "text",
        "test_output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": extra_data or {},
        "tests": [
            {
                "score": t.score,
                "max_score": t.max_score,
                "status": t.status,
                "name": t.name,
                "number": t.number,
                "visibility": t.visibility,
                "output": _clip(t.output),
                "tags": [t.cls, t.prop],
                "extra_data": {"outcome": t.outcome_status,
                               **({"blocked_by": list(t.blocked_by)} if t.blocked_by else {}),
                               **({"diagnosis": t.diagnosis} if t.diagnosis else {})},
            }
            for t in card
        ],
    }


class Folder:
    """The folder results.json goes to, opened when grading starts, before the worker runs, and
    written through that handle: a worker whose uid can write the folder's parent (the uid-only
    layer, an --out under a shared folder) may rename it or put a link in its place meanwhile, and
    the grader, as root, must then write nothing anywhere else. The swap is a UsageError instead."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.descriptor = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        self.identity = _identity(os.fstat(self.descriptor))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.close(self.descriptor)

    def write(self, name, data):
        """Write `name` private to its owner (0600) under a temporary name, then rename it into place."""
        try:
            now = _identity(os.stat(self.path, follow_symlinks=False))
        except OSError:
            now = None
        if now != self.identity:
            raise UsageError(f"{self.path} was moved or replaced while grading (its parent folder is writable "
                             f"by others): write results under a folder only you can write (--out)")
        temporary = f".results-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                                 dir_fd=self.descriptor)
        except OSError as exc:  # named as the folder given, not the temporary file's name
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(clean_tree(data), handle, ensure_ascii=False, indent=1)
            os.replace(temporary, name, src_dir_fd=self.descriptor, dst_dir_fd=self.descriptor)
        except BaseException:
            os.unlink(temporary, dir_fd=self.descriptor)
            raise


def _identity(status):
    return status.st_dev, status.st_ino, stat.S_ISDIR(status.st_mode)


def write(path, data):
    """Write results.json at `path` (0600, in a folder made 0700 if it is new)."""
    path = Path(path)
    with Folder(path.parent) as folder:
        folder.write(path.name, data)
