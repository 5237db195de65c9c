"""The mutation audit: verdicts from outcomes (fast, with hand-made outcomes), the choice of mutants,
what changed since the last audit, the files it writes, and one slow run of the real command on
a few mutants graded by warm slots."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import audit
from autograder import config as grading_config
from autograder.audit import render
from autograder.misconceptions import mutation

ROOT = Path(__file__).resolve().parent.parent
CONFIG = grading_config.load()
SOLUTION = mutation.solution_source()


def outcomes(failing=(), status="failed", code="some_code"):
    """An outcome dict per graded property; those named in `failing` ("Class.prop") did not pass."""
    return [{"cls": p.cls, "prop": p.name, "status": status if f"{p.cls}.{p.name}" in failing else "passed",
             "code": code if f"{p.cls}.{p.name}" in failing else None, "params": {}, "example": {},
             "duration": 0.0, "output": ""} for p in CONFIG.properties]


def candidate(explains=("scale", "reference_match"), cls="SelfAttention", kind="misconception"):
    return audit.Candidate("m", kind, "m", cls, SOLUTION, explains=explains)


def test_a_related_failure_catches_an_unrelated_one_is_collateral_and_none_survives():
    assert audit.judge(candidate(), outcomes(["SelfAttention.scale"]), CONFIG)["verdict"] == "caught"
    collateral = audit.judge(candidate(), outcomes(["SelfAttention.gradients"]), CONFIG)
    assert collateral["verdict"] == "collateral-only" and collateral["collateral"] == ["SelfAttention.gradients"]
    assert audit.judge(candidate(), outcomes(), CONFIG)["verdict"] == "survived"
    broken = audit.judge(candidate(), outcomes(["SelfAttention.scale"], "error", "grader_error"), CONFIG)
    assert broken["verdict"] == "grader_error"


def test_a_generic_mutant_relates_to_every_property_of_its_class():
    generic = candidate(explains=None, kind="operator")
    assert audit.judge(generic, outcomes(["SelfAttention.gradients"]), CONFIG)["verdict"] == "caught"
    assert audit.judge(generic, outcomes(["MultiHeadAttention.scale"]), CONFIG)["verdict"] == "collateral-only"


def test_generic_mutants_with_a_catalog_mutants_code_are_linked_to_it():
    _, chosen = audit.candidates(SOLUTION, only=["causal_qkv_order", "swap_args@CausalSelfAttention.forward#2"])
    by_id = {c.id: c for c in chosen}
    generic = by_id["swap_args@CausalSelfAttention.forward#2"]
    assert generic.same_as == "causal_qkv_order" and generic.explains == by_id["causal_qkv_order"].explains
    assert "k, q, v" in generic.diff
    _, alone = audit.candidates(SOLUTION, only=["swap_args@CausalSelfAttention.forward#2"])  # catalog not chosen
    assert [(c.id, c.same_as) for c in alone] == [("swap_args@CausalSelfAttention.forward#2", "causal_qkv_order")]


def test_an_unknown_mutant_is_an_error_and_the_sample_is_bounded():
    with pytest.raises(audit.AuditError):
        audit.candidates(SOLUTION, only=["no_such_mistake"])
    _, chosen = audit.candidates(SOLUTION, catalog=False, per_operator=2)
    counts = {}
    for c in chosen:
        counts[c.made_by] = counts.get(c.made_by, 0) + 1
    assert counts and max(counts.values()) <= 2


def fake_report(verdict="caught"):
    mutant = {**audit.judge(candidate(), outcomes(["SelfAttention.scale"] if verdict == "caught" else []), CONFIG),
              "verdict": verdict}
    report = {"version": 1, "generated_at": "now", "grader_version": "0", "suite": "s", "grading_yml": "g",
              "seed": 0, "per_operator": 6, "jobs": 1, "only": [], "seconds": 1.0,
              "load_average": {"before": [0, 0, 0], "after": [0, 0, 0]},
              "properties": [f"{p.cls}.{p.name}" for p in CONFIG.properties], "mutants": [mutant]}
    report["summary"] = audit.summarize(report)
    return report


def test_changes_since_the_previous_audit():
    before, after = fake_report("survived"), fake_report("caught")
    found = audit.changes(before, after)
    assert found["mutants"] == [{"id": "m", "verdict": ["survived", "caught"],
                                 "caught_by_added": ["SelfAttention.scale"], "caught_by_removed": []}]
    assert audit.changes(after, after)["mutants"] == []


def test_the_files_hold_the_matrix(tmp_path):
    report = fake_report("caught")
    render.write(tmp_path, report, CONFIG)
    data = json.loads((tmp_path / "audit.json").read_text(encoding="utf-8"))
    assert data["mutants"][0]["outcomes"]["SelfAttention.scale"]["status"] == "failed"
    html = (tmp_path / "audit.html").read_text(encoding="utf-8")
    assert html.count('<td class="kill"') == 1 and "SelfAttention" in html
    assert (tmp_path / "audit.json").stat().st_mode & 0o077 == 0


def test_audit_command_on_a_few_mutants(tmp_path):
    """Slow: grades the reference and four mutants through warm slots, and probes the one that
    passes everything (swapping transpose's two axes: equivalent, flagged and not counted)."""
    out = tmp_path / "audit"
    command = [sys.executable, "-m", "autograder", "audit", "--out", str(out), "--jobs", "2",
               "--only", "sa_no_scale", "--only", "mha_no_dropout", "--only", "causal_qkv_order",
               "--only", "swap_args@CausalSelfAttention.forward#2", "--only", "swap_args@SelfAttention.forward#3"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    by_id = {m["id"]: m for m in data["mutants"]}
    assert {i: m["verdict"] for i, m in by_id.items()} == {
        "sa_no_scale": "caught", "mha_no_dropout": "caught", "causal_qkv_order": "caught",
        "swap_args@CausalSelfAttention.forward#2": "caught", "swap_args@SelfAttention.forward#3": "equivalent"}
    assert "SelfAttention.scale" in by_id["sa_no_scale"]["caught_by"]
    assert by_id["mha_no_dropout"]["caught_by"] == ["MultiHeadAttention.train_dropout"]
    assert by_id["swap_args@CausalSelfAttention.forward#2"]["same_as"] == "causal_qkv_order"
    equivalent = by_id["swap_args@SelfAttention.forward#3"]
    assert all(o["status"] == "passed" for o in equivalent["outcomes"].values()) and equivalent["equivalence"]["equal"]
    assert data["summary"]["catalog_survivors"] == []
    html = (out / "audit.html").read_text(encoding="utf-8")
    assert "sa_no_scale" in html and 'class="matrix"' in html
    assert "3 caught" in done.stdout and "1 equivalent" in done.stdout
