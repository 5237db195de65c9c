"""Hostile submissions against the loader, which reads them as root in the trusted grader.

Whatever a student uploads, load() must return a Submission or raise SubmissionUnreadable with a
code the student has a message for, in bounded time and memory, never following a symlink: any
other exception would crash the grader and leave no results.json.
"""
import ast
import io
import json
import os
import re
import stat
import string
import struct
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from autograder import feedback, submission
from autograder.submission import MAX_BYTES, MAX_DEPTH, MAX_ENTRIES, Submission, SubmissionUnreadable

CODE = "import torch\n\n\nclass SelfAttention(torch.nn.Module):\n    pass\n"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


@pytest.fixture(autouse=True)
def read_here(monkeypatch, request):
    """The reader in this process, so that bounded() measures its memory and time (load() reads in
    a child under a CPU limit: test_a_reading_past_the_cpu_limit_is_refused_and_the_grader_goes_on)."""
    if "read_in_a_child" not in request.keywords:
        monkeypatch.setattr(submission, "_bounded", lambda read, path: read(path))


def assert_explained(error):
    """A refusal the student can act on: a message in both languages that names only known
    parameters, and parameters that are valid text for results.json and the cohort store."""
    for language in ("es", "en"):
        template = feedback.catalog(language)["failures"].get("load." + error.code)
        assert template, f"no {language} message for load.{error.code}"
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        assert fields <= set(error.params) | set(feedback.GIVEN), (error.code, fields, error.params)
    json.dumps(error.params, ensure_ascii=False).encode("utf-8")
    for value in error.params.values():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str):
                assert not CONTROL.search(text) and len(text) <= submission.MAX_SHOWN, text


def refused(path):
    with pytest.raises(SubmissionUnreadable) as caught:
        submission.load(path)
    assert_explained(caught.value)
    return caught.value


# A hang detector, not a performance figure (the unbounded code took minutes to hours): the real
# bound is the memory one, which does not depend on how loaded the machine is.
HANG_S = 30


def bounded(function, mebibytes=1.0):
    """function()'s result, asserting it allocated under `mebibytes` at peak and did not hang."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = function()
    finally:
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < HANG_S, f"{elapsed:.2f} s"
    assert peak < mebibytes * 2**20, f"{peak / 2**20:.1f} MiB"
    return result


def refused_within(path, mebibytes=1.0):
    return bounded(lambda: refused(path), mebibytes)


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def zip_bytes(members, compression=zipfile.ZIP_DEFLATED):
    """A zip of {name or ZipInfo: content}."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def notebook(cells):
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})


def code_cell(source):
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


# Symlinks: as root, following one grades another student's file or the solution.

@pytest.fixture
def elsewhere(tmp_path):
    """Another student's submission, which a link in this one could point at."""
    return write(tmp_path / "otro_estudiante" / "attention.py", CODE)


@pytest.mark.parametrize("target", ["file", "folder", "dangling"])
def test_a_symlink_deep_in_a_folder_is_refused(tmp_path, elsewhere, target):
    folder = tmp_path / "entrega"
    write(folder / "notas.txt", "hola")
    link = folder / "a" / "b" / "attention.py"
    link.parent.mkdir(parents=True)
    link.symlink_to({"file": elsewhere, "folder": elsewhere.parent, "dangling": tmp_path / "nada"}[target])
    error = refused(folder)
    assert (error.code, error.params) == ("symlink", {"file": "a/b/attention.py"})


def test_a_symlinked_folder_inside_the_submission_is_refused(tmp_path, elsewhere):
    folder = tmp_path / "entrega"
    write(folder / "attention.py", CODE)
    (folder / "compartido").symlink_to(elsewhere.parent, target_is_directory=True)
    error = refused(folder)
    assert (error.code, error.params) == ("symlink", {"file": "compartido"})


