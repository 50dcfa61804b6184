"""Tests for aioenv.wire.protocol: messages (encode/decode), values (pack/unpack), leaves, malformed input.

Contract (design.md section 2): a message is ``[header, *buffers]``, the header is msgpack with
``"v"`` (PROTOCOL_VERSION) and ``"op"``; numpy arrays travel raw and are decoded as read-only,
zero-copy views of the received buffers; no pickle; anything malformed is a ``ProtocolError``
whose message says what was expected and what arrived.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aioenv import PROTOCOL_VERSION
from aioenv.errors import AioEnvError, ProtocolError
from aioenv.wire.protocol import Key, Op, decode, encode, leaves_from_wire, leaves_to_wire, local, pack, unpack

NUMERIC_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]
SHAPES = [(0,), (1,), (3,), (2, 3), (2, 0, 4), (1, 1, 1, 5)]  # 0-d arrays: dedicated tests below
BIG = 20_000  # float64 elements: 160 kB, well above any "small array" optimisation


# ---------------------------------------------------------------- helpers


def to_wire(frames: list[Any]) -> list[bytes]:
    """What a peer receives: each frame as plain bytes."""
    out = []
    for frame in frames:
        if isinstance(frame, bytes):
            out.append(frame)
        elif isinstance(frame, np.ndarray):
            out.append(np.ascontiguousarray(frame).tobytes())
        else:
            out.append(bytes(memoryview(frame)))
    return out


def roundtrip(op: str, fields: dict[str, Any], arrays: list[np.ndarray]) -> tuple[dict[str, Any], list[np.ndarray]]:
    return decode(to_wire(encode(op, fields, arrays)))


def sample_array(dtype: Any, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    n = math.prod(shape)
    if dtype.kind == "b":
        flat = rng.integers(0, 2, n).astype(dtype)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        flat = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    elif dtype.kind == "f":
        flat = (rng.standard_normal(n) * 100).astype(dtype)
    else:
        flat = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    return flat.reshape(shape)


def assert_same_array(actual: Any, expected: np.ndarray, what: str = "array") -> None:
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    np.testing.assert_array_equal(actual, expected, err_msg=what, strict=True)


def assert_same_value(actual: Any, expected: Any, path: str = "value") -> None:
    """Exact equality including types (int vs bool vs float, tuple vs list, numpy dtypes); NaN == NaN."""
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{path}: got {type(actual).__name__}"
        if expected.dtype == object:
            assert actual.dtype == object, f"{path}: {actual!r}"
            assert actual.shape == expected.shape, f"{path}: {actual!r}"
            for index in np.ndindex(expected.shape):
                assert_same_value(actual[index], expected[index], f"{path}[{index}]")
        else:
            assert_same_array(actual, expected, path)
        return
    assert type(actual) is type(expected), f"{path}: type {type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            assert_same_value(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same_value(a, e, f"{path}[{i}]")
    elif isinstance(expected, (float, np.floating, complex, np.complexfloating)) and np.isnan(expected):
        assert np.isnan(actual), f"{path}: {actual!r} != {expected!r}"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def valid_header(**fields: Any) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "op": Op.STEP, "id": 1, **fields}


def reencode_header(frames: list[Any], mutate: Any) -> list[bytes]:
    """Decode a valid message's header with plain msgpack, change it, put it back."""
    wire = to_wire(frames)
    header = msgpack.unpackb(wire[0], raw=False, strict_map_key=False)
    mutate(header)
    wire[0] = msgpack.packb(header, use_bin_type=True)
    return wire


def expect_protocol_error(frames: Any, *fragments: str) -> ProtocolError:
    with pytest.raises(ProtocolError) as excinfo:
        decode(frames)
    message = str(excinfo.value)
    for fragment in fragments:
        assert fragment.lower() in message.lower(), f"{fragment!r} not in error message {message!r}"
    return excinfo.value


# ---------------------------------------------------------------- encode / decode


