"""Hostile and broken submissions (tests/submissions/hostile/): contained, bounded, graded fairly.

Every submission of the corpus is graded once, each in a grading process of its own (two at a
time), under a copy of grading.yml with short limits (TEST_LIMITS) and few examples. For each one
the tests check that grading ended within BOUND_S, that results.json is valid and under 1 MB,
that the classes the attack leaves alone keep every point, that tampering earns nothing (the
outcomes equal those of the same wrong code without the tampering), that no process of the
submission outlived grading, and that the student reads a Spanish message naming the problem.

BOUND_S is a safety bound (a grader that hangs, or waits out every timeout, fails it), not a
performance figure: tests/bench_*.py print those.

The attacks that need the privilege drop (reading the grader's files, signalling it, a fork storm
that leaves the session, fake results.json in shared folders, residue and memory outside the
sandbox) only run as root, where the worker gets a uid of its own; see the README's section on
what the grader guarantees. As root the corpus is graded twice where the kernel allows
namespaces: with them, and with the uid-only layer alone (as on Gradescope, in Docker).
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from autograder import feedback
from autograder.config import CLASSES
from autograder.grade import close_to_workers
from autograder.outcomes import Outcome
from autograder.worker import landlock, sandbox

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "submissions" / "hostile"
IS_ROOT = os.geteuid() == 0
BOUND_S = 60
PARALLEL = 2
TEST_LIMITS = {"import": 15, "request": 6, "class": 15, "submission": 120}
MEMORY_MIB = 1024
# A uid range of the tests' own: graders running beside this suite (benchmarks, the CLI) lease
# from 61000 on, so a leftover found here can only be one of ours.
TEST_BASE_UID = 63000
ROOT_ONLY = {"sa_kill_parent", "mha_fork_storm", "sa_fake_results", "sa_read_solution", "sa_leave_residue",
             "sa_shm_hog", "sa_deep_tree", "sa_memfd_hog", "shm_many_names", "sa_socket_hog",
             "sa_ipc_queue_hog", "sa_io_uring_socket", "sa_inotify_hog", "sa_hidden_thread_memory", "sa_pty_hog",
             "sa_keyring_persistent", "sa_setsid_sessions", "sa_pipe_pinned_pages", "sa_kernel_objects_unbounded",
             "sa_perf_ring_pinned", "sa_landlock_domains", "sa_xattr_hog", "sa_mapped_memory_hog",
             "sa_untouched_mappings_in_children"}
UIDS_PER_JOB = 10  # each graded file leases from a range of its own: its residue is its alone
# The placeholders in the corpus (Gradescope's own paths) and what the tests put in their place.
GRADER_ROOT_PLACEHOLDER = '"/autograder/source"'
RESULTS_PLACEHOLDER = '"/autograder/results"'

# Graded in the same run: what the corpus is compared with.
# Broken files: every test of every class fails with this code.
WHOLE_FILE = {
    "empty": "load.empty",
    "misnamed_classes": "submission.missing_class",
    "syntax_error": "submission.syntax_error",
    "colab_export": "submission.syntax_error_ipython",
    "missing_module": "submission.import_error",
    "sys_exit_at_import": "submission.import_error",
    "exit_at_import": "submission.import_crash",
    "sleep_at_import": "submission.import_timeout",
    "surrogate_message": "submission.import_error",
}
# One class attacked: the codes its failed tests may carry (its first test always fails).
ONE_CLASS = {
    "sa_infinite_loop": ("SelfAttention", ["submission.timeout"]),
    "mha_os_exit_in_forward": ("MultiHeadAttention", ["submission.crash"]),
    "csa_sys_exit_in_forward": ("CausalSelfAttention", ["submission.exception", "wrong_device"]),
    # Resident memory is summed over processes, shared pages in each: forks of torch add up fast.
    "mha_fork_storm": ("MultiHeadAttention", ["submission.timeout", "submission.processes", "submission.memory"]),
    "csa_memory_hog": ("CausalSelfAttention", ["submission.memory"]),
    "sa_lying_tensor": ("SelfAttention", ["submission.bad_output"]),
    "sa_forged_build": ("SelfAttention", ["too_many_parameters"]),
    "sa_memfd_hog": ("SelfAttention", ["submission.memory"]),
    "sa_mapped_memory_hog": ("SelfAttention", ["submission.memory"]),
    "sa_untouched_mappings_in_children": ("SelfAttention", ["submission.memory"]),
    "sa_hidden_thread_memory": ("SelfAttention", ["submission.memory"]),
    "sa_unprintable_exception": ("SelfAttention", ["submission.exception"]),
}
# Correct code plus an attack on the grader: full marks, nothing more and nothing less.
AS_REFERENCE = {"sa_print_200mb", "sa_kill_parent", "sa_leave_residue", "sa_large_buffer", "sa_socket_hog",
                "sa_ipc_queue_hog", "sa_io_uring_socket", "sa_inotify_hog", "sa_pty_hog", "sa_keyring_persistent",
                "sa_setsid_sessions", "sa_pipe_pinned_pages", "sa_kernel_objects_unbounded", "sa_perf_ring_pinned",
                "sa_landlock_domains", "sa_xattr_hog", "csa_cfg_bias_resized_for_bare_cfg"}
# A buggy file's mistake, hidden from the worker's view of the module: exactly that file's outcomes.
AS_HONEST = {"mha_mask_relabelled_after_unsqueeze_": "mha_mask_unsqueezed_in_place",
             "sa_learnable_temperature_dotted_name": "sa_learnable_temperature",
             "sa_temperature_under_empty_key": "sa_learnable_temperature",
             "sa_temperature_zero_width_name": "sa_learnable_temperature",
             "sa_temperature_behind_an_empty_shape": "sa_learnable_temperature",
             "mha_two_buffers_refilled_through_data": "mha_weights_in_two_buffers_in_turn",
             "causal_float_mask_behind_a_bool_dtype": "causal_mask_buffer_float",
             "causal_dropout_p_capped_behind_a_float_subclass": "causal_dropout_p_capped_at_0_9"}
# Hostile files that hide their mistake from the check that names it (an excuse beaten by behaving
# otherwise only in the excusing property's calls): caught now, in that property or another, with
# their own message (the refusal they stage, say), so never more points than the honest file.
NO_BETTER = {"sa_backward_hidden_by_a_remembered_input": "sa_softmax_backward_wrong",
             "sa_refuses_large_masked_inputs": "sa_bool_mask_filled_with_minus_1e4",
             "mha_train_step_refused_on_remembered_input": "mha_inplace_dropout",
             "sa_nan_on_remembered_masked_input": "sa_masked_softmax_detached_sum",
             "sa_shift_on_repeated_masked_input": "sa_masked_softmax_detached_sum",
             "sa_refuses_masks_where_only_masks_are_judged": "sa_mask_flipped",
             "sa_refuses_autograd_without_input_grad": "sa_weights_returned_detached",
             "sa_2d_causal_shift_on_repeated_input": "sa_2d_mask_made_causal",
             "csa_fused_train_call_refused_without_dropout": "causal_fused_only_in_eval",
             "csa_fused_grad_call_refused_without_input_grad": "causal_fused_only_without_grad",
             "csa_fused_clamp_replayed_on_explicit": "causal_fused_clamped_qk",
             "csa_detached_in_train_hidden_by_a_large_batch_shift": "causal_weights_detached_in_train",
             "mha_memory_detached_hidden_by_a_large_batch_shift": "mha_memory_detached",
             "sa_value_detached_unless_input_requires_grad": "sa_value_projection_detached",
             "sa_weights_backward_wrong_behind_sdpa_output": "sa_weights_softmax_detached_normaliser",
             "csa_dropout_redrawn_in_backward_only_with_autograd": "causal_dropout_mask_redrawn_in_backward",
             "mha_dropout_redrawn_in_backward_only_with_autograd": "mha_dropout_mask_redrawn_in_backward",
             "mha_packed_kv_through_data_when_key_is_value": "mha_packed_kv_through_data",
             "sa_temperature_behind_a_parameters_property": "sa_learnable_temperature"}
# The honest files graded beside the corpus, for the comparisons above.
REFERENCES = {"reference": ROOT / "solutions" / "attention.py",
              **{name: ROOT / "tests" / "submissions" / "buggy" / f"{name}.py"
                 for name in sorted({"sa_no_scaling", *AS_HONEST.values(), *NO_BETTER.values()})}}
# Outputs of a dtype the grader refuses (complex: its real part alone would pass): every test of
# that class that runs forward fails with this code, or for want of a test that does.
REFUSED_OUTPUT = {"mha_weights_in_a_complex_buffer": ("MultiHeadAttention", "submission.output_dtype")}
# Correct code that acts on what a hidden test showed it (the inputs of SelfAttention's large_inputs,
# hidden until the due date): only tests hidden as well can see it, since every hidden test runs
# after every visible one. name -> the (class, property) that lose their points, all hidden.
TOLD_HIDDEN = {"mha_told_hidden_inputs": {("MultiHeadAttention", "large_inputs"), ("MultiHeadAttention", "device")}}
# Files that once made the grader fail on its own (exit 4): held to what holds for every file
# (test_grading_is_bounded_valid_and_leaves_nothing, no grader error among them), nothing more.
# The two that change their CausalSelfAttention under torch.inference_mode() once scored as the
# reference (only the check of a module at its own start ran there); reference_match's call under
# inference_mode now sees the module they leave, which is not the statement's.
GRADER_ONCE_FAILED = {"mha_meta_output_under_grad", "csa_renames_qkv_in_inference_mode",
                      "csa_qkv_swapped_for_a_scalar_in_inference_mode"}
# Refused by the Landlock layer, where the kernel has it (landlock.available()): graded only there.
NEEDS_LANDLOCK = {"sa_pty_hog"}
# Files no single remover call survives (a 1,500-deep tree; 9,000 long names): harmless in the
# namespace's scratch space, over a limit in the uid layer alone (which counts files and depth,
# so the import fails with this code); left behind in neither.
CLEANUP_STRESS = {"sa_deep_tree": "submission.import_disk", "shm_many_names": "submission.import_memory"}
# Forged replies: refused as the submission's protocol failures, never the grader's error.
FORGED = {"forged_replies", "forged_input_grads"}
# Outputs larger than any answer, honest and forged: what each class fails with first.
HUGE = {"huge_outputs": {"SelfAttention": "submission.output_too_large", "MultiHeadAttention": "submission.protocol",
                         "CausalSelfAttention": "shape_mismatch"}}
# Memory outside any process (/dev/shm, System V): counted, or bounded by the scratch space.
OUTSIDE_PROCESSES = {"sa_shm_hog"}
# sa_no_scaling's SelfAttention plus tampering: exactly sa_no_scaling's outcomes.
AS_NO_SCALING = {"sa_monkeypatch", "sa_fake_results", "sa_read_solution", "sa_lying_tensor_unchecked", "sa_hidden_members"}

# Runs in a fresh interpreter: grade one file, then report outcomes and what is still running.
# Leftovers are looked for while each worker's uid is still leased (so no other grader can be
# using it yet): processes of that uid, and processes still in the worker's session.
RUNNER = r'''
import json, os, sys
from pathlib import Path
from autograder import config
from autograder.grade import grade
from autograder.worker import client, residue, sandbox

left, sessions = [], []

def processes():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            owner = os.stat(f"/proc/{pid}").st_uid
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in (b"Z", b"X"):  # a zombie is dead, only not yet reaped
            yield int(pid), owner, int(fields[1]), int(fields[3])  # pid, uid, parent, session

original_stop, original_cleanup = client.Worker.stop, sandbox.Sandbox.cleanup

def stop(self):
    if self.proc is not None:
        sessions.append(self.proc.pid)
    original_stop(self)

def cleanup(self):
    left.extend(pid for pid, owner, _, session in processes() if owner == self.uid or session in sessions)
    original_cleanup(self)

client.Worker.stop, sandbox.Sandbox.cleanup = stop, cleanup
graded = grade(sys.argv[1], config.load(sys.argv[2]), sys.argv[3])
left.extend(pid for pid, _, parent, session in processes() if parent == os.getpid() or session in sessions)
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
first_uid = int(os.environ["AUTOGRADER_WORKER_UID"])

def lasting_residue(last, wait_s=5.0):
    """Residue of the uids that is still there after wait_s: the kernel frees some things after
    the grader has done its part (keys cleared by KEYCTL_CLEAR go when its key collector runs),
    which under load was once seen a moment late; a file, object or process left behind stays."""
    import time
    deadline = time.monotonic() + wait_s
    found = residue.uids_with_residue(first_uid, last)
    while found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = residue.uids_with_residue(first_uid, last)
    return sorted(found)

print(json.dumps({
    "outcomes": [o.as_dict() for o in graded.outcomes], "seconds": graded.seconds,
    "worker_peak_mib": graded.peak_rss_mib, "grader_peak_mib": int(status["VmHWM"].split()[0]) / 1024,
    "left": sorted(set(left)), "isolation": graded.isolation,
    "residue": lasting_residue(first_uid + int(sys.argv[4]) - 1),
}))
'''


def corpus():
    names = sorted(path.stem for path in HOSTILE.glob("*.py"))
    return [name for name in names if (IS_ROOT or name not in ROOT_ONLY)
            and (landlock.available() or name not in NEEDS_LANDLOCK)]


def test_every_corpus_file_has_an_expectation():
    expected = (set(WHOLE_FILE) | set(ONE_CLASS) | AS_REFERENCE | AS_NO_SCALING | set(AS_HONEST) | set(NO_BETTER) | set(REFUSED_OUTPUT)
                | set(TOLD_HIDDEN)
                | GRADER_ONCE_FAILED | OUTSIDE_PROCESSES | set(CLEANUP_STRESS) | FORGED | set(HUGE))
    assert sorted(expected) == sorted(path.stem for path in HOSTILE.glob("*.py"))


@pytest.fixture(scope="module")
def test_config(tmp_path_factory):
    data = yaml.safe_load((ROOT / "grading.yml").read_text(encoding="utf-8"))
    data["timeouts"] = dict(TEST_LIMITS)
    data["limits"]["memory_mib"] = MEMORY_MIB
    data["hypothesis"]["max_examples"] = 2
    path = tmp_path_factory.mktemp("config") / "grading.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def shared_results_dir():
    """A results folder the attacker knows and, before grading, could write to (mode 777)."""
    folder = Path(tempfile.mkdtemp(prefix="hostile-results-"))
    folder.chmod(0o777)
    yield folder
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


def modes():
    """Isolation modes to grade the corpus under: both layers where namespaces are allowed."""
    if IS_ROOT and sandbox.namespaces.available():
        return ["namespaces", "uid-only"]
    return ["uid-only" if IS_ROOT else "as-you"]


@pytest.fixture(scope="module", params=modes())
def graded(request, test_config, shared_results_dir, tmp_path_factory):
    """name → what grading it gave: outcomes, results.json, wall seconds, peaks, leftovers."""
    mode = request.param
    work = tmp_path_factory.mktemp("hostile")
    jobs = {}
    for name in corpus():
        text = (HOSTILE / f"{name}.py").read_text(encoding="utf-8")
        text = text.replace(GRADER_ROOT_PLACEHOLDER, repr(str(ROOT)))
        text = text.replace(RESULTS_PLACEHOLDER, repr(str(shared_results_dir)))
        path = work / name / "attention.py"
        path.parent.mkdir()
        path.write_text(text, encoding="utf-8")
        out = shared_results_dir if name == "sa_fake_results" else work / name / "out"
        jobs[name] = (path, out)
    for name, path in REFERENCES.items():
        jobs[name] = (path, work / f"{name}-out")
    env = {**os.environ, "AUTOGRADER_NAMESPACES": "off" if mode == "uid-only" else "auto"}
    first_uid = {name: TEST_BASE_UID + UIDS_PER_JOB * index for index, name in enumerate(jobs)}

    def run(name):
        path, out = jobs[name]
        begin = time.monotonic()
        done = subprocess.run([sys.executable, "-c", RUNNER, str(path), str(test_config), str(out), str(UIDS_PER_JOB)],
                              cwd=ROOT, env={**env, "AUTOGRADER_WORKER_UID": str(first_uid[name])},
                              capture_output=True, text=True, timeout=4 * BOUND_S)
        wall = time.monotonic() - begin
        assert done.returncode == 0, f"{name}: the grader failed\n{done.stderr[-3000:]}"
        report = json.loads(done.stdout.splitlines()[-1])
        results_file = Path(out) / "results.json"
        report.update(wall=wall, results_bytes=results_file.stat().st_size, mode=mode,
                      results=json.loads(results_file.read_text(encoding="utf-8")),
                      outcomes=[Outcome(**o) for o in report["outcomes"]])
        return name, report

    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            yield dict(pool.map(run, jobs))
    finally:
        remove_fake_results()


def remove_fake_results():
    """sa_fake_results leaves results.json in shared folders such as /tmp: remove those of our uids."""
    lowest, highest = TEST_BASE_UID, TEST_BASE_UID + sandbox.LEASE_SPAN
    for top, folders, files in os.walk("/"):
        if top.count("/") >= 3 or top.startswith(("/proc", "/sys")):
            folders[:] = []
        path = Path(top) / "results.json"
        if "results.json" in files and lowest <= path.lstat().st_uid < highest:
            path.unlink()


def by_class(report):
    classes = {cls: [] for cls in CLASSES}
    for outcome in report["outcomes"]:
        classes[outcome.cls].append(outcome)
    return classes


def statuses(report):
    return [(o.cls, o.prop, o.status, o.code) for o in report["outcomes"]]


def message(report, cls, index=0):
    """The first line of the feedback: the failure itself, without example or hint."""
    return feedback.message(by_class(report)[cls][index], "es").splitlines()[0]


# ---- what holds for every file --------------------------------------------------------------
@pytest.mark.parametrize("name", corpus())
def test_grading_is_bounded_valid_and_leaves_nothing(graded, name):
    report = graded[name]
    assert report["wall"] < BOUND_S
    assert report["results_bytes"] < 1 << 20
    results = report["results"]
    assert len(results["tests"]) == len(report["outcomes"])
    assert results["score"] == sum(test["score"] for test in results["tests"])
    assert results["score"] == sum(test["score"] for test in results["tests"] if test["status"] == "passed")
    assert report["left"] == []
    assert report["residue"] == []  # no process, shared-folder file or IPC object of its uids
    assert [o.prop for o in report["outcomes"] if o.code == "grader_error"] == []  # always the project's bug


@pytest.mark.skipif(not IS_ROOT, reason="isolation layers exist only as root")
def test_the_isolation_layers_are_said(graded):
    expected = ["seccomp", *(["landlock"] if landlock.available() else []),
                *(sandbox.namespaces.LAYERS if graded["reference"]["mode"] == "namespaces" else [])]
    layers = graded["reference"]["isolation"]
    assert layers[0].startswith("uid ") and layers[1:] == expected
    assert graded["reference"]["results"]["extra_data"]["isolation"] == layers


# ---- broken files ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(WHOLE_FILE))
def test_broken_file_fails_every_test_with_its_reason(graded, name):
    report = graded[name]
    assert {o.code for o in report["outcomes"]} == {WHOLE_FILE[name]}
    assert report["results"]["score"] == 0


# ---- one class attacked: the others keep every point ----------------------------------------
@pytest.mark.parametrize("name", [name for name in sorted(ONE_CLASS) if name in corpus()])
def test_attack_on_one_class_costs_only_that_class(graded, name):
    attacked, codes = ONE_CLASS[name]
    classes = by_class(graded[name])
    for cls, outcomes in classes.items():
        if cls != attacked:
            assert all(o.status == "passed" for o in outcomes), cls
    failed = [o for o in classes[attacked] if o.status != "passed"]
    assert failed[0] is classes[attacked][0]
    assert {o.code for o in failed} <= set(codes)
    forward_free = {o.prop for o in classes[attacked] if o.status == "passed"}
    assert forward_free <= {"parameter_count", "mask_buffer"}  # only tests that never run forward


# What the student reads first: {line} is the line of the file that ends with LINE_MARKS[file].
MESSAGES = [
    ("empty", "MultiHeadAttention", "attention.py está vacío: guarda en él tu trabajo"),
    ("misnamed_classes", "SelfAttention", "Tu archivo no define la clase SelfAttention."),
    ("missing_module", "SelfAttention",
     "Tu archivo importa el módulo numpyy (línea {line}), que el corrector no tiene"),
    ("syntax_error", "CausalSelfAttention", "Tu archivo tiene un error de sintaxis en la línea {line} (Python dice: «"),
    ("colab_export", "MultiHeadAttention",
     "La línea {line} de tu archivo es una orden de Jupyter o Colab, no Python: «!pip install torch». En un archivo .py bórrala"),
    ("sleep_at_import", "SelfAttention", "Importar tu archivo no terminó en {import_s} s"),
    ("exit_at_import", "SelfAttention", "El proceso terminó abruptamente al importar tu archivo (exit code 0)"),
    ("sys_exit_at_import", "SelfAttention", "Importar tu archivo falló en la línea {line} (SystemExit)"),
    ("sa_infinite_loop", "SelfAttention", "SelfAttention.forward no terminó en {request_s} s (¿un bucle infinito?)"),
    ("mha_os_exit_in_forward", "MultiHeadAttention",
     "El proceso que ejecutaba MultiHeadAttention.forward terminó abruptamente (exit code 0)"),
    ("csa_memory_hog", "CausalSelfAttention", "CausalSelfAttention.forward usó más de {memory} MiB de memoria"),
    ("csa_sys_exit_in_forward", "CausalSelfAttention", "CausalSelfAttention.forward lanzó SystemExit en la línea {line}"),
    ("sa_lying_tensor", "SelfAttention", "SelfAttention.forward devolvió un valor de tipo Liar: debe devolver torch.Tensor"),
    ("sa_temperature_behind_a_parameters_property", "SelfAttention",
     "Una clase de tu módulo redefine tablas internas de nn.Module (SelfAttention: _parameters)"),
    ("surrogate_message", "SelfAttention", "Importar tu archivo falló en la línea {line} (RuntimeError): boom \ufffd \ufffd fin"),
    # An exception that cannot be read: its class's first base with a class name, its line, no message.
    ("sa_unprintable_exception", "SelfAttention", "SelfAttention.forward lanzó RuntimeError en la línea {line}."),
    ("huge_outputs", "SelfAttention",
     "SelfAttention.forward devolvió un tensor de forma (1, 1, 8388608), demasiado grande para ser una respuesta"),
]
LINE_MARKS = {"missing_module": "import numpyy", "syntax_error": "x.shape)", "colab_export": "!pip install torch", "sys_exit_at_import": "sys.exit(0)",
              "csa_sys_exit_in_forward": "sys.exit(3)", "surrogate_message": 'fin")',
              "sa_unprintable_exception": "raise Unreadable(weights)"}


@pytest.mark.parametrize("name, cls, start", MESSAGES, ids=[case[0] for case in MESSAGES])
def test_feedback_says_what_to_fix(graded, name, cls, start):
    lines = (HOSTILE / f"{name}.py").read_text(encoding="utf-8").splitlines()
    line = next((number for number, text in enumerate(lines, 1) if text.endswith(LINE_MARKS.get(name, "\0"))), None)
    expected = start.format(line=line, import_s=float(TEST_LIMITS["import"]),
                            request_s=float(TEST_LIMITS["request"]), memory=MEMORY_MIB)
    assert message(graded[name], cls).startswith(expected)


def test_a_timed_out_class_fails_fast(graded):
    """After the first timeout, the class's other tests do not wait out their own."""
    outcomes = by_class(graded["sa_infinite_loop"])["SelfAttention"]
    assert outcomes[0].duration >= TEST_LIMITS["request"]
    assert sum(o.duration for o in outcomes[1:]) < TEST_LIMITS["request"]


