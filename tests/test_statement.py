"""The statements' numbers come from grading.yml (autograder/package/statement.py).

ENUNCIADO.md and STATEMENT.en.md hold the points per property and class, the totals, what is
shown when, the prerequisites and the grader's limits in blocks generated from grading.yml: the
committed copies must agree with grading.yml, and the copies `build` puts into student.zip must
carry the numbers of the grading.yml it builds with, whatever they are. The numbers are read back
from the Markdown here, by a parser of this file's own, not by asking the renderer again.
Fast: nothing is graded.
"""
import re
import zipfile
from pathlib import Path

import pytest
import yaml

from autograder import config as grading_config
from autograder import feedback
from autograder.package import build as builder
from autograder.package import statement

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
HANDOUT = ROOT / "assignments" / "attention"
LANGUAGES = {"ENUNCIADO.md": "es", "STATEMENT.en.md": "en"}


def block(text, name):
    found = re.findall(rf"<!-- generated from grading\.yml: {name} -->\n(.*?)<!-- end -->", text, re.S)
    assert len(found) == 1, f"expected one generated block '{name}', found {len(found)}"
    return found[0]


def prose(text):
    """A block's text with its line breaks undone, for searching sentences."""
    return " ".join(text.split())


def cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_table(text):
    """The points block's table: ({property: {"mark": visibility mark or None, "condition": text or
    None, class: cell}}, {class: total cell}); classes where a property is absent are left out."""
    lines = [line for line in block(text, "points").splitlines() if line.startswith("|")]
    header = cells(lines[0])
    classes = [h for h in header if h in grading_config.CLASSES]
    condition_at = 2 if len(header) - len(classes) == 3 else None
    table, totals = {}, {}
    for line in lines[2:]:
        row = cells(line)
        points = dict(zip(classes, row[-len(classes):]))
        if row[0].startswith("**"):
            totals = {cls: cell.strip("*") for cls, cell in points.items()}
            continue
        name, mark = re.fullmatch(r"`(\w+)`(?: \((.+)\))?", row[0]).groups()
        table[name] = {"mark": mark, "condition": row[condition_at] if condition_at else None,
                       **{cls: cell for cls, cell in points.items() if cell != "–"}}
    return table, totals


def shown(value, language):
    text = f"{float(value):g}"
    return text.replace(".", ",") if language == "es" else text


def check_numbers(text, config, language):
    """Every number of config the statement must carry, read back from its Markdown."""
    words = feedback.catalog(language)["statement"]
    table, totals = parse_table(text)
    assert set(table) == {p.name for p in config.properties}
    for prop in config.properties:
        row = table[prop.name]
        expected = words["prerequisite"] if prop.points == 0 else shown(prop.points, language)
        assert row[prop.cls] == expected, (prop.cls, prop.name)
        assert row["mark"] == words["marks"].get(prop.visibility), prop.name  # uniform per name in these files
        present = {p.cls for p in config.properties if p.name == prop.name}
        assert set(row) - {"mark", "condition"} == present, prop.name
    for cls in dict.fromkeys(p.cls for p in config.properties):
        assert totals[cls] == shown(sum(p.points for p in config.properties if p.cls == cls), language)

    points = prose(block(text, "points"))
    by_visibility = {v: sum(p.points for p in config.properties if p.visibility == v) for v in grading_config.VISIBILITIES}
    if language == "es":
        assert f"Total del ejercicio: **{shown(config.max_score, language)} puntos**" in points
        assert f"están en {words['language_names'][config.language]}." in points
        if by_visibility["after_due_date"]:
            assert f"{shown(by_visibility['after_due_date'], language)} que se muestran tras la fecha límite" in points
    else:
        assert f"Exercise total: **{shown(config.max_score, language)} points**" in points
        assert f"Feedback messages are in {words['language_names'][config.language]}." in points
        if by_visibility["after_due_date"]:
            assert f"{shown(by_visibility['after_due_date'], language)} shown after the due date" in points
    visible = by_visibility["visible"]
    assert (f"{shown(visible, language)} visibles al entregar" if language == "es"
            else f"{shown(visible, language)} shown on submission") in points

    limits = prose(block(text, "limits"))
    lim = config.limits
    expected = ([f"{shown(lim.import_s, 'es')} s para importar", f"{shown(lim.request_s, 'es')} s por llamada",
                 f"{shown(lim.class_s, 'es')} s por clase", f"{shown(lim.submission_s, 'es')} s por entrega",
                 f"{lim.memory_mib} MiB de memoria", f"{lim.cpu_s} s de CPU", f"{lim.open_files} archivos abiertos",
                 f"{lim.processes} procesos", f"hasta {lim.file_size_mib} MiB", f"{lim.disk_mib} MiB en total",
                 f"hasta {lim.output_kib} KiB"]
                if language == "es" else
                [f"{shown(lim.import_s, 'en')} s to import", f"{shown(lim.request_s, 'en')} s per call",
                 f"{shown(lim.class_s, 'en')} s per class", f"{shown(lim.submission_s, 'en')} s per submission",
                 f"{lim.memory_mib} MiB of memory", f"{lim.cpu_s} s of CPU", f"{lim.open_files} open files",
                 f"{lim.processes} processes", f"up to {lim.file_size_mib} MiB", f"{lim.disk_mib} MiB in all",
                 f"up to {lim.output_kib} KiB"])
    for phrase in expected:
        assert phrase in limits, phrase


