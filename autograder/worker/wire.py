"""Plain-data framing between the grader and its worker: a JSON header plus raw array bytes.

Nothing that crosses is ever unpickled: the trusted side only parses JSON and copies bytes into
numpy arrays of whitelisted dtypes, so a hostile worker can send wrong numbers but never code.
This file is copied next to the worker in its sandbox, so it imports only the standard library
and numpy.
"""
import json
import math
import struct

import numpy as np

DTYPES = ("float32", "float64", "float16", "bool", "int64", "int32")
DTYPE_NAMES = {np.dtype(name): name for name in DTYPES}  # dtype.name takes ~5 µs, a lookup here ~0.1
# Honest replies are kilobytes, up to ~3.6 MiB where a correct module returns its weights and output
# in float64 on the farthest call (strategies.FARTHEST_SELF_ATTENTION: 600 × 600 weights, 600 × 160
# output); headers under 1 KiB. The cap bounds what a reply costs the grader's memory, of which one
# exchange holds at most client.MAX_REQUESTS (64 MiB), and json.loads' work (~25× a header's size).
MAX_FRAME_BYTES = 4 << 20
MAX_HEADER_BYTES = 256 << 10  # a module with thousands of parameters names them all in its header
MAX_DIMENSIONS = 32  # what any numpy accepts
MAX_NAME_CHARS = 80  # an exception class's name, as the worker sends it and the grader shows it
_PREFIX = struct.Struct(">QI")  # total payload length, header length


class WireError(Exception):
    """A frame that does not follow the protocol (truncated, oversized or malformed)."""


class FrameTooLarge(WireError):
    """A message over MAX_FRAME_BYTES: the worker says so instead of sending it (the shape of its
    largest array tells a student what to fix); the grader reads no such frame."""

    def __init__(self, largest_shape):
        super().__init__(f"message over {MAX_FRAME_BYTES} bytes")
        self.largest_shape = largest_shape


def _restore(value, arrays):
    if isinstance(value, dict):
        if set(value) == {"$array"}:
            index = value["$array"]
            if not isinstance(index, int) or not 0 <= index < len(arrays):
                raise WireError(f"array reference {index!r} out of range")
            return arrays[index]
        return {k: _restore(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, arrays) for v in value]
    return value


def encode(message):
    """Serialize a message of JSON values and numpy arrays into one frame. json's C encoder walks
    the message and hands each array to _Arrays, which sets it aside and puts a reference in its place."""
    arrays = _Arrays()
    body = json.dumps(message, default=arrays.reference, allow_nan=True)
    specs = []
    for array in arrays:
        name = DTYPE_NAMES.get(array.dtype)
        if name is None:
            raise WireError(f"dtype {array.dtype.name} cannot cross the wire")
        specs.append([name, list(array.shape)])
    header = f'{{"body": {body}, "arrays": {json.dumps(specs)}}}'.encode()
    if len(header) + sum(a.nbytes for a in arrays) > MAX_FRAME_BYTES:
        raise FrameTooLarge(max((a.shape for a in arrays), key=math.prod, default=()))
    payload = b"".join(a.tobytes() for a in arrays)
    return _PREFIX.pack(len(header) + len(payload), len(header)) + header + payload


class _Arrays(list):
    def reference(self, value):
        """json's `default`: an array becomes {"$array": its index}; anything else is no JSON."""
        if not isinstance(value, np.ndarray):
            raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
        self.append(np.asarray(value, order="C"))  # ascontiguousarray would turn 0-d into 1-d
        return {"$array": len(self) - 1}


def frame_length(prefix):
    """Validate a frame prefix and return (total length, header length)."""
    total, header_len = _PREFIX.unpack(prefix)
    if header_len > MAX_HEADER_BYTES or total > MAX_FRAME_BYTES or header_len > total:
        raise WireError(f"frame of {total} bytes with a {header_len}-byte header is out of bounds")
    return total, header_len


PREFIX_SIZE = _PREFIX.size


def decode(data, header_len):
    """Parse the frame body (everything after the prefix) back into a message."""
    try:
        header = json.loads(data[:header_len].decode())
        specs, body = header["arrays"], header["body"]
        if not isinstance(specs, list):
            raise TypeError("arrays is not a list")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
        raise WireError(f"unreadable frame header: {type(exc).__name__}") from None
    arrays, offset = [], header_len
    for spec in specs:
        try:
            dtype_name, shape = spec
            # Plain ints only (a JSON true is an int to isinstance), each no larger than a frame,
            # so that even a zero-size shape is one numpy accepts and its product is cheap.
            if (dtype_name not in DTYPES or not isinstance(shape, list) or len(shape) > MAX_DIMENSIONS
                    or not all(type(d) is int and 0 <= d <= MAX_FRAME_BYTES for d in shape)):
                raise ValueError
            dtype = np.dtype(dtype_name)
            count = math.prod(shape)  # Python ints: a forged shape cannot overflow into a small count
        except (ValueError, TypeError):
            raise WireError(f"bad array spec {str(spec)[:100]}") from None
        nbytes = count * dtype.itemsize
        if offset + nbytes > len(data):
            raise WireError("frame shorter than its arrays")
        try:
            arrays.append(np.frombuffer(data, dtype, count, offset).reshape(shape).copy())
        except (ValueError, TypeError):
            raise WireError(f"bad array spec {str(spec)[:100]}") from None
        offset += nbytes
    try:
        return _restore(body, arrays)
    except RecursionError:
        raise WireError("frame nested too deeply") from None


def read_exact(stream, size):
    """Blocking read of exactly size bytes from a binary stream (the worker's side)."""
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise EOFError("stream closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(stream):
    total, header_len = frame_length(read_exact(stream, PREFIX_SIZE))
    return decode(read_exact(stream, total), header_len)
