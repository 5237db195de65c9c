"""Autograder for the attention exercise (SelfAttention, MultiHeadAttention, CausalSelfAttention).

The path of a submission: submission.py (load) → worker/ (isolated process) → properties/
(hidden checks) → outcomes.py → scoring.py (grading.yml) → results.py / summary.py.
"""
__version__ = "0.1.0"

import os as _os

# The grader's own numpy work is small, one grading at a time per process (a batch runs one per
# core): BLAS threads there only spin. A reference at a real model's width (properties/strategies
# WIDE_*) made OpenBLAS start them, ~0.5 CPU-s more a grade on 2 cores, all of it waiting. Set
# before numpy is imported, unless the caller chose otherwise; the worker has its own environment.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_name, "1")
