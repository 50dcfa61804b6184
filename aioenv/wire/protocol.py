"""Wire format shared by the coordinator, workers and clients.

A message is a list of ZeroMQ frames ``[header, *arrays]``:

- ``header`` is msgpack: ``{"v": PROTOCOL_VERSION, "op": str, "id": int, ...,
  "a": [[dtype, shape, frame, offset], ...], "b": bytes}``.
  ``"a"`` describes the numeric arrays the message carries: array ``i`` is the raw C-contiguous
  bytes at ``offset`` in frame ``frame``; frame 0 means the header's own ``"b"`` blob.
- arrays under 64 KiB travel together in ``"b"`` (8-byte aligned); a larger array gets a frame
  of its own and is sent zero-copy. Each frame costs socket calls whatever its size, so a
  typical step message is a single frame.

Values inside the header (infos, call results, space descriptions) use msgpack
with extension types, so numpy values keep their dtype and tuples stay
tuples: ``1`` ndarray (``[dtype, shape, bytes]``; object arrays as a list of
items), ``2`` tuple, ``3`` numpy scalar (``[dtype, bytes]``), ``4`` a gymnasium
``GraphInstance`` (``[nodes, edges, edge_links]``). A value msgpack cannot describe
is refused with a ``TypeError`` that names its type. One kind of value is pickled: a
:class:`Pickled` wrapper (a user-defined space, or a value of one), carried with
cloudpickle (``5``) only between a pool and the worker processes it started itself,
over their private pipe (the trust ``multiprocessing`` gives its children):
``encode(..., trusted=True)`` or a worker that called :func:`trust_parent_pipe`.
Only ``decode(..., trusted=True)`` (or such a worker) unpickles it, and gives back the
wrapped value itself. Bytes from a network socket are never unpickled: an untrusted
decode refuses extension ``5`` with a ProtocolError.

Batched observations/actions travel as "leaves" (see :mod:`aioenv.wire.spaces`): a
numeric leaf is an array frame (its header entry is the frame index), an object
leaf (text, or the values of a Graph, Sequence, OneOf or user-defined space) is a
list of its rows' values inside the header.

Arrays decoded from frames are read-only views of the received buffers; the
coordinator copies them once into the arrays it hands to users.

A header that would pass :data:`SPILL_HEADER_BYTES` (values holding large arrays: a big
space's per-element bounds) is encoded again with each array of its values of at least
:data:`BLOB_LIMIT` bytes carried as one of the message's arrays instead, after its own:
``"s"`` says how many, and extension ``6`` (the index among them) marks each one's place.
:func:`decode` puts them back, so callers never see the difference.
"""

from __future__ import annotations

import functools
import math
import pickle
import re
import threading
from collections.abc import Sequence
from typing import Any

import cloudpickle
import msgpack
import numpy as np
from gymnasium.spaces import GraphInstance

from aioenv.errors import ProtocolError
from aioenv.wire.version import PROTOCOL_VERSION

__all__ = [
    "BLOB_LIMIT",
    "MAX_HEADER_BYTES",
    "SPILL_HEADER_BYTES",
    "PROTOCOL_VERSION",
    "Key",
    "Local",
    "Op",
    "Pickled",
    "decode",
    "encode",
    "leaves_from_wire",
    "leaves_to_wire",
    "local",
    "pack",
    "pickle_allowed",
    "trust_parent_pipe",
    "unpack",
]

#: Arrays smaller than this travel together in one frame; larger ones get a frame each (zero-copy).
BLOB_LIMIT = 65536
#: Refuse headers larger than this (a guard against garbage or hostile peers).
MAX_HEADER_BYTES = 64 * 1024 * 1024

_EXT_NDARRAY = 1
_EXT_TUPLE = 2
_EXT_SCALAR = 3
_EXT_GRAPH = 4
_EXT_PICKLED = 5
_EXT_MOVED = 6  # an array of a header value, carried as one of the message's arrays (see encode)
#: A header larger than this is encoded again with its values' large arrays moved out to frames (see encode).
SPILL_HEADER_BYTES = 1 << 20
_NUMERIC_KINDS = frozenset("biufc")


