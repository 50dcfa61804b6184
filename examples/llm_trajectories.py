"""Multi-turn tool-use episodes with a model over HTTP, collected as records: `python examples/llm_trajectories.py`.

Needs aiohttp: ``make extras`` (or ``.venv/bin/pip install -e ".[examples]"``).

The script starts a toy service in this process (aiohttp, on 127.0.0.1 and an ephemeral port) that stands in
for two remote things an agent talks to:

- ``POST /v1/completions`` ``{"prompt": str}`` -> ``{"text": str}``: the "model". It reads the conversation
  and answers with a tool call (``CALL price <item>``) or a final answer (``ANSWER <number>``), after a
  lognormal delay (mean ``--model-ms``). Now and then it first looks up the wrong item (so episodes have
  different lengths), gets the sum wrong (``--wrong-prob``) or answers HTTP 503 (``--model-error-prob``).
- ``GET /tool/price?item=X`` -> ``{"price": int}``: the tool, after a lognormal delay (mean ``--tool-ms``);
  ``--hang-prob`` of its requests never answer (until the service stops).

:class:`ShopEnv` is an :class:`aioenv.AsyncEnv` with ``gymnasium.spaces.Text`` observations and actions: the
task is "what do N ITEMs cost?", the observation the whole conversation so far (the prompt), the action the
model's reply. A ``CALL`` runs the tool over HTTP inside the env's step; an ``ANSWER`` ends the episode (reward
1 when right). The envs run as coroutines in worker processes (``executor="async"``), ``--envs`` of them at once
(thousands are fine on one machine: ``--envs 4000``).

A hung tool call does not stall anything: the pool's ``step_timeout`` (``--step-timeout``) with
``on_timeout="truncate"`` cancels that step and returns it as a truncated row, so the episode ends truncated
with every turn it had kept (its last turn marked ``timeout=True``) and the env starts a new one. A model call
that fails (HTTP 503, or the policy's own ``--model-timeout``) is recorded on its turn as ``error`` and ends
that episode too (``on_error="reset"``). :class:`aioenv.collect.EpisodeCollector` calls the async policy once
per env as soon as that env's last step is back and yields each :class:`aioenv.collect.Episode` as it ends.

Prints a summary (episodes, turns, how they ended, timeouts, errors, mean turn latency, episodes/s) and one
episode's turns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import re
import string
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

try:
    import aiohttp
    from aiohttp import web
except ImportError as exc:  # pragma: no cover - depends on the install
    raise SystemExit(f"{__file__} needs aiohttp: run `make extras` (or pip install -e '.[examples]')") from exc

import aioenv
from aioenv.collect import Episode, EpisodeCollector

#: Characters of prompts and replies (gymnasium's Text default is alphanumeric only).
CHARSET = string.ascii_letters + string.digits + " \n?!.,:()=+-*'"
ITEMS = ("apple", "bread", "candle", "kettle", "lamp", "pencil", "rope", "soap", "towel", "wrench")
TASK = re.compile(r"Task: what do (\d+) (\w+)s cost\?")
PRICE = re.compile(r"Tool: price\((\w+)\) = (\d+)")


def price_of(item: str) -> int:
    """The tool's price list (fixed, so the env can grade an answer)."""
    return 3 + 7 * ITEMS.index(item) % 23


# ----------------------------------------------------------------------------- the service


@dataclass
class ServiceStats:
    """What the service did."""

    completions: int = 0
    model_errors: int = 0
    tool_calls: int = 0
    tool_hangs: int = 0