def test_header_fields_round_trip() -> None:
    fields = {
        "id": 42,
        "env": [0, 3, 7],
        "name": "render",
        "opt": {"reset_mask": None, "level": 2.5, 3: "int key"},
        "seed": [None, 1, 2**40],
        "blob": b"\x00\xff",
        "flag": True,
        "tup": (1, "a"),
    }
    header, arrays = roundtrip(Op.CALL, fields, [])
    assert arrays == []
    assert header["v"] == PROTOCOL_VERSION
    assert header["op"] == Op.CALL
    for key, value in fields.items():
        assert_same_value(header[key], value, f"header[{key!r}]")


def test_a_local_message_decodes_to_its_header_without_bytes() -> None:
    frames = local(Op.STEP, {Key.ID: 7, Key.SHARED: 1, "v": 0, "op": "x"})
    header, arrays = decode(frames)
    assert header == {Key.ID: 7, Key.SHARED: 1, Key.VERSION: PROTOCOL_VERSION, Key.OP: Op.STEP}
    assert arrays == []


def test_caller_cannot_override_version_or_op() -> None:
    header, _ = roundtrip(Op.STEP, {"v": 999, "op": "other", "id": 1}, [])
    assert header["v"] == PROTOCOL_VERSION
    assert header["op"] == Op.STEP


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
def test_arrays_of_every_numeric_dtype_and_shape_round_trip(dtype: Any) -> None:
    arrays = [sample_array(dtype, shape, seed=i) for i, shape in enumerate(SHAPES)]
    arrays.append(sample_array(dtype, (BIG // np.dtype(dtype).itemsize + 1,), seed=99))  # a big one
    header, out = roundtrip(Op.RESULT, {"id": 5}, arrays)
    assert header["id"] == 5
    assert len(out) == len(arrays)
    for i, (got, want) in enumerate(zip(out, arrays, strict=True)):
        assert_same_array(got, want, f"array {i} {want.dtype} {want.shape}")


def test_zero_d_and_empty_arrays_keep_their_shape() -> None:
    arrays = [sample_array(dtype, (), seed=i) for i, dtype in enumerate(NUMERIC_DTYPES)]
    arrays += [np.zeros((0,)), np.zeros((3, 0), np.uint8)]
    _, out = roundtrip(Op.RESULT, {"id": 1}, arrays)
    for i, (got, want) in enumerate(zip(out, arrays, strict=True)):
        assert_same_array(got, want, f"array {i} ({want.dtype}, shape {want.shape})")


def test_non_contiguous_and_big_endian_arrays_round_trip() -> None:
    base = np.arange(48, dtype=np.int32).reshape(6, 8)
    arrays = [
        base[:, ::2],  # strided
        base.T,  # Fortran order
        np.arange(10, dtype=">i4"),  # big-endian
        np.arange(6, dtype=">f8").reshape(2, 3)[::-1],
    ]
    _, out = roundtrip(Op.RESULT, {"id": 1}, arrays)
    for i, (got, want) in enumerate(zip(out, arrays, strict=True)):
        np.testing.assert_array_equal(got, want, err_msg=f"array {i}")
        assert got.shape == want.shape
        assert got.dtype.kind == want.dtype.kind
        assert got.dtype.itemsize == want.dtype.itemsize


def test_decoded_arrays_are_read_only_zero_copy_views_of_bytes_frames() -> None:
    big = sample_array(np.float64, (BIG,), seed=1)
    small = sample_array(np.int16, (4, 3), seed=2)
    wire = to_wire(encode(Op.RESULT, {"id": 1}, [small, big]))
    _, (got_small, got_big) = decode(wire)
    assert_same_array(got_small, small)
    assert_same_array(got_big, big)
    for arr in (got_small, got_big):
        assert not arr.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            arr[...] = 0
    # the big array is a view of one of the received frames, not a copy
    assert any(np.shares_memory(got_big, np.frombuffer(frame, np.uint8)) for frame in wire), (
        "a large array was copied out of its frame instead of viewed"
    )


def test_decoded_arrays_from_zmq_frames_are_read_only_zero_copy_views() -> None:
    """Through a real socket (recv_multipart(copy=False) gives zmq.Frame objects)."""
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        endpoint = f"inproc://aioenv-protocol-test-{id(a)}"
        a.bind(endpoint)
        b.connect(endpoint)
        big = sample_array(np.float32, (2 * BIG,), seed=3)
        small = sample_array(np.uint8, (5,), seed=4)
        a.send_multipart(encode(Op.STEP, {"id": 9, "act": [0, 1]}, [small, big]), copy=False)
        assert b.poll(10_000), "message did not arrive"
        frames = b.recv_multipart(copy=False)
    finally:
        a.close(linger=0)
        b.close(linger=0)
    header, (got_small, got_big) = decode(frames)
    assert header["id"] == 9
    assert header["act"] == [0, 1]
    assert_same_array(got_small, small)
    assert_same_array(got_big, big)
    assert any(np.shares_memory(got_big, np.frombuffer(f.buffer, np.uint8)) for f in frames), (
        "a large array was copied out of its zmq frame instead of viewed"
    )
    for name, arr in (("small", got_small), ("big", got_big)):
        assert not arr.flags.writeable, f"the {name} decoded array is writeable: it must be a read-only view"


def test_decode_accepts_memoryview_and_zmq_frame_headers() -> None:
    wire = to_wire(encode(Op.PING, {"id": 3}))
    for first in (memoryview(wire[0]), zmq.Frame(wire[0])):
        header, arrays = decode([first])
        assert header["op"] == Op.PING
        assert header["id"] == 3
        assert arrays == []


# ---------------------------------------------------------------- pack / unpack


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_pack_ndarray_round_trip(dtype: Any, shape: tuple[int, ...]) -> None:
    arr = sample_array(dtype, shape, seed=7)
    out = unpack(pack(arr))
    assert_same_array(out, arr, f"{np.dtype(dtype)} {shape}")
    assert out.flags.writeable, "unpacked arrays are fresh copies the user may modify"


def test_pack_zero_d_ndarrays_keep_their_shape() -> None:
    """A 0-d array (e.g. ``np.array(1.5)`` in an info dict) must not come back as shape (1,)."""
    for i, dtype in enumerate(NUMERIC_DTYPES):
        arr = sample_array(dtype, (), seed=i)
        assert_same_array(unpack(pack(arr)), arr, f"0-d {np.dtype(dtype)}")
    nested = {"x": np.array(2.0), "t": (np.array(3, np.int8),)}
    assert_same_value(unpack(pack(nested)), nested)


def test_pack_non_contiguous_and_big_endian_ndarrays() -> None:
    for arr in (np.arange(20, dtype=np.int64).reshape(4, 5)[:, 1::2], np.arange(6, dtype=">u2").reshape(3, 2).T):
        out = unpack(pack(arr))
        np.testing.assert_array_equal(out, arr)
        assert out.shape == arr.shape


@pytest.mark.parametrize(
    "arr",
    [
        np.array(["a", "bc", ""], dtype=object),
        np.array([["x"], ["yz"]], dtype=object),
        np.array("solo", dtype=object),
        np.empty(0, dtype=object),
    ],
    ids=["1d", "2d", "0d", "empty"],
)
def test_pack_object_arrays_of_str(arr: np.ndarray) -> None:
    out = unpack(pack(arr))
    assert isinstance(out, np.ndarray)
    assert out.dtype == object
    assert out.shape == arr.shape
    for index in np.ndindex(arr.shape):
        assert type(out[index]) is str
        assert out[index] == arr[index]


@pytest.mark.parametrize(
    "scalar",
    [
        np.bool_(True),
        np.int8(-5),
        np.int16(300),
        np.int32(-70000),
        np.int64(-(2**62)),
        np.uint8(255),
        np.uint16(65535),
        np.uint32(2**32 - 1),
        np.uint64(2**64 - 1),
        np.float16(1.5),
        np.float32(-2.25),
        np.float64(1e300),
        np.complex64(1 - 2j),
        np.complex128(3 + 4j),
    ],
    ids=lambda s: type(s).__name__,
)
def test_pack_numpy_scalars_keep_their_dtype(scalar: np.generic) -> None:
    out = unpack(pack(scalar))
    assert type(out) is type(scalar), f"{type(out).__name__} != {type(scalar).__name__}"
    assert out.dtype == scalar.dtype
    assert out == scalar


def test_pack_python_values_tuples_nested_dicts_bytes() -> None:
    value = {
        "none": None,
        "bool": False,
        "int": -(2**63),
        "uint": 2**64 - 1,
        "float": 0.1,
        "str": "héllo",
        "bytes": b"\x00\x01\xff",
        "tuple": (1, (2, "x"), [3, (4,)]),
        "empty_tuple": (),
        "list": [1, [2, [3]]],
        7: {8: {"deep": (None, b"")}},
        -1: "negative int key",
        "arr_in_tuple": (np.arange(3, dtype=np.int8), np.float32(2.0)),
    }
    assert_same_value(unpack(pack(value)), value)


def test_pack_bytes_like_become_bytes() -> None:
    assert unpack(pack(bytearray(b"ab"))) == b"ab"
    assert type(unpack(pack(bytearray(b"ab")))) is bytes
    assert unpack(pack(memoryview(b"cd"))) == b"cd"


class Opaque:
    pass


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (object(), "object"),
        (Opaque(), "Opaque"),
        (1 + 2j, "complex"),
        (np.datetime64("2020-01-01"), "datetime64"),
        (np.array(["2020-01-01"], dtype="M8[D]"), "datetime64"),
        (np.zeros(2, dtype=[("a", "i4")]), "('a', '<i4')"),
        ({"nested": [1, Opaque()]}, "Opaque"),
        (lambda: None, "function"),
    ],
    ids=["object", "custom", "complex", "datetime64", "datetime64_array", "structured_array", "nested", "function"],
)
def test_pack_unsupported_values_raise_type_error_naming_the_type(value: Any, type_name: str) -> None:
    with pytest.raises(TypeError) as excinfo:
        pack(value)
    assert type_name in str(excinfo.value), str(excinfo.value)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",  # never-used msgpack byte
        b"\x92\x01",  # array of 2 with one item: truncated
        msgpack.packb(msgpack.ExtType(1, b"garbage")),
        msgpack.packb(msgpack.ExtType(1, msgpack.packb(["<f8", [3], b"\x00"]))),  # 3 floats in 1 byte
        msgpack.packb(msgpack.ExtType(1, msgpack.packb(["|O", [-1], []]))),
        msgpack.packb(msgpack.ExtType(3, msgpack.packb(["<f8", b""]))),  # scalar without bytes
        msgpack.packb(msgpack.ExtType(3, msgpack.packb(["O", b"12345678"]))),
        msgpack.packb(msgpack.ExtType(99, b"")),  # unknown extension
    ],
)
def test_unpack_malformed_raises_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        unpack(data)