def test_memory_hog_is_stopped_near_the_limit(graded):
    assert MEMORY_MIB <= graded["csa_memory_hog"]["worker_peak_mib"] < 2 * MEMORY_MIB


# ---- attacks on the grader: nothing gained --------------------------------------------------
@pytest.mark.parametrize("name", [name for name in sorted(AS_REFERENCE) if name in corpus()])
def test_correct_code_attacking_the_grader_scores_as_the_reference(graded, name):
    assert statuses(graded[name]) == statuses(graded["reference"])


@pytest.mark.parametrize("name", [name for name in sorted(AS_NO_SCALING) if name in corpus()])
def test_tampering_earns_nothing(graded, name):
    assert statuses(graded[name]) == statuses(graded["sa_no_scaling"])
    assert graded[name]["results"]["score"] == graded["sa_no_scaling"]["results"]["score"]


@pytest.mark.parametrize("name", sorted(AS_HONEST))
def test_a_mistake_hidden_from_the_worker_costs_what_it_costs_in_the_open(graded, name):
    assert statuses(graded[name]) == statuses(graded[AS_HONEST[name]])
    assert graded[name]["results"]["score"] == graded[AS_HONEST[name]]["results"]["score"]


@pytest.mark.parametrize("name", sorted(NO_BETTER))
def test_a_mistake_hidden_from_its_property_buys_no_point(graded, name):
    assert graded[name]["results"]["score"] <= graded[NO_BETTER[name]]["results"]["score"]


