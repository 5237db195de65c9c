"""The three time budgets every request to the worker runs under: its own timeout, what is left
of its class's total time, and what is left of the whole submission's. The tightest sets the
request's deadline and names the failure if it passes (a SubmissionError kind)."""
import time


class Budgets:
    def __init__(self, limits):
        self.limits = limits
        self.started = time.monotonic()
        self.spent = {}  # class -> seconds its requests took

    def tightest(self, cls):
        """(kind, seconds left, limit) of the tightest deadline for the next request of class cls."""
        limits = self.limits
        candidates = (
            ("timeout", limits.request_s, limits.request_s),
            ("class_budget", limits.class_s - self.spent.get(cls, 0.0), limits.class_s),
            ("submission_budget", self.submission_left(), limits.submission_s),
        )
        return min(candidates, key=lambda candidate: candidate[1])

    def submission_left(self):
        return self.limits.submission_s - (time.monotonic() - self.started)

    def charge(self, cls, seconds):
        self.spent[cls] = self.spent.get(cls, 0.0) + seconds