# ---------------------------------------------------------------- malformed messages


def test_empty_frame_list() -> None:
    expect_protocol_error([], "empty")


@pytest.mark.parametrize("raw", [b"", b"\xc1", b"\x82\xa1v", b"\xff\xfe\xfd garbage"])
def test_header_not_msgpack(raw: bytes) -> None:
    expect_protocol_error([raw], "header")


@pytest.mark.parametrize("value", [[1, 2], "hello", 5, None, b"bytes"], ids=["list", "str", "int", "nil", "bin"])
def test_header_not_a_map(value: Any) -> None:
    err = expect_protocol_error([msgpack.packb(value, use_bin_type=True)], "map")
    assert type(value).__name__ in str(err), str(err)


@pytest.mark.parametrize("version", [PROTOCOL_VERSION + 1, 0, "1", None], ids=repr)
def test_wrong_protocol_version_names_both_versions(version: Any) -> None:
    header = valid_header()
    if version is None:
        del header["v"]
    else:
        header["v"] = version
    err = expect_protocol_error([pack(header)], "version")
    message = str(err)
    assert str(PROTOCOL_VERSION) in message
    assert repr(version) in message or str(version) in message


def test_wrong_protocol_version_that_is_an_array_is_a_protocol_error() -> None:
    """A header value may be any msgpack value, including aioenv's ndarray extension."""
    for version in (np.array([PROTOCOL_VERSION, PROTOCOL_VERSION]), np.zeros(0, np.int64), np.array([[1]])):
        expect_protocol_error([pack(valid_header(v=version))], "version")


