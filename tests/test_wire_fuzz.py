"""Fuzzing the grader's side of the wire: every frame the worker sends is hostile until decoded.

Random prefixes and bodies, valid frames with bytes flipped, cut or added, forged array specs and
deeply nested bodies: frame_length and decode must return plain values or raise WireError (the
client turns only that into a 'protocol' failure; any other exception escapes the worker client),
and never allocate for what a header claims beyond what the frame holds.
"""
import json
import struct
import tracemalloc

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from autograder.worker import wire

PREFIX = struct.Struct(">QI")
FUZZ = settings(max_examples=300, deadline=None, database=None)


def check_plain(value):
    """JSON values and fresh arrays of whitelisted dtypes, nothing else."""
    if isinstance(value, np.ndarray):
        assert value.dtype.name in wire.DTYPES and value.flags.owndata
    elif isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str)
            check_plain(item)
    elif isinstance(value, list):
        for item in value:
            check_plain(item)
    else:
        assert value is None or isinstance(value, (bool, int, float, str)), type(value)


def decodes_or_refuses(data, header_len):
    """decode's verdict on a body, asserting it allocated nothing a forged header asked beyond the frame.

    The bound leaves room for what json makes of the header (tens of bytes per byte at worst), for
    copying the arrays out of the frame and for a recursion limit's worth of Python frames, not
    for any array the frame does not hold.
    """
    tracemalloc.start()
    try:
        value = wire.decode(data, header_len)
    except wire.WireError:
        value = None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 64 * len(data) + (1 << 20), f"{peak} bytes for a {len(data)}-byte frame"
    check_plain(value)
    return value


def body(header, payload=b""):
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return text + payload, len(text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=15,
)
arrays = hnp.arrays(st.sampled_from(wire.DTYPES), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
messages = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.floats() | st.text(max_size=5) | arrays,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@FUZZ
@given(st.binary(min_size=PREFIX.size, max_size=PREFIX.size))
def test_any_prefix_is_bounded_or_refused(prefix):
    try:
        total, header_len = wire.frame_length(prefix)
    except wire.WireError:
        return
    assert header_len <= total <= wire.MAX_FRAME_BYTES and header_len <= wire.MAX_HEADER_BYTES


@FUZZ
@given(st.binary(max_size=400), st.integers(0, 400))
def test_any_body_decodes_or_is_refused(data, header_len):
    decodes_or_refuses(data, min(header_len, len(data)))


@FUZZ
@given(messages, st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, 16), st.binary(max_size=16))
def test_damaged_frames_decode_or_are_refused(message, flips, cut, extra):
    """A frame as the worker writes it, then damaged, read as the client reads it."""
    frame = bytearray(wire.encode({"ok": message}))
    for position, value in flips:
        frame[position % len(frame)] = value
    frame = bytes(frame[:max(len(frame) - cut, PREFIX.size)]) + extra
    try:
        total, header_len = wire.frame_length(frame[:PREFIX.size])
    except wire.WireError:
        return
    assume(len(frame) - PREFIX.size >= total)  # otherwise the client waits for the rest
    decodes_or_refuses(frame[PREFIX.size:PREFIX.size + total], header_len)


dimensions = (st.integers(0, 6) | st.integers(-3, -1) | st.integers(2**20, 2**70)
              | st.floats() | st.text(max_size=2) | st.none() | st.lists(st.integers(0, 3), max_size=2))
shapes = st.lists(dimensions, max_size=8) | st.integers(0, 5) | st.text(max_size=3) | st.none()
specs = (st.tuples(st.sampled_from([*wire.DTYPES, "object", "complex128", "<f8", "V8", ""]), shapes).map(list)
         | json_values)


@FUZZ
@given(st.lists(specs, max_size=4) | json_values, json_values, st.binary(max_size=64))
def test_forged_array_specs_decode_or_are_refused(forged, message, payload):
    data, header_len = body({"body": message, "arrays": forged}, payload)
    decodes_or_refuses(data, header_len)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(wire.DTYPES), st.lists(st.integers(0, 2**64), min_size=1, max_size=4)),
                min_size=1, max_size=3), st.integers(0, 256))
