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


_PLAIN = (bool, int, float)  # never symbolic: SymInt, SymBool and SymFloat subclass none of them


def _ask_torch(name, *args, **kwargs):
    """torch's own answer, for what the stand-in does not answer itself: a symbolic value, or a
    value that is an error in torch too (torch then raises its own error)."""
    return getattr(_real(SYMBOLIC_SHAPES), name)(*args, **kwargs)


# symbolic_shapes' guards as torch 2.13 computes them for plain values (tests/test_worker_child.py
# compares them with torch's over bools, ints, floats, None, tuples, lists and torch.Size); each
# hands anything else to torch's. One Python call each, like torch's: the meta kernels call them
# thousands of times a forward.
def expect_true(a, skip=0):
    return a if type(a) is bool else _ask_torch("expect_true", a, skip)


def _same_if(name, *types):
    """torch's guard `name`, which returns a value of these types as it is."""
    def guard(a):
        return a if type(a) in types else _ask_torch(name, a)

    guard.__name__ = guard.__qualname__ = name
    return guard


def _constant_if_plain(name, answer):
    """torch's guard `name`, whose answer for any plain value is `answer`."""
    def guard(a):
        return answer if type(a) in _PLAIN else _ask_torch(name, a)

    guard.__name__ = guard.__qualname__ = name
    return guard


def _fold_if_plain(name, op):
    """torch's guard `name` (sym_and, sym_or): `op` folded over plain bools and ints."""
    def guard(x, *others):
        if all(type(v) is bool or type(v) is int for v in (x, *others)):
            return functools.reduce(op, others, x)
        return _ask_torch(name, x, *others)

    guard.__name__ = guard.__qualname__ = name
    return guard


def sym_eq(x, y):
    if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        if len(x) != len(y):
            return False
        return functools.reduce(operator.and_, map(sym_eq, x, y), True)
    if (type(x) is int or type(x) is bool) and (type(y) is int or type(y) is bool):
        return x == y
    return _ask_torch("sym_eq", x, y)  # torch's answer for a symbolic pair, its error for others


_GUARDS = (
    expect_true, sym_eq, _fold_if_plain("sym_and", operator.and_), _fold_if_plain("sym_or", operator.or_),
    *(_same_if(name, bool) for name in ("guard_bool", "guard_or_false", "guard_or_true",
                                        "guard_size_oblivious", "statically_known_true")),
    _same_if("guard_int", int), _same_if("guarding_hint_or_throw", bool, int),
    _constant_if_plain("has_guarding_hint", True), _constant_if_plain("is_nested_int", False),
)


def _disable(fn=None, recursive=True, wrapping=True, **options):
    return fn if fn is not None else (lambda function: function)


_ANSWERS = {
    "torch._dynamo": {"disable": _disable},
    "sympy": {"Basic": _NotSymbolic},
    SYMBOLIC_SHAPES: {guard.__name__: guard for guard in _GUARDS},
}

_PACKAGES = {"torch._dynamo", "sympy"}  # their __path__ is asked for to import a submodule: the real one's


class _StandIn(types.ModuleType):
    """A module holding _ANSWERS[its name] as attributes (read at the cost of any module's); for
    anything else, __getattr__ gives the real module's."""

    def __init__(self, name):
        super().__init__(name)
        vars(self).update(_ANSWERS[name])

    def __getattr__(self, name):
        # What the module holds (its names, __all__ for `import *`, a package's __path__ for its
        # submodules) is the real module's. Other dunders are probes (the import system's, inspect's,
        # copy's) that a module without them answers with AttributeError, as a stand-in does until
        # it is restored; after that, whoever still holds it reads the real module for anything.
        holds = not name.startswith("__") or name == "__all__" or (name == "__path__" and self.__name__ in _PACKAGES)
        if not holds and sys.modules.get(self.__name__) is self:
            raise AttributeError(name)
        return getattr(_real(self.__name__), name)


def _real(name):
    """The real module `name`, after every stand-in has given its place back."""
    restore()
    return importlib.import_module(name)


def restore(*names):
    """Put these stand-ins' modules (every one's, without names) back to loading for real on
    their next import."""
    for name in names or _ANSWERS:
        stand_in = sys.modules.get(name)
        if isinstance(stand_in, _StandIn):
            for answer in _ANSWERS[name]:  # whoever still holds the stand-in now reads the real module
                vars(stand_in).pop(answer, None)
            sys.modules.pop(name, None)
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
