"""Notebooks: what of a student's cells is graded, and feedback that points at their own cells.

The unit tests run notebook_source on small notebooks (milliseconds each). Three Colab-style
notebooks under tests/submissions/notebooks/ (markdown cells, %%capture with !pip, google.colab,
a %%bash cell, a training cell with tqdm and plots, DEVICE and NEG_INF used by the classes) are
graded end to end: the correct one scores what solutions/attention.py scores, the others get their
failure reported at the student's cell and line.
"""
import ast
import json
import string
import sys
import time
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autograder import feedback, submission
from autograder.config import Limits
from autograder.outcomes import Outcome
from autograder.submission import LINES_MARKER, SubmissionUnreadable, cell_lines, notebook_source
from autograder.worker.client import Worker
from autograder.worker.submission_errors import SubmissionError

NOTEBOOKS = Path(__file__).resolve().parent / "submissions" / "notebooks"
COLAB = NOTEBOOKS / "colab_correct.ipynb"
BUG = NOTEBOOKS / "colab_bug_in_class.ipynb"
EINOPS = NOTEBOOKS / "colab_uses_einops.ipynb"


def notebook(*cells):
    """An nbformat 4 notebook: a str is a code cell, ("markdown", text) a text cell."""
    cells = [("code", c) if isinstance(c, str) else c for c in cells]
    return json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True),
                   **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                  for kind, text in cells],
    })


def kept(*cells):
    return notebook_source(notebook(*cells))


def code_of(source):
    """The module without its line map."""
    assert source.splitlines()[-1].startswith(LINES_MARKER)
    return source[:source.rstrip("\n").rfind("\n") + 1]


def names(source):
    """The names the module's top-level statements bind, in order (an `if`/`try` block as 'block')."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found += [a.asname or a.name.split(".")[0] for a in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.append(node.name)
        elif isinstance(node, ast.Assign):
            found.append(ast.unparse(node.targets[0]))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            found.append(ast.unparse(node.target))
        else:
            found.append("block")
    return found


def code_cells(path_or_text):
    text = path_or_text.read_text(encoding="utf-8") if isinstance(path_or_text, Path) else path_or_text
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in json.loads(text)["cells"] if c["cell_type"] == "code"]


def where(path, needle):
    """(code cell, line) of the only line of the notebook's code cells that holds `needle`."""
    found = [(number, index) for number, cell in enumerate(code_cells(path), 1)
             for index, line in enumerate(cell.splitlines(), 1) if needle in line]
    assert len(found) == 1, found
    return found[0]


def assert_lines_are_the_students(text):
    """Every line of the module is, character for character, the line of the cell it maps to."""
    source, cells = notebook_source(text), code_cells(text)
    lines = cell_lines(source)
    for number, line in enumerate(code_of(source).splitlines(), 1):
        found = lines.locate(number)
        if found is None:
            assert line == "", (number, line)
            continue
        cell, cell_line = found
        assert cells[cell - 1].replace("\r\n", "\n").replace("\r", "\n").split("\n")[cell_line - 1] == line


# ---- what is kept ------------------------------------------------------------------------------

def test_colab_notebook_keeps_what_the_classes_need_and_nothing_else():
    source = submission.load(COLAB).source
    assert names(source) == ["math", "dataclass", "torch", "nn", "F", "DEVICE", "NEG_INF", "causal_mask",
                             "SelfAttention", "MultiHeadAttention", "Cfg", "CausalSelfAttention"]
    for dropped in ("pip install", "google.colab", "drive.mount", "%cd", "tqdm", "matplotlib", "plt.", "%matplotlib",
                    "nvidia-smi", "manual_seed", "print(", "sa = SelfAttention", "cfg = Cfg", "for step", "pytest"):
        assert dropped not in source, dropped


@pytest.mark.parametrize("path", [COLAB, BUG, EINOPS], ids=lambda p: p.stem)
def test_every_line_of_the_module_is_the_students_line(path):
    assert_lines_are_the_students(path.read_text(encoding="utf-8"))


def test_constants_used_by_the_classes_are_kept_transitively_and_in_order():
    source = kept(
        "import torch\nimport torch.nn as nn\nimport math",
        "SCALE_BASE = 2\nUNUSED = 3\nNEG_INF = float('-inf')\nSCALE = math.sqrt(SCALE_BASE) * 1.0",
        ("markdown", "## Clases"),
        "class SelfAttention(nn.Module):\n    def forward(self, x):\n"
        "        return x.masked_fill(x < 0, NEG_INF) / SCALE",
        "DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')",
        "class CausalSelfAttention(nn.Module):\n    def __init__(self, cfg):\n        super().__init__()\n"
        "        self.mask = torch.ones(2, device=DEVICE)",
    )
    assert names(source) == ["torch", "nn", "math", "SCALE_BASE", "NEG_INF", "SCALE", "SelfAttention", "DEVICE",
                             "CausalSelfAttention"]


def test_setattr_on_a_kept_class_is_kept():
    source = kept(
        "import torch",
        "class SelfAttention(torch.nn.Module):\n    pass",
        "def forward(self, x):\n    return x\n\nsetattr(SelfAttention, 'forward', forward)\nprint('ok')",
    )
    assert "setattr(SelfAttention, 'forward', forward)" in source and "print" not in source


def test_methods_given_in_a_for_loop_over_a_written_list_are_kept():
    """As a notebook attaches several methods at once; a loop over anything else, or one that does
    more than set the class's attributes, is not kept (it could train, plot or run for ever)."""
    source = kept(
        "import torch",
        "class MultiHeadAttention(torch.nn.Module):\n    pass",
        "def forward(self, q, k, v, mask=None):\n    return q\n\ndef split_heads(self, x, batch_size):\n    return x",
        "for _name, _fn in [('forward', forward), ('split_heads', split_heads)]:\n"
        "    setattr(MultiHeadAttention, _name, _fn)",
        "for epoch in range(3):\n    setattr(MultiHeadAttention, 'epoch', epoch)",
        "for _name, _fn in [('forward', forward)]:\n    setattr(MultiHeadAttention, _name, _fn)\n    print(_name)",
    )
    assert "setattr(MultiHeadAttention, _name, _fn)\n" in source and "def split_heads" in source
    assert "range(3)" not in source and "print" not in source


def test_a_for_loop_over_written_graded_classes_that_sets_their_attributes_is_kept():
    """`for cls in (SelfAttention, MultiHeadAttention): cls.temperature = 0.5` changes both classes
    in the kernel: graded without it, they would not be the notebook's classes (an attacker's file
    scored 48 for classes that, run as Jupyter runs them, score 38). A loop over other names, or
    one that does more, is still dropped."""
    source = kept(
        "import torch",
        "class SelfAttention(torch.nn.Module):\n    temperature = 1.0",
        "class MultiHeadAttention(torch.nn.Module):\n    temperature = 1.0",
        "for cls in (SelfAttention, MultiHeadAttention):\n    cls.temperature = 0.5",
        "for c in [SelfAttention]:\n    setattr(c, 'scale', 2.0)",
        "for model in (SelfAttention, print):\n    model.temperature = 3.0",
        "for cls in (SelfAttention,):\n    cls.temperature = 4.0\n    print(cls)",
        "def sa_forward(self, x):\n    return x",
        "for clase, nombre, funcion in [(SelfAttention, 'forward', sa_forward), (MultiHeadAttention, 'forward', sa_forward)]:\n"
        "    setattr(clase, nombre, funcion)",
        "for nombre, funcion in {'extra': sa_forward}.items():\n    setattr(SelfAttention, nombre, funcion)",
        "for clase, nombre in [(SelfAttention, 'x'), (len, 'y')]:\n    setattr(clase, nombre, 5.0)",
    )
    assert "cls.temperature = 0.5" in source and "setattr(c, 'scale', 2.0)" in source
    assert "setattr(clase, nombre, funcion)" in source and "setattr(SelfAttention, nombre, funcion)" in source
    assert "def sa_forward" in source
    assert "3.0" not in source and "4.0" not in source and "5.0" not in source


def test_what_a_top_level_block_leaves_bound_is_kept_as_the_kernel_leaves_it():
    """A correct notebook swept a constant in a loop (`for NEG in [-1e4, float('-inf')]:` after `NEG =
    -1e4`) or fixed it in a `with` block: the kernel ends with -inf, the grade kept -1e4 (45/48); a
    loop's `else:` set SCALED = False (the kernel's mistake, 38) and was graded True (48). Kept now:
    a `for` variable's last item, a loop's `else:` and a `with` body's assignments; not where a
    `break` may end the loop early, the body assigns the variable again, or the assignment reads
    what the `with` opened. The context managers, the loops and their bodies never run."""
    source = code_of(kept(
        "import torch",
        "NEG = -1e4\nSCALED = True\nLAST = 0\nDATA = None\nKEPT = 1",
        "class SelfAttention(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x * NEG * SCALED + LAST + KEPT, DATA",
        "for NEG in [-1e4, -1e9,\n            float('-inf')]:\n    print(SelfAttention()(torch.ones(1)))",
        "while False:\n    pass\nelse:\n    SCALED = False",
        "with torch.no_grad():\n    KEPT = (2 +\n        3)\n    print(KEPT)",
        "for LAST in (1, 2, 3):\n    if LAST == 2:\n        break",
        "for LAST in [4, 5]:\n    LAST = LAST + 1",
        "with open('datos.txt') as f:\n    DATA = f.read()",
    ))
    assert "NEG = float('-inf')\n" in source and source.index("NEG = -1e4") < source.index("NEG = float('-inf')")
    assert "    SCALED = False" not in source and "SCALED = False\n" in source
    assert "KEPT = (2 +\n        3)\n" in source and "print" not in source and "no_grad" not in source
    assert "LAST = 3" not in source and "LAST = 5" not in source and "LAST = LAST + 1" not in source
    assert "f.read()" not in source and "open(" not in source
    namespace = {}
    exec(compile(source, "attention.py", "exec"), namespace)
    assert (namespace["NEG"], namespace["SCALED"], namespace["KEPT"], namespace["LAST"]) == (float("-inf"), False, 5, 0)


def test_a_with_blocks_body_runs_once_as_a_cells_does():
    """`with warnings.catch_warnings():` around the imports, a helper or a class (a correct notebook's:
    0, 4 and 35/48, an outside writer's): the kernel runs the body once and binds all of it. Read as
    the cell's own statements, blocks one level out; what reads the `as` name stays out."""
    source = code_of(kept(
        "import warnings\nwith warnings.catch_warnings():\n    warnings.simplefilter('ignore')\n    import math\n"
        "    from dataclasses import dataclass\n    def escala(d):\n        return d ** -0.5\n    @dataclass\n"
        "    class Cfg:\n        n: int = 2\n    if math.pi > 3:\n        K = 1\n    else:\n        K = 2",
        "with open('datos.txt') as f:\n    def leer():\n        return f.read()\n    K = 3",
        "class SelfAttention:\n    def f(self):\n        return escala(4), math.pi, Cfg().n, K",
    ))
    assert "simplefilter" not in source and "leer" not in source and "warnings" not in source
    namespace = {}
    exec(compile(source, "attention.py", "exec"), namespace)
    assert namespace["SelfAttention"]().f() == (0.5, 3.141592653589793, 2, 3)