class ToyService:
    """The model and the tool behind HTTP (see the module docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.stats = ServiceStats()
        self.stopping = asyncio.Event()

    async def _wait(self, mean_ms: float) -> None:
        sigma = 0.5
        await asyncio.sleep(self.rng.lognormvariate(math.log(mean_ms / 1000) - sigma * sigma / 2, sigma))

    def reply(self, prompt: str) -> str:
        """The model's next message for the conversation ``prompt``."""
        task = TASK.search(prompt)
        if task is None:
            return "I do not understand the task."
        count, item = int(task.group(1)), task.group(2)
        prices = dict(PRICE.findall(prompt))
        if item not in prices:
            if not prices and self.rng.random() < self.args.detour_prob:  # looks up the wrong item first
                return f"CALL price {self.rng.choice([i for i in ITEMS if i != item])}"
            return f"CALL price {item}"
        total = count * int(prices[item])
        if self.rng.random() < self.args.wrong_prob:
            total += self.rng.choice((-1, 1))
        return f"ANSWER {total}"

    async def completions(self, request: web.Request) -> web.Response:
        """``POST /v1/completions {"prompt": str}``: ``{"text": str}``, or HTTP 503 now and then."""
        try:
            prompt = str((await request.json())["prompt"])
        except (ValueError, KeyError, TypeError):
            raise web.HTTPBadRequest(text='want JSON {"prompt": str}') from None
        await self._wait(self.args.model_ms)
        if self.rng.random() < self.args.model_error_prob:
            self.stats.model_errors += 1
            raise web.HTTPServiceUnavailable(text="the model is overloaded")
        self.stats.completions += 1
        return web.json_response({"text": self.reply(prompt)})

    async def price(self, request: web.Request) -> web.Response:
        """``GET /tool/price?item=X``: ``{"price": int}``; a few requests hang until the service stops."""
        item = request.query.get("item", "")
        if item not in ITEMS:
            raise web.HTTPNotFound(text=f"no such item: {item!r}")
        self.stats.tool_calls += 1
        if self.rng.random() < self.args.hang_prob:
            self.stats.tool_hangs += 1
            await self.stopping.wait()  # never answers: the pool's step_timeout must cut it
            raise web.HTTPServiceUnavailable(text="stopping")
        await self._wait(self.args.tool_ms)
        return web.json_response({"price": price_of(item)})


@contextlib.asynccontextmanager
async def serve(service: ToyService) -> AsyncIterator[str]:
    """Serve ``service`` on 127.0.0.1 and an ephemeral port; yields its base URL and cleans up on exit."""
    app = web.Application()
    app.router.add_post("/v1/completions", service.completions)
    app.router.add_get("/tool/price", service.price)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        service.stopping.set()
        await runner.cleanup()


# ----------------------------------------------------------------------------- the env

#: Connections each worker keeps open to the tool (its envs share them).
CONNECTIONS = 200
#: One HTTP session per worker process and tool URL, shared by that worker's envs: (session, users).
_SESSIONS: dict[str, tuple[aiohttp.ClientSession, int]] = {}


def shared_session(url: str) -> aiohttp.ClientSession:
    """This worker's session for ``url`` (its connections are reused by every env of the worker)."""
    session, users = _SESSIONS.get(url) or (None, 0)
    if session is None or session.closed:
        session = aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(limit=CONNECTIONS))
    _SESSIONS[url] = (session, users + 1)
    return session


async def release_session(url: str) -> None:
    """One env less uses the session for ``url``; the last one closes it."""
    session, users = _SESSIONS.pop(url, (None, 0))
    if session is None:
        return
    if users > 1:
        _SESSIONS[url] = (session, users - 1)
    else:
        await session.close()


