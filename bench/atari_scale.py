r"""Atari replay at scale (issue 16): server memory, checkpoint size and time,
and restore time of a real Reverb table of 1M Ape-X transitions (or R2D2
sequences) of Pong frames, per replay layout, side by side.

    .venv/bin/python bench/atari_scale.py                      # 1M items, ~15 min on 2 cores
    .venv/bin/python bench/atari_scale.py --items 200000 --layouts packed zstd
    .venv/bin/python bench/atari_scale.py --config r2d2_atari --items 20000

bench/atari_replay.py measures a small fill (8,000 items) through the whole
actor. Here the table is filled to the paper's order of size: 8 real Pong envs
(configs/apex_atari.py, 4 stacked 84x84 frames) play 700 agent steps with
random actions once, and those recorded observations are replayed, over and
over, to one real VectorActor of the config (its n-step accumulator, its
writer and frame layout, its priorities) by envs that step through the
recording (every 700 steps an episode is truncated and restarts at its first
stack). With --config r2d2_atari, the same for a RecurrentActor of that config
(single frames; sequences of 80 every 40). Its Q-network (and LSTM state) is
replaced by zeros (R2D2's stored LSTM states by noise: zeros would compress
away, a trained LSTM's state does not): the network's forward pass is what
limits an actor on this CPU, and it changes nothing that is stored. Measured,
per layout ('packed', the layout before issue 16; 'frames', each frame stored
once; 'zstd' and 'lz4', stored once and compressed on the actor):
- the server's RSS growth per item between half and full (no fixed costs),
  and its extrapolation to the paper's 2M transitions (plus the process base);
- a checkpoint of the full table: seconds and bytes on disk;
- a restore: a fresh server process that loads that checkpoint: seconds and
  its RSS.
Writes bench/results/atari_scale-<commit>.json. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import time

from atari_replay import LAYOUTS, PAPER, _dir_bytes, _Weights, fill_halves, start_server
from common import ROOT, header, save_results

STEPS = 700  # recorded agent steps per env (Pong's random-play episodes are longer)
_RECORDING = None  # [STEPS + 1, E, 4, 84, 84] uint8 and [STEPS, E] rewards
_INSTANCES = [0]


def _record(config, num_envs: int):
    import numpy as np

    from apex import make_env

    envs = [make_env(config.env, seed=j) for j in range(num_envs)]
    obs = np.stack([np.asarray(e.reset(seed=j)[0]) for j, e in enumerate(envs)])
    frames = np.empty((STEPS + 1, *obs.shape), obs.dtype)
    rewards = np.zeros((STEPS, num_envs), np.float32)
    frames[0] = obs
    rng = np.random.default_rng(0)
    for t in range(STEPS):
        for j, e in enumerate(envs):
            o, r, term, trunc, _ = e.step(int(rng.integers(e.action_space.n)))
            if term or trunc:  # a restart inside the recording: a non-sliding stack
                o, _ = e.reset()
            frames[t + 1, j], rewards[t, j] = o, r
    for e in envs:
        e.close()
    return frames, rewards


def _make_replayed_env():
    """An env stepping through env slot j's recorded Pong observations."""
    import gymnasium as gym

    frames, rewards = _RECORDING
    j = _INSTANCES[0] % frames.shape[1]
    _INSTANCES[0] += 1

    class Replayed(gym.Env):
        observation_space = gym.spaces.Box(0, 255, frames.shape[2:], frames.dtype)
        action_space = gym.spaces.Discrete(6)

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return frames[0, j], {}

        def step(self, action):
            self.t += 1
            return frames[self.t, j], float(rewards[self.t - 1, j]), False, self.t == STEPS, {}

    return Replayed()


def _restore(config_file: str, overrides: dict, capacity: int, path: str, out) -> None:
    """A fresh server process that loads the checkpoint at `path`."""
    import psutil
    import reverb

    from apex import env_spec, load_config_file
    from apex.agents import make_tables, table_name

    c = load_config_file(config_file)
    for k, v in overrides.items():
        section, field = k.split(".")
        setattr(getattr(c, section), field, v)
    c.replay.capacity, c.replay.min_size, c.replay.error_buffer = capacity, 1, 1e12
    tables = make_tables(c, env_spec(c.env))
    checkpointer = reverb.checkpointers.DefaultCheckpointer(path=os.path.dirname(path))
    t0 = time.perf_counter()
    server = reverb.Server(tables, checkpointer=checkpointer)
    seconds = time.perf_counter() - t0
    client = reverb.Client(f"localhost:{server.port}")
    size = client.server_info()[table_name(c)].current_size
    out.put((seconds, size, psutil.Process().memory_info().rss))
    server.stop()


