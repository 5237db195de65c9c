"""audit.json and audit.html: the kill matrix as data, and as a heatmap in the report's style."""
from __future__ import annotations

import json
from pathlib import Path

from ..cohort.report import environment, private_file, private_folder


def cells(mutant, properties):
    """One cell per property: (css class, mark, tooltip)."""
    found = []
    related = set(mutant["related"])
    blocked = set(mutant.get("blocked", []))
    for prop in properties:
        outcome = mutant["outcomes"].get(prop)
        if outcome is None:
            found.append(("none", "", prop))
            continue
        tip = f"{prop}: {outcome['status']}" + (f" ({outcome['code']})" if outcome.get("code") else "")
        if outcome["status"] != "passed":
            found.append(("kill" if prop in related else "side", "●" if prop in related else "○", tip))
        elif prop in blocked:
            found.append(("blocked", "·", tip + ", no points (prerequisite)"))
        else:
            found.append(("related" if prop in related else "pass", "", tip))
    return found


def groups(properties):
    """[(class, [property names])] in grading.yml's order."""
    found = []
    for prop in properties:
        cls, _, name = prop.partition(".")
        if not found or found[-1][0] != cls:
            found.append((cls, []))
        found[-1][1].append(name)
    return found


def write(out, report, config):
    out = Path(out)
    private_folder(out)
    with private_file(out / "audit.json") as handle:
        json.dump(report, handle, ensure_ascii=False, indent=1)
        handle.write("\n")
    order = {"misconception": 0, "operator": 1}
    mutants = sorted(report["mutants"], key=lambda m: (order.get(m["kind"], 2), m["id"]))
    rows = [{"equivalence": None, "grader_failure": None, **m, "cells": cells(m, report["properties"])} for m in mutants]
    html = environment().get_template("audit.html.j2").render(
        report=report, rows=rows, groups=groups(report["properties"]), language=config.language,
        summary=report["summary"], kinds=(("misconception", "catalog"), ("operator", "generic")),
        verdicts=("caught", "collateral-only", "survived", "equivalent", "grader_error"))
    with private_file(out / "audit.html") as handle:
        handle.write(html)