class Op:
    """Message operation names (the header's ``"op"``)."""

    HELLO = "hello"  # worker -> coordinator: {"name", "pid", "executor", "capacity"}
    MAKE = "make"  # coordinator -> worker: {"envs": [[env_id, source_key]], "sources": {...}, "autoreset"}
    STEP = "step"  # coordinator -> worker: {"env": [ids], "act": leaves}
    RESET = "reset"  # coordinator -> worker: {"env": [ids], "seed": [..], "opt": dict|None}
    CALL = "call"  # coordinator -> worker: {"env": [ids], "kind": call|get|set, "name", "args", "kw", "values"}
    SLAB = "slab"  # coordinator -> local inline worker: {"slab": layout} map the pool's shared rows (transport.slab)
    PROBE = "probe"  # pool -> a local worker of its own: {"sources": source, "seed"} time one env (core.costs)
    CANCEL = "cancel"  # coordinator -> worker: {"env": [ids], "ended": [ids]} give up their requests, replace them
    CLOSE = "close"  # coordinator -> worker: close all envs and exit (server: close the client's pool)
    RESULT = "result"  # reply to any request with the same "id"; rows of STEP/RESET may come in several:
    # from a thread/async worker with "multi" ([[id, [rows]], ...]), from a server with "parts" (aioenv.core.relay)
    ERROR = "error"  # either way: the request failed as a whole ({"error": to_wire(...)})
    PING = "ping"
    PONG = "pong"
    # client <-> server (aioenv serve)
    OPEN = "open"  # client -> server: {"env": name, "n": num_envs, "kw": env_kwargs, "opt": pool options, "client"}
    EVENT = "event"  # server -> client: {"ev": "remade", "env": [ids]} (envs re-made after a crash or deadline)
    STATUS = "status"  # anyone -> server: the server's state (sessions, envs, limits)
    # worker host (aioenv worker) <-> server's worker port, see aioenv.server.fleet
    JOIN = "join"  # host -> server: {"name", "host", "pid", "executor", "capacity"}
    SPAWN = "spawn"  # server -> host: {"name", "executor"} start a worker process
    STARTED = "started"  # host -> server: {"name", "pid"}
    EXITED = "exited"  # host -> server: {"name", "code"} a worker process exited
    KILL = "kill"  # server -> host: {"name", "sig"} signal a worker process
    LEAVE = "leave"  # host -> server: the host is stopping


