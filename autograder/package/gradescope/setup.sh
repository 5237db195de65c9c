#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the grading image (Ubuntu 22.04).
# The harness's own python3 is left alone: the grader gets a venv of its own, made with the Python
# that requirements.lock was made with (the "# python: X.Y" line of requirements.txt; from the
# distribution's packages, or the deadsnakes PPA where the distribution has none), holding exactly
# the versions of requirements.txt. That file (written by `python -m autograder build` from
# requirements.lock) pins what grading imports, and starts with PyTorch's CPU index, whose +cpu
# wheels are the build pinned there.
# The grader itself is not installed: it runs from /autograder/source, which run_autograder
# closes to the unprivileged user that runs the students' code.
# Last, a self-check grades the public stub as run_autograder will grade every submission, and
# fails this build, loudly, unless the stub gets 0 points in a valid results.json with the worker
# running as a uid of its own (autograder/package/selfcheck.py).
set -euo pipefail
SOURCE=/autograder/source
VENV=/opt/attention-venv
PY_VERSION=$(sed -n 's/^# python: *\([0-9][0-9.]*\) *$/\1/p' "$SOURCE/requirements.txt")
PY="python$PY_VERSION"
export DEBIAN_FRONTEND=noninteractive

apt-get update -q
if ! apt-get install -y -q "$PY" "$PY-venv"; then
    apt-get install -y -q software-properties-common
    add-apt-repository -y ppa:deadsnakes/ppa
    apt-get update -q
    apt-get install -y -q "$PY" "$PY-venv"
fi
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r "$SOURCE/requirements.txt"
"$VENV/bin/python" -m pip check
"$VENV/bin/python" -c "import torch; assert torch.version.cuda is None, torch.__version__; print('torch', torch.__version__)"

# Bytecode for the grader, once, in the image: each submission's container starts from the image,
# so what a run compiles is lost with it (~0.2 CPU-s of every cold grade).
"$VENV/bin/python" -E -m compileall -q "$SOURCE/autograder"

cd "$SOURCE"
"$VENV/bin/python" -E -m autograder.package.selfcheck
