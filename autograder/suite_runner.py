"""Run the hidden property suite (autograder/properties) under pytest against one worker.

pytest and hypothesis are imported here only, after the worker has been started, so that they
load while the worker imports torch. One outcome per graded test is recorded by the Collector
plugin; pytest's own reporting is switched off.
"""
from __future__ import annotations

import gc
import os
import time
import zlib

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, settings

from .exercise import EXERCISE
from .outcomes import Outcome, SuiteError, outcome_from_exception
from .properties import diagnosis

SUITE_DIR = EXERCISE.suite


class Collector:
    """pytest plugin: hands the worker to the suite and records one outcome per graded test."""

    def __init__(self, worker, config):
        self._worker = worker
        self.config = config
        self.outcomes = {}
        self.started = {}
        self.error = None

    @pytest.fixture(scope="session")
    def worker(self):
        return self._worker

    def pytest_configure(self, config):
        config.addinivalue_line("markers", "graded(cls, prop): the graded property a test checks")

    def pytest_collectreport(self, report):
        """A suite file that cannot be imported (a syntax error in a property an instructor added,
        say) is named with its error, not reported as properties grading.yml has but the suite lacks."""
        if report.failed and self.error is None:
            # pytest's "E   " lines: where the import failed (File "...", line N) and the error
            said = [line[1:].strip() for line in str(report.longrepr).splitlines() if line.startswith("E ")]
            where = next((line for line in said if line.startswith("File ")), "")
            self.error = SuiteError(f"{report.nodeid or 'the suite'} could not be loaded: "
                                    + "; ".join(filter(None, (where, said[-1] if said else "?"))))

    def pytest_collection_modifyitems(self, session, config, items):
        if self.error is not None:
            items.clear()
            return
        try:
            self._check_tags(items)
        except SuiteError as exc:  # run_properties raises it: pytest would bury it in an INTERNALERROR dump
            self.error = exc
            items.clear()
            return
        # grading.yml's order, except that every test a student does not see before the due date
        # runs after all those they see: a module that keeps what its calls met (a counter, the
        # inputs it was given) and says it in a visible test's output would otherwise tell a hidden
        # test's inputs and verdict (how many calls it made, whether it shrank a failure) before then.
        order = {(p.cls, p.name): (p.visibility != "visible", i) for i, p in enumerate(self.config.properties)}
        items.sort(key=lambda item: order[self._key(item)])
        for item in items:
            cls, prop = self._key(item)
            hypothesis.seed(example_seed(self.config.seed, cls, prop))(item.obj)
            # With no example database the key is never used, yet hypothesis derives it from the
            # test's source on every run (inspect + tokenize, ~2 ms a test): give it one instead.
            item.obj._hypothesis_internal_database_key = f"{cls}.{prop}".encode()

    def _check_tags(self, items):
        tagged = set()
        for item in items:
            if item.get_closest_marker("graded") is None:
                raise SuiteError(f"{item.nodeid} has no @graded(class, property) tag")
            tagged.add(self._key(item))
        configured = {(p.cls, p.name) for p in self.config.properties}
        unknown = sorted(configured - tagged)
        if unknown:
            raise SuiteError(f"grading.yml names properties the suite does not define: {unknown}")
        unscored = sorted(tagged - configured)
        if unscored:
            raise SuiteError(f"grading.yml has no entry for {unscored}; add them (points: 0 keeps them ungraded)")

    @staticmethod
    def _key(item):
        marker = item.get_closest_marker("graded")
        return marker.kwargs["cls"], marker.kwargs["prop"]

    def pytest_collection_finish(self, session):
        loading_done()  # the suite's modules are loaded

    def pytest_runtest_logstart(self, nodeid, location):
        self.started[nodeid] = time.monotonic()

    def pytest_runtest_setup(self, item):
        diagnosis.begin(*self._key(item))  # a property starts: nothing diagnosed yet (properties/diagnosis.py)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        """A test passes only if its class is within its limits when it ends (Worker.check_limits),
        and, once its generated examples pass, on the arguments it names with harness.also_at."""
        result = yield
        for check, arguments in getattr(item.obj, "also_at", ()):
            (check or item.obj.hypothesis.inner_test)(worker=self._worker, **arguments)
        self._worker.check_limits(self._key(item)[0])
        return result

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        """Record the outcome and hand pytest a bare report: nobody reads pytest's rendering of a
        failure here, and formatting long tracebacks costs seconds on a file that fails often."""
        if call.when != "teardown":
            cls, prop = self._key(item)
            if call.excinfo is not None:
                self._record(item, outcome_from_exception(cls, prop, call.excinfo.value))
            elif call.when == "call":
                self._record(item, Outcome(cls, prop, "passed"))
        failed = call.excinfo is not None
        return pytest.TestReport(item.nodeid, item.location, keywords={}, when=call.when,
                                 outcome="failed" if failed else "passed", longrepr="failed" if failed else None)

    def _record(self, item, outcome):
        outcome.duration = round(time.monotonic() - self.started.get(item.nodeid, time.monotonic()), 3)
        outcome.output = self._worker.take_output()
        self.outcomes[(outcome.cls, outcome.prop)] = outcome


def example_seed(base, cls, prop):
    """The seed of one property's examples: fixed by grading.yml's seed and the property's name,
    so the same submission always meets the same examples, however the suite's code is edited."""
    return zlib.crc32(f"{base}:{cls}.{prop}".encode())