class Key:
    """Header field names, each defined once (the wire values are these strings).

    Top-level fields of a message header only: the maps nested in them keep field names of their own,
    documented where they are built (an OPEN's ``opt``, an env description in ``spaces``, an error
    description (:mod:`aioenv.wire.errors`), a STATUS reply, a slab layout).
    """

    # set by encode(): every message
    VERSION = "v"  # PROTOCOL_VERSION of the sender
    OP = "op"  # an Op name
    ARRAYS = "a"  # [[dtype, shape, frame, offset], ...]: the raw arrays (0: in BLOB, else a frame of its own)
    BLOB = "b"  # bytes: the small arrays, packed and 8-byte aligned
    SPILLED = "s"  # how many of the last arrays belong to header values (extension 6 marks where): see encode()
    # requests and replies
    ID = "id"  # request id; a reply carries its request's
    ENV = "env"  # [env ids] a request covers (STEP, RESET, CALL, CANCEL); OPEN, EVENT: see Op
    ACT = "act"  # STEP: the action leaves, as array references
    SHARED = "sh"  # STEP, RESET and their RESULT: 1 when the rows are in the pool's shared slab, not here
    SEED = "seed"  # RESET: one seed (or None) per env
    OPT = "opt"  # RESET: reset options (or None); OPEN: the pool's options
    KIND = "kind"  # CALL: call | get | set
    NAME = "name"  # CALL: the method or attribute; HELLO, JOIN, SPAWN, STARTED, EXITED, KILL: a process's name
    ARGS = "args"  # CALL: positional arguments
    KW = "kw"  # CALL: keyword arguments; OPEN: env_kwargs
    VALUES = "values"  # CALL (set): one value per env; RESULT of a CALL: one result per env
    ENVS = "envs"  # MAKE: [[env id, source key], ...]
    SOURCES = "sources"  # MAKE: source key -> how to make the env
    AUTORESET = "autoreset"  # MAKE: the autoreset mode's name
    SLAB = "slab"  # MAKE, SLAB: the layout of the pool's shared rows
    DONE_PIPE = "dp"  # MAKE, SLAB: [worker slot, token] of a worker started with the pool's done pipe (wire.lane)
    ENDED = "ended"  # CANCEL: env ids to start as after a truncation
    REMADE = "remade"  # MAKE of envs whose worker died: {"why": words, "worker": its name, "code": exit code}
    OBS = "obs"  # RESULT: observation leaves, as array references
    EXTRAS = "x"  # RESULT of a STEP: [reward, terminated, truncated] as array references
    INFO = "info"  # RESULT: one info dict per row (or one env's)
    BATCHED_INFO = "binfo"  # RESULT: the rows' infos batched column-wise
    INFO_COLUMNS = "bcol"  # RESULT: {key: array index} of binfo's numeric columns (aioenv.wire.info_wire)
    ERRORS = "err"  # RESULT: row -> error description
    INFO_LIST = "ilist"  # STEP: answer with one info dict per row
    MULTI = "multi"  # RESULT of a thread/async worker: [[request id, [rows]], ...]
    ROWS_KIND = "k"  # RESULT with MULTI or BLOCKS: step | reset
    PARTS = "parts"  # RESULT from a server: segments and blocks of rows (aioenv.core.relay)
    POS = "pos"  # a segment of PARTS: positions of its rows in the client's call
    BLOCKS = "blk"  # a block of PARTS: [[request id, positions, start], ...]
    ERROR = "error"  # ERROR: the error description of a request that failed as a whole
    SPACES = "spaces"  # RESULT of MAKE or OPEN: the envs' descriptions
    EVENT = "ev"  # EVENT: what happened ("remade", "closing", "dropped" with ERROR)
    MARK = "mk"  # a server's message to a client: a nonce the client acknowledges once it read it (aioenv.server.peers)
    ACK = "ack"  # a client's message to a server: the last mark it read (aioenv.server.peers)
    ACK_KEPT = "ackk"  # a client's message to a server: the last kept (odd) mark it read, when "ack" is not one
    TIMEOUT = "to"  # a request to a server: its deadline in seconds
    CLIENT = "client"  # OPEN: the client process's id
    NUM_ENVS = "n"  # OPEN: num_envs
    # processes and worker hosts
    PID = "pid"  # HELLO, JOIN, STARTED: a process id
    EXECUTOR = "executor"  # HELLO, JOIN, SPAWN: inline | thread | async
    CAPACITY = "capacity"  # JOIN: envs the host may run
    HOST = "host"  # JOIN: the host's name
    CODE = "code"  # EXITED: the exit code
    SIGNAL = "sig"  # KILL: the signal's name
    REJOIN = "rejoin"  # ERROR to a host that is not joined: join again
    RETRY = "retry"  # ERROR to a host whose name is taken: try again later
    BEAT = "beat"  # RESULT of OPEN or JOIN: seconds between the peer's PINGs the server asks (aioenv.wire.beat)


# ---------------------------------------------------------------- msgpack values


class _Trust(threading.local):
    """Whether this thread is encoding or decoding a message of a trusted pipe right now."""

    on = False


_TRUST = _Trust()


class _Moving(threading.local):
    """This thread's encode moving its header values' large arrays out (the list they go to), and its decode's
    count of references to such arrays met in a header."""

    arrays: list[np.ndarray] | None = None
    refs = 0


_MOVING = _Moving()


class _Moved:
    """The place of a moved array in a decoded header, until :func:`decode` puts the array there."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


_PROCESS_TRUST = [False]  # a worker that talks only to the pool that started it (trust_parent_pipe)


def trust_parent_pipe() -> None:
    """Carry :class:`Pickled` values pickled, both ways, for the rest of this process's life.

    Only a worker process started by a pool and talking to it alone, over the pipe it inherited
    (``python -m workers --fd N``), calls this: its only peer is the process that started it.
    """
    _PROCESS_TRUST[0] = True


class Pickled:
    """A value that may only travel pickled (a user-defined space, or one of its values): see the module
    docstring. Encoded where pickle is trusted, refused with a ``TypeError`` elsewhere; decoded as
    ``value`` itself."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Pickled({self.value!r})"


def _trusted() -> bool:
    return _PROCESS_TRUST[0] or _TRUST.on


