"""The isolation layers, attacked one by one as root: what a killed grader leaves, the uid leases,
and what a worker in a batch can reach of its classmates.

Each test runs under both layers where the kernel allows namespaces ("namespaces") and under the
uid-only layer alone ("uid-only", as on Gradescope's Docker), through AUTOGRADER_NAMESPACES.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder.grade import close_to_workers
from autograder.worker import namespaces, procfs, residue, sandbox

ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = os.geteuid() == 0
BASE_UID = 64000  # a range of these tests' own (test_hostile uses 63000+, graders 61000+)
MODES = ["namespaces", "uid-only"] if IS_ROOT and namespaces.available() else ["uid-only"]
pytestmark = pytest.mark.skipif(not IS_ROOT, reason="the layers exist only when the grader runs as root")

# Correct enough to import; at import it leaves an orphan (in a session of its own where setsid is
# allowed; the worker's filter refuses it, and a double fork alone still outlives its parent), then waits.
ORPHAN_MAKER = '''
import subprocess, time
try:
    subprocess.Popen(["sh", "-c", "(sleep 600 &)"], start_new_session=True)
except OSError:
    subprocess.Popen(["sh", "-c", "(sleep 600 &)"])
time.sleep(60)
class SelfAttention: pass
'''


def uid_processes(first, last):
    return [p for p in procfs.processes() if first <= p.uid <= last and p.state != "Z"]


def wait_for(condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def grade_command(path, out, uid, mode):
    env = {**os.environ, "AUTOGRADER_WORKER_UID": str(uid), "AUTOGRADER_NAMESPACES": "off" if mode == "uid-only" else "auto"}
    return [sys.executable, "-m", "autograder", "grade", str(path), "--out", str(out)], env


@pytest.mark.parametrize("mode", MODES)
def test_kill_9_of_the_grader_leaves_no_worker_for_long(tmp_path, mode):
    uid = BASE_UID + (0 if mode == "namespaces" else 100)
    submission = tmp_path / "attention.py"
    submission.write_text(ORPHAN_MAKER, encoding="utf-8")
    command, env = grade_command(submission, tmp_path / "out", uid, mode)
    grader = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: any(p.session != p.pid for p in uid_processes(uid, uid)) and
                        any("sleep" in Path(f"/proc/{p.pid}/cmdline").read_bytes().decode(errors="replace")
                            for p in uid_processes(uid, uid)), 60), "the orphan never started"
    finally:
        grader.kill()
        grader.wait()
    if mode == "namespaces":  # the kernel ends the worker's PID namespace with its stand-in
        assert wait_for(lambda: not uid_processes(uid, uid), 5), uid_processes(uid, uid)
    # Otherwise (and in any case) the next grader to start reaps the uid and its sandbox folder.
    stub = ROOT / "assignments" / "attention" / "attention.py"
    command, env = grade_command(stub, tmp_path / "next", uid, mode)
    subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True, timeout=120)
    assert not uid_processes(uid, uid + sandbox.LEASE_SPAN - 1)
    assert not sandbox.stale_sandboxes(uid)
    assert not residue.uids_with_residue(uid, uid + 10)


def test_a_worker_can_neither_take_nor_forge_a_uid_lease(tmp_path):
    close_to_workers()  # what the grader does before any worker runs: its Python becomes reachable
    folder = Path(sandbox._lease_folder())
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.stat().st_uid == 0
    code = f"import os\ntry:\n    os.open('{folder}/uid-{BASE_UID}.lock', os.O_RDWR | os.O_CREAT)\n    print('opened')\nexcept OSError:\n    print('denied')"
    done = subprocess.run([sys.executable, "-I", "-c", code], preexec_fn=lambda: (os.setgid(BASE_UID + 999), os.setuid(BASE_UID + 999)),
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.stdout.strip() == "denied"


def test_a_lease_folder_made_by_someone_else_is_refused(tmp_path, monkeypatch):
    squatted = tmp_path / "leases"
    squatted.mkdir(mode=0o700)
    os.chown(squatted, BASE_UID + 999, BASE_UID + 999)  # a worker made it first, in a shared /tmp
    monkeypatch.setattr(sandbox, "LEASE_FOLDERS", (str(squatted),))
    with pytest.raises(sandbox.UidUnavailable):
        sandbox.lease_uid(BASE_UID + 500)


@pytest.fixture
def open_folder():
    """A folder anyone may enter and list, as a TA's course folder usually is (tmp_path is not)."""
    folder = Path(tempfile.mkdtemp(prefix="cohort-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.mark.parametrize("mode", MODES)
def test_in_a_batch_a_worker_reads_nothing_of_its_classmates(open_folder, mode):
    """sa_read_solution looks in every folder named on any process's command line (the cohort
    folder, the store's folder) and in the project, and runs any SelfAttention it can read (a
    classmate's): it must score as the wrong code it is."""
    cohort = open_folder / "cohort"
    cohort.mkdir(mode=0o755)
    (cohort / "victim.py").write_bytes((ROOT / "solutions" / "attention.py").read_bytes())
    attack = (ROOT / "tests" / "submissions" / "hostile" / "sa_read_solution.py").read_text(encoding="utf-8")
    (cohort / "attacker.py").write_text(attack.replace('"/autograder/source"', repr(str(ROOT))), encoding="utf-8")
    (cohort / "plain.py").write_bytes((ROOT / "tests" / "submissions" / "buggy" / "sa_no_scaling.py").read_bytes())
    for path in cohort.iterdir():
        path.chmod(0o644)
    store = open_folder / "store" / "cohorts.sqlite"
    store.parent.mkdir(mode=0o755)
    env = {**os.environ, "AUTOGRADER_WORKER_UID": str(BASE_UID + 200), "AUTOGRADER_NAMESPACES": "off" if mode == "uid-only" else "auto"}
    subprocess.run([sys.executable, "-m", "autograder", "batch", str(cohort), "--cohort", "c", "--db", str(store), "--jobs", "2"],
                   env=env, cwd=ROOT, check=True, capture_output=True, timeout=300)
    from autograder.cohort.store import Store

    db = Store(store)
    try:
        results = {r.key: r for r in db.results(db.run("c"))}
    finally:
        db.close()
    statuses = {key: [(o.cls, o.prop, o.status) for o in result.outcomes] for key, result in results.items()}
    assert statuses["attacker.py"] == statuses["plain.py"] != statuses["victim.py"]
    printed = "".join(o.output for o in results["attacker.py"].outcomes)
    assert "read 0 secret(s)" in printed
    assert cohort.stat().st_mode & 0o007 == 0  # closed to other users before any worker ran
    assert all(path.stat().st_mode & 0o077 == 0 for path in store.parent.iterdir())


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_can_never_gain_privileges(tmp_path, mode):
    """no_new_privs: a setuid program (one a student planted earlier, say) runs without its owner's uid."""
    submission = tmp_path / "attention.py"
    submission.write_text('status = open("/proc/self/status").read()\n'
                          'raise RuntimeError([line for line in status.splitlines() if line.startswith("NoNewPrivs")])\n',
                          encoding="utf-8")
    command, env = grade_command(submission, tmp_path / "out", BASE_UID + 300, mode)
    subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True, timeout=120)
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert "NoNewPrivs:\\t1" in results["output"]  # an import error: said once, at the top


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_cannot_make_namespaces_of_its_own(tmp_path, mode):
    """In a user namespace of its own a worker could mount tmpfs that no memory count sees."""
    submission = tmp_path / "attention.py"
    submission.write_text("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                          "result = libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno()\n"
                          "raise RuntimeError(f'unshare: {result}')\n", encoding="utf-8")
    command, env = grade_command(submission, tmp_path / "out", BASE_UID + 500, mode)
    subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True, timeout=120)
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert "unshare: (-1, 1)" in results["output"]  # EPERM, an import error: said once, at the top


