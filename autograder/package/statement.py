"""The statements' numbers, rendered from grading.yml: points, totals, visibility and limits.

ENUNCIADO.md (Spanish) and STATEMENT.en.md (English) keep every number that grading.yml decides
inside marked blocks:

    <!-- generated from grading.yml: points -->
    ...
    <!-- end -->

Everything between the markers is rendered here; the rest of the statement is written by hand.
Blocks (BLOCKS): `points` (feedback language, what each visibility means, the table of properties
with their points per class, prerequisites and totals, the exercise's total split by when it is
shown) and `limits` (timeouts and resource limits, and the loader's on a notebook's code). The words come from the feedback catalogs:
`checks` (the exercise's, autograder/properties/feedback/<language>.yml) says what each property
checks (its one place per language: a property grading.yml names without it stops the build),
`statement` (the engine's, autograder/feedback/<language>.yml) the rest.

- `python -m autograder build` renders the blocks into the statements that go into student.zip,
  from the grading.yml it builds with (--config).
- `python -m autograder.package.statement` rewrites the committed statements from grading.yml
  (`--check`: exit 1 when one is stale); tests/test_statement.py fails while one is.

The markers are HTML comments: invisible once the Markdown is rendered, so they stay in the copies
students get.
"""
import argparse
import re
import sys
import textwrap
from pathlib import Path

from ..errors import AutograderError, UsageError
from ..exercise import EXERCISE
from .. import config as grading_config
from .. import submission
from ..feedback import catalog

PROJECT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = PROJECT / "assignments"
STATEMENTS = {"ENUNCIADO.md": "es", "STATEMENT.en.md": "en"}  # file name -> language
OPEN = "<!-- generated from grading.yml: {name} -->"
END = "<!-- end -->"
BLOCK = re.compile(r"<!-- generated from grading\.yml: ([\w-]+) -->\n(.*?)<!-- end -->", re.S)
VISIBILITY_ORDER = ("visible", "after_due_date", "after_published", "hidden")
WIDTH = 100  # prose lines are wrapped as the hand-written text is; table rows never are


class StatementError(UsageError):
    """A statement cannot be rendered: markers missing or broken, a property without a description."""


def wrap(paragraph):
    """paragraph in lines of at most WIDTH, a number never parted from the word after it ("512 MiB")."""
    glued = re.sub(r"(\d) (?=\S)", "\\1\x1f", paragraph)  # textwrap breaks at ASCII whitespace only
    return textwrap.fill(glued, WIDTH, break_long_words=False, break_on_hyphens=False).replace("\x1f", " ")


def row(cells):
    """A Markdown table row; an empty cell stays '| |'."""
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def number(value, language):
    """2.0 -> '2', 1.5 -> '1,5' in Spanish and '1.5' in English."""
    value = float(value)
    text = str(int(value)) if value.is_integer() else f"{value:.10g}"
    return text.replace(".", ",") if language == "es" else text


def join(items, language):
    """'a', 'a y b', 'a, b y c' (English: 'a and b', 'a, b and c')."""
    items = list(items)
    last = catalog(language)["statement"]["and"]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])}{last}{items[-1]}"


def table_order(properties):
    """Property names in table order: the classes' own orders merged (a name new to a class goes
    just before the next one of that class already placed); those visible on submission first, then
    by when they are shown (a property's earliest visibility among its classes)."""
    order = []
    classes = list(dict.fromkeys(p.cls for p in properties))
    for cls in classes:
        names = [p.name for p in properties if p.cls == cls]
        for i, name in enumerate(names):
            if name in order:
                continue
            after = next((n for n in names[i + 1:] if n in order), None)
            order.insert(order.index(after) if after else len(order), name)
    shown = {}
    for prop in properties:
        shown[prop.name] = min(shown.get(prop.name, len(VISIBILITY_ORDER)), VISIBILITY_ORDER.index(prop.visibility))
    return sorted(order, key=shown.__getitem__)


