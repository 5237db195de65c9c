"""Finding the student's code in a .py, a folder, a .zip or a notebook, and grading what cannot be read."""
import ast
import json
import zipfile

import pytest

from autograder import submission
from autograder.grade import grade
from autograder.submission import SubmissionUnreadable

CODE = "import torch\n\n\nclass SelfAttention(torch.nn.Module):\n    pass\n"


def make_tree(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def make_zip(path, files):
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


@pytest.mark.parametrize("member", ["./attention.py", "src//attention.py", "./src/./attention.py"])
def test_zip_member_names_that_are_not_normal_paths_are_read(tmp_path, member):
    """Zips written by some tools name members "./attention.py": once a KeyError, read as unreadable."""
    loaded = submission.load(make_zip(tmp_path / "entrega.zip", {member: CODE}))
    assert loaded.source == CODE


def unreadable_code(path):
    with pytest.raises(SubmissionUnreadable) as caught:
        submission.load(path)
    return caught.value.code, caught.value.params


def test_plain_py(tmp_path):
    loaded = submission.load(make_tree(tmp_path, {"attention.py": CODE}) / "attention.py")
    assert (loaded.source, loaded.filename) == (CODE, "attention.py")


@pytest.mark.parametrize("name", ["Beto.PY", "Nota.IPYNB", "PEDRO.ZIP", "carpeta"])
def test_an_upper_case_extension_is_the_same_kind_of_file(tmp_path, name):
    """A file name's case is the operating system's or the student's, not a choice of format: Beto.PY
    was 'no .py file' and a batch passed over Beto.PY, Nota.IPYNB and PEDRO.ZIP without a word (a
    TA's)."""
    from autograder.cohort.batch import folder_entries

    notebook = {"cells": [{"cell_type": "code", "source": CODE, "metadata": {}, "outputs": [],
                           "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    if name.endswith(".ZIP"):
        with zipfile.ZipFile(tmp_path / name, "w") as archive:
            archive.writestr("Tarea/ATTENTION.PY", CODE)
    elif name == "carpeta":
        make_tree(tmp_path / name, {"Mi_Solucion.Py": CODE})
    else:
        (tmp_path / name).write_text(json.dumps(notebook) if name.endswith(".IPYNB") else CODE, encoding="utf-8")
    assert "class SelfAttention(torch.nn.Module):" in submission.load(tmp_path / name).source
    assert [entry.key for entry in folder_entries(tmp_path)] == [name]


def test_folder_prefers_attention_py(tmp_path):
    make_tree(tmp_path, {"attention.py": CODE, "test_attention.py": "x = 1\n", "conftest.py": "y = 2\n",
                         "utils.py": "z = 3\n", "notas.txt": "hola"})
    assert submission.load(tmp_path).source == CODE


def test_folder_with_one_other_py_name(tmp_path):
    make_tree(tmp_path, {"mi_solucion.py": CODE, "test_attention.py": "x = 1\n", "README.md": "# hola"})
    loaded = submission.load(tmp_path)
    assert (loaded.source, loaded.filename) == (CODE, "mi_solucion.py")


def test_folder_with_several_py_is_refused(tmp_path):
    make_tree(tmp_path, {"parte1.py": CODE, "parte2.py": CODE + "X = 2\n"})
    assert unreadable_code(tmp_path) == ("several_files", {"files": ["parte1.py", "parte2.py"]})


def test_empty_folder(tmp_path):
    assert unreadable_code(tmp_path)[0] == "no_python_file"


@pytest.mark.parametrize("text", ["", "\n\n", "  \t\n"])
def test_an_empty_file_is_unreadable_as_an_empty_folder_is(tmp_path, text):
    """An empty attention.py was graded like a stub (0 with "no defines la clase" three times),
    an empty folder unreadable: both are nothing handed in."""
    assert unreadable_code(make_tree(tmp_path, {"attention.py": text}) / "attention.py") == ("empty", {"file": "attention.py"})
    assert unreadable_code(make_zip(tmp_path / "e.zip", {"tarea/attention.py": text}))[0] == "empty"
    beside = make_tree(tmp_path / "f", {"attention.py": text, "cuaderno.ipynb": notebook_of(SOLVED)})
    assert submission.load(beside).filename == "cuaderno.ipynb"  # the empty file yields, as the stub does


def test_missing_path(tmp_path):
    assert unreadable_code(tmp_path / "nada.py")[0] == "missing"


def test_zip_with_nested_folder_and_macos_junk(tmp_path):
    archive = make_zip(tmp_path / "entrega.zip", {
        "entrega/solucion.py": CODE,
        "__MACOSX/entrega/._solucion.py": "\x00\x05\x16\x07 junk",
        "entrega/.DS_Store": "junk",
        "entrega/test_attention.py": "x = 1\n",
    })
    loaded = submission.load(archive)
    assert (loaded.source, loaded.filename) == (CODE, "entrega/solucion.py")


def test_zip_prefers_attention_py(tmp_path):
    archive = make_zip(tmp_path / "entrega.zip", {"a/b/attention.py": CODE, "a/otro.py": "x = 1\n"})
    assert submission.load(archive).source == CODE


def test_zip_and_folder_take_the_shallowest_attention_py_whatever_the_member_order(tmp_path):
    """An old copy in a subfolder listed first in the zip was graded (38/48) where the same tree as a
    folder took the top one (48/48): both now take the shallowest."""
    members = {"viejo/attention.py": "OLD = 1\n", "attention.py": CODE}
    assert submission.load(make_zip(tmp_path / "entrega.zip", members)).source == CODE
    folder = tmp_path / "entrega"
    for name, text in members.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    assert submission.load(folder).source == CODE


def test_a_notebook_renamed_attention_py_is_read_as_a_notebook(tmp_path):
    """Its JSON imported as Python failed with NameError: name 'null' is not defined (0/48)."""
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": "!pip install einops\n" + CODE}]
    path = tmp_path / "attention.py"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    loaded = submission.load(path)
    assert "class SelfAttention(torch.nn.Module):" in loaded.source and "pip" not in loaded.source
    assert submission.cell_lines(loaded.source) is not None  # lines point into the cells


def test_bad_zip(tmp_path):
    bad = tmp_path / "entrega.zip"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    assert unreadable_code(bad)[0] == "bad_zip"


def test_unsupported_extension(tmp_path):
    assert unreadable_code(make_tree(tmp_path, {"attention.txt": CODE}) / "attention.txt")[0] == "no_python_file"


def notebook(cells):
    """A minimal nbformat 4 notebook; each cell's source stored as a list of lines, as Jupyter does."""
    return json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True),
                   **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                  for kind, text in cells],
    })


