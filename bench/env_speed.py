r"""Envs at native speed: an actor alone per env.vectorization mode, its floor,
and the Nature-conv SGD step with and without oneDNN, side by side.

    .venv/bin/python bench/env_speed.py                 # all figures, 3 rounds (~12 min)
    .venv/bin/python bench/env_speed.py --only sgd --rounds 2 --seconds 10

Every figure is one fresh process (TF_ENABLE_ONEDNN_OPTS must be set before
TensorFlow's import), the variants of a figure in turn within each round;
medians over rounds, ratios of medians. Figures:

- pong actor: configs/apex_atari.py's Ape-X actor alone, 16 envs, the
  network's initial weights (never updated), writing to a real Reverb server
  in another process that nobody samples (no rate limit holds the inserts):
  agent steps/s and the actor process's CPU ms per agent step (every thread:
  ALE's too). Variants: 'today' (env.vectorization=python, oneDNN off: the
  actor before this bench existed), 'python' (oneDNN on), 'ale' (oneDNN on,
  the default), 'ale_overlap' (the same with actor.overlap: two halves
  stepped in turn), and 'floor': ALE's vector env stepping the same 16 envs with
  the same conv forward over all slots per step, epsilon-greedy, no replay;
  'overlap': the floor with the slots in two halves (two ALE vector envs):
  one half's Q-values computed while the other half's envs step in C++
  (send/recv, the Sebulba pattern).
- cartpole actor: configs/apex_cartpole.py's actor alone the same way, 16
  envs: 'today' (python, oneDNN off) and 'gymnasium' (oneDNN on, the default):
  CPU us per env step.
- sgd: the Nature-conv double-DQN SGD step of configs/apex_atari.py on a
  constant batch of 32 real Pong transitions (apex.SGDStep): steps/s (wall)
  and CPU ms per step, oneDNN off ('today') and on.

Writes bench/results/env_speed-<commit>.json. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time

from common import ROOT, header, save_results

CONFIGS = {"pong": "configs/apex_atari.py", "cartpole": "configs/apex_cartpole.py"}
# figure -> variant -> (worker, vectorization, oneDNN)
FIGURES = {
    "pong": {
        "today": ("actor", "python", "0"),
        "python": ("actor", "python", "1"),
        "ale": ("actor", "ale", "1"),
        "ale_overlap": ("actor", "ale+overlap", "1"),
        "floor": ("floor", "ale", "1"),
        "overlap": ("overlap", "ale", "1"),
    },
    "cartpole": {"today": ("actor", "python", "0"), "gymnasium": ("actor", "gymnasium", "1")},
    "sgd": {"today": ("sgd", "python", "0"), "onednn": ("sgd", "python", "1")},
}


def _config(figure: str, mode: str, envs: int):
    sys.path.insert(0, ROOT)
    from apex import load_config_file

    c = load_config_file(os.path.join(ROOT, CONFIGS.get(figure, CONFIGS["pong"])))
    c.actor.envs_per_actor = envs
    c.env.vectorization, _, overlap = mode.partition("+")
    c.actor.overlap = bool(overlap)  # 'ale+overlap': actor.overlap on
    c.replay.capacity = 200_000
    c.replay.min_size = 1
    c.replay.error_buffer = 1e9  # nobody samples: inserts never wait
    return c


def _serve(figure: str, mode: str, envs: int, q, stop) -> None:
    """A Reverb server with the config's tables, in a process of its own."""
    import reverb

    from apex import env_spec
    from apex.agents import make_tables

    c = _config(figure, mode, envs)
    server = reverb.Server(make_tables(c, env_spec(c.env)))
    q.put(server.port)
    stop.wait()
    server.stop()


class _Weights:
    """A VariableSource serving the network's initial weights, version 0, never newer."""

    def __init__(self, weights):
        self._w = weights

    def get_variables(self):
        return 0, self._w, {}


def _timed(step, warmup: float, seconds: float) -> dict:
    """Calls step() (returns env steps done) for `warmup` then `seconds`: wall and CPU."""
    t_end = time.perf_counter() + warmup
    while time.perf_counter() < t_end:
        step()
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - t0 < seconds:
        n += step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"steps": n, "wall": wall, "cpu": cpu, "per_s": n / wall, "cpu_us": 1e6 * cpu / n}


