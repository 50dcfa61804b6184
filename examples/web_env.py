"""Envs that wait on a web service, hosted by the async executor: `python examples/web_env.py`.

Needs aiohttp: ``make extras`` (or ``.venv/bin/pip install -e ".[examples]"``).

The script starts a real HTTP service in this process (aiohttp, on 127.0.0.1 and an ephemeral
port): a toy website of numbered pages. ``GET /page?id=P&action=A`` follows link ``A`` of page
``P`` and answers, after a lognormal latency (tens of ms), with JSON: the new page id, four
features, a reward and whether the goal was reached. ``GET /page?id=P`` (no action) lands on a
page, as a reset does. A few clicks (``--hang-prob``) never come back in time: the handler sleeps
``--hang-seconds``.

:class:`WebEnv` is an :class:`aioenv.AsyncEnv` whose ``reset`` and ``step`` are that HTTP call
(one ``aiohttp.ClientSession`` per env, made lazily in the worker process, closed in ``close``).
64 of them run as coroutines in 2 worker processes (``executor="async"``) and a send/recv loop
drives them for ``--seconds`` (or ``--steps`` rows). With ``step_timeout`` and
``on_timeout="truncate"`` a hung click comes back as a truncated row with ``info["timeout"]``
True (the env is replaced and starts a new episode), so the loop never waits on it.

The ideal throughput is ``num_envs / mean latency`` steps/s: every row, autoreset steps included,
costs one request. Hung clicks hold their env for ``--step-timeout`` seconds each, so they lower the
fraction of ideal (the table shows the share of env time they took). ``--max-concurrency K`` caps
the requests the service sees at once (a rate limit); the ideal is then ``K / mean latency``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

try:
    import aiohttp
    from aiohttp import web
except ImportError as exc:  # pragma: no cover - depends on the install
    raise SystemExit(f"{__file__} needs aiohttp: run `make extras` (or pip install -e '.[examples]')") from exc

import aioenv

NUM_LINKS = 4  #: links per page: the action space is Discrete(NUM_LINKS)
NUM_FEATURES = 4  #: features per page: the observation is a Box of this many floats in [0, 1]


# ----------------------------------------------------------------------------- the web service


@dataclass
class SiteStats:
    """What the service did: answered requests and their latencies, and the requests it let hang."""

    latencies: list[float] = field(default_factory=list)
    hangs: int = 0

    @property
    def mean_latency(self) -> float:
        """Mean latency (seconds) of the answered requests."""
        return sum(self.latencies) / len(self.latencies) if self.latencies else math.nan


class ToySite:
    """The toy website: ``num_pages`` pages, ``NUM_LINKS`` links each, every 10th page a goal.

    Latency is lognormal with mean ``mean_latency`` seconds (``sigma`` of the underlying normal);
    with probability ``hang_prob`` a click (a request with an action) hangs ``hang_seconds``.
    """

    def __init__(
        self,
        *,
        num_pages: int = 1_000,
        mean_latency: float = 0.03,
        sigma: float = 0.5,
        hang_prob: float = 0.01,
        hang_seconds: float = 10.0,
        seed: int = 0,
    ) -> None:
        self.num_pages = num_pages
        self.mu = math.log(mean_latency) - sigma * sigma / 2  # so that the lognormal's mean is mean_latency
        self.sigma = sigma
        self.hang_prob = hang_prob
        self.hang_seconds = hang_seconds
        self.rng = random.Random(seed)
        self.stats = SiteStats()
        self.stopping = asyncio.Event()  # set at shutdown: hung handlers return at once

    def page(self, page_id: int) -> dict[str, Any]:
        """The JSON of page ``page_id``: its features (fixed per page), reward 1 on a goal page."""
        features = random.Random(page_id).random
        goal = page_id % 10 == 0
        return {
            "page": page_id,
            "features": [features() for _ in range(NUM_FEATURES)],
            "reward": float(goal),
            "goal": goal,
        }

    async def handle_page(self, request: web.Request) -> web.Response:
        """``GET /page?id=P[&action=A]``: page ``P`` itself, or where link ``A`` of page ``P`` leads."""
        try:
            page_id = int(request.query["id"]) % self.num_pages
            action = request.query.get("action")
            link = None if action is None else int(action)
        except (KeyError, ValueError):
            raise web.HTTPBadRequest(text="want /page?id=INT[&action=INT]") from None
        if link is not None and self.rng.random() < self.hang_prob:
            self.stats.hangs += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.hang_seconds)
            return web.json_response({"error": "hung"}, status=504)
        latency = self.rng.lognormvariate(self.mu, self.sigma)
        await asyncio.sleep(latency)
        self.stats.latencies.append(latency)
        target = page_id if link is None else (page_id * 31 + link * 7 + 1) % self.num_pages
        return web.json_response(self.page(target))


@contextlib.asynccontextmanager
async def serve(site: ToySite) -> AsyncIterator[str]:
    """Serve ``site`` on 127.0.0.1 and an ephemeral port; yields its base URL and cleans up on exit."""
    app = web.Application()
    app.router.add_get("/page", site.handle_page)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site_ = web.TCPSite(runner, "127.0.0.1", 0)
    await site_.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        site.stopping.set()
        await runner.cleanup()


# ----------------------------------------------------------------------------- the env


class WebEnv(aioenv.AsyncEnv[np.ndarray, np.int64]):
    """An env that browses the toy site: each ``reset``/``step`` is one HTTP request.

    Observation: the page's features, ``Box(0, 1, (4,), float32)``. Action: which link to follow,
    ``Discrete(4)``. Reward 1 on reaching a goal page (which terminates); episodes truncate after
    ``episode_steps`` clicks. The seed picks the start page.
    """

    observation_space = gym.spaces.Box(0.0, 1.0, (NUM_FEATURES,), np.float32)
    action_space = gym.spaces.Discrete(NUM_LINKS)

    def __init__(self, url: str, episode_steps: int = 5, num_pages: int = 1_000) -> None:
        self.url = url
        self.episode_steps = episode_steps
        self.num_pages = num_pages
        self.rng = np.random.default_rng()
        self.page = 0
        self.t = 0
        self._session: aiohttp.ClientSession | None = None

    async def _get(self, **query: int) -> dict[str, Any]:
        if self._session is None:  # made here, in the worker's event loop
            self._session = aiohttp.ClientSession(self.url, raise_for_status=True)
        async with self._session.get("/page", params=query) as response:
            data: dict[str, Any] = await response.json()
            return data

    def _obs(self, data: dict[str, Any]) -> np.ndarray:
        self.page = int(data["page"])
        return np.asarray(data["features"], dtype=np.float32)

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Land on a start page (random, from ``seed``)."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        data = await self._get(id=int(self.rng.integers(self.num_pages)))
        return self._obs(data), {"page": self.page}

    async def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Follow link ``action`` of the current page."""
        data = await self._get(id=self.page, action=int(action))
        self.t += 1
        obs = self._obs(data)
        return obs, float(data["reward"]), bool(data["goal"]), self.t >= self.episode_steps, {"page": self.page}

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None