@pytest.mark.parametrize("op", [None, 3, b"step", ["step"]], ids=["missing", "int", "bytes", "list"])
def test_missing_or_non_string_op(op: Any) -> None:
    header = valid_header()
    if op is None:
        del header["op"]
    else:
        header["op"] = op
    expect_protocol_error([pack(header)], "op")


def _message_with_big_array() -> tuple[list[Any], np.ndarray]:
    big = sample_array(np.float64, (BIG,), seed=5)
    frames = encode(Op.RESULT, {"id": 1}, [big])
    assert len(frames) == 2, "expected the big array in a frame of its own"
    return frames, big


def test_array_count_mismatch_missing_frame() -> None:
    frames, _ = _message_with_big_array()
    expect_protocol_error(to_wire(frames)[:1], "frame")


def test_array_count_mismatch_extra_frame() -> None:
    """A frame that no array spec describes is not a well-formed message."""
    frames, _ = _message_with_big_array()
    wire = [*to_wire(frames), b"\x00" * 16]
    expect_protocol_error(wire, "frame")
    small = to_wire(encode(Op.RESULT, {"id": 1}))
    expect_protocol_error([*small, b"stray"], "frame")


def test_array_spec_list_must_be_a_list() -> None:
    frames, _ = _message_with_big_array()
    expect_protocol_error(reencode_header(frames, lambda h: h.update(a="nope")), "'a'")


