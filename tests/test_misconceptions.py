"""The misconception catalog: every entry's mutation applies to the reference solution and changes
it; its float64 numpy alternative differs from the reference where its probe says; and the
mutated module, run here in torch float64 (tests are trusted code: these are our own mutations of
our own solution), returns what the alternative computes. So the mutation and the alternative
describe the same misconception. The audit command itself is tested in tests/test_audit.py."""
import ast
import contextlib
import math
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from autograder import misconceptions
from autograder.misconceptions import mutation, operators
from autograder.properties import reference

SOLUTION = mutation.solution_source()
CATALOG = misconceptions.CATALOG
IDS = [entry.id for entry in CATALOG]
RTOL, ATOL = 1e-7, 1e-9

# Probe dimensions, chosen so that the attention weights and the output never share a shape
# (the dropout masks below are looked up by shape) and every mistake can show: T < block_size,
# Tq != Tk, d_k != d_model, B == h > 1, key != value.
SA_DIMS = {"B": 2, "T": 5, "d_model": 6, "d_k": 4}
MHA_DIMS = {"B": 2, "Tq": 3, "Tk": 5, "h": 2, "d_model": 6}
CSA_DIMS = {"B": 2, "T": 5, "block_size": 7, "h": 2, "C": 6}
PROBE = {"mask": True, "scale": 1.0, "train": False, "p": 0.0, "fused": False}


def settings(entry, **overrides):
    return {**PROBE, **{k: v for k, v in entry.probe.items() if k in PROBE}, **overrides}


def random_mask(rng, *shape):
    mask = (rng.random(shape) < 0.6).astype(np.float64)
    mask[..., 0] = 1.0
    return mask


def inputs(cls, rng, probe):
    """(args for reference/alternative after params, keep masks for dropout)."""
    s, p = probe["scale"], probe["p"]
    if cls == "SelfAttention":
        B, T, d = SA_DIMS["B"], SA_DIMS["T"], SA_DIMS["d_model"]
        x = rng.standard_normal((B, T, d)) * s
        return (x, random_mask(rng, B, T, T) if probe["mask"] else None), {}
    if cls == "MultiHeadAttention":
        B, Tq, Tk, h, d = (MHA_DIMS[k] for k in ("B", "Tq", "Tk", "h", "d_model"))
        q, k, v = (rng.standard_normal((B, t, d)) * s for t in (Tq, Tk, Tk))
        drop = {"weights": rng.random((B, h, Tq, Tk)) >= p, "output": rng.random((B, Tq, d)) >= p}
        return (h, q, k, v, random_mask(rng, B, Tq, Tk) if probe["mask"] else None), drop
    B, T, h, C = (CSA_DIMS[k] for k in ("B", "T", "h", "C"))
    x = rng.standard_normal((B, T, C)) * s
    drop = {"weights": rng.random((B, h, T, T)) >= p, "output": rng.random((B, T, C)) >= p}
    return (h, x), drop


def context(cls, probe, drop):
    if cls == "SelfAttention":
        return {}
    found = {"train": probe["train"], "p": probe["p"], "drop": drop}
    if cls == "CausalSelfAttention":
        found.update(block_size=CSA_DIMS["block_size"], fused=probe["fused"])
    return found


def draw_params(module, rng):
    """float64 values for the contract layers' parameters, under the module's own names (as the grader)."""
    layers = {"SelfAttention": ("W_Q", "W_K", "W_V"), "MultiHeadAttention": ("W_Q", "W_K", "W_V", "W_O"),
              "CausalSelfAttention": ("qkv", "proj")}[type(module).__name__]
    params = {}
    for name, parameter in module.named_parameters():
        if name.rsplit(".", 1)[0] in layers:
            fan_in = parameter.shape[-1] if parameter.dim() > 1 else 4
            params[name] = rng.standard_normal(tuple(parameter.shape)) / np.sqrt(fan_in)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if name in params:
                parameter.copy_(torch.from_numpy(params[name]))
    return params