@pytest.fixture(scope="module")
def solution_notebook(tmp_path_factory, solution_path):
    """The reference solution as a student's notebook: one cell per definition, plus noise around it."""
    source = solution_path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    starts = [min([n.lineno, *[d.lineno for d in getattr(n, "decorator_list", ())]]) for n in tree.body]
    definitions = ["".join(lines[a - 1:b - 1]) for a, b in zip(starts, [*starts[1:], len(lines) + 1])]
    cells = [
        ("markdown", "# Tarea: atención\nImplementa las tres clases."),
        ("code", "%matplotlib inline\n!pip install einops\nimport matplotlib.pyplot as plt"),
        *[("code", d) for d in definitions],
        ("code", "D_MODEL = 16\nmodel = MultiHeadAttention(D_MODEL, 4)\nx = torch.randn(2, 5, D_MODEL)"),
        ("code", "for step in range(3):\n    out, w = model(x, x, x)\n    print(step, out.shape)\n"
                 "plt.plot([1, 2])\nprint('listo')"),
    ]
    path = tmp_path_factory.mktemp("notebook") / "tarea.ipynb"
    path.write_text(notebook(cells), encoding="utf-8")
    return path


def test_notebook_keeps_what_the_classes_use_and_drops_the_rest(solution_notebook):
    """Kept: the graded classes and what they use; dropped: magics, training, plots, and imports
    and constants that nothing kept uses (D_MODEL and plt here serve only the training cell)."""
    source = submission.load(solution_notebook).source
    tree = ast.parse(source)
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert {"Cfg", "SelfAttention", "MultiHeadAttention", "CausalSelfAttention"} <= classes
    assert "@dataclass" in source
    for dropped in ("%matplotlib", "pip install", "for step", "print(", "plt.plot", "model = MultiHeadAttention",
                    "D_MODEL = 16", "import matplotlib.pyplot as plt"):
        assert dropped not in source, dropped


