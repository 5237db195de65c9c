"""Drive a module that lives in the worker: build it with chosen parameters, run it, read it back.

The grader chooses every input and every parameter value itself (from a seed hypothesis drew),
so the reference it computes describes exactly the module the worker ran.
"""
import contextlib
import functools
import math
import weakref

import numpy as np

from ..exercise import EXERCISE
from ..worker import parameters
from ..worker.client import MAX_REQUESTS
from ..worker.submission_errors import SubmissionError, SubmissionHalted
from .failures import PropertyFailure, as_array, call_at_fault, calling, exchanged

# Parameters the grader will draw float64 values for, summed over a module: far above any
# module of the exercise, and a bound on what a forged build reply can make the grader allocate.
MAX_PARAMETER_ELEMENTS = 1 << 22

# The contract's layers, per class (exercise.yml): what the reference reads (a missing bias counts as zero).
CONTRACT_LAYERS = {c.name: c.layers for c in EXERCISE.classes}
# How the worker builds each class: from one config object ({"class", "fields"}), or None: from keywords.
BUILD_CONFIG = {c.name: {"class": c.config_class, "fields": c.config_fields} if c.config_class else None
                for c in EXERCISE.classes}


class Reply:
    def __init__(self, raw, call=None):
        """call: the request's description for failures (a dict, or a function making it: calling)."""
        self.outputs = raw.get("outputs", [])
        self.grads = raw.get("grads", {})
        self.traced = raw.get("traced", {})  # torch.nn.functional name -> calls, for those the call asked to trace
        self.input_grads = raw.get("input_grads", {})  # the gradients of the inputs named in input_grads
        self.modified = raw.get("modified", [])  # the inputs the call changed in place, named the same way
        self.requires_grad_changed = raw.get("requires_grad_changed", [])  # ...or marked to require gradients
        self.rebound = raw.get("rebound", [])  # ...or gave other memory or strides (x.data = ...)
        self.buffers_changed = raw.get("buffers_changed", [])  # the masks (boolean buffers) the call changed
        self.earlier_outputs_changed = raw.get("earlier_outputs_changed", 0)  # calls back whose outputs were written
        self.settings_changed = raw.get("settings_changed", [])  # torch's global settings the call changed
        self.call = call

    def shape(self, index):
        """Output `index`'s shape, also for an output on the meta device (a shape, no values); None
        when there is no such output."""
        if index >= len(self.outputs):
            return None
        value = self.outputs[index]
        return list(value["meta_shape"]) if isinstance(value, dict) else list(value.shape)

    def values(self, index):
        """Output `index` as float64 for arithmetic that judges something else (its form is the
        business of the property that reads it through output()): None when it is missing, on the
        meta device or not of a floating dtype (bool outputs would break numpy's subtraction)."""
        value = self.outputs[index] if index < len(self.outputs) else None
        return value.astype(np.float64) if isinstance(value, np.ndarray) and value.dtype.kind == "f" else None

    def output(self, index, shape, what):
        """One output, checked; a failure from now on is about this reply's call (the last one read)."""
        calling(self.call)
        if index >= len(self.outputs):
            raise PropertyFailure("missing_output", what=what, count=len(self.outputs))
        return as_array(self.outputs[index], shape, what)


