"""An LLM-style agent on text envs, acting on whichever env is ready first: `python examples/llm_agent.py`.

Needs aiohttp: ``make extras`` (or ``.venv/bin/pip install -e ".[examples]"``).

The script starts a toy "model" service in this process (aiohttp, on 127.0.0.1 and an ephemeral
port): ``POST /generate`` with ``{"prompt": ...}`` streams a reply as server-sent events, one token
per event, each after a small random delay, as an LLM server streams tokens. The model answers
arithmetic questions, and gets ``--error-rate`` of them wrong by one.

:class:`QuizEnv` is an :class:`aioenv.AsyncEnv` with ``gymnasium.spaces.Text`` observations and
actions: the observation is a question (``"What is 17 + 25?"``, after feedback on the previous
answer), the action is the answer string, reward 1 when it is right; an episode is
``--questions`` questions. Grading awaits a short random delay (a judge call). The envs run as
coroutines in worker processes (``executor="async"``), or with ``--num-workers 0`` on this very event loop,
beside the agent and the model service (no worker process at all).

The agent loop keeps, for every env, either its ``pool.step_env``/``pool.reset_env`` future or
its model call in flight, waits with ``asyncio.wait(..., return_when=FIRST_COMPLETED)`` and acts
on whatever finished: an env that answered gets a model call (its reply consumed token by
token), a model reply becomes that env's next step. No env waits for another.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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

#: Characters of questions and answers (gymnasium's Text default is alphanumeric only).
CHARSET = string.ascii_letters + string.digits + " ?!.,:+-*='"
QUESTION = re.compile(r"What is (-?\d+) ([+\-*]) (-?\d+)\?")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


# ----------------------------------------------------------------------------- the model service


@dataclass
class ModelStats:
    """What the model service did."""

    replies: int = 0
    tokens: int = 0


class ToyModel:
    """A "model" that streams a worked answer to the last arithmetic question in its prompt.

    Each token follows a random delay (uniform around ``token_ms`` milliseconds); with probability
    ``error_rate`` the answer is off by one.
    """

    def __init__(self, *, token_ms: float = 4.0, error_rate: float = 0.15, seed: int = 0) -> None:
        self.token_s = token_ms / 1000
        self.error_rate = error_rate
        self.rng = random.Random(seed)
        self.stats = ModelStats()

    def reply_tokens(self, prompt: str) -> list[str]:
        """The reply to ``prompt``, split into tokens."""
        questions = QUESTION.findall(prompt)
        if not questions:
            return ["I", " do", " not", " know", "."]
        a, op, b = questions[-1]
        answer = OPS[op](int(a), int(b))
        if self.rng.random() < self.error_rate:
            answer += self.rng.choice((-1, 1))
        return ["Let", " me", " think", ":", f" {a}", f" {op}", f" {b}", " =", f" {answer}", "."]

    async def handle_generate(self, request: web.Request) -> web.StreamResponse:
        """``POST /generate {"prompt": str}``: server-sent events ``data: {"token": str}``, then ``data: [DONE]``."""
        try:
            prompt = str((await request.json())["prompt"])
        except (ValueError, KeyError, TypeError):
            raise web.HTTPBadRequest(text='want JSON {"prompt": str}') from None
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for token in self.reply_tokens(prompt):
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.token_s)
            await response.write(f"data: {json.dumps({'token': token})}\n\n".encode())
            self.stats.tokens += 1
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        self.stats.replies += 1
        return response


@contextlib.asynccontextmanager
async def serve(model: ToyModel) -> AsyncIterator[str]:
    """Serve ``model`` on 127.0.0.1 and an ephemeral port; yields its base URL and cleans up on exit."""
    app = web.Application()
    app.router.add_post("/generate", model.handle_generate)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def generate(http: aiohttp.ClientSession, url: str, prompt: str) -> tuple[str, float]:
    """Stream the model's reply to ``prompt`` token by token; returns ``(text, seconds to first token)``."""
    start = time.perf_counter()
    first = math.nan
    tokens: list[str] = []
    async with http.post(f"{url}/generate", json={"prompt": prompt}, raise_for_status=True) as response:
        async for line in response.content:  # one SSE line at a time, as the tokens arrive
            if not line.startswith(b"data: "):
                continue
            data = line[len(b"data: ") :].strip()
            if data == b"[DONE]":
                break
            if not tokens:
                first = time.perf_counter() - start
            tokens.append(json.loads(data)["token"])
    return "".join(tokens), first


