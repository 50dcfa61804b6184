"""Rollout collection over an aioenv pool, with the options TorchRL's collectors have.

- :class:`Collector`: batches of transitions from any :class:`aioenv.Pool` (``async for``) or
  :class:`aioenv.SyncPool` (``for``) and a policy (a function, an ``async def`` or a torch module). Lock-step
  (``mode="sync"``: ``(T, B)`` arrays) or first-finished (``mode="async"``: flat, grouped by env);
  ``frames_per_batch``, ``total_frames``, ``max_frames_per_traj``, ``init_random_frames``,
  ``reset_at_each_iter``, ``split_trajs``; background collection with a bounded queue and
  :meth:`Collector.update_policy`.
- :class:`Batch`: obs, action, reward, terminated, truncated, next_obs (the true final observation at an
  episode's end, in every autoreset mode), env and trajectory ids, step counts, and the masks ``valid`` and
  ``traj_end`` that keep returns from crossing an episode boundary. ``to_tensordict()`` with torch.
- :class:`EpisodeCollector`: whole :class:`Episode` records, turn by turn (prompts, responses, rewards,
  timings, errors and timeouts), for multi-turn LLM and tool-use envs.

See docs/collect.md.
"""

from aioenv.collect.batch import Batch
from aioenv.collect.collector import Collector
from aioenv.collect.episodes import Episode, EpisodeCollector, Turn

__all__ = ["Batch", "Collector", "Episode", "EpisodeCollector", "Turn"]
