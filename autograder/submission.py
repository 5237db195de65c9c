"""Load a submission: find the student's code in a .py, a folder, a .zip or a notebook.

Only reads files; nothing of the student's runs here. The result is the source text that the
worker will import as attention.py inside its sandbox.
"""
import ast
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_BYTES = 2 << 20
IGNORED = {"conftest.py", "setup.py", "sitecustomize.py", "usercustomize.py"}


class SubmissionUnreadable(Exception):
    """No single gradable file could be taken from the submission; code names the reason."""

    def __init__(self, code, **params):
        super().__init__(f"{code}: {params}")
        self.code, self.params = code, params


@dataclass(frozen=True)
class Submission:
    source: str
    filename: str


def _pick(names):
    """attention.py if present, else the only .py (not a test), else the only notebook."""
    paths = [PurePosixPath(n) for n in names]
    paths = [p for p in paths if "__MACOSX" not in p.parts and not p.name.startswith(".")]
    for candidate in paths:
        if candidate.name == "attention.py":
            return str(candidate)
    for suffix in (".py", ".ipynb"):
        found = [p for p in paths if p.suffix == suffix and p.name not in IGNORED
                 and not p.name.startswith("test_") and ".ipynb_checkpoints" not in p.parts]
        if len(found) == 1:
            return str(found[0])
        if len(found) > 1:
            raise SubmissionUnreadable("several_files", files=sorted(p.name for p in found))
    raise SubmissionUnreadable("no_python_file", files=sorted(p.name for p in paths)[:20])


def _decode(data, name):
    if len(data) > MAX_BYTES:
        raise SubmissionUnreadable("too_large", file=name, limit_kib=MAX_BYTES >> 10)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SubmissionUnreadable("not_utf8", file=name) from None
    return notebook_source(text, name) if name.endswith(".ipynb") else text


def load(path):
    path = Path(path)
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file()]
        chosen = _pick(str(p.relative_to(path).as_posix()) for p in files)
        target = path / chosen
        if target.stat().st_size > MAX_BYTES:
            raise SubmissionUnreadable("too_large", file=chosen, limit_kib=MAX_BYTES >> 10)
        return Submission(_decode(target.read_bytes(), chosen), PurePosixPath(chosen).name)
    if not path.is_file():
        raise SubmissionUnreadable("missing", file=str(path))
    if path.suffix == ".zip":
        try:
            with zipfile.ZipFile(path) as archive:
                members = {i.filename: i for i in archive.infolist() if not i.is_dir()}
                chosen = _pick(members)
                if members[chosen].file_size > MAX_BYTES:
                    raise SubmissionUnreadable("too_large", file=chosen, limit_kib=MAX_BYTES >> 10)
                data = archive.read(chosen)
        except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
            raise SubmissionUnreadable("bad_zip", error=str(exc)[:200]) from None
        return Submission(_decode(data, chosen), PurePosixPath(chosen).name)
    if path.suffix not in (".py", ".ipynb"):
        raise SubmissionUnreadable("no_python_file", files=[path.name])
    if path.stat().st_size > MAX_BYTES:
        raise SubmissionUnreadable("too_large", file=path.name, limit_kib=MAX_BYTES >> 10)
    return Submission(_decode(path.read_bytes(), path.name), path.name)


KEPT_STATEMENTS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _is_constant_assignment(node):
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return False
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def notebook_source(text, name="notebook.ipynb"):
    """The definitions of a notebook's code cells, as one module.

    Magics and shell lines are dropped; of the top-level code only imports, functions, classes
    and constant assignments are kept, so cells that train, plot or print are never run.
    """
    try:
        cells = json.loads(text)["cells"]
        sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                   for c in cells if c.get("cell_type") == "code"]
    except (ValueError, KeyError, TypeError):
        raise SubmissionUnreadable("bad_notebook", file=name) from None
    lines = [line for src in sources for line in src.splitlines()
             if not line.lstrip().startswith(("%", "!"))]
    code = "\n".join(lines) + "\n"
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code  # the worker reports the syntax error with its line
    kept = [node for node in tree.body if isinstance(node, KEPT_STATEMENTS) or _is_constant_assignment(node)]
    return "\n\n".join(_segment(code, node) for node in kept) + "\n"


def _segment(code, node):
    """A top-level statement's source, with its decorators (ast's segment starts after them)."""
    decorators = "".join(f"@{ast.get_source_segment(code, d)}\n" for d in getattr(node, "decorator_list", ()))
    return decorators + ast.get_source_segment(code, node, padded=False)