def test_frame_size_mismatch_truncated_frame() -> None:
    frames, big = _message_with_big_array()
    wire = to_wire(frames)
    wire[1] = wire[1][: big.nbytes - 8]
    err = expect_protocol_error(wire, "bytes")
    assert str(big.nbytes - 8) in str(err), str(err)


def test_frame_size_mismatch_in_small_arrays() -> None:
    """Small arrays may travel differently (e.g. inside the header); cutting their bytes short is caught too."""
    wire = to_wire(encode(Op.RESULT, {"id": 1}, [np.arange(10, dtype=np.int64)]))

    def shrink(header: dict[str, Any]) -> None:
        spec = header["a"][0]
        spec[1] = [10_000]  # claim far more data than exists anywhere in the message

    expect_protocol_error(reencode_header(wire, shrink), "bytes")


@pytest.mark.parametrize(
    "code",
    # "i4,", "(2)i4," and the like reached numpy's own parser, which raised SyntaxError (found by make fuzz)
    ["O", "|O", "<U4", "|S3", "V8", "<M8[ns]", "i4,i4", "i4,", "(2)i4,", "<f3", "f8" * 1000, "not-a-dtype", 7],
)
def test_non_numeric_dtype(code: Any) -> None:
    frames, _ = _message_with_big_array()

    def set_dtype(header: dict[str, Any]) -> None:
        header["a"][0][0] = code

    err = expect_protocol_error(reencode_header(frames, set_dtype), "dtype")
    if isinstance(code, str) and code in ("O", "|O"):
        assert "numeric" in str(err)
    assert len(str(err)) < 300  # a long code is not echoed whole


