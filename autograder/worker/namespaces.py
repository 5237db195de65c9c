"""The second layer of isolation, where the kernel allows it: namespaces of the worker's own.

The first layer (sandbox.py: another uid, private file modes) must hold alone, because
Gradescope grades in Docker, whose default seccomp and AppArmor profiles refuse the unshare and
mount calls used here. Where they are allowed (root on a plain Linux machine), the worker also
gets, entering them in its forked child before it drops privileges:

  pid    its own process tree and a fresh /proc: it cannot see the grader's command line or any
         other process, and when it ends (or the grader dies) the kernel kills all it started
  mount  every file system read-only and nosuid but a private /tmp, /var/tmp, /dev/shm and
         sandbox home/tmp, all on one tmpfs of `scratch_mib`: what it writes is bounded, counted
         as its memory, and gone with it, whatever world-writable folders the machine has; and
         of /, only the system's folders (SYSTEM) and the interpreter's: what other users left
         readable elsewhere (a copy of the project, a cohort, /home) is out of its view
  ipc    System V objects of its own, capped, destroyed with it
  net    no network interface but a loopback that is down

Why unshare(2) and not bubblewrap: batch workers are forks of a warm zygote that has torch
loaded, and bubblewrap can only exec a new program; the same few calls serve both paths, and
bubblewrap is refused in Docker by the same profiles, so it would add no portable layer.
"""
import ctypes
import functools
import os
import signal

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG = 1
LAYERS = ("pid", "mount", "ipc", "net")
SCRATCH_INODES = 16384  # files and folders the worker may create in its scratch space
SYSV_SEGMENTS = 16  # System V shared memory segments in the worker's IPC namespace
FLAGS = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source, target, fstype=None, flags=0, options=None):
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), flags, encode(options)), f"mount {target}")


