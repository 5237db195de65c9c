"""Autograder for the attention exercise (SelfAttention, MultiHeadAttention, CausalSelfAttention).

The path of a submission: submission.py (load) → worker/ (isolated process) → properties/
(hidden checks) → outcomes.py → scoring.py (grading.yml) → results.py / summary.py.
"""
__version__ = "0.1.0"