class Remote:
    """A module built inside the worker, lazily: the build request goes out with the module's
    first other request (worker.calls), so building and first use cost one exchange.

    With load_seed, the worker loads the parameters the grader chose for the contract layers
    while it builds the module (worker/parameters.py draws them from default_rng(load_seed)); the
    grader draws the same values into `params` (float64, for its reference). A bias present or
    missing against the contract is parameter_count's business: the reference uses whichever the
    module has. Parameters outside the contract's layers (say a mask stored as a Parameter) keep
    the submission's own values, so that the other checks still judge the student's module
    rather than one filled with noise. load_scale (parameters.draw's scale) multiplies some rows of
    one layer after the same draws: the keys alone, say. A contract layer missing from the module
    fails the build (missing_parameters), unless `required` leaves it out: then the others are
    loaded and `missing_layers` names it. then_set ({"submodule.attribute": value}) is set once the
    module is built and loaded: a dropout's p changed after building, say. positional: the names
    of kwargs passed by position, in that order (the statement's signature, as users call it).
    unseeded: built without seeding the generators first, from whatever the requests before left.
    defaulted: config fields left out of the config object, so that they take the submission's
    own config class's defaults (a class without a default for one is not used: the grader's
    dataclass gives the statement's).

    Every failure raised while a request is out carries a description of the call at fault
    (failures.calling): the request the worker failed on, else the last build or call sent, or the
    last reply read.
    """

    def __init__(self, worker, cls, load_seed=None, load_scale=None, required=None, layer_shapes=None, then_set=None,
                 positional=(), unseeded=False, defaulted=(), **kwargs):
        self.worker, self.cls = worker, cls
        self._arguments = dict(load_seed=load_seed, load_scale=load_scale, required=required, layer_shapes=layer_shapes,
                               then_set=then_set, positional=positional, unseeded=unseeded, defaulted=defaulted, **kwargs)
        self.layer_shapes = layer_shapes or {}  # contract layer -> its weight's shape, as the statement asks
        self.kwargs = kwargs  # the constructor's arguments (heads, dropout...): diagnosis.py recomputes with them
        self.layers = CONTRACT_LAYERS[cls]
        self.required = self.layers if required is None else required
        self.load_seed, self.load_scale = load_seed, load_scale
        load = None if load_seed is None else {"seed": load_seed, "layers": list(self.layers)}
        if load_scale is not None:
            parameters.scaled_rows(load_scale, self.layers)  # a bad option is the grader's bug: raise it here
            load["scale"] = load_scale
        self.handle = str(next(worker.handles))  # the grader names the modules: a request can follow a build unanswered
        weakref.finalize(self, worker.released.append, self.handle)  # gone here: the worker lets go of it too
        by_name = {k: v for k, v in kwargs.items() if k not in positional}
        config = BUILD_CONFIG[cls] and {**BUILD_CONFIG[cls], **({"defaulted": list(defaulted)} if defaulted else {})}
        self._pending_build = ("build", {"cls": cls, "kwargs": by_name, "handle": self.handle, "load": load,
                                         "layers": list(self.layers),
                                         "config": config, **({"then_set": then_set} if then_set else {}),
                                         **({"args": [kwargs[k] for k in positional]} if positional else {}),
                                         **({"seed": None} if unseeded else {})})
        self._description = None
        self._mask_changed = None  # the first reply whose call changed a mask of the module (buffers_changed)

    def twin(self):
        """Another module built as this one was (the same arguments and parameters), with no call
        made on it yet: what a call gives when nothing came before it."""
        return Remote(self.worker, self.cls, **self._arguments)

    def build(self):
        """Build now, if not done yet (say, a test that expects the constructor itself to fail)."""
        if self._pending_build:
            self._send()
        return self

    def _send(self, *requests):
        """Send requests, after the build if it is still pending; return their answers, in order,
        raising the build's failure first, then the contract's, then each request's own."""
        pending = [self._pending_build] if self._pending_build else []
        sent = [*pending, *requests]
        try:
            answers = self.worker.calls(self.cls, sent)
        except SubmissionHalted as halted:
            if halted.error.request is None:  # the worker answered none of them: no call is at fault
                calling(None)
            else:
                self._at(sent[halted.error.request])
            raise
        if pending:
            self._at(sent[0])
            self._built(_answer(answers.pop(0)))
        results = []
        for request, answer in zip(requests, answers):
            self._at(request)
            results.append(_answer(answer))
        return results

    def _at(self, request):
        """Make `request` the call a failure is about, if it is a build or a call."""
        if request[0] in ("build", "call"):
            calling(self._description_of(request))

    def _description_of(self, request):
        """describe_call of a request, made only when a failure needs it."""
        return functools.partial(describe_call, self.cls, *request)

    def _built(self, info):
        """Take the build's reply (its form checked by worker/protocol.py): the parameters' total
        size is bounded before anything is drawn for them."""
        self._pending_build = None
        self.settings_changed = info.get("settings_changed", [])  # torch's global settings the build changed
        self.config_not_kept = info.get("config_not_kept", [])  # fields the submission's config class dropped
        params = info["params"]
        count = sum(math.prod(shape) for shape in params.values())
        if count > MAX_PARAMETER_ELEMENTS:
            raise PropertyFailure("too_many_parameters", count=count, limit=MAX_PARAMETER_ELEMENTS)
        self._param_shapes = shapes = {k: tuple(v) for k, v in params.items()}
        if self.load_seed is not None:
            missing = [f"{layer}.weight" for layer in self.required if f"{layer}.weight" not in shapes]
            shared = info.get("shared", {})
            if any(name in shared for name in missing):  # the layer is there, with another's weights
                raise PropertyFailure("shared_parameters", names=[n.split(".")[0] for n in missing if n in shared],
                                      others=[shared[n].split(".")[0] for n in missing if n in shared])
            if missing:
                raise PropertyFailure("missing_parameters", names=missing, found=sorted(shapes))
            self._missing_layers = [layer for layer in self.layers if f"{layer}.weight" not in shapes]
            self._check_layer_shapes(shapes)
            chosen = parameters.draw(np.random.default_rng(self.load_seed), shapes, self.layers, self.load_scale)
            self._params = {k: v.astype(np.float64) for k, v in chosen.items()}

    def _check_layer_shapes(self, shapes):
        """The grader's reference multiplies by the contract layers' parameters: of another shape
        (an nn.Linear declared the other way round, say), they fit no reference, and loading them
        is the first thing that fails."""
        for layer, weight in self.layer_shapes.items():
            for name, expected in ((f"{layer}.weight", tuple(weight)), (f"{layer}.bias", tuple(weight[:1]))):
                if name in shapes and shapes[name] != expected:
                    transposed = tuple(reversed(shapes[name])) == expected
                    raise PropertyFailure("layer_shape" if transposed else "layer_size", name=name,
                                          expected=list(expected), got=list(shapes[name]))

    @property
    def param_shapes(self):
        return self.build()._param_shapes

    @property
    def params(self):
        """The contract layers' parameters as loaded (float64): only for a module built with load_seed."""
        return self.build()._params

    def reloading(self, seed, unbiased=()):
        """(the call option `reload` that gives the module new values for its contract layers
        first, drawn from seed; those values in float64, for the reference): the same module after
        an optimizer step, say, written through .data (`p.data -= lr * p.grad`, which `_version`
        does not count); with {**reload, "step": True}, written as optimizer.step() writes them
        (which it counts). unbiased: layers whose biases are zero (parameters.draw). Only for a
        module built with load_seed, without load_scale."""
        chosen = parameters.draw(np.random.default_rng(seed), self.param_shapes, self.layers, unbiased=unbiased)
        option = {"seed": seed, "layers": list(self.layers), **({"unbiased": list(unbiased)} if unbiased else {})}
        return option, {k: v.astype(np.float64) for k, v in chosen.items()}

    @property
    def missing_layers(self):
        """The contract layers the module lacks (only for a module built with load_seed)."""
        return self.build()._missing_layers

    def _describe(self, key):
        if self._description is None:
            self._description, = self._send(("describe", {"handle": self.handle}))
        return self._description[key]

    @property
    def buffers(self):
        return self._describe("buffers")

    @property
    def state_dict(self):
        return self._describe("state_dict")

    @property
    def linear_bias(self):
        return self._describe("linear_bias")

    @property
    def dropout_p(self):
        """Each nn.Dropout layer of the module (by its dotted name) and its p."""
        return self._describe("dropout_p")

    def run(self, *args, **options):
        reply, = self.runs((args, options))
        return reply

    def runs(self, *calls):
        """Several run(*args, **options) calls, given as (args, options) pairs, sent in one exchange
        with the worker (one round trip instead of one each); their Replies, in order. A failure
        is raised as run would raise it, the first failing call's first.

        A call the module raised on with a mask of another dtype than bool is sent again with that
        mask as bool (mask != 0), outside mask_forms_judged: a module that cannot take a float or
        integer mask loses masked_zero, which names that, and every other property judges it on
        masks it can take (a float mask once cost shapes, gradients, reference_match... with their
        unrelated hints). When the bool masks fail too, the first failure is raised as it was."""
        try:
            return self._runs(calls)
        except SubmissionError as error:
            as_bool = None if _MASK_FORMS_JUDGED or not error.raised else self._restored(_with_bool_masks(calls))
            if as_bool is None:
                raise
            at_fault = call_at_fault()
            try:
                return self._runs(as_bool)
            except SubmissionError:
                calling(at_fault)  # the example shows the call that failed first, with its mask as sent
                raise error from None

    def runs_in_exchanges(self, calls):
        """runs(*calls) for more calls than one exchange takes (client.MAX_REQUESTS, a pending
        build among them): sent in as many exchanges as they need; their Replies, in order."""
        size = MAX_REQUESTS - 1
        return [reply for start in range(0, len(calls), size) for reply in self.runs(*calls[start:start + size])]

    def _restored(self, calls):
        """calls sent again after the worker ran them all once: where one gave the module new
        parameters (`reload`), the first starts from the loaded ones again; None when that cannot be."""
        if calls is None or not any("reload" in options for _, options in calls):
            return calls
        if self.load_seed is None or self.load_scale is not None or "reload" in calls[0][1]:
            return None
        (args, options), *rest = calls
        return [(args, {**options, "reload": {"seed": self.load_seed, "layers": list(self.layers)}}), *rest]

    def _runs(self, calls):
        requests = [("call", _call(self.handle, *args, **options)) for args, options in calls]
        replies = [Reply(raw, self._description_of(request)) for raw, request in zip(self._send(*requests), requests)]
        exchanged(self, calls, replies)
        for reply in replies:  # a mask a call changed is another mask for every later call on the module
            if self._mask_changed is not None:
                calling(self._mask_changed.call)
                raise PropertyFailure("mask_changed_by_call", names=self._mask_changed.buffers_changed)
            if reply.buffers_changed:
                self._mask_changed = reply
        return replies

    @property
    def parameter_count(self):
        return int(sum(np.prod(s, dtype=np.int64) for s in self.param_shapes.values()))


