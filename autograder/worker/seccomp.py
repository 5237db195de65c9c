"""A system call filter for the worker: no namespaces of its own, and no kernel memory that no count sees.

An unprivileged process may create a user namespace, and inside it mount file systems of any size
(tmpfs: memory no RSS shows and no grader count reaches) or build a sandbox the grader cannot see
into. Docker's default seccomp profile already refuses it (that is Gradescope's case); this filter
refuses it everywhere else, in both isolation layers: unshare and clone with CLONE_NEWUSER (or any
other namespace flag) fail with EPERM, and clone3, whose flags a filter cannot read, fails with
ENOSYS, so that the C library falls back to clone, as it does under Docker.

The calls in REFUSED fail with EPERM: each makes kernel memory that neither a process's RSS nor
the grader's count of memory outside processes shows, and the worker needs none of them (it has no
network and talks to the grader over pipes it was given). socket and socketpair: 100 filled Unix
socket pairs held 1.7 GB against a 512 MiB limit. io_uring: its IORING_OP_SOCKET makes sockets
without calling socket (110 filled pairs, 1.7 GB). System V message queues and semaphore sets:
16 million empty messages in 1024 queues held 1.2 GB of unreclaimable kernel memory, with a
ceiling of ~31 GB (shared memory segments, which torch never uses either, are counted instead:
watch.py). inotify and fanotify: each watch pins an inode in the kernel's caches (137k watches on
files under /usr, one uid's default limit being 192k, held 190 MB). bpf: maps are kernel memory
(most kernels refuse it to unprivileged users already, as Docker's profile does). add_key,
request_key and keyctl: a key in the uid's persistent keyring (KEYCTL_GET_PERSISTENT) outlives
every process for days (kernel.keys.persistent_keyring_expiry), so the grader retires that uid
for good: a few hundred gradings could use up the uid range (Docker's profile refuses them too).
setsid: each session is a group of its own for the scheduler (autogroup), so 58 busy loops in
58 sessions took 58 shares of the cores from a classmate graded beside them (their grading ran
out of time); the worker is already a session's leader, and its processes stay in its session.
vmsplice, splice and tee: a pipe's slot holds a whole page, and vmsplice gives it a process's own
(a 2 MiB transparent huge page, madvise'd, counts as one 4 KiB slot of the uid's pipe quota): 64
pipes held ~2 GiB that no RSS, file or scratch folder shows, against a 512 MiB limit; splice and tee
pin pages of files and of other pipes the same way, and so does sendfile from a file into a pipe
(one byte for each 2 MiB read from /usr pinned 3 GB of page cache beside a correct module at 48/48;
Python's shutil.copyfile falls back to read and write when it is refused); a pipe written with
write() holds only what its quota allows. epoll_create and epoll_create1: a watch outlives the descriptor it watched
while the file stays open elsewhere, so 256 descriptors registered over and over in 80 epoll
instances made the uid's whole quota of watches (4% of the machine's memory: 1.1 GB here). File
locks (fcntl's F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW fail with ENOLCK): no limit applies to
their number, and a lock on an unlinked file lives as long as a mapping of it, after its
descriptor is closed (2.8 million byte-range locks held 540 MB and grew until the grading ended).
perf_event_open: a ring buffer mapped from a perf event is pinned memory that no RSS shows (58
processes pinned ~460 MiB beside a correct module, which kept its 48 points); Docker's profile
refuses it too.
setxattr, lsetxattr, fsetxattr and setxattrat: on a tmpfs (the scratch folder, /dev/shm) a user
xattr is unreclaimable kernel memory that neither the file's size nor its blocks show (100k
attributes of 4000 bytes on one empty file held 400 MB in an 8 MiB tmpfs, with no limit met).
landlock_create_ruleset, landlock_add_rule and landlock_restrict_self: each thread that restricts
itself keeps its own copy of a ruleset's rules (a rule for each of ~230k files under /usr and /etc,
~18 MB a thread: 50 threads held 813 MiB beside a correct module that kept its 48 points); the
sandbox applies its own Landlock layer before this filter.
Installed after no_new_privs, the filter is inherited by every process the worker
starts and cannot be removed.
"""
import ctypes
import os
import struct

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOLCK, ENOSYS = 1, 37, 38
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
REFUSED = ("socket", "socketpair", "io_uring_setup", "io_uring_enter", "io_uring_register", "msgget", "semget",
           "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "bpf", "add_key", "request_key",
           "keyctl", "setsid", "vmsplice", "splice", "tee", "epoll_create", "epoll_create1", "perf_event_open",
           "setxattr", "lsetxattr", "fsetxattr", "setxattrat", "landlock_create_ruleset", "landlock_add_rule",
           "landlock_restrict_self", "sendfile")