def test_names_that_merely_look_like_sandboxes_are_passed_over(monkeypatch):
    """A worker may name a folder autograder-¹-x in /tmp: reaping must not stumble on it."""
    odd = Path(tempfile.gettempdir()) / "autograder-\u00b9-x"
    odd.mkdir()
    try:
        monkeypatch.setattr(sandbox, "_reaped", set())
        sandbox.reap_orphans(BASE_UID + 400)
    finally:
        odd.rmdir()


def test_the_worker_environment_keeps_only_the_gpu_selection(monkeypatch):
    """Nothing of the grader's environment reaches the submission (a token, say), except which
    GPUs this grading may use: hidden from the grader, a GPU stays hidden from the worker."""
    from autograder import config

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("GRADER_SECRET_TOKEN", "do-not-leak")
    box = sandbox.Sandbox("x = 1\n", config.load().limits, None, sys.executable)
    try:
        env = box.env()
    finally:
        box.cleanup()
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "GRADER_SECRET_TOKEN" not in env
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    box = sandbox.Sandbox("x = 1\n", config.load().limits, None, sys.executable)
    try:
        assert "CUDA_VISIBLE_DEVICES" not in box.env()
    finally:
        box.cleanup()


# A process that sets its uid, optionally makes itself not dumpable (the files of its /proc folder
# then belong to root), says who owns its /proc folder and sleeps.
UID_SLEEPER = r'''
import ctypes, os, sys, time
uid, dumpable = int(sys.argv[1]), sys.argv[2] == "1"
os.setgid(uid)
os.setuid(uid)
if not dumpable:
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
print(os.stat(f"/proc/{os.getpid()}").st_uid, flush=True)
time.sleep(60)
'''