def test_names_set_through_globals_are_kept():
    """`globals()["NEG"] = float("-inf")` in a later cell binds NEG in the kernel as `NEG = ...` does
    (a correct notebook was graded at its earlier -1e4: 45/48); also `vars()[...]` and
    `globals().update(...)`; one that binds nothing the classes use is dropped."""
    source = code_of(kept(
        "import torch",
        "NEG = -1e4\nSCALE = 1.0\nBIAS = 0.0",
        "class SelfAttention(torch.nn.Module):\n    def forward(self, x):\n        return x * NEG * SCALE + BIAS",
        "globals()['NEG'] = float('-inf')",
        "vars()['SCALE'] = 2.0\nglobals().update(BIAS=3.0)\nglobals().update({'OTHER': 1})",
    ))
    namespace = {}
    exec(compile(source, "attention.py", "exec"), namespace)
    assert (namespace["NEG"], namespace["SCALE"], namespace["BIAS"]) == (float("-inf"), 2.0, 3.0)
    assert "OTHER" not in source


def test_names_set_or_removed_through_the_namespaces_methods_are_kept_in_order():
    """`globals().setdefault("NEG", ...)` and `globals().__setitem__("NEG", ...)` bind NEG as
    `globals()["NEG"] = ...` does, `globals().pop("NEG")` unbinds it as `del NEG` (correct
    notebooks lost 39 and 9 of 48 to a NameError whose message said the name was assigned in a loop)."""
    source = code_of(kept(
        "import torch",
        "globals().setdefault('NEG', float('-inf'))\nvars().setdefault('SCALE', 2.0)",
        "globals().__setitem__('BIAS', 1.0)\nglobals().pop('BIAS')\nglobals().__setitem__('BIAS', 3.0)",
        "class SelfAttention(torch.nn.Module):\n    def forward(self, x):\n        return x * NEG * SCALE + BIAS",
        "globals().setdefault('OTHER', 1)",
    ))
    namespace = {}
    exec(compile(source, "attention.py", "exec"), namespace)
    assert (namespace["NEG"], namespace["SCALE"], namespace["BIAS"]) == (float("-inf"), 2.0, 3.0)
    assert "OTHER" not in source


@pytest.mark.parametrize("removal", ["delattr(SelfAttention, 'forward')", "type.__delattr__(SelfAttention, 'forward')",
                                     "delattr(*(SelfAttention, 'forward'))"])
def test_a_method_removed_with_delattr_leaves_the_inherited_one_as_in_the_kernel(removal):
    """A later cell attaches an experimental forward, then removes it: the class is back to its base's
    (`del SelfAttention.forward` was kept, `delattr(...)` dropped: 34/48 for a correct notebook)."""
    source = code_of(kept(
        "import torch",
        "class Base(torch.nn.Module):\n    def forward(self, x):\n        return 'base'",
        "class SelfAttention(Base):\n    pass",
        "def experiment(self, x):\n    return 'experiment'\n\nSelfAttention.forward = experiment",
        removal,
    ))
    namespace = {"__name__": "graded"}
    exec(compile(source, "attention.py", "exec"), namespace)
    assert namespace["SelfAttention"].forward(None, 1) == "base", source


@pytest.mark.parametrize("attach", ["type.__setattr__(SelfAttention, 'forward', forward)",
                                    "setattr(*(SelfAttention, 'forward', forward))",
                                    "for k, v in dict(forward=forward).items():\n    setattr(SelfAttention, k, v)"])
def test_a_method_attached_through_another_spelling_of_setattr_is_kept(attach):
    source = code_of(kept(
        "import torch",
        "class SelfAttention(torch.nn.Module):\n    pass",
        "def forward(self, x):\n    return 'attached'",
        attach,
    ))
    namespace = {"__name__": "graded"}
    exec(compile(source, "attention.py", "exec"), namespace)
    assert namespace["SelfAttention"].forward(None, 1) == "attached", source


def test_a_shell_line_continued_with_a_backslash_is_dropped_whole():
    source = kept("!pip install torch \\\n    numpy \\\n    einops\nimport torch\nX = 1",
                  "class SelfAttention(torch.nn.Module):\n    y = X")
    assert names(source) == ["torch", "X", "SelfAttention"]


def test_a_module_written_with_writefile_and_imported_is_the_notebooks_code():
    """%%writefile capas.py then `from capas import ...`: in Jupyter the classes come from that file;
    here its cell is part of the module and the import of it is dropped."""
    source = kept(
        "%%writefile capas.py\nimport torch\n\nclass SelfAttention(torch.nn.Module):\n    pass",
        "%%writefile notas.txt\nclass MultiHeadAttention: no es Python",
        "from capas import SelfAttention\nimport capas",
    )
    assert names(source) == ["torch", "SelfAttention"] and "from capas" not in source
    assert_lines_are_the_students(notebook(
        "%%writefile capas.py\nimport torch\n\nclass SelfAttention(torch.nn.Module):\n    pass",
        "from capas import SelfAttention"))


def test_a_name_rebound_after_its_module_was_written_is_the_modules_again_after_its_import():
    """%%writefile attention.py, then a throwaway class or helper of the same name tried in another
    cell, then `from attention import ...` (or `*`): in Jupyter the import binds the module's again;
    the dropped import left the throwaway one graded (an outside writer's correct notebooks: 35 and
    43 of 48). Names nothing rebound are not repeated."""
    module = ("%%writefile attention.py\nimport torch\n\ndef puntajes(q, k):\n    return q * k\n\n"
              "class SelfAttention(torch.nn.Module):\n    origen = 'modulo'\n\n    def forward(self, q, k):\n        return puntajes(q, k)\n\n"
              "class MultiHeadAttention(torch.nn.Module):\n    pass")
    throwaway = "class SelfAttention:\n    origen = 'prueba'\n\ndef puntajes(estudiante):\n    return estudiante"
    for importing in ("from attention import SelfAttention, MultiHeadAttention, puntajes", "from attention import *"):
        source = kept(module, throwaway, importing)
        namespace = {}
        exec(compile(code_of(source), "notebook", "exec"), namespace)
        assert namespace["SelfAttention"].origen == "modulo", importing
        assert namespace["SelfAttention"]().forward(2, 3) == 6, importing
        assert names(source).count("MultiHeadAttention") == 1, importing  # not rebound: not repeated
    # the copy maps to the module's own cell and lines
    assert_lines_are_the_students(notebook(module, throwaway, "from attention import SelfAttention"))
    # rebound after the import: the later one stands, as in the kernel
    source = kept(module, "from attention import SelfAttention", throwaway)
    namespace = {}
    exec(compile(code_of(source), "notebook", "exec"), namespace)
    assert namespace["SelfAttention"].origen == "prueba"


@pytest.mark.parametrize("importing", ["from attention import *", "from attention import SelfAttention"])
def test_a_written_modules_code_reads_its_own_names_not_a_later_cells(importing):
    """%%writefile attention.py whose class calls its helper `puntajes`, then a later cell's unrelated
    `def puntajes(lista)`: in the kernel the module's code reads the module's own helper (an outside
    writer's correct notebook scored 21/48 here: the later one was kept and called). A helper the
    notebook's own class reads is still the latest binding, as in the kernel."""
    module = ("%%writefile attention.py\nimport torch\n\ndef puntajes(q, k):\n    return q * k\n\n"
              "class SelfAttention(torch.nn.Module):\n    def forward(self, q, k):\n        return puntajes(q, k)")
    notes = "def puntajes(lista):\n    return sum(lista) / len(lista)\n\nprint(puntajes([7, 8, 9]))"
    own = ("def escala(x):\n    return x\n\nclass MultiHeadAttention:\n    def f(self, x):\n        return escala(x)",
           "def escala(x):\n    return 10 * x")
    namespace = {}
    exec(compile(code_of(kept(module, importing, notes, *own)), "notebook", "exec"), namespace)
    assert namespace["SelfAttention"]().forward(2, 3) == 6
    assert namespace["MultiHeadAttention"]().f(1) == 10


@pytest.mark.parametrize("loading, kernel", [("from attention import *", (True, float("-inf"))),
                                             ("import attention as at\nSelfAttention = at.SelfAttention",
                                              (True, float("-inf"))),
                                             ("%run attention.py", (False, -1e4))])
def test_a_written_modules_demo_runs_only_where_the_notebook_runs_the_module(loading, kernel, monkeypatch):
    """A %%writefile module whose `if __name__ == "__main__":` demo rebinds its constants: an import
    never runs it, `%run` does, as the kernel's `__name__` says. Read as the notebook's own cell
    (where `__name__` is "__main__"), the demo's last loop value and fill were graded: a correct
    notebook scored 35/48, and 45/48 with a -1e4 diagnosis (an outside writer's four notebooks)."""
    module = ("%%writefile attention.py\nimport torch\nESCALAR = True\nNEG = float('-inf')\n\n"
              "class SelfAttention(torch.nn.Module):\n    def f(self):\n        return ESCALAR, NEG\n\n"
              "if __name__ == '__main__':\n    for ESCALAR in [True, False]:\n        print(ESCALAR)\n    NEG = -1e4\n")
    graded = types.ModuleType("graded")
    monkeypatch.setitem(sys.modules, "graded", graded)  # as the worker imports it: `import attention` is this module
    exec(compile(code_of(kept(module, loading)), "graded", "exec"), graded.__dict__)
    assert graded.SelfAttention().f() == kernel


@pytest.mark.parametrize("taking", ["SelfAttention = at.SelfAttention", ""])
def test_a_module_imported_under_an_alias_after_a_throwaway_class_gives_its_own(taking):
    """%%writefile attention.py, a throwaway `class SelfAttention` in another cell, then `import
    attention as at`: in the kernel `at.SelfAttention` is the module's, and the notebook's own name
    stays the throwaway until it is taken from `at` (an outside writer's correct notebook, which
    took it, scored 35/48: `at` was this module, whose SelfAttention was the throwaway)."""
    module = ("%%writefile attention.py\nimport torch\n\nclass SelfAttention(torch.nn.Module):\n    origen = 'modulo'\n\n"
              "class MultiHeadAttention(torch.nn.Module):\n    pass")
    source = kept(module, "class SelfAttention:\n    origen = 'prueba'", f"import attention as at\n{taking}")
    graded = types.ModuleType("graded")
    exec(compile(code_of(source), "graded", "exec"), graded.__dict__)
    assert graded.SelfAttention.origen == ("modulo" if taking else "prueba"), source
    if taking:
        assert graded.at.SelfAttention is graded.SelfAttention


def test_imports_of_a_written_module_past_the_bound_are_dropped_as_before(monkeypatch):
    """_reimported looks at REIMPORT_STEPS bindings in all (100k `from m import *` lines must not
    cost the grader's process minutes): past them an import is dropped, everything else kept."""
    monkeypatch.setattr(submission, "REIMPORT_STEPS", 2)
    module = "%%writefile attention.py\nimport torch\n\nclass SelfAttention(torch.nn.Module):\n    origen = 'modulo'"
    source = kept(module, "class SelfAttention:\n    origen = 'prueba'", "from attention import *\nfrom attention import *")
    namespace = {}
    exec(compile(code_of(source), "notebook", "exec"), namespace)
    assert namespace["SelfAttention"].origen == "prueba" and names(source).count("SelfAttention") == 2


@pytest.mark.parametrize("importing, call", [("from modelos import atencion", "atencion.core"),
                                              ("import modelos.atencion", "modelos.atencion.core"),
                                              ("import modelos.atencion as at", "at.core")])
