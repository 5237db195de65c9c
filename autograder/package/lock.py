"""requirements.lock: the exact versions the grader is tested with, and what ships from it.

pyproject.toml keeps ranges; a grading machine must not. Hypothesis does not promise the same
examples across its versions, and torch or numpy may round differently, so an image built next
month from ranges could give another score to the same file. The lock at the project root pins
every distribution the grader needs, its dependencies included, to the version of the
environment it was made in (`python -m autograder.package.lock`), and names the Python it was
made with. From it:

- build.py writes requirements.txt for Gradescope's image and Otter's environment: the locked
  closure of GRADING_PACKAGES only (what run_autograder imports; matplotlib and jinja2 serve
  cohort reports, though torch brings jinja2 along);
- __main__.py installs `.venv/` from it on first use;
- outcome_versions() gives the versions that decide outcomes, for the suite version that batch
  uses to tell whether a stored outcome is still valid.

Standard library only at import time: __main__ reads the lock before any dependency exists.
"""
import functools
import importlib.metadata
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
LOCK_PATH = PROJECT / "requirements.lock"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# What decides a verdict: the worker's arithmetic (torch, numpy), the examples drawn
# (hypothesis) and the runner that collects the outcomes (pytest).
OUTCOME_PACKAGES = ("torch", "numpy", "hypothesis", "pytest")
# What grading imports, in the grader (autograder.gradescope → grade → suite_runner, config,
# feedback, summary) and in the worker (child.py): nothing of cohort reports.
GRADING_PACKAGES = ("torch", "numpy", "hypothesis", "pytest", "pyyaml", "rich")
DIRECT = "attention-autograder"  # the "via" of a pyproject dependency

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*$")
VIA = re.compile(r"^\s+#\s*via\s+(.+)$")
PYTHON = re.compile(r"^#\s*python:\s*(\d+)\.(\d+)\s*$")


