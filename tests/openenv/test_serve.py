"""``aioenv serve --http``: OpenEnv's own client, raw WebSocket messages, HTTP sessions and curl against a real
server process, with its envs in real worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import gymnasium as gym
import numpy as np
import pytest
from click.testing import CliRunner
from openenv.core.generic_client import GenericEnvClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedOK, InvalidStatus

import aioenv
from aioenv.cli.main import main as cli_main
from tests.support.procs import HANG
from tests.support.scripts import ROOT
from tests.support.servers import ServerProcess

PROBE = "tests.envs.faulty:make_probe"
DICT = "tests.envs.dictenv:make_dict_env"


@dataclass
class Http:
    """A server process and the URL of its HTTP port."""

    proc: ServerProcess
    url: str


@pytest.fixture(scope="module")
def http_server() -> Iterator[Http]:
    """A server whose HTTP port serves 4 CartPole sessions, 2 probe envs (action 2 hangs) with a 2 s deadline,
    each in a worker of its own, and 2 Dict-observation envs."""
    srv = ServerProcess(
        "--http",
        "127.0.0.1:0",
        "--http-env",
        "CartPole-v1=4",
        "--http-env",
        f"{PROBE}=2",
        "--http-env",
        f"{DICT}=2",
        "--http-env-kwargs",
        DICT + '={"min_len": 3, "max_len": 4}',
        "--http-step-timeout",
        "2",
        "--workers",
        "2",
    )
    try:
        yield Http(srv, srv.http_url())
    finally:
        srv.stop()


def ws_url(srv: Http, env: str | None = None, query: str = "") -> str:
    base = srv.url.replace("http://", "ws://")
    return f"{base}/ws{query}" if env is None else f"{base}/envs/{env}/ws{query}"


async def ask(ws: Any, message: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps(message))
    reply: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), HANG))
    return reply


async def free(srv: Http, env: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{srv.url}/envs") as resp:
        return int((await resp.json())[env]["free"])


async def wait_free(srv: Http, env: str, count: int) -> None:
    deadline = time.monotonic() + HANG
    while (now := await free(srv, env)) != count:
        assert time.monotonic() < deadline, f"{env}: {now} sessions free, expected {count}"
        await asyncio.sleep(0.05)


async def test_openenv_client_plays_cartpole_episodes_as_gymnasium_does(http_server: Http) -> None:
    """OpenEnv's own client, unchanged, over the port: the same seed and actions give gymnasium's trajectory."""
    ref = gym.make("CartPole-v1")
    async with GenericEnvClient(base_url=http_server.url) as env:
        for seed in (3, 11):
            result = await env.reset(seed=seed)
            obs, _ = ref.reset(seed=seed)
            np.testing.assert_array_equal(np.asarray(result.observation["obs"], np.float32), obs)
            assert result.reward is None
            assert result.done is False
            steps, done = 0, False
            while not done:
                action = steps % 2 if steps < 6 else 1
                result = await env.step({"action": action})
                obs, reward, terminated, truncated, _ = ref.step(action)
                steps += 1
                np.testing.assert_array_equal(np.asarray(result.observation["obs"], np.float32), obs)
                assert result.reward == reward
                assert result.observation["terminated"] is terminated
                assert result.observation["truncated"] is truncated
                done = bool(result.done)
                assert done is (terminated or truncated)
            state = await env.state()
            assert state["step_count"] == steps
            assert state["env"] == "CartPole-v1"
    await wait_free(http_server, "CartPole-v1", 4)


async def test_dict_observations_cross_as_objects(http_server: Http) -> None:
    async with connect(ws_url(http_server, DICT)) as ws:
        reply = await ask(ws, {"type": "reset", "data": {"seed": 4}})
        obs = reply["data"]["observation"]["obs"]
        assert set(obs) == {"pos", "count", "flag"}
        assert len(obs["pos"]) == 3
        assert len(obs["flag"]) == 2
        reply = await ask(ws, {"type": "step", "data": {"action": 2}})
        assert reply["type"] == "observation"
        assert reply["data"]["observation"]["info"], "a step's info crosses as an object"
        await ask(ws, {"type": "step", "data": {"action": 0}})
        last = await ask(ws, {"type": "step", "data": {"action": 1}})
        assert last["data"]["done"] is True, "the operator's env kwargs (3-step episodes) reach the envs"
    async with aiohttp.ClientSession() as http, http.get(f"{http_server.url}/envs/{DICT}/schema") as resp:
        schema = await resp.json()
    assert sorted(schema["observation"]["properties"]["obs"]["required"]) == ["count", "flag", "pos"]
    assert schema["action"]["properties"]["action"] == {"type": "integer", "minimum": 0, "maximum": 2}


async def test_every_bad_message_gets_one_error_reply_and_the_session_goes_on(http_server: Http) -> None:
    async with connect(ws_url(http_server)) as ws:
        reply = await ask(ws, {"type": "step", "data": {"action": 1}})
        assert reply["type"] == "error"
        assert "reset first" in reply["data"]["message"]
        await ask(ws, {"type": "reset", "data": {"seed": 0}})
        for message, code, words in (
            ({"type": "step", "data": {"action": 7}}, "VALIDATION_ERROR", "expected an integer in [0, 1], got 7"),
            ({"type": "step", "data": {"action": True}}, "VALIDATION_ERROR", "CartPole-v1"),
            ({"type": "step", "data": {}}, "VALIDATION_ERROR", "'action'"),
            ({"type": "step", "data": [1]}, "VALIDATION_ERROR", "data must be a JSON object"),
            ({"type": "reset", "data": {"seed": -1}}, "VALIDATION_ERROR", "seed"),
            ({"type": "jump"}, "UNKNOWN_TYPE", "jump"),
        ):
            reply = await ask(ws, message)
            assert reply["type"] == "error", reply
            assert reply["data"]["code"] == code, reply
            assert words in reply["data"]["message"], reply
        await ws.send("{not json")
        reply = json.loads(await asyncio.wait_for(ws.recv(), HANG))
        assert reply["data"]["code"] == "INVALID_JSON"
        await ws.send("[" * 200_000 + "]" * 200_000)  # deeper than Python's JSON parser goes
        reply = json.loads(await asyncio.wait_for(ws.recv(), HANG))
        assert reply["data"]["code"] == "INVALID_JSON"
        assert "nested too deep" in reply["data"]["message"]
        await ws.send(b"\x00\x01")
        reply = json.loads(await asyncio.wait_for(ws.recv(), HANG))
        assert reply["data"]["code"] == "INVALID_JSON"
        reply = await ask(ws, {"type": "step", "data": {"action": 1}})
        assert reply["type"] == "observation"
        assert reply["data"]["reward"] == 1.0


async def test_sessions_are_bounded_and_given_back_on_close(http_server: Http) -> None:
    sockets = [await connect(ws_url(http_server)) for _ in range(4)]
    try:
        assert await free(http_server, "CartPole-v1") == 0
        async with connect(ws_url(http_server)) as extra:
            refused = json.loads(await asyncio.wait_for(extra.recv(), HANG))
            assert refused["data"]["code"] == "CAPACITY_REACHED"
            assert "all 4 sessions of CartPole-v1 are in use" in refused["data"]["message"]
        await sockets[0].send(json.dumps({"type": "close"}))
        with pytest.raises(ConnectionClosedOK):  # the port ends the connection, as OpenEnv's does
            await asyncio.wait_for(sockets[0].recv(), HANG)
        await wait_free(http_server, "CartPole-v1", 1)
        async with connect(ws_url(http_server)) as again:
            assert (await ask(again, {"type": "reset", "data": {}}))["type"] == "observation"
    finally:
        for ws in sockets[1:]:
            await ws.close()
    await wait_free(http_server, "CartPole-v1", 4)


async def test_a_hung_step_fails_with_step_timeout_and_the_env_is_replaced(http_server: Http) -> None:
    async with connect(ws_url(http_server, PROBE)) as ws, connect(ws_url(http_server, PROBE)) as other:
        await ask(ws, {"type": "reset", "data": {"seed": 1}})
        await ask(other, {"type": "reset", "data": {"seed": 2}})
        hung = await ask(ws, {"type": "step", "data": {"action": 2}})  # the probe's slow action: 60 s
        assert hung["type"] == "error", hung
        assert hung["data"]["error"] == "StepTimeout", hung
        still = await ask(other, {"type": "step", "data": {"action": 1}})  # its own worker: untouched
        assert still["type"] == "observation", still
        again = await ask(ws, {"type": "step", "data": {"action": 1}})
        assert again["type"] == "error"
        assert "reset first" in again["data"]["message"]
        await ask(ws, {"type": "reset", "data": {"seed": 1}})
        assert (await ask(ws, {"type": "step", "data": {"action": 1}}))["type"] == "observation"


async def test_step_batch_answers_each_session_once_first_finished_first(http_server: Http) -> None:
    """One connection, two probe envs: the slow one's answer comes after the fast one's, each tagged."""
    async with connect(ws_url(http_server, PROBE, "?sessions=2")) as ws:
        for index in (0, 1):
            reply = await ask(ws, {"type": "reset", "data": {"seed": index}, "session": index, "id": f"r{index}"})
            assert reply["session"] == index
            assert reply["id"] == f"r{index}"
        await ws.send(json.dumps({"type": "step_batch", "data": {"actions": {"0": 2, "1": 0}}, "id": 7}))
        first = json.loads(await asyncio.wait_for(ws.recv(), HANG))
        second = json.loads(await asyncio.wait_for(ws.recv(), HANG))
        assert (first["session"], first["type"]) == (1, "observation"), first
        assert (second["session"], second["data"]["error"]) == (0, "StepTimeout"), second
        assert first["id"] == second["id"] == 7
        busy = await ask(ws, {"type": "state", "session": 5})
        assert busy["data"]["code"] == "VALIDATION_ERROR"
        assert "[0, 1]" in busy["data"]["message"]


def test_a_killed_client_gives_its_sessions_back(http_server: Http, tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(
        "import asyncio, json, sys\n"
        "from websockets.asyncio.client import connect\n"
        "async def main():\n"
        f"    ws = await connect({ws_url(http_server, 'CartPole-v1', '?sessions=3')!r})\n"
        "    await ws.send(json.dumps({'type': 'reset', 'data': {}}))\n"
        "    await ws.recv()\n"
        "    print('held', flush=True)\n"
        "    await asyncio.sleep(3600)\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        assert asyncio.run(free(http_server, "CartPole-v1")) == 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(HANG)
        asyncio.run(wait_free(http_server, "CartPole-v1", 4))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_curl_plays_an_http_session(http_server: Http) -> None:
    """A client outside Python: curl opens a session, resets, steps with a wrong and a right action, closes."""
    curl = shutil.which("curl")
    assert curl is not None, "curl is needed (Debian: apt-get install curl)"
    url = http_server.url

    def run(*args: str) -> tuple[int, Any]:
        out = subprocess.run(
            [curl, "-s", "-w", "\n%{http_code}", "-H", "content-type: application/json", *args],
            capture_output=True,
            text=True,
            timeout=HANG,
            check=True,
        ).stdout
        body, _, code = out.rpartition("\n")
        return int(code), json.loads(body) if body else None

    code, made = run("-X", "POST", f"{url}/envs/CartPole-v1/sessions")
    assert code == 201
    assert made["env"] == "CartPole-v1"
    sid = made["session_id"]
    code, first = run("-X", "POST", f"{url}/sessions/{sid}/reset", "-d", '{"seed": 5}')
    obs, _ = gym.make("CartPole-v1").reset(seed=5)
    assert code == 200
    assert np.array_equal(np.asarray(first["observation"]["obs"], np.float32), obs)
    code, wrong = run("-X", "POST", f"{url}/sessions/{sid}/step", "-d", '{"action": [0, 1]}')
    assert code == 422
    assert "expected an integer" in wrong["detail"]
    code, stepped = run("-X", "POST", f"{url}/sessions/{sid}/step", "-d", '{"action": 0}')
    assert code == 200
    assert stepped["reward"] == 1.0
    assert stepped["done"] is False
    code, state = run(f"{url}/sessions/{sid}/state")
    assert code == 200
    assert state["step_count"] == 1
    code, _ = run("-X", "DELETE", f"{url}/sessions/{sid}")
    assert code == 204
    code, gone = run(f"{url}/sessions/{sid}/state")
    assert code == 404
    assert "no such session" in gone["detail"]


async def test_openapi_document_names_every_route(http_server: Http) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{http_server.url}/openapi.json") as resp:
        doc = await resp.json()
    assert doc["openapi"].startswith("3.")
    assert {"/health", "/envs", "/schema", "/envs/{env}/sessions", "/sessions/{sid}/step"} <= set(doc["paths"])
    step = doc["paths"]["/sessions/{sid}/step"]["post"]
    assert "requestBody" in step
    assert "200" in step["responses"]


def test_a_token_guards_every_route_but_health(tmp_path: Path) -> None:
    token = "s3cret-" + "x" * 20
    (tmp_path / "token").write_text(token + "\n")
    srv = ServerProcess(
        "--http", "127.0.0.1:0", "--http-env", "CartPole-v1=1", "--http-token-file", str(tmp_path / "token")
    )
    try:
        url = srv.http_url()

        async def check() -> None:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{url}/health") as resp:
                    assert resp.status == 200
                async with http.get(f"{url}/envs") as resp:
                    assert resp.status == 401
                async with http.get(f"{url}/envs", headers={"Authorization": "Bearer wrong"}) as resp:
                    assert resp.status == 401
                async with http.get(f"{url}/envs", headers={"Authorization": f"Bearer {token}"}) as resp:
                    assert resp.status == 200
            with pytest.raises(InvalidStatus, match="403"):  # closed before the handshake: a refused upgrade
                async with connect(url.replace("http", "ws") + "/ws") as ws:
                    await asyncio.wait_for(ws.recv(), HANG)
            async with GenericEnvClient(base_url=url, headers={"Authorization": f"Bearer {token}"}) as env:
                assert (await env.reset(seed=0)).done is False

        asyncio.run(check())
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--http", "0.0.0.0:0", "--http-env", "CartPole-v1=1"), "refusing to serve HTTP on 0.0.0.0:0"),
        (("--http", "127.0.0.1:0"), "name at least one"),
        (("--http", "127.0.0.1:0", "--http-env", "CartPole-v1"), "expected NAME=SESSIONS"),
        (("--http", "127.0.0.1", "--http-env", "CartPole-v1=1"), "expected HOST:PORT"),
        (("--http-env", "CartPole-v1=1"), "need --http HOST:PORT"),
        (("--http", "127.0.0.1:0", "--http-env", "A=1", "--http-env-kwargs", 'B={"x": 1}'), "which no --http-env"),
        (("--http", "127.0.0.1:0", "--http-env", "A=1", "--http-env-kwargs", "A={x}"), "expected NAME=JSON-OBJECT"),
    ],
)
@pytest.mark.timeout(HANG)  # an option let through would start the server here and never return
def test_wrong_http_options_are_refused_before_anything_starts(args: tuple[str, ...], words: str) -> None:
    done = CliRunner().invoke(cli_main, ["serve", "--bind", "tcp://127.0.0.1:0", *args])
    assert done.exit_code == 2, done.output
    assert words in done.output, done.output


NODE_CLIENT = Path(__file__).parent / "node"


def test_a_node_client_with_the_ws_package_plays_an_episode(http_server: Http) -> None:
    """A client outside Python: Node.js with the ``ws`` package from the npm registry (``npm ci`` from the
    committed lock file), speaking OpenEnv's WebSocket protocol."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node is not None, "Node.js is needed (Debian: apt-get install nodejs npm)"
    assert npm is not None, "npm is needed (Debian: apt-get install npm)"
    if not (NODE_CLIENT / "node_modules" / "ws").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_CLIENT, check=True, timeout=300)
    played = subprocess.run(
        [node, str(NODE_CLIENT / "play.mjs"), ws_url(http_server), "9"],
        capture_output=True,
        text=True,
        timeout=HANG,
        check=True,
    )
    seen = json.loads(played.stdout)
    ref = gym.make("CartPole-v1")
    obs, _ = ref.reset(seed=9)
    np.testing.assert_array_equal(np.asarray(seen["first"], np.float32), obs)
    assert seen["error"]["code"] == "VALIDATION_ERROR"
    assert "expected an integer in [0, 1], got 5" in seen["error"]["message"]
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = ref.step(1)
        steps, done = steps + 1, terminated or truncated
    assert seen["steps"] == steps
    assert seen["rewards"] == float(steps)