@pytest.mark.parametrize("name", ["entrega", "attention.py", "entrega.zip", "tarea.ipynb"])
def test_a_submission_that_is_itself_a_symlink_is_refused(tmp_path, elsewhere, name):
    targets = {"entrega": elsewhere.parent, "attention.py": elsewhere,
               "entrega.zip": write(tmp_path / "real.zip", zip_bytes({"attention.py": CODE})),
               "tarea.ipynb": write(tmp_path / "real.ipynb", notebook([code_cell(CODE)]))}
    link = tmp_path / "subida" / name
    link.parent.mkdir()
    link.symlink_to(targets[name])
    error = refused(link)
    assert (error.code, error.params) == ("symlink", {"file": name})


def test_the_chosen_file_is_opened_without_following_a_symlink(tmp_path, elsewhere, monkeypatch):
    """A link that appears after the walk (a race) is still not followed: O_NOFOLLOW."""
    folder = tmp_path / "entrega"
    folder.mkdir()
    (folder / "attention.py").symlink_to(elsewhere)
    monkeypatch.setattr(submission, "_walk", lambda root: ["attention.py"])
    assert refused(folder).code == "symlink"


@pytest.mark.parametrize("chosen", [True, False])
def test_a_symlink_member_of_a_zip_is_refused(tmp_path, chosen):
    link = zipfile.ZipInfo("entrega/attention.py" if chosen else "entrega/datos")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    members = {link: "../../solutions/attention.py"}
    if not chosen:
        members["entrega/attention.py"] = CODE
    error = refused(write(tmp_path / "entrega.zip", zip_bytes(members)))
    assert (error.code, error.params) == ("symlink", {"file": link.filename})


def test_fifos_are_not_files_and_never_block(tmp_path):
    folder = tmp_path / "entrega"
    write(folder / "mi_solucion.py", CODE)
    os.mkfifo(folder / "attention.py")
    os.mkfifo(tmp_path / "tuberia.py")
    assert submission.load(folder) == Submission(CODE, "mi_solucion.py")
    assert refused(tmp_path / "tuberia.py").code == "missing"


# Folders: walked without recursion, and only so far.

def test_a_folder_nested_1100_deep_is_refused_fast(tmp_path):
    levels = [tmp_path / "entrega" / os.path.join(*["a"] * depth) for depth in range(1, 1101)]
    for level in levels:  # os.makedirs recurses once per level
        level.mkdir(parents=True)
    deepest = levels[-1]
    try:
        write(deepest / "attention.py", CODE)
        assert refused_within(tmp_path / "entrega").code == "too_deep"
    finally:  # and so does pytest's cleanup
        (deepest / "attention.py").unlink()
        for level in reversed(levels):
            level.rmdir()


def test_a_folder_at_the_depth_limit_is_read(tmp_path):
    deepest = tmp_path / "entrega" / os.path.join(*["a"] * MAX_DEPTH)
    write(deepest / "attention.py", CODE)
    assert submission.load(tmp_path / "entrega").source == CODE


