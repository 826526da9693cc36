"""Observations stored once for R2D2 (issue 16, part 2): a sequence item
references the L steps it covers in its slot's stream of observations instead
of holding them whole, and the learner gets the same sequences, bit for bit.

Each test runs the same recurrent actor (same seed, same weights, so the same
actions and states) twice, once per layout, into a FIFO queue with the layout's
signature, and reads the items back through the learner's own dataset and
input transform, and through a checkpoint (the tools' view). The scripted
frames encode (episode, t); its episodes (tests.test_frames.LENGTHS: 1 to 13
steps, terminated or truncated) are shorter than a sequence, end inside one,
or span several overlapping ones (L = 8, P = 4).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from apex.agents import SEQUENCES_TABLE, item_signature
from apex.config import ApexConfig
from apex.envs import env_spec
from apex.replay.tables import sequence_stores_frames, unpack_item
from apex.replay.writer import SequenceWriter
from tests.test_frames import SIZE, ScriptedFrames, manifest_of, run_actor, scripted_config
from tests.test_frames import assert_same_items as assert_same_frames_items

SINGLE = "ApexTest/ScriptedFramesSingle-v0"  # [SIZE, SIZE] frames, no stack
STACKED = "ApexTest/ScriptedFramesStacked-v0"  # [4, SIZE, SIZE] stacks
for _name, _entry in (
    (SINGLE, ScriptedFrames),
    (STACKED, lambda: gym.wrappers.FrameStackObservation(ScriptedFrames(), 4)),
):
    if _name not in gym.registry:
        gym.register(_name, entry_point=_entry)

FIELDS = (*SequenceWriter.FIELDS, "actor", "slot", "epsilon", "version")


def r2d2_config(env_id: str = SINGLE, length: int = 8, period: int = 4) -> ApexConfig:
    c = ApexConfig()
    c.agent = "r2d2"
    c.env.id = env_id
    c.env.frame_stack = 4 if env_id == STACKED else 1
    c.actor.envs_per_actor = 3
    c.replay.n_step = 2
    c.replay.discount = 0.9
    c.learner.hidden_sizes = (8,)
    c.r2d2.sequence_length = length
    c.r2d2.sequence_period = period
    c.r2d2.burn_in = 2
    c.r2d2.lstm_size = 4
    return c


def run_layout(
    config: ApexConfig,
    layout: str,
    steps: int,
    chunk_length: int | None = None,
    compression: str = "zstd",
):
    """Every sequence an actor of `config` writes in `steps` vector steps, in
    insertion order, as the learner's input transform gives them (numpy)."""
    from apex.agents.r2d2.acting import RecurrentActor

    kwargs = {} if chunk_length is None else {"frame_chunk_length": chunk_length}

    def writer(client, eps):
        return SequenceWriter(client, SEQUENCES_TABLE, 0, eps, slot_offset=5, **kwargs)

    return run_actor(
        config, layout, compression, steps, SEQUENCES_TABLE, writer, RecurrentActor, FIELDS
    )


def assert_same_items(old: dict, new: dict) -> None:
    assert set(old) == set(new)
    assert_same_frames_items(old, new, FIELDS)


def test_the_layout_is_chosen_by_image_observations():
    c = r2d2_config()
    spec = env_spec(c.env)
    assert sequence_stores_frames(c, spec)
    sig = item_signature(c, spec)
    assert set(sig) == {"obs_frames", "floats", "meta"}
    # compressed by default, in blocks of gcd(L=8, P=4) = 4 observations
    assert sig["obs_frames"].shape == (2,) and sig["obs_frames"].dtype == tf.string
    c.replay.frame_compression = "none"
    assert item_signature(c, spec)["obs_frames"].shape == (8, SIZE, SIZE)
    assert sig["floats"].shape == (4 * 8 + 2 * 4,)
    c.replay.frame_storage = "packed"
    assert not sequence_stores_frames(c, spec)
    assert item_signature(c, spec)["obs"].shape == (8, SIZE, SIZE)
    cartpole = r2d2_config()
    cartpole.env.id = "CartPole-v1"
    cartpole.env.frame_stack = 1
    assert not sequence_stores_frames(cartpole, env_spec(cartpole.env))
    assert "obs" in item_signature(cartpole, env_spec(cartpole.env))


