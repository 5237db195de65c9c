"""Shipping the grader: Gradescope's autograder.zip, the student handout and an Otter package.

build.py writes all three (`python -m autograder build --out dist/`); gradescope/ holds the
scripts Gradescope runs; otter.py generates Otter's test files from grading.yml and otter_case.py
is what those test files call at grading time.
"""
