"""How often the diagnosis names the right misconception: a script that prints figures, not a test.

    python tests/measure_diagnosis.py [--seeds S,...] [--jobs 2] [--generic N]

Grades, in one batch per grading.yml seed (default: the shipped seed):
  (a) the buggy corpus files whose mistake is a catalog misconception: the entry's `seen_in` names
      the file (buggy/NAME, not "same mistake, other class"), or the file is that entry's mutant,
      docstring aside (the same code);
  (b) the catalog mutants (entry.mutate()) of the entries no corpus file has;
  (c) everything else: the correct variants, solutions/attention.py, the fakes and the buggy files
      whose mistake is not in the catalog.
and prints: named correctly / submissions whose mistake is in the catalog (goal >= 80%), for every
entry, and for the entries whose mistake shows in values (kind numeric or dropout, named by their
outputs; a structural mistake returns the reference's values and is named by the failure only it
raises, its `shows_as`); named wrongly / all submissions (goal < 2%); named for a
correct file (must be 0); and a line for every miss and every wrong name, with the names given.

--generic N adds the audit's sample of generic mutants, N per operator (`audit --per-operator N`;
misconceptions/operators.py: an axis, a constant, a dropped call... changed in the reference): one
that is a catalog mutant's code (the audit's same_as) expects that entry; any other counts every
name it gets as wrong, to be read by hand (its edit may compute a catalog mistake another way).
"""
import argparse
import ast
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import corpus  # noqa: E402  (tests/ is this script's folder)

from autograder import config as grading_config  # noqa: E402
from autograder import misconceptions  # noqa: E402

SEEN_IN = re.compile(r"buggy/([a-z0-9_]+)(?![^;]*same mistake)")


def code(source):
    """A module's code as a comparable string, its docstring left out (corpus files say what they are)."""
    tree = ast.parse(source)
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        tree.body = tree.body[1:]
    return ast.dump(tree, annotate_fields=False)


def corpus_mistakes(buggy):
    """{corpus name: (entry id, how the link was found)} for the buggy files whose mistake is in the catalog."""
    found = {}
    for entry in misconceptions.CATALOG:
        for name in SEEN_IN.findall(entry.seen_in):
            if f"buggy/{name}" in buggy:
                found[f"buggy/{name}"] = (entry.id, "seen_in")
    mutants = {code(entry.mutate()): entry.id for entry in misconceptions.CATALOG}
    for name, path in buggy.items():
        same = mutants.get(code(path.read_text(encoding="utf-8")))
        if same and name not in found:
            found[name] = (same, "same code")
        elif same and found[name][0] != same:
            raise SystemExit(f"{name}: seen_in says {found[name][0]}, its code is {same}'s")
    return found


def generic_mutants(per_operator):
    """The audit's deterministic sample of generic mutants (`audit --per-operator N`), each with the
    catalog entry it is the code of, if any (same_as)."""
    if not per_operator:
        return []
    from autograder.audit import SOLUTION, candidates

    return candidates(SOLUTION.read_text(encoding="utf-8"), catalog=False, per_operator=per_operator)[1]


def names(graded):
    """The ids the diagnosis gave, over every outcome of one graded file: {id: [class.property, ...]}."""
    given = {}
    for (cls, prop), outcome in sorted(graded.outcomes.items()):
        if outcome.diagnosis:
            given.setdefault(outcome.diagnosis, []).append(f"{cls}.{prop}")
    return given


def percent(part, whole):
    return f"{part}/{whole} = {100 * part / max(whole, 1):.1f}%"


def computes(source, misconception_id, draws=4):
    """Whether the module `source` defines computes the entry's alternative (float64 torch, the
    probes of tests/test_misconceptions.py: eval, train with given keep masks, the fused path), as
    the catalog mutant does: a generic edit may be the same mistake written otherwise (`mask != 0`
    for `mask == 1`, `dim=1` for `dim=-2` on (B, T, T))."""
    import numpy as np

    import test_misconceptions as probes

    entry = misconceptions.get(misconception_id)
    try:
        namespace = probes.load(source, "generic")
    except Exception:  # noqa: BLE001 - a mutant that does not even load computes nothing
        return False
    settings = [probes.settings(entry)]
    if entry.cls != "SelfAttention":
        settings.append(probes.settings(entry, train=True, p=0.5))
    if entry.cls == "CausalSelfAttention":
        settings += [probes.settings(entry, fused=True), probes.settings(entry, fused=True, train=True, p=0.5)]
    rng = np.random.default_rng(40)
    for probe in settings * draws:
        args, drop = probes.inputs(entry.cls, rng, probe)
        try:
            params, got = probes.run_torch(namespace, entry.cls, probe, args, drop, rng)
        except Exception:  # noqa: BLE001
            return False
        if not probes.close(tuple(got), entry.compute(params, *args, **probes.context(entry.cls, probe, drop))):
            return False
    return True


