"""The wire protocol between grader and worker: exact round trips, and nothing but WireError on garbage.

The worker is under the submission's control, so every frame it sends is hostile until parsed:
whatever bytes arrive, decoding either returns plain values (JSON types and numpy arrays of
whitelisted dtypes) or raises WireError, which the client turns into a 'protocol' failure.
"""
import io
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from autograder.worker import wire

pytestmark = pytest.mark.unit

PREFIX = struct.Struct(">QI")


def roundtrip(message):
    frame = wire.encode(message)
    total, header_len = wire.frame_length(frame[: wire.PREFIX_SIZE])
    assert total == len(frame) - wire.PREFIX_SIZE
    return wire.decode(frame[wire.PREFIX_SIZE:], header_len)


def raw_frame(header, payload=b""):
    """The body of a frame (what decode reads) with a hand-made header."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return text + payload, len(text)


@settings(max_examples=60, deadline=None, database=None)
@given(hnp.arrays(st.sampled_from(wire.DTYPES), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
def test_arrays_cross_unchanged(array):
    back = roundtrip({"ok": {"outputs": [array], "n": 3}})["ok"]
    assert back["n"] == 3
    assert back["outputs"][0].dtype == array.dtype
    assert back["outputs"][0].shape == array.shape
    np.testing.assert_array_equal(back["outputs"][0], array)


def test_nested_values_and_special_floats_cross():
    message = {"ok": {"grads": {"W_Q.weight": np.ones((2, 3), np.float32), "W_K.weight": None},
                      "values": [1, 2.5, "x", None, True, float("nan"), float("inf")]}}
    back = roundtrip(message)["ok"]
    np.testing.assert_array_equal(back["grads"]["W_Q.weight"], np.ones((2, 3)))
    assert back["grads"]["W_K.weight"] is None
    assert back["values"][:5] == [1, 2.5, "x", None, True]
    assert np.isnan(back["values"][5]) and back["values"][6] == float("inf")


@pytest.mark.parametrize("array", [np.array([object()]), np.array([1 + 2j]), np.array(["text"])])
def test_other_dtypes_never_leave(array):
    with pytest.raises(wire.WireError):
        wire.encode({"ok": array})


def test_a_message_over_the_cap_is_refused_with_its_largest_shape():
    small, large = np.zeros((2, 3), np.float32), np.zeros((1, 1, wire.MAX_FRAME_BYTES // 4), np.float32)
    with pytest.raises(wire.FrameTooLarge) as caught:
        wire.encode({"ok": {"outputs": [small, large]}})
    assert caught.value.largest_shape == (1, 1, wire.MAX_FRAME_BYTES // 4)
    wire.encode({"ok": {"outputs": [small, large[..., :1024]]}})  # an answer's size crosses


@pytest.mark.parametrize("total, header_len", [
    (wire.MAX_FRAME_BYTES + 1, 10),          # larger than any honest reply
    (100, wire.MAX_HEADER_BYTES + 1),        # header over its own cap
    (10, 11),                                # header longer than the frame
])
def test_frame_prefix_out_of_bounds(total, header_len):
    with pytest.raises(wire.WireError):
        wire.frame_length(PREFIX.pack(total, header_len))


@pytest.mark.parametrize("header", [
    b"\xff\xfe not utf-8",
    b"{not json",
    b"[" * 100_000 + b"]" * 100_000,          # nesting deeper than the parser's recursion
    [1, 2],
    {"body": {}},
    {"body": {}, "arrays": 5},
    {"body": {}, "arrays": [["float32", [-1]]]},
    {"body": {}, "arrays": [["object", [1]]]},
    {"body": {}, "arrays": [["float32", "ab"]]},
    {"body": {}, "arrays": [["float32", [2**62, 2**62]]]},  # a product that would wrap in int64
    {"body": {}, "arrays": [["float64", [4]]]},             # more bytes than the frame holds
    {"body": {"$array": 3}, "arrays": []},
    {"body": {"$array": "0"}, "arrays": []},
], ids=lambda header: str(header)[:30])
def test_malformed_frames_raise_wire_error(header):
    data, header_len = raw_frame(header, payload=b"\0" * 8)
    with pytest.raises(wire.WireError):
        wire.decode(data, header_len)


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=300), st.integers(0, 300))
def test_any_bytes_decode_or_raise_wire_error(data, header_len):
    try:
        value = wire.decode(data, min(header_len, len(data)))
    except wire.WireError:
        return
    json.dumps(value, default=lambda array: array.tolist())  # plain values only


@settings(max_examples=200, deadline=None, database=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
), st.lists(st.sampled_from(["float32", "int64", "bool", "object"]), max_size=3))
def test_forged_headers_decode_or_raise_wire_error(body, dtypes):
    header = {"body": body, "arrays": [[name, [2]] for name in dtypes]}
    data, header_len = raw_frame(header, payload=b"\0" * 64)
    try:
        value = wire.decode(data, header_len)
    except wire.WireError:
        return
    json.dumps(value, default=lambda array: array.tolist())  # plain values and arrays only


def test_read_message_reads_one_frame_and_reports_a_cut_stream():
    frame = wire.encode({"op": "probe", "args": {}})
    stream = io.BytesIO(frame + frame[:-3])
    assert wire.read_message(stream) == {"op": "probe", "args": {}}
    with pytest.raises(EOFError):
        wire.read_message(stream)


def test_reply_bytes_beyond_what_an_exchange_can_hold_are_a_protocol_failure():
    """A worker that writes without end while the grader is still sending (its request pipe
    full) once filled the grader's inbox without bound (2.1 GB in 13 s): now the grader stops at
    client.MAX_INBOX_BYTES, as the submission's protocol failure."""
    import os
    from types import SimpleNamespace

    from autograder.worker import client
    from autograder.worker.submission_errors import SubmissionError

    read, write = os.pipe()
    os.set_blocking(write, False)
    grader = SimpleNamespace(response_fd=read, inbox=bytearray(), _crash=None)
    try:
        with pytest.raises(SubmissionError) as caught:
            for _ in range(client.MAX_INBOX_BYTES // 4096 + 2):
                os.write(write, b"\0" * 4096)
                client.Worker._read_replies(grader, [read])
        assert caught.value.kind == "protocol"
        assert len(grader.inbox) <= client.MAX_INBOX_BYTES + 4096
    finally:
        os.close(read)
        os.close(write)


def test_an_exchange_sends_no_more_requests_than_the_inbox_bound_counts_on():
    """MAX_INBOX_BYTES holds one largest frame per request of an exchange: more requests than
    MAX_REQUESTS in one exchange would let honest replies overflow it, so the grader refuses to
    send them (its own bug, not the student's), before anything reaches the worker."""
    from types import SimpleNamespace

    from autograder.errors import GraderBug
    from autograder.worker import client

    untouched = SimpleNamespace()  # any attribute the call reached for would raise AttributeError
    with pytest.raises(GraderBug):
        client.Worker.calls(untouched, "SelfAttention", [("forward", {})] * (client.MAX_REQUESTS + 1))
    assert client.MAX_INBOX_BYTES == client.MAX_REQUESTS * (wire.PREFIX_SIZE + wire.MAX_FRAME_BYTES)