class ShopEnv(aioenv.AsyncEnv[str, str]):
    """A shopping task with a price tool: observation the conversation so far, action the model's reply.

    ``CALL price <item>`` runs the tool (an HTTP request in this step; reward 0); ``ANSWER <n>`` ends the
    episode (terminated; reward 1 when ``n`` is the right total). Anything else gets a hint (reward 0). The
    env itself truncates after ``max_turns`` turns. The seed picks the tasks.
    """

    observation_space = gym.spaces.Text(max_length=4096, min_length=1, charset=CHARSET)
    action_space = gym.spaces.Text(max_length=256, min_length=0, charset=CHARSET)

    def __init__(self, tool_url: str, max_turns: int = 8) -> None:
        self.tool_url = tool_url
        self.max_turns = max_turns
        self.rng = random.Random()
        self.transcript = ""
        self.answer = 0
        self.turns = 0
        self._session: aiohttp.ClientSession | None = None

    async def _price(self, item: str) -> str:
        if self._session is None:  # made here, in the worker's event loop; shared by the worker's envs
            self._session = shared_session(self.tool_url)
        async with self._session.get("/tool/price", params={"item": item}) as response:
            if response.status != 200:
                return f"Tool: error {response.status}: {(await response.text())[:60]}"
            return f"Tool: price({item}) = {(await response.json())['price']}"

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """A new task: the prompt that states it."""
        if seed is not None:
            self.rng = random.Random(seed)
        count, item = self.rng.randint(2, 9), self.rng.choice(ITEMS)
        self.answer = count * price_of(item)
        self.turns = 0
        self.transcript = (
            f"Task: what do {count} {item}s cost? Tools: price(item). Reply 'CALL price <item>' or 'ANSWER <n>'."
        )
        return self.transcript, {}

    async def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run the reply: a tool call (over HTTP), a final answer, or a hint."""
        self.turns += 1
        self.transcript += f"\nAgent: {action}"
        if action.startswith("ANSWER "):
            right = action.removeprefix("ANSWER ").strip() == str(self.answer)
            self.transcript += "\nDone."
            return self.transcript, float(right), True, False, {"tool": False}
        if action.startswith("CALL price "):
            result = await self._price(action.removeprefix("CALL price ").strip())
        else:
            result = "Tool: unknown command; reply 'CALL price <item>' or 'ANSWER <n>'."
        self.transcript += f"\n{result}"
        return self.transcript, 0.0, False, self.turns >= self.max_turns, {"tool": True}

    async def close(self) -> None:
        """Let go of the HTTP session (the last env of a worker closes it)."""
        if self._session is not None:
            self._session = None
            await release_session(self.tool_url)


# ----------------------------------------------------------------------------- the run


@dataclass
class Summary:
    """What the collection gave (:func:`summarize`)."""

    episodes: int = 0
    turns: int = 0
    terminated: int = 0
    truncated: int = 0
    errored: int = 0
    timeouts: int = 0  #: turns cut by the step deadline (each ends its episode, truncated, turns kept)
    kept_before_timeout: int = 0  #: turns before a timed-out turn, kept in its episode's record
    policy_errors: int = 0
    env_errors: int = 0
    mean_reward: float = math.nan
    mean_turn_ms: float = math.nan
    mean_model_ms: float = math.nan
    mean_env_ms: float = math.nan
    seconds: float = 0.0
    lengths: dict[int, int] = field(default_factory=dict)

    @property
    def episodes_per_s(self) -> float:
        """Episodes per second of collection."""
        return self.episodes / self.seconds if self.seconds else math.nan


def summarize(episodes: list[Episode], seconds: float) -> Summary:
    """Counts and means over the collected ``episodes``."""
    s = Summary(episodes=len(episodes), seconds=seconds)
    turns = [t for ep in episodes for t in ep.turns]
    s.turns = len(turns)
    s.terminated = sum(ep.terminated for ep in episodes)
    s.truncated = sum(ep.truncated for ep in episodes)
    s.errored = sum(ep.error is not None for ep in episodes)
    s.timeouts = sum(t.timeout for t in turns)
    s.kept_before_timeout = sum(len(ep) - 1 for ep in episodes if ep.timeouts)
    s.policy_errors = sum((t.error or "").startswith("policy:") for t in turns)
    s.env_errors = sum((t.error or "").startswith("env:") for t in turns)
    if episodes:
        s.mean_reward = sum(ep.total_reward for ep in episodes) / len(episodes)
    if turns:
        s.mean_model_ms = 1000 * sum(t.policy_seconds for t in turns) / len(turns)
        s.mean_env_ms = 1000 * sum(t.env_seconds for t in turns) / len(turns)
        s.mean_turn_ms = s.mean_model_ms + s.mean_env_ms
    for ep in episodes:
        s.lengths[len(ep)] = s.lengths.get(len(ep), 0) + 1
    return s


def make_policy(http: aiohttp.ClientSession, url: str, timeout: float) -> Any:
    """The async policy: one HTTP call to the model per turn (an error fails that turn)."""
    limit = aiohttp.ClientTimeout(total=timeout)

    async def policy(prompt: str, env_id: int) -> str:
        async with http.post(f"{url}/v1/completions", json={"prompt": prompt}, timeout=limit) as response:
            response.raise_for_status()
            text: str = (await response.json())["text"]
            return text

    return policy


async def collect(args: argparse.Namespace, url: str, http: aiohttp.ClientSession) -> tuple[list[Episode], float]:
    """``args.episodes`` episodes over a pool of ``args.envs`` ShopEnvs; the episodes and the seconds taken."""
    async with aioenv.Pool(
        ShopEnv,
        args.envs,
        executor="async",
        num_workers=args.workers,
        env_kwargs={"tool_url": url, "max_turns": args.max_turns},
        step_timeout=args.step_timeout,
        on_timeout="truncate",
        seed=args.seed,
    ) as pool:
        policy = make_policy(http, url, args.model_timeout)
        start = time.perf_counter()
        async with EpisodeCollector(pool, policy, num_episodes=args.episodes, on_error="reset") as collector:
            episodes = [episode async for episode in collector]
        seconds = time.perf_counter() - start
    return episodes, seconds


def show(episode: Episode) -> list[str]:
    """One episode's turns, as lines."""
    how = "terminated" if episode.terminated else "truncated" if episode.truncated else f"error {episode.error}"
    lines = [f"episode on env {episode.env_id}: {len(episode)} turns, reward {episode.total_reward:g}, {how}"]
    lines.append(f"  prompt   {episode.turns[0].observation.splitlines()[0]}")
    for t in episode.turns:
        result = t.next_observation.splitlines()[-1] if t.next_observation else ""
        note = " [timeout]" if t.timeout else f" [{t.error}]" if t.error else ""
        lines.append(f"  reply    {t.action!s:<22} -> {result}{note}")
    return lines


