"""Checks that name another property's mistake instead of measuring their own through it (issue 10,
"no collateral failures"), on plain arrays and CPU torch, without a worker: each recognises the
mistake it points at, still fails the mistake it is about, and passes correct modules (float32 and
float64, with and without a bias where that matters)."""
import numpy as np
import pytest
import torch

from autograder.properties import checks, reference
from autograder.properties.failures import PropertyFailure
from autograder.properties import harness
from autograder.worker.submission_errors import SubmissionError

pytestmark = pytest.mark.unit  # plain arrays and CPU torch: no worker


def code_of(check, *args, **kwargs):
    try:
        check(*args, **kwargs)
    except PropertyFailure as failure:
        return failure.code
    return None


def mask_of(rng, *shape):
    """harness.random_mask's masks: 0/1 with column 0 always open."""
    mask = rng.random(shape) < 0.6
    mask[..., 0] = True
    return mask.astype(np.float32)


def weights_of(scores, mask=None, axis=-1, fill=-np.inf, flipped=False, dtype=np.float32):
    """Attention weights as a module computes them: masked_fill(mask == 0, fill) (mask == 1 when
    flipped), then a softmax over `axis`, in `dtype` (torch, as a submission would)."""
    s = torch.tensor(scores, dtype=torch.float64).to(getattr(torch, np.dtype(dtype).name))
    if mask is not None:
        m = torch.tensor(np.broadcast_to(mask, scores.shape))
        s = s.masked_fill(m == (1 if flipped else 0), fill)
    return torch.softmax(s, dim=axis).double().numpy()


@pytest.fixture
def scores():
    return np.random.default_rng(3).standard_normal((2, 3, 5, 6))  # (B, h, Tq, Tk)


@pytest.fixture
def mask():
    return mask_of(np.random.default_rng(4), 2, 1, 5, 6)


# ---- rows_sum_to_one in eval ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_correct_softmax_sums_to_one_with_and_without_a_mask(scores, mask, dtype):
    expected = reference.softmax(scores)
    assert code_of(checks.rows_sum_to_one_in_eval, weights_of(scores, dtype=dtype), expected, 0.3) is None
    expected = weights_of(scores, mask, dtype=np.float64)
    assert code_of(checks.rows_sum_to_one_in_eval, weights_of(scores, mask, dtype=dtype), expected, 0.3, True) is None


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_dropout_in_eval_is_named_as_eval_deterministic_s_mistake(scores, p):
    expected = reference.softmax(scores)
    kept = np.random.default_rng(5).random(scores.shape) >= p
    dropped = (weights_of(scores) * kept / (1 - p)).astype(np.float32).astype(np.float64)
    assert code_of(checks.rows_sum_to_one_in_eval, dropped, expected, 0.3) == "rows_dropped_in_eval"
    # the smallest example: one weight, dropped
    one = np.ones((1, 1, 1, 1))
    assert code_of(checks.rows_sum_to_one_in_eval, 0 * one, one, 0.3) == "rows_dropped_in_eval"


def test_other_wrong_rows_keep_their_own_failure(scores):
    expected = reference.softmax(scores)
    over_queries = weights_of(scores, axis=-2)
    assert code_of(checks.rows_sum_to_one_in_eval, over_queries, expected, 0.3) == "rows_do_not_sum_to_one"
    # A constant factor alone is dropout's only when it is 1/(1-p) (nothing happened to be dropped).
    assert code_of(checks.rows_sum_to_one_in_eval, 2 * weights_of(scores), expected, 0.3) == "rows_do_not_sum_to_one"
    assert code_of(checks.rows_sum_to_one_in_eval, weights_of(scores) / 0.7, expected, 0.3) == "rows_dropped_in_eval"
    assert code_of(checks.rows_sum_to_one_in_eval, weights_of(scores) / 0.7, expected, 0.0) == "rows_do_not_sum_to_one"
    unnormalised = np.exp(scores)  # not c·softmax for one c
    assert code_of(checks.rows_sum_to_one_in_eval, unnormalised, expected, 0.3) == "rows_do_not_sum_to_one"
    nan = weights_of(scores).copy()
    nan[0, 0, 0] = np.nan
    # without a mask, a row that is not finite is named as such: something before the softmax
    assert code_of(checks.rows_sum_to_one_in_eval, nan, expected, 0.3) == "weights_not_finite"


