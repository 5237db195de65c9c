"""Cohorts: batch grading into a SQLite store, reports regenerated from it, and diffs between runs.

batch.py (command `batch`) grades a folder or Gradescope export through an executor
(executor.py: warm local slots, or Dask) into the store (store.py); report.py (command `report`)
rescores the stored raw outcomes with the current grading.yml, for the cohort view (each
student's latest result across runs) or one run, joins a class list (roster.py) and writes the
LMS imports (exports.py: Canvas, Moodle, Gradescope); diff.py (command `diff`) compares two
runs, cohort views or cohorts.
"""
