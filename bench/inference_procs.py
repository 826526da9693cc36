"""The processes of bench/inference.py: the inference server, the actors (local
or central inference) and the forward-pass timer, each a child of the bench
(bench/children.py) that answers it over a pipe."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np
from children import child_setup, parent_gone
from common import ROOT

from apex import InferenceService

NETS = {"mlp": "configs/apex_cartpole.py", "conv": "configs/apex_atari.py"}


def load_config(net: str, num_actors: int, max_batch: int) -> tuple[Any, Any]:
    from apex import load_config_file, prepare_env

    config = load_config_file(os.path.join(ROOT, NETS[net]))
    config.actor.num_actors = num_actors
    config.inference.max_batch = max_batch
    spec = prepare_env(config).spec
    return config, spec


class DiscardWriter:
    """An ItemWriter (apex.roles) that counts items and keeps none."""

    def __init__(self) -> None:
        self.items_written = 0
        self.seconds_writing = 0.0
        self.can_store_frames = False  # takes whole items only
        self.frames_written = 0
        self.frame_bytes = 0

    def write(self, batch: dict, priorities: Any) -> None:
        self.items_written += len(priorities)

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float = 3.0) -> bool:
        return True

    def __enter__(self) -> DiscardWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class TimedQ:
    """Wraps an actor's Q source (LocalQ or RemoteQ): the time of each call, as the
    actor sees it, while `flag.value` is set."""

    def __init__(self, inner: Any, flag: Any):
        self._inner = inner
        self._flag = flag
        self.samples: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __call__(self, obs: np.ndarray, state: Any = None) -> Any:
        t = time.perf_counter()
        out = self._inner(obs, state)
        if self._flag.value:
            self.samples.append(time.perf_counter() - t)
        return out


class _BenchInference(InferenceService):
    """The inference process's RPCs: InferenceNode's `infer`, `version` and
    `stats` (apex.inference.InferenceService), a learner's `get_variables` (a
    new version each pull, as a training learner), and the bench's `configure`."""

    def __init__(self, server: Any, weights: list[np.ndarray], timeout: float):
        super().__init__(server, timeout)
        self._weights = weights
        self._lock = threading.Lock()
        self._pulls = 0

    def get_variables(self):
        with self._lock:
            self._pulls += 1
            version = self._pulls
        return version, self._weights, {"max_priority": 1.0}

    def configure(self, wait_ms: float, expected_clients: int) -> None:
        """inference.max_wait_ms and the number of actors sending requests."""
        self._server.max_wait = float(wait_ms) / 1000.0
        self._server.expected_clients = int(expected_clients)


def server_main(net: str, num_actors: int, max_batch: int, conn: Any) -> None:
    child_setup()
    ppid = os.getppid()
    try:
        from apex import BatchingServer, bucket_size, compat
        from apex.agents import make_network, make_policy

        config, spec = load_config(net, num_actors, max_batch)
        policy = make_policy(config, spec)
        weights = [np.asarray(w) for w in make_network(config, spec).get_weights()]
        pad = config.learner.torso != "mlp"
        e = config.actor.envs_per_actor
        # Trace every padded shape a batch can take before anything is measured.
        policy.set_weights(weights)
        dtype = np.uint8 if spec.observation_dtype == "uint8" else np.float32
        for rows in sorted({bucket_size(n * e, max_batch) if pad else e for n in range(1, 9)}):
            policy(np.zeros((rows, *spec.observation_shape), dtype), None)
        server = BatchingServer(
            policy,
            max_batch,
            config.inference.max_wait_ms / 1000.0,
            expected_clients=num_actors,
            pad=pad,
            obs_shape=tuple(spec.observation_shape),
        )
        server.set_weights(0, weights, {"max_priority": 1.0})
        node = _BenchInference(server, weights, config.inference.call_timeout_seconds)
        from launch.ray_host import free_ports

        (port,) = free_ports(1)
        # The pool as launch/program.py sizes the inference node's.
        courier_server = compat.courier_server(
            node, port, thread_pool_size=max(16, 2 * num_actors + 4)
        )
        stop = threading.Event()

        def follow() -> None:  # a training learner: new parameters every period
            version = 0
            while not stop.wait(config.inference.params_period_seconds):
                version += 1
                server.set_weights(version, weights, {"max_priority": 1.0})

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        conn.send(("ready", os.getpid(), f"localhost:{port}"))
        try:
            while not parent_gone(ppid):
                if server.error is not None:
                    conn.send(("error", f"inference server failed: {server.error!r}"))
                    break
                if conn.poll(0.5) and conn.recv()[0] == "quit":
                    break
        finally:
            stop.set()
            courier_server.Stop()
            server.close()
    except Exception:  # noqa: BLE001 - the bench reports it and fails the group
        conn.send(("error", "inference process: " + traceback.format_exc()))
        sys.exit(1)


