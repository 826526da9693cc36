r"""Atari replay memory (issue 16): server bytes per env step, extrapolated to
paper scale, for each replay layout, side by side.

    .venv/bin/python bench/atari_replay.py                         # ~3-5 min on 2 cores
    .venv/bin/python bench/atari_replay.py --items 40000 --layouts packed auto
    .venv/bin/python bench/atari_replay.py --configs apex_atari --chunk_lengths 8 16 32
    .venv/bin/python bench/atari_replay.py --configs r2d2_atari --sequences 200 --chunk_lengths 4 8 16

For each config (configs/<name>.py) and layout (replay.frame_storage: 'packed'
stores obs and next_obs whole in every Ape-X item and every step's obs in each
R2D2 sequence covering it, 'auto' stores each frame once), a Reverb server process gets the config's tables and one actor of the
config (real Pong frames, the config's accumulator and the builder's writer at
its default chunk length, random initial weights) fills it over gRPC. Measured:
- the server's RSS growth per item between half and full (no fixed costs),
  per env step, and extrapolated to the paper's replay (Ape-X 2M transitions,
  R2D2 100k sequences) plus the process base;
- the actor's env steps/s while filling (acting + inserting, this machine);
- sampling: batches of 32 per second through the learner's dataset and input
  transform over gRPC (the learner's input rate; no SGD);
- a checkpoint of the full table: seconds and bytes per item, extrapolated
  to 1M transitions.
Writes bench/results/atari_replay-<configs>-<commit>.json. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import time

from common import ROOT, header, save_results
from suite import _fill_server

PAPER = {"apex_dqn": 2_000_000, "r2d2": 100_000}  # items in the papers' replays


class _Weights:
    """A VariableSource serving a config's network's initial weights."""

    def __init__(self, config, spec):
        from apex.agents.policy import make_network

        self._w = make_network(config, spec, seed=0).get_weights()

    def get_variables(self):
        return 0, self._w, {}


def _dir_bytes(path: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files
    )


def measure(config_name: str, layout: str, items: int, chunk_length: int | None, seconds: float):
    import numpy as np
    import reverb

    from apex.agents import get_builder
    from apex.config import load_config_file
    from apex.envs import env_spec
    from apex.replay.dataset import make_dataset
    from apex.replay.tables import item_signature, table_name

    path = os.path.join(ROOT, "configs", f"{config_name}.py")
    overrides = {"replay.frame_storage": layout}
    c = load_config_file(path)
    for k, v in overrides.items():
        setattr(c.replay, k.split(".")[1], v)
    builder = get_builder(c)
    spec = env_spec(c.env)
    ctx = mp.get_context("spawn")
    q, done, go = ctx.Queue(), ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_fill_server, args=(items, q, done, go, path, overrides), daemon=True)
    proc.start()
    _, port, rss0 = q.get(timeout=180)
    client = reverb.Client(f"localhost:{port}")
    table = table_name(c)
    e = c.actor.envs_per_actor
    eps = np.geomspace(0.4, 0.01, e).astype(np.float32)
    writer = builder.make_writer(client, 0, eps, 0, lambda: False)
    if chunk_length is not None:  # a variant: another chunk length for every column
        writer.close()
        # (R2D2's frame layout has its own: frame_chunk_length)
        frame = {"frame_chunk_length": chunk_length} if builder.name == "r2d2" else {}
        writer = type(writer)(client, 0, eps, chunk_length=chunk_length, table=table, **frame)
    rss, fill = [], []
    with writer as w:
        actor = builder.make_actor(c, 0, _Weights(c, spec), w)
        for target in (items // 2, items):  # the slope between half and full: no fixed costs
            t0, s0 = time.perf_counter(), actor.env_steps
            while actor.items_written < target:
                actor.step()
            fill.append((actor.env_steps - s0) / (time.perf_counter() - t0))
            w.flush()
            while client.server_info()[table].current_size < target:
                time.sleep(0.2)
            go.set()
            rss.append(q.get(timeout=120)[2])
        env_steps, written = actor.env_steps, actor.items_written
        actor.close()
    per_item = (rss[1] - rss[0]) / (items - items // 2)
    steps_per_item = env_steps / written
    # The learner's input: batches through its dataset and transform, over gRPC.
    signature = item_signature(c, spec)
    ds = make_dataset(
        f"localhost:{port}", signature, 32, table=table, transform=builder.input_transform()
    )
    it = iter(ds)
    next(it)
    t0, batches = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        next(it)
        batches += 1
    sample_rate = batches / (time.perf_counter() - t0)
    del it, ds
    t0 = time.perf_counter()
    ckpt = client.checkpoint()
    ckpt_seconds = time.perf_counter() - t0
    ckpt_bytes = _dir_bytes(ckpt)
    shutil.rmtree(ckpt, ignore_errors=True)
    done.set()
    proc.join(10)
    paper = PAPER[builder.name]
    result = {
        "config": config_name,
        "layout": layout,
        "stores_frames": bool(getattr(writer, "stores_frames", False)),
        "chunk_length": chunk_length,
        "items": items,
        "server_rss_bytes": [rss0, *rss],
        "bytes_per_item": per_item,
        "env_steps_per_item": steps_per_item,
        "bytes_per_env_step": per_item / steps_per_item,
        "paper_items": paper,
        "paper_gib": (rss0 + paper * per_item) / 2**30,
        "actor_env_steps_per_second": fill,
        "sampled_batches_of_32_per_second": sample_rate,
        "checkpoint_seconds": ckpt_seconds,
        "checkpoint_bytes_per_item": ckpt_bytes / written,
        "checkpoint_gib_at_1m_transitions": ckpt_bytes / written * 1e6 / steps_per_item / 2**30,
        "checkpoint_seconds_at_1m_transitions": ckpt_seconds / written * 1e6 / steps_per_item,
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--configs", nargs="+", default=["apex_atari", "r2d2_atari"])
    ap.add_argument("--layouts", nargs="+", default=["packed", "auto"])
    ap.add_argument("--items", type=int, default=10_000, help="Ape-X transitions per fill")
    ap.add_argument("--sequences", type=int, default=300, help="R2D2 sequences per fill")
    ap.add_argument("--chunk_lengths", type=int, nargs="+", default=[0], help="0: default")
    ap.add_argument("--sample_seconds", type=float, default=5.0)
    args = ap.parse_args()
    print(header("bench/atari_replay.py"), flush=True)
    rows = []
    for name in args.configs:
        r2d2 = name.startswith("r2d2")
        for layout in args.layouts:
            for chunk in args.chunk_lengths:
                n = args.sequences if r2d2 else args.items
                r = measure(name, layout, n, chunk or None, args.sample_seconds)
                rows.append(r)
                print(
                    f"{name} {layout:<6} chunk {chunk or 'default':<7}: {r['bytes_per_item']:,.0f} B "
                    f"per item, {r['bytes_per_env_step']:,.0f} B per env step -> "
                    f"{r['paper_gib']:.2f} GiB at {r['paper_items']:,} items; actor "
                    f"{r['actor_env_steps_per_second'][-1]:,.0f} env steps/s; sampling "
                    f"{r['sampled_batches_of_32_per_second']:,.0f} batches/s; checkpoint "
                    f"{r['checkpoint_bytes_per_item']:,.0f} B/item "
                    f"({r['checkpoint_gib_at_1m_transitions']:.2f} GiB, "
                    f"{r['checkpoint_seconds_at_1m_transitions']:.0f} s at 1M transitions)",
                    flush=True,
                )
    print(
        "\n| config | layout | chunk | B/item | B/env step | GiB at paper scale | actor steps/s "
        "| batches/s | ckpt B/item |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['config']} | {r['layout']} | {r['chunk_length'] or 'default'} | "
            f"{r['bytes_per_item']:,.0f} | {r['bytes_per_env_step']:,.0f} | "
            f"{r['paper_gib']:.2f} ({r['paper_items']:,}) | "
            f"{r['actor_env_steps_per_second'][-1]:,.0f} | "
            f"{r['sampled_batches_of_32_per_second']:,.0f} | {r['checkpoint_bytes_per_item']:,.0f} |"
        )
    name = "atari_replay-" + "-".join(args.configs)  # runs of other configs do not overwrite it
    print("saved", save_results(name, {"args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
