"""A system call filter for the worker: it may not make namespaces or sockets of its own.

An unprivileged process may create a user namespace, and inside it mount file systems of any size
(tmpfs: memory no RSS shows and no grader count reaches) or build a sandbox the grader cannot see
into. Docker's default seccomp profile already refuses it (that is Gradescope's case); this filter
refuses it everywhere else, in both isolation layers: unshare and clone with CLONE_NEWUSER (or any
other namespace flag) fail with EPERM, and clone3, whose flags a filter cannot read, fails with
ENOSYS, so that the C library falls back to clone, as it does under Docker. socket and socketpair
fail with EPERM too: the worker has no network, talks to the grader over pipes it was given, and
a socket's buffers are kernel memory no RSS shows (100 filled socket pairs held 1.7 GB against a
512 MiB limit). Installed after no_new_privs, the filter is inherited by every process the worker
starts and cannot be removed.
"""
import ctypes
import os
import struct

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
# (audit architecture, unshare, clone, clone3, socket, socketpair) per machine; x86_64's x32 calls
# have bit 30 set
ARCHITECTURES = {"x86_64": (0xC000003E, 272, 56, 435, 41, 53), "aarch64": (0xC00000B7, 97, 220, 435, 198, 199)}
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06


def _program(arch, unshare, clone, clone3, socket, socketpair):
    """The classic BPF program, as (code, jump if true, jump if false, k) instructions."""
    deny, missing, allow = SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ERRNO | ENOSYS, SECCOMP_RET_ALLOW
    return [
        (LD_W_ABS, 0, 0, 4),              # 0  architecture
        (JEQ_K, 1, 0, arch),              # 1  ours: go on; else refuse
        (RET_K, 0, 0, deny),              # 2
        (LD_W_ABS, 0, 0, 0),              # 3  system call number
        (JGE_K, 0, 1, 0x40000000),        # 4  x32 calls: refuse
        (RET_K, 0, 0, deny),              # 5
        (JEQ_K, 0, 1, clone3),            # 6
        (RET_K, 0, 0, missing),           # 7
        (JEQ_K, 1, 0, socket),            # 8  sockets: refuse
        (JEQ_K, 0, 1, socketpair),        # 9
        (RET_K, 0, 0, deny),              # 10
        (JEQ_K, 1, 0, unshare),           # 11 flags in the first argument for both calls
        (JEQ_K, 0, 3, clone),             # 12
        (LD_W_ABS, 0, 0, 16),             # 13 low 32 bits of the first argument
        (JSET_K, 0, 1, NAMESPACE_FLAGS),  # 14
        (RET_K, 0, 0, deny),              # 15
        (RET_K, 0, 0, allow),             # 16
    ]


def install_filter():
    """Install the filter in this process (after no_new_privs); False where it cannot be."""
    numbers = ARCHITECTURES.get(os.uname().machine)
    if numbers is None:
        return False
    program = _program(*numbers)
    filters = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *op) for op in program))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Program(len(program), ctypes.addressof(filters))
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0