def test_nan_rows_under_a_mask_point_at_masked_zero(scores, mask):
    mask = mask.copy()
    mask[..., 1, :] = 1  # a row the mask leaves all open: read the other way, all closed
    flipped = weights_of(scores, mask, flipped=True)
    assert np.isnan(flipped[..., 1, :]).all() and np.isfinite(flipped[..., 0, :]).all()
    expected = weights_of(scores, mask, dtype=np.float64)
    assert code_of(checks.rows_sum_to_one_in_eval, flipped, expected, 0.3, True) == "masked_rows_nan_upstream"


# ---- masked_zero: a softmax over the queries -----------------------------------------------------

class MaskReply(tuple):
    """A call's (output, weights), with the inputs it changed in place (none)."""
    modified = requires_grad_changed = rebound = ()
    call = None  # what a failure would name (harness.Reply's): nothing here


class Replies:
    """A module for masks_accepted: each call's weights computed by `weights(mask)`, and its output
    from them (weights @ VALUES)."""

    _pending_build = None

    def __init__(self, weights):
        self.weights = weights

    def runs(self, *calls):
        weights = [self.weights(options["mask"]) for _, options in calls]
        return [MaskReply((w @ VALUES, w)) for w in weights]

    def run(self, *args, **options):
        return self.runs((args, options))[0]


VALUES = np.random.default_rng(5).standard_normal((6, 2))


def masks_accepted_code(module, scores, masks, fresh=None):
    """masks_accepted's verdict, the reference being a right softmax over the scores, in float64;
    fresh(): a new module like `module` (by default, module itself)."""
    def expected(i):
        weights = weights_of(scores, masks[i], dtype=np.float64)
        return [(weights @ VALUES, 0.0, 1.0, "output"), (weights, 0.0, 1.0, "weights")]

    def canonical(mask, batch):  # no inputs here: the scores' batch, the mask's broadcast
        return [(np.broadcast_to(mask, (2, 1, 5, 6)).astype(np.float32), None)]

    return code_of(checks.masks_accepted, module, [((scores,), {"mask": m}) for m in masks], lambda i, reply: reply, masks,
                   expected, {"mask": "mask"}, fresh or (lambda: module), canonical)


def masked_zero_code(scores, masks, **how):
    return masks_accepted_code(Replies(lambda m: weights_of(scores, m, **how)), scores, masks)


def test_a_softmax_over_the_queries_points_at_rows_sum_to_one(scores):
    closing = np.ones((2, 1, 5, 6), np.float32)
    closing[..., 2] = 0  # column 2 closed for every query
    assert masked_zero_code(scores, [closing], axis=-2) == "masked_column_nan_upstream"
    assert masked_zero_code(scores, [closing]) is None
    assert masked_zero_code(scores, [closing], dtype=np.float64) is None


def test_masks_read_wrongly_still_fail_masked_zero(scores, mask):
    assert masked_zero_code(scores, [mask], flipped=True) in ("masked_weight_not_zero_mask", "masked_row_not_finite")
    all_open = np.ones((2, 1, 5, 6), np.float32)
    assert masked_zero_code(scores, [all_open], flipped=True) == "masked_row_not_finite"
    assert masked_zero_code(scores, [mask], fill=-1e4) is None  # at magnitude ~1, -1e4 is still exactly 0
    # a softmax over the queries AND a leak: the leak is masked_zero's own
    leaking = Replies(lambda m: np.where(np.broadcast_to(m, scores.shape) == 0, 0.5, weights_of(scores, m, axis=-2)))
    assert masks_accepted_code(leaking, scores, [mask]) == "masked_weight_not_zero_mask"


# ---- masked_zero: every form of mask means the same ----------------------------------------------

def forms(mask):
    """No mask, the first mask (float32, as reference_match sends it), the same rule as bool, long
    and 2-D, and another float32 mask of the first form last (harness.other_mask)."""
    return [None, mask, mask.astype(bool), mask.astype(np.int64), mask[0, 0], harness.other_mask(mask)]


@pytest.mark.parametrize("mistake", [
    lambda scores, m: weights_of(scores * (2 if m is not None and m.dtype == np.int64 else 1), m),  # long: another path
    lambda scores, m: weights_of(scores) * m if m is not None and m.dtype == bool else weights_of(scores, m),  # after softmax
    lambda scores, m: weights_of(scores, m * np.tril(np.ones(m.shape)) if m is not None and m.ndim == 2 else m),  # made causal
])
def test_a_mask_form_read_another_way_fails_masked_zero_once_the_first_form_is_right(scores, mask, mistake):
    """Blocked weights stay 0 in each of these, yet the open ones are wrong: only comparing every
    form of mask with the reference sees it (the wrong files of issue 10's second round)."""
    module = Replies(lambda m: mistake(scores, m))
    assert masks_accepted_code(module, scores, forms(mask)) == "mask_form_mismatch"