@pytest.mark.parametrize("shape", [[-1], [BIG, -1], "20000", [2.5], None, [float(BIG)], [[BIG]], [{}]])
def test_negative_or_malformed_shapes(shape: Any) -> None:
    """Refused whatever was decoded before: ``[float(BIG)]`` hashes like the valid ``[BIG]``."""
    frames, big = _message_with_big_array()
    assert np.array_equal(decode(to_wire(frames))[1][0], big)  # the valid spec is known now

    def set_shape(header: dict[str, Any]) -> None:
        header["a"][0][1] = shape

    err = expect_protocol_error(reencode_header(frames, set_shape), "shape")
    if isinstance(shape, list) and -1 in shape:
        assert "non-negative" in str(err)


def test_array_specs_decode_alike_first_and_again() -> None:
    """Checked specs are remembered; a repeat decodes to the same arrays (0-d, 1-d, n-d, empty)."""
    arrays = [np.array(3.5), np.arange(4, dtype=np.int16), np.ones((2, 3), np.float32), np.zeros((0, 2), np.uint8)]
    wire = to_wire(encode(Op.RESULT, {"id": 1}, arrays))
    for _ in range(2):
        _, got = decode(wire)
        for a, b in zip(arrays, got, strict=True):
            assert a.dtype == b.dtype
            assert a.shape == b.shape
            assert np.array_equal(a, b)
            assert not b.flags.writeable


def test_protocol_error_is_an_aioenv_error() -> None:
    with pytest.raises(AioEnvError):
        decode([])


# ---------------------------------------------------------------- leaves


def test_leaves_round_trip_with_text_and_numeric_leaves() -> None:
    text = np.empty(3, dtype=object)
    text[:] = ["go north", "", "héllo"]
    leaves = [
        np.arange(3, dtype=np.int64),
        text,
        np.arange(6, dtype=np.float32).reshape(3, 2),
        np.zeros((3, 0), np.uint8),
        sample_array(np.float64, (3, BIG // 3), seed=8),
    ]
    arrays: list[np.ndarray] = []
    desc = leaves_to_wire(leaves, arrays)
    assert len(desc) == len(leaves)
    assert len(arrays) == 4, "numeric leaves travel as arrays, the text leaf inline"
    assert desc[1] == ["go north", "", "héllo"]
    header, out_arrays = decode(to_wire(encode(Op.STEP, {"id": 1, "act": desc}, arrays)))
    out = leaves_from_wire(header["act"], out_arrays)
    assert len(out) == len(leaves)
    for i, (got, want) in enumerate(zip(out, leaves, strict=True)):
        if want.dtype == object:
            assert got.dtype == object
            assert got.shape == want.shape
            assert got.tolist() == want.tolist()
            assert all(type(s) is str for s in got.tolist())
        else:
            assert_same_array(got, want, f"leaf {i}")


def test_leaves_to_wire_appends_to_existing_arrays() -> None:
    arrays = [np.zeros(2)]
    desc = leaves_to_wire([np.ones(2, np.int8)], arrays)
    assert desc == [1]
    assert len(arrays) == 2


@pytest.mark.parametrize("desc", ["0", {"0": 1}, [5], [-1], [None], [1.0]], ids=repr)
def test_leaves_from_wire_malformed(desc: Any) -> None:
    with pytest.raises(ProtocolError):
        leaves_from_wire(desc, [np.zeros(2)])


# ---------------------------------------------------------------- properties (hypothesis)

_INT = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _INT,
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=20),
)
_KEYS = st.one_of(st.text(max_size=8), st.integers(min_value=-(2**63), max_value=2**63 - 1))
VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(_KEYS, children, max_size=4),
    ),
    max_leaves=20,
)
#: Header fields encode() sets itself (a caller's own field of that name would be a different message).
RESERVED = {Key.VERSION, Key.OP, Key.ARRAYS, Key.BLOB, Key.SPILLED}
FIELDS = st.dictionaries(st.text(max_size=8).filter(lambda k: k not in RESERVED), VALUES, max_size=6)

