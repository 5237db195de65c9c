"""The worker: the only process that imports and runs the student's code.

It is started by autograder.worker.client inside a sandbox, with the submission copied alone into
its working directory and this file, deferred.py, wire.py and parameters.py copied beside it. It answers
requests one after another, in the order sent (build a class with the parameters the grader
chose, run a method, report buffers and gradients), and sends back plain values. It never
judges anything: a submission that rewrites this process can only make its own answers wrong,
because the checks run in the grader's process.

Usage: python -s child.py REQUEST_FD RESPONSE_FD SUBMISSION_FILE
"""
import contextlib
import copy
import dataclasses
import fcntl
import functools
import gc
import importlib.util
import itertools
import os
import random
import sys
import traceback
import types

# Off while the grader's modules and torch load (on again in Worker.__init__, before any student
# code runs): the collections an import of torch triggers are ~0.3 CPU-s of its ~3.
gc.disable()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deferred  # noqa: E402
import numpy as np  # noqa: E402
import parameters  # noqa: E402
import wire  # noqa: E402


def config_object(config, kwargs, module, args=()):
    """(the config object for a class built from one (exercise.yml's `config`), the fields the
    submission's own config class took but did not keep). config["defaulted"]: fields left out, so
    that the submission's class gives them its defaults (the grader's class, the statement's).
    args: the values of the first fields given, in the config's order, passed by position
    (`Cfg(n_embd, n_head)`, as the statement writes it: a class whose fields are in another order
    keeps other values; one that takes them by name only, keyword-only fields, refuses them: both
    not kept). The submission's own config class
    (module's, of that name) when it takes the fields as keywords and keeps their values (it may
    add properties its classes read, say cfg.head_size); else the grader's own, a dataclass of that
    name and fields, so that the submission's is not needed. A class of its own that takes the
    fields and keeps other values (a typo in its __init__ drops cfg.dropout, say) is a mistake
    of the submission's, named by the grader: the module is built on the grader's dataclass all
    the same, so that its other checks judge the module, not the config."""
    given = {name: value for name, value in config["fields"].items() if name not in config.get("defaulted", ())}
    by_position = dict(zip(given, args))
    values = {**given, **by_position, **kwargs}
    own = getattr(module, str(config["class"]), None)
    not_kept = []
    if isinstance(own, type):
        try:
            made = own(*args, **{name: value for name, value in values.items() if name not in by_position})
        except Exception:  # the submission's class cannot take them: the grader's is used instead
            made = None
        if made is not None:
            not_kept = [name for name, value in values.items() if not _keeps(made, name, value)]
            if not not_kept:
                return made, []
        elif by_position and _takes_by_name(own, values):  # Cfg(n_embd=..., n_head=...) only
            not_kept = list(by_position)
    declared = [(str(k), type(v), v) for k, v in config["fields"].items()]
    key = (str(config["class"]), repr(declared))
    if key not in _config_classes:  # making a dataclass costs ~1 ms: once per worker, not per build
        _config_classes[key] = dataclasses.make_dataclass(key[0], declared)
    return _config_classes[key](**values), not_kept


def _takes_by_name(own, values):
    try:
        own(**values)
    except Exception:
        return False
    return True


def _keeps(made, name, value):
    """Whether the config object holds `value` as `name`: a plain bool, int, float or str of that
    value, compared by Python's own types (a float subclass whose __eq__ says yes to any rate is
    not a value kept)."""
    try:
        got = getattr(made, name)
    except Exception:  # no such attribute
        return False
    return type(got) in (bool, int, float, str) and type(value) in (bool, int, float, str) and got == value


def _rate(dropout):
    """An nn.Dropout's p as the layer holds it (in its __dict__, as nn.Dropout stores it), read as
    the number it is: a float or int subclass's __float__ or a property cannot answer another
    rate than the one the layer drops with. None if it holds no number."""
    p = object.__getattribute__(dropout, "__dict__").get("p")
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        return None
    return float.__float__(p) if isinstance(p, float) else float(int.__index__(p))


# numpy's and torch's comparisons as they are before any submission runs in this process: one
# that replaces them (np.array_equal = lambda *a, **k: True) changes what its own code sees only.
_ARRAY_EQUAL = np.array_equal


_config_classes = {}


# The calls on one module whose outputs are watched for a later call writing them (a buffer reused
# every call, or every few calls in turn).
KEPT_CALLS = 8

# Entries of an output whose values an earlier call keeps (see Worker._keep_outputs): 256 KiB of
# float32, 8 calls back.
KEPT_VALUES = 1 << 16

# nn.Module's own tables, which members() reads from the instance's dictionary while nn.Module's
# code reads them by attribute: a class that defines one of them (a property `_parameters` that
# adds a parameter, a `__dict__` property) would show the grader one module and torch another.
MODULE_INTERNALS = ("__dict__", "__getattribute__", "_parameters", "_buffers", "_modules",
                    "_non_persistent_buffers_set")
_redefined = {}  # type -> the MODULE_INTERNALS its classes redefine


def redefined_internals(kind):
    """The MODULE_INTERNALS a module's class or one of its bases defines (the instance dictionary's
    own descriptor aside), memoized by class."""
    if kind not in _redefined:
        _redefined[kind] = sorted({name for klass in kind.__mro__ if klass is not object
                                   for name in MODULE_INTERNALS if name in vars(klass)
                                   and not isinstance(vars(klass)[name], types.GetSetDescriptorType)})
    return _redefined[kind]


# Names members() records at most: a module shared along many paths (the same layer in nested
# lists) has exponentially many; past this, a module already seen is not walked again.
MAX_NAMES = 4096


