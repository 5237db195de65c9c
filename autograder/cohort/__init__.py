"""Cohorts: batch grading into a SQLite store, reports regenerated from it, and diffs between runs.

batch.py (command `batch`) grades a folder or Gradescope export through an executor
(executor.py: warm local slots, or Dask) into the store (store.py); report.py (command `report`)
rescores the stored raw outcomes with the current grading.yml; diff.py (command `diff`)
compares two runs or cohorts.
"""
