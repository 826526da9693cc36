"""The start lines: what a user reads between '[apex] launching ...' and the
first progress lines, so a start is never silent. The coordinator prints each
once, as whole lines with the progress line's clock, in this order:

    [apex    4.1s] coordinator up: waiting for the replay, 2 actors and the learner's first SGD step
    [apex    5.2s] replay serving at localhost:41234: table transitions (0/20,000 items; sampled from 1,000)
    [apex    6.0s] actor_0 inserting (1,830 env steps/s so far)
    [apex    6.1s] actor_1 inserting (1,790 env steps/s so far)
    [apex    7.3s] learner: first SGD step, 7.2 s after launch (replay at 1,000+ transitions)

(one 'replay_<s> serving' line per shard with replay.num_shards > 1). An actor
line comes at the actor's first report (actor.report_period_seconds after it
started stepping and inserting), never before the replay line; the learner's
gives the time of its first step since this launch (a resumed run's too). With
logging.progress_period_seconds = 0 (no progress lines) there are none either.
"""

from __future__ import annotations

import time
from typing import Any

from apex.agents import get_builder
from apex.config import ApexConfig
from apex.coordination.counters import RunCounters
from apex.coordination.replay_poll import ReplayPoller
from apex.replay.shards import shard_config


def clock(counters: RunCounters, now: float) -> str:
    """'[apex   12.3s]': the progress line's clock (the run's wall seconds)."""
    return f"[apex {now - counters.start:6.1f}s]"


class StartLines:
    """The start events not yet printed, and their lines.

    Args:
      config: the program config (how many actors; the learner's min_size).
      launch_time: unix time of this launch (the learner's line counts from it;
        a resumed run's clock, in the lines' prefix, continues from its checkpoint).
    """

    def __init__(self, config: ApexConfig, launch_time: float):
        self._launch = float(launch_time)
        self._num_actors = int(config.actor.num_actors)
        self._min_size = int(shard_config(config).replay.min_size)
        self._sharded = int(config.replay.num_shards) > 1
        self._unit = get_builder(config).item_unit
        self._said_replay: set[int] = set()
        self._said_actors: set[int] = set()
        self._said_learner = False

    def waiting_line(self, counters: RunCounters, replay: ReplayPoller) -> str:
        """The first line: the coordinator is up, and what the run waits for."""
        parts = []
        if replay.clients:
            parts.append(f"{len(replay.clients)} replay shards" if replay.sharded else "the replay")
        parts.append(f"{self._num_actors} actor{'s' if self._num_actors != 1 else ''}")
        parts.append("the learner's first SGD step")
        what = ", ".join(parts[:-1]) + " and " + parts[-1]
        return f"{clock(counters, time.time())} coordinator up: waiting for {what}"

    @property
    def done(self) -> bool:
        return self._said_learner and len(self._said_actors) >= self._num_actors

    def new_lines(self, counters: RunCounters, replay: ReplayPoller) -> list[str]:
        """The lines of the start events seen since the last call (each event once)."""
        if self.done and len(self._said_replay) >= len(replay.clients):
            return []
        now = time.time()
        lines = [self._replay_line(s, counters, replay, now) for s in self._replay_news(replay)]
        if len(self._said_replay) < len(replay.clients):
            return lines  # an actor inserts, and the learner samples, once a replay serves
        with counters.lock:
            firsts = dict(counters.first_reports)
            first_step = counters.first_step_this_launch
        for actor_id in sorted(set(firsts) - self._said_actors):
            self._said_actors.add(actor_id)
            reported, steps, started = firsts[actor_id]
            rate = (
                f" ({steps / (reported - started):,.0f} env steps/s so far)"
                if reported > started
                else ""
            )
            lines.append(f"{clock(counters, now)} actor_{actor_id} inserting{rate}")
        if first_step is not None and not self._said_learner:
            self._said_learner = True
            whose = "a shard" if self._sharded else "replay"
            lines.append(
                f"{clock(counters, now)} learner: first SGD step, {first_step - self._launch:.1f} s "
                f"after launch ({whose} at {self._min_size:,}+ {self._unit})"
            )
        return lines

    def _replay_news(self, replay: ReplayPoller) -> list[int]:
        """The shards that answered a poll for the first time."""
        news = [
            s
            for s in range(len(replay.clients))
            if s not in self._said_replay and replay.answered(s) is not None
        ]
        self._said_replay.update(news)
        return news

    def _replay_line(self, s: int, counters: RunCounters, replay: ReplayPoller, now: float) -> str:
        t: dict[str, Any] = replay.answered(s) or {}
        address = getattr(replay.clients[s], "server_address", "") or "?"
        rl = t.get("rate_limiter") or {}
        return (
            f"{clock(counters, now)} {replay.shard_names[s]} serving at {address}: table "
            f"{t.get('table')} ({t.get('size', 0):,}/{t.get('capacity', 0):,} items; sampled "
            f"from {rl.get('min_size_to_sample', self._min_size):,})"
        )