def pickle_allowed() -> bool:
    """Whether this process carries :class:`Pickled` values pickled (see :func:`trust_parent_pipe`)."""
    return _PROCESS_TRUST[0]


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):  # the most common by far: tested first
        if obj.dtype.kind in _NUMERIC_KINDS:
            if obj.nbytes >= BLOB_LIMIT and (moving := _MOVING.arrays) is not None:
                moving.append(obj)
                return msgpack.ExtType(_EXT_MOVED, _PACK(len(moving) - 1))
            # tobytes() is C-order whatever the layout; ascontiguousarray would turn 0-d into (1,)
            return msgpack.ExtType(_EXT_NDARRAY, _PACK([obj.dtype.str, list(obj.shape), obj.tobytes()]))
        if obj.dtype.kind in "OUS":  # object and str arrays: their items, each packed as a value of its own
            return msgpack.ExtType(_EXT_NDARRAY, _PACK(["|O", list(obj.shape), obj.ravel().tolist()]))
        raise TypeError(f"cannot send a numpy array of dtype {obj.dtype} (only numeric, str or object arrays)")
    if isinstance(obj, tuple):
        if isinstance(obj, GraphInstance):  # a NamedTuple that must come back as one
            return msgpack.ExtType(_EXT_GRAPH, _PACK([obj.nodes, obj.edges, obj.edge_links]))
        return msgpack.ExtType(_EXT_TUPLE, _PACK(list(obj)))
    if isinstance(obj, np.generic):
        if obj.dtype.kind in _NUMERIC_KINDS:
            return msgpack.ExtType(_EXT_SCALAR, _PACK([obj.dtype.str, obj.tobytes()]))
        if isinstance(obj, np.str_):
            return str(obj)
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, (list, set, frozenset)):
        return list(obj)
    if type(obj) is Pickled:
        return _pickled(obj.value)
    raise TypeError(
        f"cannot send a value of type {type(obj).__module__}.{type(obj).__qualname__}: "
        "only None, bool, int, float, str, bytes, list, tuple, dict and numpy arrays/scalars cross the wire"
    )


def _pickled(value: Any) -> msgpack.ExtType:
    if not _trusted():
        raise TypeError(
            f"cannot send a value of type {type(value).__module__}.{type(value).__qualname__} to this peer: "
            "it travels only pickled, between a pool and the worker processes it started itself"
        )
    return msgpack.ExtType(_EXT_PICKLED, cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


_DTYPES: dict[str, np.dtype[Any]] = {}  # valid numeric dtype codes seen so far (a few dozen at most)


#: What a dtype code from a peer may look like: byte order, numeric kind, item size (``numpy.dtype.str``).
_DTYPE_CODE = re.compile(r"[<>|=][biufc][0-9]{1,2}")


def _check_dtype(code: Any) -> np.dtype[Any]:
    dtype = _DTYPES.get(code) if type(code) is str else None
    if dtype is not None:
        return dtype
    if not isinstance(code, str):
        raise ValueError(f"dtype must be a string, got {type(code).__name__}")
    if not _DTYPE_CODE.fullmatch(code):  # a peer's string never reaches numpy's own parser (comma strings, ...)
        raise ValueError(f"dtype must be a numeric dtype code such as '<f8', got {code[:24]!r}")
    try:
        dtype = np.dtype(code)
    except TypeError as exc:  # e.g. '<f3'
        raise ValueError(f"dtype {code!r} is not a dtype") from exc
    if dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f"dtype {code!r} is not numeric")
    if len(_DTYPES) < 256:  # codes come from peers: bound the cache
        _DTYPES[code] = dtype
    return dtype


def _check_shape(shape: Any) -> tuple[int, ...]:
    if type(shape) is list:
        for d in shape:
            if type(d) is not int or d < 0:
                break
        else:
            return tuple(shape)
    raise ValueError(f"shape must be a list of non-negative ints, got {shape!r}")


#: Checked array specs by ``(dtype code, shape)``: ``(dtype, shape or None when 1-D, count, nbytes)``.
_SPECS: dict[tuple[Any, ...], tuple[np.dtype[Any], tuple[int, ...] | None, int, int]] = {}