@contextlib.contextmanager
def dropout_masks(drop):
    """Make every torch dropout (F.dropout, nn.Dropout, SDPA's dropout_p) use the keep mask of
    `drop` with the shape of its input: the numpy alternative then gets the same masks."""
    by_shape = {tuple(np.shape(m)): torch.from_numpy(np.asarray(m, dtype=np.float64)) for m in (drop or {}).values()}
    used = []
    real_dropout, real_sdpa = F.dropout, F.scaled_dot_product_attention

    def fake_dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return input
        used.append(tuple(input.shape))
        return input * by_shape[tuple(input.shape)] / (1 - p)

    def fake_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.size(-1)) if scale is None else scale)
        if is_causal:
            allowed = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
            scores = scores.masked_fill(~allowed, float("-inf"))
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
        return fake_dropout(torch.softmax(scores, dim=-1), dropout_p, True) @ v

    F.dropout, F.scaled_dot_product_attention = fake_dropout, fake_sdpa
    try:
        yield used
    finally:
        F.dropout, F.scaled_dot_product_attention = real_dropout, real_sdpa


def load(source, name):
    module = types.ModuleType(f"mutant_{name}")
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


def run_torch(namespace, cls, probe, args, drop, rng):
    """Build `cls` from the mutated source, load fresh float64 parameters, run it on `args`
    (as the reference takes them) with the dropout masks of `drop`; (params, outputs)."""
    if cls == "SelfAttention":
        module = namespace.SelfAttention(SA_DIMS["d_model"], SA_DIMS["d_k"])
    elif cls == "MultiHeadAttention":
        module = namespace.MultiHeadAttention(MHA_DIMS["d_model"], MHA_DIMS["h"], dropout=probe["p"])
    else:
        module = namespace.CausalSelfAttention(namespace.Cfg(n_embd=CSA_DIMS["C"], n_head=CSA_DIMS["h"],
                                                             block_size=CSA_DIMS["block_size"], dropout=probe["p"]))
    module = module.double().train(probe["train"])
    params = draw_params(module, rng)
    tensors = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    with torch.no_grad(), dropout_masks(drop):
        if cls == "SelfAttention":
            result = module(*tensors)
        elif cls == "MultiHeadAttention":
            result = module(*tensors[1:])
        else:
            result = module(tensors[1], fused=probe["fused"])
    result = result if isinstance(result, tuple) else (result,)
    return params, [r.numpy() for r in result]


def as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def close(a, b):
    return all(np.shape(x) == np.shape(y) and np.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True)
               for x, y in zip(as_tuple(a), as_tuple(b)))


def correct(cls, params, args, ctx):
    return misconceptions.catalog.COMPUTE[cls](params, *args, **ctx)


def reference_of(cls, params, args):
    if cls == "MultiHeadAttention" and "W_O.weight" not in params:  # a module without W_O: any W_O will do
        d_model = params["W_Q.weight"].shape[0]
        params = {**params, "W_O.weight": np.random.default_rng(99).standard_normal((d_model, d_model))}
    if cls == "SelfAttention":
        return reference.self_attention(params, *args)
    if cls == "MultiHeadAttention":
        return reference.multi_head_attention(params, *args)
    return reference.causal_self_attention(params, *args)


# ---- the catalog's shape ---------------------------------------------------------------------
@pytest.mark.unit
def test_the_catalog_has_at_least_25_misconceptions_each_documented():
    assert len(CATALOG) >= 25 and len(set(IDS)) == len(IDS)
    from autograder import config

    graded = {(p.cls, p.name) for p in config.load().properties}
    for entry in CATALOG:
        assert entry.cls in config.CLASSES and entry.kind in misconceptions.KINDS
        assert entry.es.strip() and entry.en.strip() and entry.es != entry.en, entry.id
        assert entry.explains and all((entry.cls, prop) in graded for prop in entry.explains), entry.id
        assert entry.edits and all(edit.cls == entry.cls for edit in entry.edits), entry.id


@pytest.mark.unit
def test_every_misconception_is_different_code():
    codes = {}
    for entry in CATALOG:
        codes.setdefault(mutation.code_key(entry.mutate()), []).append(entry.id)
    assert [ids for ids in codes.values() if len(ids) > 1] == []