def die_with_parent():
    """Be killed when the process that forked this one ends (cleared by setuid: set it again after)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _become_pid_one():
    """unshare(CLONE_NEWPID) moves only the caller's children: fork, and keep the caller as a
    stand-in that holds no file descriptor (the grader sees EOF when the worker ends) and exits
    as its child did. Both die with their parent, so a killed grader takes the namespace along."""
    die_with_parent()
    pid = os.fork()
    if pid == 0:
        return
    os.closerange(0, os.sysconf("SC_OPEN_MAX"))
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code < 0:
        if -code != signal.SIGKILL:  # it takes no handler: signal.signal would raise (exit 255)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


MASKED = ("/tmp", "/var/tmp", "/dev/shm")  # replaced by the scratch space in the worker's view
# The top-level entries of / that stay in the worker's view: the programs, libraries, configuration
# and devices Python and torch load from (store trees of Nix, Guix and snap included). Every other
# one (/root, /home, /work, /srv, /opt, /mnt, /run, a file such as /container_info.json) is hidden
# behind an empty read-only folder, or /dev/null for a file, apart from the interpreter's folders:
# a copy of the project, of the solutions or of a cohort readable by every user stays out of reach.
SYSTEM = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys",
                    "tmp", "var", "nix", "gnu", "snap"})


def _read_only_everywhere():
    """Remount every mount of the new namespace read-only and nosuid (bind remounts: the host's
    mounts are untouched), so the worker can write nowhere but the mounts made next. Device nodes
    stay usable (torch reads /dev/urandom): a read-only /dev still lets /dev/null be written."""
    with open("/proc/self/mountinfo") as handle:
        points = [line.split()[4] for line in handle]
    for point in dict.fromkeys(points):
        point = point.encode().decode("unicode_escape")  # mountinfo writes spaces as \040
        if point == "/proc" or point.startswith("/proc/"):
            continue  # replaced by a fresh proc below
        if _libc.mount(None, point.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, None):
            if point == "/":
                _check(-1, "remount / read-only")


def enter(root, uid, scratch_mib, keep=()):
    """In the worker's forked child, as root: enter new namespaces and lay out the worker's view.

    `root` is the sandbox folder; its home/ and tmp/, like /tmp, /var/tmp and /dev/shm, become
    folders of one tmpfs of scratch_mib, so every byte the worker can write is in that tmpfs.
    The sandbox and the folders in `keep` (its interpreter's) stay where they were, even when
    they lie under one of the covered places.
    """
    cwd = os.getcwd()
    _check(_libc.unshare(FLAGS), "unshare")
    _become_pid_one()
    _mount(None, "/", flags=MS_REC | MS_PRIVATE)
    _read_only_everywhere()
    wanted = list(dict.fromkeys([root, *keep, *(os.path.realpath(k) for k in keep)]))
    hidden = _hidden(wanted)
    kept = {path: os.open(path, os.O_PATH) for path in wanted
            if any(path == place or path.startswith(place + "/") for place in (*MASKED, *hidden))}
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={scratch_mib}m,nr_inodes={SCRATCH_INODES},mode=1777")
    places = {"/var/tmp": 0o1777, "/dev/shm": 0o1777, f"{root}/home": 0o700, f"{root}/tmp": 0o700}
    for index, mode in enumerate(places.values()):
        os.mkdir(f"/tmp/.scratch-{index}")
        os.chmod(f"/tmp/.scratch-{index}", mode)
        if mode == 0o700:
            os.chown(f"/tmp/.scratch-{index}", uid, uid)
    for index, target in enumerate(list(places)[:2]):
        _mount(f"/tmp/.scratch-{index}", target, flags=MS_BIND)
    for place, is_folder in hidden.items():
        if is_folder:
            _mount("tmpfs", place, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=0755")
        else:
            _mount("/dev/null", place, flags=MS_BIND)
    mask = os.umask(0o022)  # the folders on the way to a kept path must stay searchable
    for path, handle in kept.items():
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{handle}", path, flags=MS_BIND | MS_REC)
        os.close(handle)
    os.umask(mask)
    for place, is_folder in hidden.items():
        if is_folder:
            _mount(None, place, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for index, target in list(enumerate(places))[2:]:
        _mount(f"/tmp/.scratch-{index}", target, flags=MS_BIND)
    for name, value in (("shmmni", SYSV_SEGMENTS), ("shmmax", scratch_mib << 20),
                        ("shmall", (scratch_mib << 20) // os.sysconf("SC_PAGE_SIZE"))):
        with open(f"/proc/sys/kernel/{name}", "w") as handle:
            handle.write(str(value))
    os.chdir(cwd)  # the same folder, now reached through the new mounts


def _hidden(wanted):
    """The top-level entries of / to hide ({path: is a folder}): not SYSTEM, not a symbolic link
    (/lib -> usr/lib), and not itself one of the `wanted` paths (an interpreter installed as /opt
    stays whole); the wanted paths under a hidden folder are bound back into it."""
    found = {}
    with os.scandir("/") as entries:
        for entry in entries:
            path = "/" + entry.name
            if entry.name in SYSTEM or entry.is_symlink() or path in wanted:
                continue
            if entry.is_dir(follow_symlinks=False):
                found[path] = True
            elif entry.is_file(follow_symlinks=False):
                found[path] = False
    return found


@functools.lru_cache(maxsize=1)
def available():
    """Whether this machine lets the grader put workers in namespaces (tried once, in a child).

    AUTOGRADER_NAMESPACES=off turns the layer off (to exercise the uid-only layer alone).
    """
    if os.geteuid() != 0 or os.environ.get("AUTOGRADER_NAMESPACES", "auto") == "off":
        return False
    pid = os.fork()
    if pid == 0:
        try:
            _check(_libc.unshare(FLAGS), "unshare")
            _become_pid_one()
            _mount(None, "/", flags=MS_REC | MS_PRIVATE)
            _read_only_everywhere()
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m")
            os._exit(0)
        except BaseException:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def scratch_used(pids):
    """Bytes in use on the scratch tmpfs of the worker, seen through the first of its processes
    (host pids) that lives in a mount namespace other than the grader's: a process of the worker's
    uid still in the grader's namespace (kill_uid's helper, say) would show the host's /tmp. 0 if
    none is readable."""
    try:
        ours = os.readlink("/proc/self/ns/mnt")
    except OSError:
        return 0
    for pid in pids:
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") == ours:
                continue
            stats = os.statvfs(f"/proc/{pid}/root/tmp")
        except OSError:
            continue
        return (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    return 0