def _array_spec(code: Any, shape: Any) -> tuple[np.dtype[Any], tuple[int, ...] | None, int, int]:
    """Check an array spec's dtype code and shape (``ValueError``); remember a valid one."""
    dtype = _check_dtype(code)
    shape_t = _check_shape(shape)
    count = math.prod(shape_t)
    spec = (dtype, None if shape_t == (count,) else shape_t, count, count * dtype.itemsize)
    if len(_SPECS) < 1024:  # specs come from peers: bound the cache
        _SPECS[(code, shape_t)] = spec
    return spec


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_NDARRAY:
        dtype_code, shape, payload = _UNPACK(data)
        shape_t = _check_shape(shape)
        if dtype_code == "|O":
            arr = np.empty(len(payload), dtype=object)
            arr[:] = payload
            return arr.reshape(shape_t)
        arr = np.frombuffer(payload, dtype=_check_dtype(dtype_code)).reshape(shape_t)
        return arr.copy()
    if code == _EXT_TUPLE:
        return tuple(_UNPACK(data))
    if code == _EXT_SCALAR:
        dtype_code, payload = _UNPACK(data)
        return np.frombuffer(payload, dtype=_check_dtype(dtype_code))[0]
    if code == _EXT_GRAPH:
        return _graph(_UNPACK(data))
    if code == _EXT_MOVED:
        index = _UNPACK(data)
        if type(index) is not int or index < 0:
            raise ValueError(f"a moved array's index must be an int >= 0, got {index!r}")
        _MOVING.refs += 1
        return _Moved(index)
    if code == _EXT_PICKLED:
        if not _trusted():
            raise ValueError("a pickled value arrived from a peer that is not trusted with pickle (never unpickled)")
        return pickle.loads(data)  # only from a worker this process started, over its own pipe
    raise ValueError(f"unknown msgpack extension type {code}")


#: Idle packers, reused: ``msgpack.packb`` makes a Packer with a 256 KiB buffer per call, and a value
#: with numpy arrays packs each one from ``_default``, so packers are alive at once and their buffers
#: come from mmap: 20 us per array instead of 3. A list is a stack that needs no lock (``pop``/``append``
#: are atomic), and a nested call takes another packer.
_PACKERS: list[Any] = []
_PACKER_KEEP_BYTES = 1 << 20  # a packer that produced more is dropped, not kept with its grown buffer


def _PACK(obj: Any) -> bytes:
    try:
        packer = _PACKERS.pop()
    except IndexError:
        packer = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True, autoreset=True)
    data: bytes = packer.pack(obj)  # on an error the packer is dropped, never reused half-filled
    if len(data) <= _PACKER_KEEP_BYTES and len(_PACKERS) < 16:
        _PACKERS.append(packer)
    return data


#: ``_UNPACK(data)``: msgpack with the extensions above (a partial: no Python frame of its own on every message).
_UNPACK = functools.partial(msgpack.unpackb, ext_hook=_ext_hook, strict_map_key=False, raw=False, use_list=True)


def pack(obj: Any) -> bytes:
    """Serialise a value with msgpack and aioenv's numpy/tuple extensions (never pickle)."""
    return _PACK(obj)


def unpack(data: bytes | memoryview) -> Any:
    """Inverse of :func:`pack`. Malformed bytes raise :class:`ProtocolError`."""
    try:
        return _UNPACK(data)
    except Exception as exc:
        raise ProtocolError(f"malformed msgpack value: {exc}") from exc


# ---------------------------------------------------------------- messages