@pytest.mark.unit
def test_a_pattern_that_is_not_there_fails_loudly():
    edit = mutation.Replace("SelfAttention", "forward", "Q @ K.transpose(-1, -2)", "Q")
    with pytest.raises(mutation.MutationError, match="found it 0 time"):
        mutation.apply([edit])
    with pytest.raises(mutation.MutationError, match="no method"):
        mutation.apply([mutation.Replace("SelfAttention", "backward", "x", "y")])
    twice = mutation.Replace("MultiHeadAttention", "__init__", "nn.Linear(d_model, d_model, bias=False)", "x")
    with pytest.raises(mutation.MutationError, match="found it 4 time"):
        mutation.apply([twice])


# ---- the numpy model ---------------------------------------------------------------------------
@pytest.mark.parametrize("cls", ["SelfAttention", "MultiHeadAttention", "CausalSelfAttention"])
def test_the_model_without_switches_is_the_reference(cls):
    rng = np.random.default_rng(0)
    namespace = load(mutation.normalized(SOLUTION), "solution")
    for mask in (True, False):
        probe = settings(misconceptions.of_class(cls)[0], mask=mask, train=False, p=0.0)
        args, drop = inputs(cls, rng, probe)
        params, _ = run_torch(namespace, cls, probe, args, drop, rng)
        assert close(correct(cls, params, args, context(cls, probe, drop)), reference_of(cls, params, args))


@pytest.mark.parametrize("cls", ["MultiHeadAttention", "CausalSelfAttention"])
@pytest.mark.parametrize("fused", [False, True])
def test_the_solution_in_train_mode_is_the_model_with_its_dropout_masks(cls, fused):
    if fused and cls != "CausalSelfAttention":
        pytest.skip("only the causal class has a fused path")
    rng = np.random.default_rng(1)
    namespace = load(mutation.normalized(SOLUTION), "solution")
    probe = {**PROBE, "train": True, "p": 0.5, "fused": fused}
    args, drop = inputs(cls, rng, probe)
    params, got = run_torch(namespace, cls, probe, args, drop, rng)
    assert close(tuple(got), correct(cls, params, args, context(cls, probe, drop)))
    assert not close(tuple(got), reference_of(cls, params, args))  # the masks did act


def test_the_fake_sdpa_is_torchs_without_dropout():
    rng = np.random.default_rng(2)
    q, k, v = (torch.from_numpy(rng.standard_normal((2, 2, 5, 3))) for _ in range(3))
    real = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with dropout_masks({}):
        fake = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(real, fake, rtol=1e-10, atol=1e-12)


# ---- every entry -------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("misconception_id", IDS)
def test_the_mutation_applies_and_changes_the_solution(misconception_id):
    entry = misconceptions.get(misconception_id)
    source = entry.mutate()
    compile(source, misconception_id, "exec")
    assert not mutation.same_code(source, SOLUTION)
    before, after = classes(SOLUTION), classes(source)
    assert before.keys() == after.keys()
    assert [name for name in before if before[name] != after[name]] == [entry.cls]


def classes(source):
    """Each class of a module, as its AST (positions left out)."""
    return {node.name: ast.dump(node) for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}


@pytest.mark.parametrize("misconception_id", IDS)
def test_the_alternative_differs_from_the_reference_where_its_probe_says(misconception_id):
    """On some of a few random draws (a -1e4 fill shows only on a row whose open scores are all
    below -1e4, say); a structural mistake computes the reference on every draw."""
    entry = misconceptions.get(misconception_id)
    namespace = load(entry.mutate(), entry.id)
    differs = []
    for seed in range(10, 15):
        rng = np.random.default_rng(seed)
        probe = settings(entry)
        args, drop = inputs(entry.cls, rng, probe)
        params, _ = run_torch(namespace, entry.cls, probe, args, drop, rng)
        ctx = context(entry.cls, probe, drop)
        alternative = entry.compute(params, *args, **ctx)
        if entry.kind == "dropout":  # the same masks in a correct module give something else
            differs.append(not close(alternative, correct(entry.cls, params, args, ctx)))
        else:
            differs.append(not close(alternative, reference_of(entry.cls, params, args)))
    if entry.kind == "structural":
        assert not any(differs)
    else:
        assert any(differs)