def _call(handle, *args, method="forward", train=False, seed=0, grad=False, trace=(),
          device="cpu", noncontiguous=False, upstream=None, input_grads=(), reload=None, rolled=(),
          in_place=False, perturb=None, backward_from=0, moved_for_good=False, inference=False, float64=False,
          copied=False, **kwargs):
    """A call request: run `method` of module `handle` with these inputs and switches.

    noncontiguous: the worker passes every array as a non-contiguous tensor with the same values.
    upstream (with grad): the gradient of output 0 to run backward from (float32, output 0's
    shape); input_grads: the inputs ("0", "1"... for positional ones, else their names) whose
    gradients the reply also carries; trace: the torch.nn.functional functions (of exercise.yml's
    `traced`) whose calls the reply counts; rolled: those whose result the module gets rolled by one entry (child._tracing) instead of their
    result; reload: Remote.reloading's option; in_place (without grad): the worker writes the
    arrays into the tensors the module's previous call got, where their shapes match; perturb
    ({"seed", "step"}): the call runs with the parameters moved by step along
    parameters.direction(seed), then put back; backward_from (with grad): the output backward runs
    from (1: the weights a forward returns); moved_for_good (with a device): the module itself
    moves there for good, not a copy; inference (without grad): the call runs under
    torch.inference_mode(); float64: on a copy of the module in double (send float64 inputs);
    copied: on copy.deepcopy of the module, to which `reload` then gives new parameters alone."""
    unknown = (set(trace) | set(rolled)) - set(EXERCISE.traced)
    if unknown:
        raise ValueError(f"exercise.yml's traced does not declare {sorted(unknown)}")
    if copied and perturb is not None:
        raise ValueError("perturb moves the module's own parameters, not a copy's")
    return {"handle": handle, "method": method, "args": list(args), "kwargs": kwargs, "train": train,
            "seed": seed, "grad": grad, "trace": list(trace), "device": device,
            "noncontiguous": noncontiguous, "upstream": upstream, "input_grads": list(input_grads),
            "reload": reload, "rolled": list(rolled), "in_place": in_place, "perturb": perturb,
            "backward_from": backward_from, "moved_for_good": moved_for_good, "inference": inference,
            "float64": float64, "copied": copied}