def test_notebook_magic_inside_definitions_only_cell(tmp_path):
    path = tmp_path / "n.ipynb"
    path.write_text(notebook([("code", "%%time\n" + CODE), ("code", "!ls\nprint(1)")]), encoding="utf-8")
    assert ast.dump(ast.parse(submission.load(path).source)) == ast.dump(ast.parse(CODE))


def test_bad_notebook(tmp_path):
    path = tmp_path / "n.ipynb"
    path.write_text('{"cells": 3}', encoding="utf-8")
    assert unreadable_code(path)[0] == "bad_notebook"


def test_notebook_scores_like_the_solution(graded_run, solution_path, solution_notebook):
    from_notebook, from_py = graded_run(solution_notebook).graded, graded_run(solution_path).graded
    assert from_notebook.score == from_py.score
    assert [o.status for o in from_notebook.outcomes] == [o.status for o in from_py.outcomes]


def test_unreadable_submission_scores_zero_with_a_spanish_reason(tmp_path, grading):
    bad = tmp_path / "entrega.zip"
    bad.write_bytes(b"not a zip at all")
    graded = grade(bad, grading, out_dir=tmp_path / "out")
    written = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert written["score"] == 0 and graded.score == (0, grading.max_score)
    assert len(written["tests"]) == len(grading.properties)
    assert written["output"].startswith("El .zip no se pudo abrir"), written["output"]  # once, at the top
    for test in written["tests"]:
        assert (test["score"], test["status"]) == (0, "failed")
        assert test["output"] == "No se pudo leer tu entrega: mira el mensaje al principio.", test["output"]


STUB_BODY = "".join(f"class {name}:\n    def forward(self, x):\n        # TODO\n        raise NotImplementedError\n\n\n"
                    for name in ("SelfAttention", "MultiHeadAttention", "CausalSelfAttention"))
SOLVED = "".join(f"class {name}:\n    def forward(self, x):\n        return x\n\n\n"
                 for name in ("SelfAttention", "MultiHeadAttention", "CausalSelfAttention"))


def notebook_of(*cells):
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": code.splitlines(keepends=True)} for code in cells]})


@pytest.mark.parametrize("as_zip", [False, True], ids=["folder", "zip"])
def test_untouched_stub_beside_a_solved_notebook_yields_to_the_notebook(tmp_path, as_zip):
    files = {"tarea/attention.py": STUB_BODY, "tarea/attention.ipynb": notebook_of(SOLVED)}
    where = make_zip(tmp_path / "e.zip", files) if as_zip else make_tree(tmp_path / "e", files)
    loaded = submission.load(where)
    assert loaded.filename == "tarea/attention.ipynb" and "return x" in loaded.source
    assert "NotImplementedError" not in loaded.source


BASE = "class Base:\n    def extra(self):\n        raise NotImplementedError\n\n\n"
BRANCH = SOLVED.replace("        return x\n", "        if x is None:\n            raise NotImplementedError('no')\n        return x\n")


@pytest.mark.parametrize("others, graded", [
    ({"cuaderno.ipynb": notebook_of(BASE, SOLVED)}, "cuaderno.ipynb"),          # an abstract base of its own
    ({"cuaderno.ipynb": notebook_of(STUB_BODY, SOLVED)}, "cuaderno.ipynb"),     # the stub pasted, then solved
    ({"cuaderno.ipynb": notebook_of(BRANCH)}, "cuaderno.ipynb"),                # raises only in a branch
    ({"cuaderno.ipynb": notebook_of(SOLVED), "clase.ipynb": notebook_of("x = 1\n")}, "cuaderno.ipynb"),
    ({"mi_solucion.py": SOLVED}, "mi_solucion.py"),
    ({"cuaderno.ipynb": notebook_of(STUB_BODY)}, "attention.py"),               # neither is written
    ({"a.ipynb": notebook_of(SOLVED), "b.ipynb": notebook_of(SOLVED)}, "a.ipynb"),  # copies: the same code
    ({"a.ipynb": notebook_of(SOLVED), "b.ipynb": notebook_of(SOLVED.replace("return x", "return x + 0", 1))},
     "attention.py"),  # two different solutions: which one?
    ({"cuaderno.ipynb": notebook_of("class Mia:\n    pass\n\n\n" + SOLVED.replace("class SelfAttention:", "class Otra:")
                                    + "SelfAttention = Otra\n")}, "cuaderno.ipynb"),  # a class under another name
    ({"cuaderno.ipynb": "{not json"}, "attention.py"),                           # unreadable
])
def test_the_stub_yields_to_the_one_other_file_with_every_class_written(tmp_path, others, graded):
    assert submission.load(make_tree(tmp_path, {"attention.py": STUB_BODY, **others})).filename == graded