# ---- the committed statements ------------------------------------------------------------------

@pytest.mark.parametrize("name", list(LANGUAGES))
def test_committed_statement_is_rendered_from_grading_yml(name, grading):
    text = (HANDOUT / name).read_text(encoding="utf-8")
    fresh = statement.render(text, grading, LANGUAGES[name], where=name)
    stale = [line for line in fresh.splitlines() if line not in text.splitlines()]
    assert fresh == text, (f"{name} is stale against grading.yml or the feedback catalogs' checks/statement: "
                           f"run python -m autograder.package.statement. It would get: {stale[:5]}")


@pytest.mark.parametrize("name", list(LANGUAGES))
def test_committed_statement_states_grading_yml_numbers(name, grading):
    text = (HANDOUT / name).read_text(encoding="utf-8")
    check_numbers(text, grading, LANGUAGES[name])
    outside = re.sub(r"<!-- generated from grading\.yml: \w+ -->\n.*?<!-- end -->", "", text, flags=re.S)
    assert not re.search(r"\d+ (MiB|KiB|puntos|points)\b", outside), "a number of grading.yml written by hand"


def test_every_property_says_what_it_checks_in_both_languages(grading):
    es, en = feedback.catalog("es"), feedback.catalog("en")
    assert set(es["checks"]) == set(en["checks"])
    assert {p.name for p in grading.properties} <= set(es["checks"])
    assert "attends" in es["checks"]  # the prerequisite being added to grading.yml

    def keys(tree, prefix=""):
        return {prefix + k for k, v in tree.items()} | {
            key for k, v in tree.items() if isinstance(v, dict) for key in keys(v, f"{prefix}{k}.")}

    assert keys(es["statement"]) == keys(en["statement"])


def test_the_statements_in_student_zip_are_the_committed_ones(grading):
    entries = {e.name: e.data for e in builder.student_entries(grading)}
    for name in LANGUAGES:
        assert entries[f"attention/{name}"] == (HANDOUT / name).read_bytes()


# ---- an edited grading.yml: the built student.zip follows it ----------------------------------