def test_a_mask_kept_from_the_first_call_fails_masked_zero(scores, mask):
    def keeping():
        first = []
        return Replies(lambda m: weights_of(scores, m if m is None else first[0] if first else first.append(m) or m))

    # a fresh module given the later mask closes what this one leaked: the mask came from before
    assert masks_accepted_code(keeping(), scores, [None, mask, harness.other_mask(mask)], keeping) == (
        "mask_from_earlier_call")


def test_attention_wrong_on_some_inputs_whatever_the_mask_is_not_blamed_on_a_mask_form(scores, mask):
    """Right without a mask and with the first one, wrong with the long mask of the same rule, and
    as wrong with that rule as a float32 (B, Tq, Tk) mask: the inputs decide, not the mask's form
    (an online softmax that forgets to rescale, say). That is reference_match's to report."""
    seen = []

    def some_inputs(m):
        seen.append(m)
        # call 4, then the same input on a fresh module (call 7) and the twin's call (8)
        return weights_of(scores * (3 if len(seen) in (4, 7, 8) else 1), m)

    assert masks_accepted_code(Replies(some_inputs), scores, forms(mask)) is None
    seen.clear()  # where a fresh module misses as well but the first form gives other outputs, the form is to blame
    long_read_wrong = Replies(lambda m: weights_of(scores * (3 if m is not None and m.dtype == np.int64 else 1), m))
    assert masks_accepted_code(Replies(some_inputs), scores, forms(mask), lambda: long_read_wrong) == "mask_form_mismatch"
    seen.clear()  # where a fresh module gets it right, the miss came from the calls before
    right = Replies(lambda m: weights_of(scores, m))
    assert masks_accepted_code(Replies(some_inputs), scores, forms(mask), lambda: right) == "depends_on_earlier_calls"


def test_every_correct_form_passes_and_a_module_wrong_with_every_mask_is_not_judged_here(scores, mask):
    assert masked_zero_code(scores, forms(mask)) is None
    assert masked_zero_code(scores, forms(mask), dtype=np.float64) is None
    unscaled = Replies(lambda m: weights_of(scores * 3, m))  # wrong with every mask: reference_match's mistake
    assert masks_accepted_code(unscaled, scores, forms(mask)) is None
    # right with the first mask (by chance: few open keys), wrong without one: not a matter of mask forms
    by_chance = Replies(lambda m: weights_of(scores, m) if m is not None and m.dtype == np.float32 else weights_of(scores * 3, m))
    assert masks_accepted_code(by_chance, scores, forms(mask)) is None


def test_a_mask_changed_in_place_fails_masked_zero_where_reference_match_cannot_see_it(scores, mask):
    class Modifying(Replies):
        changed_call = 1  # the first mask form, which reference_match sends too

        def runs(self, *calls):
            replies = super().runs(*calls)
            changed = [MaskReply(r) for r in replies]
            changed[self.changed_call].modified = ["mask"]
            return changed

    assert masks_accepted_code(Modifying(lambda m: weights_of(scores, m)), scores, forms(mask)) is None  # the first form: reference_match reports it
    Modifying.changed_call = 2  # the bool mask, a form reference_match does not send
    assert masks_accepted_code(Modifying(lambda m: weights_of(scores, m)), scores, forms(mask)) == "input_modified"


# ---- large_inputs: what already fails at magnitude ~1 --------------------------------------------

def large_code(scores, mask, **how):
    """stable_when_large for a module with `how`'s mistake: the same scores at magnitude ~1 and ~1e6."""
    calls = [(s, m) for s in (scores * 1e6, scores) for m in (None, mask)]
    results = [(weights_of(s, m, **how) @ np.ones((6, 2)), weights_of(s, m, **how)) for s, m in calls]
    return code_of(checks.stable_when_large, results[:2], [mask], lambda: results[2:], [None, None])


@pytest.mark.parametrize("how, code", [
    ({}, None),
    ({"dtype": np.float64}, None),
    ({"fill": -1e9}, None),
    ({"fill": -1e4}, "masked_weight_not_zero_large"),
    ({"flipped": True}, "masked_weight_not_zero_upstream"),
    ({"axis": -2}, "rows_do_not_sum_to_one_upstream"),
])
def test_large_inputs_judges_magnitude_alone(scores, mask, how, code):
    assert large_code(scores, mask, **how) == code