def members(module, preferred=(), aliases=None):
    """(parameters, buffers, non-persistent buffer names, submodules, persistent names) of `module`, everything
    under it, each {dotted name: object}, in nn.Module's pre-order. A parameter or buffer shared
    by several paths (a layer registered as `self.projections[0]`, then `self.W_Q` too) appears
    once, under its name in a `preferred` layer (the contract's, which the grader looks up), else
    under its first name (named_parameters'); a submodule appears under every name, so that the grader
    finds `self.dropout` however it was made. The persistent names are all of them, as
    state_dict has them. Read from the dictionaries nn.Module keeps them in, not through its
    methods: a submission that overrides named_parameters (to hide a parameter without a
    gradient, say) changes what its code sees, not what the grader reads.

    A key with a dot, or an empty one, written into those dictionaries directly (register_parameter
    refuses both), spells another member's name: `_parameters["W_Q.weight"]` on the module itself,
    or `_modules[""]` holding a W_Q, is W_Q's weight to anyone who joins names (regular keys,
    non-empty and without a dot, join into names no two paths share). What is reached through such
    a key never takes a name a regular path has, nor hides one, nor joins a layer: it is named in
    parentheses, "(W_Q.weight)" (an extra parameter then still counts, gets its gradient checked,
    and is never loaded).

    aliases, a dict if given, receives {other regular name: the name chosen} for each parameter
    shared by several paths: where a contract layer's weight is missing, the layer may be there,
    sharing another's (self.W_V = self.W_K)."""
    found = {"param": {}, "buffer": {}}  # id -> [object, [(name, irregular)]], in the order first met
    transient, regular_modules, irregular_modules, persistent = set(), {}, {}, []
    walked = set()

    def visit(prefix, current, above, irregular):
        (irregular_modules if irregular else regular_modules).setdefault(prefix, current)
        if id(current) in above or (id(current) in walked and len(regular_modules) + len(irregular_modules) > MAX_NAMES):
            return
        walked.add(id(current))
        redefined = redefined_internals(type(current))
        if redefined:
            raise StudentError("module_internals", f"{type(current).__name__}: {', '.join(redefined)}")
        own = object.__getattribute__(current, "__dict__")
        dotted = prefix + "." if prefix else ""
        skipped = own.get("_non_persistent_buffers_set", ())
        for kind, table in (("param", "_parameters"), ("buffer", "_buffers")):
            for name, value in own.get(table, {}).items():
                if value is not None:
                    shown = _parametrized_name(current, prefix, name, regular_modules) or dotted + name
                    found[kind].setdefault(id(value), [value, []])[1].append((shown, irregular or _odd(name)))
                    if kind == "buffer" and name in skipped:
                        transient.add(id(value))
                    else:
                        persistent.append(shown)
        for name, child in own.get("_modules", {}).items():
            if child is not None:
                visit(dotted + name, child, above | {id(current)}, irregular or _odd(name))

    def named(kind):
        """{chosen name: object}: a regular name in a preferred layer, else the first regular one
        met; then the objects reached only through dotted keys, each under a name left free."""
        chosen, irregular = {}, []
        for value, names in found[kind].values():
            regular = [n for n, odd in names if not odd]
            if regular:
                name = next((n for n in regular if n.split(".", 1)[0] in preferred), regular[0])
                chosen[name] = value
                if aliases is not None and kind == "param":
                    aliases.update((other, name) for other in regular if other != name)
            else:
                irregular.append((names[0][0], value))
        for name, value in irregular:
            chosen[next(f"({name}){'#' * i}" for i in range(len(chosen) + 1) if f"({name}){'#' * i}" not in chosen)] = value
        return chosen

    visit("", module, frozenset(), False)
    visit = None  # the recursive closure is a cycle through its own cell: it held the module until a collection
    buffers = named("buffer")
    modules = {**regular_modules, **{k: v for k, v in irregular_modules.items() if k not in regular_modules}}
    return (named("param"), buffers, {n for n, b in buffers.items() if id(b) in transient}, modules,
            persistent)


def _parametrized_name(holder, prefix, name, modules):
    """`W_Q.weight` for the tensor torch.nn.utils.parametrize keeps as
    `W_Q.parametrizations.weight.original`: what the layer's code reads as its weight is computed
    from it, and the grader looks the layer's weight up by the statement's name. Only where the
    parametrization keeps one tensor (weight_norm's two are not one weight) and the layer has no
    parameter of that name besides; else None (the name as it is)."""
    owner_path, _, tensor = prefix.rpartition(".parametrizations.")
    if (name != "original" or not tensor or type(holder).__name__ != "ParametrizationList"
            or type(holder).__module__ != "torch.nn.utils.parametrize"):
        return None
    owner = modules.get(owner_path)
    if owner is None or tensor in object.__getattribute__(owner, "__dict__").get("_parameters", {}):
        return None
    return f"{owner_path}.{tensor}" if owner_path else tensor


def _odd(name):
    """A key nn.Module's register_* methods refuse: one that can make a joined name another's."""
    return not isinstance(name, str) or not name or "." in name


class StudentError(Exception):
    """Raised by the student's code or by a contract violation found while serving a request."""

    def __init__(self, kind, message, line=None, exc_type=None):
        super().__init__(message)
        self.payload = {"kind": kind, "message": message, "line": line, "type": exc_type}


def _student_error(exc, path):
    """Describe an exception raised by student code: type, message and the line in their file.
    Reading an exception can run the submission's code (a __str__ that raises or returns no
    string, a SyntaxError whose attributes raise): what cannot be read is left out."""
    frames = _readable(lambda: traceback.extract_tb(exc.__traceback__), [])
    own = next((frame for frame in reversed(frames) if os.path.abspath(frame.filename) == path), None)
    line = own.lineno if own is not None else None
    kind_of = _CLASS_OF(exc)  # not exc.__class__, which the submission's class can make raise
    if issubclass(kind_of, SyntaxError):
        line = _readable(lambda: exc.lineno if os.path.abspath(exc.filename or "") == path else line, line)
    text = _readable(lambda: str.__str__(str(exc))[:500], "")
    if issubclass(kind_of, NotImplementedError) and _raised_by_student(frames, path):
        kind = "not_implemented"
    elif issubclass(kind_of, MemoryError) or "can't allocate memory" in text:
        kind = "memory"
    else:
        kind = "exception"
    names = _readable(lambda: [_name_of(c) for c in _MRO.__get__(kind_of)[:MRO_SHOWN]], [])
    return {"kind": kind, "message": text, "line": line, "type": names[0] if names else "",
            "types": names,  # a ValueError subclass is a ValueError
            # the function that line is in: a module-level helper forward calls, say
            **({"function": own.name[:wire.MAX_NAME_CHARS]} if own is not None and own.name.isidentifier() else {})}


def _name_of(cls):
    """A class's name, bounded."""
    return str.__str__(_NAME.__get__(cls))[:wire.MAX_NAME_CHARS]


# type and its own descriptors, taken before any submission runs: a metaclass can make a class's
# __name__ or __mro__ anything, and a submission can shadow `type` in this module.
_CLASS_OF, _NAME, _MRO = type, type.__dict__["__name__"], type.__dict__["__mro__"]


def _readable(read, otherwise):
    try:
        return read()
    except BaseException:
        return otherwise


MRO_SHOWN = 8


def _raised_by_student(frames, path):
    """Whether the innermost frame is a `raise` line of the submission: code not written yet says
    `raise NotImplementedError`. torch raises it too (an operator with no meta kernel: torch.unique
    on the meta device), from inside a call on a line of the student's that is no `raise`."""
    last = frames[-1] if frames else None
    return (last is not None and os.path.abspath(last.filename) == path
            and (last.line or "").lstrip().startswith("raise"))


