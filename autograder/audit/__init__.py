"""python -m autograder audit [--out DIR]: how well the hidden suite catches the mistakes it should.

Every misconception of the catalog (autograder/misconceptions) and a bounded, deterministic sample
of generic mutants (misconceptions/operators.py: swap an axis, change a constant, drop a call,
flip a comparison, swap arguments...) is made from solutions/attention.py as a source-level
mutation and graded like a submission: warm slots of the batch machinery
(cohort/executor.LocalExecutor), the same sandbox, the same grading.yml. The reference itself is
graded too, as a control: if it does not pass every property, nothing else can be judged.

Verdicts, from the raw outcomes (a property "catches" a mutant when its outcome is not passed):

  caught           some related property catches it
  collateral-only  it loses points, but only in properties unrelated to its mistake
  survived         every property passes, and its outputs differ from the reference's
  equivalent       every property passes, and it answers every probe (audit/probe.py) as the
                   reference does: flagged, not counted as a survivor
  grader_error     the grader itself failed on it (not counted)

Related properties: a catalog mutant's are its misconception's `explains` (of its class). A
generic mutant that is the same code as a catalog mutant (say `mask == 0` -> `mask == 1`) takes
that misconception's; any other generic mutant's are every property of the class it mutates (a
generic edit says nothing about which check should see it, so only failures in the other classes,
which it does not touch, would be collateral).

It writes DIR/audit.json (a `mutants` list, one entry per mutant, plus a summary) and
DIR/audit.html (a heatmap of mutants x properties), prints a summary and what changed since the
previous audit.json in DIR, and exits 1 when a catalog mutant survives (2 when it cannot audit).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import UsageError
from ..exercise import EXERCISE
from .. import config as grading_config

# The parser of every command loads this module: numpy, the catalog and the suite load only when
# an audit runs (inside the functions below).
SOLUTION = EXERCISE.solution
DEFAULT_OUT = Path("out") / "audit"
DEFAULT_PER_OPERATOR = 6
VERDICTS = ("caught", "collateral-only", "survived", "equivalent", "grader_error")
COUNTED = ("caught", "collateral-only", "survived")


class AuditError(UsageError):
    """The audit cannot be run or judged (a mutation that no longer applies, a reference that fails)."""


@dataclass
class Candidate:
    id: str
    kind: str  # reference | misconception | operator
    made_by: str
    cls: str | None
    source: str
    description: str = ""
    method: str | None = None
    line: int | None = None
    explains: tuple | None = None  # related properties of cls (None: every property of cls)
    same_as: str | None = None  # the catalog mutant with the same code
    explanation: dict = field(default_factory=dict)
    diff: str = ""


def candidates(solution, only=(), catalog=True, generic=True, per_operator=DEFAULT_PER_OPERATOR, seed=0):
    """(reference control, [Candidate]) for the chosen mutants; generic duplicates left out,
    generic mutants equal to a catalog mutant linked to it (same_as)."""
    from .. import misconceptions
    from ..misconceptions import mutation, operators

    normalized = mutation.normalized(solution)
    reference = Candidate("reference", "reference", "solutions/attention.py", None, normalized)
    chosen = []

    def wanted(mutant_id):
        return not only or any(fnmatch.fnmatchcase(mutant_id, pattern) for pattern in only)

    if catalog:
        for entry in misconceptions.CATALOG:
            if not wanted(entry.id):
                continue
            try:
                source = entry.mutate(solution)
            except misconceptions.MutationError as exc:
                raise AuditError(f"misconception {entry.id}: {exc}") from None
            chosen.append(Candidate(entry.id, "misconception", entry.id, entry.cls, source,
                                    "; ".join(entry.describe_edits()), explains=entry.explains,
                                    explanation={"es": entry.es, "en": entry.en}))
    if generic:
        sampled = operators.mutants(solution, per_operator, seed)
        named = [operators.by_id(solution, pattern) for pattern in only if "@" in pattern and "*" not in pattern]
        pool = {m.id: m for m in [*sampled, *(m for m in named if m is not None)]}
        for mutant in pool.values():
            if wanted(mutant.id):
                chosen.append(Candidate(mutant.id, "operator", mutant.operator, mutant.cls, mutant.source,
                                        mutant.description, mutant.method, mutant.line))
    if only and not chosen:
        raise AuditError(f"--only {', '.join(only)}: no such mutant")
    # every misconception's code, chosen or not: a generic mutant that makes one is judged as it
    catalog_code = {mutation.code_key(entry.mutate(solution)): entry for entry in misconceptions.CATALOG}
    reference_key = mutation.code_key(normalized)
    seen, kept = set(), []
    for candidate in chosen:
        key = mutation.code_key(candidate.source)
        if key == reference_key or (candidate.kind == "operator" and key in seen):
            continue  # changes nothing, or the same code as a generic mutant already chosen
        if candidate.kind == "operator":
            seen.add(key)
        if candidate.kind == "operator" and key in catalog_code:
            candidate.same_as = catalog_code[key].id
            candidate.explains = catalog_code[key].explains
        candidate.diff = mutation.diff(normalized, candidate.source)
        kept.append(candidate)
    return reference, kept


def related(candidate, config):
    """The (class, property) pairs a candidate's mistake is about (see the module docstring)."""
    props = [(p.cls, p.name) for p in config.properties if p.cls == candidate.cls]
    if candidate.explains is None:
        return set(props)
    return {(cls, name) for cls, name in props if name in candidate.explains}