def answer_of(reply: str) -> str:
    """The action: the last integer in the model's reply ("" when there is none)."""
    numbers = re.findall(r"-?\d+", reply)
    return numbers[-1] if numbers else ""


# ----------------------------------------------------------------------------- the env


class QuizEnv(aioenv.AsyncEnv[str, str]):
    """Arithmetic questions as text: observation a question, action the answer, reward 1 if right.

    An episode is ``questions`` questions; after the last one the episode terminates. Grading
    awaits a random delay of about ``judge_ms`` milliseconds. The seed fixes the questions.
    """

    observation_space = gym.spaces.Text(max_length=96, min_length=1, charset=CHARSET)
    action_space = gym.spaces.Text(max_length=16, min_length=0, charset=CHARSET)

    def __init__(self, questions: int = 3, judge_ms: float = 5.0) -> None:
        self.questions = questions
        self.judge_s = judge_ms / 1000
        self.rng = random.Random()
        self.asked = 0
        self.expected = 0
        self.question = ""

    def _ask(self, prefix: str) -> str:
        a, b = self.rng.randint(2, 99), self.rng.randint(2, 99)
        op = self.rng.choice(tuple(OPS))
        self.expected = OPS[op](a, b)
        self.asked += 1
        self.question = f"What is {a} {op} {b}?"
        return f"{prefix}{self.question}"

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a quiz: the first question."""
        if seed is not None:
            self.rng = random.Random(seed)
        self.asked = 0
        return self._ask("Question 1: "), {}

    async def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Grade ``action`` against the current question; the next question, or the end of the quiz."""
        await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.judge_s)  # a judge call
        right = action.strip() == str(self.expected)
        feedback = "Right! " if right else f"Wrong, it was {self.expected}. "
        info = {"expected": str(self.expected)}
        if self.asked >= self.questions:
            return f"{feedback}Quiz over.", float(right), True, False, info
        return self._ask(f"{feedback}Question {self.asked + 1}: "), float(right), False, False, info


# ----------------------------------------------------------------------------- the agent


@dataclass
class AgentReport:
    """What the agent loop saw."""

    episodes: int = 0
    returns: list[float] = field(default_factory=list)
    steps: int = 0
    first_token_s: list[float] = field(default_factory=list)
    lines: list[tuple[str, float]] = field(default_factory=list)  #: (observation -> action line, reward)
    env_area: float = 0.0  #: integral over time of env requests (steps and resets) in flight
    model_area: float = 0.0  #: integral over time of model calls in flight
    seconds: float = 0.0


async def run_agent(pool: aioenv.Pool, http: aiohttp.ClientSession, url: str, episodes: int) -> AgentReport:
    """Play ``episodes`` quizzes over the pool's envs, acting on whichever env or model call finishes first."""
    report = AgentReport()
    started = 0
    returns = [0.0] * pool.num_envs
    # one thing in flight per env: an env request (step/reset future) or a model call (task)
    env_calls: dict[asyncio.Future[Any], int] = {}
    asked: dict[int, str] = {}  # env_id -> the line "observation -> model reply -> action" of its step in flight
    model_calls: dict[asyncio.Future[Any], tuple[int, str]] = {}

    def begin_episode(env_id: int) -> None:
        nonlocal started
        if started < episodes:
            started += 1
            env_calls[pool.reset_env(env_id)] = env_id

    def think(env_id: int, obs: str) -> None:
        prompt = f"You are a careful calculator.\nUser: {obs}\nAssistant:"
        model_calls[asyncio.ensure_future(generate(http, url, prompt))] = (env_id, obs)

    for env_id in range(pool.num_envs):
        begin_episode(env_id)
    start = last = time.perf_counter()
    try:
        while env_calls or model_calls:
            done, _ = await asyncio.wait([*env_calls, *model_calls], return_when=asyncio.FIRST_COMPLETED)
            now = time.perf_counter()
            report.env_area += len(env_calls) * (now - last)
            report.model_area += len(model_calls) * (now - last)
            last = now
            for fut in done:
                if fut in env_calls:
                    env_id = env_calls.pop(fut)
                    result = fut.result()
                    if isinstance(result, aioenv.StepResult):
                        report.steps += 1
                        report.lines.append((asked.pop(env_id), result.reward))
                        returns[env_id] += result.reward
                        if result.terminated or result.truncated:
                            report.episodes += 1
                            report.returns.append(returns[env_id])
                            returns[env_id] = 0.0
                            begin_episode(env_id)  # autoreset_mode="disabled": the agent resets
                            continue
                    think(env_id, result.obs)
                else:
                    env_id, obs = model_calls.pop(fut)
                    reply, first = fut.result()
                    report.first_token_s.append(first)
                    action = answer_of(reply)
                    asked[env_id] = f"env {env_id}: {obs!r} -> model {reply!r} -> action {action!r}"
                    env_calls[pool.step_env(env_id, action)] = env_id
    finally:
        for fut in model_calls:  # only if something failed: no model call is left running
            fut.cancel()
    report.seconds = time.perf_counter() - start
    return report


