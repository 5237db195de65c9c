"""Load a submission: find the student's code in a .py, a folder, a .zip or a notebook.

Only reads files; nothing of the student's runs here. The result is the source text that the
worker will import as attention.py inside its sandbox.

This runs as root in the trusted grader on whatever the student uploaded, so every read is
bounded before it happens and every failure, foreseen or not, becomes SubmissionUnreadable: a
crash here would leave no results.json at all. The limits are far above any honest submission:

- the chosen file (.py or .ipynb): MAX_BYTES = 2 MiB, of which at most one byte more is read;
- a folder: MAX_ENTRIES = 10,000 files and folders, MAX_DEPTH = 32 levels of folders, walked
  without recursion and stopped at the first limit reached;
- a .zip: MAX_ENTRIES members and a central directory of MAX_ZIP_DIRECTORY = 2 MiB, both read
  from its end records before zipfile parses the whole directory; the chosen member stored or
  compressed with Deflate, the only methods whose output zipfile reads in bounded steps;
- a notebook: MAX_CELLS = 5,000 cells and MAX_NOTEBOOK_CODE = 128 KiB of code, because its code
  is parsed here, outside the sandbox, and ast needs up to 1 KiB of memory per byte of code.

Symbolic links are refused wherever they appear (the submission itself, any entry of a folder at
any depth, any member of a zip): as root, following one would grade another student's file or
the solution.
"""
import ast
import errno
import json
import os
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .text import clean

MAX_BYTES = 2 << 20
MAX_ENTRIES = 10_000
MAX_DEPTH = 32
MAX_ZIP_DIRECTORY = 2 << 20
MAX_CELLS = 5_000
MAX_NOTEBOOK_CODE = 128 << 10
MAX_SHOWN = 200  # characters of a name or message shown to the student: zip names reach 64 KiB
IGNORED = {"conftest.py", "setup.py", "sitecustomize.py", "usercustomize.py"}

# What zipfile raises on a damaged archive or member (names that are not UTF-8 are a ValueError).
ZIP_ERRORS = (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError, NotImplementedError,
              struct.error, zlib.error)
_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")


class SubmissionUnreadable(Exception):
    """No single gradable file could be taken from the submission; code names the reason.

    The parameters reach results.json and the cohort store, so their strings (names of the
    student's files, error messages) are made valid text and cut short here.
    """

    def __init__(self, code, **params):
        params = {key: _shown(value) for key, value in params.items()}
        super().__init__(f"{code}: {params}")
        self.code, self.params = code, params


def _shown(value):
    if isinstance(value, str):
        return clean(value[:MAX_SHOWN])
    if isinstance(value, list):
        return [_shown(item) for item in value]
    return value


@dataclass(frozen=True)
class Submission:
    source: str
    filename: str


def load(path):
    """The submission at `path`, or SubmissionUnreadable saying why not: never another exception."""
    try:
        return _load(Path(path))
    except SubmissionUnreadable:
        raise
    except Exception as exc:  # unforeseen: still a verdict the student can act on, not a crash
        raise SubmissionUnreadable("unreadable", error=type(exc).__name__) from None


def _load(path):
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise SubmissionUnreadable("missing", file=str(path)) from None
    if stat.S_ISLNK(mode):
        raise SubmissionUnreadable("symlink", file=path.name)
    if stat.S_ISDIR(mode):
        chosen = _pick(_walk(path))
        data = _read(path / chosen, chosen)
    elif not stat.S_ISREG(mode):
        raise SubmissionUnreadable("missing", file=str(path))
    elif path.suffix == ".zip":
        chosen, data = _zip_member(path)
    elif path.suffix in (".py", ".ipynb"):
        chosen, data = path.name, _read(path, path.name)
    else:
        raise SubmissionUnreadable("no_python_file", files=[path.name])
    return Submission(_decode(data, chosen), clean(PurePosixPath(chosen).name))


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
            raise SubmissionUnreadable("several_files", files=sorted(p.name for p in found)[:20])
    raise SubmissionUnreadable("no_python_file", files=sorted(p.name for p in paths)[:20])