def judge(candidate, outcomes, config):
    """The mutant's entry of audit.json, without the equivalence check's result."""
    from .. import scoring
    from ..outcomes import Outcome

    objects = [Outcome(**o) for o in outcomes]
    scored = scoring.score(objects, config)
    by_key = {(o.cls, o.prop): o for o in objects}
    failing = [(p.cls, p.name) for p in config.properties if by_key[(p.cls, p.name)].status != "passed"]
    mine = related(candidate, config)
    caught_by = [key for key in failing if key in mine]
    errors = [key for key in failing if by_key[key].code == "grader_error"]
    if errors:
        verdict = "grader_error"
    elif not failing:
        verdict = "survived"  # until the probes say it is equivalent
    else:
        verdict = "caught" if caught_by else "collateral-only"
    name = lambda key: f"{key[0]}.{key[1]}"
    return {
        "id": candidate.id, "kind": candidate.kind, "made_by": candidate.made_by, "class": candidate.cls,
        "method": candidate.method, "line": candidate.line, "description": candidate.description,
        "explanation": candidate.explanation, "same_as": candidate.same_as,
        "related": sorted(name(key) for key in mine), "verdict": verdict,
        "caught_by": [name(key) for key in caught_by],
        "collateral": [name(key) for key in failing if key not in mine],
        "outcomes": {name((o.cls, o.prop)): {"status": o.status, "code": o.code} for o in objects},
        "blocked": [f"{t.cls}.{t.prop}" for t in scored  # passed, but a prerequisite failed (grading.yml's requires)
                    if getattr(t, "blocked_by", ()) and t.outcome_status == "passed"],
        "score": scored.earned, "max_score": scored.possible, "diff": candidate.diff,
    }