def test_large_inputs_asks_for_magnitude_1_only_after_a_failure(scores, mask):
    """A module stable at magnitude ~1e6 costs no second exchange."""
    large = [(weights_of(s, m) @ np.ones((6, 2)), weights_of(s, m)) for s, m in ((scores * 1e6, None), (scores * 1e6, mask))]

    def not_needed():
        raise AssertionError("the calls at magnitude ~1 were asked for")

    assert code_of(checks.stable_when_large, large, [mask], not_needed, [None, None]) is None


# ---- CausalSelfAttention's resid_drop, with and without proj's bias ----------------------------------

def causal_module(heads, width, p, biased=True, resid=True):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "solutions" / "attention.py"
    spec = importlib.util.spec_from_file_location("solution", path)
    solution = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solution)
    module = solution.CausalSelfAttention(solution.Cfg(n_embd=width, n_head=heads, block_size=8, dropout=p))
    if not biased:
        module.qkv.bias = None
        module.proj.bias = None
    if not resid:
        module.resid_drop = torch.nn.Identity()
    return module.train()


def trained_output(module, B, T, C, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        return module(torch.randn(B, T, C)).double().numpy()


@pytest.mark.parametrize("heads, width, T, p", [(1, 1, 2, 0.5), (1, 1, 2, 0.75), (2, 2, 3, 0.25), (1, 3, 4, 0.5)])
@pytest.mark.parametrize("biased", [True, False])
def test_a_correct_dropout_passes_with_or_without_proj_bias(heads, width, T, p, biased):
    B = max(-(-checks.DROPOUT_DRAWS // (T * width)), -(-128 // heads))  # as test_train_dropout sizes it
    module = causal_module(heads, width, p, biased)
    codes = [code_of(checks.resid_dropout_zeros, trained_output(module, B, T, width, seed), p, heads, biased, "x")
             for seed in range(20)]
    assert codes == [None] * 20


def test_the_old_count_took_a_biasless_proj_s_zeros_for_resid_drop():
    """Why the model of zeros has q_t: without a bias, counting every zero as resid_drop's (q_t = 0)
    rejects a correct dropout (causal_no_bias lost train_dropout so)."""
    heads, width, T, p = 1, 1, 2, 0.5
    module = causal_module(heads, width, p, biased=False)
    trained = trained_output(module, 1024, T, width, 0)
    assert code_of(checks.resid_dropout_zeros, trained, p, heads, True, "fused=False") == "dropout_wrong_rate"
    assert code_of(checks.resid_dropout_zeros, trained, p, heads, False, "fused=False") is None


@pytest.mark.parametrize("biased", [True, False])
def test_resid_drop_missing_or_at_another_rate_still_fails(biased):
    heads, width, T, p = 2, 4, 3, 0.5
    B = 256
    missing = causal_module(heads, width, p, biased, resid=False)
    assert code_of(checks.resid_dropout_zeros, trained_output(missing, B, T, width, 0), p, heads, biased, "x") == \
        ("resid_dropout_missing" if biased else "dropout_wrong_rate")
    other_rate = causal_module(heads, width, 0.25, biased)  # nn.Dropout(0.25) where p = 0.5 was asked
    assert code_of(checks.resid_dropout_zeros, trained_output(other_rate, B, T, width, 0), p, heads, biased, "x") == \
        "dropout_wrong_rate"


def test_nan_rows_are_left_out_of_the_count_and_all_nan_points_at_causality():
    heads, width, T, p = 1, 2, 3, 0.5
    trained = trained_output(causal_module(heads, width, p), 512, T, width, 0)
    with_nan = trained.copy()
    with_nan[:, -1] = np.nan  # a last row that sees nothing (a flipped causal mask)
    assert code_of(checks.resid_dropout_zeros, with_nan, p, heads, True, "x") is None
    all_nan = np.full_like(trained, np.nan)
    assert code_of(checks.resid_dropout_zeros, all_nan, p, heads, True, "x") == "output_nan_upstream"


def test_the_model_s_mean_is_the_observed_mean_without_bias():
    """Not just inside 7 sigmas: the mean of many draws matches C·(q_t + (1-q_t)·p) to 1%."""
    heads, width, T, p = 1, 2, 3, 0.5
    trained = trained_output(causal_module(heads, width, p, biased=False), 20000, T, width, 0)
    q = p ** (heads * (np.arange(T) + 1.0))
    observed = (trained == 0).mean(axis=(0, 2))
    assert np.allclose(observed, q + (1 - q) * p, atol=0.01), (observed, q + (1 - q) * p)


# ---- gradients downstream of NaN ------------------------------------------------------------------

class Reply:
    def __init__(self, *outputs):
        self.outputs = list(outputs)


def test_a_forward_pass_with_nan_cannot_be_judged_downstream():
    assert code_of(checks.forward_finite, Reply(np.ones((2, 3))), "output_nan_upstream") is None
    nan = Reply(np.array([[1.0, np.nan]]))
    assert code_of(checks.forward_finite, nan, "output_nan_upstream") == "output_nan_upstream"
    assert code_of(checks.forward_finite, Reply({"meta_shape": [2, 3]}), "output_nan_upstream") is None


# ---- device: an error on meta that is not about devices ------------------------------------------

def meta_errors():
    """What torch itself says on meta for each kind of code (live, so a torch upgrade shows here)."""
    meta = torch.device("meta")
    x = torch.randn(2, 3, 4, device=meta)
    cases = {
        "cpu tensor in forward": (lambda: x + torch.randn(4), True),
        "cpu mask": (lambda: x[:, :, :3].masked_fill(torch.ones(3, 3, dtype=torch.bool), 0.0), True),
        ".cpu()": (lambda: x.cpu() + 1, True),
        ".numpy()": (lambda: x.numpy(), True),
        "sdpa attn_mask with is_causal": (lambda: torch.nn.functional.scaled_dot_product_attention(
            x[:, None], x[:, None], x[:, None], attn_mask=torch.ones(3, 3, dtype=torch.bool, device=meta),
            is_causal=True), False),
    }
    found = []
    for name, (call, device_bug) in cases.items():
        with pytest.raises(Exception) as raised:
            call()
        found.append((name, str(raised.value), device_bug))
    return found


def test_torch_names_a_device_in_every_device_error_and_in_no_other():
    for name, message, device_bug in meta_errors():
        assert checks.about_devices(message) == device_bug, (name, message)


def reply_of(shape):
    return harness.Reply({"outputs": [{"meta_shape": list(shape)}]})


def test_an_error_on_meta_about_no_device_is_judged_on_the_cpu():
    refused = SubmissionError("exception", "_scaled_dot_product_attention: Explicit attn_mask should not be set "
                              "when is_causal=True", line=89, exc_type="RuntimeError")
    misplaced = SubmissionError("exception", "Tensor on device cpu is not on the expected device meta!", line=3,
                                exc_type="RuntimeError")

    def attempt(error, on_cpu=None):
        def call(device):
            if device == "meta":
                raise error
            if on_cpu:
                raise on_cpu
            return reply_of((2, 3))
        return call

    assert code_of(checks.runs_on_device, attempt(refused), "meta", [(2, 3)]) is None
    assert code_of(checks.runs_on_device, attempt(misplaced), "meta", [(2, 3)]) == "wrong_device"
    with pytest.raises(SubmissionError):  # failing on the CPU too: the submission's own error, not a device's
        checks.runs_on_device(attempt(refused, on_cpu=refused), "meta", [(2, 3)])


# ---- gradients: the reference's, in eval ---------------------------------------------------------

class GradReply:
    """A call's parameter gradients, as the worker sends them."""

    def __init__(self, grads):
        self.grads = grads


def self_attention_gradients(params, x, upstream, backward=None):
    """The gradients of sum(upstream · SelfAttention(x)) in float32 torch; backward: a softmax
    backward written by hand (a torch.autograd.Function's), instead of autograd's."""
    weights = {name: torch.tensor(value, dtype=torch.float32, requires_grad=True) for name, value in params.items()}
    xt = torch.tensor(x, dtype=torch.float32)
    q, k, v = (xt @ weights[f"{n}.weight"].T for n in ("W_Q", "W_K", "W_V"))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if backward is None:
        attention = torch.softmax(scores, dim=-1)
    else:
        class Softmax(torch.autograd.Function):
            @staticmethod
            def forward(ctx, s):
                y = torch.softmax(s, dim=-1)
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, g):
                return backward(g, *ctx.saved_tensors)

        attention = Softmax.apply(scores)
    ((attention @ v) * torch.tensor(upstream, dtype=torch.float32)).sum().backward()
    return {name: w.grad.double().numpy() for name, w in weights.items()}


def gradient_code(backward=None):
    rng = np.random.default_rng(7)
    params = {f"{n}.weight": rng.standard_normal((3, 4)) * 0.5 for n in ("W_Q", "W_K", "W_V")}
    x, upstream = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3))
    reply = GradReply(self_attention_gradients(params, x, upstream, backward))
    return code_of(checks.gradients_match_reference, reply, params,
                   lambda p, changed: reference.self_attention(p, x)[0], upstream, np.random.default_rng(8))


