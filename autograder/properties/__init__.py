"""The hidden property suite: pytest + hypothesis checks run in the grader's (trusted) process.

Each test talks to the submission only through the worker (see harness.py) and judges plain
numpy arrays against a float64 reference (reference.py). Tests are tagged with
@graded(class, property); grading.yml gives each tag its points and visibility.
"""
