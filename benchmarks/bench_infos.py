"""What a batch of infos costs on its way from the envs to the caller, next to what gymnasium pays for it.

For each kind of info (Ant-v5's own, when mujoco imports; Atari-like counters; an LLM env's mix of numbers and
text) and batch size, three ways to turn B envs' info dicts into the batched ``info`` a caller gets, timed in
one run on the same dicts (the fastest of short timings taken in turn for ``--seconds``):

- ``gymnasium``: ``VectorEnv._add_info`` row by row, what ``SyncVectorEnv`` does each step (no wire at all);
- ``header``: aioenv's path before protocol 5, every column a msgpack value inside the reply's header, then
  ``merge_infos`` (what the coordinator did with a reply taken whole);
- ``arrays``: aioenv's path now: numeric columns among the reply's raw arrays
  (:mod:`aioenv.wire.info_wire`), then ``whole_info``;
- ``two replies``: the same rows from two workers, half each, as a lock-step ``step()`` of a pool with two
  workers gets them: both replies encoded and decoded, then ``merge_infos``.

Both aioenv paths batch (worker), encode, decode from bytes and build ``info`` (coordinator); the script checks
that they give gymnasium's ``info``. Run from the repo root::

    .venv/bin/python benchmarks/bench_infos.py            # about 20 s
    .venv/bin/python benchmarks/bench_infos.py --quick --out /tmp/infos.json

Writes ``benchmarks/results/infos.json`` (or ``--out``) and prints a table of µs per batch.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aioenv.wire.info_wire import binfo_of, put_binfo  # noqa: E402
from aioenv.wire.infos import batch_infos, merge_infos, whole_info  # noqa: E402
from aioenv.wire.protocol import Key, Op, decode, encode  # noqa: E402

Infos = list[dict[str, Any]]


class _Vector(VectorEnv):  # type: ignore[misc]
    """The smallest VectorEnv that runs gymnasium's own ``_add_info``."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def ant_infos(rows: int) -> Infos | str:
    """Ant-v5's infos of ``rows`` steps, or why there are none (mujoco missing)."""
    try:
        env = gym.make("Ant-v5")
    except Exception as exc:  # noqa: BLE001 - gymnasium raises DependencyNotInstalled and others
        return f"skipped: Ant-v5 unavailable ({type(exc).__name__})"
    env.reset(seed=0)
    infos = [env.step(env.action_space.sample())[4] for _ in range(rows)]
    env.close()
    return infos


def atari_infos(rows: int) -> Infos:
    """The counters an ALE env returns each step."""
    return [{"lives": 3, "episode_frame_number": 4 * i, "frame_number": 400 + 4 * i} for i in range(rows)]


def llm_infos(rows: int) -> Infos:
    """An LLM env's step: numbers and a string."""
    return [{"tokens": 17 + i, "latency": 0.02 * i, "finish_reason": "stop"} for i in range(rows)]


KINDS: dict[str, Callable[[int], Infos | str]] = {"ant": ant_infos, "atari": atari_infos, "llm": llm_infos}


def gymnasium_path(infos: Infos) -> dict[str, Any]:
    """SyncVectorEnv's batching: one ``_add_info`` per env."""
    vector, out = _Vector(len(infos)), {}
    for row, info in enumerate(infos):
        out = vector._add_info(out, info, row)
    return out


def _obs(rows: int) -> list[np.ndarray]:
    return [np.zeros(rows), np.zeros(rows, np.bool_), np.zeros(rows, np.bool_)]


def header_path(infos: Infos) -> dict[str, Any]:
    """Protocol 4: the batched info inside the header, then ``merge_infos``."""
    rows = len(infos)
    fields = {Key.ID: 1, Key.EXTRAS: [0, 1, 2], Key.BATCHED_INFO: batch_infos(infos, rows)}
    frames = [bytes(frame) for frame in encode(Op.RESULT, fields, _obs(rows))]
    header, _ = decode(frames)
    return merge_infos([(header[Key.BATCHED_INFO], np.arange(rows))], rows)


def _reply(infos: Infos) -> tuple[dict[str, Any], list[np.ndarray]]:
    """One worker's reply of ``infos`` (protocol 5: numeric columns as raw arrays), encoded and decoded from
    bytes."""
    rows = len(infos)
    arrays: list[Any] = _obs(rows)
    fields: dict[str, Any] = {Key.ID: 1, Key.EXTRAS: [0, 1, 2]}
    put_binfo(fields, batch_infos(infos, rows), arrays)
    return decode([bytes(frame) for frame in encode(Op.RESULT, fields, arrays)])