@pytest.mark.parametrize("misconception_id", IDS)
def test_the_mutated_module_computes_the_alternative(misconception_id):
    entry = misconceptions.get(misconception_id)
    rng = np.random.default_rng(20)
    namespace = load(entry.mutate(), entry.id)
    probes = [settings(entry)]
    if entry.cls != "SelfAttention":  # the same mistake in train mode, and through the fused path
        probes += [settings(entry, train=True, p=0.5)]
    if entry.cls == "CausalSelfAttention":
        probes += [settings(entry, fused=True), settings(entry, fused=True, train=True, p=0.5)]
    for probe in probes:
        args, drop = inputs(entry.cls, rng, probe)
        params, got = run_torch(namespace, entry.cls, probe, args, drop, rng)
        expected = entry.compute(params, *args, **context(entry.cls, probe, drop))
        assert close(tuple(got), expected), (probe, np.nanmax(np.abs(got[0] - as_tuple(expected)[0])))


def test_a_mask_without_the_head_axis_broadcasts_as_in_torch():
    """With one head, a (B, Tq, Tk) mask left without the head axis broadcasts the scores to
    (B, B, Tq, Tk): the alternative returns those shapes too, as the mutated module does."""
    entry = misconceptions.get("mha_mask_without_head_axis")
    namespace = load(entry.mutate(), entry.id)
    rng = np.random.default_rng(30)
    module = namespace.MultiHeadAttention(4, 1, dropout=0.0).double().eval()
    params = draw_params(module, rng)
    q, k, v = (rng.standard_normal((2, t, 4)) for t in (3, 5, 5))
    mask = random_mask(rng, 2, 3, 5)
    with torch.no_grad():
        got = [r.numpy() for r in module(*(torch.from_numpy(a) for a in (q, k, v, mask)))]
    expected = entry.compute(params, 1, q, k, v, mask)
    assert got[1].shape == (2, 2, 3, 5) and close(tuple(got), expected)


def test_the_divisibility_mistake_builds_what_the_reference_refuses():
    namespace = load(misconceptions.get("mha_no_divisibility_check").mutate(), "divisibility")
    with pytest.raises(ValueError):
        load(mutation.normalized(SOLUTION), "solution").MultiHeadAttention(7, 2)
    namespace.MultiHeadAttention(7, 2)


# ---- generic operators ---------------------------------------------------------------------------
def test_generic_operators_yield_valid_distinct_mutants_deterministically():
    first = operators.mutants(SOLUTION, per_operator=4, seed=0)
    again = operators.mutants(SOLUTION, per_operator=4, seed=0)
    assert [m.id for m in first] == [m.id for m in again] and first
    assert {m.operator for m in first} == set(operators.OPERATORS)
    for mutant in first:
        compile(mutant.source, mutant.id, "exec")
        assert not mutation.same_code(mutant.source, SOLUTION), mutant.id
        assert mutant.cls in ("SelfAttention", "MultiHeadAttention", "CausalSelfAttention")
    assert all(len([m for m in first if m.operator == op]) <= 4 for op in operators.OPERATORS)


def test_a_keep_mask_of_another_shape_is_refused_not_broadcast():
    """Masks are read off what a module returned: one of shape (65536, 1, 1, 1) against weights
    (1, 4, 64, 64) would broadcast to 2 GiB of float64 inside the grader."""
    from autograder.misconceptions import model

    weights = np.full((1, 4, 64, 64), 1 / 64)
    with pytest.raises(ValueError, match="keep mask"):
        model.dropout(weights, "weights", {"weights": np.ones((65536, 1, 1, 1), bool)}, 0.1)
    assert model.dropout(weights, "weights", {"weights": np.ones(weights.shape, bool)}, 0.5).max() == 2 / 64
