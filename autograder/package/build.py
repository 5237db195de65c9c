"""`python -m autograder build --out dist/`: everything an instructor uploads or hands out.

- autograder.zip, for Gradescope: setup.sh, run_autograder, requirements.txt, grading.yml, the
  grader (hidden suite included), failure_results.json (the notice run_autograder leaves when
  Python cannot start) and selfcheck/ (the handout's stub and Gradescope's results.json schema,
  for setup.sh's self-check).
- student.zip: each folder of assignments/ (stub, public tests, statement), the statements'
  points, totals and limits rendered from the grading.yml being built (statement.py).
- otter/, for Otter-grader 7: tests/ generated from grading.yml, the grader as a support folder
  and requirements.txt; `cd otter && otter generate --python-version 3.11 attention_grader` makes
  Otter's zip (the Python of the lock).

requirements.txt is the part of requirements.lock that grading needs, pinned (lock.py).
Neither the reference solutions nor the project's tests are ever shipped: only the files named
here are, and the build refuses any whose content is that of a file in solutions/.
Zips are reproducible: same files, same bytes (fixed timestamps, sorted names).
"""
import hashlib
import json
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..exercise import EXERCISE
from .. import config as grading_config
from ..gradescope import failure_results
from . import lock, otter, statement

PROJECT = Path(__file__).resolve().parents[2]
TEMPLATES = Path(__file__).resolve().parent / "gradescope"
STUB = EXERCISE.stub  # public: the handout's stub
SCHEMA = PROJECT / "tests" / "gradescope_results.schema.json"  # public: Gradescope's published format
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


class BuildError(UsageError):
    """The build would ship something it must not."""


@dataclass(frozen=True)
class Entry:
    name: str  # path inside the zip or folder, with /
    data: bytes
    mode: int = 0o644


def tree(folder, prefix):
    """The files under folder as entries named prefix/..., without caches or hidden files and folders
    (.pytest_cache, .hypothesis, .ipynb_checkpoints, editor files)."""
    entries = []
    for path in sorted(Path(folder).rglob("*")):
        parts = path.relative_to(folder).parts
        if not path.is_file() or path.suffix == ".pyc" or any(
                p == "__pycache__" or p.startswith(".") for p in parts):
            continue
        mode = 0o755 if os.access(path, os.X_OK) else 0o644
        entries.append(Entry("/".join((prefix, *parts)), path.read_bytes(), mode))
    return entries


def requirements(lock_path=lock.LOCK_PATH):
    """requirements.txt for the grading machines: what grading imports, at the locked versions
    (torch's +cpu build from PyTorch's CPU index), and the Python the lock was made with."""
    try:
        return lock.requirements_txt(lock.read(lock_path))
    except (OSError, ValueError) as exc:
        raise BuildError(f"cannot read {lock_path}: {exc}") from exc


def grader_entries(config_path, prefix=""):
    """The grader as shipped: the autograder package and the grading.yml it grades with."""
    lead = f"{prefix}/" if prefix else ""
    return [*tree(PROJECT / "autograder", lead + "autograder"),
            Entry(lead + "grading.yml", Path(config_path).read_bytes())]


def gradescope_entries(config_path):
    return [
        Entry("setup.sh", (TEMPLATES / "setup.sh").read_bytes(), 0o755),
        Entry("run_autograder", (TEMPLATES / "run_autograder").read_bytes(), 0o755),
        Entry("requirements.txt", requirements().encode()),
        Entry("failure_results.json", (json.dumps(failure_results("start"), ensure_ascii=False, indent=1) + "\n").encode()),
        Entry(f"selfcheck/{STUB.name}", STUB.read_bytes()),
        Entry("selfcheck/results.schema.json", SCHEMA.read_bytes()),
        *grader_entries(config_path),
    ]


def student_entries(config=None):
    """Each folder of assignments/; with config, its statements' generated blocks (points, limits)
    rendered from that grading.yml (statement.py)."""
    folders = sorted(p for p in (PROJECT / "assignments").iterdir() if p.is_dir())
    entries = [entry for folder in folders for entry in tree(folder, folder.name)]
    if config is None:
        return entries
    try:
        return statement.render_entries(entries, config)
    except statement.StatementError as exc:
        raise BuildError(str(exc)) from exc


def otter_entries(config, config_path):
    tests = [Entry(f"tests/{name}", text.encode()) for name, text in otter.test_files(config).items()]
    return [*tests, *grader_entries(config_path, otter.GRADER_FOLDER),
            Entry("requirements.txt", requirements().encode())]


def refuse_solutions(entries, solutions=PROJECT / "solutions"):
    """Raise BuildError if any entry's content is that of a reference solution (empty files aside)."""
    secret = {hashlib.sha256(p.read_bytes()).digest() for p in Path(solutions).rglob("*")
              if p.is_file() and p.stat().st_size}
    leaked = [e.name for e in entries if hashlib.sha256(e.data).digest() in secret]
    if leaked:
        raise BuildError(f"refusing to ship the reference solution as {leaked}")


def write_zip(path, entries):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry in sorted(entries, key=lambda e: e.name):
            info = zipfile.ZipInfo(entry.name, ZIP_TIME)
            info.external_attr = (0o100000 | entry.mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, entry.data)


def write_tree(folder, entries):
    """Write entries under folder, replacing whatever an earlier build left there."""
    shutil.rmtree(folder, ignore_errors=True)
    for entry in entries:
        path = Path(folder, *entry.name.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(entry.data)
        path.chmod(entry.mode)


def build(out, config_path=grading_config.DEFAULT_PATH):
    """Write out/autograder.zip, out/student.zip and out/otter/; return {artifact: (path, entries)}."""
    config = grading_config.load(config_path)  # a broken grading.yml is reported before shipping
    out = Path(out)
    artifacts = {
        "autograder.zip": gradescope_entries(config_path),
        "student.zip": student_entries(config),
        "otter": otter_entries(config, config_path),
    }
    for entries in artifacts.values():
        refuse_solutions(entries)
    built = {}
    for name, entries in artifacts.items():
        (write_tree if name == "otter" else write_zip)(out / name, entries)
        built[name] = (out / name, entries)
    return built


def cmd_build(args):
    built = build(args.out, args.config)
    for name, (path, entries) in built.items():
        size = path.stat().st_size if path.is_file() else sum(len(e.data) for e in entries)
        print(f"{path}  {len(entries)} files, {size / 1024:.0f} KiB")
    otter_dir = built["otter"][0]
    python = "{}.{}".format(*lock.read().python)
    print(f"Otter: cd {otter_dir} && otter generate --python-version {python} {otter.GRADER_FOLDER}"
          "   (then otter run -a autograder.zip SUBMISSION)")
    return 0


def register(commands):
    parser = commands.add_parser("build", help="write autograder.zip (Gradescope), student.zip and otter/")
    parser.add_argument("--out", default="dist", help="output folder (default: dist)")
    parser.add_argument("--config", default=str(grading_config.DEFAULT_PATH), help="grading.yml to ship")
    parser.set_defaults(run=cmd_build)