# ----------------------------------------------------------------------------- the loop


@dataclass
class LoopReport:
    """What the send/recv loop saw."""

    steps: int = 0  #: rows received, the final collection included
    window_steps: int = 0  #: rows received within the timed window
    seconds: float = 0.0
    episodes: int = 0
    reward: float = 0.0
    timeouts: int = 0  #: rows that came back truncated with info["timeout"] True
    cpu: float = 0.0  #: CPU seconds of this process (service + coordinator) over the window


def count(report: LoopReport, rew: np.ndarray, term: np.ndarray, trunc: np.ndarray, info: dict[str, Any]) -> None:
    """Add one ``recv()``'s rows to ``report``."""
    report.steps += len(rew)
    report.reward += float(rew.sum())
    report.episodes += int((term | trunc).sum())
    if "timeout" in info:
        report.timeouts += int((info["timeout"] & info["_timeout"]).sum())


async def drive(pool: aioenv.Pool, *, seconds: float, max_steps: int | None, seed: int) -> LoopReport:
    """Random clicks through send/recv: every row that comes back is answered at once."""
    rng = np.random.default_rng(seed)
    _, info = await pool.reset()
    pool.send(rng.integers(NUM_LINKS, size=pool.num_envs), info["env_id"])
    report = LoopReport()
    start, cpu = time.perf_counter(), time.process_time()
    deadline = start + seconds
    while time.perf_counter() < deadline and (max_steps is None or report.steps < max_steps):
        _, rew, term, trunc, info = await pool.recv()
        count(report, rew, term, trunc, info)
        ids = info["env_id"]
        pool.send(rng.integers(NUM_LINKS, size=len(ids)), ids)
    report.seconds = time.perf_counter() - start
    report.window_steps = report.steps
    report.cpu = time.process_time() - cpu
    # every env has one step in flight: collect them (a hung one comes back within step_timeout)
    _, rew, term, trunc, info = await pool.recv(min_results=pool.num_envs, max_results=pool.num_envs)
    count(report, rew, term, trunc, info)
    return report