def _walk(root):
    """The regular files under root as relative paths, shallowest first (so the choice is stable).

    Iterative, never through a symlink, and stopped at the first limit reached. Fifos, sockets
    and devices are not code to grade and are passed over.
    """
    files, seen, pending = [], 0, [(root, ())]
    while pending:
        folder, parts = pending.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    raise SubmissionUnreadable("too_many_files", limit=MAX_ENTRIES)
                relative = (*parts, entry.name)
                if entry.is_symlink():
                    raise SubmissionUnreadable("symlink", file="/".join(relative))
                if entry.is_dir(follow_symlinks=False):
                    if len(relative) > MAX_DEPTH:
                        raise SubmissionUnreadable("too_deep", limit=MAX_DEPTH)
                    pending.append((entry.path, relative))
                elif entry.is_file(follow_symlinks=False):
                    files.append(relative)
    return ["/".join(parts) for parts in sorted(files, key=lambda parts: (len(parts), parts))]


def _open(path, name):
    """The regular file at path, opened for reading; a symlink in its place is refused.

    O_NOFOLLOW makes the check and the open one step; O_NONBLOCK keeps a fifo from blocking it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SubmissionUnreadable("symlink", file=name) from None
        raise
    handle = open(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        handle.close()
        raise SubmissionUnreadable("missing", file=name)
    return handle


def _read(path, name):
    """At most MAX_BYTES + 1 bytes: enough to tell a file over the limit, whatever its size."""
    with _open(path, name) as handle:
        return handle.read(MAX_BYTES + 1)


def _zip_member(path):
    """(name, first MAX_BYTES + 1 bytes) of the member of the zip at path that is to be graded."""
    with _open(path, path.name) as handle:
        try:
            count, directory = _zip_directory(handle)
            if count > MAX_ENTRIES or directory > MAX_ZIP_DIRECTORY:
                raise SubmissionUnreadable("too_many_files", limit=MAX_ENTRIES)
            with zipfile.ZipFile(handle) as archive:
                infos = archive.infolist()
                if len(infos) > MAX_ENTRIES:  # the count in the end record can lie; the directory size cannot
                    raise SubmissionUnreadable("too_many_files", limit=MAX_ENTRIES)
                for info in infos:
                    if stat.S_ISLNK(info.external_attr >> 16):
                        raise SubmissionUnreadable("symlink", file=info.filename)
                members = {info.filename: info for info in infos if not info.is_dir()}
                chosen = _pick(members)
                info = members[chosen]
                if info.flag_bits & 0x1:
                    raise SubmissionUnreadable("encrypted_zip", file=chosen)
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    # zipfile inflates bzip2 and lzma input in one call, however large the output
                    raise SubmissionUnreadable("zip_compression", file=chosen)
                with archive.open(info) as member:
                    return chosen, member.read(MAX_BYTES + 1)
        except ZIP_ERRORS as exc:
            raise SubmissionUnreadable("bad_zip", error=str(exc) or type(exc).__name__) from None


def _zip_directory(handle):
    """(member count, central directory bytes) of a zip, from the end records zipfile will use.

    ZipFile reads and parses its whole central directory as it opens, before any check of ours,
    so both must be known first. Same choice as zipfile._EndRecData: the record at the very end
    when it has no comment, else the last signature in the final 64 KiB; then the ZIP64 record
    just before its locator, whenever there is one (zipfile then ignores the 16-bit count).
    """
    size = handle.seek(0, os.SEEK_END)
    tail_start = max(size - _EOCD.size - 0xFFFF, 0)
    handle.seek(tail_start)
    tail = handle.read()
    start = len(tail) - _EOCD.size
    if start < 0 or tail[start:start + 4] != b"PK\x05\x06" or tail[-2:] != b"\0\0":
        start = tail.rfind(b"PK\x05\x06")
    if start < 0 or start + _EOCD.size > len(tail):
        raise zipfile.BadZipFile("File is not a zip file")
    count, directory = _EOCD.unpack_from(tail, start)[4:6]
    position = tail_start + start
    if position >= _ZIP64_EOCD.size + _ZIP64_LOCATOR.size:
        handle.seek(position - _ZIP64_EOCD.size - _ZIP64_LOCATOR.size)
        records = handle.read(_ZIP64_EOCD.size + _ZIP64_LOCATOR.size)
        zip64 = _ZIP64_EOCD.unpack_from(records)
        if _ZIP64_LOCATOR.unpack_from(records, _ZIP64_EOCD.size)[0] == b"PK\x06\x07" and zip64[0] == b"PK\x06\x06":
            count, directory = zip64[7], zip64[8]
    return count, directory


def _decode(data, name):
    if len(data) > MAX_BYTES:
        raise SubmissionUnreadable("too_large", file=name, limit_kib=MAX_BYTES >> 10)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SubmissionUnreadable("not_utf8", file=name) from None
    return notebook_source(text, name) if name.endswith(".ipynb") else text


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
    lines = [line for src in _code_cells(text, name) for line in src.splitlines()
             if not line.lstrip().startswith(("%", "!"))]
    code = "\n".join(lines) + "\n"
    if "\0" in code:  # ast refuses it, as a ValueError or a SyntaxError depending on the Python
        raise SubmissionUnreadable("null_bytes", file=name)
    try:
        size = len(code.encode())
    except UnicodeEncodeError:  # a lone surrogate, written in the JSON as an escape like "\ud800"
        raise SubmissionUnreadable("not_utf8", file=name) from None
    if size > MAX_NOTEBOOK_CODE:
        raise SubmissionUnreadable("notebook_code_too_large", file=name, limit_kib=MAX_NOTEBOOK_CODE >> 10)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code  # the worker reports the syntax error with its line
    except (MemoryError, RecursionError) as exc:  # nesting deeper than the parser's stack
        raise SubmissionUnreadable("notebook_unparsable", file=name, error=type(exc).__name__) from None
    kept = [node for node in tree.body if isinstance(node, KEPT_STATEMENTS) or _is_constant_assignment(node)]
    segment = _segmenter(code)
    return "\n\n".join(segment(node) for node in kept) + "\n"


def _code_cells(text, name):
    """The source of each code cell; a notebook not shaped as nbformat's is refused, not guessed at."""
    try:
        notebook = json.loads(text)
    except (ValueError, RecursionError):
        raise SubmissionUnreadable("bad_notebook", file=name) from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise SubmissionUnreadable("bad_notebook", file=name)
    if len(cells) > MAX_CELLS:
        raise SubmissionUnreadable("too_many_cells", file=name, limit=MAX_CELLS)
    sources = []
    for cell in cells:
        if not isinstance(cell, dict):
            raise SubmissionUnreadable("bad_notebook", file=name)
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise SubmissionUnreadable("bad_notebook", file=name)
        sources.append(source)
    return sources


def _segmenter(code):
    """A function giving a top-level statement's source with its decorators (ast's segment starts
    after them), in time linear in the code: ast.get_source_segment splits all of it on every call.

    `code` holds no line break but "\\n" (it was split with splitlines and joined with "\\n"), and
    ast's offsets count UTF-8 bytes, so a statement is one slice of the encoded code.
    """
    data = code.encode()
    starts = [0]
    for line in data.split(b"\n"):
        starts.append(starts[-1] + len(line) + 1)

    def text(node):
        return data[starts[node.lineno - 1] + node.col_offset:starts[node.end_lineno - 1] + node.end_col_offset].decode()

    def segment(node):
        return "".join(f"@{text(d)}\n" for d in getattr(node, "decorator_list", ())) + text(node)

    return segment