@pytest.mark.parametrize("name", sorted(TOLD_HIDDEN))
def test_what_a_hidden_test_shows_reaches_no_visible_test(graded, name):
    lost = {tuple(test["tags"]) for test in graded[name]["results"]["tests"] if test["score"] < test["max_score"]}
    assert lost == TOLD_HIDDEN[name]


@pytest.mark.parametrize("name", sorted(REFUSED_OUTPUT))
def test_an_output_of_a_refused_dtype_fails_with_its_own_code(graded, name):
    attacked, code = REFUSED_OUTPUT[name]
    for cls, outcomes in by_class(graded[name]).items():
        failed = [o for o in outcomes if o.status != "passed"]
        if cls != attacked:
            assert not failed, cls
            continue
        assert failed and {o.code for o in failed if o.status == "error"} == {code}
        assert {o.prop for o in outcomes if o.status == "passed"} <= {"parameter_count", "split_heads"}


@pytest.mark.skipif(not IS_ROOT, reason="only counted as root, where the worker has a uid of its own")
def test_memory_outside_processes_is_counted_or_bounded(graded):
    """48 × 16 MiB in /dev/shm and 12 × 64 MiB of System V segments (1.5 GiB, no RSS) either stop
    SelfAttention for memory, or could not be made beyond the sandbox's scratch space. Memory is
    sampled every 100 ms, like RSS, and again as each test ends: the first test that runs forward
    fails, however loaded the machine (CI once saw the class stop at its fourth test)."""
    report = graded["sa_shm_hog"]
    attacked = by_class(report)["SelfAttention"]
    held = [int(line.split()[1]) for o in attacked for line in o.output.splitlines() if line.startswith("held ")]
    if report["mode"] == "namespaces":
        assert held and max(held) <= 2 * 64  # the scratch tmpfs, and System V capped to its size
    else:
        stopped = next(i for i, o in enumerate(attacked) if o.code == "submission.memory")
        assert stopped == 0 and all(o.status != "passed" for o in attacked[stopped:])
    for cls, outcomes in by_class(report).items():
        if cls != "SelfAttention":
            assert all(o.status == "passed" for o in outcomes), cls