def worker_actor(figure: str, mode: str, envs: int, warmup: float, seconds: float) -> dict:
    from apex import env_spec, slot_epsilons
    from apex.agents import VectorActor, make_network, table_name
    from apex.replay import TransitionWriter

    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=_serve, args=(figure, mode, envs, q, stop), daemon=True)
    server.start()
    try:
        port = q.get(timeout=180)
        import reverb

        c = _config(figure, mode, envs)
        spec = env_spec(c.env)
        client = reverb.Client(f"localhost:{port}")
        eps = slot_epsilons(
            0, envs, c.actor.num_actors, c.actor.epsilon_base, c.actor.epsilon_alpha
        )
        source = _Weights(make_network(c, spec, seed=0).get_weights())
        with TransitionWriter(client, table_name(c), 0, eps) as writer:
            actor = VectorActor(c, 0, source, writer)

            def step() -> int:
                actor.step()
                return envs

            out = _timed(step, warmup, seconds)
            out["items"] = actor.items_written
            actor.close()
        return out
    finally:
        stop.set()
        server.join(30)


def worker_floor(figure: str, mode: str, envs: int, warmup: float, seconds: float) -> dict:
    """ALE's vector env and the conv forward over all slots per step: no replay."""
    import numpy as np

    from apex import make_slots
    from apex.agents import make_network, make_policy

    c = _config("pong", "ale", envs)
    slots = make_slots(c.env, envs)
    policy = make_policy(c, slots.spec)
    policy.set_weights(make_network(c, slots.spec, seed=0).get_weights())
    obs = slots.reset(list(range(envs)))
    rng = np.random.default_rng(0)
    eps = np.linspace(0.01, 0.4, envs)
    state = {"obs": obs}

    def step() -> int:
        q, _ = policy(state["obs"])
        explore = rng.random(envs) < eps
        actions = np.where(explore, rng.integers(0, slots.num_actions, envs), q.argmax(axis=1))
        out = slots.step(actions)
        nxt = out.next_obs
        for j, first in out.reset_obs.items():
            nxt[j] = first
        state["obs"] = nxt
        return envs

    out = _timed(step, warmup, seconds)
    slots.close()
    return out


def worker_sgd(figure: str, mode: str, envs: int, warmup: float, seconds: float) -> dict:
    """The conv SGD step on a constant batch of 32 real Pong transitions."""
    import reverb
    import tensorflow as tf

    from apex import SGDStep, env_spec, slot_epsilons
    from apex.agents import VectorActor, get_builder, make_network, make_tables, table_name
    from apex.replay import TransitionWriter, make_dataset

    c = _config("pong", "ale", 8)
    c.learner.batch_size = 32
    spec, builder = env_spec(c.env), get_builder(c)
    server = reverb.Server(make_tables(c, spec))
    client = reverb.Client(f"localhost:{server.port}")
    eps = slot_epsilons(0, 8, 1, 0.4, 7.0)
    with TransitionWriter(client, table_name(c), 0, eps) as writer:
        actor = VectorActor(c, 0, _Weights(make_network(c, spec, seed=0).get_weights()), writer)
        while actor.items_written < 200:
            actor.step()
        actor.close()
    data = make_dataset(
        f"localhost:{server.port}",
        builder.item_signature(c, spec),
        32,
        table=builder.table,
        transform=builder.input_transform(c, spec),  # as the learner's dataset has it
    )
    sample = next(iter(data))
    sgd = SGDStep(c, builder, spec)
    it = iter(tf.data.Dataset.from_tensors(sample).repeat())

    def step() -> int:
        sgd.on_iterator(it)["scalars"].numpy()
        return 1

    out = _timed(step, warmup, seconds)
    server.stop()
    return out


