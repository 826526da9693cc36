"""Central inference (actor.inference='central', apex.inference): the batching
server gathers concurrent requests into one forward pass (batch sizes seen, not
times), never splits a request, never leaves a caller hanging; central and local
inference give the same Q-values and greedy actions for the same parameters and
observations (MLP, conv, LSTM); actors on central inference write items with
the server's parameter version; bad knobs are refused by name."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import reverb

from apex.agents import get_builder, make_network, make_policy, make_tables, table_name
from apex.agents.policy import LocalQ
from apex.config import ApexConfig, load_config_file
from apex.envs import env_spec
from apex.errors import ConfigError
from apex.exploration import slot_epsilons
from apex.inference import BatchingServer, InferenceService, RemoteQ, ServerStopped, bucket_size
from apex.replay.tables import unpack_item
from apex.replay.writer import SequenceWriter, TransitionWriter
from apex.validation import validate
from tests.fakes import FakeVariableSource
from tests.replay_checks import assert_cartpole_nstep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HANG_GUARD = 60.0  # seconds: a batch that never forms fails the test instead of hanging it


class RecordingPolicy:
    """q = obs @ W: records the batch sizes of its forward passes."""

    def __init__(self, gate: threading.Event | None = None):
        self.weights = None
        self.calls: list[int] = []
        self.gate = gate

    def set_weights(self, weights):
        self.weights = weights

    def __call__(self, obs, state=None):
        if self.gate is not None:
            assert self.gate.wait(HANG_GUARD)
        self.calls.append(obs.shape[0])
        q = obs @ self.weights[0]
        return q, None if state is None else (state[0] + 1, state[1] - 1)


def _concurrently(fns):
    results: list = [None] * len(fns)
    errors: list = []

    def run(i, fn):
        try:
            results[i] = fn()
        except Exception as err:  # noqa: BLE001 - collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_GUARD)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    return results, errors


def test_concurrent_requests_of_every_actor_go_in_one_forward_pass():
    policy = RecordingPolicy()
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    server = BatchingServer(policy, max_batch=64, max_wait_seconds=HANG_GUARD, expected_clients=4)
    server.set_weights(7, [w], {"max_priority": 2.5})
    obs = [np.full((3, 3), i, np.float32) for i in range(4)]
    try:
        results, errors = _concurrently([lambda o=o: server.infer(o) for o in obs])
    finally:
        server.close()
    assert not errors
    # One forward pass of 4 requests x 3 observations.
    assert policy.calls == [12]
    assert server.batch_sizes_seen == {4: 1}
    for o, (q, state, version, info) in zip(obs, results):
        np.testing.assert_array_equal(q, o @ w)  # each caller gets its own rows
        assert state is None and version == 7 and info["max_priority"] == 2.5


def test_courier_calls_of_several_clients_at_once_go_in_one_forward_pass():
    """Through a real Courier server (as the inference node serves): one client
    (and so one courier channel) per actor, every call in one batch."""
    import courier

    from apex import compat
    from launch.ray_host import free_ports

    policy = RecordingPolicy()
    w = np.eye(3, dtype=np.float32)
    server = BatchingServer(policy, max_batch=64, max_wait_seconds=HANG_GUARD, expected_clients=6)
    server.set_weights(2, [w])
    (port,) = free_ports(1)
    rpc = compat.courier_server(
        InferenceService(server, timeout=HANG_GUARD), port, thread_pool_size=16
    )
    try:
        clients = [courier.Client(f"localhost:{port}", call_timeout=HANG_GUARD) for _ in range(6)]
        assert clients[0].version() == 2
        results, errors = _concurrently(
            [
                lambda c=c, i=i: c.infer(np.full((4, 3), i, np.float32))
                for i, c in enumerate(clients)
            ]
        )
    finally:
        rpc.Stop()
        server.close()
    assert not errors, errors
    assert policy.calls == [24] and server.batch_sizes_seen == {6: 1}
    for i, (q, h, c, version, _) in enumerate(results):
        np.testing.assert_array_equal(q, np.full((4, 3), i, np.float32))
        assert h is None and c is None and version == 2


def test_a_full_batch_goes_and_a_request_is_never_split():
    policy = RecordingPolicy()
    server = BatchingServer(policy, max_batch=6, max_wait_seconds=HANG_GUARD, expected_clients=4)
    server.set_weights(1, [np.eye(2, dtype=np.float32)])
    try:
        results, errors = _concurrently(
            [lambda i=i: server.infer(np.full((3, 2), i, np.float32)) for i in range(4)]
        )
    finally:
        server.close()
    assert not errors
    assert policy.calls == [6, 6]  # two requests of 3 fill a batch of 6
    assert server.batch_sizes_seen == {2: 2}
    assert sorted(float(r[0][0, 0]) for r in results) == [0, 1, 2, 3]


def test_a_lone_request_goes_after_the_wait_and_stats_count_it():
    policy = RecordingPolicy()
    server = BatchingServer(policy, max_batch=64, max_wait_seconds=0.0, expected_clients=4)
    server.set_weights(3, [np.eye(2, dtype=np.float32)])
    try:
        server.infer(np.ones((2, 2), np.float32), timeout=HANG_GUARD)
        server.infer(np.ones((2, 2), np.float32), timeout=HANG_GUARD)
        row = server.stats()
    finally:
        server.close()
    assert policy.calls == [2, 2]
    assert row["inference/requests"] == 2 and row["inference/forward_passes"] == 2
    assert row["inference/batch_observations_p50"] == 2
    assert row["inference/batch_requests_p90"] == 1
    assert row["inference/param_version"] == 3
    # Both requests were timed (the percentiles of no times read 0.0).
    assert row["inference/requests_per_second"] > 0 and row["inference/latency_ms_p50"] > 0
    assert row["inference/latency_ms_p99"] >= row["inference/queue_wait_ms_p50"] >= 0
    assert server.stats()["inference/requests_per_second"] == 0  # none since


def test_recurrent_state_travels_with_each_request():
    policy = RecordingPolicy()
    server = BatchingServer(policy, max_batch=64, max_wait_seconds=HANG_GUARD, expected_clients=2)
    server.set_weights(1, [np.eye(2, dtype=np.float32)])
    states = [(np.full((2, 4), i, np.float32), np.full((2, 4), -i, np.float32)) for i in (1, 2)]
    try:
        results, errors = _concurrently(
            [lambda s=s: server.infer(np.ones((2, 2), np.float32), s) for s in states]
        )
    finally:
        server.close()
    assert not errors and policy.calls == [4]
    for (h, c), (_, (h2, c2), _, _) in zip(states, results):
        np.testing.assert_array_equal(h2, h + 1)
        np.testing.assert_array_equal(c2, c - 1)


def test_no_caller_hangs_on_a_server_that_fails_or_stops():
    class Broken(RecordingPolicy):
        def __call__(self, obs, state=None):
            raise FloatingPointError("the network blew up")

    server = BatchingServer(Broken(), max_batch=8, max_wait_seconds=0.0)
    server.set_weights(1, [np.eye(2, dtype=np.float32)])
    with pytest.raises(ServerStopped, match="FloatingPointError: the network blew up"):
        server.infer(np.ones((1, 2), np.float32), timeout=HANG_GUARD)
    with pytest.raises(ServerStopped):  # and every later call, at once
        server.infer(np.ones((1, 2), np.float32), timeout=HANG_GUARD)
    server.close()

    # A request queued behind a forward pass when the server closes gets ServerStopped.
    gate = threading.Event()
    policy = RecordingPolicy(gate)
    server = BatchingServer(policy, max_batch=1, max_wait_seconds=0.0)
    server.set_weights(1, [np.eye(2, dtype=np.float32)])
    results, errors = [], []

    def call():
        try:
            results.append(server.infer(np.ones((1, 2), np.float32), timeout=HANG_GUARD))
        except ServerStopped as err:
            errors.append(err)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    closer = threading.Thread(target=server.close)
    closer.start()
    gate.set()
    closer.join(HANG_GUARD)
    for t in threads:
        t.join(HANG_GUARD)
    assert not any(t.is_alive() for t in threads + [closer])
    assert len(results) + len(errors) == 3 and results  # the one in flight finished


def test_a_caller_that_saw_the_server_running_just_before_its_close_is_refused_not_left_waiting():
    """The race the loaded suite hit: a caller checks the server (running), the
    server closes and its thread drains the queue, then the caller queues its
    request. It must get ServerStopped at once, not wait out its timeout."""

    class SeenRunningOnce:  # the caller's check ran just before the close
        def __init__(self, event):
            self.event, self.first = event, True

        def is_set(self):
            if self.first:
                self.first = False
                return False
            return self.event.is_set()

        def set(self):
            self.event.set()

    server = BatchingServer(RecordingPolicy(), max_batch=8, max_wait_seconds=0.0)
    server.set_weights(1, [np.eye(2, dtype=np.float32)])
    server.close()
    server._thread.join(HANG_GUARD)
    assert not server._thread.is_alive()  # the batching thread drained the queue and ended
    server._stopped = SeenRunningOnce(server._stopped)
    with pytest.raises(ServerStopped):
        server.infer(np.ones((1, 2), np.float32), timeout=HANG_GUARD)


def test_bucket_sizes_are_powers_of_two_up_to_the_largest_batch():
    assert [bucket_size(n, 256) for n in (1, 3, 16, 17, 200, 256)] == [1, 4, 16, 32, 256, 256]
    assert bucket_size(48, 48) == 48 and bucket_size(40, 48) == 48


def _configs():
    mlp = ApexConfig()
    mlp.actor.envs_per_actor = 3
    conv = load_config_file(os.path.join(ROOT, "configs", "apex_atari.py"))
    conv.learner.hidden_sizes = (32,)
    r2d2 = load_config_file(os.path.join(ROOT, "configs", "r2d2_cartpole_masked.py"))
    r2d2.r2d2.lstm_size = 16
    return {"mlp": mlp, "conv": conv, "lstm": r2d2}


@pytest.mark.parametrize("kind", ["mlp", "conv", "lstm"])
def test_central_and_local_inference_give_the_same_q_values_and_greedy_actions(kind):
    config = _configs()[kind]
    spec = env_spec(config.env)
    weights = make_network(config, spec, seed=1).get_weights()
    source = FakeVariableSource(weights, version=11, info={"max_priority": 4.0})
    local = LocalQ(make_policy(config, spec), source, config.actor.params_update_period)
    local.sync(0)
    server = BatchingServer(make_policy(config, spec), 64, 0.0, pad=config.learner.torso != "mlp")
    server.set_weights(11, weights, {"max_priority": 4.0})
    acting = get_builder(config).acting_network()
    remote = RemoteQ(
        InferenceService(server, timeout=HANG_GUARD), lambda n: acting.initial_state(config, n)
    )
    rng = np.random.default_rng(0)
    e = 3
    if spec.observation_dtype == np.uint8:
        obs = rng.integers(0, 255, size=(e, *spec.observation_shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(e, *spec.observation_shape)).astype(spec.observation_dtype)
    try:
        state = local.initial_state(e)
        assert (state is None) == (remote.initial_state(e) is None)
        for _ in range(3):  # a few steps: the recurrent state carries on the same
            q_local, s_local, v_local = local(obs, state)
            q_remote, s_remote, v_remote = remote(obs, state)
            np.testing.assert_allclose(q_remote, q_local, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(q_remote.argmax(1), q_local.argmax(1))
            assert v_local == v_remote == 11 and remote.max_priority == 4.0
            if state is not None:
                np.testing.assert_allclose(s_remote[0], s_local[0], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(s_remote[1], s_local[1], rtol=1e-5, atol=1e-6)
            state = s_local
    finally:
        server.close()


@pytest.mark.parametrize("name", ["apex_cartpole.py", "r2d2_cartpole_masked.py"])
def test_actors_on_central_inference_write_the_servers_version(name):
    from apex.agents.dqn.acting import VectorActor
    from apex.agents.r2d2.acting import RecurrentActor
    from tests.test_actor_replay import shrunk

    c = shrunk(name)
    c.actor.inference = "central"
    spec = env_spec(c.env)
    server = BatchingServer(make_policy(c, spec), 64, 0.0)
    server.set_weights(5, make_network(c, spec, seed=0).get_weights())
    replay = reverb.Server(make_tables(c, spec))
    try:
        client = reverb.Client(f"localhost:{replay.port}")
        eps = slot_epsilons(1, 2, c.actor.num_actors, c.actor.epsilon_base, c.actor.epsilon_alpha)
        writer_class = SequenceWriter if c.agent == "r2d2" else TransitionWriter
        actor_class = RecurrentActor if c.agent == "r2d2" else VectorActor
        # No variable source at all: the actor holds no network.
        with writer_class(client, table_name(c), 1, eps, slot_offset=2) as writer:
            actor = actor_class(
                c, 1, None, writer, inference=InferenceService(server, timeout=HANG_GUARD)
            )
            while actor.items_written < 4:
                actor.step()
            server.set_weights(9, make_network(c, spec, seed=0).get_weights())
            written = actor.items_written
            while actor.items_written < written + 40:
                actor.step()
            actor.close()
        info = client.server_info()[table_name(c)]
        assert info.current_size == actor.items_written
        versions = set()
        for s in client.sample(
            table_name(c), num_samples=60, emit_timesteps=False, unpack_as_table_signature=True
        ):
            data = unpack_item(s.data)
            assert int(data["actor"]) == 1 and int(data["slot"]) in (2, 3)
            versions.update(np.asarray(data["version"]).ravel().tolist())
            if c.agent != "r2d2":
                assert_cartpole_nstep(data, c.replay.discount, c.replay.n_step)
        assert versions <= {5, 9} and 9 in versions  # the server's versions, both seen
        assert actor._qs.num_updates == 2
    finally:
        server.close()
        replay.stop()


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("actor.inference", "gpu", "one of ['local', 'central']"),
        ("inference.max_batch", 8, "at least actor.envs_per_actor (16)"),
        ("inference.max_batch", 0, "an integer >= 1"),
        ("inference.max_wait_ms", -1.0, "a number >= 0"),
        ("inference.max_wait_ms", 5000, "[0, 1000]"),
        ("inference.params_period_seconds", 0, "a number > 0"),
        ("inference.call_timeout_seconds", 0.5, ">= 1"),
    ],
)
def test_bad_inference_knobs_are_refused_naming_the_field(field, value, words):
    c = ApexConfig()
    section, name = field.split(".")
    setattr(getattr(c, section), name, value)
    with pytest.raises(ConfigError) as err:
        validate(c)
    assert field in str(err.value) and words in str(err.value), str(err.value)
