r"""Component benchmark: each hot part of apex next to its bound, measured in one run.

    .venv/bin/python bench/components.py [--seconds 3] [--repeats 3] [--envs 16]

| part | bound (same run) | apex |
|---|---|---|
| acting | raw loop over E CartPole envs, random actions | VectorActor (batched numpy inference + n-step), no replay |
| inserting | legacy reverb Writer, constant items, server in another process | TransitionWriter.write of real batches, same server |
| actor process | raw env loop | VectorActor + TransitionWriter into that server |
| actor process | env + insert floor: the raw loop plus one constant item per env step through the same writer (no inference, no n-step) | VectorActor + TransitionWriter |
| learning | the learner's SGD step on a constant batch (no Reverb) | Learner.step fed by an in-process Reverb table |
| sampling | the learner's prefetching dataset drawn alone (no SGD) | transitions the Reverb-fed learner trains on per second |
| learning | 2-core ceiling: cpus / (CPU s per SGD step + CPU s per sampled batch), each measured alone, capped at the constant-input rate | Learner.step fed by Reverb |
| priority updates | - | mutate_priorities of one batch of keys, median ms |

Prints medians over --repeats and ratios, and writes
bench/results/components-<commit>.json. Part of issue 6's suite; not a test.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402


def _serve(config, port_queue, stop_event) -> None:
    import reverb

    from apex import env_spec
    from apex.agents import make_tables

    server = reverb.Server(make_tables(config, env_spec(config.env)))
    port_queue.put(server.port)
    stop_event.wait()
    server.stop()


def _config(envs: int):
    from apex import ApexConfig

    c = ApexConfig()
    c.actor.num_actors = 1
    c.actor.envs_per_actor = envs
    c.replay.capacity = 1_000_000
    c.replay.error_buffer = 1e12  # measure raw speed: no throttling
    c.replay.min_size = 1
    return c


# (label, bound's median key, apex's median key, unit): the table both this
# script and bench/suite.py print.
ROWS = (
    ("acting, no replay", "env_raw_steps_per_s", "actor_no_replay_steps_per_s", "env steps/s"),
    ("inserting", "insert_raw_items_per_s", "insert_apex_items_per_s", "items/s"),
    ("actor process / raw env", "env_raw_steps_per_s", "actor_process_steps_per_s", "env steps/s"),
    (
        "actor process / env + insert floor",
        "env_insert_floor_steps_per_s",
        "actor_process_steps_per_s",
        "env steps/s",
    ),
    (
        "learner from Reverb / constant input",
        "learner_constant_steps_per_s",
        "learner_reverb_steps_per_s",
        "steps/s",
    ),
    (
        "learner from Reverb / 2-core ceiling",
        "learner_ceiling_steps_per_s",
        "learner_reverb_steps_per_s",
        "steps/s",
    ),
    (
        "sampling: learner's use / dataset alone",
        "sample_transitions_per_s",
        "learner_reverb_transitions_per_s",
        "transitions/s",
    ),
)


def timed(fn, seconds: float) -> float:
    """Calls fn() (which returns a count) until `seconds` pass; returns counts per second."""
    return timed_cpu(fn, seconds)[0]


def timed_cpu(fn, seconds: float) -> tuple[float, float]:
    """(counts per second, this process's CPU seconds per count) of calling fn()
    (which returns a count) until `seconds` pass; CPU counts every thread."""
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        n += fn()
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / max(n, 1)


class _Null:
    seconds_writing = 0.0
    can_store_frames = False  # an ItemWriter (apex.roles) of whole items
    frames_written = 0
    frame_bytes = 0

    def write(self, batch, priorities) -> None:
        pass


class _Recorder(_Null):
    batch = None

    def write(self, batch, priorities) -> None:
        self.batch = batch


class _Weights:
    def __init__(self, config):
        from apex.agents import QNetwork

        self.net = QNetwork(4, 2, config.learner.hidden_sizes, seed=0)

    def get_variables(self):
        return 0, self.net.get_weights(), {}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--envs", type=int, default=16)
    args = ap.parse_args()

    import reverb
    import tensorflow as tf

    from apex import Learner, env_spec, git_commit, make_env
    from apex.agents import TRANSITIONS_TABLE, VectorActor
    from apex.replay import TransitionWriter

    cfg = _config(args.envs)
    spec = env_spec(cfg.env)
    ctx = mp.get_context("spawn")
    ports, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve, args=(cfg, ports, stop), daemon=True)
    proc.start()
    address = f"localhost:{ports.get(timeout=120)}"
    client = reverb.Client(address)
    results: dict[str, list[float]] = {}

    def rec(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    envs = [make_env(cfg.env, seed=i) for i in range(args.envs)]
    for i, e in enumerate(envs):
        e.reset(seed=i)
    rng = np.random.default_rng(0)

    def raw_step() -> int:
        acts = rng.integers(0, 2, size=len(envs))
        for e, a in zip(envs, acts):
            _, _, term, trunc, _ = e.step(int(a))
            if term or trunc:
                e.reset()
        return len(envs)

    actor_null = VectorActor(cfg, 0, _Weights(cfg), _Null())
    recorder = _Recorder()  # a real batch of transitions for the insert measurements
    a2 = VectorActor(cfg, 0, _Weights(cfg), recorder)
    while recorder.batch is None:
        a2.step()
    batch = recorder.batch
    prios = np.ones(len(batch["action"]))

    from apex.replay import pack_transitions

    # The bound: the same packed columns of one constant item, appended in a bare loop.
    packed = pack_transitions(batch, 0, batch["slot"], np.full(len(prios), 0.1), 0.0)
    item = {k: v[0] for k, v in packed.items()}

    # The floor of any actor that writes one item per env step: the raw loop
    # plus one constant item per env step through the same writer.
    const_columns = {k: np.repeat(v[:1], args.envs, axis=0) for k, v in packed.items()}
    const_prios = np.ones(args.envs)

    def env_insert_floor(w) -> int:
        raw_step()
        w._insert(const_columns, const_prios)
        return args.envs

    def raw_insert(w) -> int:
        for _ in range(64):
            w.append(item)
            w.create_item(TRANSITIONS_TABLE, 1, 1.0)
        return 64

    for _ in range(args.repeats):
        rec("env_raw_steps_per_s", timed(raw_step, args.seconds))
        rec(
            "actor_no_replay_steps_per_s",
            timed(lambda: (actor_null.step(), args.envs)[1], args.seconds),
        )
        with client.writer(16, chunk_length=16) as w:
            rec("insert_raw_items_per_s", timed(lambda: raw_insert(w), args.seconds))
        with TransitionWriter(
            client, TRANSITIONS_TABLE, 0, np.full(args.envs, 0.1, np.float32)
        ) as tw:
            rec(
                "insert_apex_items_per_s",
                timed(lambda: (tw.write(batch, prios), len(prios))[1], args.seconds),
            )
        with TransitionWriter(
            client, TRANSITIONS_TABLE, 0, np.full(args.envs, 0.1, np.float32)
        ) as tw:
            rec("env_insert_floor_steps_per_s", timed(lambda: env_insert_floor(tw), args.seconds))
        with TransitionWriter(
            client, TRANSITIONS_TABLE, 0, np.full(args.envs, 0.1, np.float32)
        ) as tw:
            actor = VectorActor(cfg, 0, _Weights(cfg), tw)
            rec(
                "actor_process_steps_per_s",
                timed(lambda a=actor: (a.step(), args.envs)[1], args.seconds),
            )

    # Learner: in-process Reverb (the default layout) vs the same step on a constant batch.
    stop.set()
    proc.join(10)
    from apex.agents import make_tables

    lcfg = _config(args.envs)
    server = reverb.Server(make_tables(lcfg, spec))
    laddr = f"localhost:{server.port}"
    lclient = reverb.Client(laddr)
    with TransitionWriter(lclient, TRANSITIONS_TABLE, 0, np.full(args.envs, 0.1, np.float32)) as tw:
        actor = VectorActor(lcfg, 0, _Weights(lcfg), tw)
        while actor.items_written < 30_000:
            actor.step()
    learner = Learner(lcfg, spec, laddr)
    learner.start_priority_updates()
    learner.step()  # makes its iterator
    sample = next(learner._iterator)
    const_iter = iter(tf.data.Dataset.from_tensors(sample).repeat())

    def const_step() -> int:
        learner._sgd.on_iterator(const_iter)["scalars"].numpy()
        return 1

    def sample_only() -> int:
        next(learner._iterator)
        return lcfg.learner.batch_size

    keys = sample.info.key.numpy()
    lat = []
    for _ in range(args.repeats):
        rate, cpu = timed_cpu(sample_only, args.seconds)
        rec("sample_transitions_per_s", rate)
        rec("sample_cpu_ms_per_batch", 1000 * cpu * lcfg.learner.batch_size)
        const_step()  # each switch of iterator traces the SGD step once (on_iterator): untimed
        rate, cpu = timed_cpu(const_step, args.seconds)
        rec("learner_constant_steps_per_s", rate)
        rec("sgd_cpu_ms_per_step", 1000 * cpu)
        learner.step()
        rec("learner_reverb_steps_per_s", timed(lambda: (learner.step(), 1)[1], args.seconds))
        for _ in range(50):
            t0 = time.perf_counter()
            lclient.mutate_priorities(
                TRANSITIONS_TABLE, updates=dict(zip(keys.tolist(), [1.0] * len(keys)))
            )
            lat.append(1000 * (time.perf_counter() - t0))
    learner.close()
    server.stop()

    med = {k: statistics.median(v) for k, v in results.items()}
    med["learner_reverb_transitions_per_s"] = (
        med["learner_reverb_steps_per_s"] * lcfg.learner.batch_size
    )
    med["priority_update_ms_per_batch"] = statistics.median(lat)
    # SGD and sampling each measured alone, in CPU time: spread over every
    # core with nothing else running, a Reverb-fed step cannot beat this.
    med["learner_ceiling_steps_per_s"] = min(
        med["learner_constant_steps_per_s"],
        (os.cpu_count() or 1)
        * 1000.0
        / (med["sgd_cpu_ms_per_step"] + med["sample_cpu_ms_per_batch"]),
    )
    commit = git_commit(ROOT)
    print(
        f"apex bench/components.py  commit {commit}  {os.cpu_count()} cpus  envs={args.envs}  "
        f"batch={lcfg.learner.batch_size}  medians of {args.repeats} x {args.seconds:g} s"
    )
    print("\n| part | bound | apex | apex / bound | unit |\n|---|---|---|---|---|")
    for label, bound, ours, unit in ROWS:
        print(
            f"| {label} | {med[bound]:,.0f} | {med[ours]:,.0f} | {med[ours] / med[bound]:.2f} | {unit} |"
        )
    print(
        f"| priority update (mutate_priorities, {len(keys)} keys) | - | {med['priority_update_ms_per_batch']:.2f} | - | ms |"
    )
    print(
        f"| CPU per SGD step / per sampled batch, each alone | {med['sgd_cpu_ms_per_step']:.2f} "
        f"| {med['sample_cpu_ms_per_batch']:.2f} | - | CPU ms |"
    )
    out = os.path.join(ROOT, "bench", "results", f"components-{(commit or 'nocommit')[:12]}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(
            {
                "commit": commit,
                "time": time.time(),
                "machine": platform.platform(),
                "args": vars(args),
                "medians": med,
                "samples": results,
            },
            f,
            indent=2,
        )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
