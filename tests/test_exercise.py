"""The exercise is declared once (autograder/properties/exercise.yml) and the engine reads it."""
import dataclasses
import re
import types
from pathlib import Path

import pytest

from autograder import config, exercise, feedback
from autograder.errors import UsageError
from autograder.worker import child

pytestmark = pytest.mark.unit

PACKAGE = Path(exercise.__file__).resolve().parent
# The exercise's own files: its suite folder, its misconception catalog and the audit that applies
# it. Everything else is the engine, which must take the exercise from the descriptor.
EXERCISE_FILES = ("properties/", "misconceptions/", "audit/")
CLASS_NAMES = re.compile(r"\b(?:%s)\b" % "|".join(exercise.EXERCISE.class_names))


def test_the_shipped_descriptor():
    found = exercise.EXERCISE
    assert found.class_names == config.CLASSES == ("SelfAttention", "MultiHeadAttention", "CausalSelfAttention")
    assert found.submission == "attention.py"
    assert found.stub.is_file() and found.solution.is_file() and found.warm_up.is_file()
    causal = found.classes[-1]
    assert causal.layers == ("qkv", "proj") and causal.config_class == "Cfg"
    assert list(found.input_sizes) == ["B", "T", "Tq", "Tk", "T2", "Tq2", "Tk2"]
    assert found.input_sizes["Tk"] == (("key", 1), ("value", 1))


def test_the_engine_names_no_class_of_the_exercise():
    """Outside the exercise's own files, code may name its classes only in docstrings and comments."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(EXERCISE_FILES):
            continue
        code = re.sub(r'("""|\'\'\').*?\1', "", path.read_text(encoding="utf-8"), flags=re.S)
        code = "\n".join(line.split("#")[0] for line in code.splitlines())
        if CLASS_NAMES.search(code) or "attention.py" in code:
            offenders.append(relative)
    assert not offenders, f"these name the exercise: take it from autograder/exercise.py instead: {offenders}"


@pytest.mark.parametrize("text, complaint", [
    ("name: x\nsubmission: x.py\nclasses: {A: {}}\nsurprise: 1\n", "expected the keys"),
    ("name: x\nsubmission: ../x.py\nclasses: {A: {}}\n", "plain file name"),
    ("name: x\nsubmission: x.py\nclasses: {A: {layers: W}}\n", "list of attribute names"),
    ("name: x\nsubmission: x.py\nclasses: {A: {config: {class: C}}}\n", "`class` and `fields`"),
    ("name: x\nsubmission: x.py\nclasses: {}\n", "no classes"),
    ("name: x\nsubmission: x.py\nclasses: {A: {}}\ninput_sizes: B\n", "input_sizes must map"),
    ("name: x\nsubmission: x.py\nclasses: {A: {}}\ninput_sizes: {T: [x]}\n", "input_sizes must map"),
    ("[unclosed\n", "cannot read"),
])
def test_a_bad_descriptor_is_refused_with_a_reason(tmp_path, text, complaint):
    path = tmp_path / "exercise.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(exercise.ExerciseError, match=re.escape(complaint)) as caught:
        exercise.load(path)
    assert isinstance(caught.value, UsageError)


CONFIG = {"class": "Cfg", "fields": {"n_embd": 32, "n_head": 4, "dropout": 0.0}}


def test_the_worker_builds_a_config_object_from_the_declared_fields():
    """What CausalSelfAttention(cfg) receives without a Cfg of the submission's: a dataclass of the
    declared name, defaults filled in."""
    cfg, not_kept = child.config_object(CONFIG, {"n_embd": 8}, types.SimpleNamespace())
    assert not not_kept and type(cfg).__name__ == "Cfg" and (cfg.n_embd, cfg.n_head, cfg.dropout) == (8, 4, 0.0)
    with pytest.raises(TypeError):
        child.config_object({"class": "Cfg", "fields": {"n_embd": 32}}, {"unknown": 1}, types.SimpleNamespace())


def test_the_submissions_own_config_class_is_used_when_it_takes_the_fields():
    """A Cfg with a property its class reads (cfg.head_size) lost all 18 causal points when the
    grader's dataclass stood in for it."""
    @dataclasses.dataclass
    class Cfg:
        n_embd: int = 1
        n_head: int = 1
        dropout: float = 0.5

        @property
        def head_size(self):
            return self.n_embd // self.n_head

    assert child.config_object(CONFIG, {"n_embd": 8}, types.SimpleNamespace(Cfg=Cfg))[0].head_size == 2

    class Positional:  # refuses the fields as keywords: the grader's own is used
        def __init__(self, n_embd):
            self.n_embd = n_embd

    class Rewrites:  # keeps other values than it was given: the grader's own is used, the field named
        def __init__(self, **fields):
            self.__dict__.update(fields, dropout=0.1)

    class Misspells:  # a typo in __init__: dropout never kept (the class attribute stays)
        dropout = 0.0

        def __init__(self, n_embd=1, n_head=1, dropout=0.0):
            self.n_embd, self.n_head, self.droput = n_embd, n_head, dropout

    for own, not_kept in ((Positional, []), (Rewrites, ["dropout"]), ("not a class", [])):
        cfg, dropped = child.config_object(CONFIG, {"n_embd": 8}, types.SimpleNamespace(Cfg=own))
        assert type(cfg).__name__ == "Cfg" and dataclasses.is_dataclass(cfg) and cfg.dropout == 0.0
        assert dropped == not_kept
    cfg, dropped = child.config_object(CONFIG, {"n_embd": 8, "dropout": 0.5}, types.SimpleNamespace(Cfg=Misspells))
    assert dataclasses.is_dataclass(cfg) and cfg.dropout == 0.5 and dropped == ["dropout"]


def test_the_engines_catalogs_name_no_class_or_file_of_the_exercise():
    """The engine's feedback (autograder/feedback/*.yml) says `{submission}`; the exercise's words
    live in its suite folder's catalogs, which catalog() merges in."""
    for language in ("es", "en"):
        text = (PACKAGE / "feedback" / f"{language}.yml").read_text(encoding="utf-8")
        texts = "\n".join(line.split(" #")[0] for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert not CLASS_NAMES.search(texts) and "attention" not in texts.lower(), language
        merged = feedback.catalog(language)
        assert "{submission}" in merged["failures"]["load.several_files"]
        assert set(merged["titles"]) == {p.name for p in config.load().properties}


def test_a_key_in_both_catalogs_is_refused(tmp_path, monkeypatch):
    (tmp_path / "es.yml").write_text('labels:\n  passed: "otra vez"\n', encoding="utf-8")
    monkeypatch.setattr(feedback, "EXERCISE", dataclasses.replace(exercise.EXERCISE, feedback=tmp_path))
    feedback.catalog.cache_clear()
    try:
        with pytest.raises(feedback.CatalogError, match=r"labels\.passed already in the engine's") as caught:
            feedback.catalog("es")
        assert isinstance(caught.value, UsageError)
    finally:
        monkeypatch.undo()
        feedback.catalog.cache_clear()