def worker_overlap(figure: str, mode: str, envs: int, warmup: float, seconds: float) -> dict:
    """The floor in two halves: half A's forward pass while half B's envs step."""
    import numpy as np
    from ale_py.vector_env import AtariVectorEnv

    from apex import make_slots
    from apex.agents import make_network, make_policy

    c = _config("pong", "ale", envs)
    probe = make_slots(c.env, 1)
    spec = probe.spec
    probe.close()
    policy = make_policy(c, spec)
    policy.set_weights(make_network(c, spec, seed=0).get_weights())
    half = envs // 2
    halves = [
        AtariVectorEnv(
            "pong",
            half,
            num_threads=min(half, 2),
            autoreset_mode="SameStep",
            stack_num=c.env.frame_stack,
            noop_max=c.env.noop_max,
            reward_clipping=False,
            use_fire_reset=False,
        )
        for _ in range(2)
    ]
    rng = np.random.default_rng(0)
    eps = np.linspace(0.01, 0.4, half)

    def act(obs):
        q, _ = policy(obs)
        explore = rng.random(half) < eps
        return np.where(explore, rng.integers(0, spec.num_actions, half), q.argmax(axis=1))

    obs = [h.reset(seed=np.arange(i * half, (i + 1) * half))[0] for i, h in enumerate(halves)]
    actions = [act(obs[0]), None]
    halves[1].send(act(obs[1]))

    def step() -> int:
        halves[0].send(actions[0])
        actions[1] = act(halves[1].recv()[0])  # B's Q-values while A steps
        halves[1].send(actions[1])
        actions[0] = act(halves[0].recv()[0])  # A's while B steps
        return envs

    out = _timed(step, warmup, seconds)
    halves[1].recv()
    for h in halves:
        h.close()
    return out


WORKERS = {
    "actor": worker_actor,
    "floor": worker_floor,
    "overlap": worker_overlap,
    "sgd": worker_sgd,
}


def run_variant(figure: str, variant: str, args) -> dict:
    worker, mode, onednn = FIGURES[figure][variant]
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, OPENBLAS_NUM_THREADS="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cmd = [sys.executable, __file__, "--worker", worker, "--figure", figure, "--mode", mode]
    cmd += ["--envs", str(args.envs), "--seconds", str(args.seconds), "--warmup", str(args.warmup)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{figure}/{variant} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", default=list(FIGURES), choices=list(FIGURES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--figure", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        out = WORKERS[args.worker](args.figure, args.mode, args.envs, args.warmup, args.seconds)
        print(json.dumps(out), flush=True)
        return
    print(header("env_speed.py"), flush=True)
    runs: dict = {f: {v: [] for v in FIGURES[f]} for f in args.only}
    for r in range(args.rounds):
        for figure in args.only:
            for variant in FIGURES[figure]:
                out = run_variant(figure, variant, args)
                runs[figure][variant].append(out)
                print(
                    f"round {r + 1} {figure:8s} {variant:9s} {out['per_s']:9.1f} /s  "
                    f"{out['cpu_us']:9.1f} us CPU per step",
                    flush=True,
                )
    summary: dict = {}
    print("\nmedians (steps: agent steps for the actors, SGD steps for sgd)")
    for figure, variants in runs.items():
        med = {
            v: {
                "per_s": statistics.median(x["per_s"] for x in xs),
                "cpu_us": statistics.median(x["cpu_us"] for x in xs),
            }
            for v, xs in variants.items()
        }
        base = med["today"]
        for v, m in med.items():
            m["speedup"] = m["per_s"] / base["per_s"]
            m["cpu_ratio"] = m["cpu_us"] / base["cpu_us"]
            print(
                f"{figure:8s} {v:9s} {m['per_s']:9.1f} /s  {m['cpu_us']:9.1f} us CPU  "
                f"x{m['speedup']:.2f} of today's rate, CPU x{m['cpu_ratio']:.2f}"
            )
        if "floor" in med:
            m = med["ale"]
            m["floor_ratio"] = med["floor"]["per_s"] / m["per_s"]
            print(f"{figure:8s} floor / ale rate: {m['floor_ratio']:.2f}")
            overlap = med["overlap"]["per_s"] / med["floor"]["per_s"]
            print(f"{figure:8s} overlap / floor rate: {overlap:.2f}")
            m["overlap_ratio"] = med["ale_overlap"]["per_s"] / m["per_s"]
            print(f"{figure:8s} ale_overlap / ale rate: {m['overlap_ratio']:.2f}")
        summary[figure] = med
    path = save_results("env_speed", {"args": vars(args), "runs": runs, "medians": summary})
    print(f"\nwrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