async def main(args: argparse.Namespace) -> Summary:
    """Start the service, collect the episodes, print the summary; returns it."""
    service = ToyService(args)
    connector = aiohttp.TCPConnector(limit=0)
    async with serve(service) as url, aiohttp.ClientSession(connector=connector) as http:
        print(f"toy model and tool at {url}; {args.envs} ShopEnv on {args.workers} workers (executor='async')")
        episodes, seconds = await collect(args, url, http)
    summary = summarize(episodes, seconds)
    rows = [
        ("episodes", f"{summary.episodes:,} ({summary.episodes_per_s:,.0f} episodes/s, {args.envs} at once)"),
        ("turns", f"{summary.turns:,} (episode lengths {dict(sorted(summary.lengths.items()))})"),
        ("ended", f"{summary.terminated} terminated, {summary.truncated} truncated, {summary.errored} by an error"),
        (
            "timeouts",
            f"{summary.timeouts} (turns cut at {args.step_timeout:g} s; "
            f"{summary.kept_before_timeout} earlier turns kept in their episodes)",
        ),
        ("errors", f"{summary.policy_errors} policy, {summary.env_errors} env"),
        ("mean reward", f"{summary.mean_reward:.3f} per episode"),
        (
            "mean turn latency",
            f"{summary.mean_turn_ms:.1f} ms (model {summary.mean_model_ms:.1f} ms, env {summary.mean_env_ms:.1f} ms)",
        ),
        (
            "service",
            f"{service.stats.completions:,} completions, {service.stats.model_errors} model errors, "
            f"{service.stats.tool_calls:,} tool calls, {service.stats.tool_hangs} hung",
        ),
        ("seconds", f"{summary.seconds:.2f}"),
    ]
    for name, value in rows:
        print(f"{name:<20}{value}")
    # an episode cut by a hung tool call, with the turns it had before (else any such, else the first)
    timed_out = sorted((ep for ep in episodes if ep.timeouts), key=len, reverse=True)
    sample = timed_out[0] if timed_out else episodes[0] if episodes else None
    if sample is not None:
        print("\n".join(show(sample)))
    print("pool closed, service stopped")
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (small defaults: the script runs in a few seconds)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000, help="episodes to collect")
    parser.add_argument("--envs", type=int, default=128, help="envs, so episodes at once (thousands work)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes hosting the envs")
    parser.add_argument("--max-turns", type=int, default=8, help="the env truncates an episode after this many")
    parser.add_argument("--step-timeout", type=float, default=1.0, help="seconds an env step may take")
    parser.add_argument("--model-timeout", type=float, default=5.0, help="seconds the policy waits for the model")
    parser.add_argument("--model-ms", type=float, default=20.0, help="mean model latency")
    parser.add_argument("--tool-ms", type=float, default=10.0, help="mean tool latency")
    parser.add_argument("--hang-prob", type=float, default=0.02, help="tool requests that never answer")
    parser.add_argument("--model-error-prob", type=float, default=0.005, help="model requests answered HTTP 503")
    parser.add_argument("--detour-prob", type=float, default=0.3, help="the model looks up a wrong item first")
    parser.add_argument("--wrong-prob", type=float, default=0.1, help="the model gets the total wrong")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("episodes", "envs", "workers", "max_turns"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    for name in ("hang_prob", "model_error_prob", "detour_prob", "wrong_prob"):
        if not 0 <= getattr(args, name) <= 1:
            parser.error(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(args, name)}")
    return args


if __name__ == "__main__":
    aioenv.run(main(parse_args()))