def test_autograds_gradients_match_the_reference():
    assert gradient_code() is None


def test_a_softmax_backward_written_wrong_fails_gradients():
    """g·y instead of y·(g − Σ g·y): the forward pass is exact, every gradient finite and nonzero."""
    assert gradient_code(lambda g, y: g * y) == "gradient_mismatch"
    assert gradient_code(lambda g, y: y * (g - (g * y).sum(-1, keepdim=True))) is None  # the right one


def test_a_dropout_mask_drawn_once_and_reused_fails_train_dropout():
    rng = np.random.default_rng(9)
    kept = rng.random(2048) > 0.25
    assert code_of(checks.dropout_redrawn, kept, kept.copy(), 0.25, "weights") == "dropout_mask_reused"
    assert code_of(checks.dropout_redrawn, kept, rng.random(2048) > 0.25, 0.25, "weights") is None


def test_a_dropout_that_ignores_the_seed_fails_train_dropout_on_its_path():
    rng = np.random.default_rng(11)
    first = rng.random((2, 4, 3))
    assert code_of(checks.dropout_follows_seed, first, first.copy(), 0.5, "weights") is None
    assert code_of(checks.dropout_follows_seed, first, rng.random((2, 4, 3)), 0.5, "weights") == "dropout_ignores_seed"
    assert code_of(checks.dropout_follows_seed, first, rng.random((2, 4, 3)), 0.5, "output",
                   "fused=True") == "dropout_ignores_seed_on_path"