def test_a_module_written_in_a_folder_is_the_notebooks_code_however_it_is_imported(importing, call):
    """%%writefile modelos/atencion.py, then the module imported by its package (an outside writer's
    two notebooks scored 0/48: 'modelos' not installed, then not defined)."""
    source = kept(
        "!mkdir -p modelos",
        "%%writefile modelos/atencion.py\ndef core(x):\n    return 2 * x",
        importing,
        f"class SelfAttention:\n    def forward(self, x):\n        return {call}(x)",
    )
    namespace = {"__name__": "attention"}
    sys.modules["attention"] = types.SimpleNamespace(core=lambda x: 2 * x)  # what __import__(__name__) finds
    try:
        exec(compile(code_of(source), "<notebook>", "exec"), namespace)
    finally:
        del sys.modules["attention"]
    assert namespace["SelfAttention"]().forward(3) == 6
    assert "import modelos" not in source and "from modelos" not in source


def test_two_modules_written_in_one_folder_stay_reachable_after_both_imports():
    """`import modelos.atencion` then `import modelos.util.mascaras` (both written with %%writefile):
    the second import must not hide the first, as it does not in the kernel."""
    source = kept(
        "%%writefile modelos/atencion.py\ndef core(x):\n    return 2 * x",
        "%%writefile modelos/util/mascaras.py\ndef crop(x):\n    return x + 1",
        "import modelos.atencion",
        "import modelos.util.mascaras",
        "class SelfAttention:\n    def forward(self, x):\n"
        "        return modelos.atencion.core(modelos.util.mascaras.crop(x))",
    )
    namespace = {"__name__": "attention"}
    sys.modules["attention"] = types.SimpleNamespace(core=lambda x: 2 * x, crop=lambda x: x + 1)
    try:
        exec(compile(code_of(source), "<notebook>", "exec"), namespace)
    finally:
        del sys.modules["attention"]
    assert namespace["SelfAttention"]().forward(3) == 8


def test_name_reads_main_as_in_the_kernel():
    """In Jupyter `__name__` is "__main__": classes and constants under `if __name__ == "__main__":`
    exist there, and so they must in the module the worker imports under the exercise's name."""
    source = kept(
        "import torch\nimport logging\nLOG = logging.getLogger(__name__)",
        'if __name__ == "__main__":\n    NEG_INF = float("-inf")\nelse:\n    NEG_INF = 0.0',
        "class SelfAttention(torch.nn.Module):\n    def forward(self, x):\n        LOG.debug(__name__)\n"
        "        return x.masked_fill(x < 0, NEG_INF)",
    )
    namespace = {"__name__": "attention"}
    exec(compile(code_of(source), "attention.py", "exec"), namespace)
    assert namespace["NEG_INF"] == float("-inf") and namespace["LOG"].name == "__main__"
    assert "LOG.debug('__main__')" in source
    line = code_of(source).splitlines().index("if '__main__' == \"__main__\":") + 1
    assert cell_lines(source).locate(line) == (2, 1)  # the line still maps to the student's


def test_name_inside_an_f_string_reads_main_in_a_quote_the_f_string_allows():
    """f'{__name__}.atencion' became f'{'__main__'}.atencion', a syntax error before Python 3.12: the
    statement was dropped and a correct notebook that logged with it lost 12 points."""
    source = kept(
        "import logging\nLOG = logging.getLogger(f'{__name__}.atencion')\nNAME = f\"{f'{__name__}'}\"",
        "class SelfAttention:\n    log, name = LOG, NAME",
    )
    namespace = {"__name__": "attention"}
    exec(compile(code_of(source), "attention.py", "exec"), namespace)
    assert namespace["LOG"].name == "__main__.atencion" and namespace["NAME"] == "__main__"


def test_a_deletion_or_a_mutator_of_a_used_name_is_kept_in_order():
    """`del OPTS["scaled"]` and `OPTS.pop(...)` change OPTS in the kernel, as `OPTS.update(...)` does."""
    source = kept(
        "OPTS = {'scaled': True, 'fill': 0.0, 'extra': 1}\nLOG = []",
        "del OPTS['scaled']\nOPTS.pop('fill')\nLOG.clear()\nprint(OPTS)",
        "class SelfAttention:\n    opts = OPTS",
    )
    assert "del OPTS['scaled']" in source and "OPTS.pop('fill')" in source
    assert "LOG" not in source and "print" not in source


@pytest.mark.parametrize("definition", [
    "def helper(x, fill=VALUE):\n    return x\n\nclass SelfAttention:\n    f = staticmethod(helper)",  # default
    "@decorate(VALUE)\nclass SelfAttention:\n    pass",                                               # decorator
    "class SelfAttention(Base[VALUE]):\n    pass",                                                  # base class
    "class SelfAttention:\n    size = VALUE",                                                      # class body
    "class SelfAttention:\n    def f(self, x: VALUE) -> None:\n        pass",                       # annotation
    "class SelfAttention:\n    def f(self):\n        return [v for v in VALUE]",                   # comprehension
    "class SelfAttention:\n    def f(self):\n        def g():\n            return VALUE\n        return g",
], ids=["default", "decorator", "base", "class_body", "annotation", "comprehension", "nested"])
def test_a_name_is_used_wherever_a_kept_definition_reads_it(definition):
    source = kept("VALUE = [1]\nOTHER = 2\ndecorate = lambda v: lambda c: c\nBase = {1: object}", definition)
    assert "VALUE = [1]" in source and "OTHER" not in source


def test_a_class_body_that_rebinds_a_global_still_reads_it_first():
    """`n_embd: int = n_embd` in a dataclass reads the cell's n_embd (the class has not bound it
    yet), though Python's symbol table calls the name local to the class."""
    source = kept("n_embd = 32\nn_head = 4\nunused = 1",
                  "from dataclasses import dataclass\n@dataclass\nclass Cfg:\n    n_embd: int = n_embd\n"
                  "    n_head: int = n_head")
    assert names(source) == ["n_embd", "n_head", "dataclass", "Cfg"]
    namespace = {}
    exec(compile(code_of(source), "nb", "exec"), namespace)  # runs as the notebook did
    assert (namespace["Cfg"]().n_embd, namespace["Cfg"]().n_head) == (32, 4)


@pytest.mark.parametrize("change", [
    "TEMP.mul_(2.0)", "TEMP.data.fill_(2.0)", "nn.init.constant_(TEMP, 2.0)", "torch.add(TEMP, TEMP, out=TEMP)",
    "_ = CONFIG.update(temp=2.0)", "viejo = CONFIG.pop('temp'); CONFIG['temp'] = 2.0",
    "class Experimento:\n    CONFIG['temp'] = 2.0\n    lr = 1e-3", "class Experimento:\n    global TEMP\n    TEMP = TEMP * 2",
])
def test_a_change_the_kernel_makes_in_place_is_kept(change):
    """A tensor's in-place method, torch's in-place functions, a mutator call inside an assignment
    to an unused name, and a class body (it runs when the class is defined): each changes what the
    classes read in the kernel, and was dropped (48 where the kernel earns 35: an outside attacker's).
    A demo's in-place initialisation of its own model stays out."""
    source = kept("import torch\nfrom torch import nn\nTEMP = torch.ones(1)\nCONFIG = {'temp': 1.0}", change,
                  "modelo = nn.Linear(2, 2)\nnn.init.zeros_(modelo.weight)\nmodelo.weight.data.mul_(3)",
                  "class SelfAttention:\n    def f(self):\n        return float(TEMP) * CONFIG['temp']")
    namespace = {}
    exec(compile(code_of(source), "<notebook>", "exec"), namespace)
    assert namespace["SelfAttention"]().f() == 2.0 and "modelo" not in source


def test_a_global_a_function_changes_in_place_is_kept():
    """`global CALLS; CALLS += 1` reads CALLS, though Python's symbol table calls it assigned only:
    its cell's `CALLS = 0` is kept, as a debug counter in forward needs it."""
    source = kept("CALLS = 0\nTOTAL = 0.0\nOTHER = 1",
                  "def count():\n    global CALLS\n    CALLS += 1\n\n"
                  "class SelfAttention:\n    def forward(self, x):\n        global TOTAL\n        TOTAL += 1\n"
                  "        count()\n        return x")
    assert names(source) == ["CALLS", "TOTAL", "count", "SelfAttention"]
    namespace = {}
    exec(compile(code_of(source), "nb", "exec"), namespace)
    namespace["SelfAttention"]().forward(0)
    assert (namespace["CALLS"], namespace["TOTAL"]) == (1, 1.0)


def test_locals_parameters_and_attributes_do_not_keep_a_global_of_that_name():
    source = kept(
        "x = torch.randn(2, 5, 16)\nmask = None\nweights = 3\nd_k = 4",
        "class SelfAttention:\n    def __init__(self, d_k):\n        self.d_k = d_k\n"
        "    def forward(self, x, mask=None):\n        weights = x.softmax(-1)\n        return weights, self.mask",
    )
    assert names(source) == ["SelfAttention"]


def test_of_a_statement_only_what_binds_a_used_name_is_kept():
    source = kept(
        "import torch",
        "cfg = Cfg(n_embd=32)\nmodel = CausalSelfAttention(cfg)\nmodel(torch.randn(1, 4, 32))\nprint(model)",
        "class SelfAttention:\n    def forward(self, x):\n        return cfg.n_embd",
        "class Cfg:\n    n_embd = 32",
    )
    assert names(source) == ["cfg", "SelfAttention", "Cfg"]


def test_a_walrus_at_the_top_of_a_cell_binds_as_an_assignment_does():
    """`(BLOCK := 16)` alone on a line, or inside a print: BLOCK is as bound as by `BLOCK = 16`
    (an outside writer's notebook lost every point to a NameError)."""
    source = kept(
        "import torch",
        "(BLOCK := 16)\nprint(WIDTH := 8)\nprint('unused')",
        "class SelfAttention:\n    size = BLOCK * WIDTH",
    )
    assert "(BLOCK := 16)" in source and "print(WIDTH := 8)" in source and "'unused'" not in source
    namespace = {}
    exec(compile(code_of(source), "<notebook>", "exec"), namespace)
    assert namespace["SelfAttention"].size == 128


def test_a_walrus_inside_a_comprehension_binds_the_name_of_the_cell():
    """`[SCALED := False for _ in [0]]`: Python binds SCALED in the scope around the comprehension,
    the notebook's (an outside attacker's notebook was graded with the earlier SCALED = True: 48
    where the kernel earns 38); the comprehension's own `for` variable binds nothing outside."""
    source = kept(
        "SCALED = True\nk = 'antes'",
        "[SCALED := False for k in [0]]\nprint([n := i for i in range(2)])",
        "class SelfAttention:\n    def f(self):\n        return SCALED, k",
    )
    namespace = {}
    exec(compile(code_of(source), "<notebook>", "exec"), namespace)
    assert namespace["SelfAttention"]().f() == (False, "antes")
    assert "print([n" not in source  # n is bound there, but nothing kept reads it


@pytest.mark.parametrize("assigning", [
    "exec('SCALED = False')", "exec('import math\\nSCALED = math.isnan(0.0)', globals())",
    "setattr(sys.modules[__name__], 'SCALED', False)", "setattr(sys.modules['__main__'], 'SCALED', not SCALED)",
])
def test_a_name_bound_through_exec_or_the_modules_setattr_is_kept_as_assigned(assigning):
    """`exec("SCALED = False")` of a string written there, or `setattr(sys.modules[__name__], ...)`:
    in the kernel each assigns SCALED (an outside attacker's notebooks were graded on the earlier
    SCALED = True: 48 where the kernel earns 38). In the worker `__name__` reads "__main__", the
    worker's own module: the setattr is kept as the assignment it is."""
    source = kept("import sys\nSCALED = True", assigning, "class SelfAttention:\n    def f(self):\n        return SCALED")
    graded = types.ModuleType("graded")
    exec(compile(code_of(source), "graded", "exec"), graded.__dict__)
    assert graded.SelfAttention().f() is False, source