@pytest.mark.parametrize("dumpable", [True, False], ids=["dumpable", "not-dumpable"])
def test_a_scan_for_one_uid_finds_its_processes_and_skips_other_users(dumpable):
    """processes(owners={uid}) reads only the /proc folders of uid: a process of uid is found, with
    its real uid, also when it made itself not dumpable; a process of another user is passed over."""
    uid, other = BASE_UID + 200, BASE_UID + 201
    sleepers = [subprocess.Popen([sys.executable, "-c", UID_SLEEPER, str(u), "1" if d else "0"], stdout=subprocess.PIPE,
                                 text=True) for u, d in ((uid, dumpable), (other, True))]
    try:
        owners = [int(s.stdout.readline()) for s in sleepers]
        assert owners == [uid, other]
        found = {p.pid: p.uid for p in procfs.processes(owners={uid})}
        assert found.get(sleepers[0].pid) == uid
        assert sleepers[1].pid not in found
        assert {p.pid: p.uid for p in procfs.processes()}.get(sleepers[1].pid) == other
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


@pytest.mark.skipif("namespaces" not in MODES, reason="the PID namespace's stand-in exists only with namespaces")
def test_a_worker_killed_from_outside_is_reported_as_killed(monkeypatch):
    """The stand-in outside the PID namespace exits as its worker did. SIGKILL takes no handler:
    resetting one raised, and the stand-in exited 255, so a killed worker read as 'exit code 255'."""
    import signal

    from autograder import config as grading_config
    from autograder.worker.client import Worker
    from autograder.worker.submission_errors import SubmissionHalted

    monkeypatch.setenv("AUTOGRADER_NAMESPACES", "auto")
    worker = Worker((ROOT / "solutions" / "attention.py").read_text(encoding="utf-8"),
                    grading_config.load().limits, uid=BASE_UID + 600)
    try:
        worker.start()
        worker.call("SelfAttention", "probe")
        for process in uid_processes(worker.sandbox.uid, worker.sandbox.uid):
            os.kill(process.pid, signal.SIGKILL)
        assert worker.proc.wait(timeout=10) == -signal.SIGKILL
        with pytest.raises(SubmissionHalted, match="crash: SIGKILL"):
            worker.call("SelfAttention", "probe")
    finally:
        worker.stop()