def arrays_path(infos: Infos) -> dict[str, Any]:
    """Protocol 5: numeric columns as raw arrays, then ``whole_info``."""
    return whole_info(binfo_of(*_reply(infos)), len(infos))


def two_replies_path(infos: Infos) -> dict[str, Any]:
    """A lock-step ``step()`` over two workers: each batches and encodes its half of the rows, the coordinator
    decodes both (the later half first: replies come as they finish) and merges them with ``merge_infos``."""
    rows = len(infos)
    half = rows // 2
    later, first = _reply(infos[half:]), _reply(infos[:half])
    parts = [(binfo_of(*later), np.arange(half, rows)), (binfo_of(*first), np.arange(half))]
    return merge_infos(parts, rows)


PATHS: dict[str, Callable[[Infos], dict[str, Any]]] = {
    "gymnasium": gymnasium_path,
    "header": header_path,
    "arrays": arrays_path,
    "two replies": two_replies_path,
}


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal batched infos: keys in order, values and dtypes."""
    if list(a) != list(b):
        return False
    for key in a:
        x, y = np.asarray(a[key]), np.asarray(b[key])
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if not all(u == v for u, v in zip(x.ravel(), y.ravel(), strict=True)):
            return False
    return True


def best_us(fns: dict[str, Callable[[], object]], seconds: float) -> dict[str, float]:
    """µs per call of each of ``fns``: the fastest of many short timings (~10 ms of calls each), taken in
    turn (one of each, then again, for ``seconds`` in all) so that every function sees the same moments of
    the machine; the minimum, as ``timeit`` takes it: a slow moment lengthens a timing, never shortens one."""
    numbers = {}
    for name, fn in fns.items():
        start = time.perf_counter()
        fn()
        numbers[name] = max(1, int(0.01 / max(time.perf_counter() - start, 1e-7)))
    best = dict.fromkeys(fns, float("inf"))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for name, fn in fns.items():
            number = numbers[name]
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / number)
    return {name: value * 1e6 for name, value in best.items()}


def run(kinds: list[str], sizes: list[int], seconds: float) -> dict[str, Any]:
    """Every path on every (kind, size): ``{kind: {rows: {path: µs, ...} or "skipped: ..."}}``."""
    results: dict[str, Any] = {}
    for kind in kinds:
        results[kind] = {}
        for rows in sizes:
            infos = KINDS[kind](rows)
            if isinstance(infos, str):
                results[kind][rows] = infos
                continue
            expected = gymnasium_path(infos)
            for name, path in PATHS.items():
                if not same(path(infos), expected):
                    raise AssertionError(f"the {name} path's info differs from gymnasium's for {kind} x {rows}")
            calls = {name: functools.partial(path, infos) for name, path in PATHS.items()}
            cell = best_us(calls, seconds)
            cell["arrays/header"] = cell["arrays"] / cell["header"]
            cell["arrays/gymnasium"] = cell["arrays"] / cell["gymnasium"]
            results[kind][rows] = cell
            print(_row(kind, rows, cell), flush=True)
    return results


def _row(kind: str, rows: int, cell: dict[str, float]) -> str:
    return (
        f"| {kind} | {rows} | {cell['gymnasium']:.1f} | {cell['header']:.1f} | {cell['arrays']:.1f} "
        f"| {cell['arrays/header']:.2f}x | {cell['arrays/gymnasium']:.2f}x | {cell['two replies']:.1f} |"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run (~2 s)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per cell (default 1.5, --quick 0.1)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "infos.json", help="JSON path")
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 0.1 if args.quick else 1.5
    if args.seconds <= 0:
        parser.error(f"--seconds must be > 0, got {args.seconds}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [16] if args.quick else [16, 64, 256]
    print(
        "| infos | rows | gymnasium µs | header (protocol 4) µs | arrays (protocol 5) µs "
        "| arrays / header | arrays / gymnasium | two replies (half the rows each), merged µs |"
    )
    print("| --- | --: | --: | --: | --: | --: | --: | --: |")
    results = run(list(KINDS), sizes, args.seconds)
    for kind, cells in results.items():
        for rows, cell in cells.items():
            if isinstance(cell, str):
                print(f"| {kind} | {rows} | {cell} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"argv": sys.argv[1:], "seconds": args.seconds, "results": results}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