def test_every_binding_of_a_used_name_is_kept_in_order():
    source = kept(
        "WIDTH = 16", "WIDTH = 32\nWIDTH += 1", "cfg = Box()\ncfg.width = WIDTH\ncfg.heads[0] = 2",
        "class Box:\n    heads = [1]",
        "class SelfAttention:\n    def f(self):\n        return cfg",
        "class SelfAttention:  # the fixed version\n    def f(self):\n        return cfg, 2",
    )
    assert names(source) == ["WIDTH", "WIDTH", "WIDTH", "cfg", "cfg.width", "cfg.heads[0]", "Box",
                             "SelfAttention", "SelfAttention"]


def test_if_and_try_blocks_that_bind_a_used_name_are_kept_whole():
    source = kept(
        "import torch",
        "if torch.cuda.is_available():\n    DEVICE = 'cuda'\nelse:\n    DEVICE = 'cpu'",
        "try:\n    from einops import rearrange\nexcept ImportError:\n    rearrange = None",
        "if True:\n    print('never kept')",
        "class SelfAttention:\n    where = DEVICE",
    )
    assert names(source) == ["torch", "block", "SelfAttention"] and "einops" not in source


def test_unused_imports_functions_classes_and_constants_are_dropped():
    source = kept(
        "import torch\nimport torch.nn as nn\nfrom tqdm.auto import tqdm\nfrom google.colab import drive\n"
        "import matplotlib.pyplot as plt\nimport einops\nD_MODEL = 16",
        "def train(model, steps=100):\n    for _ in tqdm(range(steps)):\n        pass\n\n"
        "def show(weights):\n    plt.imshow(weights)",
        "class Trainer:\n    bar = tqdm\n\nclass SelfAttention(nn.Module):\n    pass",
        "class MultiHeadAttention(nn.Module):\n    pass",
    )
    assert names(source) == ["nn", "SelfAttention", "MultiHeadAttention"]  # `import torch.nn as nn` binds nn alone


def test_a_star_import_is_kept_only_when_a_used_name_is_bound_nowhere():
    assert "import *" not in kept("from torch.nn import *\nimport torch.nn as nn",
                                  "class SelfAttention(nn.Module):\n    pass")
    assert names(kept("from torch.nn import *", "class SelfAttention(Module):\n    pass")) == ["*", "SelfAttention"]
    assert "import *" not in kept("from torch.nn import *", "class SelfAttention:\n    f = len, __name__")
    # IPython's own names (display in a debug method) are bound by Jupyter, not by a star import
    assert "import *" not in kept("from fastai.vision.all import *",
                                  "class SelfAttention:\n    def show(self):\n        display(self, In, Out)")


def test_a_star_import_after_kept_code_rebinds_as_in_the_kernel_when_installed():
    """A lesson's numpy `def softmax` demo, then `from torch.nn.functional import *`, and classes
    calling bare softmax(scores, dim=-1): in the kernel softmax is torch's by then (the import was
    dropped, and the demo's ran: 4/48). A star import of a module the grader does not have stays out."""
    source = kept("import numpy as np\n\ndef softmax(z):\n    return np.exp(z) / np.exp(z).sum()",
                  "import torch\nfrom torch.nn.functional import *",
                  "class SelfAttention(torch.nn.Module):\n    def forward(self, s):\n        return softmax(s, dim=-1)",
                  "from fastai.vision.all import *")
    assert names(source) == ["np", "softmax", "torch", "*", "SelfAttention"], source
    namespace = {"__name__": "graded"}
    exec(compile(code_of(source), "graded", "exec"), namespace)
    assert namespace["softmax"] is namespace["torch"].nn.functional.softmax


def test_an_import_of_several_modules_keeps_only_the_used_ones():
    """`import math, wandb` with only math used: wandb, which the grader does not have, goes."""
    source = kept("import math, wandb\nfrom torch import nn, optim as o\nfrom os import (path,\n    sep)",
                  "class SelfAttention(nn.Module):\n    r = math.pi, sep")
    assert names(source) == ["math", "nn", "sep", "SelfAttention"]
    assert cell_lines(source).locate(code_of(source).splitlines().index("from os import sep") + 1) == (1, 3)


def test_a_used_dict_or_list_changed_in_place_keeps_that_call():
    """`OPTS.update(...)` changes OPTS as `OPTS[k] = v` does (a correct notebook lost 7 points to a
    KeyError); the same call on a name nothing uses, or on what a call returns, stays out."""
    source = kept("OPTS = dict(a=1)\nLOG = []", "OPTS.update(b=2)\nLOG.append(train())\nmodel.train()",
                  "class SelfAttention:\n    o = OPTS")
    assert code_of(source).split() == ["OPTS", "=", "dict(a=1)", "OPTS.update(b=2)", "class", "SelfAttention:",
                                       "o", "=", "OPTS"]



@pytest.mark.parametrize("change", [
    "if PAPER:\n    OPTS.update(f=2)",
    "if not PAPER:\n    pass\nelse:\n    OPTS['f'] = 0\n    OPTS.update(f=2)",
    "try:\n    OPTS.update(f=2)\nexcept Exception:\n    pass",
    "if PAPER:\n    setattr(CONF, 'f', 2)",
    "if PAPER:\n    LIST.append(2)",
    "vars(CONF).update(f=2)",
    "vars(CONF)['f'] = 2",
    "CONF.__setattr__('f', 2)",
])
def test_a_change_in_place_inside_a_block_or_through_vars_is_kept(change):
    """`if PAPER: OPTS.update(...)` changes OPTS in the kernel as it does at the top of a cell (an
    outside writer's correct notebook lost 6 points: the block was dropped); so do `vars(args)`'s
    changes and `__setattr__`, argparse-style."""
    source = kept("import types\nPAPER = True\nOPTS = {'f': 1}\nCONF = types.SimpleNamespace(f=1)\nLIST = [1]",
                  change, "class SelfAttention:\n    def f(self):\n        return OPTS['f'] * CONF.f * LIST[-1]")
    namespace = {}
    exec(compile(code_of(source), "<notebook>", "exec"), namespace)
    assert namespace["SelfAttention"]().f() == 2

def test_get_ipython_runs_only_where_the_kernels_value_is_needed():
    """Code that needs IPython is dropped, unless it binds last a name the classes use: the kernel
    holds that value, the grader cannot, and an earlier binding would grade other code."""
    source = kept("ip = get_ipython()\nip.run_line_magic('matplotlib', 'inline')\nget_ipython().system('ls')",
                  "class SelfAttention:\n    shell = ip")
    assert names(source) == ["ip", "SelfAttention"] and "run_line_magic" not in source and "system" not in source
    assert names(kept("ip = get_ipython()", "ip = 1", "class SelfAttention:\n    shell = ip")) == ["ip", "SelfAttention"]
    assert "get_ipython" not in kept("ip = get_ipython()", "ip = 1", "class SelfAttention:\n    shell = ip")
    assert "get_ipython" not in kept("ip = get_ipython()", "class SelfAttention:\n    pass")


@pytest.mark.parametrize("line", [
    "X = !echo b", "x.y, z = %time f(1)", "files = !ls -la", "out = %sx ls", "    res = !nvidia-smi",
    "/setattr SelfAttention 'forward' f", "/f", ",f a b", ";f a  b", "    /g x, y",
])
def test_ipython_lines_that_bind_or_call_are_read_as_ipython_translates_them(line):
    """`x = !cmd`, `x = %magic` and the autocall escapes, each as IPython's inputtransformer2 writes it."""
    transformer = pytest.importorskip("IPython.core.inputtransformer2").TransformerManager()
    body = line if not line.startswith(" ") else "if True:\n" + line
    assert submission._cell_python(body, frozenset())[0] == transformer.transform_cell(body).rstrip("\n")


CLASSES_READING_MODE = "class SelfAttention:\n    def f(self):\n        return MODE"


@pytest.mark.parametrize("command", ["MODE = !echo b", "MODE = %env HOME", "if True:\n    MODE = !echo b"])
def test_a_name_the_classes_use_bound_last_by_ipython_fails_at_its_line(command):
    """The kernel holds the command's output; dropping the line graded the earlier `MODE = 'a'`
    (48 where the kernel earns less: an outside attacker's). Kept, the import fails at the
    student's line, and the message says IPython is why."""
    source = kept("MODE = 'a'", command, CLASSES_READING_MODE)
    with pytest.raises(NameError, match="get_ipython"):
        exec(compile(code_of(source), "<notebook>", "exec"), {})
    module = code_of(source).splitlines()
    line = next(n for n, text in enumerate(module, 1) if "get_ipython" in text)
    assert cell_lines(source).locate(line) == (2, command.count("\n") + 1)
    for language, said in [("es", "sin IPython"), ("en", "without IPython")]:
        found = outcome("submission.import_error", message="name 'get_ipython' is not defined", exc_type="NameError",
                        line=1, cell=2)
        text = feedback.message(found, language)
        assert said in text and "celda" in text if language == "es" else said in text and "cell 2" in text
        assert feedback.catalog(language)["labels"]["hint"] not in text
    rebound = kept(command, "MODE = 'a'", CLASSES_READING_MODE)  # the kernel's MODE is 'a'
    assert "get_ipython" not in rebound and "MODE = 'a'" in rebound


def test_a_py_line_starting_as_an_autocall_is_not_called_ipython():
    """In a .py, `/ 2` or `, b` at the start of a line is an operator or argument wrapped onto it,
    not IPython: the syntax error is Python's own; `!pip install` is still named as IPython."""
    assert submission.ipython_command("x = 1\n/ 2\n", 2) is None
    assert submission.ipython_command("f(a\n, b\n", 2) is None
    assert submission.ipython_command("!pip install einops\n", 1) == "!pip install einops"


def test_an_autocall_escape_runs_as_the_call_it_is():
    """`/setattr SelfAttention forward f` patches the kernel's class: the graded one was left unpatched."""
    source = kept("def f(self):\n    return 'patched'", "class SelfAttention:\n    def forward(self):\n        return 1",
                  "/setattr SelfAttention 'forward' f", ",print hola")
    namespace = {}
    exec(compile(code_of(source), "<notebook>", "exec"), namespace)
    assert namespace["SelfAttention"]().forward() == "patched"


def test_future_imports_come_first():
    source = kept("import torch", "from __future__ import annotations\nclass SelfAttention:\n    x: torch.Tensor")
    assert names(source) == ["annotations", "torch", "SelfAttention"]
    compile(source, "attention.py", "exec")


def test_a_long_chain_of_uses_and_many_statements_take_linear_time():
    chain = "\n".join(["x0 = 1", *(f"x{i} = x{i - 1}" for i in range(1, 4000))])
    many = "import a\n" * 6_000
    started = time.monotonic()
    source = kept(chain, many, "class SelfAttention:\n    v = x3999, a")
    assert time.monotonic() - started < 5
    assert source.count("import a") == 6_000 and "x0 = 1" in source and "x3999 = x3998" in source


# ---- IPython lines and cells -------------------------------------------------------------------

CLASS = "class SelfAttention:\n    pass"


