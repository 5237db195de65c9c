#!/bin/sh
# Grade the reference, a correct variant and two device mutants with CUDA visible and hidden, and
# check the scores agree (see tests/gpu_check.py). Exit 0: as expected, or no GPU (nothing checked);
# 1: a disagreement; 2: the check could not run. Options: --cpu-only (the CUDA-hidden half alone).
set -e
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" tests/gpu_check.py "$@"