@pytest.mark.parametrize("as_zip", [False, True], ids=["folder", "zip"])
def test_two_exercise_files_at_one_depth_are_told_apart_or_refused(tmp_path, as_zip, grading):
    """`borrador/attention.py` beside `final/attention.py`: the first in alphabetical order was
    graded, and the note called it the only file checked."""
    def load(files, name):
        return submission.load(make_zip(tmp_path / f"{name}.zip", files) if as_zip else make_tree(tmp_path / name, files))

    other = SOLVED.replace("return x", "return x + 0", 1)
    with pytest.raises(SubmissionUnreadable) as caught:
        load({"borrador/attention.py": other, "final/attention.py": SOLVED}, "two")
    assert caught.value.code == "several_exercise_files"
    assert caught.value.params["files"] == ["borrador/attention.py", "final/attention.py"]
    grade(tmp_path / ("two.zip" if as_zip else "two"), grading, out_dir=tmp_path / "out")
    message = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["output"]
    # Both already have the name asked for: the message asks to keep one, not to rename it.
    assert "borrador/attention.py" in message and "llámalo" not in message, message
    assert load({"a/attention.py": STUB_BODY, "b/attention.py": SOLVED}, "stub").filename == "b/attention.py"
    assert load({"a/attention.py": SOLVED, "b/attention.py": SOLVED}, "copies").filename == "a/attention.py"
    assert load({"attention.py": SOLVED, "viejo/attention.py": other}, "deeper").filename == "attention.py"


def test_a_written_exercise_file_is_graded_whatever_stands_beside_it(tmp_path):
    files = {"attention.py": SOLVED, "cuaderno.ipynb": notebook_of(SOLVED.replace("x\n", "2 * x\n"))}
    assert submission.load(make_tree(tmp_path, files)).filename == "attention.py"


def test_an_nbformat3_notebook_is_read_from_its_worksheets(tmp_path):
    """Jupyter still opens (and converts) nbformat 3; it was refused as not a notebook (0/48)."""
    cells = [{"cell_type": "heading", "level": 1, "source": ["Tarea"]},
             {"cell_type": "code", "language": "python", "input": ["import math\n", "print(1)"], "outputs": []},
             {"cell_type": "markdown", "source": "texto"},
             {"cell_type": "code", "language": "python", "input": SOLVED + "X = math.pi\n", "outputs": []}]
    path = tmp_path / "tarea.ipynb"
    path.write_text(json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {},
                                "worksheets": [{"cells": cells[:2]}, {"cells": cells[2:]}]}), encoding="utf-8")
    source = submission.load(path).source
    assert "class SelfAttention" in source and "print(1)" not in source
    assert "cells of the lines above: [[1,2,1,3]" in source  # code cell 2, as Jupyter numbers them
    path.write_text(json.dumps({"nbformat": 3, "worksheets": [{"cells": 3}]}), encoding="utf-8")
    assert unreadable_code(path)[0] == "bad_notebook"


def test_a_py_declaring_its_encoding_is_read_as_python_reads_it(tmp_path):
    """PEP 263: a latin-1 file that says so is valid Python; its copy says utf-8, lines unmoved."""
    path = tmp_path / "attention.py"
    path.write_bytes("# -*- coding: latin-1 -*-\n# Atención\nclass SelfAttention:\n    año = 'señal'\n"
                     .encode("latin-1"))
    source = submission.load(path).source
    assert source == "# -*- coding: utf-8 -*-\n# Atención\nclass SelfAttention:\n    año = 'señal'\n"
    namespace = {}
    exec(compile(source.encode("utf-8"), "attention.py", "exec"), namespace)
    assert namespace["SelfAttention"].año == "señal"