@pytest.mark.parametrize(
    ("env_id", "compression"),
    [
        (SINGLE, "zstd"),
        (SINGLE, "none"),
        pytest.param(SINGLE, "lz4", marks=pytest.mark.slow),
        pytest.param(STACKED, "zstd", marks=pytest.mark.slow),
    ],
)
def test_scripted_sequences_reach_the_learner_bit_identical_to_the_packed_layout(
    env_id, compression
):
    old = run_layout(r2d2_config(env_id), "packed", 60)
    new = run_layout(r2d2_config(env_id), "auto", 60, compression=compression)
    assert_same_items(old, new)
    assert new["episodes"] > 10  # starts, terminations, truncations all met
    mask, obs = new["mask"], new["obs"]
    newest = obs if env_id == SINGLE else obs[:, :, -1]
    episode, t = newest[:, :, 0, 0].astype(int), newest[:, :, 0, 1].astype(int)
    real = mask > 0
    # real steps: one episode, consecutive t from start_step; padding: zeros
    np.testing.assert_array_equal(t[:, 0], new["start_step"])
    steps = new["start_step"][:, None] + np.arange(8)
    np.testing.assert_array_equal(np.where(real, t, -1), np.where(real, steps, -1))
    assert (episode == episode[:, :1])[real].all()
    assert (obs[~real] == 0).all()
    padded = (~real).any(axis=1)
    assert padded.any() and (~padded).any()
    assert (real.sum(axis=1) < 4).any()  # episodes shorter than the period
    # overlap: a later sequence of the same slot and episode starts P steps on
    full = ~padded
    assert (new["start_step"][full] == 4).any()
    # each observation stored once (every slot's first one, then one per env
    # step), plus fewer than L zero observations after an episode's end
    stored = new["env_steps"] + 3
    assert stored <= new["frames_written"] < stored + new["episodes"] * 8


@pytest.mark.slow
@pytest.mark.parametrize("period", [8, 6])
def test_other_periods_are_bit_identical_too(period):
    # period 8 = L: no overlap, one block of 8 per sequence; period 6: blocks
    # of gcd(8, 6) = 2 observations
    old = run_layout(r2d2_config(period=period), "packed", 40)
    new = run_layout(r2d2_config(period=period), "auto", 40)
    assert_same_items(old, new)
    assert (new["start_step"] % period == 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("chunk_length", [1, 16])
def test_chunk_lengths_change_nothing_the_learner_sees(chunk_length):
    old = run_layout(r2d2_config(), "packed", 30)
    new = run_layout(r2d2_config(), "auto", 30, chunk_length=chunk_length)
    assert_same_items(old, new)


def test_tools_decode_a_frame_sequence_into_its_fields():
    length, hidden = 3, 2
    floats = np.arange(4 * length + 2 * hidden, dtype=np.float32)
    item = {
        "obs_frames": np.arange(length * 4, dtype=np.uint8).reshape(length, 2, 2),
        "floats": floats,
        "meta": np.array([40, 1, 7, 0.25, 3, 1e9], np.float64),
    }
    data = unpack_item(item)
    np.testing.assert_array_equal(data["obs"], item["obs_frames"])
    np.testing.assert_array_equal(data["action"], [0, 1, 2])
    assert data["action"].dtype == np.int32
    np.testing.assert_array_equal(data["mask"], [9, 10, 11])
    np.testing.assert_array_equal(data["state_h"], [12, 13])
    np.testing.assert_array_equal(data["state_c"], [14, 15])
    assert int(data["start_step"]) == 40 and int(data["slot"]) == 7
    assert data["version"].dtype == np.int64 and data["epsilon"].dtype == np.float32


@pytest.mark.parametrize(
    ("make_config", "old_key"),
    [(scripted_config, "obs_pair"), (r2d2_config, "'obs'")],
    ids=["apex_dqn", "r2d2"],
)
def test_a_packed_checkpoint_is_refused_naming_frame_storage_packed(make_config, old_key):
    from apex import checkpointing

    def manifest(layout: str) -> dict:
        return manifest_of(make_config(), frame_storage=layout)

    old = manifest("packed")
    del old["config"]["replay"]["frame_storage"]  # written before the field existed
    problems = checkpointing.compatibility_problems(old, manifest("auto"))
    assert len(problems) == 1 and "replay signature differs" in problems[0]
    assert old_key in problems[0] and "obs_frames" in problems[0]
    assert "resume it with --config.replay.frame_storage=packed" in problems[0]
    # the old layout lives on: resuming with replay.frame_storage='packed' works
    assert checkpointing.compatibility_problems(old, manifest("packed")) == []


@pytest.mark.slow
def test_pong_sequences_reach_the_learner_bit_identical_to_the_packed_layout():
    import os

    from apex.config import load_config_file
    from tests.test_frames import ROOT

    def pong() -> ApexConfig:
        c = load_config_file(os.path.join(ROOT, "configs", "r2d2_atari.py"))
        c.actor.envs_per_actor = 2
        c.learner.hidden_sizes = (16,)
        c.r2d2.lstm_size = 8
        c.env.max_episode_steps = 100  # a truncation: padded sequences, a new episode's block
        return c

    old = run_layout(pong(), "packed", 130)
    new = run_layout(pong(), "auto", 130)  # zstd blocks of 8 observations, the default
    assert_same_items(old, new)
    assert new["episodes"] >= 2
    assert new["obs"].shape[1:] == (80, 84, 84) and new["obs"].dtype == np.uint8
    assert new["obs"].any() and (new["mask"] == 0).any()
    # 8 Pong frames in far fewer bytes than their 56 KB raw
    assert new["stored_bytes"] < new["frames_written"] * 84 * 84 / 10