def params_in_turn(module, calls, current=None):
    """(the parameters each of calls, (args, options) pairs on `module`, ran with, in float64; the
    module's parameters after them): its own (`current`, where earlier calls gave it others), or
    those a call's `reload` option loaded first (Remote.reloading), which later calls keep; but a
    call on a copy (`copied`) gives its new parameters to the copy alone."""
    current = module.params if current is None else current
    taken = []
    for _, options in calls:
        reload = options.get("reload")
        params = current if reload is None else module.reloading(reload["seed"])[1]
        if not options.get("copied"):
            current = params
        taken.append(params)
    return taken, current


def copy_calls(args, reload):
    """The last two calls of reference_match: on copy.deepcopy of the module, given new parameters
    (`reload`, Remote.reloading's) alone, then on the module itself again, which keeps its own.
    A copy computes with its own layers (nn.TransformerEncoder clones its layers so, then trains
    each on its own): not with the original's, through a lambda kept in self that reaches them, nor
    may the copy's new values reach the original."""
    return [(args, {"copied": True, "reload": reload}), (args, {})]


# Names of the contract methods' positional arguments, for describing a call ("x", "mask" otherwise).
ARGUMENT_NAMES = {
    ("MultiHeadAttention", "forward"): ("query", "key", "value", "mask"),
    ("MultiHeadAttention", "split_heads"): ("x", "batch_size"),
}
def argument_names(cls, method):
    """The names of a contract method's positional arguments (ARGUMENT_NAMES; x and mask otherwise)."""
    return ARGUMENT_NAMES.get((cls, method), ("x", "mask"))


