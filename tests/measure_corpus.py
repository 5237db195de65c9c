"""What the suite makes of the known submissions: a script that prints figures, not a test.

    python tests/measure_corpus.py [--seeds 0,1] [--jobs 2]

For each grading.yml seed: whether every correct file keeps full marks and the stub scores 0;
how many single-mistake files (tests/submissions/buggy) lose points, and how many lose them only
in tests that name or describe their mistake (the manifest's must_fail and describes,
reference_match, and tests whose message points at an upstream test the file also failed) —
the goal is at least 90%; and the best score of a file that computes no attention
(tests/submissions/fakes) — the goal is at most 15% of the points.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import corpus  # noqa: E402  (tests/ is this script's folder)


def report(seed, graded):
    print(f"\n== hypothesis seed {seed}")
    problems = 0
    for name in ("solution", *sorted(n for n in graded if n.startswith("correct/"))):
        earned, possible = graded[name].total
        if earned != possible:
            problems += 1
            print(f"  CORRECT FILE BELOW FULL MARKS: {name} {earned:g}/{possible:g} lost {graded[name].lost()}")
    correct = [n for n in graded if n == "solution" or n.startswith("correct/")]
    print(f"correct files at full marks: {len(correct) - problems}/{len(correct)}")
    print(f"stub: {graded['stub'].total[0]:g}/{graded['stub'].total[1]:g}")

    buggy = sorted(n for n in graded if n.startswith("buggy/"))
    losing = [n for n in buggy if graded[n].total[0] < graded[n].total[1]]
    clean = []
    for name in buggy:
        extra = corpus.collateral(name.split("/", 1)[1], graded[name])
        if name in losing and not extra:
            clean.append(name)
        elif name in losing:
            print(f"  collateral: {name}: {', '.join(f'{c}.{p}' for c, p in extra)}")
        else:
            print(f"  FULL MARKS FOR A WRONG FILE: {name}")
    print(f"single-mistake files losing points: {len(losing)}/{len(buggy)}")
    print(f"losing them only where the mistake is named or described: {len(clean)}/{len(buggy)} "
          f"= {100 * len(clean) / max(len(buggy), 1):.1f}% (goal >= 90%)")

    fakes = sorted(n for n in graded if n.startswith("fakes/"))
    for name in fakes:
        earned, possible = graded[name].total
        print(f"  {name}: {earned:g}/{possible:g} = {100 * earned / possible:.1f}%")
    if fakes:
        worst = max(graded[n].total[0] / graded[n].total[1] for n in fakes)
        print(f"no-attention files: best {100 * worst:.1f}% of the points (goal <= 15%)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    paths = corpus.files(("solution", "stub", "buggy", "correct", "fakes"))
    print(f"{len(paths)} files: {sum(n.startswith('buggy/') for n in paths)} single-mistake, "
          f"{sum(n.startswith('correct/') for n in paths) + 1} correct, {sum(n.startswith('fakes/') for n in paths)} "
          "without attention, the stub")
    for seed in (int(s) for s in args.seeds.split(",")):
        report(seed, corpus.grade_all(paths, seed, args.jobs))


if __name__ == "__main__":
    main()