@pytest.mark.skipif(not IS_ROOT, reason="the files are made where only a uid of its own is cleaned")
@pytest.mark.parametrize("name", sorted(CLEANUP_STRESS))
def test_what_defeats_a_single_remover_is_contained(graded, name):
    report = graded[name]
    if report["mode"] == "namespaces":
        assert statuses(report) == statuses(graded["reference"])
    else:
        assert {o.code for o in report["outcomes"]} == {CLEANUP_STRESS[name]}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_forged_replies_are_the_submissions_protocol_failures(graded, name):
    failed = {o.code for o in graded[name]["outcomes"] if o.status != "passed"}
    assert failed == {"submission.protocol"}
    assert graded[name]["grader_peak_mib"] < 150  # refused replies are not kept


@pytest.mark.parametrize("name", sorted(HUGE))
def test_outputs_larger_than_any_answer_cost_the_grader_nothing(graded, name):
    """A reply is at most wire.MAX_FRAME_BYTES: a 32 MiB output is the worker's output_too_large
    (honest code) or a refused frame (a worker that lifted its own cap); replies just under the cap,
    every call, keep the grader's memory bounded (with a 32 MiB cap they reached 2 GiB)."""
    classes = by_class(graded[name])
    assert {cls: outcomes[0].code for cls, outcomes in classes.items()} == HUGE[name]
    assert graded[name]["grader_peak_mib"] < 150