# Switches of a call that are the grader's instruments, not something the submission was asked.
INTERNAL_SWITCHES = ("handle", "method", "args", "kwargs", "trace", "rolled")
# A call's seed is torch's (dropout's), not the example's input seed: named as the student knows it.
SWITCH_NAMES = {"seed": "manual_seed"}
# Switches whose value only the grader reads: the example says that they were set, not to what.
SET_SWITCHES = {"reload": "new_parameters", "perturb": "parameters_moved"}


def describe_call(cls, op, args):
    """A build or call request as a failure's example shows it: plain JSON, language-neutral and
    the same on every run. The method; each array argument's shape (with its dtype where it is not
    float32, and always for a mask), or the earlier argument it is (`value_is: "key"`); other
    arguments and switches only when set (not None, False, 0, empty or "cpu"), but a keyword
    argument of the method always (mask=None). None for the other
    requests (describe, probe)."""
    if op == "build":  # arguments by position shown as values, before the keywords
        by_position = [repr(_plain_value(v)) for v in args.get("args", ())]
        keywords = {k: _plain_value(v) for k, v in args["kwargs"].items() if not _unset(v)}
        if args.get("config"):  # one config object, as the statement builds it: Cfg(64, 8)
            inner = ", ".join([*by_position, *(f"{k}={v!r}" for k, v in keywords.items())])
            return {"method": "__init__", "args": f"{args['config']['class']}({inner})"}
        return {"method": "__init__", **({"args": ", ".join(by_position)} if by_position else {}), **keywords}
    if op != "call":
        return None
    names = argument_names(cls, args["method"])
    named = [(names[i] if i < len(names) else f"arg{i}", value) for i, value in enumerate(args["args"])]
    named += list(args["kwargs"].items())
    keywords = set(args["kwargs"])  # passed by name even when None: forward(x, mask=None) can raise on the name
    named += [(SET_SWITCHES[key], True) if key in SET_SWITCHES and value is not None else (SWITCH_NAMES.get(key, key), value)
              for key, value in args.items() if key not in INTERNAL_SWITCHES]
    described, arrays = {"method": args["method"]}, []
    for name, value in named:
        if isinstance(value, np.ndarray):
            same = next((earlier for earlier, array in arrays if array.shape == value.shape
                         and array.dtype == value.dtype and np.array_equal(array, value)), None)
            arrays.append((name, value))
            if same is not None:  # the worker passes arrays sent equal as one tensor: mha(x, x, x)
                described[f"{name}_is"] = same
                continue
            described[name] = list(value.shape)
            if name == "mask" or value.dtype != np.float32:
                described[f"{name}_dtype"] = value.dtype.name
        elif not _unset(value) or (value is None and name in keywords):
            described[name] = _plain_value(value)
    return described


def _unset(value):
    return (value is None or value is False or (type(value) in (int, float) and value == 0) or value == "cpu"
            or (type(value) in (list, tuple) and not value))