@pytest.mark.parametrize("data", [
    "x = 'señal'\n".encode("latin-1"),                        # no declaration: Python refuses it too
    "# coding: utf-8\nx = 'señal'\n".encode("latin-1"),      # declared UTF-8, but it is not
    "# coding: no-such-codec\nx = 'señal'\n".encode("latin-1"),
    # codecs that decode escapes to a lone surrogate, which no UTF-8 copy can hold (once a traceback
    # in the sandbox, and a batch stopped while hashing); the byte 0xff keeps them from being UTF-8
    b"# -*- coding: raw_unicode_escape -*-\n# \xff\nX = '\\ud800'\n",
    b"# -*- coding: unicode_escape -*-\n# \xff\nX = '\\ud800'\n",
])
def test_a_py_that_is_not_what_it_declares_is_unreadable(tmp_path, data):
    (tmp_path / "attention.py").write_bytes(data)
    assert unreadable_code(tmp_path / "attention.py")[0] == "not_utf8"


@pytest.mark.parametrize("files, graded", [
    ({"utils.py": "def ayuda():\n    pass\n", "tarea.ipynb": notebook_of(CODE)}, "tarea.ipynb"),  # a helper beside it
    ({"modelo.py": CODE, "experimentos.ipynb": notebook_of("print(1)\n")}, "modelo.py"),
    ({"utils.py": "x = 1\n", "sub/solucion.py": CODE}, "sub/solucion.py"),
])
def test_without_the_exercise_file_the_one_file_defining_a_graded_class_is_graded(tmp_path, files, graded):
    assert submission.load(make_tree(tmp_path, files)).filename == graded


def test_two_files_defining_the_classes_are_still_refused_as_ambiguous(tmp_path):
    make_tree(tmp_path, {"v1.py": CODE, "v2.py": CODE + "X = 2\n", "notas.ipynb": notebook_of("x = 1\n")})
    assert unreadable_code(tmp_path) == ("several_files", {"files": ["v1.py", "v2.py"]})


def test_copies_of_one_notebook_are_one_submission(tmp_path):
    make_tree(tmp_path, {"Tarea.ipynb": notebook_of(SOLVED), "Copia de Tarea.ipynb": notebook_of(SOLVED)})
    assert submission.load(tmp_path).filename == "Copia de Tarea.ipynb"


NEWER_DEMO = 'if __name__ == "__main__":\n    cfg = {"n": 3}\n    print(f"heads: {cfg["n"]}")\n'


@pytest.mark.parametrize("demo", [NEWER_DEMO, NEWER_DEMO.replace('__name__ == "__main__"', "('__main__' == __name__)"),
                                  NEWER_DEMO.replace("\n", "\r\n")])
def test_a_main_demo_the_grader_cannot_parse_is_left_out_line_for_line(tmp_path, demo):
    """Python 3.12 reads f"{cfg["n"]}", the grader's 3.11 does not: in the `__main__` block, which
    an import never runs, that costs nothing; every other line keeps its text and its number."""
    text = CODE + "\n" + demo + "# the end\nX = 1\n"
    loaded = submission.load(make_tree(tmp_path, {"attention.py": text}) / "attention.py")
    assert len(loaded.source.splitlines()) == len(text.splitlines())
    kept = [line for line in loaded.source.splitlines() if line.strip()]
    assert kept == [line for line in CODE.splitlines() if line.strip()] + ["X = 1"]
    ast.parse(loaded.source)


@pytest.mark.parametrize("text", [
    CODE.replace("    pass", "    x = f'{cfg['n']}'") + "\n" + NEWER_DEMO,  # an error outside the block too
    CODE + "\n" + NEWER_DEMO + "else:\n    print('imported')\n",  # the else branch runs on import
    CODE + "\n" + NEWER_DEMO.replace('    print(f"heads', 'print(f"heads'),  # no block past the guard
    # an outside attacker's: where the lines split at \n are not Python's, the rest of the file is not
    # what it seems; each hid `X = 1.0` from the grade while Python ran it
    CODE + "\n" + NEWER_DEMO + "  \x0cX = 1.0\n",  # a form feed: back at column 0, after the block
    CODE + "\n" + NEWER_DEMO.replace("\n", "\r") + "X = 1.0\n",  # bare \r: line breaks to an import
    CODE + "\n" + NEWER_DEMO + '    banner = """\nX = 0.5  # """\n',  # a string the block opens
    "# -*- coding: unicode_escape -*-\n" + CODE + "\n" + NEWER_DEMO + '    print("demo\\x22)\\nX = 1.0\n',
])
def test_a_syntax_error_the_main_block_does_not_hold_alone_is_left_for_the_worker(tmp_path, text):
    path = make_tree(tmp_path, {"attention.py": ""}) / "attention.py"
    path.write_bytes(text.encode())  # as written: no newline translation
    assert submission.load(path).source == text