@pytest.mark.parametrize("kind", ["files", "folders"])
def test_a_folder_with_too_many_entries_is_refused_fast(tmp_path, kind):
    folder = tmp_path / "entrega"
    write(folder / "attention.py", CODE)
    for i in range(MAX_ENTRIES):
        if kind == "files":
            (folder / f"{i}.txt").touch()
        else:
            (folder / str(i // 100) / str(i % 100)).mkdir(parents=True)
    assert refused_within(folder, mebibytes=4).code == "too_many_files"  # the names of up to MAX_ENTRIES files


def test_a_notebook_of_cells_that_trip_the_run_pattern_is_read_in_linear_time():
    """`exec(open(` repeated over a cell: the pattern that finds `exec(open("m.py").read())` read
    the rest of the cell from every start, before any limit applied (a 16 MB notebook: about 39
    hours in the grader; 12 cells just under the cell limit: minutes)."""
    cell = "exec(open(" * ((submission.MAX_CELL_CODE - 1024) // 10)
    notebook = json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": cell}] * 12})
    source = bounded(lambda: submission.notebook_source(notebook), mebibytes=256)
    assert "exec(open(" in source  # the first cell, alone: the worker reports its syntax error


def test_a_notebook_of_many_imports_of_a_written_module_is_read_in_linear_time():
    """`%%writefile c.py`, then cells of `import c` lines: each import was compared with every
    statement of the notebook (233k of them within the code limit: about 1.8 hours of the grader's
    own CPU, before any limit; 8 copies in a zip beside the stub: 14 hours)."""
    cells = ["%%writefile c.py\nX = 1\n", *["import c\n" * 10_000] * 3, CODE]
    notebook = json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": cell} for cell in cells]})
    source = bounded(lambda: submission.notebook_source(notebook), mebibytes=512)
    assert "class SelfAttention" in source


def test_the_shallowest_attention_py_is_chosen(tmp_path):
    write(tmp_path / "a" / "attention.py", "x = 1\n")
    write(tmp_path / "attention.py", CODE)
    assert submission.load(tmp_path).source == CODE


# Zips: the central directory is bounded before zipfile reads it, members are read in bounded steps.

def end_record(data):
    """Offset and fields of the end of central directory record of a zip without comment."""
    offset = len(data) - 22
    return offset, list(struct.unpack_from("<4s4H2LH", data, offset))


def with_end_record(data, **changes):
    offset, fields = end_record(data)
    names = ["signature", "disk", "start_disk", "disk_count", "count", "size", "offset", "comment"]
    for name, value in changes.items():
        fields[names.index(name)] = value
    return data[:offset] + struct.pack("<4s4H2LH", *fields)


def with_zip64_records(data, count, size, short_count=0xFFFF):
    """The zip with ZIP64 end records (as zipfile reads them) claiming count members in size bytes."""
    offset, fields = end_record(data)
    zip64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, size, fields[6])
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, offset, 1)
    return data[:offset] + zip64 + locator + with_end_record(data, disk_count=short_count, count=short_count)[offset:]


def test_a_zip_with_too_many_members_is_refused_before_zipfile_reads_them(tmp_path):
    archive = write(tmp_path / "entrega.zip", zip_bytes({str(i): b"" for i in range(MAX_ENTRIES + 1)}, zipfile.ZIP_STORED))
    assert refused_within(archive).code == "too_many_files"


SMALL_ZIP = zip_bytes({"attention.py": CODE})


@pytest.mark.parametrize("forged", [
    with_end_record(SMALL_ZIP, disk_count=0xFFFF, count=0xFFFF),        # 65535 members, no ZIP64 record
    with_end_record(SMALL_ZIP, size=0xFFFFFFF0),                        # a 4 GiB central directory
    with_zip64_records(SMALL_ZIP, count=400_000, size=50 << 20),        # ZIP64, as the 0xFFFF count asks
    with_zip64_records(SMALL_ZIP, count=1, size=1 << 40, short_count=1),  # ZIP64 wins even beside a small count
], ids=["count", "size", "zip64-count", "zip64-size"])
def test_forged_end_records_are_refused_fast(tmp_path, forged):
    assert refused_within(write(tmp_path / "entrega.zip", forged)).code == "too_many_files"


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=40), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6),
       st.integers(0, 140))
def test_the_end_records_read_are_the_ones_zipfile_uses(scratch, comment, flips, cut):
    """The caps hold only if _zip_directory reads the very record zipfile will parse (its private
    _EndRecData is the reference here, on damaged zips with comments and ZIP64 records)."""
    data = bytearray(with_zip64_records(SMALL_ZIP, count=3, size=200, short_count=1)[:-2]
                     + struct.pack("<H", len(comment)) + comment)
    for position, value in flips:
        data[-1 - position % len(data)] = value
    path = write(scratch / "entrega.zip", bytes(data[:len(data) - cut]))
    with open(path, "rb") as handle:
        try:
            expected = zipfile._EndRecData(handle)
        except (OSError, zipfile.BadZipFile):
            return  # zipfile gives up before reading any directory
        if expected is None:
            with pytest.raises(zipfile.BadZipFile):
                submission._zip_directory(handle)
        else:
            assert submission._zip_directory(handle) == (expected[4], expected[5])