@pytest.mark.parametrize("magic", ["%%bash", "%%sh", "%%script python3", "%%html", "%%javascript", "%%js",
                                   "%%latex", "%%markdown", "%%svg", "%%timeit -n 3", "%%python3",
                                   "%%writefile -a notas.txt", "%%writefile datos.json", "%%!", "%%shell", "%%sql"])
def test_a_cell_magic_drops_its_whole_cell(magic):
    assert names(kept(f"{magic}\n{CLASS}")) == []
    assert names(kept(f"\n  \n{magic}\n{CLASS}")) == []  # IPython skips blank lines before it


@pytest.mark.parametrize("magic", ["%%capture", "%%capture salida --no-stderr", "%%time", "%%prun -s cumulative",
                                   "%%writefile attention.py", "%%writefile -a 'tarea/attention.py'"])
def test_cell_magics_whose_body_runs_as_python_keep_it(magic):
    source = kept(f"{magic}\n!pip install -q einops\n{CLASS}\nprint('hola')")
    assert names(source) == ["SelfAttention"]
    assert cell_lines(source).locate(1) == (1, 3)  # the magic line still counts in the cell


@pytest.mark.parametrize("magic, runs", [
    ("%%writefile utils.py", "import utils"), ("%%file otro.py", "from otro import SelfAttention"),
    ("%%writefile modelos/capas.py", "if True:\n    import modelos.capas as capas"),
    ("%%writefile utils.py", "%run -i utils.py"), ("%%writefile /content/utils.py", "exec(open('/content/utils.py').read())"),
])
def test_a_written_module_is_kept_only_where_the_notebook_imports_or_runs_it(magic, runs):
    """A %%writefile of another .py than the exercise's runs nowhere unless the notebook imports or
    runs it: a class fixed in such a cell and never imported scored 48 where the kernel's, the
    notebook's own wrong one, earned 43."""
    cell = f"{magic}\n{CLASS}"
    assert "SelfAttention" in names(kept(cell, runs)), runs
    assert "SelfAttention" not in names(kept(cell, "print('sin importar')"))


@pytest.mark.parametrize("loads, reads", [
    ("import importlib\nm = importlib.import_module('capas')", "m.SelfAttention"),
    ("m = __import__('capas')", "m.SelfAttention"),
    ("import runpy\nns = runpy.run_path('capas.py')", "ns['SelfAttention']"),
    ("from runpy import run_module\nns = run_module('capas')", "ns['SelfAttention']"),
    ("%run capas", "SelfAttention"), ("%run -m capas", "SelfAttention"), ("%run 'capas.py'", "SelfAttention"),
    ("import importlib.util\nspec = importlib.util.spec_from_file_location('capas', 'capas.py')\n"
     "m = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(m)", "m.SelfAttention"),
    ("import runpy\nns = runpy.run_path(path_name='capas.py')", "ns['SelfAttention']"),
    ("MODULO = 'capas'\nimport importlib\nm = importlib.import_module(MODULO)", "m.SelfAttention"),
    ("ns = {}\nexec(open('capas.py').read(), ns)", "ns['SelfAttention']"),
    ("ns = {}\nexec(compile(open('capas.py').read(), 'capas.py', 'exec'), ns)", "ns['SelfAttention']"),
    ("exec(compile(open('capas.py').read(), 'capas.py', 'exec'))", "SelfAttention"),
    ("with open('capas.py') as f:\n    exec(f.read())", "SelfAttention"),
])
def test_a_written_module_loaded_by_a_call_or_run_by_its_name_is_the_notebooks_code(loads, reads, monkeypatch):
    """A %%writefile module loaded by importlib.import_module, __import__ or runpy, or `%run`
    without .py (IPython adds it): the classes were dropped as never imported, or the module kept
    was looked for as a file (0/48 for three correct notebooks of an outside writer)."""
    module = types.ModuleType("cuaderno")
    monkeypatch.setitem(sys.modules, "cuaderno", module)
    exec(code_of(kept(f"%%writefile capas.py\n{CLASS}\n    origen = 'capas'", loads,
                      f"SelfAttention = {reads}")), module.__dict__)
    assert module.SelfAttention.origen == "capas"


@pytest.mark.parametrize("registry, defined, lookup", [
    ("REGISTRO = {}\ndef registrar(nombre):\n    def poner(clase):\n        REGISTRO[nombre] = clase\n"
     "        return clase\n    return poner", "@registrar('SelfAttention')\nclass _SA:\n    origen = 'registro'",
     "REGISTRO['SelfAttention']"),
    ("class Base:\n    registro = {}\n    def __init_subclass__(cls, nombre=None, **kw):\n"
     "        super().__init_subclass__(**kw)\n        Base.registro[nombre] = cls",
     "class _SA(Base, nombre='SelfAttention'):\n    origen = 'registro'", "Base.registro['SelfAttention']"),
    ("class Base:\n    registro = {}\n    def __init_subclass__(cls, **kw):\n        cls.registro[cls.__name__] = cls\n"
     "class Intermedia(Base):\n    pass", "class _SA(Intermedia):\n    origen = 'registro'", "Base.registro['_SA']"),
    ("TODAS = []\nclass Meta(type):\n    def __init__(cls, nombre, bases, espacio):\n        super().__init__(nombre, bases, espacio)\n"
     "        TODAS.append(cls)", "class _SA(metaclass=Meta):\n    origen = 'registro'", "TODAS[-1]"),
    ("REGISTRO = {}\nregistrar = lambda nombre: (lambda clase: REGISTRO.setdefault(nombre, clase))",
     "@registrar('SelfAttention')\nclass _SA:\n    origen = 'registro'", "REGISTRO['SelfAttention']"),
    ("class Registro(dict):\n    def add(self, clase):\n        self[clase.__name__] = clase\n        return clase\n"
     "registro = Registro()", "@registro.add\nclass _SA:\n    origen = 'registro'", "registro['_SA']"),
])
def test_a_class_that_registers_itself_through_the_notebooks_code_is_kept(registry, defined, lookup):
    """A class nothing names, put in a registry by a decorator, a base class's __init_subclass__, a
    metaclass or a registry object's method, all the notebook's own, then taken from it: the class
    was dropped and the lookup failed (0/48 for an outside writer's correct notebook)."""
    module = types.ModuleType("cuaderno")
    exec(code_of(kept(registry, defined, "@registrar('demo')\ndef demo():\n    pass" if "registrar" in registry else "pass",
                      f"SelfAttention = {lookup}")), module.__dict__)
    assert module.SelfAttention.origen == "registro"


@pytest.mark.parametrize("looked_up", ["globals().get(prefijo + nombre)", "globals()[f'{prefijo}{nombre}']",
                                       "vars().get(prefijo + nombre)"])
def test_methods_attached_in_nested_loops_by_a_computed_name_are_kept(looked_up, monkeypatch):
    """`for cls, prefijo in ((SelfAttention, "_sa_"),): for nombre in ("forward",): fn =
    globals().get(prefijo + nombre); if fn is not None: setattr(cls, nombre, fn)`: the loop (its
    body more than setattr) and the functions (named only by pieces of strings) were dropped: a
    correct notebook of an outside writer scored 21."""
    module = types.ModuleType("cuaderno")
    monkeypatch.setitem(sys.modules, "cuaderno", module)
    exec(code_of(kept(CLASS, "def _sa_forward(self):\n    return 'adjuntado'\n\ndef _sa_ayuda(self):\n    return 'ayuda'",
                      "for cls, prefijo in ((SelfAttention, '_sa_'),):\n    for nombre in ('forward', 'ayuda'):\n"
                      f"        fn = {looked_up}\n        if fn is not None:\n            setattr(cls, nombre, fn)",
                      "def forward_de_prueba():\n    pass")), module.__dict__)
    assert module.SelfAttention().forward() == "adjuntado" and module.SelfAttention().ayuda() == "ayuda"


def test_methods_attached_in_a_loop_over_zipped_lists_are_kept(monkeypatch):
    """`for cls, fn in zip([SelfAttention], [sa_forward]): cls.forward = fn` (21/48 for an outside
    writer's correct notebook: zip was no loop the loader read)."""
    module = types.ModuleType("cuaderno")
    monkeypatch.setitem(sys.modules, "cuaderno", module)
    exec(code_of(kept(CLASS, "def sa_forward(self):\n    return 'adjuntado'",
                      "for cls, fn in zip([SelfAttention], (sa_forward,)):\n    cls.forward = fn")), module.__dict__)
    assert module.SelfAttention().forward() == "adjuntado"


def test_a_loop_that_does_more_than_set_attributes_is_still_dropped():
    assert names(kept(CLASS, "for cls in (SelfAttention,):\n    if True:\n        entrenar(cls)")) == ["SelfAttention"]


@pytest.mark.parametrize("imported", ["from modelos import *", "import modelos\nSelfAttention = modelos.SelfAttention"])
def test_a_package_written_with_writefile_and_its_relative_imports_are_the_notebooks_code(imported, monkeypatch):
    """modelos/__init__.py, modelos/capas.py and modelos/base.py written with %%writefile, with
    relative imports between them, then the package imported: its classes were not found (0/48
    for an outside writer's correct notebook, with absolute imports too)."""
    module = types.ModuleType("cuaderno")
    monkeypatch.setitem(sys.modules, "cuaderno", module)
    exec(code_of(kept("%%writefile modelos/base.py\ndef doble(x):\n    return 2 * x",
                      "%%writefile modelos/capas.py\nfrom .base import doble\n\nclass SelfAttention:\n    origen = doble(21)",
                      "%%writefile modelos/__init__.py\nfrom .capas import SelfAttention\n__all__ = ['SelfAttention']",
                      "%%writefile modelos/viejo.py\nclass SelfAttention:\n    origen = 'viejo'", imported)), module.__dict__)
    assert module.SelfAttention.origen == 42


def test_a_module_named_only_in_a_sentence_is_still_written_only():
    assert names(kept("%%writefile capas_arregladas.py\nclass SelfAttention:\n    origen = 'archivo'",
                      "print('guardé las capas en capas_arregladas.py')", CLASS)) == ["SelfAttention"]


def test_a_decorator_of_the_notebooks_that_changes_nothing_keeps_nothing_more():
    assert names(kept("import torch\ndef cronometrado(f):\n    return f", "@cronometrado\ndef demo():\n    plt.plot()",
                      CLASS)) == ["SelfAttention"]


def test_a_bash_cell_is_not_python_and_costs_nothing():
    source = kept("%%bash\nfor f in *.py; do echo \"$f\"; done\nif [ -d data ]; then ls data; fi", CLASS)
    assert names(source) == ["SelfAttention"] and cell_lines(source).locate(1) == (2, 1)


@pytest.mark.parametrize("wrapped", [
    "        if (x.size(-1)\n                != self.d):\n            raise ValueError('x')",  # PEP 8: break before the operator
    "        if (self.d\n                % 2):\n            raise ValueError('x')",
    "        if self.d \\\n                != 4:\n            raise ValueError('x')",  # a backslash continuation
    "        s = '''\n        !pip install nada\n        % no es magia\n        '''",  # a string
])
def test_a_line_that_continues_a_statement_is_python_not_ipython(wrapped):
    """Only a line that begins a statement is IPython's: an operator wrapped onto its own line is
    code. Blanking it turned `if (a\n != b):` into `if (a):`, always true, and raised in valid code."""
    cell = f"class SelfAttention:\n    d = 4\n\n    def forward(self, x):\n{wrapped}\n        return x\n!pip install einops"
    source = code_of(kept(cell))
    assert wrapped in source and "pip install einops" not in source
    compile(source, "attention.py", "exec")