def actor_main(
    net: str,
    actor_id: int,
    num_actors: int,
    max_batch: int,
    central: bool,
    address: str,
    conn: Any,
    counter: Any,
    running: Any,
    measuring: Any,
    quit_flag: Any,
) -> None:
    child_setup()
    ppid = os.getppid()
    try:
        import courier

        from apex.agents import get_builder

        config, _ = load_config(net, num_actors, max_batch)
        client = courier.Client(address, call_timeout=config.inference.call_timeout_seconds + 5)
        actor = get_builder(config).make_actor(
            config, actor_id, client, DiscardWriter(), inference=client if central else None
        )
        timed = TimedQ(actor._qs, measuring)
        actor._qs = timed  # the actor-observed forward time
        for _ in range(3):
            actor.step()
        counter.value = actor.env_steps
        conn.send(("ready", os.getpid()))
        while not quit_flag.value and not parent_gone(ppid):
            if conn.poll():
                msg = conn.recv()
                if msg[0] == "samples":
                    conn.send(("samples", timed.samples))
                    timed.samples = []
                elif msg[0] == "quit":
                    break
            if not running.value:
                time.sleep(0.02)
                continue
            actor.step()
            counter.value = actor.env_steps
        actor.close()
    except Exception:  # noqa: BLE001 - the bench reports it and fails the point
        conn.send(
            (
                "error",
                f"actor {actor_id} ({'central' if central else 'local'}): "
                + traceback.format_exc(),
            )
        )
        sys.exit(1)


def paper_main(nets: list[str], sizes: list[int], repeats: int, conn: Any) -> None:
    """Forward time (wall, CPU) per batch size; sends {net: [{batch, wall_ms, cpu_ms}]}."""
    child_setup()
    try:
        from apex.agents import make_network, make_policy

        out: dict[str, list[dict]] = {}
        rng = np.random.default_rng(0)
        for net in nets:
            config, spec = load_config(net, 1, max(sizes))
            policy = make_policy(config, spec)
            policy.set_weights(make_network(config, spec).get_weights())
            rows = []
            for b in sizes:
                shape = (b, *spec.observation_shape)
                if spec.observation_dtype == "uint8":
                    obs = rng.integers(0, 256, shape, dtype=np.uint8)
                else:
                    obs = rng.normal(size=shape).astype(np.float32)
                policy(obs, None)  # trace / warm
                t = time.perf_counter()
                policy(obs, None)
                single = time.perf_counter() - t
                inner = max(1, min(2000, int(0.2 / max(single, 1e-7))))
                walls, cpus = [], []
                for _ in range(repeats):
                    w0, c0 = time.perf_counter(), time.process_time()
                    for _ in range(inner):
                        policy(obs, None)
                    walls.append((time.perf_counter() - w0) / inner)
                    cpus.append((time.process_time() - c0) / inner)
                rows.append(
                    {
                        "batch": b,
                        "wall_ms": 1e3 * statistics.median(walls),
                        "cpu_ms": 1e3 * statistics.median(cpus),
                        "calls_per_repeat": inner,
                    }
                )
                print(
                    f"  paper {net} batch {b}: {rows[-1]['wall_ms']:.3f} ms wall, "
                    f"{rows[-1]['cpu_ms']:.3f} ms CPU",
                    flush=True,
                )
            out[net] = rows
        conn.send(("result", out))
    except Exception:  # noqa: BLE001 - the bench reports it
        conn.send(("error", "paper process: " + traceback.format_exc()))
        sys.exit(1)