def measure(config_name: str, layout: str, items: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import reverb

    from apex import env_spec, load_config_file
    from apex.agents import get_builder, table_name

    global _RECORDING
    path = os.path.join(ROOT, "configs", f"{config_name}.py")
    overrides = LAYOUTS[layout]
    c = load_config_file(path)
    for k, v in overrides.items():
        setattr(c.replay, k.split(".")[1], v)
    spec = env_spec(c.env)
    e = c.actor.envs_per_actor
    if _RECORDING is None:
        _RECORDING = _record(c, e)
    if "ApexBench/ReplayedPong-v0" not in gym.registry:
        gym.register("ApexBench/ReplayedPong-v0", entry_point=_make_replayed_env)
    _INSTANCES[0] = 0
    proc, q, done, go, port, rss0 = start_server(path, overrides, items)
    client = reverb.Client(f"localhost:{port}")
    table = table_name(c)
    builder = get_builder(c)
    eps = np.geomspace(0.4, 0.01, e).astype(np.float32)
    replayed = load_config_file(path)
    replayed.replay = c.replay
    replayed.env.id = "ApexBench/ReplayedPong-v0"  # same spaces, recorded frames
    replayed.env.preprocessing = "none"
    zeros = np.zeros((e, spec.num_actions), np.float32)
    with builder.make_writer(client, 0, eps, 0, lambda: False) as w:
        actor = builder.make_actor(replayed, 0, _Weights(c, spec), w)
        if builder.recurrent:  # zero Q-values; LSTM states of noise, as incompressible
            rng = np.random.default_rng(0)  # as a trained LSTM's (zeros would compress away)

            def state(n: int) -> np.ndarray:
                return rng.standard_normal((n, c.r2d2.lstm_size), np.float32)

            actor._forward = lambda obs, s=None: (
                zeros[: len(obs)],
                (state(len(obs)), state(len(obs))),
                0,
            )
        else:
            actor._forward = lambda obs, state=None: (zeros[: len(obs)], None, 0)
        rss, _, fill = fill_halves(actor, w, client, table, items, q, go)
        env_steps, written = actor.env_steps, actor.items_written
        actor.close()
    per_item = (rss[1] - rss[0]) / (items - items // 2)
    t0 = time.perf_counter()
    ckpt = client.checkpoint()
    ckpt_seconds = time.perf_counter() - t0
    ckpt_bytes = _dir_bytes(ckpt)
    done.set()
    proc.join(30)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    restorer = ctx.Process(target=_restore, args=(path, overrides, items, ckpt, out))
    restorer.start()
    restore_seconds, restored, restore_rss = out.get(timeout=1800)
    restorer.join(60)
    shutil.rmtree(os.path.dirname(ckpt), ignore_errors=True)
    return {
        "layout": layout,
        "items": items,
        "env_steps_per_item": env_steps / written,
        "server_rss_bytes": [rss0, *rss],
        "bytes_per_item": per_item,
        "config": config_name,
        "paper_items": PAPER[builder.name],
        "paper_gib_growth": PAPER[builder.name] * per_item / 2**30,
        "paper_gib_with_base": (rss0 + PAPER[builder.name] * per_item) / 2**30,
        "fill_items_per_second": fill,
        "checkpoint_seconds": ckpt_seconds,
        "checkpoint_bytes": ckpt_bytes,
        "restore_seconds": restore_seconds,
        "restored_items": restored,
        "restore_rss_bytes": restore_rss,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", default="apex_atari", choices=["apex_atari", "r2d2_atari"])
    ap.add_argument("--items", type=int, default=1_000_000, help="transitions or sequences")
    ap.add_argument("--layouts", nargs="+", default=["packed", "zstd"], choices=LAYOUTS)
    args = ap.parse_args()
    print(header("bench/atari_scale.py"), flush=True)
    rows = []
    for layout in args.layouts:
        r = measure(args.config, layout, args.items)
        rows.append(r)
        print(
            f"{layout:<6} {r['items']:,} items: {r['bytes_per_item']:,.0f} B/item -> "
            f"{r['paper_gib_growth']:.2f} GiB at {r['paper_items']:,} "
            f"({r['paper_gib_with_base']:.2f} with the "
            f"base); checkpoint {r['checkpoint_bytes'] / 2**30:.2f} GiB in "
            f"{r['checkpoint_seconds']:.1f} s; restore {r['restored_items']:,} items in "
            f"{r['restore_seconds']:.1f} s (RSS {r['restore_rss_bytes'] / 2**30:.2f} GiB)",
            flush=True,
        )
    print(
        "\n| layout | items | server B/item | at paper scale (+ base) | checkpoint GiB | checkpoint s "
        "| restore s | restored RSS GiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['layout']} | {r['items']:,} | {r['bytes_per_item']:,.0f} | "
            f"{r['paper_gib_growth']:.2f} ({r['paper_gib_with_base']:.2f}) | "
            f"{r['checkpoint_bytes'] / 2**30:.2f} | {r['checkpoint_seconds']:.1f} | "
            f"{r['restore_seconds']:.1f} | {r['restore_rss_bytes'] / 2**30:.2f} |"
        )
    print("saved", save_results(f"atari_scale-{args.config}", {"args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
