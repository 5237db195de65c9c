#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the grading image (Ubuntu 22.04).
# The harness's own python3 is left alone: the grader gets a venv of its own. requirements.txt
# (written by `python -m autograder build` from pyproject.toml) starts with PyTorch's CPU index,
# whose +cpu wheels pip prefers to PyPI's several-GB CUDA build of the same version.
# The grader itself is not installed: it runs from /autograder/source, which run_autograder
# closes to the unprivileged user that runs the students' code.
set -euo pipefail
VENV=/opt/attention-venv

apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r /autograder/source/requirements.txt
"$VENV/bin/python" -c "import torch; assert torch.version.cuda is None, torch.__version__; print('torch', torch.__version__)"