# fcntl's commands that take a lock (a byte range, on the process or the open file description)
LOCKING = (6, 7, 37, 38)  # F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW
# (audit architecture, system call numbers) per machine (aarch64 has no inotify_init); x86_64's x32
# calls have bit 30 set
ARCHITECTURES = {
    "x86_64": (0xC000003E, {"unshare": 272, "clone": 56, "clone3": 435, "socket": 41, "socketpair": 53,
                            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                            "msgget": 68, "semget": 64, "inotify_init": 253, "inotify_init1": 294,
                            "inotify_add_watch": 254, "fanotify_init": 300, "bpf": 321, "add_key": 248,
                            "request_key": 249, "keyctl": 250, "setsid": 112, "vmsplice": 278, "splice": 275,
                            "tee": 276, "epoll_create": 213, "epoll_create1": 291, "perf_event_open": 298, "fcntl": 72,
                            "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "setxattrat": 463,
                            "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
                            "sendfile": 40}),
    "aarch64": (0xC00000B7, {"unshare": 97, "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199,
                             "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                             "msgget": 186, "semget": 190, "inotify_init1": 26, "inotify_add_watch": 27,
                             "fanotify_init": 262, "bpf": 280, "add_key": 217, "request_key": 218, "keyctl": 219,
                             "setsid": 157, "vmsplice": 75, "splice": 76, "tee": 77, "epoll_create1": 20,
                             "perf_event_open": 241, "fcntl": 25, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7,
                             "setxattrat": 463, "landlock_create_ruleset": 444, "landlock_add_rule": 445,
                             "landlock_restrict_self": 446, "sendfile": 71}),
}
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06


def _program(arch, numbers):
    """The classic BPF program, as (code, jump if true, jump if false, k) instructions."""
    deny, missing, allow = SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ERRNO | ENOSYS, SECCOMP_RET_ALLOW
    no_lock = SECCOMP_RET_ERRNO | ENOLCK
    refused = [numbers[name] for name in REFUSED if name in numbers]
    last = len(refused) - 1
    return [
        (LD_W_ABS, 0, 0, 4),              # architecture
        (JEQ_K, 1, 0, arch),              # ours: go on; else refuse
        (RET_K, 0, 0, deny),
        (LD_W_ABS, 0, 0, 0),              # system call number
        (JGE_K, 0, 1, 0x40000000),        # x32 calls: refuse
        (RET_K, 0, 0, deny),
        (JEQ_K, 0, 1, numbers["clone3"]),
        (RET_K, 0, 0, missing),
        # each refused call jumps to the one refusal after them; the last one's "no" skips it
        *((JEQ_K, last - i, 1 if i == last else 0, number) for i, number in enumerate(refused)),
        (RET_K, 0, 0, deny),
        # fcntl: its command, the second argument, decides (the number is no longer loaded after)
        (JEQ_K, 0, len(LOCKING) + 3, numbers["fcntl"]),
        (LD_W_ABS, 0, 0, 24),             # low 32 bits of the second argument
        *((JEQ_K, len(LOCKING) - i, 0, command) for i, command in enumerate(LOCKING)),
        (RET_K, 0, 0, allow),
        (RET_K, 0, 0, no_lock),
        (JEQ_K, 1, 0, numbers["unshare"]),  # flags in the first argument for both calls
        (JEQ_K, 0, 3, numbers["clone"]),
        (LD_W_ABS, 0, 0, 16),             # low 32 bits of the first argument
        (JSET_K, 0, 1, NAMESPACE_FLAGS),
        (RET_K, 0, 0, deny),
        (RET_K, 0, 0, allow),
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