def test_idle_sessions_are_closed_and_their_envs_taken_back() -> None:
    """An HTTP session and a WebSocket connection left silent past --http-idle-timeout are closed and their envs
    come back; a connection that keeps talking stays."""
    srv = ServerProcess("--http", "127.0.0.1:0", "--http-env", "CartPole-v1=3", "--http-idle-timeout", "2")
    try:
        url = srv.http_url()
        server = Http(srv, url)

        async def check() -> None:
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{url}/envs/CartPole-v1/sessions") as resp:
                    sid = (await resp.json())["session_id"]
                async with connect(ws_url(server)) as silent, connect(ws_url(server)) as talking:
                    assert await free(server, "CartPole-v1") == 0

                    async def talk_until_the_silent_one_is_closed() -> None:
                        while True:
                            assert (await ask(talking, {"type": "state"}))["type"] == "state"
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(silent.recv(), 0.2)

                    with pytest.raises(ConnectionClosedOK):
                        await talk_until_the_silent_one_is_closed()
                    await wait_free(server, "CartPole-v1", 2)  # the HTTP session's env and the silent one's
                    assert (await ask(talking, {"type": "reset", "data": {}}))["type"] == "observation"
                async with http.get(f"{url}/sessions/{sid}/state") as resp:
                    assert resp.status == 404

        asyncio.run(check())
    finally:
        srv.stop()