def canonical(name):
    """PEP 503 name: PyYAML, pyyaml and py_yaml are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def outcome_versions():
    """{distribution: installed version, or None} for OUTCOME_PACKAGES, from importlib.metadata of
    this interpreter (read once per process). The worker runs this interpreter too, unless
    AUTOGRADER_WORKER_PYTHON names another."""
    return dict(_outcome_versions())


@functools.lru_cache(maxsize=1)
def _outcome_versions():
    versions = []
    for name in OUTCOME_PACKAGES:
        try:
            versions.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            versions.append((name, None))
    return tuple(versions)


@dataclass
class Lock:
    python: tuple  # (major, minor) the lock was made with
    options: list  # pip option lines (the CPU index)
    pins: dict = field(default_factory=dict)  # canonical name → version
    via: dict = field(default_factory=dict)  # canonical name → set of canonical names (or DIRECT)

    def closure(self, roots):
        """The locked names that installing `roots` brings in: the roots and, again and again,
        every pin required by one already in."""
        wanted = {canonical(r) for r in roots}
        missing = wanted - set(self.pins)
        if missing:
            raise ValueError(f"not in the lock: {sorted(missing)}")
        while True:
            more = {name for name, parents in self.via.items() if parents & wanted} - wanted
            if not more:
                return sorted(wanted)
            wanted |= more

    def mismatches(self, names=None):
        """[(name, locked, installed or None)] where this environment differs from the lock."""
        found = []
        for name in sorted(names if names is not None else self.pins):
            try:
                installed = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                installed = None
            if installed != self.pins[canonical(name)]:
                found.append((name, self.pins[canonical(name)], installed))
        return found


def note_if_unlike_the_lock(stream=None):
    """Say on `stream` which packages that decide a verdict differ here from requirements.lock (a
    CUDA build of torch takes ~530 MiB at import: every file then fails for memory at 512). Silent
    where no lock is (Gradescope's image installs the lock's requirements.txt) or all match."""
    try:
        locked = read()
    except (OSError, ValueError):
        return
    unlike = locked.mismatches(OUTCOME_PACKAGES)
    if unlike:
        shown = ", ".join(f"{name} {installed or 'missing'} (lock: {version})" for name, version, installed in unlike)
        print(f"note: this environment is not the lock's: {shown}; grades may differ from Gradescope's. "
              f"Install the lock: pip install -r {LOCK_PATH}", file=stream or sys.stderr)


def parse(text):
    """A Lock from the text of requirements.lock (or of a requirements.txt built from it)."""
    lock = Lock(python=None, options=[])
    last = None
    for line in text.splitlines():
        if (python := PYTHON.match(line)):
            lock.python = (int(python[1]), int(python[2]))
        elif (pin := PIN.match(line)):
            last = canonical(pin[1])
            lock.pins[last] = pin[2]
            lock.via[last] = set()
        elif (via := VIA.match(line)) and last:
            lock.via[last] |= {canonical(v.strip()) for v in via[1].split(",")}
        elif line.startswith("--"):
            lock.options.append(line.strip())
        elif line.strip() and not line.lstrip().startswith("#"):
            raise ValueError(f"unexpected line in the lock: {line!r}")
    if lock.python is None:
        raise ValueError("the lock does not say which Python it was made with ('# python: X.Y')")
    return lock


def read(path=LOCK_PATH):
    return parse(Path(path).read_text(encoding="utf-8"))


def render(lock, header):
    """The text of a lock file: header comments, the Python, pip options, then one pin per line
    (sorted) with the locked packages that need it."""
    lines = [*(f"# {h}" if h else "#" for h in header),
             f"# python: {lock.python[0]}.{lock.python[1]}", *lock.options]
    for name in sorted(lock.pins):
        lines.append(f"{name}=={lock.pins[name]}")
        lines.append(f"    # via {', '.join(sorted(lock.via[name], key=lambda v: (v != DIRECT, v)))}")
    return "\n".join(lines) + "\n"


LOCK_HEADER = [
    "requirements.lock: the exact versions this grader is tested with, its dependencies included.",
    "Made from a working environment by `python -m autograder.package.lock`; do not edit by hand.",
    "Install them: pip install -r requirements.lock -e .   (the CPU build of torch comes from the index below)",
    "`python -m autograder build` ships the part that grading needs as requirements.txt.",
]


def requirements_txt(lock, roots=GRADING_PACKAGES):
    """requirements.txt for a grading machine: the locked closure of `roots` (default: what
    grading imports), the CPU index, and the Python the lock was made with."""
    wanted = lock.closure(roots)
    roots = {canonical(r) for r in roots}
    via = {n: (lock.via[n] & set(wanted)) | ({DIRECT} if n in roots else set()) for n in wanted}
    part = Lock(lock.python, lock.options, {n: lock.pins[n] for n in wanted}, via)
    header = [
        "Generated from requirements.lock by `python -m autograder build`: what grading imports,",
        f"pinned to the versions the grader is tested with ({', '.join(GRADING_PACKAGES)} and their",
        "dependencies). PyTorch's CPU index below serves the +cpu build of torch.",
        f"setup.sh builds its venv with the Python named here (python{lock.python[0]}.{lock.python[1]}).",
    ]
    return render(part, header)


def from_environment(dependencies, python=sys.version_info[:2]):
    """A Lock of this environment: every distribution that `dependencies` (requirement strings,
    as in pyproject.toml) need here, with its installed version. Markers are evaluated for this
    interpreter; extras of dependencies are not followed."""
    from packaging.requirements import Requirement  # pytest's own dependency: here when locking

    lock = Lock(python=tuple(python), options=[f"--extra-index-url {TORCH_CPU_INDEX}"])
    queue = [(Requirement(d), DIRECT) for d in dependencies]
    while queue:
        requirement, parent = queue.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonical(requirement.name)
        if name in lock.pins:
            lock.via[name].add(parent)
            continue
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(f"{requirement.name} (needed by {parent}) is not installed: install the project first")
        lock.pins[name] = distribution.version
        lock.via[name] = {parent}
        queue += [(Requirement(r), name) for r in distribution.requires or ()]
    return lock


def project_dependencies():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pip's own copy of the same parser
        from pip._vendor import tomli as tomllib
    with open(PROJECT / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["project"]["dependencies"]


def main(argv=None):
    """`python -m autograder.package.lock [--check]`: write requirements.lock from this
    environment, or (--check) exit 1 if it differs from what is written."""
    argv = sys.argv[1:] if argv is None else argv
    text = render(from_environment(project_dependencies()), LOCK_HEADER)
    if "--check" in argv:
        if LOCK_PATH.exists() and LOCK_PATH.read_text(encoding="utf-8") == text:
            print(f"{LOCK_PATH}: matches this environment")
            return 0
        print(f"{LOCK_PATH}: differs from this environment (run python -m autograder.package.lock to rewrite it, "
              f"or pip install -r {LOCK_PATH.name} to match it)", file=sys.stderr)
        return 1
    LOCK_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {LOCK_PATH} ({text.count('==')} pins, Python {sys.version_info[0]}.{sys.version_info[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