def _condition(by_class, language, words):
    """The words of a row's prerequisites: 'solo puntúa si pasa `attends`', per class if they differ."""
    def phrase(requires):
        if not requires:
            return words["requires_none"]
        names = join((f"`{r}`" for r in requires), language)
        return words["requires_one" if len(requires) == 1 else "requires_many"].format(names=names)

    groups = {}
    for cls, requires in by_class.items():
        groups.setdefault(tuple(requires), []).append(cls)
    if len(groups) == 1:
        requires, = groups
        return phrase(requires) if requires else ""
    return "; ".join(words["requires_in"].format(classes=join(classes, language), phrase=phrase(requires))
                     for requires, classes in groups.items())


def points_block(config, language):
    """Feedback language and what each visibility means; the table (one row per property: what it
    checks, its prerequisites when grading.yml has any, its points per class, 0 shown as a
    prerequisite); notes on prerequisites; the exercise's total, split by when it is shown."""
    words = catalog(language)["statement"]
    checks = catalog(language).get("checks") or {}
    properties = config.properties
    classes = config.classes
    found = {(p.cls, p.name): p for p in properties}
    missing = sorted({p.name for p in properties} - set(checks))
    if missing:
        raise StatementError(f"{EXERCISE.feedback / language}.yml: no checks.{', checks.'.join(missing)}: every "
                             "property grading.yml grades must say, in the statement, what it checks")
    requires = {key: tuple(getattr(prop, "requires", ()) or ()) for key, prop in found.items()}
    with_conditions = any(requires.values())
    marks = words["marks"]

    later = [v for v in VISIBILITY_ORDER[1:] if any(p.visibility == v for p in properties)]
    intro = [words["language"].format(language=words["language_names"][config.language])]
    intro += [words["visibility_notes"][v].format(mark=marks[v]) for v in later]
    lines = [wrap(" ".join(intro)), ""]

    header = [words["header_property"], words["header_checks"]] + ([words["header_condition"]] if with_conditions else [])
    lines.append(row([*header, *classes]))
    lines.append("|" + "---|" * len(header) + ":-:|" * len(classes))
    for name in table_order(properties):
        present = [found[(cls, name)] for cls in classes if (cls, name) in found]
        visibilities = {p.visibility for p in present}
        uniform = len(visibilities) == 1
        label = f"`{name}`"
        if uniform and present[0].visibility != "visible":
            label += f" ({marks[present[0].visibility]})"
        cells = []
        for cls in classes:
            prop = found.get((cls, name))
            if prop is None:
                cells.append(words["absent"])
                continue
            cell = words["prerequisite"] if prop.points == 0 else number(prop.points, language)
            if not uniform and prop.visibility != "visible":
                cell += f" ({marks[prop.visibility]})"
            cells.append(cell)
        condition = [_condition({p.cls: requires[(p.cls, name)] for p in present}, language, words)]
        lines.append(row([label, checks[name]] + (condition if with_conditions else []) + cells))
    totals = [f"**{number(sum(p.points for p in properties if p.cls == cls), language)}**" for cls in classes]
    lines.append(row([f"**{words['total']}**", ""] + ([""] if with_conditions else []) + totals))

    notes = []
    if any(p.points == 0 for p in properties):
        notes.append(words["prerequisite_note"].format(prerequisite=words["prerequisite"]))
    if with_conditions:
        notes.append(words["condition_note"].format(header=words["header_condition"]))
    if notes:
        lines += ["", wrap(" ".join(notes))]

    by_visibility = {v: sum(p.points for p in properties if p.visibility == v) for v in VISIBILITY_ORDER}
    parts = [words["total_parts"][v].format(points=number(by_visibility[v], language))
             for v in VISIBILITY_ORDER if by_visibility[v]]
    if [v for v in VISIBILITY_ORDER if by_visibility[v]] in (["visible"], []):
        parts = [words["all_visible"]]
    lines += ["", wrap(words["total_line"].format(total=number(config.max_score, language), parts=join(parts, language)))]
    return "\n".join(lines)