def test_line_magics_shell_and_help_lines_are_dropped_keeping_line_numbers():
    cells = (
        "%matplotlib inline\n!pip install einops\nfiles = !ls\nout, err = %sx ls\ntorch.nn.Linear?\n??torch\n"
        "import torch\n%load_ext autoreload",
        "!nvidia-smi\nif torch.cuda.is_available():\n    !nvidia-smi\n    %env CUDA_LAUNCH_BLOCKING=1\n"
        "else:\n    LIMIT = 3",
        "class SelfAttention:\n    def f(self):\n        %time x = 1\n        return LIMIT",
    )
    source = kept(*cells)
    assert names(source) == ["torch", "block", "SelfAttention"]
    lines = cell_lines(source)
    module = code_of(source).splitlines()
    assert lines.locate(module.index("    LIMIT = 3") + 1) == (2, 6)
    assert lines.locate(module.index("        return LIMIT") + 1) == (3, 4)
    assert module[module.index("    LIMIT = 3") - 2] == "    pass"  # the magic's place in its block


@pytest.mark.parametrize("pasted", [
    "    NEG = float('-inf')\n\n    def escala(d):\n        return d ** -0.5",  # pasted indented
    "\n  \n  NEG = float('-inf')\n  def escala(d):\n      return d ** -0.5",
    ">>> NEG = float('-inf')\n>>> def escala(d):\n...     return d ** -0.5\n...",  # from a Python console
    "In [3]: NEG = float('-inf')\n\nIn [4]: def escala(d):\n   ...:     return d ** -0.5\n   ...:",  # from IPython
])
def test_a_cell_pasted_indented_or_with_prompts_is_read_as_ipython_cleans_it(pasted):
    """IPython takes the first line's indentation off every line of a cell, and the prompts of a
    pasted console session, before it runs it: such a cell runs in Jupyter, and was refused whole
    (0/48) or dropped (21/48: a NameError for escala) by the grader (an outside writer's correct
    notebooks). Line numbers stay the cell's."""
    source = kept(pasted, "class SelfAttention:\n    def f(self):\n        return escala(4), NEG")
    namespace = {}
    exec(compile(code_of(source), "<notebook>", "exec"), namespace)
    assert namespace["SelfAttention"]().f() == (0.5, float("-inf"))
    lines, module = cell_lines(source), code_of(source).splitlines()
    defined = next(n for n, line in enumerate(module, 1) if "def escala" in line)
    assert lines.locate(defined)[0] == 1 and "def escala" in pasted.split("\n")[lines.locate(defined)[1] - 1]


PASTED_LINES = [">>> x = 1", "... y = 2", ">>>", "...", "In [3]: z = 3", "   ...: w = 4", "  a = 1", "\tb = 2",
                "c = 3", "", "   ", "    d = 4", "[ins] In [1]: e = 5"]


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(st.sampled_from(PASTED_LINES), min_size=1, max_size=6))
def test_a_cells_lines_are_cleaned_as_ipython_cleans_them(lines):
    """submission._cleaned_lines against IPython's own clean-up (inputtransformer2), line by line:
    the same text, and the cell's line count kept (IPython drops the leading blank lines)."""
    transformer = pytest.importorskip("IPython.core.inputtransformer2").TransformerManager()
    cell = "\n".join(lines)
    cleaned = submission._cleaned_lines(cell)
    assert len(cleaned) == len(lines)
    theirs = cell.splitlines(keepends=True)
    for step in transformer.cleanup_transforms:  # leading blank lines, indentation, prompts
        theirs = step(theirs)
    first = next((i for i, line in enumerate(lines) if line and not line.isspace()), None)
    if first is not None:  # a blank cell runs nothing either way (IPython then keeps its lines)
        assert "\n".join(cleaned[first:]).rstrip("\n") == "".join(theirs).rstrip("\n")


def test_cell_magics_that_run_python_are_read_past_to_the_magic_under_them():
    """%%capture (or %%time) runs the rest of its cell as a cell: under it, `%%writefile notas.py`
    only writes a file nothing imports, and the class in it runs nowhere (graded before: 48 where
    the kernel earns 43, an outside attacker's); `%%writefile attention.py` under it is the
    exercise's file, as alone. `%time STATEMENT` at the top of a cell runs the statement."""
    for outer in ("%%capture", "%%time", "%%capture salida\n%%time"):
        assert "SelfAttention" not in names(kept(f"{outer}\n%%writefile notas.py\n{CLASS}"))
        assert names(kept(f"{outer}\n%%writefile attention.py\n{CLASS}")) == ["SelfAttention"]
    source = kept("import torch\nNEG = 1\n%time NEG = 2", "class SelfAttention:\n    x = NEG")
    namespace = {}
    exec(compile(code_of(source), "<notebook>", "exec"), namespace)
    assert namespace["SelfAttention"].x == 2


def test_what_timeit_runs_changes_objects_but_binds_no_name():
    """%timeit (a line or a %%timeit cell) runs its code inside a function of its own: a name it
    binds stays there, while a change to an object, `SelfAttention.forward = f`, reaches the
    notebook (an outside attacker's: graded without that change, 48 where the kernel earns 43)."""
    for timed in ("%%timeit -n1 -r1\nSelfAttention.origen = 'timeit'\nNEG = 5\nclass SelfAttention:\n    pass",
                  "%timeit -n1 -r1 SelfAttention.origen = 'timeit'\n%timeit -n 1 NEG = 5"):
        source = kept("NEG = 1\nclass SelfAttention:\n    origen = 'clase'", timed, "class MultiHeadAttention:\n    x = NEG")
        graded = types.ModuleType("graded")
        exec(compile(code_of(source), "graded", "exec"), graded.__dict__)
        assert (graded.SelfAttention.origen, graded.MultiHeadAttention.x) == ("timeit", 1), timed


def test_what_a_reset_empties_is_not_graded():
    """`%reset -f` empties the kernel's namespace: a notebook ending in one has no class in the
    kernel (graded 48 on the classes before it: an outside attacker's). What comes after it counts."""
    assert names(kept("import torch\nclass SelfAttention:\n    pass", "%reset -f")) == []
    source = kept("class SelfAttention:\n    origen = 'antes'", "NEG = 1\n%reset -f -s\nNEG = 2",
                  "class SelfAttention:\n    x = NEG")
    assert names(source) == ["NEG", "SelfAttention"] and "'antes'" not in source
    for kept_all in ("%reset -f in", "%reset", "if False:\n    %reset -f", "%%bash\n%reset -f"):
        assert names(kept("class SelfAttention:\n    pass", kept_all)) == ["SelfAttention"], kept_all


def test_text_and_raw_cells_are_not_counted():
    source = kept(("markdown", "# Título\nclass SelfAttention: pass"), ("raw", "NEG = 1"), "NEG = 2",
                  ("markdown", "texto"), "class SelfAttention:\n    x = NEG")
    assert names(source) == ["NEG", "SelfAttention"]
    lines = cell_lines(source)
    assert [lines.locate(n) for n in (1, 3, 4)] == [(1, 1), (2, 1), (2, 2)]


def test_a_cell_that_does_not_parse_is_reported_at_its_own_line():
    text = notebook("import torch", ("markdown", "texto"), "%%bash\nls -la",
                    "class SelfAttention:\n    def forward(self, x):\n        return x +\n", CLASS)
    source = notebook_source(text)
    with pytest.raises(SyntaxError) as caught:
        compile(source, "attention.py", "exec")  # what the worker does when it imports it
    assert cell_lines(source).locate(caught.value.lineno) == (3, 3)


def test_a_cell_that_does_not_parse_and_binds_nothing_used_is_dropped_as_the_kernel_drops_it():
    """A demo cell in Python 3.12's f-strings (Colab's Python; the grader's is 3.11) refused the
    whole notebook (0/48): in the kernel a cell that does not parse runs nothing else. Reported
    still where the cell may bind what the classes use (a helper, an import, a constant) or a
    graded class, or holds a star import, or a graded class is missing. (`1 +` stands for the 3.12 f-string: it parses nowhere.)"""
    others = "class MultiHeadAttention:\n    pass\n\nclass CausalSelfAttention:\n    pass"
    demo = 'd = {"a": 1}\nprint(1 +)\nmodel = SelfAttention()'
    assert "print" not in kept("import torch", CLASS, others, demo)
    assert "print(1 +)" in kept("import torch", CLASS, demo)  # a class missing: maybe that cell's
    for needed in ('SCALE = 2\nprint(1 +)', 'def helper():\n    return 1 +',
                   'import math as SCALE\nprint(1 +)', 'from torch import *\nprint(1 +)',
                   'class SelfAttention:\n    x = 1 +'):
        source = kept("import torch", "SCALE = 1\ndef helper():\n    return 1",
                      "class SelfAttention(torch.nn.Module):\n    def forward(self, x):\n        return x * SCALE * helper()",
                      others, needed)
        with pytest.raises(SyntaxError) as caught:
            compile(source, "attention.py", "exec")
        assert cell_lines(source).locate(caught.value.lineno)[0] == 5, needed


def test_what_a_cell_that_does_not_parse_may_bind_is_read_in_time_linear_in_the_cell():
    """A run of spaces in a cell that does not parse: the regular expression that read it before
    took cubic time (1000 spaces: 24 s; a 35 KB notebook held a grading, and a whole batch, for
    days: an outside attacker). Read from its tokens, 100k spaces and 30k chained targets take a
    fraction of a second; what it binds is still read (`a, (b, c) = ...` binds all three)."""
    for adversarial in ("x" + " " * 100_000 + "\nprint(1 +)", "a = " * 30_000 + "1\nprint(1 +)",
                        "(" * 150 + "\n"):
        text = notebook("import torch", CLASS, "class MultiHeadAttention:\n    pass\n\nclass CausalSelfAttention:\n    pass",
                        adversarial)
        assert "print(1 +)" not in notebook_source(text)
    assert submission._may_bind("a, (b, c) = 1\nprint(f(x, y))\nfor i, j in z: pass\nprint(n := 3)") == {
        "a", "b", "c", "i", "j", "n"}


@pytest.mark.parametrize("not_compiling", ["def graficar(w, w):\n    pass", "return None", "nonlocal NEG"])
def test_a_cell_that_parses_but_does_not_compile_runs_nothing_as_in_the_kernel(not_compiling):
    """`def graficar(w, w)` or a stray `return` parses, but Python refuses to compile it: the kernel
    runs none of that cell, and a class fixed there is not the kernel's (48 where the kernel
    earns 43; 48 for a notebook whose only cell that is, and whose .py scores 0: an outside
    attacker's). Such a cell is dropped as one that does not parse is, or its error reported
    where it binds what the notebook needs (a graded class here)."""
    others = "class MultiHeadAttention:\n    pass\n\nclass CausalSelfAttention:\n    pass"
    source = kept("class SelfAttention:\n    origen = 'primera'", others, f"{not_compiling}\n\nDEMO = 1")
    assert not_compiling not in source  # binds nothing the classes use: dropped
    for fixed in (f"{not_compiling}\n\nclass SelfAttention:\n    origen = 'arreglada'",  # a class fixed there
                  f"{not_compiling}\n\nclass SelfAttention:\n    pass\n\n{others}"):  # the only cell
        source = kept("class SelfAttention:\n    origen = 'primera'", others, fixed)
        with pytest.raises(SyntaxError) as caught:  # reported at the student's cell and line
            compile(source, "attention.py", "exec")
        assert cell_lines(source).locate(caught.value.lineno) == (3, 1)