def edited_grading_yml(path):
    data = yaml.safe_load((ROOT / "grading.yml").read_text(encoding="utf-8"))
    data["language"] = "en"
    data["timeouts"]["request"] = 7
    data["limits"]["memory_mib"] = 777
    data["limits"]["output_kib"] = 2
    classes = data["classes"]
    classes["SelfAttention"]["scale"]["points"] = 5
    classes["MultiHeadAttention"]["split_heads"]["points"] = 0.5
    classes["SelfAttention"]["gradients"]["points"] = 0
    for cls in classes.values():  # every class: the mark stays on the property's name
        cls["device"]["visibility"] = "after_published"
    if "requires" in grading_config.Property.__dataclass_fields__:  # whatever the shipped file requires
        for cls in classes.values():
            cls["shapes"]["requires"] = []
        classes["SelfAttention"]["scale"]["requires"] = []
        classes["MultiHeadAttention"]["scale"]["requires"] = ["shapes"]
        classes["CausalSelfAttention"]["causality"]["requires"] = ["shapes", "mask_buffer"]
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_built_student_zip_carries_an_edited_grading_yml(tmp_path):
    config_path = edited_grading_yml(tmp_path / "grading.yml")
    config = grading_config.load(config_path)
    assert config.limits.memory_mib == 777 and config.max_score != grading_config.load().max_score
    builder.build(tmp_path / "dist", config_path)
    with zipfile.ZipFile(tmp_path / "dist" / "student.zip") as archive:
        texts = {name: archive.read(f"attention/{name}").decode("utf-8") for name in LANGUAGES}
    for name, text in texts.items():
        check_numbers(text, config, LANGUAGES[name])
        assert "512 MiB" not in text and "1536" not in text
    es, en = texts["ENUNCIADO.md"], texts["STATEMENT.en.md"]
    assert "777 MiB de memoria" in prose(es) and "7 s por llamada" in prose(es) and "están en inglés" in prose(es)
    assert "| `scale` |" in es and "| 5 | 2 | – |" in es  # SelfAttention, MultiHeadAttention, CausalSelfAttention
    assert "| – | 0,5 | – |" in es and "| 0.5 |" in en
    gradients = parse_table(es)[0]["gradients"]
    assert gradients["SelfAttention"] == "requisito" and gradients["MultiHeadAttention"] == "1"
    assert "«requisito» no da puntos por sí sola" in prose(es)
    assert parse_table(es)[0]["device"]["mark"] == "tras publicar las notas"
    assert "se muestra recién cuando el equipo docente publica las notas" in prose(es)
    assert "3 que se muestran al publicar las notas" in prose(es) and "3 shown when grades are published" in prose(en)
    if "requires" in grading_config.Property.__dataclass_fields__:
        table = parse_table(es)[0]
        assert table["scale"]["condition"] == ("en SelfAttention, sin condición; "
                                               "en MultiHeadAttention, solo puntúa si pasa `shapes`")
        assert table["causality"]["condition"] == "solo puntúa si pasan `shapes` y `mask_buffer`"
        assert table["shapes"]["condition"] == ""
        assert parse_table(en)[0]["causality"]["condition"] == "only scores if `shapes` and `mask_buffer` pass"
        assert "«Condición» dice qué otras propiedades de la misma clase tienen que pasar" in prose(es)


# ---- the renderer alone ------------------------------------------------------------------------

def fake_config(*properties, language="es"):
    props = tuple(grading_config.Property(c, n, pts, v, tuple(r)) for c, n, pts, v, r in properties)
    return grading_config.GradingConfig(language, 8, 0, grading_config.Limits(), props)


SKELETON = ("# x\n\n<!-- generated from grading.yml: points -->\nold\n<!-- end -->\n\ntext\n\n"
            "<!-- generated from grading.yml: limits -->\n<!-- end -->\n")