NUMERIC_DTYPE_ST = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64)),
    hnp.complex_number_dtypes(endianness="?"),
)
SMALL_ARRAYS = hnp.arrays(NUMERIC_DTYPE_ST, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
ARRAYS = st.one_of(
    SMALL_ARRAYS,
    # the same, stretched past any small-array optimisation (its own zero-copy frame)
    SMALL_ARRAYS.filter(lambda a: a.size > 0).map(lambda a: np.resize(a, 70_000 // a.itemsize + 1)),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.text(min_size=1, max_size=10), fields=FIELDS, arrays=st.lists(ARRAYS, max_size=4))
def test_property_encode_decode_round_trip(op: str, fields: dict[str, Any], arrays: list[np.ndarray]) -> None:
    header, out = decode(to_wire(encode(op, fields, arrays)))
    assert header["v"] == PROTOCOL_VERSION
    assert header["op"] == op
    for key, value in fields.items():
        assert_same_value(header[key], value, f"header[{key!r}]")
    assert len(out) == len(arrays)
    for i, (got, want) in enumerate(zip(out, arrays, strict=True)):
        assert_same_array(got, want, f"array {i}")
        assert not got.flags.writeable


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(VALUES, ARRAYS, st.lists(ARRAYS, max_size=3).map(tuple)))
def test_property_pack_unpack_round_trip(value: Any) -> None:
    assert_same_value(unpack(pack(value)), value)


def _decode_only_protocol_errors(frames: list[bytes]) -> None:
    try:
        header, arrays = decode(frames)
    except ProtocolError as exc:
        assert str(exc), "a ProtocolError must say what went wrong"  # noqa: PT017 - decode may also succeed
        return
    except Exception as exc:  # noqa: BLE001 - the point of the test
        pytest.fail(f"decode raised {type(exc).__name__} instead of ProtocolError: {exc}")
    assert isinstance(header, dict)
    assert isinstance(header["op"], str)
    assert all(isinstance(a, np.ndarray) for a in arrays)


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(st.binary(max_size=64), min_size=0, max_size=4))
def test_property_random_bytes_only_raise_protocol_error(frames: list[bytes]) -> None:
    _decode_only_protocol_errors(frames)


_ANY_VALUE = st.one_of(VALUES, SMALL_ARRAYS)
_DTYPE_CODES = st.one_of(
    st.sampled_from(["<f8", "|u1", ">i4", "<c16", "|b1", "<f2", "O", "|O", "<U2", "V4", "<M8[s]", "i4,f4", "", "xx"]),
    st.text(max_size=6),
    _ANY_VALUE,
)
_SHAPES = st.one_of(st.lists(st.integers(-3, 70_000), max_size=3), _ANY_VALUE)
_SPECS = st.one_of(
    st.lists(st.one_of(_DTYPE_CODES, _SHAPES, st.integers(-2, 4), _ANY_VALUE), max_size=5),
    st.tuples(_DTYPE_CODES, _SHAPES, st.integers(-1, 3), st.integers(-8, 200)).map(list),
    _ANY_VALUE,
)


@st.composite
def structured_messages(draw: st.DrawFn) -> list[bytes]:
    """Headers that get past the first checks (or nearly), with random array specs and frames."""
    header: dict[Any, Any] = {
        "v": draw(st.one_of(st.just(PROTOCOL_VERSION), _ANY_VALUE)),
        "op": draw(st.one_of(st.text(max_size=5), _ANY_VALUE)),
        "id": draw(_ANY_VALUE),
    }
    if draw(st.booleans()):
        header["a"] = draw(st.one_of(st.lists(_SPECS, max_size=4), _ANY_VALUE))
    if draw(st.booleans()):
        header["b"] = draw(st.one_of(st.binary(max_size=128), _ANY_VALUE))
    frames = draw(st.lists(st.binary(max_size=256), max_size=3))
    return [pack(header), *frames]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=structured_messages())
@example(frames=[pack({"v": np.array([PROTOCOL_VERSION, PROTOCOL_VERSION]), "op": "step"})])
def test_property_structured_garbage_only_raises_protocol_error(frames: list[bytes]) -> None:
    _decode_only_protocol_errors(frames)


def test_packing_reuses_packers_safely_across_threads_nesting_and_errors() -> None:
    """Packers are pooled (a fresh msgpack Packer per nested array is slow): values nested in object
    arrays pack with several at once, threads never share one, and a failed pack leaves none half-filled."""
    import concurrent.futures

    def nested(i: int) -> dict[str, Any]:
        inner = np.empty(3, dtype=object)
        inner[:] = [np.arange(i % 5, dtype=np.int16), None, np.full(2, float(i))]
        return {"i": i, "obj": inner, "t": (np.float32(i), [np.zeros((2, 2), np.uint8) + i % 256])}

    def roundtrip(i: int) -> None:
        value = nested(i)
        if i % 7 == 0:
            with pytest.raises(TypeError, match="cannot send"):
                pack({"ok": np.arange(3), "bad": object()})  # fails midway through a nested value
        back = unpack(pack(value))
        assert back["i"] == i
        assert back["t"][0] == np.float32(i)
        np.testing.assert_array_equal(back["obj"][0], np.arange(i % 5, dtype=np.int16))
        assert back["obj"][1] is None
        assert back["obj"][2].tolist() == [float(i)] * 2
        np.testing.assert_array_equal(back["t"][1][0], np.full((2, 2), i % 256, np.uint8))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(roundtrip, range(400)))


