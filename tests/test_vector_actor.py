"""The actors on every env.vectorization mode: the same items as the python
mode wherever the envs agree bit for bit, CartPole's n-step values wherever
they cannot, and Pong's frames, stored once in a real Reverb table, decoded
back into the stacks the actor saw."""

from __future__ import annotations

import os

import numpy as np
import pytest

from apex.agents import make_network
from apex.config import load_config_file
from apex.envs import env_spec
from tests.fakes import FakeVariableSource, RecordingWriter
from tests.replay_checks import assert_cartpole_nstep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config(name: str, mode: str, envs: int = 3, overlap: bool = False):
    c = load_config_file(os.path.join(ROOT, "configs", name))
    c.actor.envs_per_actor = envs
    c.env.vectorization = mode
    c.actor.overlap = overlap
    c.actor.epsilon_base = 0.6  # mostly random: short episodes, many ends
    if c.agent == "r2d2":
        c.r2d2.sequence_length, c.r2d2.sequence_period, c.r2d2.burn_in = 8, 4, 2
        c.r2d2.lstm_size = 16
    if c.learner.torso == "conv":
        c.learner.hidden_sizes = (32,)
        c.env.noop_max = 0  # the python and ale modes then play the same games
        c.env.max_episode_steps = 160  # emulator frames: an end every 40 steps
    return c


def actor_of(c, writer):
    from apex.agents.dqn.acting import VectorActor
    from apex.agents.r2d2.acting import RecurrentActor

    spec = env_spec(c.env)
    source = FakeVariableSource(make_network(c, spec, seed=0).get_weights(), version=3)
    cls = RecurrentActor if c.agent == "r2d2" else VectorActor
    return cls(c, 0, source, writer)


def items_of(c, steps: int) -> tuple[list, int]:
    writer = RecordingWriter()
    actor = actor_of(c, writer)
    try:
        for _ in range(steps):
            actor.step()
        return writer.items(), actor.episodes
    finally:
        actor.close()


def assert_same_items(a: list, b: list) -> None:
    assert len(a) == len(b) > 0
    for (x, px), (y, py) in zip(a, b):
        assert sorted(x) == sorted(y)
        for key in x:
            np.testing.assert_array_equal(np.asarray(x[key]), np.asarray(y[key]), err_msg=key)
        assert px == pytest.approx(py, rel=1e-6)


@pytest.mark.parametrize(
    "name,mode,steps",
    [
        ("apex_cartpole.py", "gymnasium_sync", 150),
        ("r2d2_cartpole_masked.py", "gymnasium_sync", 150),
        ("apex_cartpole.py", "gymnasium_async", 60),
        ("apex_atari.py", "ale", 90),
        ("r2d2_atari.py", "ale", 90),
    ],
)
def test_a_mode_whose_envs_agree_with_the_python_list_writes_the_same_items(name, mode, steps):
    fast, episodes = items_of(config(name, mode), steps)
    slow, _ = items_of(config(name, "python"), steps)
    assert episodes >= 3  # the items cross episode ends
    assert_same_items(fast, slow)


@pytest.mark.parametrize(
    "name,mode,envs,steps",
    [("apex_cartpole.py", "gymnasium_async", 5, 60), ("apex_atari.py", "ale", 4, 90)],
)
def test_two_halves_stepped_in_turn_write_the_same_items_as_one_vector_env(name, mode, envs, steps):
    """actor.overlap: each half's next actions are picked while the other half
    steps; every slot's items are those of the python list: observations,
    actions, rewards and discounts bit for bit; the Q-values a half's forward
    pass computed (batch E/2, not E) to float32 rounding."""
    overlapped, episodes = items_of(config(name, mode, envs, overlap=True), steps)
    slow, _ = items_of(config(name, "python", envs), steps)
    assert episodes >= 3
    assert len(overlapped) == len(slow) > 0
    for (x, px), (y, py) in zip(overlapped, slow):
        assert sorted(x) == sorted(y)
        for key in x:
            a, b = np.asarray(x[key]), np.asarray(y[key])
            if key in ("q_taken", "next_value"):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=key)
            else:
                np.testing.assert_array_equal(a, b, err_msg=key)
        assert px == pytest.approx(py, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("name", ["apex_cartpole.py", "r2d2_cartpole_masked.py"])
def test_the_cartpole_vector_entry_point_writes_right_nstep_transitions_and_sequences(name):
    c = config(name, "gymnasium", envs=8)
    items, episodes = items_of(c, 300)
    assert episodes > 10
    if c.agent == "apex_dqn":
        for row, _ in items:
            assert_cartpole_nstep(row, c.replay.discount, c.replay.n_step)
    else:  # every step pays 1; a sequence's padding (mask 0) pays nothing
        for row, _ in items:
            mask = np.asarray(row["mask"], bool)
            assert np.all(np.asarray(row["reward"])[mask] == 1.0)
            assert np.all(np.asarray(row["reward"])[~mask] == 0.0)
            disc = np.asarray(row["discount"])[mask]
            assert np.all(np.isclose(disc, 0.0) | np.isclose(disc, c.replay.discount))
            # a terminated episode's discount 0 is its last real step
            zero = np.flatnonzero(disc == 0)
            assert len(zero) == 0 or zero[0] == mask.sum() - 1


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["python", "ale", "ale_overlap"])
def test_pong_frames_stored_once_decode_into_the_stacks_the_actor_saw(mode):
    """A real Reverb table of apex_atari.py: every sampled transition's obs and
    next_obs stacks are sliding windows of one episode's frames."""
    import reverb

    from apex.agents import make_tables, table_name
    from apex.exploration import slot_epsilons
    from apex.replay.tables import unpack_item
    from apex.replay.writer import TransitionWriter

    c = config("apex_atari.py", mode.removesuffix("_overlap"), envs=4, overlap="overlap" in mode)
    c.replay.capacity, c.replay.min_size, c.replay.error_buffer = 2000, 1, 1e7
    spec = env_spec(c.env)
    server = reverb.Server(make_tables(c, spec))
    try:
        client = reverb.Client(f"localhost:{server.port}")
        eps = slot_epsilons(0, 4, 1, c.actor.epsilon_base, c.actor.epsilon_alpha)
        with TransitionWriter(client, table_name(c), 0, eps) as writer:
            actor = actor_of(c, writer)
            for _ in range(120):
                actor.step()
            actor.close()
            assert writer.frames_written > 0  # frames stored once, not whole stacks
        n = c.replay.n_step
        checked = 0
        samples = client.sample(
            table_name(c), num_samples=200, emit_timesteps=False, unpack_as_table_signature=True
        )
        for s in samples:
            data = unpack_item(s.data)  # the frames decoded into stacks, as tools.replay does
            obs, nxt = np.asarray(data["obs"]), np.asarray(data["next_obs"])
            assert obs.shape == nxt.shape == (4, 84, 84)
            discount = float(data["discount"])
            # n steps inside one episode: the stacks overlap by K - n frames
            if discount == pytest.approx(c.replay.discount**n):
                np.testing.assert_array_equal(nxt[: 4 - n], obs[n:])
                checked += 1
        assert checked > 50
    finally:
        server.stop()