@pytest.mark.parametrize("ending", ["", "\n"])
def test_a_py_cannot_claim_notebook_cells(tmp_path, ending):
    """A .py ending in the map's line would have its errors reported at cells of its choosing."""
    path = tmp_path / "attention.py"
    path.write_text(f"class SelfAttention:\n    pass\n{LINES_MARKER}[[1, 42, 7, 100000]]{ending}", encoding="utf-8")
    loaded = submission.load(path)
    assert loaded.line_map is None and cell_lines(loaded.source) is None
    assert loaded.source.splitlines()[:2] == ["class SelfAttention:", "    pass"]


def test_windows_line_endings_and_missing_final_newlines():
    text = notebook("NEG = 1\r\nOTHER = 2\r\n", "class SelfAttention:\r\n    x = NEG")
    source = notebook_source(text)
    assert names(source) == ["NEG", "SelfAttention"] and "\r" not in source
    assert_lines_are_the_students(text)


IPYTHON_LINES = ["%matplotlib inline", "!pip install x", "files = !ls", "obj?", "", "    ", "# comentario",
                 "    !nvidia-smi", "print(NEG)"]
PYTHON_LINES = ["import torch", "import math as m", "NEG = float('-inf')", "NEG += 0", "cfg = Box()",
                "cfg.n = NEG", "class Box:\n    n = 1", "def helper(v=NEG):\n    return m.sqrt(v)",
                "class SelfAttention:\n    x = helper, cfg, torch", "if m:\n    LIMIT = 1\n    !ls",
                "for i in range(2):\n    NEG = i"]


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from(IPYTHON_LINES + PYTHON_LINES), max_size=6).map("\n".join),
                min_size=1, max_size=6),
       st.sampled_from(["", "%%capture\n", "%%bash\n", "\n%%time\n"]))
def test_any_mix_of_cells_keeps_students_lines(cells, magic):
    # a cell whose first line is indented loses that indentation on every line, in IPython as here
    # (test_a_cell_pasted_indented_or_with_prompts_is_read_as_ipython_cleans_it): `    !nvidia-smi`
    # over `class Box:` leaves the class's body unindented, a cell the kernel refuses too
    assume(not any(cell.strip() and cell.lstrip("\n")[:1] in (" ", "\t") for cell in cells))
    text = notebook(magic + cells[0], *cells[1:])
    source = notebook_source(text)
    compile(source, "attention.py", "exec")
    assert_lines_are_the_students(text)


def test_notebook_limits_still_hold():
    with pytest.raises(SubmissionUnreadable) as caught:
        notebook_source(notebook(*["x = 1\n" * 20_000] * 18))
    assert caught.value.code == "notebook_code_too_large"
    with pytest.raises(SubmissionUnreadable) as caught:
        notebook_source(notebook("NEG = 1", "x = '\ud800'"))
    assert caught.value.code == "not_utf8"


# ---- lines in feedback ---------------------------------------------------------------------------

def test_a_py_submission_keeps_its_own_lines(tmp_path):
    text = "import torch\n\nclass SelfAttention(torch.nn.Module):\n    pass\n"
    (tmp_path / "attention.py").write_text(text, encoding="utf-8")
    loaded = submission.load(tmp_path / "attention.py")
    assert loaded.source == text and loaded.line_map is None
    assert Worker(loaded.source, Limits())._where(3) == {"line": 3}
    assert "cell" not in SubmissionError("exception", "boom", line=3).as_dict()


def test_the_worker_side_maps_a_notebook_line_to_its_cell():
    source = submission.load(COLAB).source
    module = code_of(source).splitlines()
    line = module.index("        weights = torch.softmax(scores, dim=-1)") + 1
    found = Worker(source, Limits())._where(line)
    cell, cell_line = where(COLAB, "weights = torch.softmax(scores, dim=-1)")
    assert line != cell_line and found == {"cell": cell, "line": cell_line} and cell == 6
    error = SubmissionError("exception", "boom", **found)
    assert error.again().as_dict()["cell"] == 6 and Worker(source, Limits())._where(None) == {"line": None}


def outcome(code, **params):
    return Outcome("MultiHeadAttention", "shapes", "error", code,
                   {"kind": code.split(".")[-1], "cls": "MultiHeadAttention", "op": "forward", "limit": None, **params})


@pytest.mark.parametrize("language, expected", [
    ("es", "MultiHeadAttention.forward lanzó AttributeError en la celda de código 8, línea 29: sin atributo"),
    ("en", "MultiHeadAttention.forward raised AttributeError in code cell 8, line 29: sin atributo"),
], ids=["es", "en"])
def test_feedback_names_the_cell_and_the_line(language, expected):
    found = outcome("submission.exception", message="sin atributo", exc_type="AttributeError", line=29, cell=8)
    assert feedback.headline(found, language) == expected
    found.params.pop("cell")  # a .py: as before
    assert feedback.headline(found, language) == feedback.catalog(language)["failures"]["submission.exception"].format(
        cls="MultiHeadAttention", op="forward", exc_type="AttributeError", line=29, message="sin atributo")


@pytest.mark.parametrize("language, rule", [("es", "un bloque with"), ("en", "a with block")], ids=["es", "en"])
def test_a_name_error_at_import_says_what_of_a_notebook_runs(language, rule):
    """The usual cause is a name the notebook binds only where the grader does not run it (a
    `with` block reading a data file, a loop): the message says what is kept. A .py's is as before."""
    found = outcome("submission.import_error", message="name 'text' is not defined", exc_type="NameError",
                    line=3, cell=2)
    text = feedback.headline(found, language)
    assert "«text»" in text and "name 'text'" not in text and rule in text and " 2" in text
    found.params.pop("cell")
    assert rule not in feedback.headline(found, language)


@pytest.mark.parametrize("language, rule", [("es", "un bloque with"), ("en", "a with block")], ids=["es", "en"])
def test_a_name_error_in_a_call_says_what_of_a_notebook_runs_and_gives_no_unrelated_hint(language, rule):
    """A constant assigned inside a `with` block, used by forward: the message named the cell, and the
    hint said to check the shapes step by step."""
    found = outcome("submission.exception", message="name 'NEG_INF' is not defined", exc_type="NameError",
                    line=14, cell=4, op="forward")
    text = feedback.message(found, language)
    assert "«NEG_INF»" in text and rule in text and "forward" in text and " 4" in text
    assert feedback.catalog(language)["labels"]["hint"] not in text
    found.params.pop("cell")  # a .py: Python's own message, and the property's hint for errors
    assert rule not in feedback.headline(found, language)


def test_a_syntax_error_message_loses_the_module_line_python_adds():
    found = outcome("submission.syntax_error", message="invalid syntax (attention.py, line 57)",
                    exc_type="SyntaxError", line=3, cell=4)
    assert feedback.message(found, "es") == ("Tu notebook tiene un error de sintaxis en la celda de código 4, línea 3 "
                                             "(Python dice: «invalid syntax»).")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 reads the f-string this message is about")
@pytest.mark.parametrize("cell", [None, 4])
def test_a_syntax_error_in_an_f_string_says_python_3_12_reads_it(cell):
    """f"{d["n"]}" runs in Colab (3.12) and fails here: the message says why, and what to write."""
    found = outcome("submission.syntax_error", message="f-string: unmatched '[' (attention.py, line 57)",
                    exc_type="SyntaxError", line=3, **({} if cell is None else {"cell": cell}))
    for language, words in (("es", ("línea 3 (Python dice: «f-string: unmatched '['»).", "Python 3.12", "las otras comillas")),
                            ("en", ("line 3 (Python says: “f-string: unmatched '['”).", "Python 3.12", "the other quotes"))):
        text = feedback.message(found, language)
        assert all(word in text for word in words), text
        assert ("celda de código 4" in text or "code cell 4" in text) == (cell is not None)
    plain = outcome("submission.syntax_error", message="invalid syntax", exc_type="SyntaxError", line=3)
    assert "3.12" not in feedback.message(plain, "es")


@pytest.mark.parametrize("cell", [None, 4])
def test_an_import_of_a_name_a_newer_python_has_says_so(cell):
    """`from typing import override` runs in Colab (3.12): a bare ImportError told nothing."""
    found = outcome("submission.import_error", exc_type="ImportError", line=3,
                    message="cannot import name 'override' from 'typing' (/usr/lib/python3.11/typing.py)",
                    **({} if cell is None else {"cell": cell}))
    for language, words in (("es", ("importa override de typing", "try/except ImportError")),
                            ("en", ("imports override from typing", "try/except ImportError"))):
        text = feedback.message(found, language)
        assert all(word in text for word in words), text


@pytest.mark.parametrize("line, newer", [("type Tensor = torch.Tensor", True), ("def escalar[T](s: T) -> T:", True),
                                         ("class Pila[T]:", True), ("    type X[T] = list[T]", True),
                                         ("tipo = type(x)", False), ("def f(x):", False), ("x = d[0]", False)])
def test_python_3_12_type_parameter_syntax_is_told_apart(line, newer):
    assert (submission.newer_syntax_line(f"import torch\n{line}\n", 2) is not None) == newer


def test_a_cell_of_a_python_3_12_type_alias_is_dropped_and_future_annotations_never_need_it():
    """`type Tensor = torch.Tensor` (3.12) in a cell of its own, the classes annotated with Tensor
    under `from __future__ import annotations`: the kernel never evaluates the annotations, so the
    cell the grader cannot parse costs nothing (read as binding Tensor, it once cost every point)."""
    classes = "".join(f"class {name}(torch.nn.Module):\n    def forward(self, x: Tensor):\n        return x\n\n"
                      for name in ("SelfAttention", "MultiHeadAttention", "CausalSelfAttention"))
    source = notebook_source(notebook("from __future__ import annotations\nimport torch", "type Tensor = torch.Tensor",
                                      classes + "class Cfg:\n    pass\n"))
    assert "type Tensor" not in source and "class CausalSelfAttention" in source


def test_a_written_module_whose_main_demo_only_python_3_12_parses_is_kept_without_the_demo():
    """As for a .py: `%%writefile attention.py` with a 3.12 f-string in its `__main__` demo scored 0."""
    module = "%%writefile attention.py\nimport torch\n\nclass SelfAttention(torch.nn.Module):\n    pass\n\n" \
             'if __name__ == "__main__":\n    d = {"n": 1}\n    print(f"{d["n"]}")\n'
    source = notebook_source(notebook(module, "from attention import SelfAttention"))
    assert "class SelfAttention" in source and 'f"{d["n"]}"' not in source
    ast.parse(source)


# Said only of a .py file: a notebook's IPython lines are dropped before it is imported.
PY_FILES_ONLY = {"submission.syntax_error_ipython"}


@pytest.mark.parametrize("language", ["es", "en"])
def test_every_message_with_a_line_has_a_form_with_the_cell(language):
    failures = feedback.catalog(language)["failures"]
    fields = {code: {name for _, name, _, _ in string.Formatter().parse(text) if name}
              for code, text in failures.items()}
    for code, used in fields.items():
        if "line" in used and not code.endswith(".in_cell") and code not in PY_FILES_ONLY:
            assert code + ".in_cell" in failures, code
            assert fields[code + ".in_cell"] - used <= {"cell"}, code
    assert fields["submission.missing_module.in_cell"] == {"module", "cell", "line"}