@pytest.mark.skipif("namespaces" not in MODES, reason="only the mount namespace can hide what every user may read")
def test_with_namespaces_a_worker_sees_only_the_systems_folders_and_its_own(tmp_path):
    """What other users left readable outside the system's folders (a stale clone with its
    solutions, a cohort in /srv, a file at the top of /) is out of the worker's view; its own
    interpreter still runs (the reference scores in full in the same grading)."""
    name = f"ag-hidden-{os.getpid()}"
    folder, single = Path("/") / name, Path("/") / f"{name}.txt"
    folder.mkdir(mode=0o755)
    try:
        (folder / "solution.py").write_text("SECRET-IN-FOLDER", encoding="utf-8")
        single.write_text("SECRET-AT-TOP", encoding="utf-8")
        for path in (folder / "solution.py", single):
            path.chmod(0o644)
        probe = (f"import os\nseen = []\nfor path in ({str(folder / 'solution.py')!r}, {str(single)!r}):\n"
                 "    try:\n        seen.append(open(path).read())\n    except OSError as exc:\n"
                 "        seen.append(type(exc).__name__)\n"
                 f"seen.append(sorted(os.listdir({str(folder)!r})) if os.path.isdir({str(folder)!r}) else 'gone')\n"
                 "raise RuntimeError(f'seen: {seen}')\n")
        submission = tmp_path / "attention.py"
        submission.write_text(probe, encoding="utf-8")
        command, env = grade_command(submission, tmp_path / "out", BASE_UID + 600, "namespaces")
        subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True, timeout=120)
        output = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["output"]
        assert "seen: ['FileNotFoundError', '', []]" in output, output
    finally:
        shutil.rmtree(folder)
        single.unlink(missing_ok=True)


def test_a_world_writable_folder_inside_another_owners_folder_is_a_writable_place():
    """/tmp/x (root's, 0755) holding /tmp/x/shared (0777): a worker uid can write there, and what
    it leaves is no top-level entry of /tmp, so the folder must be a place of its own."""
    outer = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        shared = outer / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        assert str(shared) in residue.writable_places.__wrapped__()
    finally:
        shutil.rmtree(outer)


FILTERED = """
import ctypes, os, shutil, sys, tempfile
from autograder.worker import seccomp
ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # no_new_privs
assert seccomp.install_filter()
source = tempfile.NamedTemporaryFile(delete=False)
source.write(b"x" * 65536)
source.close()
read_end, write_end = os.pipe()
with open(source.name, "rb") as handle:
    try:
        os.sendfile(write_end, handle.fileno(), 0, 4096)
        print("sent")
    except PermissionError:
        print("refused")
shutil.copyfile(source.name, source.name + ".copy")  # falls back to read and write
print(os.path.getsize(source.name + ".copy"))
"""


def test_the_filter_refuses_sendfile_and_a_file_copy_still_works():
    """sendfile from files into pipes pinned 3 GB of page cache beside a correct module at 48/48."""
    done = subprocess.run([sys.executable, "-c", FILTERED], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.split() == ["refused", "65536"], done.stderr


SPLIT_MAPPINGS = r"""
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
pages, shared = int(sys.argv[1]), sys.argv[2] == "shared"
if shared:  # one unnamed file each: shared anonymous memory
    for _ in range(pages):
        libc.mmap(None, 4096, 1, 0x21, -1, 0)
else:  # private pages, every other one read-only: a mapping each, never touched
    base = libc.mmap(None, pages * 4096, 3, 0x22, -1, 0)
    for page in range(0, pages, 2):
        libc.mprotect(ctypes.c_void_p(base + page * 4096), 4096, 1)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("kind", ["private", "shared"])
def test_the_kernels_memory_for_mappings_counts_against_the_limit(kind):
    """30 processes of 65,400 untouched mappings each held 4.8 GB of the kernel's memory under a
    512 MiB limit, and the watch stat-ed every unnamed one at every sample (an outside attacker's):
    each mapping now counts its kernel bytes, and more unnamed ones than MAX_ENTRIES is over any limit."""
    pages = 20_000
    child = subprocess.Popen([sys.executable, "-c", SPLIT_MAPPINGS, str(pages), kind], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        held = residue.held_bytes([child.pid])
    finally:
        child.kill()
        child.wait()
    if kind == "shared":
        assert held == residue.OVER_ANY_LIMIT
    else:
        assert pages * residue.MAPPING_BYTES <= held < residue.OVER_ANY_LIMIT
