"""Stand-ins for the modules torch's meta-device kernels import on first use but barely need.

The device check runs the student's module on the meta device, whose kernels are torch's Python
references. Their first call imports torch._dynamo (to keep torch.compile out of them), and every
torch._check imports torch.fx.experimental.symbolic_shapes, which imports sympy: ~2 CPU-s on a
cold grade, to answer questions that, with concrete shapes, are trivial ("is this bool true?",
"is this a sympy expression?"). Until something needs more, each of those modules is a stand-in
(in sys.modules, and as its parent package's attribute) answering those questions alone:

- torch._dynamo.disable returns the function it wraps (no grading request compiles);
- sympy.Basic is a class nothing is an instance of (no shape is symbolic);
- symbolic_shapes' guards (expect_true, guard_or_false, sym_eq, ...) answer for plain Python
  values exactly as torch's do (tests/test_worker_child.py compares them), and hand anything
  symbolic (SymInt, SymBool, ...) to the real function.

Anything else asked of a stand-in (a submission calling torch.compile, a kernel needing another
function, an import of a submodule) first puts every real module back and answers from it. The
kernels compute the same either way; only the cost of the first call changes.
"""
import functools
import importlib
import operator
import sys
import types

SYMBOLIC_SHAPES = "torch.fx.experimental.symbolic_shapes"


class _NotSymbolic:
    """The stand-in sympy's Basic: no value on the meta device is a sympy expression."""


class _AskReal(Exception):
    """A fast answer's signal that the real function must answer (a value is not plain)."""


def _plain(value):
    """A value made of Python bools, ints, floats, None, tuples and lists only: never symbolic."""
    if isinstance(value, (tuple, list)):
        return all(_plain(item) for item in value)
    return type(value) in (bool, int, float, type(None))


def _same_bool(a):
    if type(a) is not bool:
        raise _AskReal
    return a


def _same_int(a):
    if type(a) is not int:
        raise _AskReal
    return a


def _hint(a):
    if type(a) not in (bool, int):
        raise _AskReal
    return a


def _sym_eq(x, y):
    if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        if len(x) != len(y):
            return False
        return functools.reduce(operator.and_, [_sym_eq(a, b) for a, b in zip(x, y)], True)
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    raise _AskReal


# symbolic_shapes' functions, for plain values: each gives torch 2.x's answer or raises _AskReal.
_GUARDS = {
    "expect_true": lambda a, skip=0: _same_bool(a),
    "guard_bool": _same_bool,
    "guard_or_false": _same_bool,
    "guard_or_true": _same_bool,
    "guard_size_oblivious": _same_bool,
    "statically_known_true": _same_bool,
    "guard_int": _same_int,
    "guarding_hint_or_throw": _hint,
    "has_guarding_hint": lambda a: True,
    "is_nested_int": lambda s: False,
    "sym_and": lambda x, *others: functools.reduce(operator.and_, others, x),
    "sym_or": lambda x, *others: functools.reduce(operator.or_, others, x),
    "sym_eq": _sym_eq,
}


def _guard(name, fast):
    @functools.wraps(fast)
    def guard(*args, **kwargs):
        if _plain(args) and _plain(list(kwargs.values())):
            try:
                return fast(*args, **kwargs)
            except _AskReal:
                pass
        return getattr(_real(SYMBOLIC_SHAPES), name)(*args, **kwargs)

    guard.__name__ = name
    return guard


def _disable(fn=None, recursive=True, wrapping=True, **options):
    return fn if fn is not None else (lambda function: function)


_ANSWERS = {
    "torch._dynamo": {"disable": _disable},
    "sympy": {"Basic": _NotSymbolic},
    SYMBOLIC_SHAPES: {name: _guard(name, fast) for name, fast in _GUARDS.items()},
}

_PACKAGES = {"torch._dynamo", "sympy"}  # their __path__ is asked for to import a submodule: the real one's


class _StandIn(types.ModuleType):
    """A module that answers _ANSWERS[its name] and, for anything else, is the real module."""

    def __getattr__(self, name):
        if sys.modules.get(self.__name__) is self:
            answers = _ANSWERS[self.__name__]
            if name in answers:
                return answers[name]
            if name.startswith("__") and not (name == "__path__" and self.__name__ in _PACKAGES):
                raise AttributeError(name)  # probed by the import system, inspect, copy, ...
        return getattr(_real(self.__name__), name)


def _real(name):
    """The real module `name`, after every stand-in has given its place back."""
    restore()
    return importlib.import_module(name)


def restore():
    """Put every stand-in's module back to loading for real on its next import."""
    for name in _ANSWERS:
        stand_in = sys.modules.get(name)
        if isinstance(stand_in, _StandIn):
            del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent and sys.modules.get(parent) is not None and vars(sys.modules[parent]).get(child) is stand_in:
                delattr(sys.modules[parent], child)


def install():
    """Stand in for each module not imported yet (after torch: they are torch's own imports)."""
    for name in _ANSWERS:
        if name in sys.modules:
            continue
        stand_in = _StandIn(name)
        sys.modules[name] = stand_in
        parent, _, child = name.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, stand_in)