def test_forged_counts_are_refused_before_numpy_allocates(forged, payload_size):
    data, header_len = body({"body": [{"$array": i} for i in range(len(forged))], "arrays": forged},
                            b"\x01" * payload_size)
    value = decodes_or_refuses(data, header_len)
    if value is not None:
        assert sum(array.nbytes for array in value) <= payload_size


@pytest.mark.parametrize("spec", [["float64", [2**40]], ["int64", [2**31, 2**31]], ["float32", [2**62, 4]]])
def test_a_huge_count_allocates_nothing(spec):
    data, header_len = body({"body": {"$array": 0}, "arrays": [spec]}, b"\0" * 64)
    tracemalloc.start()
    try:
        with pytest.raises(wire.WireError):
            wire.decode(data, header_len)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10


@FUZZ
@given(st.lists(st.sampled_from(["[", '{"a":', '{"$array":']), min_size=1, max_size=4), st.integers(500, 200_000))
def test_deep_nesting_decodes_or_is_refused(openers, depth):
    """Nesting past the recursion limit, in json.loads or in decode's own walk of the body."""
    closers = {"[": "]", '{"a":': "}", '{"$array":': "}"}
    chain = [openers[i % len(openers)] for i in range(depth)]
    text = "".join(chain) + "0" + "".join(closers[o] for o in reversed(chain))
    decodes_or_refuses(*body(f'{{"body": {text}, "arrays": [["bool", [1]]]}}'.encode(), b"\x01"))


# Found by this fuzz on an earlier wire.py: numpy raised its own exception for these forged
# shapes, and math.prod was quadratic in the number of dimensions.

def test_boolean_dimensions_are_refused():
    with pytest.raises(wire.WireError):
        wire.decode(*body({"body": 0, "arrays": [["float32", [False]]]}))


def test_too_many_dimensions_are_refused():
    with pytest.raises(wire.WireError):
        wire.decode(*body({"body": 0, "arrays": [["bool", [1] * 65]]}, b"\x01"))


def test_zero_size_shapes_with_huge_dimensions_are_refused():
    with pytest.raises(wire.WireError):
        wire.decode(*body({"body": 0, "arrays": [["int64", [0, 2**62]]]}))


def test_a_long_shape_is_refused_before_its_product_is_taken(monkeypatch):
    """math.prod over 200,000 dimensions is quadratic: the length must be refused first."""
    def no_product(shape):
        raise AssertionError("took the product of a shape that has too many dimensions")

    monkeypatch.setattr(wire.math, "prod", no_product)
    data, header_len = body({"body": 0, "arrays": [["float32", [2] * 200_000]]})
    with pytest.raises(wire.WireError):
        wire.decode(data, header_len)


JSON_TEXT = st.text(st.characters(codec=None, categories=None), max_size=8)  # surrogates and controls included
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | JSON_TEXT,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(JSON_TEXT, inner, max_size=3),
                           max_leaves=10)


@FUZZ
@given(value=JSON_VALUES, ascii_only=st.booleans())
def test_clean_tree_is_skipped_only_where_it_would_change_nothing(value, ascii_only):
    """The client skips clean_tree for replies whose header json_needs_cleaning clears: for
    those, every decoded string must already be clean."""
    from autograder.text import clean_tree, json_needs_cleaning

    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        decoded = json.loads(raw)
    except ValueError:  # bytes with surrogates are no UTF-8: the wire refuses them before this
        return
    if not json_needs_cleaning(raw):
        assert clean_tree(decoded) == decoded


@FUZZ
@given(keys=st.lists(JSON_TEXT, max_size=6, unique=True))
@example(keys=["W_Q.weight", "W_Q\u200b.weight", "W_Q\u034f.weight", "W_Q\\u200b.weight"])
def test_clean_tree_keeps_every_key_apart_and_clean(keys):
    """A reply's names are keys: "W_Q\\u200b.weight" cleaned into "W_Q.weight" replaced the real
    weight's entry, and an extra parameter went uncounted. Keys clean() would change are escaped
    instead: as many keys come out as went in, each clean."""
    from autograder.text import clean, clean_tree

    cleaned = clean_tree(dict.fromkeys(keys, 0))
    assert len(cleaned) == len(keys)
    assert all(clean(key) == key for key in cleaned)