def test_a_train_output_leaks_only_if_the_same_input_repeats_itself():
    rng = np.random.default_rng(10)
    before = rng.standard_normal((2, 4, 3))
    leaked = before.copy()
    leaked[:, 1] += 0.5  # an earlier token moved when the last one changed
    causal = before.copy()
    causal[:, -1] += 0.5  # only the changed token itself moved
    assert checks.train_output_leaks(before, leaked, before.copy())
    assert not checks.train_output_leaks(before, causal, before.copy())
    # the same input gave another output: masks drawn by what the module kept, not a leak
    assert not checks.train_output_leaks(before, leaked, before + 0.1)


# ---- reference_match: a miss described by its call only when that call alone misses ---------------

class CallReply:
    """A reply of reference_across_calls' module: one output, nothing changed or kept."""
    modified, requires_grad_changed, rebound, settings_changed, earlier_outputs_changed, call = (), (), (), (), False, None

    def __init__(self, output):
        self.outputs = [output]


class Doubler:
    """A module computing 2x, plus `error(x)`, already built (harness.runs_until_failure reads that)."""
    settings_changed, _pending_build = (), None

    def __init__(self, error):
        self.error = error

    def runs(self, *calls):
        return [CallReply(2 * x + self.error(x)) for (x,), _ in calls]

    def run(self, *args, **options):
        return self.runs((args, options))[0]


@pytest.fixture
def undiagnosed(monkeypatch):
    """The catalog's diagnosis left out: it reads a real module's parameters, which Doubler has not."""
    monkeypatch.setattr(checks, "diagnosed", lambda *args: None)


def across_calls_code(error, lengths=(9, 3, 3)):
    """reference_across_calls' verdict on calls of these lengths (the first described as long)."""
    rng = np.random.default_rng(12)
    calls = [((rng.standard_normal(n),), {}) for n in lengths]
    module = Doubler(error)
    return code_of(checks.reference_across_calls, module, calls, lambda i, reply: reply.outputs,
                   lambda i: [(2 * calls[i][0][0], 0.0, 1.0, "output")], lambda: module, {},
                   {0: ("causal_reference_mismatch_long", {"positions": lengths[0]})})


def test_a_miss_of_the_long_call_alone_is_described_as_one_about_length(undiagnosed):
    assert across_calls_code(lambda x: 0.0) is None
    assert across_calls_code(lambda x: 0.5 * (len(x) > 8)) == "causal_reference_mismatch_long"


def test_a_miss_every_call_shows_is_not_described_as_one_about_length(undiagnosed):
    assert across_calls_code(lambda x: 0.5) == "reference_mismatch_at"
    assert across_calls_code(lambda x: 0.5 * (len(x) == 3)) == "reference_mismatch_at"  # the short calls only