def report(seed, graded, mistakes, sources):
    print(f"\n== hypothesis seed {seed}")
    kinds = {entry.id: entry.kind for entry in misconceptions.CATALOG}
    right, wrong, missed, equivalent = [], [], [], []
    for name in sorted(graded):
        given = names(graded[name])
        expected = mistakes.get(name)
        if expected is not None and expected in given:
            right.append(name)
        elif expected is not None:
            missed.append(name)
        others = set(given) - {expected}
        if others and name.startswith("generic/") and all(computes(sources[name], other) for other in others):
            equivalent.append(name)
        elif others:
            wrong.append(name)
    for name in sorted(missed):
        outcomes = graded[name].outcomes
        failed = [f"{c}.{p}:{o.code}" for (c, p), o in sorted(outcomes.items()) if o.status != "passed"]
        print(f"  missed {name} ({mistakes[name]}, {kinds[mistakes[name]]}): failed {', '.join(failed) or 'nothing'}")
    for name in sorted(equivalent):
        print(f"  named {name}: {names(graded[name])}; the mutant computes that mistake (checked in float64 torch)")
    for name in sorted(wrong):
        print(f"  WRONG NAME {name} (mistake: {mistakes.get(name, 'not in the catalog')}): {names(graded[name])}")
    known = [n for n in graded if not n.startswith("generic/")]  # (a), (b), (c)
    in_catalog = [n for n in mistakes if n in known]
    in_values = [n for n in in_catalog if kinds[mistakes[n]] != "structural"]
    correct = [n for n in graded if n == "solution" or n.startswith("correct/")]
    print(f"corpus and catalog mutants: named correctly, every catalog mistake: "
          f"{percent(sum(n in right for n in in_catalog), len(in_catalog))} (goal >= 80%)")
    print(f"corpus and catalog mutants: named correctly, mistakes that show in values (numeric, dropout): "
          f"{percent(sum(n in right for n in in_values), len(in_values))}")
    print(f"corpus and catalog mutants: named wrongly: {percent(sum(n in wrong for n in known), len(known))} "
          "of all these submissions (goal < 2%)")
    generic = [n for n in graded if n.startswith("generic/")]
    if generic:
        same = [n for n in generic if n in mistakes]
        named_so = percent(sum(n in right for n in same), len(same))
        wrongly = sum(n in wrong for n in generic)
        print(f"generic mutants: a catalog mutant's code and named so: {named_so}; other generic mutants named: "
              f"{len(equivalent)} computing the name they got, {wrongly} wrongly")
    print(f"named wrongly, everything graded: {percent(len(wrong), len(graded))} (goal < 2%)")
    print(f"named for a correct file: {sum(n in wrong for n in correct)} of {len(correct)} (must be 0)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=str(grading_config.load().seed))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--generic", type=int, default=0, metavar="N",
                        help="add the audit's generic mutants, N per operator (default: none)")
    args = parser.parse_args()
    paths = corpus.files(("solution", "buggy", "correct", "fakes"))
    buggy = {n: p for n, p in paths.items() if n.startswith("buggy/")}
    mistakes = {name: entry for name, (entry, _) in corpus_mistakes(buggy).items()}
    covered = set(mistakes.values())
    sources = {}
    with tempfile.TemporaryDirectory() as folder:
        for entry in misconceptions.CATALOG:
            if entry.id not in covered:
                path = Path(folder) / f"{entry.id}.py"
                path.write_text(entry.mutate(), encoding="utf-8")
                paths[f"mutant/{entry.id}"] = path
                mistakes[f"mutant/{entry.id}"] = entry.id
        for mutant in generic_mutants(args.generic):
            path = Path(folder) / f"{mutant.id.replace('@', '_at_').replace(':', '_')}.py"
            path.write_text(mutant.source, encoding="utf-8")
            paths[f"generic/{mutant.id}"] = path
            sources[f"generic/{mutant.id}"] = mutant.source
            if mutant.same_as:
                mistakes[f"generic/{mutant.id}"] = mutant.same_as
        by_link = corpus_mistakes(buggy)
        print(f"{len(paths)} submissions: {len(by_link)} corpus files with a catalog mistake "
              f"({sum(how == 'seen_in' for _, how in by_link.values())} by seen_in, "
              f"{sum(how == 'same code' for _, how in by_link.values())} by their code: "
              f"{', '.join(n for n, (_, how) in sorted(by_link.items()) if how == 'same code')}), "
              f"{sum(n.startswith('mutant/') for n in paths)} catalog mutants "
              f"no corpus file has, {len(buggy) - len(by_link)} corpus files with other mistakes, "
              f"{sum(n.startswith('correct/') for n in paths) + 1} correct files, "
              f"{sum(n.startswith('fakes/') for n in paths)} without attention, "
              f"{sum(n.startswith('generic/') for n in paths)} generic mutants "
              f"({sum(n.startswith('generic/') for n in mistakes)} of them a catalog mutant's code)")
        for seed in (int(s) for s in args.seeds.split(",")):
            report(seed, corpus.grade_all(paths, seed, args.jobs), mistakes, sources)


if __name__ == "__main__":
    main()