def encode(op: str, fields: dict[str, Any], arrays: Sequence[np.ndarray] = (), *, trusted: bool = False) -> list[Any]:
    """Build the frames of one message (a header past :data:`SPILL_HEADER_BYTES` has its values' large arrays
    moved out to frames: see the module docstring).

    Args:
        op: an :class:`Op` name.
        fields: header fields (msgpack values); ``"v"``, ``"op"``, ``"a"``, ``"b"`` and ``"s"`` are set here.
        arrays: numeric arrays to carry raw. Arrays under :data:`BLOB_LIMIT` bytes are packed
            together into the header's ``"b"`` blob (every frame costs socket calls whatever its
            size); larger ones get a frame each and are sent zero-copy, so they must be fresh
            arrays that nobody mutates afterwards.
        trusted: the message goes to a worker this process started, over its own pipe: its
            :class:`Pickled` values travel pickled instead of raising ``TypeError``.

    Returns:
        ``[header_bytes, *array_frames]`` ready for ``send_multipart``.
    """
    header = dict(fields)
    header[Key.VERSION] = PROTOCOL_VERSION
    header[Key.OP] = op
    frames: list[Any] = [b""]
    if arrays:
        specs: list[list[Any]] = []
        blob: list[bytes] = []
        offset = 0
        for arr in arrays:
            code = _DTYPE_CODES.get(arr.dtype)
            if code is None:
                code = _dtype_code(arr.dtype)
            nbytes = arr.nbytes
            if nbytes < BLOB_LIMIT:
                specs.append([code, list(arr.shape), 0, offset])
                blob.append(arr.tobytes())  # C order whatever the layout
                pad = -nbytes % 8  # keep every array 8-byte aligned in the blob
                if pad:
                    blob.append(_PADDING[pad])
                offset += nbytes + pad
            else:
                if not arr.flags.c_contiguous:
                    arr = np.ascontiguousarray(arr).reshape(arr.shape)  # keep 0-d arrays 0-d
                specs.append([code, list(arr.shape), len(frames), 0])
                frames.append(arr)
        if blob:
            header[Key.BLOB] = b"".join(blob)
        header[Key.ARRAYS] = specs
    if trusted:  # Pickled values may travel pickled (see _default)
        _TRUST.on = True
        try:
            frames[0] = _PACK(header)
        finally:
            _TRUST.on = False
    else:
        frames[0] = _PACK(header)
    if len(frames[0]) > SPILL_HEADER_BYTES and _MOVING.arrays is None:
        return _spilled(op, fields, arrays, trusted, frames)
    return frames


def _spilled(
    op: str, fields: dict[str, Any], arrays: Sequence[np.ndarray], trusted: bool, frames: list[Any]
) -> list[Any]:
    """The frames of a message whose header came out past :data:`SPILL_HEADER_BYTES` (``frames``): again, with its
    values' arrays of at least :data:`BLOB_LIMIT` bytes moved out to the message's arrays (``frames`` when it has
    none)."""
    moved: list[np.ndarray] = []
    _MOVING.arrays = moved
    try:
        encode(op, fields, arrays, trusted=trusted)  # finds the arrays to move (its header is not the one sent)
        found = list(moved)
        if not found:
            return frames
        moved.clear()  # the same arrays are met again, in the same order: the same indices
        return encode(op, {**fields, Key.SPILLED: len(found)}, [*arrays, *found], trusted=trusted)
    finally:
        _MOVING.arrays = None