def test_the_reference_scores_are_not_all_alike(graded):
    """The comparisons above can fail: the wrong SelfAttention loses points the reference keeps."""
    assert graded["sa_no_scaling"]["results"]["score"] < graded["reference"]["results"]["score"]


@pytest.mark.skipif(not IS_ROOT, reason="cleaned only as root, where the worker has a uid of its own")
def test_no_message_queue_or_key_of_a_student_survives(graded):
    """sa_leave_residue made a POSIX message queue and a key in its uid's keyring: both gone."""
    import ctypes

    assert graded["sa_leave_residue"]["results"]["score"] == graded["reference"]["results"]["score"]
    librt = ctypes.CDLL("librt.so.1", use_errno=True)
    assert librt.mq_open(b"/residue-from-a-student", os.O_RDONLY) == -1 and ctypes.get_errno() == 2  # ENOENT


def test_forged_shapes_cost_the_grader_nothing(graded):
    assert graded["sa_forged_build"]["grader_peak_mib"] < 150


def test_printing_200_mb_keeps_only_the_first_kilobytes(graded):
    report = graded["sa_print_200mb"]
    printed = by_class(report)["SelfAttention"][0].output
    kept, dropped = printed.split("\n[... ")
    assert len(kept) <= 4 * 1024
    assert int(dropped.split()[0]) > 199 * 2**20
    assert report["grader_peak_mib"] < 150  # 200 MB never piled up in the grader


