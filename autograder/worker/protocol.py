"""What each of the worker's replies must look like, checked as it arrives in the grader.

child.py answers five operations. A submission can rewrite the worker in memory and send anything
in their place, so each reply is checked here, by operation, before any property reads it: types,
keys, and sizes bounded like the wire's. A reply that does not fit is a protocol failure of the
submission (submission_errors.SubmissionError "protocol"), never an exception inside the grader,
which would be reported as the grading machine's fault.

  ready     {"classes": [str]}                       after importing the submission
  build     {"params": {name: shape}}                the module's parameters; may add
             "config_not_kept": [str] (fields the submission's own config class took but did not keep),
             "shared": {name: name} (a contract layer's parameter missing from params because it is
             another's too, and the name it is listed under)
  build and call may add "settings_changed": [str] (torch's global settings the request changed,
             which the worker has put back: child.GlobalSettings; each lower-precision
             torch.autocast it entered: child.watch_autocast; torch.set_num_threads if it left the
             thread count changed: child.ThreadCount)
  describe  {"buffers": {name: {"shape": shape, "dtype": str, "persistent": bool,
             "values": array | None}}, "state_dict": [str], "linear_bias": {name: bool},
             "dropout_p": {name: float} (each nn.Dropout layer's p)}
  call      {"outputs": [array | {"meta_shape": shape}], "traced": {name: int} (calls of the
             torch.nn.functional functions the request named in `trace`),
             "grads": {name: array | None} (with grad=True),
             "input_grads": {name: array | None} (with input_grads=True),
             "modified": [str] (the inputs the call changed in place),
             "requires_grad_changed": [str] (the inputs whose requires_grad the call changed),
             "rebound": [str] (the inputs the call gave other memory or strides: `x.data = ...`),
             "buffers_changed": [str] (the boolean buffers, masks, whose values the call changed),
             "earlier_outputs_changed": int (how many calls back on the module a call whose returned
             tensor was written since was made: 1 the previous one; 0 none)}
  probe     {"cuda": bool}
"""
import numpy as np

from .wire import MAX_DIMENSIONS

# A bound on each size a reply declares (a parameter's, a meta-device output's): the grader
# multiplies such sizes (parameter_count, too_many_parameters) but never allocates them.
MAX_DECLARED_SIZE = 32 << 20


class MalformedReply(ValueError):
    """A reply that honest worker code never sends."""


def _require(condition):
    if not condition:
        raise MalformedReply


def _is_shape(value):
    return (isinstance(value, list) and len(value) <= MAX_DIMENSIONS
            and all(type(d) is int and 0 <= d <= MAX_DECLARED_SIZE for d in value))


def _names(mapping, value_check):
    _require(isinstance(mapping, dict) and all(isinstance(k, str) and value_check(v) for k, v in mapping.items()))


def _array_or_none(value):
    return value is None or isinstance(value, np.ndarray)


def _buffer(value):
    return (isinstance(value, dict) and _is_shape(value.get("shape")) and isinstance(value.get("dtype"), str)
            and type(value.get("persistent")) is bool and _array_or_none(value.get("values")))


def _output(value):
    return isinstance(value, np.ndarray) or (isinstance(value, dict) and set(value) == {"meta_shape"}
                                              and _is_shape(value["meta_shape"]))


def _ready(reply, request):
    _require(isinstance(reply.get("classes"), list) and all(isinstance(c, str) for c in reply["classes"]))


def _short_names(value):
    """A short list of short names (the inputs a call changed, the settings it changed)."""
    return (isinstance(value, list) and len(value) <= MAX_DIMENSIONS
            and all(isinstance(name, str) and len(name) <= 100 for name in value))


def _settings_changed(reply):
    if "settings_changed" in reply:
        _require(_short_names(reply["settings_changed"]))


def _build(reply, request):
    _names(reply.get("params"), _is_shape)
    if "config_not_kept" in reply:
        _require(_short_names(reply["config_not_kept"]))
    if "shared" in reply:
        _names(reply["shared"], lambda v: isinstance(v, str) and len(v) <= 100)
        _require(len(reply["shared"]) <= MAX_DIMENSIONS)
    _settings_changed(reply)


def _describe(reply, request):
    _names(reply.get("buffers"), _buffer)
    _require(isinstance(reply.get("state_dict"), list) and all(isinstance(k, str) for k in reply["state_dict"]))
    _names(reply.get("linear_bias"), lambda v: type(v) is bool)
    _names(reply.get("dropout_p"), lambda v: type(v) is float)


def _call(reply, request):
    _require(isinstance(reply.get("outputs"), list) and all(_output(o) for o in reply["outputs"]))
    _names(reply.get("traced"), lambda v: type(v) is int and v >= 0)
    if "grads" in reply:
        _names(reply["grads"], _array_or_none)
    if "input_grads" in reply:
        _names(reply["input_grads"], _array_or_none)
        for name, grad in reply["input_grads"].items():  # the gradient of an input has its shape
            _require(name in request.get("input_grads", ()) and (grad is None or grad.shape == _input_shape(request, name)))
    for names in ("modified", "requires_grad_changed", "rebound", "buffers_changed"):
        if names in reply:
            _require(_short_names(reply[names]))
    if "earlier_outputs_changed" in reply:
        _require(type(reply["earlier_outputs_changed"]) is int and 0 <= reply["earlier_outputs_changed"] <= 1 << 20)
    _settings_changed(reply)


def _input_shape(request, name):
    """The shape of the call's input `name`, named as child.op_call names them ("0", "1"... for
    positional ones, else the keyword), None if it has none."""
    named = {**{str(i): value for i, value in enumerate(request.get("args", []))}, **request.get("kwargs", {})}
    value = named.get(name)
    return value.shape if isinstance(value, np.ndarray) else None


def _probe(reply, request):
    _require(type(reply.get("cuda")) is bool)


CHECKS = {"ready": _ready, "build": _build, "describe": _describe, "call": _call, "probe": _probe}


def check(op, reply, request=None):
    """Raise MalformedReply unless `reply` (the "ok" part) fits operation `op` and the arguments of
    its `request` (a call's input_grads, say)."""
    _require(isinstance(reply, dict))
    CHECKS[op](reply, request or {})