def test_prerequisites_and_visibility_are_said_per_class_when_they_differ():
    config = fake_config(("SelfAttention", "attends", 0, "visible", ()),
                         ("SelfAttention", "shapes", 1.5, "hidden", ("attends",)),
                         ("SelfAttention", "scale", 2, "visible", ("attends",)),
                         ("MultiHeadAttention", "attends", 0, "visible", ()),
                         ("MultiHeadAttention", "shapes", 1, "visible", ("attends",)),
                         ("MultiHeadAttention", "scale", 2, "visible", ("attends", "shapes")))
    text = statement.render(SKELETON, config, "es")
    assert "old" not in text and text.startswith("# x\n\n<!-- generated from grading.yml: points -->\n\n")
    assert text.endswith("\n\n<!-- end -->\n")
    table, totals = parse_table(text)
    assert table["attends"] == {"mark": None, "condition": "", "SelfAttention": "requisito", "MultiHeadAttention": "requisito"}
    assert table["shapes"]["SelfAttention"] == "1,5 (oculta)" and table["shapes"]["mark"] is None
    assert table["shapes"]["condition"] == "solo puntúa si pasa `attends`"
    assert table["scale"]["condition"] == ("en SelfAttention, solo puntúa si pasa `attends`; "
                                           "en MultiHeadAttention, solo puntúa si pasan `attends` y `shapes`")
    assert totals == {"SelfAttention": "3,5", "MultiHeadAttention": "3"}
    assert list(table) == ["attends", "shapes", "scale"]
    said = prose(block(text, "points"))
    assert "Total del ejercicio: **6,5 puntos** (5 visibles al entregar y 1,5 que no se muestran)." in said
    assert "marcadas «oculta» se ejecutan al entregar y cuentan en la nota" in said
    assert "tras la fecha" not in said


def test_without_prerequisites_the_table_has_no_condition_column():
    config = fake_config(("SelfAttention", "shapes", 1, "visible", ()), ("CausalSelfAttention", "shapes", 2, "visible", ()),
                         language="en")
    text = statement.render(SKELETON, config, "en")
    assert "| Property | What it checks | SelfAttention | CausalSelfAttention |" in text
    assert "Condition" not in text and "prerequisite" not in text
    assert "Exercise total: **3 points** (all shown on submission)." in prose(text)


@pytest.mark.parametrize("text, problem", [
    ("# nothing generated\n", "no '<!-- generated from grading.yml: points -->'"),
    ("<!-- generated from grading.yml: points -->\n", "without its"),
    ("<!-- generated from grading.yml: points -->\n<!-- end -->\n<!-- end -->\n", "without its"),
    ("<!-- generated from grading.yml: prices -->\n<!-- end -->\n", "unknown generated block"),
])
def test_a_statement_without_sound_blocks_is_refused(text, problem, grading):
    with pytest.raises(statement.StatementError, match=re.escape(problem)):
        statement.render(text, grading, "es")


def test_a_property_without_a_description_stops_the_build():
    config = fake_config(("SelfAttention", "telepathy", 1, "visible", ()))
    with pytest.raises(statement.StatementError, match=r"es\.yml: no checks\.telepathy"):
        statement.render(SKELETON, config, "es")
    with pytest.raises(builder.BuildError, match="checks.telepathy"):
        builder.student_entries(config)


# ---- python -m autograder.package.statement ------------------------------------------------------

def test_the_command_rewrites_stale_statements_and_checks_them(tmp_path, capsys):
    folder = tmp_path / "attention"
    folder.mkdir()
    for name in LANGUAGES:
        (folder / name).write_bytes((HANDOUT / name).read_bytes())
    stale = (folder / "ENUNCIADO.md").read_text(encoding="utf-8").replace("MiB de memoria", "GiB de memoria")
    (folder / "ENUNCIADO.md").write_text(stale, encoding="utf-8")
    assert statement.main(["--check", "--folder", str(tmp_path)]) == 1
    assert "ENUNCIADO.md: stale" in capsys.readouterr().err
    assert (folder / "ENUNCIADO.md").read_text(encoding="utf-8") == stale  # --check writes nothing
    assert statement.main(["--folder", str(tmp_path)]) == 0
    assert "rewrote" in capsys.readouterr().out
    assert statement.main(["--check", "--folder", str(tmp_path)]) == 0
    for name in LANGUAGES:
        assert (folder / name).read_bytes() == (HANDOUT / name).read_bytes()