@pytest.mark.skipif(not IS_ROOT, reason="the worker gets a uid of its own only when the grader is root")
def test_fake_results_never_reach_the_results_folder(graded, shared_results_dir):
    report = graded["sa_fake_results"]
    assert sorted(path.name for path in shared_results_dir.iterdir()) == ["results.json"]
    assert shared_results_dir.stat().st_mode & 0o007 == 0  # closed to the worker before it ran
    assert report["results"]["score"] == graded["sa_no_scaling"]["results"]["score"]
    assert "grader_version" in report["results"]["extra_data"]  # written by the grader, not the fake


@pytest.mark.skipif(not IS_ROOT, reason="the worker gets a uid of its own only when the grader is root")
def test_secrets_are_out_of_reach(graded):
    printed = "".join(o.output for o in graded["sa_read_solution"]["outcomes"])
    assert "read 0 secret(s)" in printed


# ---- the mechanisms, one by one (no torch) --------------------------------------------------
OUTSIDER_UID = TEST_BASE_UID + sandbox.LEASE_SPAN - 1  # a uid of the workers' range, as a worker has


def run_as_worker(code, *args):
    """Run a small Python snippet as a worker's uid would run it, with the access the grader sets."""
    close_to_workers()

    def drop():
        os.setgroups([])
        os.setgid(OUTSIDER_UID)
        os.setuid(OUTSIDER_UID)

    return subprocess.run([sys.executable, "-I", "-c", code, *map(str, args)], preexec_fn=drop,
                          capture_output=True, text=True, cwd="/", timeout=60)