class Worker:
    def __init__(self, submission_path):
        import torch

        # torch's ~170k long-lived objects out of the cyclic collector's reach: each full collection
        # traversed them all (~0.1 s; in a fork from the zygote it also copied every page it touched).
        # The imports' own cyclic garbage (~80k objects, never collected: the collector was off) is
        # frozen with them; the worker's resident memory is the same either way (measured).
        gc.freeze()
        gc.enable()
        torch.set_num_threads(1)
        # true fp32 matmuls (on cuda too: TF32 would blur the comparison with the reference);
        # cudnn's TF32, for convolutions, stays at torch's default (on): a module that turns it off
        # changes the program's settings too. Every request leaves these as they are here (serve:
        # GlobalSettings.restored)
        torch.backends.cuda.matmul.allow_tf32 = False
        DeterministicAlgorithms(torch)
        self.settings = GlobalSettings(torch)
        # what every request starts from: restored() brings the settings back to it after each one
        self.settings_at_start = self.settings.read()
        # what a request asked for that reading the settings back cannot show: a lower-precision
        # torch.autocast entered (watch_autocast), a thread count left set (ThreadCount)
        self.asked = set()
        watch_autocast(torch, self.asked)
        self.threads = ThreadCount(torch)
        self.equal = torch.equal  # as it is before any submission runs (see _ARRAY_EQUAL)
        self.torch = torch
        self.path = os.path.abspath(submission_path)
        self.module = None
        self.instances = {}
        self.layers = {}  # handle -> the contract layers, whose names a shared parameter takes (members)
        self.last_inputs = {}  # handle -> the tensors its latest call got (op_call's in_place)
        # handle -> [[(tensor, its values as returned or None, its _version then) for one call's
        # outputs], its latest call's first]: values are kept for the latest call only
        self.last_outputs = {}
        # Every input a call got, kept for the worker's life, so that no later input is given the
        # address or id of an earlier one: a cache keyed on them (wrong: see op_call's in_place)
        # would otherwise hit or miss by where the allocator happened to put a tensor, and the same
        # file could get another score in another process. A few MiB over a whole grading.
        self.inputs_ever = []
        self.seedings = itertools.count(1)  # numpy's and Python's seeds (_seed)
        deferred.install()  # after torch: the modules it stands in for are torch's own imports

    def load_submission(self):
        """Import the submission, its generators seeded first: what it draws at import (a
        module-level torch.rand deciding anything) is the same in every grading, cold or forked from
        a zygote (unseeded, a fresh process draws from the system's entropy, and the forks of one
        zygote from its warm-up's state: one file scored 43 or 48 by chance)."""
        self.torch.manual_seed(0)
        np.random.seed(0)
        random.seed(0)
        name = os.path.splitext(os.path.basename(self.path))[0]  # the exercise's module name: the file's stem
        spec = importlib.util.spec_from_file_location(name, self.path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        self.module = module

    # ---- requests -------------------------------------------------------------------------
    def op_build(self, cls, kwargs, handle, seed=0, load=None, config=None, then_set=None, args=(), layers=(),
                 release=()):
        """Build the class as `handle` (the grader names it, so that it can send the next request
        before this one is answered); with load={"seed", "layers"} (and optionally "scale"), load
        the parameters the grader chose (parameters.draw) into those layers; with config
        ({"class", "fields"}), pass the constructor one config object (config_object) instead of
        keywords (the fields the submission's own config class did not keep: config_not_kept); with then_set ({"submodule.attribute": value}), set those attributes of the
        built module's submodules that exist, as a user changes a dropout's p after building; with
        args, those arguments first, by position, as the statement's signature orders them (with
        config, the values of its first fields, given to the config class by position); with
        seed None, the generators go on from the request before (what a constructor that raised
        left drawn). layers: the contract's, under whose names a shared parameter is reported.
        Returns the parameters' shapes.
        release: handles of modules the grader no longer holds, let go of first (a module that
        keeps a large buffer of its own, built hundreds of times over a grading, would otherwise
        fill the worker's memory; the inputs stay: inputs_ever)."""
        for gone in release:
            for kept in (self.instances, self.layers, self.last_inputs, self.last_outputs):
                kept.pop(gone, None)
        factory = getattr(self.module, cls, None)
        if not isinstance(factory, type):
            raise StudentError("missing_class", f"{cls} is not defined as a class")
        if seed is not None:
            self._seed(seed)
        config_made, not_kept = config_object(config, kwargs, self.module, args) if config else (None, [])
        instance = factory(config_made) if config else factory(*args, **kwargs)
        if not isinstance(instance, self.torch.nn.Module):
            raise StudentError("not_a_module", "")
        self.instances[handle] = instance
        self.layers[handle] = tuple(layers)
        shapes = self._load(handle, instance, load)
        submodules = members(instance)[3] if then_set else {}
        for dotted, value in (then_set or {}).items():
            path, _, attribute = dotted.rpartition(".")
            if path in submodules:
                setattr(submodules[path], attribute, value)
        shared = self._shared(instance, shapes, layers)
        return {"params": shapes, **({"config_not_kept": sorted(not_kept)} if not_kept else {}),
                **({"shared": shared} if shared else {})}

    @staticmethod
    def _shared(module, shapes, layers):
        """{contract parameter missing from shapes: the name it is reported under}, for a contract
        layer whose parameter is another's too (self.W_V = self.W_K): its name was not chosen."""
        if all(f"{layer}.weight" in shapes for layer in layers):
            return {}
        aliases = {}
        members(module, layers, aliases)
        contract = {f"{layer}.{kind}" for layer in layers for kind in ("weight", "bias")}
        return {name: chosen for name, chosen in aliases.items() if name in contract and name not in shapes}

    def _load(self, handle, module, load):
        """Load the parameters the grader chose (parameters.draw from load["seed"]) into load's
        layers, in place, as an optimizer step changes them; with load None, none. load["rows"]
        ({layer: [start, stop]}) loads only those output rows of a layer (weight and bias): qkv's
        value rows, say, leaving its query and key rows as the module set them. Returns every
        parameter's shape."""
        own, _, _, submodules, _ = members(module, self.layers[handle])
        lazy = sorted(name for name, p in own.items() if isinstance(p, self.torch.nn.parameter.UninitializedParameter))
        if lazy:  # nn.LazyLinear: no shape until a first forward, which no statement's layer waits for
            raise StudentError("uninitialized_parameters", ", ".join(lazy)[:200])
        shapes = {name: list(self._plain(p).shape) for name, p in own.items()}
        if load is not None:
            values = parameters.draw(np.random.default_rng(load["seed"]), shapes, load["layers"], load.get("scale"),
                                     load.get("unbiased", ()))
            with self.torch.no_grad():
                for name, value in values.items():
                    # through .data: the write leaves `_version` as it was, so a cache keyed on
                    # it (or on the address) is stale, as after `p.data -= lr * p.grad`; with
                    # load["step"], as optimizer.step() writes, which counts in `_version`
                    target = own[name] if load.get("step") else own[name].data
                    rows = load.get("rows", {}).get(name.rsplit(".", 1)[0])
                    value = self.torch.from_numpy(value)
                    parametrized = self._parametrizations(submodules, name, own[name])
                    if parametrized is not None:  # the weight the layer computes is to be the value
                        if rows is not None:
                            value = self.torch.cat([getattr(*parametrized[0])[:rows[0]], value[rows[0]:rows[1]],
                                                    getattr(*parametrized[0])[rows[1]:]])
                        for step in reversed(parametrized[1]):
                            value = step.right_inverse(value) if hasattr(step, "right_inverse") else value
                    elif rows is not None:
                        target, value = target[rows[0]:rows[1]], value[rows[0]:rows[1]]
                    target.copy_(value)
        return shapes

    @staticmethod
    def _parametrizations(submodules, name, parameter):
        """((layer, tensor name), its parametrizations) where `name` (members') is a tensor that
        torch.nn.utils.parametrize computes from `parameter`: loaded as torch loads it at
        registration, through each right_inverse, so that the layer computes the values chosen.
        Else None."""
        owner, _, tensor = name.rpartition(".")
        steps = submodules.get(f"{owner}.parametrizations.{tensor}" if owner else "")
        if (owner not in submodules or type(steps).__name__ != "ParametrizationList"
                or object.__getattribute__(steps, "__dict__").get("_parameters", {}).get("original") is not parameter):
            return None
        return (submodules[owner], tensor), list(steps)

    def op_describe(self, handle):
        """What only some checks read: buffers (with their values), the state_dict's keys, which
        nn.Linear layers have a bias, and the p of each nn.Dropout layer."""
        module = self.instances[handle]
        _, named_buffers, transient, modules, persistent = members(module, self.layers[handle])
        # values only where a check reads them: boolean masks, up to the statement's longest block
        # (300² entries) and MASK_VALUES in all (a module's other buffers, however large or many,
        # must not push the reply over the frame cap)
        room = MASK_VALUES
        buffers = {}
        for name, b in named_buffers.items():
            b = self._plain(b)
            shown = b.dtype == self.torch.bool and b.numel() <= room
            room -= b.numel() if shown else 0
            buffers[name] = {"shape": list(b.shape), "dtype": str(b.dtype).replace("torch.", ""),
                             "persistent": name in persistent, "values": self._to_numpy(b) if shown else None}
        linear_bias = {  # from the layer's own parameters, not a `bias` attribute a subclass may answer
            name: object.__getattribute__(sub, "__dict__").get("_parameters", {}).get("bias") is not None
            for name, sub in modules.items()
            if isinstance(sub, self.torch.nn.Linear)
        }
        dropout_p = {name: rate for name, sub in modules.items()
                     if isinstance(sub, self.torch.nn.Dropout) and (rate := _rate(sub)) is not None}
        return {"buffers": buffers, "state_dict": sorted(set(persistent)), "linear_bias": linear_bias,
                "dropout_p": dropout_p}

    def op_call(self, handle, method, args=(), kwargs=None, train=False, seed=0, grad=False,
                trace=(), device="cpu", noncontiguous=False, upstream=None, input_grads=(), reload=None,
                rolled=(), in_place=False, perturb=None, backward_from=0, moved_for_good=False, inference=False,
                float64=False, copied=False):
        """Run `method` of module `handle` on the arrays sent (as tensors of the same dtype).

        noncontiguous: each array input arrives as a non-contiguous tensor with the same values
        (_noncontiguous). grad: backward from output `backward_from` (0: the output; 1: the weights
        a forward returns) with `upstream` as its gradient (an array of that output's shape; default
        torch.randn from `seed`), returning every parameter's
        gradient; and those of the floating-point inputs named in input_grads (each reaches the
        method as a copy of a leaf, so that the method may still change it in place). The reply names the
        inputs (a positional one by its index, as a string; a keyword one by its name) that the
        call changed in place: their values, shape or dtype are no longer the ones sent. reload
        (op_build's load): first give the module new parameter values, in place. rolled: traced
        functions (as in trace) whose results the module gets rolled by one entry (_tracing),
        to see whether its output depends on them. in_place (without grad): the arrays are written
        into the very tensors the module's previous call got (where each has the same shape and
        dtype), as a training loop refills one input buffer: a cache keyed on a tensor's identity
        or address then sees other values. perturb={"seed", "step"}: the call runs with
        every parameter moved by step along parameters.direction(seed), then put back exactly: the
        grader's central difference of the train-mode forward, under one dropout draw (with grad, as the
        call it is compared with is made: a module may take another path without autograd).
        On another device than the CPU, the call runs on a copy moved there; moved_for_good: on the
        module itself, moved with .to(device) and left there, as a user moves a model they tried
        (what is keyed by the module's identity, an lru_cache on a method, stays valid).
        inference (without grad): under torch.inference_mode(), as a validation pass runs. float64:
        on a copy of the module in double (the grader sends float64 inputs), where rounding is
        ~1e-16: a gradient that float32 leaves at noise is told from none. copied (not with perturb):
        on copy.deepcopy(module), made before `reload`, which then gives the copy alone its new
        parameters, as nn.TransformerEncoder clones a layer and trains each clone on its own."""
        torch = self.torch
        module = self.instances[handle]
        if copied:
            try:
                module = copy.deepcopy(module)
            except Exception as exc:  # the copy cannot be made: not a call of forward's to judge
                raise StudentError("not_copyable", f"{type(exc).__name__}: {exc}"[:300]) from None
        if reload is not None:
            self._load(handle, module, reload)
        if perturb is not None:
            with self._perturbed(module, perturb, self.layers[handle]):
                return self.op_call(handle, method, args, kwargs, train, seed, grad, trace, device, noncontiguous,
                                    upstream, input_grads, None, rolled, in_place, None, backward_from, moved_for_good,
                                    inference, float64)
        if device != "cpu":
            module = self._moved(module if moved_for_good else copy.deepcopy(module), device)
        if float64:
            module = copy.deepcopy(module).double()
        params, buffers, _, submodules, _ = members(module, self.layers[handle])
        # boolean buffers (masks) as they were: a call must leave them so (see buffers_changed below)
        masks = {name: b.clone() for name, b in ((name, self._plain(b)) for name, b in buffers.items())
                 if b.dtype == torch.bool and b.device.type == "cpu" and b.numel() <= MASK_VALUES}
        if any(sub.training != train for sub in submodules.values()):
            # train() walks every submodule through nn.Module.__setattr__: ~80 µs a call here,
            # a sixth of what a call on a small module costs, to set flags already set.
            module.train(train)
        if grad:
            if not torch.is_grad_enabled():  # turned off for good: by the submission's import, or a call
                raise StudentError("grad_disabled", "")
            for p in params.values():
                p.grad = None
        sent = {**{str(i): a for i, a in enumerate(args)}, **(kwargs or {})}
        sent_copies = {name: value.copy() for name, value in sent.items() if isinstance(value, np.ndarray)}
        given = self._aliased({name: self._input(value, device, noncontiguous) for name, value in sent.items()}, sent)
        if in_place and not grad:
            given = self._into_previous(handle, given)
        self.last_inputs[handle] = given
        self.inputs_ever.append(given)
        leaves = {}
        if grad:
            for name in input_grads or ():
                value = given.get(name)
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    leaves[name] = value.requires_grad_(True)
                    given[name] = value.clone()
        args = [given[str(i)] for i in range(len(args))]
        kwargs = {k: given[k] for k in (kwargs or {})}
        # an in-place write leaves its mark in `_version` even where the values stay (mask.clamp_(0, 1)
        # on a 0/1 mask): it fails on an expanded or inference-mode mask, as the statement says
        versions = {name: self._version_of(value) for name, value in given.items() if type(value) is torch.Tensor}
        # what the caller's tensor is besides its values: a call must leave it as the caller had it
        # (x.requires_grad_() makes the caller's .numpy() fail; `x.data = x.data.contiguous()`
        # unties a view from the buffer it was cut from), and neither counts in `_version`
        layouts = {name: self._layout(value) for name, value in given.items() if type(value) is torch.Tensor}
        if seed is not None:  # None: the generators go on from the call before, as in a training loop
            self._seed(seed, device)
        traced = dict.fromkeys(trace, 0)
        # forward through the module's call, as a user's code calls it: its hooks run (a forward
        # pre-hook that converts the mask is part of the module); other methods directly
        called = module if method == "forward" else getattr(module, method)
        autograd = torch.inference_mode() if inference else torch.set_grad_enabled(grad)
        with autograd, self._tracing(traced, rolled), self._copies_out(device):
            result = called(*args, **kwargs)
            if not inference and torch.is_grad_enabled() != grad:  # left so past the call: the with block hides it
                self.asked.add("torch.set_grad_enabled")
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        for index, value in enumerate(outputs):
            if type(value) is not torch.Tensor:
                raise StudentError("bad_output", type(value).__name__)  # the type's name: the feedback words it
            if device != "cpu" and value.device.type != torch.device(device).type:  # a copy returned (_copies_out)
                raise StudentError("exception", f"output {index} is on device {value.device.type}, not on the "
                                   f"expected device {device} of the module and its inputs", exc_type="RuntimeError")
            with torch._C.DisableTorchFunctionSubclass():
                if torch.Tensor.is_complex(value):  # its real part alone would pass for the output
                    raise StudentError("output_dtype", str(value.dtype).replace("torch.", ""))
        returned = [self._to_numpy(v) for v in outputs]
        reply = {"outputs": returned, "traced": traced,
                 **self._masks_changed(module, masks, self.layers[handle]),
                 "modified": sorted(name for name, copied in sent_copies.items()
                                    if self._changed(given[name], copied)
                                    or self._version_of(given[name]) != versions.get(name)),
                 **self._relaid(given, layouts),
                 "earlier_outputs_changed": self._earlier_outputs_changed(handle)}
        self._keep_outputs(handle, [(v, a.copy(), self._version_of(v))  # as sent: same dtype
                                    for v, a in zip(outputs, returned)
                                    if isinstance(a, np.ndarray) and str(v.dtype) == "torch." + wire.DTYPE_NAMES[a.dtype]])
        if grad:
            self._backward(outputs[backward_from], seed, upstream)  # past the outputs: IndexError, an exception
            grads = {name: self._grad_of(p) for name, p in params.items()}
            reply["grads"] = {name: None if g is None else self._to_numpy(g) for name, g in grads.items()}
            if leaves:
                reply["input_grads"] = {name: None if leaf.grad is None else self._to_numpy(leaf.grad)
                                        for name, leaf in leaves.items()}
        return reply

    def _masks_changed(self, module, masks, layers):
        """{"buffers_changed": names} for the boolean buffers a call left with other values (or
        another tensor of other values in their place: `self.mask = ~self.mask`), {} when none: a
        mask flipped in place on every call is right one call in two, and the properties that meet
        the other calls would name other things (contiguity, dropout, the signature). A buffer
        cropped to its leading block (`self.mask = self.mask[:, :, :T, :T]`) keeps its values
        there: what fails is a longer call, `shapes`' business."""
        if not masks:
            return {}
        changed = []
        buffers = members(module, layers)[1]  # nn.Module's dictionaries, not its (overridable) get_buffer
        for name, before in masks.items():
            if name not in buffers:
                continue  # removed: not a change of values the next call reads
            after = self._plain(buffers[name])
            if after.dtype == before.dtype and after.dim() == before.dim() and all(
                    a <= b for a, b in zip(after.shape, before.shape)):
                before = before[tuple(slice(0, a) for a in after.shape)]  # cropped: a longer call's business
                with self.torch._C.DisableTorchFunctionSubclass():
                    if self.equal(after, before):
                        continue
            changed.append(name)
        return {"buffers_changed": changed[:wire.MAX_DIMENSIONS]} if changed else {}

    def _moved(self, module, device):
        """module.to(device) with each parameter kept as the same Python object, as a move to CUDA
        keeps it (torch writes the new tensor into the old Parameter). A move to meta makes new
        Parameter objects instead, and a correct module holding a parameter it took in __init__
        (self.w = self.qkv.weight, a functools.partial over it) would fail there only: the
        parameters are swapped in place (torch.__future__'s swap on conversion). Where torch
        refuses the swap (a weak reference to a parameter), what is left is moved as torch moves it
        by default."""
        torch = self.torch
        before = torch.__future__.get_swap_module_params_on_conversion()
        try:
            torch.__future__.set_swap_module_params_on_conversion(True)
            try:
                return module.to(device)
            except RuntimeError:
                pass
        finally:
            torch.__future__.set_swap_module_params_on_conversion(before)
        return module.to(device)

    @contextlib.contextmanager
    def _perturbed(self, module, perturb, layers):
        """The module's parameters moved by perturb["step"] along parameters.direction(perturb["seed"])
        (through .data, as _load writes), and put back exactly afterwards."""
        own = members(module, layers)[0]
        moves = parameters.direction(perturb["seed"], {name: list(self._plain(p).shape) for name, p in own.items()})
        saved = {name: p.detach().clone() for name, p in own.items()}
        with self.torch.no_grad():
            for name, p in own.items():
                p.data.add_(self.torch.from_numpy(moves[name]).to(p.dtype), alpha=float(perturb["step"]))
        try:
            yield
        finally:
            with self.torch.no_grad():
                for name, p in own.items():
                    p.data.copy_(saved[name])

    def _earlier_outputs_changed(self, handle):
        """How many calls back the latest call on the module whose returned tensor no longer holds
        what it returned was made (1: the previous one), 0 if none: a buffer kept in self and written
        again by this call (a user keeping call 1's weights finds call 2's in them; its values
        compared), or by a later one (two buffers used in turn: written through copy_ or out=, which
        count in `_version`). Those it finds are not looked at again."""
        earlier = self.last_outputs.get(handle, [])
        back = next((i + 1 for i, kept in enumerate(earlier) if any(
            self._changed(tensor, values) if values is not None else self._written(tensor, version)
            for tensor, values, version in kept)), 0)
        if back:
            del earlier[back - 1:]
        return back

    def _written(self, tensor, version):
        """Whether a tensor returned by an earlier call was written since (its `_version` grew)."""
        return type(tensor) is not self.torch.Tensor or (version is not None and self._version_of(tensor) != version)

    def _layout(self, tensor):
        """(requires_grad, memory address, shape, strides, offset) of a plain tensor."""
        base = self.torch._C.TensorBase
        with self.torch._C.DisableTorchFunctionSubclass():
            return (base.requires_grad.__get__(tensor), base.data_ptr(tensor), tuple(tensor.shape),
                    tuple(base.stride(tensor)), base.storage_offset(tensor))

    def _relaid(self, given, layouts):
        """{"requires_grad_changed": names, "rebound": names}: the inputs whose requires_grad the
        call changed, and those it gave other memory (another address; or, in the same shape,
        other strides or offset: a change of shape, unsqueeze_, is "modified"'s); each key only
        where some are."""
        now = {name: self._layout(given[name]) for name in layouts if type(given[name]) is self.torch.Tensor}
        found = {"requires_grad_changed": sorted(name for name, layout in now.items() if layout[0] != layouts[name][0]),
                 "rebound": sorted(name for name, layout in now.items() if layout[1] != layouts[name][1] or (
                     layout[2] == layouts[name][2] and layout[3:] != layouts[name][3:]))}
        return {key: names for key, names in found.items() if names}

    def _version_of(self, tensor):
        """A plain tensor's `_version`, or None for an inference tensor (one returned under
        torch.inference_mode()), which counts none."""
        torch = self.torch
        with torch._C.DisableTorchFunctionSubclass():
            return None if torch.Tensor.is_inference(tensor) else torch.Tensor._version.__get__(tensor)

    def _keep_outputs(self, handle, kept):
        """Keep one call's outputs ahead of the earlier calls', KEPT_CALLS calls at most. Earlier
        calls keep their values up to KEPT_VALUES entries an output (a write through `.data` counts
        in no `_version`: two buffers used in turn and refilled so scored 48 for a file worth 45);
        larger ones only their version."""
        earlier = [[(tensor, values if values is not None and values.size <= KEPT_VALUES else None, version)
                    for tensor, values, version in call] for call in self.last_outputs.get(handle, [])]
        self.last_outputs[handle] = [kept, *earlier][:KEPT_CALLS]

    @staticmethod
    def _aliased(given, sent):
        """given, with the inputs sent equal (shape, dtype and values) passed as one tensor, as a
        user calls mha(x, x, x) or mha(q, memory, memory): `key is value` is then true, and a
        module that takes a shortcut on it (V projected with W_K, say) is judged on it."""
        firsts, aliased = [], dict(given)
        for name, value in sent.items():
            if not isinstance(value, np.ndarray):
                continue
            # bytes, not np.array_equal: the submission runs in this process and may have replaced that
            same = next((other for other in firsts if sent[other].shape == value.shape
                         and sent[other].dtype == value.dtype and sent[other].tobytes() == value.tobytes()), None)
            if same is None:
                firsts.append(name)
            else:
                aliased[name] = aliased[same]
        return aliased

    def _into_previous(self, handle, given):
        """given, with each tensor's values copied into the tensor of that name the module's previous
        call got, where that one has its shape, dtype and device (and is still a plain tensor)."""
        torch = self.torch
        previous = self.last_inputs.get(handle, {})
        refilled = dict(given)
        written, became = {}, {}  # id(old tensor) -> the tensor written into it; id(tensor) -> what it became
        with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
            for name, value in given.items():
                if id(value) in became:  # one tensor for several inputs (_aliased) stays one
                    refilled[name] = became[id(value)]
                    continue
                old = previous.get(name)
                if (type(value) is torch.Tensor and type(old) is torch.Tensor and old.shape == value.shape
                        and old.dtype == value.dtype and old.device == value.device
                        and written.get(id(old), value) is value):  # one tensor then, another now: not twice
                    old.data.copy_(value)  # through .data: `_version` stays, as in _load
                    written[id(old)] = value
                    refilled[name] = old
                became[id(value)] = refilled[name]
        return refilled

    def _backward(self, output, seed, upstream):
        """output.backward(upstream); a failure there is reported as backward()'s, with the line
        of the submission's forward that autograd names when it can."""
        torch = self.torch
        if upstream is None:
            upstream = torch.randn(output.shape, generator=torch.Generator().manual_seed(seed or 0))
        else:
            if list(upstream.shape) != list(output.shape):
                raise StudentError("output_shape", str(tuple(output.shape)))  # the feedback words it
            upstream = torch.from_numpy(upstream)
        try:
            (output * upstream.to(output.device)).sum().backward()
        except Exception as exc:
            found = _student_error(exc, self.path)
            raise StudentError(found["kind"], "backward(): " + found["message"], found["line"], found["type"]) from None

    def op_probe(self):
        return {"cuda": bool(self.torch.cuda.is_available())}


    # ---- helpers --------------------------------------------------------------------------
    def _seed(self, seed, device="cpu"):
        """Seed the generators this call can use: torch's with `seed`, as a user's torch.manual_seed
        does; numpy's and Python's global ones, which a hand-written dropout may draw from, with the
        count of seedings so far: the same values in every grading of a file (unseeded, a module
        drawing from them was judged by chance), but not `seed`'s, so that the statement's rule holds
        as a user meets it: torch.manual_seed fixes torch's draws only (dropout_ignores_seed).
        torch.manual_seed would also queue lazy seeding of every accelerator backend, formatting a
        stack trace each time (~0.5 ms a call)."""
        self.torch.default_generator.manual_seed(seed)
        seeding = next(self.seedings)
        np.random.seed(seeding % 2 ** 32)
        random.seed(seeding)
        if device.startswith("cuda"):
            self.torch.cuda.manual_seed_all(seed)

    def _input(self, value, device, noncontiguous=False):
        """An argument as the method receives it: arrays become tensors of the same dtype (bool and
        integer masks included), non-contiguous ones with noncontiguous."""
        if not isinstance(value, np.ndarray):
            return value
        tensor = self._noncontiguous(value) if noncontiguous else self.torch.from_numpy(value)
        return tensor.to(device)

    def _noncontiguous(self, array):
        """A tensor with the values of `array` laid out out of order in memory, as a transposed or
        strided view leaves it: the last two axes of length > 1 stored swapped and swapped back
        (a view of them cannot be merged), or with one such axis, every other element of one twice
        as long. An array with no two elements cannot be non-contiguous, and stays as it is."""
        torch = self.torch
        axes = [i for i, n in enumerate(array.shape) if n > 1]
        if len(axes) >= 2:
            first, second = axes[-2], axes[-1]
            stored = np.ascontiguousarray(np.swapaxes(array, first, second))
            return torch.from_numpy(stored).transpose(first, second)
        if axes:
            shape = list(array.shape)
            shape[axes[0]] *= 2
            every_other = tuple(slice(None, None, 2) if i == axes[0] else slice(None) for i in range(array.ndim))
            stored = np.zeros(shape, array.dtype)
            stored[every_other] = array
            return torch.from_numpy(stored)[every_other]
        return torch.from_numpy(array)

    def _changed(self, tensor, sent):
        """Whether the call changed an input in place (values, shape, dtype or class): the tensor the
        method got, a plain tensor then, against a copy of the array sent. A class assigned to it
        (`x.__class__ = Subclass`) changes the caller's object too, and would otherwise stand
        between the grader and its values. A tensor on the meta device has no values to compare."""
        torch = self.torch
        if type(tensor) is not torch.Tensor:
            return True
        with torch._C.DisableTorchFunctionSubclass():
            if torch.Tensor.is_meta.__get__(tensor):
                return False
            if list(tensor.shape) != list(sent.shape) or str(tensor.dtype) != "torch." + wire.DTYPE_NAMES[sent.dtype]:
                return True
            now = torch.Tensor.detach(tensor).cpu().numpy()
        if now.tobytes() == sent.tobytes():  # the usual answer, in a µs; else compare the values
            return False
        return not _ARRAY_EQUAL(now, sent, equal_nan=sent.dtype.kind == "f")

    def _plain(self, tensor):
        """The tensor as a plain torch.Tensor of the same data: its dtype, shape and device as they
        are, whatever a subclass's properties or __torch_function__ would answer (a float mask
        that says it is boolean)."""
        torch = self.torch
        with torch._C.DisableTorchFunctionSubclass():
            return torch._C.TensorBase.as_subclass(tensor, torch.Tensor)

    def _grad_of(self, parameter):
        """A parameter's .grad as autograd left it, whatever a subclass's `grad` property answers."""
        with self.torch._C.DisableTorchFunctionSubclass():
            return self.torch._C.TensorBase.grad.__get__(parameter)

    def _to_numpy(self, tensor):
        """The plain values of a tensor: a subclass's __torch_function__ never sees this call. A
        floating dtype numpy lacks (bfloat16, float8) comes as float32, which holds its values
        exactly: the grader names the reduced precision from them."""
        torch = self.torch
        with torch._C.DisableTorchFunctionSubclass():
            tensor = torch.Tensor.detach(tensor)
            if tensor.device.type == "meta":
                return {"meta_shape": list(tensor.shape)}
            if tensor.dtype.is_floating_point and tensor.dtype not in (torch.float16, torch.float32, torch.float64):
                tensor = tensor.to(torch.float32)
            array = tensor.cpu().contiguous().numpy()
        if array.dtype not in wire.DTYPE_NAMES:
            array = array.astype(np.float32)
        return array

    def _copies_out(self, device):
        """On the meta device, a copy to the CPU (.cpu(), .to("cpu"), .numpy(), .tolist(), numpy's
        asarray) of a meta tensor gets a CPU tensor of its shape and dtype, without its values
        (meta has none), as on a real accelerator it gets them: a copy kept aside (an attention
        map saved for a plot) is no device bug, while one computed with next to the module's own
        tensors still fails with torch's device error, and one returned fails in op_call."""
        if device != "meta":
            return contextlib.nullcontext()
        from torch.overrides import TorchFunctionMode

        torch = self.torch
        tensor = torch.Tensor
        copies = (tensor.cpu, tensor.to, tensor.numpy, tensor.tolist, tensor.__array__)

        class CopiesOut(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func not in copies or not args or not isinstance(args[0], tensor) or args[0].device.type != "meta":
                    return func(*args, **kwargs)
                source, dtype = args[0], args[0].dtype
                if func is tensor.to:
                    target, dtype, *_ = torch._C._nn._parse_to(*args[1:], **kwargs)
                    if target is None or target.type != "cpu":
                        return func(*args, **kwargs)
                    return torch.empty(source.shape, dtype=dtype or source.dtype, device="cpu")
                copy = torch.empty(source.shape, dtype=dtype, device="cpu")
                return copy if func is tensor.cpu else func(copy, *args[1:], **kwargs)

        return CopiesOut()

    def _tracing(self, counts, rolled=()):
        """While the call runs, count the calls of each torch.nn.functional function named in
        `counts` (name -> 0; exercise.yml's `traced`), however the submission reaches it; those
        named in `rolled` return their result rolled by one entry in memory order (values as
        plausible as the true result, each in a neighbour's place, and only a module that computes
        attention itself can tell; whatever the layout it was called with: rolled along the
        sequence, a call that took the heads for the sequence, one head, was left as it was)."""
        from torch.overrides import TorchFunctionMode

        names = set(counts) | set(rolled)
        functions = [(getattr(self.torch.nn.functional, name, None), name) for name in names]
        functions = [(function, name) for function, name in functions if function is not None]
        if not functions:
            return contextlib.nullcontext()
        roll = self.torch.roll

        class Trace(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                result = func(*args, **(kwargs or {}))
                for function, name in functions:
                    if func is function:
                        if name in counts:
                            counts[name] += 1
                        if name in rolled:
                            result = roll(result, 1)
                return result

        return Trace()


# Where torch keeps the float32 precision of each backend (parents first: setting one sets those
# under it). torch keeps the older settings (set_float32_matmul_precision, allow_tf32) apart from
# these, and once the two disagree the older getters raise: both are read (an older one that
# raises reads as MIXED) and, when one changed, all are put back, the older first (measured: that
# order leaves every getter readable again, whichever API a module used).
PRECISIONS = ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn", "mkldnn.matmul", "mkldnn.conv",
              "mkldnn.rnn")
MIXED = "mixed with fp32_precision"


# Boolean buffer entries op_describe sends the values of, in all: 1 byte each on the wire.
MASK_VALUES = 1 << 18


class GlobalSettings:
    """torch's process-wide settings: what a module must leave as it found them, each named as a
    user sets it. Precision (TF32 turned on in __init__ changes every matmul of the program that
    uses it, on a GPU; bfloat16 through mkldnn, on this CPU too), the attention kernels and
    algorithms allowed, the default dtype and device, anomaly detection and the threads: each
    changes the program around the module, not only the module. Grad mode is not among them: turned
    off for good (at import too), it fails the next call that asks for gradients (grad_disabled).
    Getters and setters are looked up once: restored() reads them after every request (~14 µs)."""

    def __init__(self, torch):
        backends, matmul, cudnn, cuda = torch.backends, torch.backends.cuda.matmul, torch.backends.cudnn, torch.backends.cuda
        older = {"torch.set_float32_matmul_precision": (torch.get_float32_matmul_precision,
                                                        torch.set_float32_matmul_precision),
                 "torch.backends.cuda.matmul.allow_tf32": _attribute(matmul, "allow_tf32"),
                 "torch.backends.cudnn.allow_tf32": _attribute(cudnn, "allow_tf32")}
        entries = {name: (_unless_mixed(getter), setter) for name, (getter, setter) in older.items()}
        for path in PRECISIONS:
            owner = functools.reduce(getattr, path.split(".") if path else (), backends)
            entries[_precision_name(path)] = _attribute(owner, "fp32_precision")
        self.precision = frozenset(entries)
        for kind in ("fp16", "bf16"):
            attribute = f"allow_{kind}_reduced_precision_reduction"
            entries[f"torch.backends.cuda.matmul.{attribute}"] = _attribute(matmul, attribute)
        # lower precision too, found unwatched by an outside attacker: half-precision accumulation,
        # sdp's math kernel reducing in half precision, denormals flushed to zero (no getter: probed)
        if hasattr(matmul, "allow_fp16_accumulation"):
            entries["torch.backends.cuda.matmul.allow_fp16_accumulation"] = _attribute(matmul, "allow_fp16_accumulation")
        if hasattr(cuda, "allow_fp16_bf16_reduction_math_sdp"):
            entries["torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp"] = (
                cuda.fp16_bf16_reduction_math_sdp_allowed, cuda.allow_fp16_bf16_reduction_math_sdp)
        denormal, times = torch.tensor([1e-40]), torch.mul
        entries["torch.set_flush_denormal"] = (lambda: bool(times(denormal, 1.0).item() == 0.0),
                                               torch.set_flush_denormal)
        for kernel in ("flash", "mem_efficient", "math", "cudnn"):
            entries[f"torch.backends.cuda.enable_{kernel}_sdp"] = (getattr(cuda, f"{kernel}_sdp_enabled"),
                                                                  getattr(cuda, f"enable_{kernel}_sdp"))
        for owner, attribute in ((cudnn, "enabled"), (cudnn, "benchmark"), (cudnn, "deterministic"),
                                 (backends.mkldnn, "enabled")):
            entries[f"{owner.__name__}.{attribute}"] = _attribute(owner, attribute)
        entries["torch.utils.deterministic.fill_uninitialized_memory"] = _attribute(
            torch.utils.deterministic, "fill_uninitialized_memory")
        entries["torch.use_deterministic_algorithms"] = (
            lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
            lambda value: torch.use_deterministic_algorithms(value[0], warn_only=value[1]))
        entries["torch.set_default_dtype"] = (torch.get_default_dtype, torch.set_default_dtype)
        entries["torch.set_default_device"] = (functools.partial(_default_device, torch), torch.set_default_device)
        entries["torch.autograd.set_detect_anomaly"] = (torch.is_anomaly_enabled, torch.set_anomaly_enabled)
        entries["torch.set_num_threads"] = (torch.get_num_threads, torch.set_num_threads)
        self.names = tuple(entries)
        self.getters = tuple(getter for getter, _ in entries.values())
        self.setters = tuple(setter for _, setter in entries.values())

    def read(self):
        return tuple(getter() for getter in self.getters)

    def restored(self, before):
        """Put back the settings `before` (a read()) that changed since, in their order (every
        precision setting when one of them changed: see PRECISIONS); the names of those whose
        effect changed (set_float32_matmul_precision("highest") turns mkldnn.matmul's "none" into
        "ieee", the same precision: a save-and-restore of it inside forward changes nothing)."""
        now = self.read()
        changed = [name for name, was, is_ in zip(self.names, before, now) if was != is_]
        precision = self.precision if self.precision.intersection(changed) else frozenset()
        for name, value, setter in zip(self.names, before, self.setters):
            if name in precision or name in changed:
                setter(value)
        if not precision:
            return changed
        was, is_ = _in_effect(dict(zip(self.names, before))), _in_effect(dict(zip(self.names, now)))
        return [name for name in changed if name not in was or was[name] != is_[name]]


def _precision_name(path):
    return ".".join(filter(None, ("torch.backends", path, "fp32_precision")))


def _in_effect(values):
    """Each fp32_precision setting of `values` (name -> value) as it acts: "none" defers to the
    level above it (cuda.matmul's is the top level), and the top level's "none" is full precision."""
    effect = {}
    for path in PRECISIONS:  # parents first
        value = values[_precision_name(path)]
        if value == "none":
            parent = path.rpartition(".")[0]
            value = effect[_precision_name(parent if parent in PRECISIONS else "")] if path else "ieee"
        effect[_precision_name(path)] = value
    return effect


def _default_device(torch):
    """The device set_default_device chose, None where none was: put back as None, not as "cpu",
    which would leave a device mode on every later torch call."""
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return None if context is None else context.device


def _attribute(owner, name):
    return functools.partial(getattr, owner, name), functools.partial(setattr, owner, name)


def _unless_mixed(getter):
    """getter, reading MIXED where torch refuses to answer (the two precision APIs disagree)."""
    def read():
        try:
            return getter()
        except RuntimeError:  # torch: "you have used mix of the legacy and new APIs"
            return MIXED
    return read


# Settings asked for that a reply names at most, past the ones read back (the protocol bounds the list).
MAX_ASKED_NAMED = 8


def watch_autocast(torch, entered):
    """Add to the set `entered` each torch.autocast entered with float16 or bfloat16 asked for (as a
    `with` or a decorator): a lower precision for what runs inside. Asked, not in effect: on a
    machine without a GPU, autocast(device_type="cuda") disables itself, and computes in float16
    only where a GPU is."""
    autocast = torch.amp.autocast_mode.autocast
    init, enter = autocast.__init__, autocast.__enter__
    lower = (torch.float16, torch.bfloat16)

    def asked(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        self.grader_asked_enabled = bool(enabled)

    def entering(self):
        if getattr(self, "grader_asked_enabled", False) and getattr(self, "fast_dtype", None) in lower:
            entered.add(f"torch.autocast(device_type={self.device!r}, dtype={self.fast_dtype})")
        return enter(self)

    autocast.__init__, autocast.__enter__ = asked, entering


class DeterministicAlgorithms:
    """torch's deterministic algorithms, on in the worker and off as a module sees them. On, so
    that memory a submission reads before writing it (torch.empty, baddbmm's default beta=1 onto
    it) holds NaN, not whatever the allocator left there: the same file, the same score
    (torch.utils.deterministic.fill_uninitialized_memory acts only with them on; warn_only: an
    operation without a deterministic kernel still runs). Off to the module, as a program starts:
    torch.use_deterministic_algorithms and its two getters are wrapped to set and read a mode of
    the program's, which GlobalSettings reads back and restores after each request as any other
    setting (a module that turns them on is named; one that saves and restores them is not), and
    which never changes the worker's own. Set through torch._C: the public call imports
    torch._inductor to set its flag too (0.8 CPU-s)."""

    def __init__(self, torch):
        torch._C._set_deterministic_algorithms(True, warn_only=True)
        self.mode = (False, False)

        @functools.wraps(torch.use_deterministic_algorithms)
        def use_deterministic_algorithms(mode, *, warn_only=False):
            self.mode = (bool(mode), bool(warn_only))

        @functools.wraps(torch.are_deterministic_algorithms_enabled)
        def are_deterministic_algorithms_enabled():
            return self.mode[0]

        @functools.wraps(torch.is_deterministic_algorithms_warn_only_enabled)
        def is_deterministic_algorithms_warn_only_enabled():
            return self.mode[1]

        torch.use_deterministic_algorithms = use_deterministic_algorithms
        torch.are_deterministic_algorithms_enabled = are_deterministic_algorithms_enabled
        torch.is_deterministic_algorithms_warn_only_enabled = is_deterministic_algorithms_warn_only_enabled


class ThreadCount:
    """The thread count as a module sees it. The worker runs on one thread (as Gradescope's half CPU
    would anyway), so a module's set_num_threads(1) would leave the count it reads back unchanged;
    for the program that uses the module it is a change all the same. torch.get_num_threads and
    set_num_threads are wrapped to read and set a count of the program's, PROGRAM_COUNT at each
    request's start (the worker's own stays at one: every grading computes alike): a request that
    leaves it otherwise changed it, and one that sets it and puts it back inside a `with` block,
    as the statement allows, did not."""
    PROGRAM_COUNT = 8

    def __init__(self, torch):
        self.count = self.PROGRAM_COUNT

        @functools.wraps(torch.set_num_threads)
        def set_num_threads(count):
            self.count = count

        @functools.wraps(torch.get_num_threads)
        def get_num_threads():
            return self.count

        torch.set_num_threads, torch.get_num_threads = set_num_threads, get_num_threads

    def changed(self):
        """Whether the count was left other than at the request's start; it is back there after."""
        try:
            left = bool(self.count != self.PROGRAM_COUNT)
        except Exception:  # whatever the submission passed, compared as it likes
            left = True
        self.count = self.PROGRAM_COUNT
        return left


def serve(worker, requests, responses):
    while True:
        try:
            message = wire.read_message(requests)
        except EOFError:
            return
        op = message.get("op", "")
        try:
            worker.asked.clear()
            try:
                reply = {"ok": getattr(worker, "op_" + op)(**message.get("args", {}))}
            finally:
                changed = worker.settings.restored(worker.settings_at_start)
                if worker.threads.changed():
                    worker.asked.add("torch.set_num_threads")
                changed = [*changed, *sorted(worker.asked.difference(changed))[:MAX_ASKED_NAMED]][:wire.MAX_DIMENSIONS]
            if changed and op in ("build", "call"):  # the module's doing: reported (import's: only undone)
                reply["ok"]["settings_changed"] = changed
        except StudentError as exc:
            reply = {"error": exc.payload}
        except BaseException as exc:  # student code may raise anything, SystemExit included
            reply = {"error": _student_error(exc, worker.path)}
        send(responses, reply)


def send(responses, reply):
    """Flush what the submission printed, then reply: its output goes with this request's test."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # the submission may have replaced or closed them
            pass
    try:
        frame = wire.encode(reply)
    except wire.FrameTooLarge as exc:
        frame = wire.encode({"error": {"kind": "output_too_large", "message": str(tuple(exc.largest_shape))}})
    except Exception as exc:
        frame = wire.encode({"error": {"kind": "unreadable_output", "message": type(exc).__name__}})
    responses.write(frame)
    responses.flush()


def main():
    run(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])


# Where the pipes to the grader are, and what sys.argv says, as the submission sees them: the same
# whether the worker was started cold (`grade`, Gradescope) or forked from a zygote (`batch`), so
# that nothing a submission does to its file descriptors or reads from argv differs between them.
REQUEST_FD, RESPONSE_FD = 3, 4


def at_fixed_numbers(request_fd, response_fd):
    """Move the two pipes to REQUEST_FD and RESPONSE_FD (through numbers above both, so that a pipe
    already at the other's number is not overwritten); return those numbers."""
    above = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in (request_fd, response_fd)]
    for fd in {request_fd, response_fd}:
        os.close(fd)
    for fd, target in zip(above, (REQUEST_FD, RESPONSE_FD)):
        os.dup2(fd, target, inheritable=False)
        os.close(fd)
    return REQUEST_FD, RESPONSE_FD


def run(request_fd, response_fd, submission):
    """Import the submission, say whether it loaded, then answer requests until EOF."""
    request_fd, response_fd = at_fixed_numbers(request_fd, response_fd)
    sys.argv = [submission]
    requests = os.fdopen(request_fd, "rb", buffering=0)
    responses = os.fdopen(response_fd, "wb")
    worker = Worker(submission)
    try:
        try:
            worker.load_submission()
        finally:  # a script's settings at import are undone, not graded: only the classes are
            worker.settings.restored(worker.settings_at_start)
            worker.threads.changed()
        ready = {"ok": {"classes": sorted(k for k, v in vars(worker.module).items() if isinstance(v, type))}}
    except BaseException as exc:
        ready = {"error": {**_student_error(exc, worker.path), "stage": "import"}}
    send(responses, ready)
    serve(worker, requests, responses)


if __name__ == "__main__":
    main()
