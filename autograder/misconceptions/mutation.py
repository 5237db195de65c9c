"""Source-level mutations of solutions/attention.py: small AST edits, located by class, method and pattern.

An edit names the class and method it works in and the code it expects there, written as source
(`Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)`); the pattern is matched by structure (ast.dump,
so spacing, comments and line numbers do not matter), never by line number or text. An edit that
finds its pattern fewer or more times than it expects raises MutationError naming what it looked
for: when the reference solution changes, a catalog entry fails loudly instead of silently
mutating something else (or nothing).
"""
from __future__ import annotations

import ast
import copy
import difflib
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "attention.py"


class MutationError(UsageError):
    """A mutation's pattern was not found where it says (or found more often than it expects)."""


def solution_source(path=SOLUTION):
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise MutationError(f"cannot read the reference solution {path}: {exc}") from None


def parse(source):
    return ast.parse(source)


def find_method(tree, cls, method):
    """The FunctionDef `cls.method` of the module `tree`, or MutationError."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return item
            raise MutationError(f"{cls} has no method {method}")
    raise MutationError(f"no class {cls} in the solution")


def _expression(text):
    return ast.parse(text, mode="eval").body


def _statements(text):
    return ast.parse(text, mode="exec").body if text.strip() else []


def _key(node):
    return ast.dump(node, annotate_fields=False)


def _store_to_load(node):
    """Compare expressions whatever their context: `q, k` as a target and as a value match."""
    node = copy.deepcopy(node)
    for sub in ast.walk(node):
        if hasattr(sub, "ctx"):
            sub.ctx = ast.Load()
    return node


@dataclass(frozen=True)
class Replace:
    """Replace the expression `old` by `new`, in `cls.method`, exactly `count` times."""

    cls: str
    method: str
    old: str
    new: str
    count: int = 1

    def apply(self, tree):
        target = _key(_expression(self.old))
        replacement = _expression(self.new)
        found = []

        class Swap(ast.NodeTransformer):
            def visit(self, node):
                if isinstance(node, ast.expr) and _key(_store_to_load(node)) == target:
                    found.append(node)
                    new = copy.deepcopy(replacement)
                    if hasattr(node, "ctx"):
                        for sub in ast.walk(new):
                            if hasattr(sub, "ctx"):
                                sub.ctx = type(node.ctx)()
                    return ast.copy_location(new, node)
                return self.generic_visit(node)

        function = find_method(tree, self.cls, self.method)
        function.body = [Swap().visit(statement) for statement in function.body]
        _expect(found, self)

    def describe(self):
        return f"{self.cls}.{self.method}: `{self.old}` → `{self.new}`"


@dataclass(frozen=True)
class ReplaceStatement:
    """Replace the statement `old` (one statement, at any depth of `cls.method`) by the statements
    `new` (none: delete it; a block left empty gets `pass`), exactly `count` times."""

    cls: str
    method: str
    old: str
    new: str
    count: int = 1

    def apply(self, tree):
        old = _statements(self.old)
        if len(old) != 1:
            raise MutationError(f"ReplaceStatement takes one statement, not {self.old!r}")
        target = _key(old[0])
        found = []

        def rewrite(body):
            out = []
            for statement in body:
                if _key(statement) == target:
                    found.append(statement)
                    out.extend(copy.deepcopy(_statements(self.new)))
                    continue
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(statement, field, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                        setattr(statement, field, rewrite(inner) or ([ast.Pass()] if field == "body" else []))
                out.append(statement)
            return out

        function = find_method(tree, self.cls, self.method)
        function.body = rewrite(function.body) or [ast.Pass()]
        _expect(found, self)

    def describe(self):
        new = self.new.strip().replace("\n", "; ") or "(removed)"
        return f"{self.cls}.{self.method}: `{self.old.strip()}` → `{new}`"


def _expect(found, edit):
    if len(found) != edit.count:
        where = f"{edit.cls}.{edit.method}"
        raise MutationError(f"{where}: expected `{edit.old.strip()}` {edit.count} time(s), found it {len(found)} "
                            "time(s); the reference solution changed: update this mutation")


def apply(edits, source=None):
    """The source of the solution with `edits` applied (ast.unparse: comments are not kept)."""
    tree = parse(solution_source() if source is None else source)
    for edit in edits:
        edit.apply(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"


def normalized(source):
    """The solution as the mutants are written (ast.unparse), so that a diff shows the edit alone."""
    return ast.unparse(parse(source)) + "\n"


def diff(before, after, context=0):
    """The lines an edit changed, as a unified diff without its header."""
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=context)
    return "\n".join(line for line in lines if not line.startswith(("---", "+++")))


def code_key(source):
    """What two sources share when they are the same code (formatting and comments aside)."""
    return _key(parse(source))


def same_code(a, b):
    return code_key(a) == code_key(b)
