r"""Atari replay memory (issue 16): server bytes per env step, extrapolated to
paper scale, for each replay layout, side by side.

    .venv/bin/python bench/atari_replay.py                         # ~3-5 min on 2 cores
    .venv/bin/python bench/atari_replay.py --items 40000 --layouts packed zstd lz4
    .venv/bin/python bench/atari_replay.py --configs apex_atari --chunk_lengths 8 16 32
    .venv/bin/python bench/atari_replay.py --configs r2d2_atari --sequences 200 --chunk_lengths 4 8 16

For each config (configs/<name>.py) and layout ('packed': obs and next_obs
whole in every Ape-X item, every step's obs in each R2D2 sequence covering it;
'frames': each frame stored once, replay.frame_storage='auto'; 'zstd', 'lz4':
stored once and compressed on the actor, replay.frame_compression; zstd is the
default), a Reverb server process gets the config's tables and one actor of the
config (real Pong frames, the config's accumulator and the builder's writer at
its default chunk length, random initial weights) fills it over gRPC. Measured:
- the server's RSS growth per item between half and full (no fixed costs),
  per env step, and extrapolated to the paper's replay (Ape-X 2M transitions,
  R2D2 100k sequences) plus the process base;
- the actor's env steps/s while filling (acting + inserting, this machine);
- sampling: batches of 32 per second through the learner's dataset and input
  transform over gRPC (the learner's input rate; no SGD);
- the learner: SGD steps per second at the config's batch size (apex.learner,
  input pipeline and priority updates included), the layouts' learners in
  turn on their filled servers (median of rounds, ratio to the first layout);
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
# Layouts compared: the config overrides of each.
LAYOUTS = {
    "packed": {"replay.frame_storage": "packed"},  # obs whole in every item (before issue 16)
    "frames": {"replay.frame_storage": "auto", "replay.frame_compression": "none"},
    "zstd": {"replay.frame_storage": "auto", "replay.frame_compression": "zstd"},  # the default
    "lz4": {"replay.frame_storage": "auto", "replay.frame_compression": "lz4"},
}


class _Weights:
    """A VariableSource serving a config's network's initial weights."""

    def __init__(self, config, spec):
        from apex.agents import make_network

        self._w = make_network(config, spec, seed=0).get_weights()

    def get_variables(self):
        return 0, self._w, {}


def _dir_bytes(path: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files
    )


def start_server(path: str, overrides: dict, items: int):
    """A Reverb server process (suite._fill_server) with the tables of the
    config at `path` and `overrides`, sized to `items`: (process, its queue,
    done and go events, port, RSS before any item)."""
    ctx = mp.get_context("spawn")
    q, done, go = ctx.Queue(), ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_fill_server, args=(items, q, done, go, path, overrides), daemon=True)
    proc.start()
    _, port, rss0 = q.get(timeout=180)
    return proc, q, done, go, port, rss0


def fill_halves(actor, writer, client, table: str, items: int, q, go, timeout: float = 300):
    """Steps `actor` until `items` are in `table`, then until all are; after each
    half, the server process (suite._fill_server) reports its RSS. Returns the
    two RSS figures (their slope has no fixed costs), env steps/s and items/s
    of each half."""
    rss, env_rates, item_rates = [], [], []
    for target in (items // 2, items):
        t0, s0, i0 = time.perf_counter(), actor.env_steps, actor.items_written
        while actor.items_written < target:
            actor.step()
        seconds = time.perf_counter() - t0
        env_rates.append((actor.env_steps - s0) / seconds)
        item_rates.append((actor.items_written - i0) / seconds)
        writer.flush()
        while client.server_info()[table].current_size < target:
            time.sleep(0.2)
        go.set()
        rss.append(q.get(timeout=timeout)[2])
    return rss, env_rates, item_rates


def fill(config_name: str, layout: str, items: int, chunk_length: int | None, seconds: float):
    """Fills a server process with one actor of `config_name` in `layout`;
    measures its memory, the actor and sampling. Returns (result, the live
    server's context for the learner phase and finish())."""
    import numpy as np
    import reverb

    from apex import env_spec, load_config_file
    from apex.agents import get_builder, item_signature, table_name
    from apex.replay import make_dataset

    path = os.path.join(ROOT, "configs", f"{config_name}.py")
    overrides = LAYOUTS[layout]
    c = load_config_file(path)
    for k, v in overrides.items():
        setattr(c.replay, k.split(".")[1], v)
    builder = get_builder(c)
    spec = env_spec(c.env)
    proc, q, done, go, port, rss0 = start_server(path, overrides, items)
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
    with writer as w:
        actor = builder.make_actor(c, 0, _Weights(c, spec), w)
        rss, fill_rates, _ = fill_halves(actor, w, client, table, items, q, go)
        env_steps, written = actor.env_steps, actor.items_written
        actor.close()
    per_item = (rss[1] - rss[0]) / (items - items // 2)
    steps_per_item = env_steps / written
    # The learner's input: batches through its dataset and transform, over gRPC.
    signature = item_signature(c, spec)
    ds = make_dataset(
        f"localhost:{port}", signature, 32, table=table, transform=builder.input_transform(c, spec)
    )
    it = iter(ds)
    next(it)
    t0, batches = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        next(it)
        batches += 1
    sample_rate = batches / (time.perf_counter() - t0)
    del it, ds
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
        "actor_env_steps_per_second": fill_rates,
        "sampled_batches_of_32_per_second": sample_rate,
        "learner_batch_size": int(c.learner.batch_size),
        "frame_bytes_per_env_step": getattr(writer, "frame_bytes", 0) / max(1, env_steps),
    }
    context = {"config": c, "spec": spec, "port": port, "client": client, "proc": proc}
    context.update(done=done, written=written)
    return result, context


def finish(result: dict, context: dict) -> None:
    """Checkpoints the full table (seconds, bytes per item, extrapolated to 1M
    transitions), then stops the server."""
    client, written = context["client"], context["written"]
    steps_per_item = result["env_steps_per_item"]
    t0 = time.perf_counter()
    ckpt = client.checkpoint()
    ckpt_seconds = time.perf_counter() - t0
    ckpt_bytes = _dir_bytes(ckpt)
    shutil.rmtree(ckpt, ignore_errors=True)
    context["done"].set()
    context["proc"].join(10)
    result.update(
        checkpoint_seconds=ckpt_seconds,
        checkpoint_bytes_per_item=ckpt_bytes / written,
        checkpoint_gib_at_1m_transitions=ckpt_bytes / written * 1e6 / steps_per_item / 2**30,
        checkpoint_seconds_at_1m_transitions=ckpt_seconds / written * 1e6 / steps_per_item,
    )


def learners_side_by_side(rows: list[dict], contexts: list[dict], rounds: int, steps: int):
    """The learner of each layout (apex.learner: dataset, input transform,
    SGD step, priority updates) on its filled server, `steps` SGD steps each
    in turn, for `rounds` rounds (the order rotates each round): the median
    SGD steps/s per layout, and its ratio to the first layout's, measured
    side by side on this noisy machine."""
    import numpy as np

    from apex import Learner

    learners = [Learner(x["config"], x["spec"], f"localhost:{x['port']}") for x in contexts]
    for learner in learners:
        for _ in range(2):  # tracing, the first batches
            learner.step()
    rates: list[list[float]] = [[] for _ in learners]
    for r in range(rounds):
        for i in np.roll(np.arange(len(learners)), -r):
            t0 = time.perf_counter()
            for _ in range(steps):
                learners[i].step()
            rates[i].append(steps / (time.perf_counter() - t0))
    base = float(np.median(rates[0]))
    for row, rs in zip(rows, rates):
        row["learner_steps_per_second_rounds"] = rs
        row["learner_steps_per_second"] = float(np.median(rs))
        row["learner_ratio_to_first_layout"] = float(np.median(rs)) / base
    del learners


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--configs", nargs="+", default=["apex_atari", "r2d2_atari"])
    ap.add_argument("--layouts", nargs="+", default=["packed", "frames", "zstd"], choices=LAYOUTS)
    ap.add_argument("--items", type=int, default=10_000, help="Ape-X transitions per fill")
    ap.add_argument("--sequences", type=int, default=300, help="R2D2 sequences per fill")
    ap.add_argument("--chunk_lengths", type=int, nargs="+", default=[0], help="0: default")
    ap.add_argument("--sample_seconds", type=float, default=5.0)
    ap.add_argument("--learner_steps", type=int, default=5, help="SGD steps per layout and round")
    ap.add_argument("--learner_rounds", type=int, default=5, help="rounds of the learners in turn")
    args = ap.parse_args()
    print(header("bench/atari_replay.py"), flush=True)
    rows = []
    for name in args.configs:
        r2d2 = name.startswith("r2d2")
        group, contexts = [], []
        for layout in args.layouts:
            for chunk in args.chunk_lengths:
                n = args.sequences if r2d2 else args.items
                r, context = fill(name, layout, n, chunk or None, args.sample_seconds)
                group.append(r)
                contexts.append(context)
        if args.learner_rounds:
            learners_side_by_side(group, contexts, args.learner_rounds, args.learner_steps)
        for r, context in zip(group, contexts):
            finish(r, context)
            rows.append(r)
            print(
                f"{name} {r['layout']:<6} chunk {r['chunk_length'] or 'default':<7}: "
                f"{r['bytes_per_item']:,.0f} B per item, {r['bytes_per_env_step']:,.0f} B per "
                f"env step -> {r['paper_gib']:.2f} GiB at {r['paper_items']:,} items; actor "
                f"{r['actor_env_steps_per_second'][-1]:,.0f} env steps/s; sampling "
                f"{r['sampled_batches_of_32_per_second']:,.0f} batches/s; learner "
                f"{r.get('learner_steps_per_second', float('nan')):.2f} SGD steps/s "
                f"(batch {r['learner_batch_size']}, "
                f"{r.get('learner_ratio_to_first_layout', float('nan')):.2f}x the first "
                f"layout's); checkpoint {r['checkpoint_bytes_per_item']:,.0f} B/item "
                f"({r['checkpoint_gib_at_1m_transitions']:.2f} GiB, "
                f"{r['checkpoint_seconds_at_1m_transitions']:.0f} s at 1M transitions)",
                flush=True,
            )
    print(
        "\n| config | layout | chunk | B/item | B/env step | GiB at paper scale | actor steps/s "
        "| batches/s | learner SGD steps/s (ratio) | ckpt B/item |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['config']} | {r['layout']} | {r['chunk_length'] or 'default'} | "
            f"{r['bytes_per_item']:,.0f} | {r['bytes_per_env_step']:,.0f} | "
            f"{r['paper_gib']:.2f} ({r['paper_items']:,}) | "
            f"{r['actor_env_steps_per_second'][-1]:,.0f} | "
            f"{r['sampled_batches_of_32_per_second']:,.0f} | "
            f"{r.get('learner_steps_per_second', float('nan')):.2f} "
            f"({r.get('learner_ratio_to_first_layout', float('nan')):.2f}x) | "
            f"{r['checkpoint_bytes_per_item']:,.0f} |"
        )
    name = "atari_replay-" + "-".join(args.configs)  # runs of other configs do not overwrite it
    print("saved", save_results(name, {"args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