# ---------------------------------------------------------------- large arrays inside header values


def test_large_arrays_inside_a_huge_header_travel_as_frames() -> None:
    """A value of the header holding large arrays (a 40 MiB Box's per-element bounds) would pass the header limit:
    its large arrays go as frames of the message instead and come back in their place; the message's own arrays
    stay as they are."""
    low = np.arange(40 << 20, dtype=np.uint64).astype(np.uint8).reshape(40, 1024, 1024)
    fields = {"spaces": {"k": {"low": low, "high": low + np.uint8(1), "small": np.arange(4), "t": (low[0, 0, :3],)}}}
    own = np.arange(6, dtype=np.float32)
    frames = to_wire(encode(Op.RESULT, fields, [own]))
    assert len(frames[0]) < 1 << 20
    header, arrays = decode(frames)
    assert len(arrays) == 1
    np.testing.assert_array_equal(arrays[0], own)
    got = header["spaces"]["k"]
    np.testing.assert_array_equal(got["low"], low)
    np.testing.assert_array_equal(got["high"], low + np.uint8(1))
    np.testing.assert_array_equal(got["small"], np.arange(4))
    np.testing.assert_array_equal(got["t"][0], low[0, 0, :3])
    assert Key.SPILLED not in header


def _spilling(fields: dict[str, Any], refs: list[int], spilled: Any, arrays: int = 1) -> list[bytes]:
    """A message whose header refers to spilled arrays ``refs`` and says it spilled ``spilled``."""
    header_fields = {"x": [msgpack.ExtType(6, msgpack.packb(i)) for i in refs], **fields}
    if spilled is not None:
        header_fields[Key.SPILLED] = spilled
    return to_wire(encode(Op.RESULT, header_fields, [np.zeros(3)] * arrays))


@pytest.mark.parametrize(
    ("refs", "spilled", "arrays", "says"),
    [
        ([0], None, 1, "refers to arrays of the message but says it moved none"),
        ([1], 1, 1, "refers to moved array 1 of 1"),
        ([0], 2, 1, "says it moved 2 of its 1 arrays"),
        ([0], 0, 1, "says it moved 0 of its 1 arrays"),
        ([0], "1", 1, "says it moved '1' of its 1 arrays"),
    ],
)
def test_a_malformed_reference_to_a_moved_array_is_a_protocol_error(
    refs: list[int], spilled: Any, arrays: int, says: str
) -> None:
    with pytest.raises(ProtocolError, match=says):
        decode(_spilling({}, refs, spilled, arrays))
