"""Shipping the grader: Gradescope's autograder.zip, the student handout and an Otter package.

build.py writes all three (`python -m autograder build --out dist/`); gradescope/ holds the
scripts Gradescope runs and selfcheck.py the check that ends setup.sh; lock.py reads
requirements.lock (exact versions) and writes the requirements.txt that ships; otter.py generates
Otter's test files from grading.yml and otter_case.py is what those test files call at grading time.
"""