@pytest.mark.skipif(not IS_ROOT, reason="close_to_workers acts only as root")
def test_protected_paths_cannot_be_read_by_the_worker_uid():
    close_to_workers()
    secrets = [ROOT / "grading.yml", ROOT / "solutions" / "attention.py", ROOT / ".git" / "HEAD",
               ROOT / "autograder" / "properties" / "reference.py", Path(__file__)]
    readable = [json.__file__, yaml.__file__]  # what the worker needs stays reachable
    code = ("import sys\nfor path in sys.argv[1:]:\n    try:\n        open(path).read(1)\n"
            "        print('read', path)\n    except OSError:\n        print('denied', path)\n")
    done = run_as_worker(code, *secrets, *readable)
    assert done.stdout.splitlines() == [f"denied {p}" for p in secrets] + [f"read {p}" for p in readable]


@pytest.mark.skipif(not IS_ROOT, reason="only root can signal-test another uid")
def test_the_worker_uid_cannot_signal_the_grader():
    code = "import os, signal, sys\ntry:\n    os.kill(int(sys.argv[1]), signal.SIGTERM)\nexcept PermissionError:\n    print('denied')"
    assert run_as_worker(code, os.getpid()).stdout.strip() == "denied"


def test_uid_leases_are_exclusive_until_released():
    first, lease = sandbox.lease_uid(TEST_BASE_UID + 500)
    second, other = sandbox.lease_uid(TEST_BASE_UID + 500)
    assert second != first
    lease.close()
    again, third = sandbox.lease_uid(TEST_BASE_UID + 500)
    assert again == first
    other.close()
    third.close()