@pytest.mark.parametrize("compression", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_members_zipfile_would_inflate_in_one_go_are_refused(tmp_path, compression):
    """A 1 KiB zip whose bzip2 member inflates to 1 GiB took 2 GiB of the grader's memory."""
    error = refused(write(tmp_path / "entrega.zip", zip_bytes({"attention.py": CODE}, compression)))
    assert (error.code, error.params) == ("zip_compression", {"file": "attention.py"})


def test_an_encrypted_member_is_refused(tmp_path):
    data = bytearray(SMALL_ZIP)
    flags = data.index(b"PK\x01\x02") + 8
    data[flags] |= 0x1
    assert refused(write(tmp_path / "entrega.zip", bytes(data))).code == "encrypted_zip"


def test_a_large_member_is_read_only_up_to_the_limit(tmp_path):
    archive = write(tmp_path / "entrega.zip", zip_bytes({"attention.py": b"#" * (4 * MAX_BYTES)}))
    error = refused_within(archive, mebibytes=3 * MAX_BYTES / 2**20)
    assert (error.code, error.params["file"]) == ("too_large", "attention.py")


def test_a_declared_size_is_not_trusted(tmp_path):
    data = bytearray(zip_bytes({"attention.py": b"#" * (4 * MAX_BYTES)}))
    sizes = data.index(b"PK\x01\x02") + 24  # uncompressed size in the central directory
    data[sizes:sizes + 4] = struct.pack("<L", 10)
    archive = write(tmp_path / "entrega.zip", bytes(data))
    assert bounded(lambda: refused(archive), mebibytes=3 * MAX_BYTES / 2**20).code == "bad_zip"


def test_a_large_py_is_read_only_up_to_the_limit(tmp_path):
    path = write(tmp_path / "attention.py", b"#" * (8 * MAX_BYTES))
    assert refused_within(path, mebibytes=3 * MAX_BYTES / 2**20).code == "too_large"


def test_a_notebook_with_large_outputs_is_graded_and_one_over_its_limit_refused(tmp_path):
    """Three inline plots (~3 MiB) cost a correct notebook 0/48 under the 2 MiB limit of a .py:
    outputs are never graded, but a notebook carries them (MAX_NOTEBOOK_BYTES)."""
    plot = {"output_type": "display_data", "metadata": {},
            "data": {"image/png": "iVBORw0KGgo" * (400 << 10), "text/plain": "<Figure>"}}
    cell = {**code_cell("import torch\nclass SelfAttention(torch.nn.Module):\n    pass"), "outputs": [plot]}
    path = write(tmp_path / "tarea.ipynb", notebook([cell]))
    assert path.stat().st_size > 2 * MAX_BYTES
    assert "class SelfAttention" in submission.load(path).source
    huge = {**cell, "outputs": [plot] * 5}
    path = write(tmp_path / "enorme.ipynb", notebook([huge]))
    assert refused_within(path, mebibytes=3 * submission.MAX_NOTEBOOK_BYTES / 2**20).code == "too_large"


# Notebooks: any JSON at all, and code that ast cannot hold.

@pytest.mark.parametrize("content", [
    [], "cells", {"cells": {}}, {"cells": None}, {"cells": [1]}, {"cells": ["x = 1"]},
    {"cells": [None]}, {"cells": [[code_cell(CODE)]]}, {"cells": [code_cell(5)]},
    {"cells": [code_cell(None)]}, {"cells": [code_cell(["x = 1\n", 2])]}, {"cells": [code_cell({"a": 1})]},
    {"cells": [code_cell([["x = 1"]])]},
], ids=str)
def test_a_notebook_not_shaped_as_nbformat_is_refused(tmp_path, content):
    assert refused(write(tmp_path / "tarea.ipynb", json.dumps(content))).code == "bad_notebook"


def test_a_notebook_with_missing_keys_keeps_what_it_can(tmp_path):
    cells = [{"source": "print(1)"}, {"cell_type": "code"}, code_cell(CODE.splitlines(keepends=True)),
             {"cell_type": "markdown", "source": 3}]
    loaded = submission.load(write(tmp_path / "tarea.ipynb", notebook(cells)))
    assert "class SelfAttention" in loaded.source


def test_a_notebook_with_too_many_cells_is_refused(tmp_path):
    cells = [{"cell_type": "markdown", "source": ""}] * (submission.MAX_CELLS + 1)
    assert refused(write(tmp_path / "tarea.ipynb", notebook(cells))).code == "too_many_cells"


@pytest.mark.parametrize("source, code", [
    ("-" * 100_000 + "1", "notebook_unparsable"),      # within the cell cap: the parser's stack
    ("a+" * 60_000 + "a", "notebook_unparsable"),      # RecursionError while building the tree
    ("x = 1\0", "null_bytes"),
    ("x = '\ud800'", "not_utf8"),                      # a lone surrogate, escaped in the JSON
], ids=["100k-minus", "deep-sum", "null", "surrogate"])
def test_notebook_code_ast_cannot_hold_is_refused(tmp_path, source, code):
    path = write(tmp_path / "tarea.ipynb", notebook([code_cell(source)]))
    assert refused_within(path, mebibytes=256).code == code


@pytest.mark.parametrize("cell", [
    "-" * 200_000 + "1",                                 # took ast.parse to a MemoryError
    "f(" * 180 + ")" * 180 + "\n" * 500,                # ~600 bytes of tree per byte of code...
    "DATA = [" + ", ".join(f"0.{i:06d}" for i in range(20_000)) + "]",  # ...pasted data
], ids=["200k-minus", "nested-calls", "data"])
def test_a_code_cell_over_the_cell_cap_is_dropped_unparsed(tmp_path, cell):
    """A cell over MAX_CELL_CODE is dropped as if it were text: the notebook's classes are graded,
    in bounded memory, as the statement says."""
    big = (cell * (submission.MAX_CELL_CODE // len(cell) + 1))[:submission.MAX_CELL_CODE + 10]
    path = write(tmp_path / "tarea.ipynb", notebook([code_cell(CODE), code_cell(big)]))
    loaded = bounded(lambda: submission.load(path), mebibytes=256)
    assert "class SelfAttention" in loaded.source and big[:50] not in loaded.source


def test_a_notebook_with_more_code_than_a_py_may_hold_is_refused(tmp_path):
    cells = [code_cell("x = 1\n" * 20_000)] * (submission.MAX_NOTEBOOK_CODE // 120_000 + 1)
    assert refused_within(write(tmp_path / "tarea.ipynb", notebook(cells)), mebibytes=256).code == "notebook_code_too_large"


def test_many_kept_statements_take_linear_time(tmp_path):
    """ast.get_source_segment splits the whole code per call: this notebook took ten minutes.
    The class uses `a`, so all 14,000 imports that bind it are kept."""
    path = write(tmp_path / "tarea.ipynb", notebook([code_cell("import a\n" * 14_000 + "class SelfAttention:\n    x = a\n")]))
    assert bounded(lambda: submission.load(path), mebibytes=256).source.count("import a") == 14_000


# Names: what a folder or zip calls its files reaches results.json only as valid text.

def test_file_names_that_are_not_text_are_cleaned(tmp_path):
    folder = tmp_path / "entrega"
    for number, raw in enumerate((b"\xff.py", b"\xfe.py")):
        write(folder / os.fsdecode(raw), CODE + f"# version {number}\n")  # two different files
    error = refused(folder)
    assert (error.code, error.params) == ("several_files", {"files": ["\ufffd.py", "\ufffd.py"]})
    (folder / os.fsdecode(b"\xfe.py")).unlink()
    assert submission.load(folder) == Submission(CODE + "# version 0\n", "\ufffd.py")


def test_zip_names_with_control_characters_are_cleaned(tmp_path):
    archive = write(tmp_path / "entrega.zip", zip_bytes({"\x1b[2Ja.py": CODE, "b\r.py": CODE + "# b\n", "x" * 60_000 + ".py": CODE + "# x\n"}))
    error = refused(archive)
    assert error.code == "several_files"
    assert error.params["files"][:2] == ["[2Ja.py", "b\n.py"]
    assert len(error.params["files"][2]) == submission.MAX_SHOWN


def test_the_name_of_the_graded_member_is_one_short_clean_line(tmp_path):
    """It opens results.json and a batch's page: a member named with newlines and fake score lines,
    hidden tag characters or 60 KB of text once filled or forged the top of the feedback."""
    stub = (Path(__file__).resolve().parent.parent / "assignments" / "attention" / "attention.py").read_text(encoding="utf-8")
    name = "x\n\nPuntaje total: 48 / 48\u00ad\U000e0041\u3164" + "y" * 60_000 + ".py"
    solved = "".join(f"class {cls}:\n    def forward(self, x):\n        return x\n\n"
                     for cls in ("SelfAttention", "MultiHeadAttention", "CausalSelfAttention"))
    loaded = submission.load(write(tmp_path / "entrega.zip", zip_bytes({"attention.py": stub, name: solved})))
    assert loaded.filename.startswith("x  Puntaje total: 48 / 48y") and len(loaded.filename) == 200
    assert "\n" not in loaded.filename and loaded.filename.endswith("…")


def test_anything_unforeseen_is_still_a_refusal(tmp_path, monkeypatch):
    def broken(root):
        raise LookupError("a bug of ours")

    monkeypatch.setattr(submission, "_walk", broken)
    error = refused(tmp_path)
    assert (error.code, error.params) == ("unreadable", {"error": "LookupError"})


def test_every_refusal_has_a_message_in_both_languages():
    source = submission.__file__
    with open(source, encoding="utf-8") as handle:
        codes = set(re.findall(r'SubmissionUnreadable\("(\w+)"', handle.read()))
    assert len(codes) >= 15
    for language in ("es", "en"):
        failures = feedback.catalog(language)["failures"]
        assert {"load." + code for code in codes} <= set(failures), language
    assert ({k for k in feedback.catalog("es")["failures"] if k.startswith("load.")}
            == {k for k in feedback.catalog("en")["failures"] if k.startswith("load.")})


# Fuzz: any content under any of the names the loader reads gives a Submission or a refusal.

def loads_or_refuses(path):
    try:
        loaded = submission.load(path)
    except SubmissionUnreadable as error:
        assert_explained(error)
        return
    assert isinstance(loaded.source, str) and isinstance(loaded.filename, str)
    loaded.source.encode("utf-8")


FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
cell_values = st.fixed_dictionaries({}, optional={
    "cell_type": st.sampled_from(["code", "markdown", "raw"]) | json_values,
    "source": st.text(max_size=80) | st.lists(st.text(max_size=40) | json_values, max_size=4) | json_values,
})


@FUZZ
@given(st.binary(max_size=2000), st.sampled_from(["attention.py", "tarea.ipynb", "entrega.zip"]))
def test_any_bytes_load_or_are_refused(scratch, data, name):
    loads_or_refuses(write(scratch / name, data))


CODECS = ["latin-1", "cp1252", "koi8-r", "shift_jis", "raw_unicode_escape", "unicode_escape", "utf-7",
          "utf-16", "punycode", "idna", "rot13", "hex", "base64", "no-such-codec"]


@FUZZ
@given(st.sampled_from(CODECS), st.binary(max_size=300) | st.sampled_from([b"X = '\\ud800'", b"X = '\\udfff\\x00'"]))
@example("raw_unicode_escape", b"X = '\\ud800'")  # once a traceback in the sandbox, and a batch stopped
def test_a_py_declaring_any_codec_loads_or_is_refused(scratch, codec, body):
    """PEP 263 lets a .py name any codec; the byte 0xff keeps it from reading as UTF-8, so it is used.
    What is graded is what Python runs: a text that compiles comes from bytes that compile."""
    path = write(scratch / "attention.py", f"# -*- coding: {codec} -*-\n# ".encode() + b"\xff\n" + body)
    loads_or_refuses(path)
    try:
        compile(submission.load(path).source, "attention.py", "exec", ast.PyCF_ONLY_AST)
    except (SubmissionUnreadable, SyntaxError, ValueError):
        return
    compile(path.read_bytes(), "attention.py", "exec", ast.PyCF_ONLY_AST)  # raises: graded text Python cannot read


def test_a_py_python_cannot_read_is_refused_not_graded_as_its_decoded_text(scratch):
    """A correct file in UTF-16-LE declaring so, with one byte that is not UTF-8: detect_encoding
    accepts the codec and the text decodes to a correct module, but Python refuses the file (null
    bytes): it scored 48/48. A latin-1 file Python reads is still graded."""
    body = (Path(__file__).resolve().parent / "submissions" / "correct" / "einsum.py").read_text(encoding="utf-8")
    utf16 = write(scratch / "attention.py", b"#\x00 coding: utf-16-le  \n\x00" + (body + "\n# \u00ff\n").encode("utf-16-le"))
    with pytest.raises(SubmissionUnreadable) as refused:
        submission.load(utf16)
    assert refused.value.code == "not_utf8"
    latin = write(scratch / "latin.py", b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + body.encode("utf-8"))
    assert "class SelfAttention" in submission.load(latin).source


@FUZZ
@given(json_values | st.fixed_dictionaries({"cells": json_values | st.lists(cell_values | json_values, max_size=5)}))
def test_any_json_as_a_notebook_loads_or_is_refused(scratch, value):
    loads_or_refuses(write(scratch / "tarea.ipynb", json.dumps(value)))


@pytest.mark.filterwarnings("ignore:Duplicate name")
@FUZZ
@given(st.dictionaries(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), min_size=1,
                               max_size=12).map(lambda n: n + ".py"),
                       st.binary(max_size=200), min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8), st.integers(0, 50))
def test_damaged_zips_load_or_are_refused(scratch, members, flips, cut):
    data = bytearray(zip_bytes(members))
    for position, value in flips:
        data[position % len(data)] = value
    assume(cut < len(data))
    loads_or_refuses(write(scratch / "entrega.zip", bytes(data[:len(data) - cut])))


def test_a_notebook_of_millions_of_json_items_is_refused_before_parsing(tmp_path):
    """16 MiB of `{},` took the grader's own process to 446 MB in json.loads: refused by count."""
    path = tmp_path / "attention.ipynb"
    path.write_text('{"cells": [], "metadata": {"x": [' + "{}," * (submission.MAX_JSON_ITEMS // 2) + '{}]}, "nbformat": 4}')
    with pytest.raises(submission.SubmissionUnreadable) as refused:
        submission.load(path)
    assert refused.value.code == "notebook_too_many_items"


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_a_long_tuple_of_constants_is_not_parsed_by_the_grader(tmp_path, encoding):
    """ast takes ~700 bytes per byte of `0,0,0,...`: a 2 MiB file took the grader's own process to
    1.5 GB when it parsed it whole to tell the stub (a latin-1 one twice). Now its text alone."""
    path = tmp_path / "attention.py"
    head = "# -*- coding: latin-1 -*-\n# é\n" if encoding == "latin-1" else ""
    path.write_bytes((head + "DATA = (" + "0," * (submission.MAX_BYTES // 2 - 64) + ")\n").encode(encoding))

    def load():
        try:
            return submission.load(path)
        except SubmissionUnreadable as exc:
            return exc.code

    result = bounded(load, mebibytes=40)  # a few copies of the 2 MiB text
    assert result == "not_utf8" if encoding == "latin-1" else isinstance(result, Submission)


@pytest.mark.read_in_a_child
def test_a_reading_past_the_cpu_limit_is_refused_and_the_grader_goes_on(tmp_path, monkeypatch):
    """Notebooks of 0.2 to 2 MB held the grader's own process for minutes to hours before any
    worker (thousands of computed-key lookups, or classes naming one metaclass): no results.json.
    Whatever pass the reader makes, load() ends within LOAD_CPU_S of CPU."""
    monkeypatch.setattr(submission, "LOAD_CPU_S", 1)
    monkeypatch.setattr(submission, "_verdict", lambda path: [None for _ in iter(int, 1)])  # never ends
    started = time.monotonic()
    error = refused(write(tmp_path / "tarea.ipynb", "{}"))
    assert error.code == "too_costly" and error.params == {"limit_s": 1, "limit_mib": submission.LOAD_MEMORY_MIB}
    assert time.monotonic() - started < HANG_S
    monkeypatch.undo()
    assert submission.load(write(tmp_path / "attention.py", CODE)).source == CODE  # the grader goes on


@pytest.mark.read_in_a_child
def test_a_submission_read_in_the_child_comes_back_whole_or_as_its_refusal(tmp_path):
    assert submission.load(write(tmp_path / "attention.py", CODE)) == Submission(CODE, "attention.py", 1)
    assert refused(write(tmp_path / "vacio" / "attention.py", "")).code == "empty"


@pytest.mark.parametrize("declared, read", [("latin-1", False), ("utf-8", True)])
def test_a_bom_beside_another_declared_encoding_is_refused_as_python_refuses_it(tmp_path, declared, read):
    """Python: "encoding problem: iso-8859-1 with BOM", and the grader graded the UTF-8 text at 48."""
    path = write(tmp_path / "attention.py", b"\xef\xbb\xbf" + f"# -*- coding: {declared} -*-\n{CODE}".encode())
    if read:
        assert submission.load(path).source.endswith(CODE)
    else:
        assert refused(path).code == "bom_and_another_encoding"


@pytest.mark.parametrize("cells", [
    # thousands of classes naming one notebook metaclass with a long __init__ (31 s for 258 KB)
    ["class Meta(type):\n    def __init__(cls, *a, **k):\n" + "".join(f"        v{i} = {i}\n" for i in range(400))
     + "        super().__init__(*a, **k)\n", "".join(f"class K{i}(metaclass=Meta): pass\n" for i in range(3000))],
    # computed-key lookups, each with many strings, against thousands of names (40 s for 460 KB)
    ["".join(f"x{i} = 0\n" for i in range(12_000)),
     *[f"K = 'k'\nS = (globals().get(K) or 1.0) if {[f'p{j}q{i}' for j in range(60)]!r} else 1.0\n" for i in range(100)]],
])
def test_notebook_hooks_and_lookups_are_read_once_each(tmp_path, cells):
    path = write(tmp_path / "tarea.ipynb", notebook([code_cell(c) for c in [*cells, CODE]]))
    assert "class SelfAttention" in bounded(lambda: submission.load(path), mebibytes=512).source


def test_two_byte_order_marks_are_refused_as_python_refuses_them(tmp_path):
    """The loader took one off and the worker's UTF-8 copy skipped the other: 48 for a file that
    neither `python attention.py` nor an import can read."""
    assert refused(write(tmp_path / "attention.py", b"\xef\xbb\xbf" * 2 + CODE.encode())).code == "bom_twice"


@pytest.mark.read_in_a_child
def test_a_reading_past_the_memory_limit_is_refused_and_the_grader_keeps_its_memory(tmp_path, monkeypatch):
    """An attacker's 400 KB notebook made the reader build a module of 1.4 GB and send it back
    (closed where it arose: a reimport's copies have a byte budget); any other pass that grows
    stops at LOAD_MEMORY_MIB, in the child."""
    monkeypatch.setattr(submission, "LOAD_MEMORY_MIB", 64)
    monkeypatch.setattr(submission, "_load", lambda path: bytearray(1 << 30))
    error = refused(write(tmp_path / "tarea.ipynb", "{}"))
    assert error.code == "too_costly" and error.params == {"limit_s": submission.LOAD_CPU_S, "limit_mib": 64}


def test_copies_of_a_written_module_s_binding_have_a_byte_budget():
    """`%%writefile m.py` holding one long import, then cells that rebind its name and import it
    again: each import copied the binding (the attacker's 412 KB upload became 1.44 GB of module)."""
    cells = ["%%writefile m.py\nimport" + " " * 60_000 + "math as F\n",
             *["F = 0\nfrom m import F\n"] * 200, CODE.replace("pass", "f = F")]
    source = bounded(lambda: submission.notebook_source(notebook([code_cell(c) for c in cells])), mebibytes=256)
    assert len(source) < 3 * submission.MAX_NOTEBOOK_CODE
