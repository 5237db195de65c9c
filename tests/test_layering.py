"""The package's layering: the command line sits on top and nothing imports it back."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "autograder"

pytestmark = pytest.mark.unit


def imported_modules(source, package):
    """Absolute names a module of `package` (e.g. "autograder.cohort") imports, relative ones resolved."""
    parts = package.split(".")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = parts[:len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def package_of(path):
    return ".".join(["autograder", *path.relative_to(PACKAGE).parent.parts])


def test_nothing_imports_the_command_line_back():
    offenders = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                       if path.name not in ("cli.py", "__main__.py")
                       and "autograder.cli" in set(imported_modules(path.read_text(encoding="utf-8"), package_of(path))))
    assert not offenders, f"these import autograder.cli (move what they need below it): {offenders}"


@pytest.mark.parametrize("source", ["from ..cli import add", "from .. import cli", "import autograder.cli",
                                    "def f():\n    from ..cli import add\n"])
def test_the_check_resolves_every_way_of_importing_cli(source):
    assert "autograder.cli" in set(imported_modules(source, "autograder.cohort"))


def test_the_check_does_not_confuse_a_sibling_module():
    assert "autograder.cli" not in set(imported_modules("from .cli import x", "autograder.cohort"))