class Local:
    """The one frame of a message that never leaves its process: an in-process worker's request or reply
    (:mod:`workers.inproc`, :mod:`workers.inproc_concurrent`), its header as the dict :func:`decode` would
    return and its numeric arrays as they are. Only messages whose fields are plain ids and flags go this way
    (a step's request over shared rows or with numeric actions, its reply without infos or errors): what
    could fail to cross a wire is still encoded, so an in-process pool refuses what any other refuses. The
    arrays are the message's own (a sender copies what it does not own). It is no bytes: a socket cannot
    carry it."""

    __slots__ = ("arrays", "header")

    def __init__(self, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
        self.header = header
        self.arrays = arrays


def local(op: str, fields: dict[str, Any], arrays: Sequence[np.ndarray] = ()) -> list[Any]:
    """The frames of a message passed within this process (see :class:`Local`): no serialisation at all. The
    arrays become read-only, as a decoded message's are (a receiver tells its own fresh copies by that)."""
    header = dict(fields)
    header[Key.VERSION] = PROTOCOL_VERSION
    header[Key.OP] = op
    for array in arrays:
        array.flags.writeable = False
    return [Local(header, list(arrays))]


#: Wire codes of the numeric dtypes sent so far (``dtype.str`` builds a new string each time).
_DTYPE_CODES: dict[np.dtype[Any], str] = {}
_PADDING = [b"\0" * k for k in range(8)]


def _dtype_code(dtype: np.dtype[Any]) -> str:
    if dtype.kind not in _NUMERIC_KINDS:
        raise TypeError(f"cannot send a numpy array of dtype {dtype} as a raw frame (numeric only)")
    if len(_DTYPE_CODES) < 256:
        _DTYPE_CODES[dtype] = dtype.str
    return dtype.str


def decode(frames: Sequence[Any], *, trusted: bool = False) -> tuple[dict[str, Any], list[np.ndarray]]:
    """Parse the frames of one message into ``(header, arrays)``.

    Frames may be ``bytes`` or ``zmq.Frame``. Arrays are read-only views of the frames. ``trusted``: the
    frames came from a worker this process started, over its own pipe (pickled values are unpickled).

    Raises:
        ProtocolError: the frames are not a well-formed message of this protocol version
            (the message names what was expected and what arrived).
    """
    if not frames:
        raise ProtocolError("empty message: expected [header, *arrays]")
    first = frames[0]
    if type(first) is Local:  # from this process (see Local): nothing to parse
        return first.header, first.arrays
    if not (type(first) is bytes or (type(first) is memoryview and first.readonly)):  # a pipe's: read-only already
        first = _buffer(first)
    if len(first) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(first)} bytes exceeds the limit of {MAX_HEADER_BYTES}")
    _TRUST.on = trusted
    _MOVING.refs = 0
    try:
        header = _UNPACK(first)
    except Exception as exc:
        raise ProtocolError(f"malformed header: not a msgpack map ({exc})") from exc
    finally:
        _TRUST.on = False
    if not isinstance(header, dict):
        raise ProtocolError(f"malformed header: expected a msgpack map, got {type(header).__name__}")
    if _MOVING.refs and Key.SPILLED not in header:
        raise ProtocolError("malformed header: it refers to arrays of the message but says it moved none")
    version = header.get(Key.VERSION)
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version mismatch: this side speaks version {PROTOCOL_VERSION}, the peer sent {version!r}"
        )
    if not isinstance(header.get(Key.OP), str):
        raise ProtocolError(f"malformed header: 'op' must be a string, got {header.get(Key.OP)!r}")
    specs = header.get(Key.ARRAYS)
    if specs is None:  # no arrays: the common case of control messages
        if len(frames) > 1:
            raise ProtocolError(
                f"malformed message: {len(frames) - 1} frames follow the header but it describes no arrays"
            )
        arrays: list[np.ndarray] = []
    else:
        if type(specs) is not list:
            raise ProtocolError(f"malformed header: 'a' must be a list of array specs, got {type(specs).__name__}")
        blob = header.get(Key.BLOB, b"")
        if type(blob) is not bytes:
            raise ProtocolError(f"malformed header: 'b' must be bytes, got {type(blob).__name__}")
        buffers: list[Any] = [blob] if len(frames) == 1 else [blob, *(_buffer(f) for f in frames[1:])]
        arrays = _decode_arrays(specs, buffers)
    if Key.SPILLED in header:
        return _moved_back(header, arrays)
    return header, arrays


