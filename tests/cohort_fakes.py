"""Stand-ins shared by the cohort tests: outcomes made by hand, and an executor that grades nothing.

They let the store, batch, report and diff be tested in seconds, without a worker.
"""
from autograder import config as grading_config
from autograder.cohort.executor import Result
from autograder.outcomes import Outcome

CONFIG = grading_config.load()


def outcomes(*failures):
    """Every property of grading.yml passed, except the given failed outcomes."""
    failed = {(o.cls, o.prop): o for o in failures}
    return [failed.get((p.cls, p.name), Outcome(p.cls, p.name, "passed")) for p in CONFIG.properties]


class Instant:
    """An executor that runs nothing: each task gets `graded` (all passed by default) at once and is remembered;
    with stop_after=N, Ctrl-C arrives after N tasks."""

    slots = 1

    def __init__(self, graded=None, stop_after=None):
        self.outcomes = outcomes() if graded is None else graded
        self.stop_after = stop_after
        self.tasks = []

    def run(self, tasks):
        for task in tasks:
            if len(self.tasks) == self.stop_after:
                raise KeyboardInterrupt
            self.tasks.append(task)
            yield task, Result([o.as_dict() for o in self.outcomes], 1.0, 0.1)

    def close(self, cancel=False):
        pass

    @property
    def keys(self):
        return [task.key for task in self.tasks]