def _plain_value(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain_value(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)


_MASK_FORMS_JUDGED = []  # non-empty inside mask_forms_judged()


@contextlib.contextmanager
def mask_forms_judged():
    """Within: a call with a mask the module cannot take fails as it is (Remote.runs does not
    retry it with a bool mask): for the property that judges the mask forms themselves."""
    _MASK_FORMS_JUDGED.append(True)
    try:
        yield
    finally:
        _MASK_FORMS_JUDGED.pop()


def _with_bool_masks(calls):
    """calls with each mask of another dtype than bool as bool (mask != 0); None if none has one."""
    def as_bool(options):
        mask = options.get("mask")
        return {**options, "mask": mask != 0} if isinstance(mask, np.ndarray) and mask.dtype != bool else options

    changed = [(args, as_bool(options)) for args, options in calls]
    return changed if any(new is not old for (_, new), (_, old) in zip(changed, calls)) else None


def _answer(answer):
    if isinstance(answer, SubmissionError):
        raise answer
    return answer


def gaussian(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# The masks the statement allows: torch.bool, torch.long or torch.float32, holding 0 and 1.
MASK_DTYPES = ("bool", "int64", "float32")

# Magnitudes of the inputs reference_match compares at: scores from ~1e-4 to ~1e3 (float32's
# rounding, which grows with them, is allowed for: reference.*_bounded).
INPUT_SCALES = (0.01, 1.0, 30.0)

# Sequence lengths beyond what the shape strategies draw, for one call of reference_match: a module
# right only on short sequences (a softmax computed in blocks of 8 positions, queries taken in
# chunks of 64 with the mask's first rows for every chunk, say) is wrong: above 64, the chunk a
# memory-minded student picks most. At most 112: MultiHeadAttention's weights, 4 heads of 112 x 112
# (B=1), stay well under wire.MAX_FRAME_BYTES.
LONG_TIMES = (65, 112)


# A batch size beyond what the shape strategies draw, for one call of reference_match.
WIDE_BATCH = (5, 8)

# Sizes between those the strategies draw and the long call's, together, for one call of
# reference_match: a batch of more than one example of 7 to 40 positions (the strategies draw T <= 6
# with B <= 3, and the long call has B = 1): a mistake gated on both shows there.
MID_BATCH, MID_TIMES = (2, 3), (7, 40)


def mid_dims(rng, dims, *times):
    """dims with a batch of MID_BATCH and each of `times` ("T", or "Tq" and "Tk") of MID_TIMES,
    drawn from the example's rng after its other draws (which it keeps)."""
    return {**dims, "B": int(rng.integers(MID_BATCH[0], MID_BATCH[1] + 1)),
            **{name: int(rng.integers(MID_TIMES[0], MID_TIMES[1] + 1)) for name in times}}


def long_time(rng):
    """A length of LONG_TIMES, drawn from the example's rng after its other draws (which it keeps)."""
    return int(rng.integers(LONG_TIMES[0], LONG_TIMES[1] + 1))


def random_mask(rng, *shape, dtype="float32"):
    """A 0/1 mask (of one of MASK_DTYPES) that leaves every row one position open at least (the one
    of its smallest draw: any column, the first one closed as often as the others), so that no row
    is fully masked."""
    draws = rng.random(shape)
    mask = draws < 0.6
    np.put_along_axis(mask, draws.argmin(axis=-1)[..., None], True, axis=-1)
    return mask.astype(dtype)


# The keys a left-padded batch closes at the start of a row in the longest calls: more than a block
# of 32 keys (an online softmax that starts from its first block's maximum meets -inf - -inf there).
LEFT_PADDING = 40


def left_padded(mask):
    """A copy of mask whose odd rows close their first LEFT_PADDING keys (a left-padded example), the
    last key left open so that no row is fully masked."""
    padded = mask.copy()
    padded[..., 1::2, :LEFT_PADDING] = 0
    padded[..., 1::2, -1] = 1
    return padded


def closing_one(mask):
    """A copy of mask with one closed position at least (row 0's last; its first opened instead,
    two keys at least): a call this short still tries the mask, and no row is fully masked."""
    closing = mask.copy()
    closing[0, 0, -1], closing[0, 0, 0] = 0, 1
    return closing


def other_mask(mask):
    """A second mask of mask's shape and dtype that differs from it wherever it can: its
    complement, but for each row's first open position, which stays open in both (no row is
    fully masked)."""
    other = 1 - mask
    np.put_along_axis(other, (mask != 0).argmax(axis=-1)[..., None], 1, axis=-1)
    return other


def masks_in_turn(rng, shapes, turn):
    """One random_mask per shape, the dtypes of MASK_DTYPES taking turns along the shapes from
    position `turn`: each example meets every shape and every dtype in one call per shape, and
    the three turns (drawn per example: strategies.mask_turns) pair every shape with every dtype."""
    return [random_mask(rng, *shape, dtype=MASK_DTYPES[(turn + i) % len(MASK_DTYPES)])
            for i, shape in enumerate(shapes)]


# The modes large_inputs' masked calls take in turn: eval, autograd on (backward after it, as in
# training), train() (dropout 0: nothing is drawn), torch.inference_mode() (a validation pass): a
# fill chosen by any of them (-1e4 in training only, say) must keep masked weights at 0 as well.
LARGE_INPUT_MODES = ({}, {"grad": True}, {"train": True}, {"inference": True})


def large_input_mode(i, turn):
    """The mode of large_inputs' i-th masked call in an example of this mask turn: over the
    examples, every mode with every mask dtype."""
    return LARGE_INPUT_MODES[(i + turn) % len(LARGE_INPUT_MODES)]


def last_rows(upstream, share=8):
    """upstream (B, T, ...) with every row zero but the last T // share: a loss on those alone,
    whose gradient a backward wrong only past a block of rows (the first 128 or 512) is all of,
    instead of a few percent that float32's tolerance takes in."""
    kept = upstream.copy()
    kept[:, :upstream.shape[1] - max(1, upstream.shape[1] // share)] = 0.0
    return kept


def first_rows_one_key(mask, rows=8):
    """A copy of mask whose first `rows` query rows each open one key (row r, key r), as a causal
    mask's first rows do: a row with hundreds of open keys always has one score above a finite
    fill such as -1e4, while a row with one open key has it below half the time at large scales."""
    narrowed = mask.copy()
    for row in range(min(rows, mask.shape[-2])):
        narrowed[..., row, :] = 0
        narrowed[..., row, row % mask.shape[-1]] = 1
    return narrowed


def masks_of_every_dtype(rng, shapes, turn):
    """One mask of each MASK_DTYPES, on len(MASK_DTYPES) of the shapes starting at position
    len(MASK_DTYPES)·turn (wrapping): over the turns, every shape; in every example, every dtype."""
    count = len(MASK_DTYPES)
    chosen = [shapes[(count * turn + i) % len(shapes)] for i in range(count)]
    return masks_in_turn(rng, chosen, turn)


def edge_batches_then_no_mask(rng, calls, masks, batch_of, mask_shape, turn):
    """masked_zero's calls and masks with three more: a 2-D mask (mask_shape, the same for every
    example) on a batch as long as its rows (batch_of(rows): the inputs of a batch of that size),
    which a module that tells masks apart by their first axis reads as a (B, Tk) padding mask;
    another on a single example (B = 1), where a module with a path of its own for one example
    (the batch squeezed away, the mask indexed as if it had one: mask[0]) reads another mask; then
    calls[0] again, without a mask, after the masked calls (a mask kept from one of them closes
    positions)."""
    dtype = MASK_DTYPES[turn % len(MASK_DTYPES)]
    square = (batch_of(mask_shape[0]), {"mask": random_mask(rng, *mask_shape, dtype=dtype)})
    single = (batch_of(1), {"mask": random_mask(rng, *mask_shape, dtype=dtype)})
    return [*calls, square, single, calls[0]], [*masks, square[1]["mask"], single[1]["mask"], None]


# gradients' calls hold at least this many query rows (B·rows per example): enough that dropout
# cannot silence every path of a correct module; batch_independence grows a batch to the same size.
GRADIENT_ROWS = 64


def gradient_batch(batch, rows_per_example):
    """The batch size of gradients' calls: `batch`, or more where it holds fewer than GRADIENT_ROWS rows."""
    return max(batch, -(-GRADIENT_ROWS // rows_per_example))


def one_row(shape, row, rng):
    """An upstream gradient (float32) that is zero except on query row `row` (axis -2)."""
    upstream = np.zeros(shape, np.float32)
    upstream[..., row, :] = rng.standard_normal(upstream[..., row, :].shape)
    return upstream


def runs_until_failure(module, *calls):
    """module.runs(*calls) as (replies, None); when one call raised (the submission's exception,
    an input-dependent failure), (None, (its index among calls, the SubmissionError)) instead, so
    that a property can say which of its calls the submission could not take. Failures that no
    input avoids (a timeout, a crash) and the build's own are raised as usual."""
    offset = 1 if module._pending_build else 0
    try:
        return module.runs(*calls), None
    except SubmissionError as error:
        index = getattr(error, "request", None)
        if not error.raised or index is None or index < offset:
            raise
        return None, (index - offset, error)


def unless_autograd_is_off(run, calls):
    """(run(calls), calls), or, where the submission turned autograd off for good (a build that
    calls torch.set_grad_enabled(False): `gradients`' to name), (run(calls without "grad"), those
    calls): for a property that asks for autograd only to vary how its calls run."""
    try:
        return run(calls), calls
    except SubmissionError as error:
        if error.kind != "grad_disabled":
            raise
    calls = [(args, {key: value for key, value in options.items() if key != "grad"}) for args, options in calls]
    return run(calls), calls


def runs_skipping(module, calls, skippable, shapes=(), below=None):
    """module.runs(*calls) without the calls, among those whose index is in `skippable`, that the
    submission raised on or answered with outputs of other shapes than `shapes` (a mask form it
    cannot take is masked_zero's business, not a second loss where only magnitude is judged):
    (the replies, the indices of the calls they answer). below(call): that call at a magnitude of
    ~1; a call is left out only where it fails there too (a module that refuses large inputs alone,
    or answers them with other shapes, is judged on them); where every one of them is left out,
    the module takes none of them (no mask at all, say), and the first raise is raised. Costs an
    exchange more only after such a failure; a raise on another call is raised."""
    kept, first = list(range(len(calls))), None
    while True:
        replies, failed = runs_until_failure(module, *(calls[i] for i in kept))
        if failed is None:
            break
        index, error = failed
        if kept[index] not in skippable or (below and _answers(module, below(calls[kept[index]]), shapes)):
            raise error
        first = first or error
        del kept[index]
        if first is not None and not set(kept).intersection(skippable):  # not one of them taken: raised
            raise first
    fitting = [(i, reply) for i, reply in zip(kept, replies)
               if i not in skippable or all(reply.shape(j) == list(shape) for j, shape in enumerate(shapes))
               or (below and _answers(module, below(calls[i]), shapes))]
    return [reply for _, reply in fitting], [i for i, _ in fitting]


def _answers(module, call, shapes):
    """Whether the module answers `call` without raising, with outputs of `shapes`."""
    args, options = call
    try:
        reply = module.run(*args, **options)
    except SubmissionError as error:
        if not error.raised:
            raise
        return False
    return all(reply.shape(j) == list(shape) for j, shape in enumerate(shapes))


def call_failure(error, code, message=None, **params):
    """PropertyFailure `code` about a call the submission raised on (a SubmissionError), naming its
    exception, message (or `message`) and line (and cell, in a notebook)."""
    where = {"line": error.line, **({"cell": error.cell} if error.cell is not None else {}),
             **({"function": error.function} if error.function is not None else {})}
    return PropertyFailure(code, error=error.message if message is None else message, exc_type=error.exc_type,
                           **where, **params)


def also_at(check=None, **arguments):
    """Run the test's body (or `check`, a function of the worker and these arguments: one that
    makes fewer and shorter calls than the body, where its calls at these sizes would outgrow the
    wire's frames) once more with these arguments, sizes of real models far above what the
    strategies draw to stay fast, after its generated examples pass (suite_runner): a mistake
    written only for wide layers or many heads shows there. After, not first as hypothesis's
    explicit examples: a mistake at every size is still reported on the smallest example found."""
    def tag(test):
        test.also_at = [*getattr(test, "also_at", []), (check, arguments)]
        return test
    return tag


def graded(cls, prop):
    """Tag a test with the (class, property) whose points grading.yml assigns."""
    import pytest

    return pytest.mark.graded(cls=cls, prop=prop)