def _grade(tasks, config, jobs, console):
    """{key: Result | GraderFailure} for [(key, source)], graded by warm slots."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..cohort.executor import LocalExecutor, Task

    executor = LocalExecutor(jobs, config.source)
    results = {}
    cancel = True
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            bar = progress.add_task(f"auditing ({jobs} slots)", total=len(tasks))
            for task, result in executor.run([Task(key, source) for key, source in tasks]):
                results[task.key] = result
                progress.update(bar, advance=1)
        cancel = False
    finally:
        executor.close(cancel)
    return results


def run_audit(config, out, solution_path=SOLUTION, only=(), catalog=True, generic=True,
              per_operator=DEFAULT_PER_OPERATOR, seed=0, jobs=None, console=None, probe=True):
    """Grade and judge the mutants; write out/audit.json and out/audit.html; return the report (dict)."""
    from rich.console import Console

    from ..cohort.executor import GraderFailure
    from ..grade import close_to_workers, grading_yml_hash, suite_version
    from . import probe as probes
    from . import render
    from ..misconceptions import mutation

    console = console or Console(stderr=True)
    jobs = jobs or os.cpu_count() or 1
    started, load_before = time.monotonic(), os.getloadavg()
    solution = mutation.solution_source(solution_path)
    reference, chosen = candidates(solution, only, catalog, generic, per_operator, seed)
    close_to_workers()
    # A generic mutant with the code of a catalog mutant being audited is graded once, under the catalog's id.
    catalog_ids = {c.id for c in chosen if c.kind == "misconception"}
    graded_as = {c.id: c.same_as if c.same_as in catalog_ids else c.id for c in chosen}
    graded_once = [c for c in chosen if graded_as[c.id] == c.id]
    results = _grade([(reference.id, reference.source), *((c.id, c.source) for c in graded_once)], config, jobs, console)
    control = results[reference.id]
    if isinstance(control, GraderFailure):
        raise AuditError(f"the grader failed on the reference solution: {control}")
    failing = [f"{o['cls']}.{o['prop']} ({o['status']}: {o['code']})" for o in control.outcomes if o["status"] != "passed"]
    if failing:
        raise AuditError("the reference solution does not pass the suite, so no mutant can be judged: "
                         + ", ".join(failing))
    entries = []
    prober = None
    try:
        for candidate in chosen:
            result = results[graded_as[candidate.id]]
            if isinstance(result, GraderFailure):
                entry = {**judge(candidate, control.outcomes, config), "verdict": "grader_error",
                         "grader_failure": str(result), "outcomes": {}, "caught_by": [], "collateral": []}
            else:
                entry = judge(candidate, result.outcomes, config)
                entry["seconds"] = result.seconds
            if entry["verdict"] == "survived" and probe:
                prober = prober or probes.Prober(config.limits)
                equal, found = prober.compare(reference.source, candidate.source)
                entry["equivalence"] = {"equal": equal, "difference": found}
                if equal:
                    entry["verdict"] = "equivalent"
            entries.append(entry)
    finally:
        if prober is not None:
            prober.close()
    version, suite_hash = suite_version(config)
    report = {
        "version": 1,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "grader_version": version, "suite": suite_hash, "grading_yml": grading_yml_hash(config),
        "solution_sha256": hashlib.sha256(solution.encode()).hexdigest(),
        "seed": seed, "per_operator": per_operator, "jobs": jobs, "only": list(only),
        "seconds": round(time.monotonic() - started, 1),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "properties": [f"{p.cls}.{p.name}" for p in config.properties],
        "mutants": entries,
    }
    report["summary"] = summarize(report)
    out = Path(out)
    previous = _previous(out / "audit.json")
    report["changes"] = changes(previous, report) if previous else None
    render.write(out, report, config)
    return report


def summarize(report):
    mutants = report["mutants"]
    counts = {kind: {v: 0 for v in VERDICTS} for kind in ("misconception", "operator")}
    for m in mutants:
        counts[m["kind"]][m["verdict"]] += 1
    kills = {p: 0 for p in report["properties"]}
    for m in mutants:
        for p in m["caught_by"] + m["collateral"]:
            kills[p] += 1
    return {
        "counts": counts,
        "catalog_survivors": [m["id"] for m in mutants if m["kind"] == "misconception" and m["verdict"] == "survived"],
        "survivors": [m["id"] for m in mutants if m["verdict"] == "survived"],
        "collateral_only": [m["id"] for m in mutants if m["verdict"] == "collateral-only"],
        "caught_with_collateral": [m["id"] for m in mutants if m["verdict"] == "caught" and m["collateral"]],
        "equivalent": [m["id"] for m in mutants if m["verdict"] == "equivalent"],
        "grader_errors": [m["id"] for m in mutants if m["verdict"] == "grader_error"],
        # caught by deadlines alone: on a busy machine a correct computation can miss one too
        "caught_only_by_timeouts": [m["id"] for m in mutants if m["caught_by"] and all(
            m["outcomes"][p]["status"] == "timeout" for p in m["caught_by"])],
        "kills_per_property": kills,
        "properties_catching_nothing": [p for p, n in kills.items() if n == 0],
        "mutation_score": _score(mutants),
    }


def _score(mutants):
    """Caught (or collateral) over counted mutants (equivalent ones and grader errors left out)."""
    counted = [m for m in mutants if m["verdict"] in COUNTED]
    return round(sum(m["verdict"] != "survived" for m in counted) / len(counted), 4) if counted else None


def _previous(path):
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("mutants"), list) else None


def changes(previous, report):
    """What changed since the previous audit: verdicts and catching properties, per mutant id."""
    before = {m.get("id"): m for m in previous["mutants"] if isinstance(m, dict)}
    found = []
    for m in report["mutants"]:
        old = before.get(m["id"])
        if old is None:
            continue
        if old.get("verdict") != m["verdict"] or sorted(old.get("caught_by", [])) != sorted(m["caught_by"]):
            found.append({"id": m["id"], "verdict": [old.get("verdict"), m["verdict"]],
                          "caught_by_added": sorted(set(m["caught_by"]) - set(old.get("caught_by", []))),
                          "caught_by_removed": sorted(set(old.get("caught_by", [])) - set(m["caught_by"]))})
    now = {m["id"] for m in report["mutants"]}
    return {"since": previous.get("generated_at"), "suite": [previous.get("suite"), report["suite"]],
            "grading_yml": [previous.get("grading_yml"), report["grading_yml"]], "mutants": found,
            "new": sorted(now - set(before)), "gone": sorted(set(before) - now)}


def print_summary(report, out, stream=sys.stdout):
    s = report["summary"]
    write = lambda text="": print(text, file=stream)
    total = len(report["mutants"])
    write(f"audit: {total} mutants graded in {report['seconds']:.0f} s ({report['jobs']} slots, load "
          f"{report['load_average']['before'][0]:.1f} → {report['load_average']['after'][0]:.1f})")
    for kind, label in (("misconception", "catalog"), ("operator", "generic")):
        counts = s["counts"][kind]
        if sum(counts.values()):
            write(f"  {label:8} {sum(counts.values()):3}: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v]))
    if s["mutation_score"] is not None:
        write(f"  mutation score (caught or collateral / counted): {100 * s['mutation_score']:.1f} %")
    by_id = {m["id"]: m for m in report["mutants"]}
    for title, ids in (("survived", s["survivors"]), ("collateral-only", s["collateral_only"]),
                       ("caught, but also losing points elsewhere", s["caught_with_collateral"]),
                       ("equivalent (flagged, not counted)", s["equivalent"]), ("grader errors", s["grader_errors"])):
        if ids:
            write(f"{title}:")
            for mutant_id in ids:
                m = by_id[mutant_id]
                extra = f"  fails only: {', '.join(m['collateral'])}" if m["verdict"] == "collateral-only" else ""
                extra += f"  also fails: {', '.join(m['collateral'])}" if m["verdict"] == "caught" else ""
                extra += f"  ({m['equivalence']['difference']})" if m.get("equivalence") and m["verdict"] == "survived" else ""
                write(f"  {mutant_id}  {m['description']}{extra}")
    if s["caught_only_by_timeouts"]:
        write(f"warning: caught only by timeouts (rerun on a quieter machine to be sure): "
              f"{', '.join(s['caught_only_by_timeouts'])}")
    if s["properties_catching_nothing"] and not report["only"]:
        write(f"properties that caught no mutant: {', '.join(s['properties_catching_nothing'])}")
    ch = report.get("changes")
    if ch is not None:
        moved = ch["mutants"]
        write(f"since the audit of {ch['since']}: {len(moved)} verdict(s) or catching properties changed"
              + (f", {len(ch['new'])} new mutant(s)" if ch["new"] else "") + (f", {len(ch['gone'])} gone" if ch["gone"] else ""))
        for change in moved:
            detail = "".join([f" +{', +'.join(change['caught_by_added'])}" if change["caught_by_added"] else "",
                              f" -{', -'.join(change['caught_by_removed'])}" if change["caught_by_removed"] else ""])
            write(f"  {change['id']}: {change['verdict'][0]} → {change['verdict'][1]}{detail}")
    write(f"written: {Path(out) / 'audit.json'}, {Path(out) / 'audit.html'}")


def cmd_audit(args):
    config = grading_config.load(args.config, args.lang)
    report = run_audit(config, args.out, args.solution, args.only or (), not args.no_catalog, not args.no_generic,
                       args.per_operator, args.seed, args.jobs, probe=not args.no_probe)
    print_summary(report, args.out)
    if report["summary"]["catalog_survivors"]:
        print(f"FAILED: {len(report['summary']['catalog_survivors'])} catalog misconception(s) survive the suite: "
              + ", ".join(report["summary"]["catalog_survivors"]), file=sys.stderr)
        return 1
    return 2 if report["summary"]["grader_errors"] else 0


def register(commands):
    from ..cohort.batch import at_least_one

    audit = commands.add_parser("audit", help="mutation audit of the hidden suite: which properties catch which mistakes")
    audit.add_argument("--out", default=str(DEFAULT_OUT), help="folder for audit.json and audit.html (default: %(default)s)")
    audit.add_argument("--jobs", type=at_least_one("the number of grading slots"), default=os.cpu_count() or 1,
                       help="parallel grading slots (default: the cores)")
    audit.add_argument("--only", action="append", metavar="ID",
                       help="audit only these mutants: a catalog id, a generic id (operator@Class.method#k) or a "
                            "glob such as 'sa_*' or 'axis@*' (repeatable)")
    audit.add_argument("--per-operator", type=int, default=DEFAULT_PER_OPERATOR,
                       help="generic mutants per operator, sampled deterministically; 0: every site (default: %(default)s)")
    audit.add_argument("--seed", type=int, default=0, help="seed of the generic mutants' sample (default: %(default)s)")
    audit.add_argument("--no-generic", action="store_true", help="only the misconception catalog")
    audit.add_argument("--no-catalog", action="store_true", help="only the generic operators")
    audit.add_argument("--no-probe", action="store_true",
                       help="skip the equivalence probes (a mutant passing every property is then 'survived')")
    audit.add_argument("--solution", default=str(SOLUTION), help="the reference solution to mutate")
    grading_config.add_options(audit)
    audit.set_defaults(run=cmd_audit)