def pick_samples(lines: list[tuple[str, float]], k: int) -> list[tuple[str, float]]:
    """Up to ``k`` sample lines: the first, the first wrong answer, the first later question, then others."""
    wanted = [
        lines[:1],
        [line for line in lines if line[1] == 0.0][:1],
        [line for line in lines if "Question 1:" not in line[0]][:1],
        lines,
    ]
    picked: list[tuple[str, float]] = []
    for group in wanted:
        for line in group:
            if len(picked) < k and line not in picked:
                picked.append(line)
    return picked


async def main(args: argparse.Namespace) -> None:
    """Start the model service, host ``QuizEnv`` on the async executor, run the agent, print a summary."""
    model = ToyModel(token_ms=args.token_ms, error_rate=args.error_rate, seed=args.seed)
    async with serve(model) as url, aiohttp.ClientSession() as http:
        where = f"on {args.num_workers} workers" if args.num_workers else "in this process (num_workers=0)"
        print(f"toy model at {url}; {args.num_envs} QuizEnv {where} (executor='async')")
        async with aioenv.Pool(
            QuizEnv,
            args.num_envs,
            executor="async",
            num_workers=args.num_workers,
            env_kwargs={"questions": args.questions, "judge_ms": args.judge_ms},
            autoreset_mode="disabled",
            seed=args.seed,
        ) as pool:
            report = await run_agent(pool, http, url, args.episodes)
    # the pool is closed (its workers are gone) and the service is shut down
    mean_return = sum(report.returns) / len(report.returns) if report.returns else math.nan
    ttft = [s for s in report.first_token_s if not math.isnan(s)]
    print(f"episodes            {report.episodes}")
    print(f"steps               {report.steps}")
    print(f"mean reward         {mean_return:.2f} per episode of {args.questions} questions")
    print(f"seconds             {report.seconds:.2f}")
    print(
        f"in flight (mean)    {report.env_area / report.seconds:.1f} env steps/resets, "
        f"{report.model_area / report.seconds:.1f} model calls"
    )
    print(
        f"model               {model.stats.replies} replies, {model.stats.tokens} tokens streamed, "
        f"first token after {1000 * sum(ttft) / max(len(ttft), 1):.1f} ms on average"
    )
    print("samples (observation -> action => reward):")
    for line, reward in pick_samples(report.lines, args.samples):
        print(f"  {line} => {reward:g}")
    print("pool closed, service stopped")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (small defaults: the script runs in a few seconds)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument(
        "--num-workers", type=int, default=2, help="worker processes; 0: the envs run as coroutines on this loop"
    )
    parser.add_argument("--episodes", type=int, default=128, help="quizzes to play in all")
    parser.add_argument("--questions", type=int, default=3, help="questions per quiz")
    parser.add_argument("--token-ms", type=float, default=4.0, help="mean delay between streamed tokens")
    parser.add_argument("--judge-ms", type=float, default=5.0, help="mean grading delay in the env")
    parser.add_argument("--error-rate", type=float, default=0.15, help="how often the model is off by one")
    parser.add_argument("--samples", type=int, default=3, help="(observation -> action) lines to print")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("num_envs", "episodes", "questions"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.num_workers < 0:
        parser.error(f"--num-workers must be 0 (the envs in this process) or more, got {args.num_workers}")
    if not 0 <= args.error_rate <= 1:
        parser.error(f"--error-rate must be in [0, 1], got {args.error_rate}")
    return args


if __name__ == "__main__":
    aioenv.run(main(parse_args()))