def hypothesis_profile(config):
    settings.register_profile(
        "grading",
        max_examples=config.max_examples,
        database=None,
        deadline=None,
        print_blob=False,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
    )
    settings.load_profile("grading")


def draw_without_local_constants():
    """Keep the examples a function of grading.yml's seed and the property alone.

    Hypothesis (since 6.131) mixes into its draws constants it parses out of every "local" module
    loaded, the grader's own modules here. Which of them are loaded differs between `grade`,
    `batch` and Otter, and grows when a failure's feedback imports one lazily: a seed drawn from
    st.integers(0, 2**16) could then differ between `grade` and `batch`, or with what an earlier
    property did. Grading draws from hypothesis's fixed global constants only (and no longer
    parses the grader's sources, ~0.15 CPU-s of a cold grade). A version without the feature has
    nothing to turn off; tests/test_suite_runner.py fails if a later one draws them some other way."""
    from hypothesis.internal.conjecture import providers

    if hasattr(providers, "_get_local_constants"):
        none = providers.Constants()
        providers._get_local_constants = lambda: none
        providers.CONSTANTS_CACHE.cache.clear()


def loading_done():
    """Once the suite is loaded: what the grader has imported (~60k long-lived objects) out of the
    cyclic collector's reach, once per process (every full collection walked them all, and
    hypothesis makes one at its first example), and the collector on.

    A cold grade (`grade`, Gradescope's entry point) loads its modules with the collector off: the
    collections that loading triggers, over objects that live until the process exits, were ~0.1
    CPU-s of a grade. Their own cyclic garbage is frozen with them."""
    if not gc.get_freeze_count():
        gc.freeze()
    gc.enable()


def run_properties(worker, config):
    """Run every graded property against the worker; return outcomes in grading.yml's order."""
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    hypothesis_profile(config)
    draw_without_local_constants()
    collector = Collector(worker, config)
    # Only what the suite needs: no terminal, cache, captures, logging or assertion rewriting
    # (the checks raise their own failures), and no plugins from the environment.
    unused = ("cacheprovider", "terminal", "unraisableexception", "threadexception", "logging",
              "doctest", "junitxml", "pastebin", "legacypath", "stepwise")
    args = [str(SUITE_DIR), *(arg for name in unused for arg in ("-p", f"no:{name}")),
            "--assert=plain", "--capture=no", "--noconftest", "--rootdir", str(SUITE_DIR),
            "-c", os.devnull, "-W", "ignore"]
    try:
        code = pytest.main(args, plugins=[collector])
    finally:
        gc.enable()  # even where the suite did not load
    if collector.error is not None:
        raise collector.error
    if code in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
        raise SuiteError(f"the property suite did not run (pytest exit code {int(code)})")
    missing = [(p.cls, p.name) for p in config.properties if (p.cls, p.name) not in collector.outcomes]
    if missing:
        raise SuiteError(f"no outcome was recorded for {missing}")
    return [collector.outcomes[(p.cls, p.name)] for p in config.properties]
