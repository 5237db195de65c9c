"""Load a submission: find the student's code in a .py, a folder, a .zip or a notebook.

Only reads files; nothing of the student's runs here. The result is the source text that the
worker will import as the exercise's file (exercise.yml's `submission`) inside its sandbox.

This runs as root in the trusted grader on whatever the student uploaded, so every read is
bounded before it happens and every failure, foreseen or not, becomes SubmissionUnreadable: a
crash here would leave no results.json at all. The limits are far above any honest submission:

- the chosen file: MAX_BYTES = 2 MiB for a .py, MAX_NOTEBOOK_BYTES = 16 MiB for a notebook (its
  outputs, plots included, are never graded but are read and parsed), of which at most one byte
  more is read;
- a folder: MAX_ENTRIES = 10,000 files and folders, MAX_DEPTH = 32 levels of folders, walked
  without recursion and stopped at the first limit reached;
- a .zip: MAX_ENTRIES members and a central directory of MAX_ZIP_DIRECTORY = 2 MiB, both read
  from its end records before zipfile parses the whole directory; the chosen member stored or
  compressed with Deflate, the only methods whose output zipfile reads in bounded steps;
- a notebook: MAX_CELLS = 5,000 cells and MAX_NOTEBOOK_CODE = 2 MiB of code (as a .py), parsed
  here, outside the sandbox, one cell at a time; ast needs up to ~700 bytes of memory per byte of
  code (nested calls, f-strings, a long tuple of constants), so a code cell over MAX_CELL_CODE =
  128 KiB (pasted data, say) is dropped unparsed, as if it were text: the classes lose only what
  they take from it. A .py (or a zip's member) is parsed here only up to that size too (whether
  it is still the stub, whether Python reads its declared encoding); the worker, under its
  limits, is what compiles it whole;
- the whole reading: LOAD_CPU_S = 30 s of CPU and LOAD_MEMORY_MIB = 1 GiB of memory, in a forked
  child (load), whatever pass of the notebook reader an upload makes costly.

Symbolic links are refused wherever they appear (the submission itself, any entry of a folder at
any depth, any member of a zip): as root, following one would grade another student's file or
the solution.
"""
import ast
import bisect
import builtins
import codecs
import contextlib
import errno
import importlib.machinery
import importlib.util
import io
import json
import os
import pickle
import re
import resource
import signal
import stat
import struct
import symtable
import tokenize
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .exercise import EXERCISE
from .text import clean, clean_line

MAX_BYTES = 2 << 20
MAX_NOTEBOOK_BYTES = 16 << 20
MAX_ENTRIES = 10_000
MAX_DEPTH = 32
MAX_ZIP_DIRECTORY = 2 << 20
MAX_CELLS = 5_000
MAX_NOTEBOOK_CODE = 2 << 20
MAX_CELL_CODE = 128 << 10
# JSON items (objects, arrays, and values after a comma, counted as its `{`, `[` and `,`, strings'
# own included) a notebook may hold: json makes an object of each (16 MiB of `{},` took the
# grader's process to 446 MB); a real one, whose outputs are mostly base64 text, holds far fewer.
MAX_JSON_ITEMS = 1_000_000
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
    among: int = 1  # the files of its folder or zip that could have been the student's code

    @property
    def line_map(self):
        """For a notebook, the CellLines taking a line of `source` to the student's cell and line; else None."""
        return cell_lines(self.source)


def load(path):
    """The submission at `path`, or SubmissionUnreadable saying why not: never another exception.

    Read in a child process limited to LOAD_CPU_S seconds of CPU (_bounded): the limits above
    bound each input, but not every pass of the notebook reader over them (uploads of 0.2 to 2 MB
    held the grader's own process for minutes to hours, before any worker, and left no
    results.json: names looked up by computed keys against thousands of assignments, thousands of
    classes naming one metaclass). Whatever the reading costs, it ends within the limit."""
    return _bounded(_verdict, Path(path))


def _verdict(path):
    try:
        return _load(path)
    except SubmissionUnreadable:
        raise
    except MemoryError:  # past LOAD_MEMORY_MIB in the child (_bounded)
        raise SubmissionUnreadable("too_costly", limit_s=LOAD_CPU_S, limit_mib=LOAD_MEMORY_MIB) from None
    except Exception as exc:  # unforeseen: still a verdict the student can act on, not a crash
        raise SubmissionUnreadable("unreadable", error=type(exc).__name__) from None


# CPU seconds the reading of one submission may take (every notebook of a folder or zip together):
# a 2 MiB notebook of 119k assignments, at the code limit, reads in ~8 s here.
LOAD_CPU_S = 30
# MiB of memory the reading may take besides what the grader's process already held when it forked
# (a notebook's parse trees are far below it: a cell over MAX_CELL_CODE is never parsed).
LOAD_MEMORY_MIB = 1024


def _bounded(read, path):
    """read(path) in a forked child under RLIMIT_CPU = LOAD_CPU_S and LOAD_MEMORY_MIB more address
    space than the grader held, its Submission or SubmissionUnreadable sent back through a pipe;
    past either limit, SubmissionUnreadable "too_costly". Where the platform cannot fork,
    read(path) here."""
    if not hasattr(os, "fork"):
        return read(path)
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the grader's code
        status = 1
        try:
            os.close(reading)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU's default action dumps a core
            resource.setrlimit(resource.RLIMIT_CPU, (LOAD_CPU_S, LOAD_CPU_S + 5))
            _limit_address_space(LOAD_MEMORY_MIB << 20)
            try:
                answer = ("ok", read(path))
            except SubmissionUnreadable as exc:
                answer = ("unreadable", exc.code, exc.params)
            with os.fdopen(writing, "wb") as pipe:
                pipe.write(pickle.dumps(answer))
            status = 0
        finally:
            os._exit(status)
    os.close(writing)
    with os.fdopen(reading, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        raise SubmissionUnreadable("too_costly", limit_s=LOAD_CPU_S, limit_mib=LOAD_MEMORY_MIB)
    if not data or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        raise SubmissionUnreadable("unreadable", error=f"reader ended with status {status}")
    answer = pickle.loads(data)
    if answer[0] == "unreadable":
        raise SubmissionUnreadable(answer[1], **answer[2])
    return answer[1]


def _limit_address_space(more):
    """RLIMIT_AS at what this process holds plus `more` bytes; where /proc cannot say what it holds
    (not Linux), no limit: the CPU limit still ends any reading."""
    try:
        held = os.sysconf("SC_PAGE_SIZE") * int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = held + more if hard == resource.RLIM_INFINITY else min(held + more, hard)
    resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))


def _load(path):
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise SubmissionUnreadable("missing", file=str(path)) from None
    if stat.S_ISLNK(mode):
        raise SubmissionUnreadable("symlink", file=path.name)
    if stat.S_ISDIR(mode):
        names = _walk(path)
        chosen, text = _choose(names, lambda name: _read(path / name, name))
    elif not stat.S_ISREG(mode):
        raise SubmissionUnreadable("missing", file=str(path))
    elif path.suffix.lower() == ".zip":  # Beto.ZIP, Nota.IPYNB: a file name's case is the OS's, not a choice
        names, (chosen, text) = _zip_member(path)
    elif path.suffix.lower() in (".py", ".ipynb"):
        names, chosen, text = [path.name], path.name, _decode(_read(path, path.name), path.name)
    else:
        raise SubmissionUnreadable("no_python_file", files=[path.name])
    if not text.strip():  # nothing handed in: unreadable, as an empty folder is, not a stub graded 0
        raise SubmissionUnreadable("empty", file=shown_name(chosen))
    return Submission(text, shown_name(chosen), len(_candidates(names, ".py") + _candidates(names, ".ipynb")))


def shown_name(name, limit=MAX_SHOWN):
    """A file name as feedback shows it: one clean line, cut to `limit` characters (a zip member's
    name can be 60 KB of text, newlines and fake score lines included)."""
    line = clean_line(name)
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _choose(names, read):
    """(name, source text) of the file to grade among `names` (a folder's files or a zip's
    members); read(name) gives a file's first bytes.

    The exercise's file (attention.py), the shallowest, when there is one; but when its classes are
    still the stub's (_unfinished) and exactly one other .py or notebook has them all written, that
    one: the student who solved the exercise in a notebook and handed in the whole folder, the
    untouched stub with it, meant the notebook. Without it, the one .py or notebook that defines a
    graded class (a helper utils.py beside the notebook is not the submission), else the only .py,
    else the only notebook.
    """
    paths = _visible(names)
    exercises = [p for p in paths if p.name == EXERCISE.submission]
    if not exercises:
        defining = _defining(names, read)
        if defining is not None:
            return defining
        chosen = _pick(names)
        return chosen, _decode(read(chosen), chosen)
    exercise, text = _shallowest(exercises, read)
    if _unfinished(text) is not True:
        return exercise, text
    others = [name for name in _candidates(names, ".py") + _candidates(names, ".ipynb") if name != exercise]
    finished = []
    for name in others[:MAX_SCANNED]:
        try:
            other = _decode(read(name), name)
        except SubmissionUnreadable:
            continue
        if _unfinished(other) is False:
            finished.append((name, other))
    # One finished file, or copies of one (a notebook and its "Copia de"): that code.
    return finished[0] if finished and len({code for _, code in finished}) == 1 else (exercise, text)


def _shallowest(exercises, read):
    """(name, text) of the shallowest exercise file. Several at that depth (`borrador/attention.py`
    beside `final/attention.py`): the one whose classes are written when the others' are the stub's,
    any one when all hold the same code, else SubmissionUnreadable (several_exercise_files: the
    files are already named as asked, so the message only asks to keep one): which one the student
    meant cannot be told, and the first in alphabetical order is a guess."""
    tied = [str(p) for p in exercises if len(p.parts) == len(exercises[0].parts)][:MAX_SCANNED]
    texts = {name: _decode(read(name), name) for name in tied}
    if len(set(texts.values())) == 1:
        return tied[0], texts[tied[0]]
    finished = [name for name in tied if _unfinished(texts[name]) is False]
    if finished and len({texts[name] for name in finished}) == 1 and len(finished) < len(tied):
        return finished[0], texts[finished[0]]
    raise SubmissionUnreadable("several_exercise_files", files=tied[:20])


MAX_SCANNED = 8  # other files read in search of the graded classes: at most 8 x 16 MiB
_DEFINES = re.compile(rb"class\s+(?:%s)\b" % b"|".join(n.encode() for n in EXERCISE.class_names))


def _unfinished(text):
    """Whether a module's graded classes are still the stub's: True if one of them is missing, or
    its last definition has a method whose body is just `raise NotImplementedError` (a docstring,
    comments or `pass` aside); False if all are written; None if that cannot be told (code that
    does not parse, or over MAX_CELL_CODE: ast takes up to ~700 bytes of memory per byte of code,
    here in the grader's own process)."""
    if len(text) > MAX_CELL_CODE:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    last = {}  # a graded class's last binding: its ClassDef, or None if bound otherwise (an alias, an import)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            last[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.ImportFrom)):
            last.update((name, None) for name in _bound(node) if name in EXERCISE.class_names)
    for name in EXERCISE.class_names:
        if name not in last:
            return True
        for method in last[name].body if last[name] is not None else ():
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and _only_raises_not_implemented(method):
                return True
    return False