def test_feedback_catalogs_cover_every_failure_kind():
    from autograder.worker.submission_errors import KINDS

    # output_dtype: a complex output; uninitialized_parameters: lazy layers; module_internals;
    # missing_class_in_notebook: a notebook's kept code lacks a class; not_copyable: deepcopy refused
    assert len(KINDS) == 32
    for language in ("es", "en"):
        missing = {kind for kind in KINDS if f"submission.{kind}" not in feedback.catalog(language)["failures"]}
        assert not missing, (language, missing)


def test_every_kind_a_submission_error_is_raised_with_is_declared():
    """The grader's own SubmissionError("kind", ...) calls name only kinds of KINDS (else outcomes.py
    and the class stop would fail on them); what the worker sends is mapped by Kind.reported, so
    each kind it sends must be a reported one (else its feedback would be a generic exception's)."""
    import re
    from autograder.worker.submission_errors import KINDS

    package = Path(feedback.__file__).resolve().parent.parent
    raised = {kind for path in package.rglob("*.py")
              for kind in re.findall(r'SubmissionError\(\s*"(\w+)"', path.read_text(encoding="utf-8"))}
    assert raised and raised <= set(KINDS), raised - set(KINDS)
    child = (package / "worker" / "child.py").read_text(encoding="utf-8")
    sent = set(re.findall(r'StudentError\(\s*"(\w+)"', child)) | set(re.findall(r'"kind": "(\w+)"', child))
    assert {"bad_output", "output_shape", "not_a_module", "unreadable_output", "output_too_large"} <= sent
    assert all(KINDS.get(kind) and KINDS[kind].reported for kind in sent), sent
