"""Generic mutation operators, in the tradition of mutmut and cosmic-ray, applied to the methods of
the three graded classes of solutions/attention.py (the Cfg dataclass and imports are left alone).

Each operator is an ast.NodeTransformer that finds its sites in document order and rewrites one
of them: a run with target=i rewrites the i-th site (counting every alternative of every site)
and leaves the rest. mutants() yields one Mutant per site, at most `per_operator` of each
operator, sampled deterministically (random.Random(f"{seed}:{operator}")) when there are more:

  axis            an axis argument (transpose, softmax, split, unsqueeze, dim=...) -> a neighbouring axis
  constant        a number n -> n + 1; True <-> False; "-inf" <-> "inf"
  drop_call       a call -> its first argument, a method call -> its receiver (drops the call)
  comparison      == <-> !=, < <-> >=, is <-> is not...; an `if` condition -> its negation
  swap_args       the first two positional arguments of a call, two unpacking targets, the operands of @
  binary          / <-> *, + <-> -, // -> /, % -> //, @ -> *
  unary           ~x, not x, -x -> x
  drop_statement  a statement -> pass
  keyword         a call's keyword argument removed (its default then applies)
"""
from __future__ import annotations

import ast
import copy
import random
from dataclasses import dataclass

from .mutation import parse

CLASSES = ("SelfAttention", "MultiHeadAttention", "CausalSelfAttention")
MODULE_NAMES = {"torch", "F", "nn", "math", "np"}
AXIS_CALLS = {"transpose", "softmax", "split", "unsqueeze", "squeeze", "swapaxes", "flatten"}
AXIS_SWAP = {-1: -2, -2: -1, -3: -2, 0: 1, 1: 2, 2: 1, 3: 2}
NOT_DROPPED = {"super", "float", "int", "isinstance", "ValueError", "Linear", "Dropout", "Parameter", "ones"}


@dataclass(frozen=True)
class Mutant:
    id: str  # operator@Class.method#k: the k-th site of that operator in that method
    operator: str
    cls: str
    method: str
    line: int  # in solutions/attention.py
    description: str
    source: str


def _int_of(node):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


def _int_node(value):
    return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


def _callee(call):
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


class Operator(ast.NodeTransformer):
    name = ""

    def __init__(self, target=-1):
        self.target = target
        self.count = 0
        self.hit = None  # (original node, replacement) once the target site is rewritten

    def options(self, node):
        """Replacements for `node` (fresh nodes), one per way this operator mutates it."""
        return []

    def visit(self, node):
        if self.hit is None:
            for option in self.options(node):
                if self.count == self.target:
                    self.hit = (node, option)
                    self.count += 1
                    return ast.copy_location(option, node) if hasattr(node, "lineno") else option
                self.count += 1
        return self.generic_visit(node)


class Axis(Operator):
    name = "axis"

    def options(self, node):
        if not isinstance(node, ast.Call) or _callee(node) not in AXIS_CALLS:
            return []
        found = []
        taken = {_int_of(arg) for arg in node.args}
        for i, arg in enumerate(node.args):
            value = _int_of(arg)
            if value is not None and not (_callee(node) in ("split", "softmax") and i == 0):
                new = copy.deepcopy(node)
                new.args[i] = _int_node(_other_axis(value, taken))
                found.append(new)
        for i, keyword in enumerate(node.keywords):
            value = _int_of(keyword.value)
            if keyword.arg == "dim" and value is not None:
                new = copy.deepcopy(node)
                new.keywords[i].value = _int_node(_other_axis(value, taken))
                found.append(new)
        return found


def _other_axis(value, taken):
    """A neighbouring axis that the call does not already name (transpose(1, 2) -> transpose(0, 2),
    not the no-op transpose(2, 2))."""
    for candidate in (AXIS_SWAP.get(value, value + 1), value - 1, value + 1, value - 2, value + 2):
        if candidate != value and candidate not in taken:
            return candidate
    return value + 3


class Constant(Operator):
    name = "constant"

    def options(self, node):
        if not isinstance(node, ast.Constant):
            return []
        value = node.value
        if isinstance(value, bool):
            return [ast.Constant(not value)]
        if isinstance(value, (int, float)):
            return [ast.Constant(value + 1)]
        if value in ("-inf", "inf"):
            return [ast.Constant("inf" if value == "-inf" else "-inf")]
        return []


class DropCall(Operator):
    name = "drop_call"

    def options(self, node):
        if not isinstance(node, ast.Call) or _callee(node) in NOT_DROPPED:
            return []
        func = node.func
        if isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name) and func.value.id in MODULE_NAMES | {"self"}):
            return [copy.deepcopy(func.value)]  # a method of a value: keep the value
        if node.args and not isinstance(node.args[0], ast.Starred):
            return [copy.deepcopy(node.args[0])]  # a function or layer: keep its first argument
        return []


COMPARE_FLIP = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
                ast.LtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}


