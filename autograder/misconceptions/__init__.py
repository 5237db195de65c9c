"""The misconception catalog of the attention exercise (catalog.py), with, for each entry, how to
make it from the reference solution (a source-level AST mutation, mutation.py) and what a module
with it computes (a float64 numpy alternative to the reference, model.py).

    from autograder import misconceptions
    entry = misconceptions.get("mha_no_scale")
    entry.es, entry.en, entry.explains           # for the student; the properties it can explain
    output, weights = entry.compute(params, heads, query, key, value, mask)   # as reference.py
    misconceptions.compute("causal_mask_not_cropped", params, heads, x, block_size=8)
    source = entry.mutate()                      # solutions/attention.py with that mistake

`params` are the module's parameters as the grader loaded them (name -> float64 array, the names
reference.py reads). Dropout misconceptions take the module's keep masks (model.py: train, p, drop).
Generic mutation operators of the mutation-testing tradition are in operators.py.
"""
from .catalog import CATALOG, KINDS, Misconception
from .mutation import MutationError

BY_ID = {entry.id: entry for entry in CATALOG}
if len(BY_ID) != len(CATALOG):  # pragma: no cover - a typo in the catalog
    raise RuntimeError("duplicate misconception ids in the catalog")


def get(misconception_id):
    """The catalog entry with this id (KeyError naming the known ids otherwise)."""
    try:
        return BY_ID[misconception_id]
    except KeyError:
        raise KeyError(f"no misconception {misconception_id!r}; known: {', '.join(BY_ID)}") from None


def of_class(cls):
    return [entry for entry in CATALOG if entry.cls == cls]


def compute(misconception_id, params, *args, **context):
    """What a module with this misconception returns (see Misconception.compute)."""
    return get(misconception_id).compute(params, *args, **context)


def explaining(cls, prop):
    """The misconceptions of `cls` whose failure can explain a failure of property `prop`."""
    return [entry for entry in CATALOG if entry.cls == cls and prop in entry.explains]


__all__ = ["CATALOG", "KINDS", "Misconception", "MutationError", "BY_ID", "get", "of_class", "compute", "explaining"]
