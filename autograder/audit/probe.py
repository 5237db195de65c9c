"""Is a mutant that passed every property equivalent to the reference solution?

The mutant and the reference are each run in a sandboxed worker (the same isolation as grading,
forked from a warm zygote as in batch: mutants are code like a student's, and never run here),
on fixed probes: every class built with the grader's parameters, called in eval and train mode
(with the same seeds), with and without masks, on inputs of scale 1 and 1000, through both causal
paths, with gradients, on the meta device, split_heads, a constructor that must refuse
d_model % h != 0 (and n_embd % n_head != 0), a MultiHeadAttention built with its default dropout, and the structure the
worker describes (parameters, buffers, biases). A mutant is equivalent when every answer matches
the reference's: arrays within rtol 1e-5 / atol 1e-6 (NaN matching NaN), errors by kind and
type. Train-mode outputs are compared too, so a mutant that draws its dropout differently is not
equivalent even where its distribution is right.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..grade import close_to_workers
from ..properties.harness import BUILD_CONFIG, CONTRACT_LAYERS
from ..worker.submission_errors import SubmissionError, SubmissionHalted
from ..worker.sandbox import worker_uid

RTOL, ATOL = 1e-5, 1e-6


def _gaussian(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _mask(rng, *shape):
    mask = (rng.random(shape) < 0.6).astype(np.float32)
    mask[..., 0] = 1.0
    return mask


def _call(args=(), method="forward", train=False, seed=0, grad=False, trace=(), device="cpu", **kwargs):
    return {"method": method, "args": list(args), "kwargs": kwargs, "train": train, "seed": seed, "grad": grad,
            "trace": list(trace), "device": device}


def probes():
    """[(name, class, constructor kwargs, load parameters?, [call options])]: fixed, so that the
    reference and every mutant answer the same questions."""
    rng = np.random.default_rng(20260)
    found = []
    for name, d_model, d_k in (("sa", 6, 4), ("sa_square", 5, None)):
        B, T = 2, 5
        x = _gaussian(rng, B, T, d_model)
        kwargs = {"d_model": d_model, **({"d_k": d_k} if d_k else {})}
        found.append((name, "SelfAttention", kwargs, True, [
            _call([x]), _call([x], mask=_mask(rng, B, T, T)), _call([x], mask=_mask(rng, 1, T, T)),
            _call([x], mask=np.tril(np.ones((T, T), np.float32))),
            _call([_gaussian(rng, B, T, d_model, scale=1e3)], mask=_mask(rng, B, T, T)),
            _call([x], mask=_mask(rng, B, T, T), grad=True), _call([x], mask=_mask(rng, B, T, T), device="meta"),
        ]))
    B, Tq, Tk, h, d = 3, 4, 5, 3, 6
    q, k, v = _gaussian(rng, B, Tq, d), _gaussian(rng, B, Tk, d), _gaussian(rng, B, Tk, d)
    big = [_gaussian(rng, B, t, d, scale=1e3) for t in (Tq, Tk, Tk)]
    mha_calls = [
        _call([q, k, v]), _call([q, k, v], mask=_mask(rng, B, Tq, Tk)), _call([q, k, v], mask=_mask(rng, B, 1, Tq, Tk)),
        _call([q, k, v], mask=_mask(rng, 1, Tq, Tk)), _call([q, k, v], seed=1), _call([q, k, v], seed=2),
        _call([q, k, v], train=True, seed=3), _call([q, k, v], mask=_mask(rng, B, Tq, Tk), train=True, seed=4),
        _call(big, mask=_mask(rng, B, Tq, Tk)), _call([q, k, v], grad=True, seed=5),
        _call([q, k, v], mask=_mask(rng, B, Tq, Tk), device="meta"), _call([q, B], method="split_heads"),
    ]
    found.append(("mha", "MultiHeadAttention", {"d_model": d, "num_heads": h, "dropout": 0.3}, True, mha_calls))
    found.append(("mha_one_head", "MultiHeadAttention", {"d_model": 4, "num_heads": 1, "dropout": 0.5}, True,
                  [_call([_gaussian(rng, 2, 3, 4), _gaussian(rng, 2, 6, 4), _gaussian(rng, 2, 6, 4)],
                         mask=_mask(rng, 2, 3, 6), train=True, seed=6)]))
    found.append(("mha_default_dropout", "MultiHeadAttention", {"d_model": d, "num_heads": h}, True,
                  [_call([q, k, v], train=True, seed=7)]))
    found.append(("mha_not_divisible", "MultiHeadAttention", {"d_model": 7, "num_heads": 2}, False, []))
    B, T, block, h, C = 2, 5, 7, 2, 6
    x = _gaussian(rng, B, T, C)
    causal_calls = [
        _call([x]), _call([x], fused=True), _call([x], seed=1), _call([x], fused=True, seed=2),
        _call([x], train=True, seed=3), _call([x], fused=True, train=True, seed=4),
        _call([_gaussian(rng, B, block, C)]), _call([_gaussian(rng, B, block, C)], fused=True),
        _call([_gaussian(rng, B, T, C, scale=1e3)]), _call([x], grad=True, seed=5),
        _call([x], fused=True, grad=True, seed=6), _call([x], fused=True, trace=["scaled_dot_product_attention"]),
        _call([x], device="meta"), _call([x], fused=True, device="meta"),
    ]
    found.append(("causal", "CausalSelfAttention", {"n_embd": C, "n_head": h, "block_size": block, "dropout": 0.3},
                  True, causal_calls))
    found.append(("causal_not_divisible", "CausalSelfAttention", {"n_embd": 7, "n_head": 2, "block_size": 4}, False, []))
    found.append(("causal_one_token", "CausalSelfAttention", {"n_embd": 4, "n_head": 4, "block_size": 3, "dropout": 0.0},
                  True, [_call([_gaussian(rng, 3, 1, 4)]), _call([_gaussian(rng, 3, 1, 4)], fused=True)]))
    return found


def _plain(answer):
    """What a worker answer says, without what may legitimately differ (messages, line numbers)."""
    if isinstance(answer, SubmissionError):
        return {"error": answer.kind, "type": answer.exc_type}
    return answer


# The probes run trusted mutations of our own solution, on a machine that may be busy grading:
# the grader's per-request deadlines are for students; here a slow answer must not look like a
# difference. Memory and the other limits stay grading.yml's.
PROBE_TIMEOUTS = {"import_s": 300, "request_s": 120, "class_s": 900, "submission_s": 1800}


class Prober:
    """Fingerprints of sources, each run in a fresh sandboxed worker forked from one warm zygote
    (cohort/warm.py, as batch slots do) when the grader is root, else started as `grade` does."""

    def __init__(self, limits, slot=0):
        from ..cohort.warm import Zygote, worker_class

        self.limits = dataclasses.replace(limits, **{k: max(getattr(limits, k), v) for k, v in PROBE_TIMEOUTS.items()})
        self.slot = slot
        self.zygote = Zygote()
        self.worker_class = worker_class(slot, self.zygote)
        self.reference = None

    def fingerprint(self, source):
        """{probe: [answers]} of `source` (a module's text), run in a sandboxed worker."""
        uid = worker_uid(self.slot)
        if uid is not None:
            close_to_workers()
        worker = self.worker_class(source, self.limits, uid=uid)
        worker.start()
        found = {}
        try:
            for number, (name, cls, kwargs, load, calls) in enumerate(probes()):
                handle = f"probe{number}"
                build = {"cls": cls, "kwargs": kwargs, "handle": handle, "config": BUILD_CONFIG[cls],
                         "load": {"seed": [number, 7], "layers": list(CONTRACT_LAYERS[cls])} if load else None}
                requests = [("build", build), *(("call", {"handle": handle, **c}) for c in calls)]
                if load:
                    requests.append(("describe", {"handle": handle}))
                try:
                    found[name] = [_plain(a) for a in worker.calls(cls, requests)]
                except SubmissionHalted as halted:
                    found[name] = {"halted": halted.error.kind}
        finally:
            worker.stop()
        return found

    def compare(self, reference_source, source):
        """(equal, first difference): equal is None when the reference itself could not answer."""
        if self.reference is None or _halted(self.reference):
            self.reference = self.fingerprint(reference_source)
        if _halted(self.reference):
            return None, "the reference solution did not answer every probe: " + _halted(self.reference)
        found = difference(self.reference, self.fingerprint(source))
        return found is None, found

    def close(self):
        self.zygote.close()


def _halted(fingerprint):
    stopped = [f"{name} ({value['halted']})" for name, value in fingerprint.items() if isinstance(value, dict)]
    return ", ".join(stopped)


def difference(expected, got, path=""):
    """None when `got` matches `expected`, else a short description of the first difference."""
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        if not (isinstance(expected, np.ndarray) and isinstance(got, np.ndarray)):
            return f"{path}: {_kind(expected)} vs {_kind(got)}"
        if expected.shape != got.shape:
            return f"{path}: shape {list(expected.shape)} vs {list(got.shape)}"
        if expected.dtype.kind != got.dtype.kind:
            return f"{path}: dtype {expected.dtype} vs {got.dtype}"
        if expected.dtype.kind in "fc":
            if not np.allclose(got, expected, rtol=RTOL, atol=ATOL, equal_nan=True):
                with np.errstate(invalid="ignore"):
                    gap = np.nanmax(np.abs(got.astype(np.float64) - expected)) if got.size else 0.0
                return f"{path}: values differ (max |Δ| {gap:.3g})"
            return None
        return None if np.array_equal(expected, got) else f"{path}: values differ"
    if isinstance(expected, dict) and isinstance(got, dict):
        if set(expected) != set(got):
            return f"{path}: keys {sorted(expected)} vs {sorted(got)}"
        for key in expected:
            found = difference(expected[key], got[key], f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return f"{path}: {len(expected)} items vs {len(got)}"
        for index, (a, b) in enumerate(zip(expected, got)):
            found = difference(a, b, f"{path}[{index}]")
            if found:
                return found
        return None
    return None if expected == got else f"{path}: {_short(expected)} vs {_short(got)}"


def _kind(value):
    return "array" if isinstance(value, np.ndarray) else type(value).__name__


def _short(value):
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."