def _only_raises_not_implemented(function):
    body = [node for node in function.body if not (isinstance(node, ast.Pass) or isinstance(node, ast.Expr)
                                                  and isinstance(node.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    raised = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


def _defining(names, read):
    """(name, source text) of the only .py or notebook among a few that defines a graded class (or of
    the first of copies of one), or None."""
    candidates = _candidates(names, ".py") + _candidates(names, ".ipynb")
    if not 1 < len(candidates) <= MAX_SCANNED:
        return None
    defining = []
    for name in candidates:
        try:
            data = read(name)
            if _DEFINES.search(data):
                defining.append((name, data))
        except SubmissionUnreadable:
            continue
    if len(defining) == 1:
        return defining[0][0], _decode(defining[0][1], defining[0][0])
    try:
        texts = [_decode(data, name) for name, data in defining]
    except SubmissionUnreadable:
        return None
    # Copies of one file (a notebook and its "Copia de"): one submission.
    return (defining[0][0], texts[0]) if texts and len(set(texts)) == 1 else None


def _pick(names):
    """Without the exercise's file and without one file that defines a graded class: the only .py
    (not a test), else the only notebook."""
    for suffix in (".py", ".ipynb"):
        found = _candidates(names, suffix)
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise SubmissionUnreadable("several_files", files=sorted(PurePosixPath(p).name for p in found)[:20])
    raise SubmissionUnreadable("no_python_file", files=sorted(p.name for p in _visible(names))[:20])


def _visible(names):
    """The names as paths, shallowest first, without macOS's and hidden files."""
    paths = sorted((PurePosixPath(n) for n in names), key=lambda p: (len(p.parts), p.parts))
    return [p for p in paths if "__MACOSX" not in p.parts and not p.name.startswith(".")]


def _candidates(names, suffix):
    """The files with that suffix that could be the student's code (not tests, setup or checkpoints)."""
    return [str(p) for p in _visible(names) if p.suffix.lower() == suffix and p.name not in IGNORED
            and not p.name.startswith("test_") and ".ipynb_checkpoints" not in p.parts]


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
    """At most its limit + 1 bytes: enough to tell a file over the limit, whatever its size."""
    with _open(path, name) as handle:
        return handle.read(_limit(name) + 1)


def _limit(name):
    """The most bytes a chosen file may have: a notebook carries its outputs too."""
    return MAX_NOTEBOOK_BYTES if name.lower().endswith(".ipynb") else MAX_BYTES


def _zip_member(path):
    """(its member names, (name, source text) of the member that is to be graded) of the zip at path."""
    with _open(path, path.name) as handle, _bounded_zip(handle) as (archive, infos):
        for info in infos:
            if stat.S_ISLNK(info.external_attr >> 16):
                raise SubmissionUnreadable("symlink", file=info.filename)
        # keyed as _visible names them (./attention.py and src//attention.py are honest zips)
        members = {str(PurePosixPath(info.filename)): info for info in infos if not info.is_dir()}
        return list(members), _choose(members, lambda name: _zip_read(archive, members[name]))


@contextlib.contextmanager
def _bounded_zip(handle):
    """(ZipFile, its members) of an open zip whose central directory is known small enough first
    (MAX_ENTRIES members, MAX_ZIP_DIRECTORY bytes), or SubmissionUnreadable."""
    with _zip_errors():
        count, directory = _zip_directory(handle)
        if count > MAX_ENTRIES or directory > MAX_ZIP_DIRECTORY:
            raise SubmissionUnreadable("too_many_files", limit=MAX_ENTRIES)
        archive = zipfile.ZipFile(handle)
    with archive:
        with _zip_errors():
            infos = archive.infolist()
        if len(infos) > MAX_ENTRIES:  # the count in the end record can lie; the directory size cannot
            raise SubmissionUnreadable("too_many_files", limit=MAX_ENTRIES)
        yield archive, infos


def zip_names(path):
    """The member names of the zip at path, read within the loader's bounds; SubmissionUnreadable
    for any zip the loader would refuse."""
    with _open(path, path.name) as handle, _bounded_zip(handle) as (_, infos):
        return [info.filename for info in infos]


@contextlib.contextmanager
def _zip_errors():
    """What zipfile raises on a damaged archive or member, as the student's bad_zip."""
    try:
        yield
    except ZIP_ERRORS as exc:
        raise SubmissionUnreadable("bad_zip", error=str(exc) or type(exc).__name__) from None


def _zip_read(archive, info):
    """The first _limit + 1 bytes of one member, if it is stored in a way read in bounded steps."""
    if info.flag_bits & 0x1:
        raise SubmissionUnreadable("encrypted_zip", file=info.filename)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        # zipfile inflates bzip2 and lzma input in one call, however large the output
        raise SubmissionUnreadable("zip_compression", file=info.filename)
    with _zip_errors(), archive.open(info) as member:
        return member.read(_limit(info.filename) + 1)


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
    if len(data) > _limit(name):
        raise SubmissionUnreadable("too_large", file=name, limit_kib=_limit(name) >> 10)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        if not name.lower().endswith(".py"):
            raise SubmissionUnreadable("not_utf8", file=name) from None
        text = _declared_encoding(data, name)
    if name.lower().endswith(".ipynb") or _renamed_notebook(text):
        text = notebook_source(text, name)
    else:
        if data.startswith(codecs.BOM_UTF8) and _declares_another_encoding(data):
            raise SubmissionUnreadable("bom_and_another_encoding", file=name)
        if text.startswith("\ufeff"):  # a second BOM: Python refuses it, the worker's copy would skip it
            raise SubmissionUnreadable("bom_twice", file=name)
        text = _main_block_dropped(text)
        if cell_lines(text) is not None:  # a .py ending in the notebook map's line would have its errors
            text += "\n" if text.endswith("\n") else "\n\n"  # shown at cells it chose: a blank line after it
    try:  # a declared codec (raw_unicode_escape, utf-7...) can decode to a lone surrogate, which
        text.encode("utf-8")  # no UTF-8 copy, hash or compile() can hold
    except UnicodeEncodeError:
        raise SubmissionUnreadable("not_utf8", file=name) from None
    return text


# A top-level `if __name__ == "__main__":` line (either operand first, either quotes)
_MAIN_GUARD = re.compile(r"""if[ \t]*\(?[ \t]*(__name__[ \t]*==[ \t]*(['"])__main__\2|(['"])__main__\3[ \t]*==[ \t]*__name__)[ \t]*\)?[ \t]*:""")


def _main_block_dropped(text, imported=False):
    """A .py whose `if __name__ == "__main__":` demo does not parse here, with that block's lines
    left blank; else the text as it is. imported: the block is blanked where the text parses too
    (a `%%writefile` module's cell, which the notebook imports: its demo never runs there, while
    the loader reads `__name__` as "__main__" in every cell, as the kernel does in its own).

    Imported, as the worker imports it, the file never runs that block, so leaving it out changes
    nothing the grade sees, while the syntax error it holds would cost every point: a demo written
    for a newer Python than the grader's (Colab's 3.12 reads f"{cfg["n"]}", 3.11 does not) in a
    file that is right everywhere else. Every other line keeps its text and number. Only where
    the block's lines are the lines Python reads (_blockable): else, or where the blanked text does
    not compile either (the error is elsewhere, an `else:` follows the block), the text is left as
    it is, for the worker to report the error at its line. Compiled only up to MAX_CELL_CODE, as
    the stub check reads a .py."""
    if len(text) > MAX_CELL_CODE or "__main__" not in text or not _blockable(text) or (not imported and _parses(text)):
        return text
    try:  # where tokens start: a guard or a line after a block inside a string is not code
        starts = {token.start for token in tokenize.generate_tokens(io.StringIO(text).readline)}
    except (tokenize.TokenError, SyntaxError):
        return text
    lines = text.split("\n")  # _blockable: the only line break Python will see
    blanked = False
    for start, line in enumerate(lines):
        if not _MAIN_GUARD.match(line):
            continue
        if (start + 1, 0) not in starts:
            return text
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#"):
            end += 1
        if end < len(lines) and (end + 1, 0) not in starts and lines[end].strip():
            return text  # the line after the block is inside a token (a string) the block opened
        lines[start:end] = [""] * (end - start)
        blanked = True
    kept = "\n".join(lines)
    return kept if blanked and _parses(kept) else text


def _blockable(text):
    """Whether the lines split at "\n" are those Python reads, with their columns: no other line
    break (a bare \r is one, for an import), no form feed (it resets the column), and no declared
    encoding but UTF-8 (unicode_escape would make `\x22` a quote and `\n` a line break)."""
    if "\x0c" in text or re.search("\r(?!\n)", text):
        return False
    declared = next((m.group(1) for line in text.split("\n", 2)[:2] if (m := _CODING.match(line))), None)
    try:
        return declared is None or codecs.lookup(declared).name == "utf-8"
    except LookupError:
        return False


def _parses(text):
    try:
        compile(text, "<submission>", "exec", dont_inherit=True)  # what import compiles, never run
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def _declared_encoding(data, name):
    """The text of a .py that is not UTF-8 but declares its encoding (PEP 263, `# -*- coding:
    latin-1 -*-` on line 1 or 2), as Python itself would read it. The declaration then says
    utf-8, the encoding the worker's copy is written in; the lines keep their numbers."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        if codecs.lookup(encoding).name == "utf-8":
            raise UnicodeError("no other encoding declared")
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeError):
        raise SubmissionUnreadable("not_utf8", file=name) from None
    head = text.split("\n", 2)
    for i, line in enumerate(head[:2]):
        if _CODING.match(line):
            head[i] = _CODING.sub(lambda m: m.group(0)[:m.start(1) - m.start(0)] + "utf-8", line, count=1)
            break
    text = "\n".join(head)
    if not _python_reads(data, text, name):
        raise SubmissionUnreadable("not_utf8", file=name)
    return text


def _declares_another_encoding(data):
    """Whether a .py's first two lines declare an encoding Python refuses beside a UTF-8 BOM
    (`# -*- coding: latin-1 -*-`: "encoding problem: latin-1 with BOM"): neither `python file.py`
    nor an import runs it, so it must not be graded as the UTF-8 text it also is."""
    try:
        tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        return True
    return False


def _python_reads(data, text, name):
    """Whether Python itself reads the bytes as the text they decode to. detect_encoding finds
    codecs that Python's tokenizer refuses for source (UTF-16 and UTF-32 are not ASCII-compatible:
    null bytes; utf-7's '+'): a file that neither `python file.py` nor an import can run must not
    be graded as the text a codec made of it. Judged by compiling both: where only the text
    compiles, the codec is the problem; where neither does, the syntax error is the student's, and
    is reported as such, at its line. Over MAX_CELL_CODE, too long to compile here (the module's
    docstring): not read, as a file Python refuses (the student saves it as UTF-8)."""
    if len(data) > MAX_CELL_CODE:
        return False

    def compiles(source):
        try:
            compile(source, name, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return False
        return True
    return compiles(data) or not compiles(text)


_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")  # PEP 263's declaration


def _renamed_notebook(text):
    """Whether a .py holds a notebook's JSON (a notebook renamed attention.py, as the statement asks
    for that name): then it is read as the notebook it is."""
    if not text.lstrip().startswith("{") or _json_items(text) > MAX_JSON_ITEMS:
        return False
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "nbformat" in data and (
        isinstance(data.get("cells"), list) or isinstance(data.get("worksheets"), list))


# ---- notebooks ---------------------------------------------------------------------------------
#
# A notebook is graded as the module its code cells make when run from the top, keeping only what
# the graded classes need, so that its training loops, plots, installs and Colab helpers never run
# and cost nothing (notebook_source says what is kept). The module ends with one comment line,
# LINES_MARKER and a JSON list, mapping its lines back to the student's cells; it travels with the
# source wherever the source goes (a batch writes it to the exercise's file and loads it again), and the
# grader reads it back with cell_lines() to report "code cell N, line M".

ASKED = (*EXERCISE.class_names, *EXERCISE.notebook_names)  # what the statement asks a notebook to define
PYTHON_CELL_MAGICS = ("capture", "time", "prun")  # their cell runs in the kernel as Python
WRITEFILE_MAGICS = ("writefile", "file")
LINES_MARKER = "# autograder: the notebook cells of the lines above: "
# Names a notebook's code may read without binding them: Python's builtins, and those IPython adds
# (a debug method calling display() needs no import to be graded).
_BUILTINS = frozenset(dir(builtins)) | {"display", "get_ipython", "In", "Out"}
_ASSIGN_FROM_MAGIC = re.compile(r"\s*[\w.]+(?:\s*,\s*[\w.]+)*\s*=\s*[!%]")  # files = !ls
_HELP = re.compile(r"\s*(?:\?{1,2}[\w.]+|[\w.]+\?{1,2})\s*")  # obj? and ??obj
_MAYBE_IPYTHON = re.compile(r"^[^\S\n]*[%!?/,;]|=[^\S\n]*[!%]|\?[^\S\n]*$", re.MULTILINE)  # a line of those may be there
# IPython's autocall escapes, as its inputtransformer2 writes them: `/f a b` is f(a, b), `,f a b` is
# f("a", "b"), `;f a b` is f("a b")
_AUTOCALLS = {"/": lambda name, args: "%s(%s)" % (name, ", ".join(args.split())),
              ",": lambda name, args: '%s("%s")' % (name, '", "'.join(args.split())),
              ";": lambda name, args: '%s("%s")' % (name, args)}
_IMPORTS = (ast.Import, ast.ImportFrom)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete, ast.If, ast.Try, ast.Match,
               *(getattr(ast, name) for name in ("TryStar", "TypeAlias") if hasattr(ast, name)))
_SCOPES = (*_DEFINITIONS, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Methods that change a dict, list or set in place: `OPTS.update(...)` at the top of a cell modifies
# OPTS as `OPTS[k] = v` does, and is kept with it.
_MUTATORS = frozenset({"update", "setdefault", "append", "extend", "insert", "add", "discard", "remove", "pop",
                       "popitem", "clear", "sort", "reverse", "__setitem__", "__delitem__", "__setattr__",
                       "__delattr__", "difference_update",
                       "intersection_update", "symmetric_difference_update"})


class _Statement:
    """One top-level statement of a cell that could be kept: where its text is and what it binds.

    Its text is decoded only when needed: a notebook may hold thousands of statements nothing uses.
    """

    __slots__ = ("data", "start", "end", "cell", "line", "kind", "binds", "reads")

    def __init__(self, data, start, end, cell, line, kind, binds, reads=()):
        self.data, self.start, self.end = data, start, end
        self.cell, self.line, self.kind, self.binds = cell, line, kind, binds
        self.reads = reads  # an "alias" (_written_module_import): the modules it names, then their names

    @property
    def text(self):
        return self.data[self.start:self.end].decode()


def notebook_source(text, name="notebook.ipynb"):
    """The module made of a notebook's code cells, in their order, keeping what the graded classes need.

    - A cell that starts with a cell magic is dropped whole (%%bash, %%html, %%timeit, %%writefile
      of a file that is not Python...), except %%capture, %%time and %%prun, whose body the kernel
      runs as Python, and %%writefile of a .py (attention.py, or a module the notebook imports,
      loads by a call (importlib.import_module, __import__, runpy) or %runs: `from capas import
      SelfAttention` is dropped, its code being here already): their
      magic line alone is dropped. A .py that is only written runs nowhere: dropped whole. Markdown and raw cells never count.
    - Line magics, shell lines (!pip install...) and `obj?` help lines are dropped; `x = !cmd`, `x =
      %magic` and the autocall escapes (`/f a b`) are read as IPython's Python (_as_python).
    - A code cell over MAX_CELL_CODE is dropped whole, unparsed (the module's docstring: why).
    - Of the top-level statements, what is kept is: the classes the statement asks for (ASKED),
      then, transitively, every import, definition and assignment (also `if`/`try` blocks, and
      `OPTS.update(...)`-like calls that change a dict, list or set in place; a class or def that
      the notebook's decorator, base class or metaclass registers: _registering; a function a
      kept statement looks up in globals() by a computed name: _names_looked_up) that binds or
      changes a name kept code uses: in class and function bodies, default arguments, decorators,
      base classes, or another kept assignment. A star import is kept when some used name is
      bound nowhere else, or, in its place, after kept code when its module is installed (it may
      rebind what the classes use, as in the kernel). Nothing else runs: loops, prints, plots, calls, unused imports
      (tqdm, google.colab...), unused functions, classes and constants, anything calling
      get_ipython() (unless it binds last a name kept code uses: _needed). `from __future__`
      imports are kept, first.

    Each kept statement is its original text; every line of the module maps to one line of one
    code cell, counted as Jupyter does (cells from 1, code cells only; lines from 1, the magic
    line included). A cell that does not parse (Python 3.12's f-strings in a demo cell, in a
    grader on 3.11) is dropped, as the kernel drops it, unless it may bind a name the kept code
    uses or the statement asks for (_may_bind), or the kept code lacks a graded class: then it is
    returned alone, so that the worker reports its syntax error at the student's own line.
    """
    sources = _code_cells(text, name)
    used = _modules_used(sources)
    magics = [_cell_magic(_cleaned_lines(source))[1] if len(source) <= MAX_CELL_CODE else None for source in sources]
    for _ in range(PACKAGE_DEPTH):  # a written package's relative imports load more of its modules
        writes = {number: _written_module(magic, used) or frozenset() for number, magic in enumerate(magics, 1)}
        more = {module for number, modules in writes.items() if modules
                for module in _relative_imports(sources[number - 1], _package_of(max(modules, key=len), magics[number - 1]))}
        if more <= used:
            break
        used |= more
    written = _Written(set().union(*writes.values()))
    written.named = _names_for_modules(sources, written)
    written.packages = {cell: _package_of(max(modules, key=len), magics[cell - 1])
                        for cell, modules in writes.items() if modules}
    # a cell over MAX_CELL_CODE is dropped whole before it is read line by line (tokenizing a 16 MiB
    # cell took 27 s of the grader's CPU); its size still counts against MAX_NOTEBOOK_CODE
    cells = [("", None, ()) if len(source) > MAX_CELL_CODE else _cell_python(source, used) for source in sources]
    size = sum(len(source.encode("utf-8", "surrogatepass")) + 1 for source in sources if len(source) > MAX_CELL_CODE)
    for code, _, _ in cells:
        if "\0" in code:  # ast refuses it, as a ValueError or a SyntaxError depending on the Python
            raise SubmissionUnreadable("null_bytes", file=name)
        try:
            size += len(code.encode()) + 1
        except UnicodeEncodeError:  # a lone surrogate, written in the JSON as an escape like "\ud800"
            raise SubmissionUnreadable("not_utf8", file=name) from None
    if size > MAX_NOTEBOOK_CODE:
        raise SubmissionUnreadable("notebook_code_too_large", file=name, limit_kib=MAX_NOTEBOOK_CODE >> 10)
    run_as_main = {_run_module(path) for source in sources if len(source) <= MAX_CELL_CODE
                   for found in _RUN.findall(source) for path in found if path}  # %run: __name__ is "__main__"
    statements, broken = [], []
    for number, (code, with_pass, timed) in enumerate(cells, 1):
        if len(code.encode()) > MAX_CELL_CODE:
            continue
        if writes.get(number):  # a written module's demo, which importing it never runs (as in a .py); %run does
            code = _main_block_dropped(code, imported=not writes[number] & run_as_main)
        try:
            try:
                tree = ast.parse(code)
            except SyntaxError:
                if with_pass is None:
                    raise
                tree, code = ast.parse(with_pass), with_pass
            # what parses may still not compile (`def f(w, w)`, a `return` outside a function):
            # the kernel runs none of such a cell, as of one that does not parse
            compile(tree, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        except SyntaxError:
            broken.append((code, number))
            continue
        except (MemoryError, RecursionError) as exc:  # nesting deeper than the parser's stack
            raise SubmissionUnreadable("notebook_unparsable", file=name, error=type(exc).__name__) from None
        statements += [s for s in _statements(tree, code, number, written) if s.line not in timed or not _binds_a_name(s)]
        del tree
    reset = max(((number, line) for number, source in enumerate(sources, 1) if len(source) <= MAX_CELL_CODE
                 for line in _resets(source)), default=None)
    if reset is not None:  # `%reset -f` empties the kernel's namespace: nothing bound before it is left
        statements = [s for s in statements if (s.cell, s.line) > reset]
    statements = _reimported(statements, writes)
    _read_through_aliases(statements, writes)
    statements = _attached_or_dropped(statements)
    _registering(statements)
    try:
        kept = _needed(statements, {cell: modules for cell, modules in writes.items() if modules})
        if broken:
            needed = set(ASKED).union(*(_uses(s) or () for s in kept))
            graded = set(EXERCISE.class_names) <= set().union(*(s.binds for s in kept))
            for code, number in broken:
                bound = _may_bind(code)
                if not graded or bound is None or bound & needed:
                    return _module([(code, number, 1)])  # the worker reports the syntax error with its line
    except (MemoryError, RecursionError) as exc:
        raise SubmissionUnreadable("notebook_unparsable", file=name, error=type(exc).__name__) from None
    return _module([(s.text, s.cell, s.line) for s in kept])


def _may_bind(code):
    """Every name a cell that does not parse may bind at the top level, read from its tokens (no
    parse: a def or class, the names an import binds, the first name of each target before an
    assignment's `=`, a `for` or `as` variable, a walrus), over-read: that only costs the notebook
    the syntax error's report. None with a star import, which may bind any, or where the cell
    cannot even be cut into tokens. Linear in the cell (a regular expression read before it took
    cubic time in a run of spaces: one 35 KB notebook held a grading, and a batch, for days)."""
    names = set()
    try:
        for line in _logical_lines(tokenize.generate_tokens(io.StringIO(code).readline)):
            bound = _line_binds(line)
            if bound is None:
                return None
            names |= bound
    except (tokenize.TokenError, SyntaxError):  # an unclosed bracket or string; a dedent that matches no indent
        return None
    return names


def _logical_lines(tokens):
    """The significant tokens of each logical line, as (type, string) lists."""
    line = []
    for token in tokens:
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if line:
                yield line
            line = []
        elif token.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            line.append((token.type, token.string))
    if line:
        yield line


_ASSIGNING = frozenset({"=", "+=", "-=", "*=", "/=", "//=", "%=", "@=", "&=", "|=", "^=", ">>=", "<<=", "**="})


def _line_binds(line):
    """What one logical line (_logical_lines) may bind: a set, or None for a star import."""
    strings = [string for _, string in line]
    head = 1 if strings[:1] == ["async"] else 0
    if strings[head:head + 1] in (["def"], ["class"]):
        return set(strings[head + 1:head + 2])
    if strings[:1] in (["import"], ["from"]):
        if "*" in strings:
            return None
        names, part = set(), []
        imported = strings[strings.index("import") + 1:] if "import" in strings else []
        for string in [*imported, ","]:
            if string != ",":
                part += [string] if string not in ("(", ")") else []
            elif part:
                names.add(part[-1] if len(part) >= 3 and part[-2] == "as" else part[0])
                part = []
        return names
    names, targets, first, depth, loop = set(), [], None, 0, False
    for index, (kind, string) in enumerate(line):
        if kind == tokenize.NAME:
            if loop and string != "in":
                names.add(string)  # a `for` variable
            loop = string == "for" or loop and string != "in"
            if string == "as" and index + 1 < len(line):
                names.add(line[index + 1][1])
            first = first or string
        elif string in ("(", "[", "{"):
            depth += 1
        elif string in (")", "]", "}"):
            depth = max(depth - 1, 0)
        elif string == ":=" and index and line[index - 1][0] == tokenize.NAME:
            names.add(line[index - 1][1])
        elif string == "," or depth == 0 and string in (":", ";"):  # `a, (b, c) = ...`: b and c too
            targets, first = ([] if string == ";" else [*targets, first]), None
        elif depth == 0 and string in _ASSIGNING:
            names.update(target for target in (*targets, first) if target)
            targets, first = [], None
    names.discard("in")
    return names


def _writing_cells(writes):
    """{module: the cells that write it}, from writes ({cell: the modules it writes})."""
    writing = {}
    for cell, modules in writes.items():
        for module in modules:
            writing.setdefault(module, set()).add(cell)
    return writing


def _reimported(statements, writes):
    """statements, each `from m import name` of a module m a cell writes (a "reimport") replaced by
    a copy of the written module's binding of each name that a statement of another cell rebound
    since (a throwaway `class SelfAttention: pass` tried between the %%writefile cell and the
    import): in Jupyter the import binds the module's again; here, where the module's code is
    part of this one, the copy does (and maps to the module's cell). Nothing where none was.
    `import m as at` of such a module (_aliased) gives `at` the module's bindings, leaving the
    notebook's own. At most REIMPORT_STEPS bindings are looked at in all (a notebook of 100k `from
    m import *` lines must not cost the grader's process minutes): past them, imports are dropped
    as before, and aliases left as they were."""
    writing = _writing_cells(writes)
    public, bound = {}, {}  # module -> the (public) names its cells bind, in the order bound
    for statement in statements:
        if statement.kind not in ("reimport", "star"):
            for module in writes.get(statement.cell, ()):
                public.setdefault(module, {}).update((n, None) for n in statement.binds if not n.startswith("_"))
                bound.setdefault(module, {}).update((n, None) for n in statement.binds)
    result, binders, steps = [], {}, [REIMPORT_STEPS]  # binders: name -> indexes in result that bind it
    room = [MAX_NOTEBOOK_CODE]  # bytes of copies: each is its binding's whole text again

    def add(statement):
        for name in statement.binds:
            binders.setdefault(name, []).append(len(result))
        result.append(statement)

    def affordable(again):
        """Whether the copies of `again` fit in what is left of the copies' bytes; past it, as past
        REIMPORT_STEPS (an attacker's 700 imports of a 15 KB def: 1.2 GB while reading; of a
        120 KB import line, a module of gigabytes sent back to the grader)."""
        room[0] -= sum(own.end - own.start + latest.end - latest.start for own, latest in again.values())
        if room[0] < 0:
            steps[0] = -1
        return room[0] >= 0

    def rebound(names, cells):
        """{name: (the module's binding, the latest)} of each name rebound since the module's cells
        bound it; None past the bound."""
        found = {}
        for name in names:
            indexes = binders.get(name, ())
            own = None
            steps[0] -= 1
            for index in reversed(indexes):
                steps[0] -= 1
                if result[index].cell in cells:
                    own = index
                    break
            if steps[0] < 0:
                return None
            if own is not None and indexes[-1] != own:
                found[name] = (result[own], result[indexes[-1]])
        return found

    for statement in statements:
        if statement.kind == "alias" and steps[0] >= 0 and _aliased(statement):
            modules = [module for module in statement.reads if module in writing]
            cells = set().union(*(writing[module] for module in modules))
            again = rebound([n for module in modules for n in bound.get(module, ())], cells)
            if again and affordable(again):
                for own, _ in again.values():
                    add(_copy(own))
                text = statement.text.replace("__import__(__name__)", _SNAPSHOT).encode()
                add(_Statement(text, 0, len(text), statement.cell, statement.line, "alias", statement.binds,
                               statement.reads))
                for _, latest in again.values():
                    add(_copy(latest))
                continue
        if statement.kind != "reimport":
            if statement.kind == "star":
                result.append(statement)
            else:
                add(statement)
            continue
        if steps[0] < 0:
            continue  # past the bound: dropped, as before
        module = statement.reads[0]
        again = rebound(public.get(module, ()) if statement.binds == ["*"] else statement.binds,
                        writing.get(module, set()))
        if again is None or not affordable(again):
            continue  # past the bound: this import and the later ones are dropped, as before
        for own, _ in again.values():
            add(_copy(own))
    return result


# What `import m as at` binds `at` to where names of m were rebound since m's cell: the module's
# names as they are at the import (the copies of m's bindings just run), not as later cells leave them.
_SNAPSHOT = "__import__('types').SimpleNamespace(**globals())"


def _aliased(statement):
    """Whether an "alias" statement binds each of its names to this module (`at = __import__(__name__)`),
    with no package namespace (`import modelos.atencion`) in it."""
    return "SimpleNamespace" not in statement.text and "__import__(__name__)" in statement.text


def _copy(statement):
    """Another statement of the same text, cell and names: the same binding, run again."""
    return _Statement(statement.data, statement.start, statement.end, statement.cell, statement.line,
                      statement.kind, statement.binds, statement.reads)


# How far _registering follows a class's bases, each of the notebook's, for an __init_subclass__ or
# a metaclass: a few levels in any notebook; thousands in a hostile one would exhaust the stack.
HOOK_DEPTH = 64

# How many rounds of a written package's relative imports notebook_source follows (a package
# imports a module that imports another...): a notebook's packages are a level or two deep.
PACKAGE_DEPTH = 16

# _names_looked_up's bound on the statements it reads: a notebook has a few such lookups at most.
DYNAMIC_LOOKUPS = 100

# _reimported's bound on the bindings it looks at: a notebook's few imports of its own modules look
# at a handful.
REIMPORT_STEPS = 200_000


def _read_through_aliases(statements, writes):
    """Give each alias (`import capas.core` of a module a cell writes) as reads every name the cells
    writing those modules bind: what the module may read of them. Indexed by module and memoized
    by the names an alias imports, so that it takes time linear in the statements (compared one
    by one, 233k `import c` lines against each other were hours in the grader, before any limit)."""
    bound_in, writing = {}, _writing_cells(writes)
    for statement in statements:
        bound_in.setdefault(statement.cell, set()).update(statement.binds)
    found = {}
    for alias in (s for s in statements if s.kind == "alias"):
        names = frozenset(alias.reads)
        if names not in found:
            cells = {cell for module in names for cell in writing.get(module, ())}
            found[names] = frozenset(bound for cell in cells for bound in bound_in.get(cell, ()))
        alias.reads = set(found[names])


def _cell_python(source, used):
    """(Python, Python with `pass`, timed) of a code cell, as many lines as the cell has: its IPython
    lines blank in the first, and in the second, when there is an indented one after some code,
    that one a `pass` (`if IN_COLAB:` over `    !pip install ...` needs a statement); timed: the
    lines (from 1) the kernel runs inside %timeit's function, where a name bound stays there and
    only a change to an object (`SelfAttention.forward = f`) reaches the notebook. ("", None, ())
    for a cell dropped whole. used: _modules_used's (what a %%writefile cell must write to be kept)."""
    lines = _cleaned_lines(source)
    source = "\n".join(lines)
    if not _MAYBE_IPYTHON.search(source):
        return source, None, ()
    magics, magic = _cell_magic(lines)
    timed = set()
    if magic is not None and magic[2:].split()[:1] == ["timeit"]:
        timed.update(range(1, len(lines) + 1))
    elif magic is not None and _written_module(magic, used) is None:
        return "", None, ()
    for index in magics:
        lines[index] = ""
    ipython = _ipython_lines(lines)
    # the lines that go on an IPython line ending in a backslash (`!ls \`): its command, not a statement
    continued = {index for index in ipython if index - 1 in ipython and lines[index - 1].rstrip().endswith("\\")}
    blank, with_pass, code_seen = [], [], False
    for index, line in enumerate(lines):
        stripped = line.lstrip()
        indent = line[:len(line) - len(stripped)]
        timing = _TIMED.match(stripped) if index in ipython and not indent else None
        if timing:  # `%time x = f()` runs its statement in the kernel; %timeit, in a function
            blank.append(stripped[timing.end():])
            with_pass.append(blank[-1])
            code_seen = True
            if timing[1].startswith("timeit"):
                timed.add(index + 1)
        elif index in ipython and index not in continued and (python := _as_python(line)) is not None:
            blank.append(python)
            with_pass.append(blank[-1])
            code_seen = True
        elif index in ipython:
            blank.append("")
            with_pass.append(indent + "pass" if indent and code_seen else "")
        else:
            code_seen = code_seen or bool(stripped)
            blank.append(line)
            with_pass.append(line)
    return "\n".join(blank), ("\n".join(with_pass) if with_pass != blank else None), timed


def _as_python(line):
    """The Python IPython runs for a line that may change the notebook's names or objects, or None
    for any other IPython line (`!cmd`, `%magic`, `obj?`: dropped). `x = !cmd` and `x = %magic
    args` bind x to what IPython returns (IPython's own text: get_ipython() is not there where the
    grader runs, so such a line kept because the classes use x fails at import, at its own line,
    saying so; dropped, an earlier `x = ...` was graded where the kernel holds the command's
    output); the autocall escapes call their function (`/setattr SelfAttention forward f` patched
    the kernel's class and not the graded one)."""
    assigned = _ASSIGN_FROM_MAGIC.match(line)
    if assigned:
        target, escape, content = line[:assigned.end() - 1], line[assigned.end() - 1], line[assigned.end():]
        if escape == "!":
            return f"{target}get_ipython().getoutput({content!r})"
        magic, _, args = content.partition(" ")
        return f"{target}get_ipython().run_line_magic({magic!r}, {args!r})"
    stripped = line.lstrip()
    if stripped[:1] in _AUTOCALLS:
        name, _, args = stripped[1:].partition(" ")
        return line[:len(line) - len(stripped)] + _AUTOCALLS[stripped[0]](name, args)
    return None


def _binds_a_name(statement):
    """Whether a statement binds a name where it runs (a def, a class, an import, `x = ...`), rather
    than only changing an object (`SelfAttention.forward = f`, `OPTS["x"] = 1`, `setattr(...)`)."""
    try:
        tree = ast.parse(statement.text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (*_DEFINITIONS, *_IMPORTS)) or isinstance(node, (ast.Name, ast.NamedExpr)) and not isinstance(
                getattr(node, "ctx", ast.Store()), ast.Load):
            return True
        if not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _cell_magic(lines):
    """(the indexes of a cell's magic lines, the magic that decides what the rest is, or None):
    IPython reads a cell magic on the first line (leading blank lines skipped). %%capture, %%time
    and %%prun run the rest as a cell of its own, which may start with another (`%%capture` over
    `%%writefile notas.py` only writes a file): read on past them to the first other magic, or
    to code."""
    magics, start = [], 0
    while True:
        first = next((i for i in range(start, len(lines)) if lines[i].strip()), None)
        if first is None or not lines[first].startswith("%%"):
            return magics, None
        magics.append(first)
        words = lines[first][2:].split()
        if not (words and words[0] in PYTHON_CELL_MAGICS):
            return magics, lines[first]
        start = first + 1


def _cleaned_lines(source):
    """A code cell's lines as IPython's clean-up leaves them before it reads anything else, the
    count of lines kept: the first line's indentation taken off every line that has it (a cell
    pasted indented runs in Jupyter), then the prompts of a session pasted from a Python console
    (`>>> `, `... `) or from IPython (`In [3]: `, `   ...: `) taken off, when the first line that
    is not blank has one (or the line after it, a continuation prompt: IPython's inputtransformer2)."""
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    first = next((i for i, line in enumerate(lines) if line and not line.isspace()), None)
    if first is None:
        return lines
    indent = lines[first][:len(lines[first]) - len(lines[first].lstrip(" \t"))]
    if indent:
        lines = [line[len(indent):] if line.startswith(indent) else line for line in lines]
    for initial, prompt in _PROMPTS:
        if initial.match(lines[first]) or first + 1 < len(lines) and prompt.match(lines[first + 1]):
            lines = [prompt.sub("", line, count=1) for line in lines]
    return lines


def _resets(source):
    """The lines (from 1) of a cell's `%reset -f` (or `-f -s`) at its top level: the kernel forgets
    every name the notebook bound before (a notebook ending in one has no class in the kernel,
    and was graded on those before: 48)."""
    lines = _cleaned_lines(source)
    if _cell_magic(lines)[1] is not None:
        return []  # a cell magic's cell (%%bash, %%writefile...): its lines are not the kernel's commands
    return [index + 1 for index, line in enumerate(lines) if _RESET.fullmatch(line.rstrip())]


_RESET = re.compile(r"%reset(?=.*[ \t]-f\b)(?:[ \t]+-[fs])+")
# (the first line's prompt, any line's prompt) of a Python console and of IPython's
_PROMPTS = ((re.compile(r"^>>>( |$)"), re.compile(r"^(>>>|\.\.\.)( |$)")),
            (re.compile(r"^((\[nav\]|\[ins\])? )?In \[\d+\]: |^[ \t]*\.{3,}: ?"),
             re.compile(r"^((\[nav\]|\[ins\])? )?In \[\d+\]: |^[ \t]*\.{3,}: ?")))
# `%time STATEMENT` (the kernel runs the statement in the notebook's namespace, timed) and
# `%timeit [-n1 -r1 ...] STATEMENT` (in a function of its own, many times)
_TIMED = re.compile(r"%(time|timeit(?:[ \t]+-(?:[nrp][ \t]*\d+|[tcqo]))*)[ \t]+(?=\S)")


def _written_module(magic_line, used):
    """The names the module a `%%writefile name.py` line writes may be imported by, or None: its
    cell is the code of that module when it is the exercise's file (attention.py: what the student
    hands in) or one the notebook imports or runs (`used`: _modules_used); a file the kernel only
    writes runs nowhere (a class fixed there and never imported once scored 48 where the notebook's
    own earned 43). A file in a folder is imported by its dotted path from any folder above it
    (modelos/atencion.py as `modelos.atencion`, or as `atencion` from inside modelos/; /content/x.py
    as `x`); modelos/__init__.py is the package `modelos`."""
    if magic_line is None:
        return None
    words = magic_line[2:].split()
    if len(words) < 2 or words[0] not in WRITEFILE_MAGICS:
        return None
    path = PurePosixPath(words[-1].strip("'\""))
    if path.suffix != ".py":
        return None
    parts = [part for part in path.with_suffix("").parts if part not in ("/", ".")]
    if parts[-1] == "__init__" and len(parts) > 1:  # modelos/__init__.py is the package modelos
        parts = parts[:-1]
    names = frozenset(".".join(parts[i:]) for i in range(len(parts)))
    return names if path.name == EXERCISE.submission or names & used else None


# What imports or runs a module the notebook may write: `import m`, `import a.m as x, n`,
# `from m import ...` (also indented, in an if or try), `%run m.py` / `%run -i m.py` / `%run m`
# (IPython adds .py to a name that is no file; `%run -m m` runs it by module name),
# exec(open("m.py").read()), runpy.run_path("m.py"), and the calls that import or run a module by
# a literal name (_NAMED_IN_CODE).
_IMPORTED = re.compile(r"^[ \t]*(?:import[ \t]+([\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*)"
                       r"|from[ \t]+([\w.]+)[ \t]+import\b[ \t(]*([\w \t,]*))", re.MULTILINE)
# A file name holds no parenthesis and is at most 255 bytes: bounded, the pattern reads each
# position of a cell a bounded number of times (unbounded, `exec(open(` repeated over a 16 MB cell
# took hours, before any limit of the worker applied).
_RUN = re.compile(r"""^[ \t]*%run(?:[ \t]+-\w+)*[ \t]+['"]?([^'"\s()]{1,255}?)(?:\.py)?(?=['"\s]|$)"""
                  r"""|\b(?:exec\(\s*open|run_path)\(\s*['"]?([^'"\s()]{1,255})\.py\b""", re.MULTILINE)
# importlib.import_module("m"), __import__("m"), runpy.run_module("m")...: by what they return, the
# module itself or (the run_ functions) a dict of its names (_written_module_loaded)
_LOADERS = {"import_module": "module", "__import__": "module", "module_from_spec": "module",
            "run_module": "names", "run_path": "names"}
# A module's file or name written as an argument (`spec_from_file_location("m", "m.py")`,
# `run_path(path_name="m.py")`, `with open("m.py") as f: exec(f.read())`): the notebook loads it
# somehow, so a %%writefile of it is code (only names a notebook writes count; a written file only
# named in a sentence, "guardé capas.py", or a string that happens to be its name, is not)
_NAMED_IN_CODE = re.compile(r"""[(,][ \t]*(?:\w+[ \t]*=[ \t]*)?['"]([\w./-]{1,255})['"]""")
# a loader called with a name (`import_module(MODULO)`): the module is what the name is bound to
_LOADED_BY_NAME = re.compile(r"""\b(?:import_module|__import__|run_module|run_path)\([ \t]*(?:\w+[ \t]*=[ \t]*)?([A-Za-z_]\w*)[ \t]*[,)]""")
# `NAME = "m"` or `NAME = "m.py"`, and `spec = ...spec_from_file_location(name, "m.py")`: what a
# loader call given NAME or spec loads (_written_module_loaded)
_LITERAL_BOUND = re.compile(r"""^[ \t]*([A-Za-z_]\w*)[ \t]*=[ \t]*['"]([\w./-]{1,255})['"][ \t]*(?:#.*)?$""", re.MULTILINE)
_SPEC_BOUND = re.compile(r"""^[ \t]*([A-Za-z_]\w*)[ \t]*=[ \t]*[\w.]*spec_from_file_location\([^,()\n]{0,300},"""
                         r"""[ \t]*(?:location[ \t]*=[ \t]*)?['"]([^'"()\n]{1,255})['"]""", re.MULTILINE)


class _Written(frozenset):
    """The dotted names the modules a notebook writes may be imported by; `named`: {a name of the
    notebook: the module it stands for} (_names_for_modules); `packages`: {a writing cell: the
    package its module is in, for its relative imports}."""
    named = {}
    packages = {}


def _package_of(module, magic_line):
    """The package a written module's relative imports start from: the module itself for a
    package's __init__.py (modelos), else the one above it (modelos for modelos.capas)."""
    return module if (magic_line or "").rstrip().rstrip("'\"").endswith("__init__.py") else module.rpartition(".")[0]


# `from .capas import X`, `from .. import capas`: a written module's relative imports
_RELATIVE = re.compile(r"^[ \t]*from[ \t]+(\.{1,20})([\w.]{0,255})[ \t]+import\b[ \t(]*([\w \t,]{0,2000})", re.MULTILINE)


def _relative_imports(source, package):
    """The absolute modules a written module's relative imports may load, from its package."""
    found = set()
    for dots, module, names in _RELATIVE.findall(source) if package else ():
        parts = package.split(".")
        if len(dots) - 1 >= len(parts):
            continue
        base = ".".join(parts[:len(parts) - (len(dots) - 1)])
        origin = f"{base}.{module}" if module else base
        found |= {origin, *(f"{origin}.{name.split()[0]}" for name in names.split(",") if name.strip())}
    return found


def _names_for_modules(sources, written):
    """{name: written module} for each top-level name bound to a written module's name or file, or
    to a spec of its file: `MODULE = "capas"`, `spec = spec_from_file_location("c", "capas.py")`."""
    named = {}
    for source in sources:
        if len(source) > MAX_CELL_CODE:
            continue
        for pattern in (_LITERAL_BOUND, _SPEC_BOUND):
            for name, value in pattern.findall(source):
                module = _run_module(value)
                if module in written:
                    named[name] = module
    return named


def _modules_used(sources):
    """The dotted module names a notebook's cells import or run (the code of every cell, read as
    text: a cell that does not parse may still import)."""
    used, bound, loaded = set(), {}, set()
    for source in sources:
        if len(source) > MAX_CELL_CODE:  # dropped whole, unread (notebook_source)
            continue
        bound.update(_LITERAL_BOUND.findall(source))
        loaded.update(_LOADED_BY_NAME.findall(source))
        for imports, origin, taken in _IMPORTED.findall(source):
            used.update(part.split()[0] for part in imports.split(",") if part.strip())
            if origin:  # `from modelos import atencion` may import the module modelos/atencion.py
                used.update([origin, *(f"{origin}.{part.split()[0]}" for part in taken.split(",") if part.strip())])
        used.update(_run_module(path) for found in _RUN.findall(source) for path in found if path)
        used.update(_run_module(path) for path in _NAMED_IN_CODE.findall(source))
    used.update(_run_module(bound[name]) for name in loaded if name in bound)
    return frozenset(used)


def _run_module(path):
    """The dotted module name a file run by its path stands for: modelos/capas(.py) as modelos.capas."""
    return path.removesuffix(".py").strip("./").replace("/", ".")


def is_ipython_line(line):
    """Whether a line reads as IPython rather than Python where a statement begins (!cmd, %magic,
    x = !cmd, obj?, the autocall escapes /f, ,f and ;f)."""
    return line.lstrip().startswith(("%", "!", *_AUTOCALLS)) or _ASSIGN_FROM_MAGIC.match(line) or _HELP.fullmatch(line)


def ipython_command(source, line):
    """Line `line` (1-based) of a .py source, stripped and cut to 80 characters, when it reads as
    IPython (`!pip install` left in a notebook exported as .py); None for any other line. A line
    starting as an autocall escape (`/ 2`, `, b`) is, in a .py, far more often an operator or an
    argument wrapped onto a line of its own: Python's own message says so better."""
    lines = source.splitlines()
    if not isinstance(line, int) or not 1 <= line <= len(lines):
        return None
    text = lines[line - 1].strip()
    return text[:80] if is_ipython_line(text) and not text.startswith(tuple(_AUTOCALLS)) else None


# Python 3.12's type parameter syntax (PEP 695), which Colab runs and the grader's 3.11 cannot parse
_NEWER_SYNTAX = re.compile(r"(type[ \t]+[A-Za-z_]\w*[ \t]*(\[.*\])?[ \t]*=|(async[ \t]+)?def[ \t]+\w+[ \t]*\[|class[ \t]+\w+[ \t]*\[)")


def newer_syntax_line(source, line):
    """Line `line` (1-based) of a source, stripped and cut to 80 characters, when it starts with
    Python 3.12's type parameter syntax (`type Tensor = torch.Tensor`, `def f[T](x: T)`, `class
    Pila[T]:`): a syntax error there is the grader's older Python, not a mistake; None otherwise."""
    lines = source.splitlines()
    if not isinstance(line, int) or not 1 <= line <= len(lines):
        return None
    text = lines[line - 1].strip()
    return text[:80] if _NEWER_SYNTAX.match(text) else None


def _ipython_lines(lines):
    """The indexes of a cell's IPython lines (!cmd, %magic, x = !cmd, obj?): only those that begin a
    statement, as IPython reads them. Inside brackets, a string or after a backslash, a line such
    as `!= limit` or `% heads` (an operator wrapped onto its own line) is Python. The tokenizer asks
    for one line at a time, after yielding every token of the one before, so each line is judged
    on the code above it, IPython lines already blanked; from a line it cannot read on (code that
    is not Python), the lines left are judged by how they start."""
    found, lines_read = set(), 0
    depth, at_start = 0, True

    def readline():
        nonlocal lines_read
        if lines_read == len(lines):
            return ""
        index, lines_read = lines_read, lines_read + 1
        continued = index - 1 in found and lines[index - 1].rstrip().endswith("\\")  # `!pip install a \`
        if continued or at_start and depth == 0 and is_ipython_line(lines[index]):
            found.add(index)
            return "\n"
        return lines[index] + "\n"

    try:
        for token in tokenize.generate_tokens(readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}":
                depth = max(depth - 1, 0)
            at_start = token.type in (tokenize.NEWLINE, tokenize.NL)
    except (tokenize.TokenError, SyntaxError):
        found.update(i for i in range(lines_read, len(lines)) if is_ipython_line(lines[i]))
    return found


def _statements(tree, code, cell, written=frozenset()):
    """The top-level statements of a parsed cell that could be kept, with their text and names.
    `from m import ...` of a module m the notebook writes with %%writefile is not among them: that
    cell's code is part of the module already."""
    data = code.encode()  # ast's offsets count UTF-8 bytes; the cell's only line break is "\n"
    starts = [0]
    for line in data.split(b"\n"):
        starts.append(starts[-1] + len(line) + 1)
    return [found for node in tree.body for found in _statement(node, data, starts, cell, written)]


def _statement(node, data, starts, cell, written):
    """_statements' pieces for one statement of a cell: at its top level, or in a `with` body
    (which runs once, as the cell does)."""
    if isinstance(node, ast.ImportFrom) and node.level and (absolute := _absolute(node, cell, written)):
        node = ast.copy_location(ast.ImportFrom(module=absolute, names=node.names, level=0), node)
        node.end_lineno, node.end_col_offset = node.lineno, node.col_offset  # replaced: its text is not read
    if isinstance(node, ast.ImportFrom) and not node.level and node.module in written:
        found, renamed = [], [alias for alias in node.names if alias.asname and alias.asname != alias.name]
        if renamed:  # `from capas import core as f`: f is core, which the cell defined here
            text = "; ".join(f"{alias.asname} = {alias.name}" for alias in renamed).encode()
            found.append(_Statement(text, 0, len(text), cell, node.lineno, "statement",
                                    [alias.asname for alias in renamed]))
        same = [alias.name for alias in node.names if not alias.asname or alias.asname == alias.name]
        if same:  # what it binds again, if a cell rebound it since the module was written (_reimported)
            found.append(_Statement(b"", 0, 0, cell, node.lineno, "reimport", same, (node.module,)))
        return found
    if isinstance(node, ast.ImportFrom) and not node.level and any(
            f"{node.module}.{alias.name}" in written for alias in node.names):
        return [_written_module_import(node, cell, written)]
    if isinstance(node, ast.Import) and any(alias.name in written for alias in node.names):
        return [_written_module_import(node, cell, written)]
    if loaded := _written_module_loaded(node, cell, written):
        return [loaded]
    if isinstance(node, _IMPORTS):
        names = [alias.asname or _top(alias.name) for alias in node.names]
        if isinstance(node, ast.ImportFrom) and node.module == "__future__" and not node.level:
            kind = "future"
        else:
            kind = "star" if names == ["*"] else "import"
    elif attaching := _attaching(node):
        kind, names = "attaching", (*((node.name,) if isinstance(node, _DEFINITIONS) else ()), attaching[1])
    elif isinstance(node, ast.ClassDef) and (changes := _class_body_changes(node)):
        kind, names = "statement", (node.name, *sorted(changes))
    elif isinstance(node, _DEFINITIONS):
        kind, names = "definition", (node.name,)
    elif isinstance(node, _STATEMENTS) or _walrus(node):
        kind, names = "statement", _bound(node)
    elif attached := _attaching_loop(node):
        kind, names = "statement", (*_bound(node), *attached)
    elif _mutated(node):
        kind, names = "statement", (_mutated(node),)
    elif isinstance(node, ast.Expr) and _namespace_binds(node):
        kind, names = "statement", _namespace_binds(node)
        if _called(node.value, "setattr", 3):  # setattr(sys.modules[__name__], "NEG", v)
            # sys.modules["__main__"] is the kernel's namespace, and the worker's own module in
            # the worker (where `__name__` reads "__main__": _as_in_the_kernel): kept as what it does
            assignment = ast.Assign([ast.Subscript(ast.Call(ast.Name("globals"), [], []), node.value.args[1])],
                                    node.value.args[2], lineno=node.lineno)
            text = ast.unparse(assignment).encode()
            return [_Statement(text, 0, len(text), cell, node.lineno, kind, names)]
    else:
        return _left_by_the_block(node, data, starts, cell, written)
    decorators = getattr(node, "decorator_list", None)
    if decorators:  # a decorated definition starts at its first decorator's `@`
        line = decorators[0].lineno
        start = data.rfind(b"@", starts[line - 1], starts[line - 1] + decorators[0].col_offset)
    else:
        line = node.lineno
        start = starts[line - 1] + node.col_offset
    end = starts[node.end_lineno - 1] + node.end_col_offset
    if kind == "attaching":  # (its function, what it is without it, whether only an annotation names the class)
        reads = (attaching[0], "definition" if isinstance(node, _DEFINITIONS) else "statement", attaching[2])
    else:
        reads = ("." * node.level + (node.module or ""),) if kind == "star" else ()
    piece = _as_in_the_kernel(node, data, starts, start, end)
    if node.col_offset and hasattr(node, "body"):  # a block in a `with` body: one level out, as its lines
        piece = _dedented(piece, data[starts[node.lineno - 1]:starts[node.lineno - 1] + node.col_offset])
    return [_Statement(*piece, cell, line, kind, names, reads)]


def _dedented(piece, indent):
    """(data, start, end) of a statement taken out of a block, its lines after the first without
    the block's indentation (a decorated def's `def` line, an `else:`, must line up with the first;
    a line of a string over several lines loses it too, where it has it)."""
    data, start, end = piece
    lines = data[start:end].split(b"\n")
    text = b"\n".join([lines[0], *(line[len(indent):] if line.startswith(indent) else line for line in lines[1:])])
    return text, 0, len(text)


_SIMPLE_ASSIGNMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign)


def _left_by_the_block(node, data, starts, cell, written):
    """What a top-level block that is not kept leaves bound in the kernel, as statements that could
    be: a `with` body's statements, read as a cell's (it runs once: `with warnings.catch_warnings():`
    around imports, a helper or a class; those reading what `as` bound are left out), a
    `for` over a list or tuple written there binding its variable to the last item (`for NEG in
    [-1e4, float('-inf')]: ...` leaves NEG at -inf), and the assignments of a `for` or `while`
    loop's `else:` (which runs when no `break` does). Only where the loop has no `break` and does not
    bind its variable again in its body; the context manager, the loop and its body's other
    statements never run here."""
    if isinstance(node, ast.With):
        opened = set().union(*(_bound(item.optional_vars) for item in node.items if item.optional_vars))
        return [found for statement in node.body if not opened & _names_read(statement)
                for found in _statement(statement, data, starts, cell, written)]
    if not isinstance(node, (ast.For, ast.While)) or _breaks(node.body):
        return []
    found = [_nested(statement, data, starts, cell) for statement in node.orelse
             if isinstance(statement, _SIMPLE_ASSIGNMENTS)]
    items = _written_items(node.iter) if isinstance(node, ast.For) and isinstance(node.target, ast.Name) else None
    if items and (items[-1] is None or isinstance(items[-1], ast.Starred)):  # {**d} or [*rest]: not written there
        items = None
    rebound = set().union(*(_bound(statement) for statement in node.body)) if items else set()
    if items and node.target.id not in rebound and node.target.id not in {
            bound for statement in found for bound in statement.binds}:
        text = f"{node.target.id} = {ast.unparse(items[-1])}".encode()
        found.insert(0, _Statement(text, 0, len(text), cell, node.lineno, "statement", [node.target.id]))
    return found


def _nested(statement, data, starts, cell):
    """A simple statement inside a top-level block, as a statement of its own (the lines after its
    first keep their indentation, which a statement's continuation lines may have)."""
    start = starts[statement.lineno - 1] + statement.col_offset
    end = starts[statement.end_lineno - 1] + statement.end_col_offset
    return _Statement(*_as_in_the_kernel(statement, data, starts, start, end), cell, statement.lineno,
                      "statement", _bound(statement))


def _names_read(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _breaks(body):
    """Whether a `break` in these statements ends the loop they are the body of (one in a nested
    loop, function or class ends something else)."""
    pending = list(body)
    while pending:
        item = pending.pop()
        if isinstance(item, ast.Break):
            return True
        if isinstance(item, (ast.For, ast.AsyncFor, ast.While)):
            pending += item.orelse  # a loop's else belongs to the outer one's body
            continue
        if not isinstance(item, _SCOPES):
            pending.extend(ast.iter_child_nodes(item))
    return False


def _written_module_import(node, cell, written):
    """`import capas`, `import capas as c`, `import modelos.atencion` or `from modelos import
    atencion` of a module the notebook writes with %%writefile: that cell's code is part of this
    module already, so the name is bound to this module itself (`capas.core(...)` then finds the
    cell's `core`, kept with everything that cell binds whenever the name is used; a dotted name's
    first part to a namespace holding it, as the package it stands for); other modules of the same
    statement are imported as written."""
    if isinstance(node, ast.ImportFrom):
        modules = [(alias, f"{node.module}.{alias.name}") for alias in node.names]
    else:
        modules = [(alias, alias.name) for alias in node.names]
    parts, binds = [], []
    for alias, module in modules:
        name = alias.asname or (alias.name if isinstance(node, ast.ImportFrom) else _top(alias.name))
        binds.append(name)
        if module not in written:
            parts.append(ast.unparse(type(node)(names=[alias], **(
                {"module": node.module, "level": 0} if isinstance(node, ast.ImportFrom) else {}))))
        elif alias.asname or isinstance(node, ast.ImportFrom) or "." not in module:
            parts.append(f"{name} = __import__(__name__)")
        else:  # import modelos.atencion: modelos.atencion.core(...) reads this module's core
            parts.append(f"{name} = {_written_package(name, written)}")
    text = "; ".join(parts).encode()
    return _Statement(text, 0, len(text), cell, node.lineno, "alias", binds,
                      {module for _, module in modules if module in written})


def _written_module_loaded(node, cell, written):
    """A statement loading a module the notebook writes by a call: as `import capas as m`
    (_written_module_import), its name is bound to this module, or to the dict of its names:
    - `m = importlib.import_module("capas")`, `__import__("capas")`, `importlib.util.module_from_spec(spec)`
      (spec: of capas.py): the module;
    - `ns = runpy.run_path("capas.py")` or `runpy.run_module("capas")`: the dict of its names;
    - `exec(open("capas.py").read(), ns)` (or through compile()): those names put into ns.
    The module is given by a string written there (by position or keyword), or by a name bound to
    one, or to its spec (written.named). None for any other statement."""
    if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _called(node.value, "exec", 2)
            and isinstance(node.value.args[1], ast.Name)):
        paths = [n.args[0] for n in ast.walk(node.value.args[0])
                 if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "open" and n.args]
        module = _module_given(paths[0], written, "run_path") if paths else None
        if module is None:
            return None
        target = node.value.args[1].id
        text = f"{target}.update(vars(__import__(__name__)))".encode()
        return _Statement(text, 0, len(text), cell, node.lineno, "alias", [target], {module})
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)):
        return None
    call = node.value
    function = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    given = call.args[0] if call.args else next(
        (k.value for k in call.keywords if k.arg in ("name", "path_name", "mod_name", "spec")), None)
    module = _module_given(given, written, function) if function in _LOADERS and given is not None else None
    if module is None or function == "__import__" and "." in module:  # __import__("a.b") gives a
        return None
    name = node.targets[0].id
    this = "__import__(__name__)" if _LOADERS[function] == "module" else "vars(__import__(__name__))"
    text = f"{name} = {this}".encode()
    return _Statement(text, 0, len(text), cell, node.lineno, "alias", [name], {module})


def _absolute(node, cell, written):
    """The module a relative import in a written module's cell names (`from .capas import X` in
    modelos/__init__.py: modelos.capas), when it is one the notebook writes; else None."""
    package = getattr(written, "packages", {}).get(cell)
    if not package:
        return None
    parts = package.split(".")
    if node.level - 1 >= len(parts):
        return None
    base = ".".join(parts[:len(parts) - (node.level - 1)])
    module = f"{base}.{node.module}" if node.module else base
    return module if module in written or any(f"{module}.{a.name}" in written for a in node.names) else None


def _module_given(argument, written, function):
    """The written module a loader's argument names: a string (a file for run_path and open, a
    module name otherwise), or a name the notebook binds to one (written.named); else None."""
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        value = argument.value
        module = _run_module(value) if function == "run_path" else value if not value.endswith(".py") else None
    elif isinstance(argument, ast.Name):
        module = getattr(written, "named", {}).get(argument.id)
    else:
        module = None
    return module if module in written else None


def _written_package(package, written):
    """The namespace `import package.module` binds `package` to, holding every module the notebook
    writes in it (this module itself, or a namespace for a folder further down): `import
    modelos.atencion` then `import modelos.capas` must leave both reachable, as in the kernel."""
    inside = sorted({module[len(package) + 1:].split(".")[0] for module in written
                     if module.startswith(package + ".")})
    members = ", ".join(f"{part}=" + ("__import__(__name__)" if f"{package}.{part}" in written
                                      else _written_package(f"{package}.{part}", written))
                        for part in inside)
    return f"__import__('types').SimpleNamespace({members})"


def _main_quoted(name, above, data, starts):
    """"__main__" as a literal that can stand where `name` (a read of __name__) is: inside an
    f-string's braces, a quote other than those of the f-strings around it (before Python 3.12,
    f'{__name__}' cannot hold '__main__'); where both are taken, built without quotes."""
    taken, node = set(), above.get(name)
    while node is not None:
        if isinstance(node, ast.JoinedStr):
            opening = data[starts[node.lineno - 1] + node.col_offset:][:4].lstrip(b"rRfFbBuU")[:1]
            taken.add(opening)
        node = above.get(node)
    for quote in (b"'", b'"'):
        if quote not in taken:
            return quote + b"__main__" + quote
    return b"(chr(95) * 2 + chr(109) + chr(97) + chr(105) + chr(110) + chr(95) * 2)"


def _as_in_the_kernel(node, data, starts, start, end):
    """(data, start, end) of a statement whose reads of `__name__` say what they say in a notebook's
    kernel, "__main__": the module the worker imports is named after the exercise's file, and a
    notebook's `if __name__ == "__main__":` block, true in Jupyter, must stay true there."""
    if b"__name__" not in data[start:end]:
        return data, start, end
    above = {child: parent for parent in ast.walk(node) for child in ast.iter_child_nodes(parent)}
    spans = sorted((starts[n.lineno - 1] + n.col_offset, starts[n.end_lineno - 1] + n.end_col_offset,
                    _main_quoted(n, above, data, starts))
                   for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == "__name__"
                   and isinstance(n.ctx, ast.Load))
    pieces, at = [], start
    for first, last, main in spans:
        pieces += [data[at:first], main]
        at = last
    text = b"".join(pieces) + data[at:end]
    return text, 0, len(text)


def _attaching(node):
    """(the function, the graded class, whether only an annotation names it: _patching) of a
    statement that gives a graded class something through
    a function of the notebook's: a call such as `agregar_metodo(SelfAttention, forward)` (the class
    by position or keyword), `add_to_class(SelfAttention)(forward)`, or a decorator such as D2L's
    `@add_to_class(SelfAttention)` on a def; the function as named there (`utils.add_to_class`
    for one reached through a module). Else None. Kept (with that function) when the class is, if
    the notebook defines the function (_attached_or_dropped)."""
    calls = [node.value] if isinstance(node, ast.Expr) else list(getattr(node, "decorator_list", []))
    while calls:
        call = calls.pop()
        if not isinstance(call, ast.Call):
            continue
        calls.append(call.func)  # add_to_class(Cls)(f): the class is the inner call's
        function = _dotted(call.func)
        if function is None or _sets_attribute(call):  # setattr, delattr... are _mutated's
            continue
        for argument in (*call.args, *(keyword.value for keyword in call.keywords)):
            if isinstance(argument, ast.Name) and argument.id in EXERCISE.class_names:
                return function, argument.id, False
    return _patching(node)


def _patching(node):
    """(the decorator, the graded class, True) of a def whose first parameter is annotated with a graded
    class, under a decorator of the notebook's (fastcore's `@patch` written out: `def forward(self:
    SelfAttention, x)` attached by reading that annotation), or None."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.decorator_list:
        return None
    first = [*node.args.posonlyargs, *node.args.args][:1]
    owner = first[0].annotation if first else None
    owner = owner.id if isinstance(owner, ast.Name) else owner.value if isinstance(owner, ast.Constant) else None
    if owner not in EXERCISE.class_names:
        return None
    for decorator in node.decorator_list:
        function = _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
        if function is not None:
            return function, owner, True
    return None


def _dotted(node):
    """`f` or `module.f` as written, or None for any other callee."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _attached_or_dropped(statements):
    """statements, each "attaching" one (_attaching) kept as the definition or statement it is
    where the notebook defines its function as one that sets attributes (setattr, or `cls.name =`
    on a parameter), under that name, another bound to it (`registrar = add_to_class`, or `from
    utils import add_to_class as registrar` of a written module), or through a written module's
    name (`utils.add_to_class`); dropped otherwise: another function may do anything (train, plot).
    One whose class only its first parameter's annotation names (_patching) is, otherwise, the
    plain definition it was before (a decorated helper `def f(self: SelfAttention)` of another kind)."""
    setting = {}  # by text: a reimport's copies of a binding are read once

    def sets_attributes(text):
        if text not in setting:
            setting[text] = _sets_attributes(text)
        return setting[text]

    defined = {name for s in statements if s.kind in ("definition", "statement") and sets_attributes(s.text)
               for name in s.binds}
    for statement in statements:  # names bound to such a function, in the notebook's order
        if statement.kind == "statement":
            defined |= {target for target, value in _plain_aliases(statement.text) if value in defined}
    modules = {name for s in statements if s.kind == "alias" for name in s.binds}  # `import utils` of a written one
    kept = []
    for statement in statements:
        if statement.kind == "attaching":
            function, kind, patched = statement.reads
            base, _, name = function.rpartition(".")
            attaches = name in defined and (not base or base in modules)
            if not (attaches or patched):
                continue
            if not attaches:  # bound by its own name alone, kept where that is used
                statement.binds = statement.binds[:-1]
            statement.kind, statement.reads = kind, ()
        kept.append(statement)
    return kept


def _plain_aliases(text):
    """(target, value) of each `target = value` between two plain names in a statement's code."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    return [(node.targets[0].id, node.value.id) for node in tree.body
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Name)]


def _sets_attributes(text):
    """Whether a def's code calls setattr or assigns an attribute of one of its parameters (in it or
    in a function it defines): what a helper that attaches a method to a class does."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    first = tree.body[0] if tree.body else None
    helper = isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef)) or (  # or `add_to_class = lambda C: ...`
        isinstance(first, ast.Assign) and isinstance(first.value, ast.Lambda))
    if not helper:
        return False  # a class (a Trainer(model), say) is no such helper
    parameters = {arg.arg for node in ast.walk(tree) if isinstance(node, ast.arguments)
                  for arg in (*node.posonlyargs, *node.args, *node.kwonlyargs)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                                                and t.value.id in parameters for t in node.targets):
            return True
    return False


def _registering(statements):
    """Add to each class or def what defining it changes through the notebook's own code: a
    decorator of the notebook (`@registrar("SelfAttention")` whose function stores the class in a
    REGISTRO dict; `@modelos.add` of an object the notebook binds), a base class of the notebook
    whose `__init_subclass__` registers its subclasses, a metaclass of the notebook whose
    `__new__` or `__init__` does. `SelfAttention = REGISTRO["SelfAttention"]` then keeps the class
    that put it there (dropped, as nothing names it, the lookup failed: 0/48)."""
    parsed = {}  # by text: a reimport's copies of a binding are one definition, parsed once

    def definition(statement):
        text = statement.text
        if text not in parsed:
            try:
                body = ast.parse(text).body if text.startswith(("@", "class ", "def ", "async ")) else ()
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                body = ()
            parsed[text] = body[0] if len(body) == 1 and isinstance(body[0], (*_DEFINITIONS,)) else None
        return parsed[text]

    defined = {}  # name -> the statements defining it as a def or class
    for statement in statements:
        if statement.kind in ("definition", "statement") and statement.text.startswith(("@", "class ", "def ", "async ")):
            for name in statement.binds[:1]:
                defined.setdefault(name, []).append(statement)
    if not any(s.text.startswith("@") or s.text.startswith("class ") and "(" in s.text.partition(":")[0]
               for group in defined.values() for s in group):
        return
    objects = {name for s in statements if s.kind == "statement" for name in s.binds}
    lambdas = {}  # name -> the statements binding it to a lambda (`registrar = lambda n: ...`)
    for statement in statements:
        if statement.kind == "statement" and _LAMBDA_BOUND.match(statement.text):
            lambdas.setdefault(_LAMBDA_BOUND.match(statement.text)[1], []).append(statement)
    called, hooked, made = {}, {}, {}

    def changed_by_calling(name):  # what calling the notebook's function `name` (a def, or a lambda bound to it) changes
        if name not in called:
            called[name] = set()
            for statement in defined.get(name, ()):
                node = definition(statement)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    called[name] |= _globals_changed(node)
            for statement in lambdas.get(name, ()):
                try:
                    node = ast.parse(statement.text).body[0].value
                except (SyntaxError, ValueError, MemoryError, RecursionError, IndexError, AttributeError):
                    continue
                if isinstance(node, ast.Lambda):
                    called[name] |= _globals_changed(node)
        return called[name]

    def changed_by_subclassing(name, depth=0):  # what defining a subclass of the notebook's class `name` changes
        if name not in hooked and depth < HOOK_DEPTH:  # past it, a chain of bases is read as changing nothing
            hooked[name] = set()
            for statement in defined.get(name, ()):
                node = definition(statement)
                if isinstance(node, ast.ClassDef):
                    hooked[name] |= _class_hooks(node, lambda base: changed_by_subclassing(base, depth + 1),
                                                 changed_by_metaclass)
        return hooked.get(name, set())

    def changed_by_metaclass(name):  # what a class made by the notebook's metaclass `name` changes
        if name not in made:  # read once: thousands of classes may name one metaclass
            made[name] = set()
            for statement in defined.get(name, ()):
                node = definition(statement)
                if isinstance(node, ast.ClassDef):
                    for method in node.body:
                        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.name in ("__new__", "__init__"):
                            made[name] |= _globals_changed(method)
        return made[name]

    for group in defined.values():
        for statement in group:
            node = definition(statement)
            if node is None:
                continue
            changes = set()
            for decorator in node.decorator_list:
                callee = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(callee, ast.Name):
                    changes |= changed_by_calling(callee.id)
                elif isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id in objects:
                    changes.add(callee.value.id)  # `@registro.add` of a registry the notebook builds
            if isinstance(node, ast.ClassDef):
                changes |= _class_hooks(node, changed_by_subclassing, changed_by_metaclass, own=False)
            changes -= set(statement.binds)
            if changes:
                statement.binds = [*statement.binds, *sorted(changes)]


# `name = lambda ...` at the top of a statement: a function of the notebook as much as a def
_LAMBDA_BOUND = re.compile(r"([A-Za-z_]\w*)[ \t]*=[ \t]*lambda\b")


def _class_hooks(node, subclassing, metaclass, own=True):
    """What defining a class changes through its bases and metaclass (subclassing, metaclass: the
    notebook's hooks by name); with own, also through its own `__init_subclass__` (what defining a
    subclass of it runs: a change of its first parameter, `cls.registro[...] = cls`, changes the
    class itself)."""
    changes = set()
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id != node.name:
            changes |= subclassing(base.id)
    for keyword in node.keywords:
        if keyword.arg == "metaclass" and isinstance(keyword.value, ast.Name):
            changes |= metaclass(keyword.value.id)
    if own:
        for method in node.body:
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.name == "__init_subclass__":
                changes |= _globals_changed(method, first_is=node.name)
    return changes


def _globals_changed(function, first_is=None):
    """The module-level names a function changes in place when it runs, its nested functions
    included (a decorator factory's inner function runs at the decoration): `REGISTRO[name] =
    cls`, `REGISTRO.append(cls)`, `global X; X = cls`; with first_is, a change of its first
    parameter counts as one of that name."""
    try:
        table = symtable.symtable(ast.unparse(function), "cell", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return set()
    global_names, pending = set(), list(table.get_children())
    while pending:
        scope = pending.pop()
        if scope.get_type() == "function":
            global_names |= {symbol.get_name() for symbol in scope.get_symbols() if symbol.is_global()}
        pending += scope.get_children()
    arguments = [*function.args.posonlyargs, *function.args.args]
    first = arguments[0].arg if arguments else None
    changed = set()
    for item in ast.walk(function):
        roots = ()
        if isinstance(item, ast.Call) and (name := _changed_by(item)):
            roots = (name,)
        elif isinstance(item, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            roots = [root for target, root in _target_roots(item)
                     if root and (not isinstance(target, ast.Name) or root in global_names)]
        for root in roots:
            if root in global_names:
                changed.add(root)
            elif first_is and root == first:
                changed.add(first_is)
    return changed


def _walrus(node):
    """Whether a top-level expression binds a name with `:=` (`(BLOCK := 16)`, `print(N := 8)`):
    an assignment as much as `BLOCK = 16`, kept when kept code reads the name."""
    return isinstance(node, ast.Expr) and any(isinstance(n, ast.NamedExpr) for n in ast.walk(node.value))


def _mutated(node):
    """The name a statement such as `OPTS.update(...)` changes in place (_changed_by), or None."""
    return _changed_by(node.value) if isinstance(node, ast.Expr) else None


def _class_body_changes(node):
    """The module-level names a class body changes as it runs, when the class is defined (`class
    Experimento: CONFIG["temp"] = 2.0`, a mutator call, an in-place tensor method, a name declared
    `global` and assigned there); its methods run later, if ever. A name the body binds is the
    class's own, unless declared global."""
    local, declared, changed, pending = set(), set(), set(), list(node.body)
    while pending:
        item = pending.pop()
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.add(item.name)
            continue
        if isinstance(item, ast.Lambda):
            continue
        if isinstance(item, ast.Global):
            declared.update(item.names)
        elif isinstance(item, ast.Name) and not isinstance(item.ctx, ast.Load):
            local.add(item.id)
        elif isinstance(item, ast.Call) and (name := _changed_by(item)):
            changed.add(name)
        elif isinstance(item, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):  # a bare name: the class's
            changed.update(root for target, root in _target_roots(item) if root and not isinstance(target, ast.Name))
        pending.extend(ast.iter_child_nodes(item))
    return (changed - (local - declared)) | (declared & local)


# What a notebook names torch's modules by: an in-place function of theirs changes its first argument
_TORCH_ROOTS = frozenset({"torch", "nn", "init", "F"})


def _in_place(name):
    """PyTorch's name for an operation that changes its tensor in place: `mul_`, `init.constant_`."""
    return name.endswith("_") and not name.endswith("__")


def _changed_by(call):
    """The name a call changes in place, or None: `OPTS.update(...)` (see _MUTATORS; also on an item
    or an attribute of it, `OPTS["sa"].update(...)`), `setattr(SelfAttention, "forward", forward)`,
    a tensor's in-place method (`TEMP.mul_(2.0)`, `TEMP.data.fill_(2.0)`), a function in place on its
    first argument (`nn.init.constant_(TEMP, 2.0)`) or one writing to `out=TEMP`."""
    if not isinstance(call, ast.Call):
        return None
    if _sets_attribute(call):  # setattr(Cls, "forward", f), delattr(Cls, "forward"), type.__setattr__(Cls, ...)
        target = _spread(call.args)[0]
        return target.id if isinstance(target, ast.Name) else None
    function = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    out = next((keyword.value for keyword in call.keywords if keyword.arg == "out"), None)
    parts, callee = [], call.func
    while isinstance(callee, ast.Attribute):
        parts, callee = [callee.attr, *parts], callee.value
    # `nn.init.constant_(x)` changes x, `x.mul_()` x
    in_torch = isinstance(callee, ast.Name) and (callee.id in _TORCH_ROOTS or "init" in parts)
    if isinstance(call.func, ast.Attribute) and (call.func.attr in _MUTATORS or _in_place(function) and not in_torch):
        target = call.func.value
    elif call.args and _in_place(function):
        target = call.args[0]
    elif out is not None:
        target = out
    else:
        return None
    target = _unwrapped_vars(target)
    while isinstance(target, (ast.Subscript, ast.Attribute)):
        target = _unwrapped_vars(target.value)  # OPTS["sa"].update(...) changes OPTS
    return target.id if isinstance(target, ast.Name) else None


def _sets_attribute(call):
    """Whether call sets or deletes an attribute of its first argument, by Python's built-ins:
    setattr(X, "n", v), delattr(X, "n"), or type's unbound methods, type.__setattr__(X, "n", v) and
    type.__delattr__(X, "n"), on a class (object's refuse one; X.__setattr__("n", v), bound,
    changes X as a mutator: _MUTATORS), also with the arguments spread from a tuple written there
    (setattr(*(X, "n", v)))."""
    args = _spread(call.args)
    if call.keywords or not args:
        return False
    if isinstance(call.func, ast.Name):
        return (call.func.id, len(args)) in (("setattr", 3), ("delattr", 2))
    return (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "type"
            and (call.func.attr, len(args)) in (("__setattr__", 3), ("__delattr__", 2)))


def _spread(args):
    """A call's positional arguments, those of a tuple or list written there and spread (`*(a, b)`)
    taken one by one."""
    spread = []
    for argument in args:
        if isinstance(argument, ast.Starred) and isinstance(argument.value, (ast.Tuple, ast.List)):
            spread += argument.value.elts
        else:
            spread.append(argument)
    return spread


def _unwrapped_vars(node):
    """X for `vars(X)` (the attributes of X as a dict: `vars(args).update(...)` changes args), else node."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"
            and len(node.args) == 1 and not node.keywords):
        return node.args[0]
    return node


def _attaching_loop(node):
    """The graded classes a top-level `for` gives attributes to, or (): `for name, f in [("forward",
    forward), ...]: setattr(MultiHeadAttention, name, f)`, `for cls in (SelfAttention,
    MultiHeadAttention): cls.temperature = 0.5` or `for cls, name, f in [(SelfAttention, "forward",
    f), ...]: setattr(cls, name, f)`, over a list, tuple or dict written there (or that dict's
    .items(), .keys(), .values(): as many turns as it has items), whose body only sets attributes
    of one graded class, or of one loop variable that takes only graded classes, written by name in
    those items (setattr, or `X.forward = f`), without else: in the kernel the classes come out of
    it changed, so they are graded changed."""
    items = _written_items(node.iter) if isinstance(node, ast.For) and not node.orelse else None
    if items is None:
        return ()
    targets = _attribute_targets(node.body)
    if targets is None or len(targets) != 1:
        return ()
    target, graded = targets.pop(), set(EXERCISE.class_names)
    if target in graded:
        return (target,)
    taken = _taken_by(node.target, target, items)
    return tuple(dict.fromkeys(taken)) if taken and set(taken) <= graded else ()


def _attribute_targets(body):
    """The names whose attributes a loop's body sets (setattr, `X.forward = f`), or None where it
    does anything else. Inside it may also bind plain names (`fn = globals().get(prefijo + nombre)`),
    test (`if fn is not None:`) and loop again over items written there."""
    targets = set()
    for statement in body:
        if _mutated(statement) and _sets_attribute(statement.value):  # setattr(Cls, ...), delattr(Cls, ...)
            targets.add(_mutated(statement))
        elif (isinstance(statement, ast.Assign) and len(statement.targets) == 1
              and isinstance(statement.targets[0], ast.Attribute) and isinstance(statement.targets[0].value, ast.Name)):
            targets.add(statement.targets[0].value.id)
        elif isinstance(statement, ast.Assign) and all(isinstance(t, ast.Name) for t in statement.targets):
            continue
        elif isinstance(statement, ast.If) or isinstance(statement, ast.For) and not statement.orelse and (
                _written_items(statement.iter) is not None):
            inner = _attribute_targets([*statement.body, *statement.orelse])
            if inner is None:
                return None
            targets |= inner
        else:
            return None
    return targets


def _written_items(iterable):
    """The items a loop over a list, tuple or dict written there goes through (a dict's .items()
    as (key, value) tuples; zip() of such lists as tuples of their items; `dict(forward=f)` is the
    dict {"forward": f}), or None for anything else."""
    iterable = _as_dict_display(iterable)
    if isinstance(iterable, (ast.List, ast.Tuple)):
        return list(iterable.elts)
    if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "zip"
            and iterable.args and not iterable.keywords):
        columns = [_written_items(argument) for argument in iterable.args]
        return None if None in columns else [ast.Tuple(list(row)) for row in zip(*columns)]
    if isinstance(iterable, ast.Dict):
        return list(iterable.keys)
    if (isinstance(iterable, ast.Call) and not iterable.args and not iterable.keywords
            and isinstance(iterable.func, ast.Attribute) and isinstance(_as_dict_display(iterable.func.value), ast.Dict)
            and iterable.func.attr in ("items", "keys", "values")):
        written = _as_dict_display(iterable.func.value)
        return {"keys": written.keys, "values": written.values,
                "items": [ast.Tuple([k, v]) for k, v in zip(written.keys, written.values)]}[iterable.func.attr]
    return None


def _as_dict_display(node):
    """`dict(forward=f, split_heads=g)` (keywords only) as the dict display it builds; node otherwise."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args
            and node.keywords and all(keyword.arg for keyword in node.keywords)):
        return ast.Dict([ast.Constant(keyword.arg) for keyword in node.keywords],
                        [keyword.value for keyword in node.keywords])
    return node


def _taken_by(target, name, items):
    """The names the loop variable `name` (in the loop's target, alone or in a tuple) takes over
    `items`, each a name written there; None where one is not (a call, a constant, a ** entry)."""
    if isinstance(target, ast.Name):
        return [item.id for item in items] if target.id == name and all(isinstance(i, ast.Name) for i in items) else None
    if not isinstance(target, ast.Tuple):
        return None
    where = [i for i, part in enumerate(target.elts) if isinstance(part, ast.Name) and part.id == name]
    if len(where) != 1 or not all(isinstance(i, ast.Tuple) and len(i.elts) == len(target.elts) for i in items):
        return None
    taken = [item.elts[where[0]] for item in items]
    return [t.id for t in taken] if all(isinstance(t, ast.Name) for t in taken) else None


def _the_namespace(node):
    """Whether node is `globals()` or `vars()`: at the top level of a cell, the module's names."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "vars")
            and not node.args and not node.keywords)


def _namespace_key(target):
    """NAME for an assignment target `globals()["NAME"]` (or `vars()["NAME"]`): it binds NAME."""
    key = target.slice if isinstance(target, ast.Subscript) and _the_namespace(target.value) else None
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier() else None


def _namespace_binds(node):
    """The names a call at the top level binds in the module's namespace, or (): those of
    `globals().update(NEG=..., SCALE=...)` (or a dict written there), `setattr(sys.modules[__name__],
    "NEG", ...)`, and what the code of `exec("NEG = ...")` (a string written there, run in the
    module's namespace) binds: in the kernel each is an assignment (an outside attacker's notebook
    was graded on the value from before its `exec`)."""
    call = node.value
    if not isinstance(call, ast.Call):
        return ()
    if isinstance(call.func, ast.Attribute) and call.func.attr == "update" and _the_namespace(call.func.value):
        names = [keyword.arg for keyword in call.keywords if keyword.arg]
        for argument in call.args:
            if isinstance(argument, ast.Dict):
                names += [key.value for key in argument.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)]
    elif (isinstance(call.func, ast.Attribute) and call.func.attr in _NAMESPACE_KEYED and _the_namespace(call.func.value)
          and call.args and isinstance(call.args[0], ast.Constant)):
        names = [call.args[0].value] if isinstance(call.args[0].value, str) else []
    elif _called(call, "setattr", 3) and _this_module(call.args[0]) and isinstance(call.args[1], ast.Constant):
        names = [call.args[1].value] if isinstance(call.args[1].value, str) else []
    elif (_called(call, "exec", 1) or _called(call, "exec", 2) and _the_namespace(call.args[1])) and isinstance(
            call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        try:
            body = ast.parse(call.args[0].value).body
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return ()
        names = [name for statement in body for name in _bound(statement)]
    else:
        return ()
    return tuple(name for name in names if name.isidentifier())


# The namespace's methods whose first argument names what they bind or unbind:
# `globals().setdefault("NEG", v)` and `globals().__setitem__("NEG", v)` are `NEG = v` (the first
# where NEG is unbound), `globals().pop("NEG")` is `del NEG`.
_NAMESPACE_KEYED = frozenset({"setdefault", "__setitem__", "pop", "__delitem__"})


def _called(call, function, count):
    """Whether call is `function(...)` with `count` positional arguments and no keywords."""
    return (isinstance(call.func, ast.Name) and call.func.id == function and len(call.args) == count
            and not call.keywords)


def _this_module(node):
    """Whether node is `sys.modules[__name__]` (or `["__main__"]`): the notebook's own module."""
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "modules"
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "sys"
            and (isinstance(node.slice, ast.Name) and node.slice.id == "__name__"
                 or isinstance(node.slice, ast.Constant) and node.slice.value == "__main__"))


def _top(module):
    """The name `import module` binds: its first part."""
    return module.partition(".")[0] if "." in module else module


def _bound(node):
    """The module-level names a statement binds, or changes through an attribute or item
    (`cfg.n_embd = 64` changes cfg); nested function and class bodies are not walked."""
    names, pending = set(), [node]
    while pending:
        item = pending.pop()
        if isinstance(item, _SCOPES):  # a def or class binds its name; its body runs later, if ever
            if isinstance(item, _DEFINITIONS):
                names.add(item.name)
            elif not isinstance(item, ast.Lambda):  # a comprehension's `:=` binds outside it
                names.update(_comprehension_walruses(item))
            continue
        if isinstance(item, _IMPORTS):
            names.update(alias.asname or _top(alias.name) for alias in item.names)
        elif isinstance(item, ast.Name) and not isinstance(item.ctx, ast.Load):
            names.add(item.id)
        elif isinstance(item, ast.ExceptHandler) and item.name:
            names.add(item.name)
        elif isinstance(item, ast.Call) and (changed := _changed_by(item)):  # `_ = OPTS.pop("x")`, in an `if`...
            names.add(changed)
        elif isinstance(item, ast.Expr) and _namespace_binds(item):
            names.update(_namespace_binds(item))
        elif isinstance(item, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):  # `del OPTS["x"]` changes OPTS
            names.update(filter(None, (_namespace_key(target) or root for target, root in _target_roots(item))))
        pending.extend(ast.iter_child_nodes(item))
    return names


def _target_roots(statement):
    """(target, the module-level name it binds or changes, or None) for each target of an
    assignment or `del`, tuples unpacked: `cfg.n = 1` and `OPTS["x"] = 1` change cfg and OPTS
    (`vars(args).x = 1` changes args); past a call (`f().x = 1`), None."""
    targets = list(getattr(statement, "targets", None) or [statement.target])
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets += target.elts
            continue
        root = target
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Starred)):
            root = _unwrapped_vars(root.value)
        yield target, root.id if isinstance(root, ast.Name) else None


def _comprehension_walruses(node):
    """The names `:=` binds inside a comprehension (`[SCALED := False for _ in [0]]`): Python binds
    them in the scope around it, the module's at the top level; its `for` variables stay inside."""
    names, pending = set(), list(ast.iter_child_nodes(node))
    while pending:
        item = pending.pop()
        if isinstance(item, (*_DEFINITIONS, ast.Lambda)):
            continue
        if isinstance(item, ast.NamedExpr):
            names.add(item.target.id)
        pending.extend(ast.iter_child_nodes(item))
    return names


def _uses(statement):
    """The module-level names a statement's code reads, at once or when its functions run; None
    if Python's symbol table refuses it (the worker reports that, if the statement is kept)."""
    if statement.kind == "alias":
        return statement.reads
    if statement.kind != "definition" and statement.kind != "statement":
        return ()
    try:
        top = symtable.symtable(statement.text, "cell", "exec")
    except SyntaxError:
        return None
    names, pending = set(), [top]
    while pending:
        table = pending.pop()
        # A class body looks a name up in the module when the class has not bound it yet, even a
        # name it then binds (`n_embd: int = n_embd` in a dataclass): the symbol table calls that
        # one local, so every name a class body reads counts.
        module_reads = table is top or table.get_type() == "class"
        # `global n; n += 1` in a function reads n, though the symbol table calls it assigned only
        names |= {symbol.get_name() for symbol in table.get_symbols()
                  if (symbol.is_referenced() or symbol.is_declared_global()) and (module_reads or symbol.is_global())}
        pending += table.get_children()
    return names


def _needed(statements, modules=None):
    """The statements to keep, in order: what binds ASKED, then what binds any name kept code uses.

    modules: {cell: the module it writes} (%%writefile). In the kernel a written module's code
    reads its own names: a name that module binds, read by its code, is looked up among its own
    cells only, so that a later cell's unrelated `def puntajes(lista)` is not kept over the module's
    helper of that name (a correct notebook scored 21). Elsewhere any binding counts."""
    modules = modules or {}
    binders = {}
    for index, statement in enumerate(statements):
        if statement.kind != "star":
            for bound in statement.binds:
                binders.setdefault(bound, []).append(index)
    state = [None] * len(statements)  # True kept, False refused, None not needed (yet)
    looked_up = _names_looked_up(binders)
    needed, seen, pending = set(), set(), [(name, None) for name in reversed(ASKED)]
    while pending:
        used, scope = pending.pop()
        if (used, scope) in seen:
            continue
        seen.add((used, scope))
        needed.add(used)
        found = binders.get(used, ())
        if scope is not None:
            found = [index for index in found if modules.get(statements[index].cell) == scope] or found
        for index in found:
            last = index == found[-1]
            if state[index] is True or state[index] is False and not last:
                continue
            statement = statements[index]
            uses = _uses(statement)
            # Code that needs IPython (`x = !cmd`, get_ipython()) runs in a kernel only: dropped,
            # unless it is the last to bind a name kept code uses: the kernel holds its value,
            # which the grader cannot have (an earlier `x = ...` was graded instead): kept, the
            # import fails at its line, saying so.
            state[index] = statement.kind == "definition" or uses is not None and ("get_ipython" not in uses or last)
            if state[index]:
                pending += [(name, modules.get(statement.cell)) for name in uses or ()]
                pending += [(name, None) for name in looked_up(statement)]
    unresolved = any(name not in binders and name not in ASKED and name not in _BUILTINS
                     and not name.startswith("__") for name in needed)
    first_kept = min((index for index, keep in enumerate(state) if keep), default=len(statements))
    for index, statement in enumerate(statements):
        # A star import after kept code may rebind what it binds (`def softmax` for a demo, then
        # `from torch.nn.functional import *`: the classes' softmax is torch's): kept in its place
        # where its module is installed; one that is not (fastai in a demo cell) is dropped, as
        # an unused import is.
        rebinds = index > first_kept and _installed(statement.reads[0]) if statement.kind == "star" else False
        if statement.kind == "future" or statement.kind == "star" and (unresolved or rebinds):
            state[index] = True
    futures = [s for s, keep in zip(statements, state) if keep and s.kind == "future"]
    return futures + [_only_needed(s, needed) for s, keep in zip(statements, state) if keep and s.kind != "future"]


def _names_looked_up(binders, limit=DYNAMIC_LOOKUPS):
    """A function giving, for a statement that reads the module's names by a computed key
    (`globals().get(prefijo + nombre)`, `vars()[f"_{n}"]`), the names of `binders` that hold one of
    the strings written in it (`"_sa_"`, `"forward"`): what the key may be. The kernel finds any
    name; nothing else names these. At most `limit` such statements are read (each costs a pass
    over the names)."""
    budget = [limit]

    def looked_up(statement):
        text = statement.text
        if "globals()" not in text and "vars()" not in text or budget[0] <= 0:
            return ()
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return ()
        computed = any(_the_namespace(node.value) and not isinstance(node.slice, ast.Constant)
                       if isinstance(node, ast.Subscript) else
                       isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                       and _the_namespace(node.func.value) and node.args and not isinstance(node.args[0], ast.Constant)
                       for node in ast.walk(tree))
        pieces = {node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= 2}
        if not computed or not pieces:
            return ()
        budget[0] -= 1
        holds = re.compile("|".join(map(re.escape, sorted(pieces)))).search  # one pass a name, not one a piece
        return [name for name in binders if holds(name)]
    return looked_up


def _installed(module):
    """Whether an absolute module can be found where the grader runs (the worker's interpreter),
    without importing it or its packages (a package's __init__ may be slow, or do anything):
    each level is looked up in the one above's folders."""
    if not module or module.startswith("."):
        return False
    parts, spec = module.split("."), None
    try:
        for depth, part in enumerate(parts):
            locations = None if depth == 0 else spec.submodule_search_locations
            if depth and locations is None:
                return False
            spec = importlib.machinery.PathFinder.find_spec(part, locations) if depth else importlib.util.find_spec(part)
            if spec is None:
                return False
    except (ImportError, ValueError, AttributeError):
        return False
    return True


def _only_needed(statement, needed):
    """A kept import without the names nothing uses (`import math, wandb` keeps `import math`): an
    unused module the grader does not have must not cost a notebook its grade."""
    if statement.kind != "import" or all(name in needed for name in statement.binds):
        return statement
    node = ast.parse(statement.text).body[0]
    node.names = [alias for alias in node.names if (alias.asname or _top(alias.name)) in needed]
    text = ast.unparse(node).encode()
    return _Statement(text, 0, len(text), statement.cell, statement.line, statement.kind,
                      [name for name in statement.binds if name in needed])


def _module(pieces):
    """Join (text, cell, first line) pieces and end with the line map. Pieces on consecutive
    lines of one cell stay on consecutive lines; any others are a blank line apart.

    The map is a list of runs [module line, cell, line in the cell, line count]: consecutive
    pieces of one cell whose spacing the module keeps share a run.
    """
    body, runs, line = [], [], 1
    for text, cell, first in pieces:
        count = text.count("\n") + 1
        last = runs[-1] if runs else None
        if last and last[1] == cell and first == last[2] + last[3]:
            last[3] += count
        else:
            if body:
                body.append("\n")
                line += 1
            runs.append([line, cell, first, count])
        body += [text, "\n"]
        line += count
    return "".join(body) + LINES_MARKER + json.dumps(runs, separators=(",", ":")) + "\n"


class CellLines:
    """The line map of a notebook's module: which code cell, and which line of it, a line is."""

    def __init__(self, runs):
        self.runs = runs
        self.firsts = [run[0] for run in runs]

    def locate(self, line):
        """(cell, line within the cell) of the module's line `line`, or None if no cell holds it."""
        index = bisect.bisect_right(self.firsts, line) - 1
        if index < 0:
            return None
        first, cell, cell_line, count = self.runs[index]
        return (cell, cell_line + line - first) if line < first + count else None


def cell_lines(source):
    """The CellLines of a module made by notebook_source, or None (a .py, or a map that is not ours)."""
    start = source.rfind("\n", 0, len(source) - 1) + 1
    if not source.startswith(LINES_MARKER, start):
        return None
    try:
        runs = json.loads(source[start + len(LINES_MARKER):])
    except (ValueError, RecursionError):
        return None
    if not isinstance(runs, list) or not all(
            isinstance(run, list) and len(run) == 4 and all(type(value) is int for value in run) for run in runs):
        return None
    return CellLines(runs)


def _nbformat3_cells(worksheets):
    """An nbformat 3 notebook's cells (still opened by Jupyter, which converts it): its worksheets'
    cells in order, a code cell's source under "input"; None when it is not shaped so."""
    if not (isinstance(worksheets, list) and all(isinstance(w, dict) and isinstance(w.get("cells"), list)
                                                 for w in worksheets)):
        return None
    return [cell for worksheet in worksheets for cell in worksheet["cells"]]


def _json_items(text):
    """An upper bound of the objects json.loads would make of `text` (MAX_JSON_ITEMS)."""
    return text.count("{") + text.count("[") + text.count(",")


def _code_cells(text, name):
    """The source of each code cell; a notebook not shaped as nbformat's is refused, not guessed at."""
    if _json_items(text) > MAX_JSON_ITEMS:
        raise SubmissionUnreadable("notebook_too_many_items", file=name, limit=MAX_JSON_ITEMS)
    try:
        notebook = json.loads(text)
    except (ValueError, RecursionError):
        raise SubmissionUnreadable("bad_notebook", file=name) from None
    cells, source_key = (notebook.get("cells"), "source") if isinstance(notebook, dict) else (None, None)
    if cells is None and isinstance(notebook, dict):
        cells, source_key = _nbformat3_cells(notebook.get("worksheets")), "input"
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
        source = cell.get(source_key, "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise SubmissionUnreadable("bad_notebook", file=name)
        sources.append(source)
    return sources
