r"""Where a learner step's CPU goes (issue 28), and the learner's variants side by side.

    .venv/bin/python bench/learner.py            # CartPole MLP and Atari conv, batch 64/256/512
    .venv/bin/python bench/learner.py --quick    # a few minutes: fewer seconds, one round

For each config (configs/apex_cartpole.py's MLP, configs/apex_atari.py's conv)
an in-process Reverb server with the config's table is filled by the config's
own actor (real transitions), and at each batch size this process's CPU time
(time.process_time: every thread, not wall time) is measured per SGD step for:

- sampling: the learner's dataset without its input transform, next() alone;
- transform: the agent's input transform (decoding) of one sampled batch, traced;
- sgd: the SGD step on a constant batch (no Reverb);
- priorities: mutate_priorities of one batch's keys on the in-process table;
- bookkeeping: the learner's per-step Python after the step (Learner._account:
  host copies, step count, batch statistics; the priority put stubbed out);
- inserts: the server's work for the inserts one SGD step stands for
  (batch / samples_per_insert items written by an actor in another process;
  this process's CPU while it inserts, per item);
- learner.step: the whole step fed by the table (sampling, transform, SGD,
  priority updates on their thread, bookkeeping), no inserts;

and learner.step again for each variant (learner.steps_per_call K, learner.
jit_compile), the variants in turn within each round (medians over rounds),
with the SGD step alone on a constant batch for each. Prints CPU ms per SGD
step and us per sampled transition, and writes bench/results/learner-<configs>-<commit>.json.
Run nothing else meanwhile; the figures are ratios within one run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

from common import ROOT, header, save_results

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# name: (config file, overrides); "cartpole-columns" is CartPole's layout before
# issue 28 (three columns per item), measured beside the default's one row.
CONFIGS = {
    "cartpole": ("apex_cartpole", {}),
    "cartpole-columns": ("apex_cartpole", {"replay.transition_layout": "columns"}),
    "atari": ("apex_atari", {}),
}
# name: (steps_per_call, jit_compile)
VARIANTS = {"base": (1, False), "jit": (1, True), "k4": (4, False), "k4_jit": (4, True)}
PARTS = ("sampling", "transform", "sgd", "priorities", "bookkeeping", "inserts")


def _config(name: str, batch: int, items: int, k: int = 1, jit: bool = False):
    from apex import apply_override, load_config_file

    path, overrides = CONFIGS[name]
    c = load_config_file(os.path.join(ROOT, "configs", f"{path}.py"))
    for field, value in overrides.items():
        apply_override(c, field, value)
    c.replay.capacity = max(items, batch)
    c.replay.min_size = 1
    c.replay.error_buffer = 1e12  # no throttling: measure the learner alone
    c.learner.batch_size = batch
    c.learner.steps_per_call = k
    c.learner.jit_compile = jit
    return c


class _Weights:
    def __init__(self, config, spec):
        from apex.agents import make_network

        self._w = make_network(config, spec, seed=0).get_weights()

    def get_variables(self):
        return 0, self._w, {}


def _fill(config, address: str, items: int) -> None:
    """The config's actor writes `items` items into the server at `address`."""
    import numpy as np
    import reverb

    from apex import env_spec
    from apex.agents import get_builder

    spec, builder = env_spec(config.env), get_builder(config)
    eps = np.geomspace(0.4, 0.01, config.actor.envs_per_actor).astype(np.float32)
    with builder.make_writer(reverb.Client(address), 0, eps, 0, lambda: False) as w:
        actor = builder.make_actor(config, 0, _Weights(config, spec), w)
        while actor.items_written < items:
            actor.step()
        actor.close()


def _insert_child(name: str, address: str, items: int, q) -> None:
    config = _config(name, 64, items)
    _fill(config, address, 64)  # imports and first steps outside the measured span
    q.put("start")
    _fill(config, address, items)
    q.put("done")


def insert_cpu_per_item(name: str, address: str, items: int) -> float:
    """This process's CPU seconds per item an actor in another process inserts
    into the server it hosts (the colocated server's insert work)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_insert_child, args=(name, address, items, q), daemon=True)
    proc.start()
    assert q.get(timeout=300) == "start"
    c0 = time.process_time()
    assert q.get(timeout=600) == "done"
    cpu = time.process_time() - c0
    proc.join(30)
    return cpu / items


def cpu_per_call(fn, seconds: float, min_calls: int = 2) -> float:
    """This process's CPU seconds per call of fn(), called for `seconds` (at least min_calls)."""
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while n < min_calls or time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    return (time.process_time() - c0) / n


