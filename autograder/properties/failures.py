"""How a property says it failed: a message code plus the values the feedback needs.

The code and its parameters (not a finished sentence) travel to the outcome, so feedback can be
rendered in Spanish or English, now or later from the store, from the same raw outcome.
"""
import copy

import numpy as np

_current_example = {}
_current_call = {}
_exchanges = []  # (module, calls, replies) of every harness.Remote.runs of the example under test


def example(**dims):
    """Record the example under test; a failure raised while it runs reports it.

    Hypothesis replays the minimal failing example last, so the failure that reaches the
    outcome carries the smallest example found.
    """
    _current_example.clear()
    _current_example.update({k: _plain(v) for k, v in dims.items()})
    _current_call.clear()
    _exchanges.clear()


def example_dims(**dims):
    """Show these dims as the example instead of the drawn ones (a failure about a call on
    another module of the example, of another block_size, say), keeping what the example
    exchanged for its diagnosis."""
    _current_example.clear()
    _current_example.update({k: _plain(v) for k, v in dims.items()})


def exchanged(module, calls, replies):
    """Remember what a module was asked and answered in this example: a failure raised later in the
    example is diagnosed from it (diagnosis.on_failure). References only: nothing is computed."""
    _exchanges.append((module, calls, replies))


def calling(description):
    """Record the call to the worker that a failure raised now is about (see harness.Remote): its
    plain-data description, or a function that makes it (called only if a failure asks: most
    calls never fail); None when no call of this example is at fault."""
    _current_call.clear()
    if description is not None:
        _current_call["call"] = description


def call_at_fault():
    """The description calling() recorded last (to record it again after other calls), or None."""
    return _current_call.get("call")


def second_opinion(judge):
    """judge(): a verdict that builds a fresh module and calls it (did the same call fail there
    too?), run without touching the example under test: a build records the example it is built
    for, which once dropped what the failing example had added (a second length, the call at
    fault) and the exchanges the diagnosis reads."""
    example_now, call_now, exchanges_now = dict(_current_example), dict(_current_call), list(_exchanges)
    try:
        return judge()
    finally:
        _current_example.clear()
        _current_example.update(example_now)
        _current_call.clear()
        _current_call.update(call_now)
        _exchanges[:] = exchanges_now


def current_example():
    """The example under test now (a copy), with the call at fault under "call" when there is one."""
    found = dict(_current_example)
    call = _current_call.get("call")
    if callable(call):
        call = _current_call["call"] = call()
    if call:
        found["call"] = copy.deepcopy(call)
    return found


def _plain(value):
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)  # 'nan', 'inf': valid JSON in the store, and equal to itself when regraded
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class PropertyFailure(AssertionError):
    def __init__(self, code, **params):
        super().__init__(code)
        self.code = code
        self.params = {k: _plain(v) for k, v in params.items()}
        self.example = current_example()
        # the catalog misconception that explains a failure on values, if exactly one does (diagnosis.py)
        self.diagnosis: str | None = _diagnosed(code)


def _diagnosed(code):
    from . import diagnosis  # numpy only; the catalog loads at the first failure it diagnoses

    return diagnosis.on_failure(code, list(_exchanges))


def diagnose_again(failure):
    """Diagnose a failure once more, from every call of its example so far: for a property that
    makes further calls after a failure (to tell whose mistake it is) and then raises it."""
    failure.diagnosis = _diagnosed(failure.code)


def require(condition, code, **params):
    if not condition:
        raise PropertyFailure(code, **params)


def as_array(value, shape, what):
    """Validate one returned array before any arithmetic on it."""
    if not isinstance(value, np.ndarray):
        raise PropertyFailure("not_a_tensor", what=what)
    require(list(value.shape) == list(shape), "shape_mismatch", what=what,
            expected=list(shape), got=list(value.shape))
    require(value.dtype.kind == "f", "dtype_mismatch", what=what, got=value.dtype.name)
    return value.astype(np.float64)


def _far(actual, expected, atol, rtol):
    """Where two arrays differ beyond the tolerance (NaN only matches NaN)."""
    with np.errstate(invalid="ignore"):
        return ~np.isclose(actual, expected, atol=atol, rtol=rtol, equal_nan=True)


def close(actual, expected, atol=1e-5, rtol=1e-4):
    """Whether expect_close would pass: to choose which failure to report before reporting it."""
    return not _far(actual, expected, atol, rtol).any()


def expect_close(actual, expected, code, atol=1e-5, rtol=1e-4, **params):
    """Fail with the worst entry when two arrays differ beyond the tolerance."""
    bad = _far(actual, expected, atol, rtol)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise PropertyFailure(
            code, index=list(index), got=float(actual[index]), expected=float(expected[index]),
            max_error=float(np.nanmax(np.abs(actual - expected))) if np.isfinite(actual).all() else None,
            **params,
        )