# ---- graded end to end (about 10 s each) -------------------------------------------------------

def test_colab_notebook_scores_like_the_solution(graded_run, solution_path):
    """NEG_INF and DEVICE used by the classes, tqdm and google.colab imports, %%capture, %%bash, plots."""
    from_notebook, from_py = graded_run(COLAB).graded, graded_run(solution_path).graded
    assert from_notebook.score == from_py.score == (48, 48)
    statuses = [[(o.cls, o.prop, o.status) for o in run.outcomes] for run in (from_notebook, from_py)]
    assert statuses[0] == statuses[1]


def test_a_bug_in_a_class_is_reported_at_the_students_cell_and_line(graded_run):
    run = graded_run(BUG)
    cell, line = where(BUG, "self.d_modle")
    tests = {tuple(t["tags"]): t for t in run.results["tests"]}
    shapes = tests[("MultiHeadAttention", "shapes")]
    assert shapes["status"] == "failed"
    assert shapes["output"].startswith(f"MultiHeadAttention.forward lanzó AttributeError en la celda de código "
                                       f"{cell}, línea {line}: 'MultiHeadAttention' object has no attribute 'd_modle'")
    for (cls, _), test in tests.items():
        assert cls == "MultiHeadAttention" or test["status"] == "passed", test


def test_an_import_the_classes_need_and_the_grader_lacks_is_named_once(graded_run):
    run = graded_run(EINOPS)
    cell, line = where(EINOPS, "from einops import rearrange")
    assert run.graded.score[0] == 0
    assert run.results["output"].split("\n")[0] == (
        f"Tu notebook importa el módulo einops (celda de código {cell}, línea {line}), que no está "
        "instalado en el corrector ni lo escribe una celda %%writefile de tu notebook. Esa importación se "
        "conserva porque tus clases la usan, directa o indirectamente. Si einops es tuyo, escríbelo con "
        "%%writefile: un módulo escrito de otra forma (Path.write_text, open(...).write, !cp) no existe para "
        "el corrector; si es de una biblioteca, escribe tus clases solo con torch, numpy y la biblioteca "
        "estándar de Python.")
    assert {t["output"] for t in run.results["tests"]} == {"No se pudo importar tu código: mira el mensaje al principio."}
    english = feedback.message(run.graded.outcomes[0], "en")
    assert english.startswith(f"Your notebook imports the module einops (code cell {cell}, line {line}), "
                              "which is not installed")


def test_a_module_written_with_writefile_and_imported_whole_is_this_module(monkeypatch):
    """%%writefile capas.py then `import capas` (or `as c`) and `capas.core(...)` in a class: the
    name is this module itself, and what the cell binds is kept when the name is used."""
    helper = "%%writefile capas.py\nimport torch\n\ndef core(q, k):\n    return torch.softmax(q @ k.mT, -1)"
    for imported, name in (("import capas", "capas"), ("import capas as c", "c"), ("import math, capas as c", "c")):
        source = kept(helper, imported, "import torch\n\nclass SelfAttention(torch.nn.Module):\n"
                      f"    def forward(self, x):\n        return {name}.core(x, x)")
        assert "import capas" not in source and f"{name} = __import__(__name__)" in source, source
        graded = types.ModuleType("graded")
        monkeypatch.setitem(sys.modules, "graded", graded)  # as the worker imports the exercise's module
        exec(compile(source, "graded", "exec"), graded.__dict__)
        assert getattr(graded, name) is graded and callable(graded.core), source


def test_a_name_imported_under_another_name_from_a_written_module_is_bound_to_its_code():
    """`from utilidades import core as f` of a %%writefile module: f is that cell's core, kept with
    it (the import was dropped whole, and f was never bound: 4/48 for a correct notebook)."""
    source = kept("%%writefile utilidades.py\nimport torch\n\ndef core(q, k):\n    return torch.softmax(q @ k.mT, -1)",
                  "import torch\nfrom utilidades import core as f, core",
                  "class SelfAttention(torch.nn.Module):\n    def forward(self, x):\n        return f(x, x)")
    assert "from utilidades" not in source and "f = core" in source, source
    namespace = {"__name__": "graded"}
    exec(compile(code_of(source), "graded", "exec"), namespace)
    assert namespace["f"] is namespace["core"]


@pytest.mark.parametrize("written, imported", [
    ("modelos/atencion.py", "from modelos.atencion import SelfAttention"),
    ("/content/modelos/atencion.py", "from modelos.atencion import SelfAttention"),
    ("/content/capas.py", "from capas import SelfAttention"),
    ("./capas.py", "import capas as c"),
])
def test_a_module_written_into_a_folder_is_imported_by_its_dotted_path(written, imported):
    """%%writefile modelos/atencion.py then `from modelos.atencion import ...` (0/48: the import was
    kept, and failed as a module not installed)."""
    source = kept(f"%%writefile {written}\nimport torch\n\nclass SelfAttention(torch.nn.Module):\n    pass",
                  imported)
    assert "SelfAttention" in names(source) and f"{imported}\n" not in code_of(source) + "\n", source


def test_methods_attached_by_a_helper_of_the_notebook_are_kept_with_the_class():
    """D2L's `@add_to_class(SelfAttention)` on a def, or `agregar(SelfAttention, forward)`: a function
    the notebook defines that sets attributes gives the class its method (21/48 and 36/48 when the
    statement was dropped); a call of any other function on the class stays out (it may train)."""
    helper = ("def add_to_class(Class):\n    def wrapper(obj):\n        setattr(Class, obj.__name__, obj)\n"
              "    return wrapper\n\ndef agregar(Class, f):\n    Class.__call__ = f")
    source = kept(helper, "import torch\n\nclass SelfAttention(torch.nn.Module):\n    pass",
                  "@add_to_class(SelfAttention)\ndef forward(self, x):\n    return x",
                  "def hola(self):\n    return 1\n\nagregar(SelfAttention, hola)",
                  "def entrenar(modelo, pasos):\n    return [modelo for _ in range(pasos)]\n\nentrenar(SelfAttention, 10)",
                  "print(SelfAttention)")
    assert "@add_to_class(SelfAttention)" in source and "agregar(SelfAttention, hola)" in source, source
    assert "entrenar" not in source and "print" not in source, source
    namespace = {"__name__": "graded"}
    exec(compile(code_of(source), "graded", "exec"), namespace)
    assert namespace["SelfAttention"].forward.__name__ == "forward" and namespace["SelfAttention"].__call__ is namespace["hola"]


@pytest.mark.parametrize("attach", [
    "add_to_class(SelfAttention)(forward)",  # the decorator written as a call
    "ligar = lambda Class: (lambda f: setattr(Class, 'forward', f) or f)\n\n"  # a helper written as a lambda
    "@ligar(SelfAttention)\ndef forward3(self, x):\n    return x",
    "agregar(forward, clase=SelfAttention)",  # the class by keyword
    "registrar = add_to_class\n\n@registrar(SelfAttention)\ndef forward2(self, x):\n    return x",  # another name
])
def test_every_form_of_attaching_through_a_notebook_helper_is_kept(attach):
    helper = ("def add_to_class(Class):\n    def wrapper(obj):\n        setattr(Class, 'forward', obj)\n"
              "    return wrapper\n\ndef agregar(f, clase):\n    clase.forward = f")
    source = kept(helper, "import torch\n\nclass SelfAttention(torch.nn.Module):\n    pass",
                  "def forward(self, x):\n    return x", attach)
    namespace = {"__name__": "graded"}
    exec(compile(code_of(source), "graded", "exec"), namespace)
    assert namespace["SelfAttention"].forward is not namespace["torch"].nn.Module.forward, source


def test_a_patch_decorator_reading_the_self_annotation_attaches_and_other_decorated_helpers_stay_plain():
    """fastcore's `@patch` written in the notebook: `def forward(self: SelfAttention, x)` is attached
    by reading the annotation (43/48 when dropped); a def so annotated under a decorator that sets
    nothing (functools.lru_cache) is the plain definition it was, kept where its name is used."""
    source = kept("import functools\nimport torch\n\nclass SelfAttention(torch.nn.Module):\n    pass",
                  "def patch(f):\n    setattr(f.__annotations__['self'], f.__name__, f)\n    return f",
                  "@patch\ndef forward(self: SelfAttention, x):\n    return x",
                  "@functools.lru_cache\ndef helper(self: SelfAttention, t):\n    return t\n\nSelfAttention.helper = helper",
                  "@functools.lru_cache\ndef unused(self: SelfAttention):\n    return 1")
    namespace = {"__name__": "graded"}
    exec(compile(code_of(source), "graded", "exec"), namespace)
    assert namespace["SelfAttention"].forward.__name__ == "forward" and "helper" in namespace, source
    assert "unused" not in namespace


def test_nested_options_changed_in_place_and_names_bound_in_a_match_are_kept():
    """`OPTS["sa"].update(scale=True)` changes OPTS (43/48 when dropped); a constant bound in a top-level
    `match` is kept as an `if` is (36/48: NameError)."""
    source = kept("OPTS = {'sa': {'scale': False}}\nMODE = 'sqrt'",
                  "match MODE:\n    case 'sqrt':\n        FN = abs\n    case _:\n        FN = None",
                  "class SelfAttention:\n    def f(self):\n        return OPTS['sa']['scale'], FN",
                  "OPTS['sa'].update(scale=True)")
    namespace = {"__name__": "graded"}
    exec(compile(code_of(source), "graded", "exec"), namespace)
    assert namespace["SelfAttention"]().f() == (True, abs), source


def test_a_helper_reached_through_a_written_module_attaches_too(monkeypatch):
    """`import utils` of a %%writefile module, then `@utils.add_to_class(SelfAttention)`."""
    source = kept("%%writefile utils.py\ndef add_to_class(Class):\n    def wrapper(obj):\n"
                  "        setattr(Class, obj.__name__, obj)\n    return wrapper",
                  "import torch\nimport utils\n\nclass SelfAttention(torch.nn.Module):\n    pass",
                  "@utils.add_to_class(SelfAttention)\ndef forward(self, x):\n    return x")
    graded = types.ModuleType("graded")
    monkeypatch.setitem(sys.modules, "graded", graded)
    exec(compile(source, "graded", "exec"), graded.__dict__)
    assert graded.SelfAttention.forward.__name__ == "forward", source


def test_a_class_the_notebooks_kept_code_lacks_is_said_of_the_notebook(graded_run, tmp_path, solution_path):
    """A notebook that writes its module by other means than %%writefile (Path.write_text, !cp) and
    imports it: the grader cannot see the classes. The message says what of a notebook runs and
    how to make the module seen, not "your file does not define the class" (said of a .py)."""
    path = tmp_path / "escrito_a_mano.ipynb"
    path.write_text(notebook(f"CODE = {solution_path.read_text()!r}",
                             "from pathlib import Path\nPath('impl.py').write_text(CODE)",
                             "from impl import *"), encoding="utf-8")
    run = graded_run(path)
    assert run.graded.score[0] == 0
    assert {o.code for o in run.graded.outcomes} == {"submission.missing_class_in_notebook"}
    top = run.results["output"].split("\n")
    assert top[0].startswith("Tu notebook no define la clase SelfAttention en el código que el corrector ejecuta")
    assert "%%writefile" in top[0] and "Path.write_text" in top[0]
    english = feedback.message(run.graded.outcomes[0], "en")
    assert english.startswith("Your notebook does not define the class")