def measure(name: str, batch: int, address: str, items: int, variants, args, rec) -> None:
    import tensorflow as tf

    from apex import Learner, SGDStep, env_spec
    from apex.agents import get_builder
    from apex.replay import make_dataset

    base_cfg = _config(name, batch, items)
    spec, builder = env_spec(base_cfg.env), get_builder(base_cfg)
    client = __import__("reverb").Client(address)
    learners = {}
    for v in variants:
        k, jit = VARIANTS[v]
        learners[v] = Learner(_config(name, batch, items, k, jit), spec, address)
        learners[v].start_priority_updates()
        learners[v].step()  # traces
    base = learners["base"]
    lc = base_cfg.learner
    raw = make_dataset(
        address,
        builder.item_signature(base_cfg, spec),
        batch,
        num_workers=lc.num_sample_workers,
        prefetch=lc.prefetch_batches,
        in_flight_batches=lc.in_flight_batches,
        table=builder.table,
    )
    raw_it = iter(raw)
    raw_sample = next(raw_it)
    transform = tf.function(builder.input_transform(base_cfg, spec))
    transform(raw_sample.data)  # traces
    sample = next(base._iterator)
    const = tf.data.Dataset.from_tensors(sample).repeat()
    const_its = {v: iter(const) for v in variants}
    # Each variant's SGD step on the constant batch: SGD steps of their own (a
    # traced step holds one iterator: switching would trace again).
    sgds = {v: SGDStep(_config(name, batch, items, *VARIANTS[v]), builder, spec) for v in variants}
    for v in variants:
        sgds[v].on_iterator(const_its[v], VARIANTS[v][0], 0)
    out = sgds["base"].on_iterator(const_its["base"])
    keys = sample.info.key.numpy().tolist()
    upd = dict(zip(keys, [1.0] * len(keys)))
    base._priorities.put = lambda *a, **kw: None  # bookkeeping without the sending
    base._sgd.update_target = lambda: None
    s = args.seconds
    for _ in range(args.repeats):
        rec(name, batch, "sampling", cpu_per_call(lambda: next(raw_it), s))
        rec(name, batch, "transform", cpu_per_call(lambda: transform(raw_sample.data), s))
        rec(
            name,
            batch,
            "sgd",
            cpu_per_call(lambda: sgds["base"].on_iterator(const_its["base"])["scalars"].numpy(), s),
        )
        rec(
            name,
            batch,
            "priorities",
            cpu_per_call(lambda: client.mutate_priorities(builder.table, updates=upd), s),
        )
        rec(name, batch, "bookkeeping", cpu_per_call(lambda: base._account(out, 0), s))
        for v in variants:
            ln = learners[v]
            k = ln._steps_per_call
            rec(
                name,
                batch,
                f"sgd_{v}",
                cpu_per_call(
                    lambda g=sgds[v], k=k, it=const_its[v]: g.on_iterator(it, k, 0)[
                        "scalars"
                    ].numpy(),
                    s,
                )
                / k,
            )
            ln.flush_priorities()
            before = ln.steps
            c0 = time.process_time()
            cpu_per_call(ln.step, s)
            ln.flush_priorities()  # the updates it sent count too
            rec(name, batch, f"step_{v}", (time.process_time() - c0) / (ln.steps - before))
    for ln in learners.values():
        ln.close()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="0.5 s per figure, one round")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--batches", nargs="+", type=int, default=[64, 256, 512])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--items", type=int, default=0, help="items filled (0: per config)")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.repeats = 0.5, 1
    if "base" not in args.variants:
        args.variants.insert(0, "base")

    import reverb

    from apex import env_spec
    from apex.agents import make_tables

    results: dict[str, dict[str, dict[str, list[float]]]] = {}

    def rec(name: str, batch: int, part: str, seconds: float) -> None:
        results.setdefault(name, {}).setdefault(str(batch), {}).setdefault(part, []).append(
            1000.0 * seconds
        )

    inserts: dict[str, float] = {}
    spi: dict[str, float] = {}
    for name in args.configs:
        items = args.items or (3_000 if name == "atari" else 20_000)
        cfg = _config(name, max(args.batches), items)
        spi[name] = float(cfg.replay.samples_per_insert)
        server = reverb.Server(make_tables(cfg, env_spec(cfg.env)))
        address = f"localhost:{server.port}"
        _fill(cfg, address, items)
        inserts[name] = insert_cpu_per_item(
            name, address, min(items, 800 if name == "atari" else 4_000)
        )
        for batch in args.batches:
            measure(name, batch, address, items, args.variants, args, rec)
            print(f"  {name} batch {batch} done", flush=True)
        server.stop()

    print(header("bench/learner.py"))
    print(
        f"medians of {args.repeats} x {args.seconds:g} s; CPU ms per SGD step (us per sampled transition)"
    )
    med: dict = {}
    for name, by_batch in results.items():
        print(
            f"\n{name} (samples_per_insert {spi[name]:g}; insert CPU {1e6 * inserts[name]:.0f} us per item)\n"
        )
        cols = [*PARTS, "sum of parts", *(f"learner.step {v}" for v in args.variants)]
        print("| batch | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for batch, parts in by_batch.items():
            b = int(batch)
            m = {p: statistics.median(v) for p, v in parts.items()}
            m["inserts"] = 1000.0 * inserts[name] * b / spi[name]
            m["sum of parts"] = sum(m[p] for p in PARTS)
            for v in args.variants:
                m[f"learner.step {v}"] = m[f"step_{v}"] + m["inserts"]
            med.setdefault(name, {})[batch] = m
            print(
                f"| {b} | " + " | ".join(f"{m[c]:.2f} ({1000 * m[c] / b:.1f})" for c in cols) + " |"
            )
        print("\nvariants: SGD on a constant batch, and learner.step (+ inserts), ratio to base\n")
        print("| batch | " + " | ".join(f"{v} sgd | {v} step" for v in args.variants) + " |")
        print("|---" * (2 * len(args.variants) + 1) + "|")
        for batch, m in med[name].items():
            cells = []
            for v in args.variants:
                cells.append(f"{m[f'sgd_{v}'] / m['sgd_base']:.2f}")
                cells.append(f"{m[f'learner.step {v}'] / m['learner.step base']:.2f}")
            print(f"| {batch} | " + " | ".join(cells) + " |")
    path = save_results(
        "learner-" + "-".join(args.configs),
        {
            "args": vars(args),
            "insert_cpu_s_per_item": inserts,
            "samples_per_insert": spi,
            "medians_cpu_ms_per_step": med,
            "samples_cpu_ms": results,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