def limits_block(config, language):
    """grading.yml's limits, and the loader's on a notebook's code (submission.py's, not the
    instructor's to change, but numbers the statement must not repeat by hand)."""
    limits = config.limits
    values = {name: number(getattr(limits, name), language) for name in limits.__dataclass_fields__}
    values.update(notebook_cell_kib=submission.MAX_CELL_CODE >> 10, notebook_code_mib=submission.MAX_NOTEBOOK_CODE >> 20,
                  py_mib=submission.MAX_BYTES >> 20, notebook_mib=submission.MAX_NOTEBOOK_BYTES >> 20)
    return wrap(catalog(language)["statement"]["limits"].strip().format(**values))


BLOCKS = {"points": points_block, "limits": limits_block}


def render(text, config, language, where="statement"):
    """text with every generated block re-rendered from config; StatementError if it has none,
    names an unknown block or leaves a marker unclosed."""
    found = BLOCK.findall(text)
    if text.count("<!-- generated from grading.yml:") != len(found) or text.count(END) != len(found):
        raise StatementError(f"{where}: a '<!-- generated from grading.yml: ... -->' marker without its '{END}' "
                             "(or the other way round)")
    if not found:
        raise StatementError(f"{where}: no '{OPEN.format(name='points')}' ... '{END}' block: the numbers of "
                             "grading.yml would not reach it")
    unknown = sorted({name for name, _ in found} - set(BLOCKS))
    if unknown:
        raise StatementError(f"{where}: unknown generated block(s) {unknown}; known: {sorted(BLOCKS)}")

    def fill(match):
        name = match.group(1)
        return f"{OPEN.format(name=name)}\n\n{BLOCKS[name](config, language)}\n\n{END}"

    return BLOCK.sub(fill, text)


def language_of(name):
    """The language of a statement file name (a path's last part), or None if it is not one."""
    return STATEMENTS.get(name.rsplit("/", 1)[-1])


def render_entries(entries, config):
    """build.py's student entries, with each statement's blocks rendered from config."""
    rendered = []
    for entry in entries:
        language = language_of(entry.name)
        if language:
            text = render(entry.data.decode("utf-8"), config, language, where=entry.name)
            entry = type(entry)(entry.name, text.encode("utf-8"), entry.mode)
        rendered.append(entry)
    return rendered


def statement_paths(folder=ASSIGNMENTS):
    return sorted(path for path in Path(folder).glob("*/*") if path.name in STATEMENTS)


def main(argv=None):
    """`python -m autograder.package.statement [--check] [--config grading.yml]`: rewrite the
    committed statements' generated blocks from grading.yml, or (--check) exit 1 if one is stale."""
    parser = argparse.ArgumentParser(prog="python -m autograder.package.statement", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="only say whether the statements are up to date")
    parser.add_argument("--config", default=str(grading_config.DEFAULT_PATH), help="grading.yml to render from")
    parser.add_argument("--folder", default=str(ASSIGNMENTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        config = grading_config.load(args.config)
        stale = {}  # path -> fresh text; all rendered before any is written
        for path in statement_paths(args.folder):
            text = path.read_text(encoding="utf-8")
            fresh = render(text, config, STATEMENTS[path.name], where=str(path))
            if fresh != text:
                stale[path] = fresh
    except AutograderError as exc:  # run as its own module: no cli.main to catch it
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.check:
        for path in stale:
            print(f"{path}: stale against {args.config} (run python -m autograder.package.statement)", file=sys.stderr)
        return 1 if stale else 0
    for path, fresh in stale.items():
        path.write_text(fresh, encoding="utf-8")
        print(f"rewrote {path}")
    if not stale:
        print("statements already match grading.yml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
