"""A third layer where the kernel has Landlock (Linux 5.13+): no device file but the harmless ones.

Device files open kernel resources that no count of the grader's sees. /dev/ptmx is mode 0666
everywhere: a worker that opened it 4,000 times took every pseudo-terminal of the machine (the
host could open none) and filled their buffers with ~100 MiB of unreclaimable kernel memory,
counted as nothing. A read-only mount does not stop it (opening a device is not writing to the
file system), and in the uid-only layer (Gradescope's Docker) the worker shares the container's
/dev. Landlock restricts which files a process may open, unprivileged and for good, across exec:
the worker may open files anywhere but under /dev, where only null, zero, full, random, urandom,
shm/ and NVIDIA's device files (the CUDA checks) stay open. File modes, mounts and the uid
still decide everything else.

Applied after no_new_privs, in both layers, where the kernel offers Landlock (available()); the
isolation line then names it.
"""
import ctypes
import functools
import os
import struct

SYSCALLS = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}  # the same on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
ACCESS_FS_WRITE_FILE, ACCESS_FS_READ_FILE, ACCESS_FS_IOCTL_DEV = 1 << 1, 1 << 2, 1 << 15
IOCTL_DEV_ABI = 5  # the first Landlock ABI that can restrict ioctl on devices
DEVICES = ("null", "zero", "full", "random", "urandom", "shm")  # under /dev, what the worker may open
ACCELERATOR_PREFIX = "nvidia"  # /dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-caps/: CUDA's

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


@functools.lru_cache(maxsize=1)
def abi():
    """The kernel's Landlock ABI version, or 0 where it has none (or a seccomp profile refuses it)."""
    version = _libc.syscall(SYSCALLS["create_ruleset"], None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(version, 0)


def available():
    return abi() > 0


def restrict():
    """Restrict this process (and all it starts) to the files above; OSError if the kernel refuses."""
    handled = ACCESS_FS_READ_FILE | ACCESS_FS_WRITE_FILE | (ACCESS_FS_IOCTL_DEV if abi() >= IOCTL_DEV_ABI else 0)
    attr = ctypes.create_string_buffer(struct.pack("=Q", handled))
    ruleset = _libc.syscall(SYSCALLS["create_ruleset"], attr, ctypes.c_size_t(len(attr.raw)), ctypes.c_uint32(0))
    _check(ruleset, "landlock_create_ruleset")
    try:
        for path in _allowed_paths():
            _allow(ruleset, path, handled)
        _check(_libc.syscall(SYSCALLS["restrict_self"], ctypes.c_int(ruleset), ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _allowed_paths():
    """Every entry of / but /dev, and the device files DEVICES and the accelerator's."""
    with os.scandir("/") as entries:
        top = [entry.path for entry in entries if entry.name != "dev"]
    with os.scandir("/dev") as entries:
        devices = [entry.path for entry in entries
                   if entry.name in DEVICES or entry.name.startswith(ACCELERATOR_PREFIX)]
    return top + devices


def _allow(ruleset, path, handled):
    """Allow the handled accesses (all of them rights a file takes too) beneath path; a path that
    cannot be opened (a dangling link, a vanished entry) is skipped: nothing beneath it opens either."""
    try:
        descriptor = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        rule = ctypes.create_string_buffer(struct.pack("=Qi", handled, descriptor))
        _check(_libc.syscall(SYSCALLS["add_rule"], ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), rule,
                             ctypes.c_uint32(0)), f"landlock_add_rule {path}")
    finally:
        os.close(descriptor)


def _check(result, what):
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