def _moved_back(header: dict[str, Any], arrays: list[np.ndarray]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """``(header, arrays)`` of a message whose header values' large arrays were moved out (see :func:`encode`):
    each put back in its place; the message's own arrays."""
    count = header.pop(Key.SPILLED)
    if type(count) is not int or not 0 < count <= len(arrays):
        raise ProtocolError(f"malformed header: it says it moved {count!r} of its {len(arrays)} arrays")
    moved, own = arrays[len(arrays) - count :], arrays[: len(arrays) - count]

    def back(value: Any) -> Any:
        if type(value) is _Moved:
            if value.index >= count:
                raise ProtocolError(f"malformed header: it refers to moved array {value.index} of {count}")
            return moved[value.index]
        if type(value) is dict:
            return {key: back(item) for key, item in value.items()}
        if type(value) is list:
            return [back(item) for item in value]
        if type(value) is tuple:
            return tuple(back(item) for item in value)
        return value

    return back(header), own


def _decode_arrays(specs: list[Any], buffers: list[Any]) -> list[np.ndarray]:
    """The arrays ``specs`` describe, as views of ``buffers`` (0: the header's blob, then the frames).

    Every frame after the header must hold at least one array: a frame nothing describes is a malformed
    message, not something to ignore. This loop runs once per array of every message, so the common
    spec (a dtype and shape seen before) is looked up in a cache instead of being checked again.
    """
    nframes = len(buffers)
    arrays: list[np.ndarray] = []
    frombuffer, spec_of = np.frombuffer, _cached_spec  # local names: this loop is hot
    described = 0  # bit i: frame i holds an array
    i = 0
    try:
        for i, spec in enumerate(specs):  # noqa: B007 - i names the bad spec below
            dtype_code, shape, frame, offset = spec
            dtype, shape_t, count, nbytes = spec_of(dtype_code, shape)
            if type(frame) is not int or not 0 <= frame < nframes:
                raise ValueError(f"frame index {frame!r} is not the header blob (0) or one of {nframes - 1} frames")
            buf = buffers[frame]
            if frame:
                described |= 1 << frame
            if type(offset) is not int or offset < 0 or offset + nbytes > len(buf):
                raise ValueError(
                    f"{dtype} {shape_t or (count,)} at offset {offset!r} overruns a frame of {len(buf)} bytes"
                )
            arr = frombuffer(buf, dtype, count, offset)
            arrays.append(arr if shape_t is None else arr.reshape(shape_t))
    except (ValueError, TypeError) as exc:
        raise ProtocolError(f"malformed array spec {i}: {exc}") from exc
    if nframes > 1 and described != (1 << nframes) - 2:
        stray = [f for f in range(1, nframes) if not described >> f & 1]
        raise ProtocolError(
            f"malformed message: {nframes - 1} frames follow the header but frame(s) {stray} "
            "are described by no array spec"
        )
    return arrays


def _cached_spec(dtype_code: Any, shape: Any) -> tuple[np.dtype[Any], tuple[int, ...] | None, int, int]:
    """:func:`_array_spec` of a spec, from the cache when this dtype and shape were seen before."""
    try:
        hit = _SPECS.get((dtype_code, tuple(shape))) if type(shape) is list else None
    except TypeError:  # unhashable parts: the full check says what is wrong
        hit = None
    if hit is None:
        return _array_spec(dtype_code, shape)
    for d in shape:  # 1.0 and True hash like 1: only ints may hit (a loop: cheaper than all() here)
        if type(d) is not int:
            return _array_spec(dtype_code, shape)
    return hit


def _graph(parts: Any) -> GraphInstance:
    """A GraphInstance from ``[nodes, edges, edge_links]`` (nodes and edges are whatever the graph's node and
    edge spaces batch to: arrays, or dicts and tuples of them; whether they fit a space is the space's to say)."""
    if type(parts) is not list or len(parts) != 3:
        raise ValueError("a graph must be [nodes, edges, edge_links]")
    nodes, edges, links = parts
    if nodes is None or not (links is None or isinstance(links, np.ndarray)):
        raise ValueError("a graph needs nodes, and its edge_links must be an array or nil")
    return GraphInstance(nodes, edges, links)


def _buffer(frame: Any) -> memoryview:
    buf = getattr(frame, "buffer", None)  # zmq.Frame
    view = buf if isinstance(buf, memoryview) else memoryview(frame)
    return view.toreadonly()


def leaves_to_wire(leaves: Sequence[np.ndarray], arrays: list[np.ndarray]) -> list[Any]:
    """Describe batched leaves for a header: numeric leaves are appended to ``arrays``
    (and described by their frame index), object leaves (text, Graph, Sequence, OneOf and
    user-defined values) travel inline as the list of their rows' values."""
    out: list[Any] = []
    for leaf in leaves:
        if leaf.dtype.kind == "O":
            out.append(leaf.tolist())
        else:
            out.append(len(arrays))
            arrays.append(leaf)
    return out


def leaves_from_wire(desc: Any, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Inverse of :func:`leaves_to_wire` (object leaves come back as object arrays of shape (B,))."""
    if not isinstance(desc, list):
        raise ProtocolError(f"malformed leaves: expected a list, got {type(desc).__name__}")
    out: list[np.ndarray] = []
    for item in desc:
        if isinstance(item, int) and 0 <= item < len(arrays):
            out.append(arrays[item])
        elif isinstance(item, list):
            # item by item (a row that is a tuple or list stays one object), at numpy's speed, not a Python loop's
            out.append(np.fromiter(item, dtype=object, count=len(item)))
        else:
            raise ProtocolError(f"malformed leaf {item!r}: expected a frame index or a list of row values")
    return out