async def test_a_flood_of_batches_gets_exactly_one_answer_per_step(http_server: Http) -> None:
    """A client that sends far more than the envs can take, reading nothing meanwhile, gets exactly one answer
    per step asked for (busy envs answer at once that they are busy), and the port serves others meanwhile."""
    flood = 300
    async with connect(ws_url(http_server, "CartPole-v1", "?sessions=2")) as ws:
        for index in (0, 1):
            await ask(ws, {"type": "reset", "data": {"seed": index}, "session": index, "id": "r"})
        for n in range(flood):
            await ws.send(json.dumps({"type": "step_batch", "data": {"actions": {"0": 0, "1": 1}}, "id": n}))
        async with connect(ws_url(http_server)) as other:  # meanwhile
            assert (await ask(other, {"type": "reset", "data": {}}))["type"] == "observation"
        seen: dict[tuple[int, int], str] = {}
        for _ in range(2 * flood):
            reply = json.loads(await asyncio.wait_for(ws.recv(), HANG))
            key = (reply["id"], reply["session"])
            assert key not in seen, f"two answers for {key}"
            seen[key] = reply["type"]
        assert set(seen) == {(n, s) for n in range(flood) for s in (0, 1)}
        assert "observation" in seen.values()
        with pytest.raises(TimeoutError):  # nothing more: one answer each
            await asyncio.wait_for(ws.recv(), 0.5)