def table(rows: list[tuple[str, str]]) -> str:
    """Two aligned columns."""
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)


async def main(args: argparse.Namespace) -> None:
    """Start the service, host ``WebEnv`` on the async executor, drive it, print the table."""
    site = ToySite(
        mean_latency=args.latency_ms / 1000,
        hang_prob=args.hang_prob,
        hang_seconds=args.hang_seconds,
        seed=args.seed,
    )
    async with serve(site) as url:
        print(f"toy site at {url}; {args.num_envs} WebEnv on {args.num_workers} workers (executor='async')")
        async with aioenv.Pool(
            WebEnv,
            args.num_envs,
            executor="async",
            num_workers=args.num_workers,
            batch_size=args.batch_size,
            env_kwargs={"url": url, "episode_steps": args.episode_steps},
            seed=args.seed,
            step_timeout=args.step_timeout,
            reset_timeout=args.reset_timeout,  # explicit resets; autoresets run inside steps (step_timeout)
            on_timeout="truncate",
            max_concurrency=args.max_concurrency,
        ) as pool:
            report = await drive(pool, seconds=args.seconds, max_steps=args.steps, seed=args.seed)
        served = len(site.stats.latencies)
    # the pool is closed (its workers are gone) and the service is shut down
    mean = site.stats.mean_latency
    rate = report.window_steps / report.seconds if report.seconds > 0 else math.nan
    running = min(args.num_envs, args.max_concurrency or args.num_envs)  # requests the service sees at once
    ideal = running / mean if mean > 0 else math.nan
    lost = report.timeouts * args.step_timeout / (args.num_envs * report.seconds) if report.seconds > 0 else math.nan
    print(
        table(
            [
                ("envs / workers", f"{args.num_envs} / {args.num_workers}"),
                ("steps done", f"{report.steps:,}"),
                ("seconds", f"{report.seconds:.2f}"),
                ("steps/s", f"{rate:,.1f}"),
                ("mean server latency", f"{mean * 1000:.1f} ms"),
                (
                    "ideal steps/s",
                    f"{ideal:,.1f}  ({'max_concurrency' if running < args.num_envs else 'envs'} / mean latency)",
                ),
                ("fraction of ideal", f"{rate / ideal:.2f}"),
                ("this process's CPU", f"{report.cpu / report.seconds:.0%}  (the service and the pool's coordinator)"),
                ("episodes ended", f"{report.episodes:,}"),
                ("reward per step", f"{report.reward / max(report.steps, 1):.3f}"),
                (
                    "timeouts truncated",
                    f"{report.timeouts:,}  (info['timeout'] True; step_timeout {args.step_timeout} s)",
                ),
                ("env time in timeouts", f"{lost:.0%}  (timeouts x step_timeout / (envs x seconds))"),
                ("server hangs", f"{site.stats.hangs:,} of {served + site.stats.hangs:,} requests"),
            ]
        )
    )
    print("pool closed, service stopped")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (small defaults: the script runs in a few seconds)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=None, help="rows per recv() (default: min(8, envs))")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the send/recv loop runs")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many rows (if sooner)")
    parser.add_argument("--episode-steps", type=int, default=5, help="clicks per episode before truncation")
    parser.add_argument("--latency-ms", type=float, default=30.0, help="mean server latency")
    parser.add_argument("--hang-prob", type=float, default=0.01, help="probability that a click hangs")
    parser.add_argument("--hang-seconds", type=float, default=10.0, help="how long a hung click hangs")
    parser.add_argument("--step-timeout", type=float, default=1.0, help="seconds before a step is truncated")
    parser.add_argument("--reset-timeout", type=float, default=10.0, help="seconds before a reset fails")
    parser.add_argument("--max-concurrency", type=int, default=None, help="at most this many requests at once")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.batch_size is None:
        args.batch_size = min(8, args.num_envs)  # small batches: a finished row never waits long to be answered
    for name in ("num_envs", "num_workers", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        parser.error(f"--max-concurrency must be at least 1, got {args.max_concurrency}")
    if args.batch_size > args.num_envs:
        parser.error(f"--batch-size {args.batch_size} exceeds --num-envs {args.num_envs}")
    if not 0 <= args.hang_prob <= 1:
        parser.error(f"--hang-prob must be in [0, 1], got {args.hang_prob}")
    if min(args.latency_ms, args.step_timeout, args.reset_timeout) <= 0:
        parser.error("--latency-ms, --step-timeout and --reset-timeout must be positive")
    return args


if __name__ == "__main__":
    aioenv.run(main(parse_args()))