class Comparison(Operator):
    name = "comparison"

    def options(self, node):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            new = copy.deepcopy(node)
            new.ops = [COMPARE_FLIP[type(node.ops[0])]()]
            return [new]
        if isinstance(node, (ast.If, ast.IfExp)) and not isinstance(node.test, ast.Compare):
            new = copy.deepcopy(node)
            new.test = ast.UnaryOp(ast.Not(), new.test)
            return [new]
        return []


class SwapArgs(Operator):
    name = "swap_args"

    def options(self, node):
        if isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]) \
                and ast.dump(node.args[0]) != ast.dump(node.args[1]):
            new = copy.deepcopy(node)
            new.args[0], new.args[1] = new.args[1], new.args[0]
            return [new]
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple) \
                and len(node.targets[0].elts) >= 2:
            new = copy.deepcopy(node)
            elts = new.targets[0].elts
            elts[0], elts[1] = elts[1], elts[0]
            return [new]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            new = copy.deepcopy(node)
            new.left, new.right = new.right, new.left
            return [new]
        return []


BINARY_SWAP = {ast.Div: ast.Mult, ast.Mult: ast.Div, ast.Add: ast.Sub, ast.Sub: ast.Add, ast.FloorDiv: ast.Div,
               ast.Mod: ast.FloorDiv, ast.MatMult: ast.Mult, ast.Pow: ast.Mult}


class Binary(Operator):
    name = "binary"

    def options(self, node):
        if isinstance(node, ast.BinOp) and type(node.op) in BINARY_SWAP:
            new = copy.deepcopy(node)
            new.op = BINARY_SWAP[type(node.op)]()
            return [new]
        return []


class Unary(Operator):
    name = "unary"

    def options(self, node):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not, ast.USub)):
            return [copy.deepcopy(node.operand)]
        return []


class DropStatement(Operator):
    name = "drop_statement"

    def options(self, node):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Pass)):
            return [ast.Pass()]
        return []


class Keyword(Operator):
    name = "keyword"

    def options(self, node):
        if not isinstance(node, ast.Call):
            return []
        found = []
        for i, keyword in enumerate(node.keywords):
            if keyword.arg is not None:
                new = copy.deepcopy(node)
                del new.keywords[i]
                found.append(new)
        return found


OPERATORS = {op.name: op for op in (Axis, Constant, DropCall, Comparison, SwapArgs, Binary, Unary, DropStatement, Keyword)}


def _methods(tree):
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in CLASSES:
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    yield node.name, item


def _sites(source, operator):
    """[(cls, method, index within that method)] of every site of `operator`, in document order."""
    sites = []
    for cls, function in _methods(parse(source)):
        counter = OPERATORS[operator]()
        for statement in function.body:
            counter.visit(statement)
        sites += [(cls, function.name, i) for i in range(counter.count)]
    return sites


def make(source, operator, cls, method, index):
    """The mutant of `operator` at its index-th site of cls.method, or None if there is no such site."""
    tree = parse(source)
    for name, function in _methods(tree):
        if (name, function.name) != (cls, method):
            continue
        rewriter = OPERATORS[operator](target=index)
        function.body = [rewriter.visit(statement) for statement in function.body]
        if rewriter.hit is None:
            return None
        ast.fix_missing_locations(tree)
        before, after = rewriter.hit
        mutated = ast.unparse(tree) + "\n"
        description = f"`{_short(before)}` → `{_short(after)}`"
        return Mutant(f"{operator}@{cls}.{method}#{index + 1}", operator, cls, method,
                      getattr(before, "lineno", function.lineno), description, mutated)
    return None


def _short(node, width=90):
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def mutants(source, per_operator=6, seed=0, operators=None):
    """One Mutant per chosen site of every operator (every site when there are at most per_operator,
    or per_operator is None or 0); mutants that do not compile are left out."""
    found = []
    for operator in operators or OPERATORS:
        sites = _sites(source, operator)
        if per_operator and len(sites) > per_operator:  # None or 0: every site
            chosen = sorted(random.Random(f"{seed}:{operator}").sample(range(len(sites)), per_operator))
            sites = [sites[i] for i in chosen]
        for cls, method, index in sites:
            mutant = make(source, operator, cls, method, index)
            if mutant is None:
                continue
            try:
                compile(mutant.source, mutant.id, "exec")
            except SyntaxError:
                continue
            found.append(mutant)
    return found


def by_id(source, mutant_id):
    """The mutant with this id (operator@Class.method#k), or None."""
    operator, _, rest = mutant_id.partition("@")
    where, _, number = rest.partition("#")
    cls, _, method = where.partition(".")
    if operator not in OPERATORS or not number.isdigit() or int(number) < 1:
        return None
    return make(source, operator, cls, method, int(number) - 1)


def site_counts(source):
    return {operator: len(_sites(source, operator)) for operator in OPERATORS}