async def test_an_aioenv_pool_steps_envs_of_an_aioenv_http_port(http_server: Http) -> None:
    """Both directions at once: a pool whose envs are OpenEnv sessions on this port (openenv+ws://) gets the
    trajectories gymnasium gives for the same seeds and actions."""
    base = http_server.url.replace("http://", "ws://")
    async with aioenv.Pool(f"openenv+{base}", 2, seed=7, executor="async") as pool:
        assert pool.single_action_space == gym.spaces.Dict({"action": gym.spaces.Discrete(2)})
        refs = [gym.make("CartPole-v1") for _ in range(2)]
        obs, _ = await pool.reset()
        for i, ref in enumerate(refs):
            np.testing.assert_array_equal(obs["obs"][i].astype(np.float32), ref.reset(seed=7 + i)[0])
        for t in range(5):
            actions = [t % 2, 1 - t % 2]
            obs, reward, terminated, _, _ = await pool.step({"action": np.array(actions)})
            for i, ref in enumerate(refs):
                want, want_reward, want_terminated, _, _ = ref.step(actions[i])
                np.testing.assert_array_equal(obs["obs"][i].astype(np.float32), want)
                assert reward[i] == want_reward
                assert bool(terminated[i]) is want_terminated
    await wait_free(http_server, "CartPole-v1", 4)
