// Plays one CartPole episode against `aioenv serve --http` over OpenEnv's WebSocket protocol, always pushing
// right, and prints what it saw as one JSON line: {"steps": N, "rewards": R, "first": [obs], "error": {...}}.
// Usage: node play.mjs ws://HOST:PORT/ws SEED
import WebSocket from "ws";

const [url, seed] = process.argv.slice(2);
const ws = new WebSocket(url);
const replies = [];
let waiting = null;
ws.on("message", (data) => {
  const message = JSON.parse(data.toString());
  if (waiting) {
    const resolve = waiting;
    waiting = null;
    resolve(message);
  } else {
    replies.push(message);
  }
});
const ask = (message) =>
  new Promise((resolve) => {
    waiting = resolve;
    ws.send(JSON.stringify(message));
  });

ws.on("open", async () => {
  const first = await ask({ type: "reset", data: { seed: Number(seed) } });
  const error = await ask({ type: "step", data: { action: 5 } });
  let steps = 0;
  let rewards = 0;
  for (;;) {
    const reply = await ask({ type: "step", data: { action: 1 } });
    if (reply.type !== "observation") throw new Error(JSON.stringify(reply));
    steps += 1;
    rewards += reply.data.reward;
    if (reply.data.done) break;
  }
  console.log(JSON.stringify({ steps, rewards, first: first.data.observation.obs, error: error.data }));
  ws.send(JSON.stringify({ type: "close" }));
  ws.close();
});
ws.on("error", (err) => {
  console.error(err.message);
  process.exit(1);
});
