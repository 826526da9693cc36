"""Frames stored once (issue 16): an Ape-X item references its frames in each
slot's stream of single frames instead of holding obs and next_obs whole, and
the learner gets the same stacks, bit for bit.

Each test runs the same actor (same seed, same weights, so the same actions)
twice, once per layout, into a FIFO queue with the layout's signature, and
reads the items back through the learner's own dataset and input transform.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
import reverb
import tensorflow as tf

from apex.agents import TRANSITIONS_TABLE, get_builder, item_signature, make_network
from apex.config import ApexConfig, load_config_file
from apex.envs import env_spec
from apex.replay.dataset import make_dataset
from apex.replay.tables import stores_frames, unpack_item
from apex.replay.writer import TransitionWriter
from tests.fakes import FakeVariableSource
from tools.replay_inspect.checkpoint_reader import iter_items

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTED = "ApexTest/ScriptedFrames-v0"
SIZE = 6  # frames are SIZE x SIZE
# Episode lengths cycle through these (shorter than n, 1 step, longer than the
# stack); odd episodes end by termination, even ones by truncation.
LENGTHS = (5, 1, 2, 9, 3, 13, 4)


class ScriptedFrames(gym.Env):
    """Frames that encode (episode, t): pixel [0, 0] = episode, [0, 1] = t,
    [0, 2] = the env's id (its seed), the rest a pattern of the three. The
    action does not matter; the reward is t + the action / 10."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self._episode = -1
        self._t = 0
        self._id = 0

    def _frame(self):
        f = (np.arange(SIZE * SIZE).reshape(SIZE, SIZE) * 7 + self._episode * 13 + self._t) % 251
        f = f.astype(np.uint8)
        f[0, :3] = (self._episode % 256, self._t, self._id)
        return f

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._id = int(seed) % 256
        self._episode += 1
        self._t = 0
        return self._frame(), {}

    def step(self, action):
        self._t += 1
        length = LENGTHS[(self._episode + self._id) % len(LENGTHS)]
        end = self._t >= length
        odd = (self._episode + self._id) % 2 == 1
        return self._frame(), self._t + int(action) / 10, end and odd, end and not odd, {}


class ShuffledStack(gym.ObservationWrapper):
    """A 'stack' that is not a sliding window (its frames rotate every step):
    the writer must store such stacks whole and still give them back exactly."""

    def __init__(self, env):
        super().__init__(env)
        self._k = 0

    def observation(self, observation):
        self._k += 1
        return np.roll(observation, self._k % 3, axis=0)


def _make(padding: str = "reset", shuffled: bool = False):
    env = gym.wrappers.FrameStackObservation(ScriptedFrames(), 4, padding_type=padding)
    return ShuffledStack(env) if shuffled else env


for _name, _kwargs in (
    (SCRIPTED, {}),
    ("ApexTest/ScriptedFramesZeroPad-v0", {"padding": "zero"}),
    ("ApexTest/ScriptedFramesShuffled-v0", {"shuffled": True}),
):
    if _name not in gym.registry:
        gym.register(_name, entry_point=_make, kwargs=_kwargs)


def scripted_config(env_id: str = SCRIPTED, n_step: int = 3) -> ApexConfig:
    c = ApexConfig()
    c.env.id = env_id
    c.env.frame_stack = 4  # the env stacks its frames itself (as FrameStackObservation)
    c.actor.envs_per_actor = 3
    c.replay.n_step = n_step
    c.replay.discount = 0.9
    c.learner.hidden_sizes = (8,)
    return c


def atari_config() -> ApexConfig:
    c = load_config_file(os.path.join(ROOT, "configs", "apex_atari.py"))
    c.actor.envs_per_actor = 2
    c.learner.hidden_sizes = (16,)
    c.env.max_episode_steps = 40  # truncations: the n-step bootstrap at an episode's end
    return c


def run_layout(
    config: ApexConfig,
    layout: str,
    steps: int,
    chunk_length: int = 4,
    compression: str = "zstd",
) -> dict:
    """Every item an actor of `config` writes in `steps` vector steps, in insertion
    order, as the learner's input transform gives them (numpy, by field name)."""
    from apex.agents.dqn.acting import VectorActor

    def writer(client, eps):
        return TransitionWriter(client, TRANSITIONS_TABLE, 0, eps, chunk_length=chunk_length)

    return run_actor(config, layout, compression, steps, TRANSITIONS_TABLE, writer, VectorActor)


def run_actor(config, layout, compression, steps, table, make_writer, actor_class, fields=None):
    """Runs `actor_class` of `config` (replay.frame_storage=`layout`,
    frame_compression=`compression`) for `steps` vector steps into a FIFO queue
    `table` through make_writer(client, epsilons), and reads its items back
    (read_back) plus the writer's compressed bytes. Shared by the Ape-X and
    R2D2 layout tests."""
    c = config
    c.replay.frame_storage = layout
    c.replay.frame_compression = compression
    spec = env_spec(c.env)
    signature = item_signature(c, spec)
    server = reverb.Server([reverb.Table.queue(table, max_size=100_000, signature=signature)])
    try:
        client = reverb.Client(f"localhost:{server.port}")
        weights = make_network(c, spec, seed=0).get_weights()
        eps = np.full(c.actor.envs_per_actor, 0.5, np.float32)
        with make_writer(client, eps) as writer:
            actor = actor_class(c, 0, FakeVariableSource(weights, version=2), writer)
            for _ in range(steps):
                actor.step()
            actor.close()
            assert writer.stores_frames == (layout == "auto")
            frames_written, stored_bytes = writer.frames_written, writer.frame_bytes
        out = read_back(
            server, client, table, signature, c, fields or FIELDS, actor, frames_written
        )
        return {**out, "stored_bytes": stored_bytes}
    finally:
        server.stop()


FIELDS = ("obs", "next_obs", "action", "reward", "discount", "slot", "version", "epsilon")


def read_back(server, client, table, signature, config, fields, actor, frames_written) -> dict:
    """What the learner and the tools get of `table`'s items: the learner's
    dataset + input transform (numpy, by field name) and, under "checkpoint",
    the same `fields` read back by apex's checkpoint reader in insertion order;
    plus the actor's counts. Shared by the Ape-X and R2D2 layout tests."""
    n = client.server_info()[table].current_size
    assert n == actor.items_written > 0
    # The tools' view first (the queue loses what the dataset samples).
    ckpt_path = client.checkpoint()
    ckpt = [unpack_item(it.data) for it in iter_items(ckpt_path, table)]
    ds = make_dataset(
        f"localhost:{server.port}",
        signature,
        batch_size=n,
        prefetch=0,
        table=table,
        transform=get_builder(config).input_transform(config, env_spec(config.env)),
    )
    out = {k: v.numpy() for k, v in next(iter(ds)).data.items()}
    out["checkpoint"] = {k: np.stack([it[k] for it in ckpt]) for k in fields}
    out["checkpoint_path"] = ckpt_path
    out["frames_written"] = frames_written
    out["episodes"] = actor.episodes
    out["env_steps"] = actor.env_steps
    return out


def assert_same_items(old: dict, new: dict, fields: tuple = FIELDS) -> None:
    for k in fields:
        # the checkpoint reader (tools.replay, the inspector) decodes each
        # layout into the same fields as the learner's input transform
        np.testing.assert_array_equal(old["checkpoint"][k], old[k], err_msg=k)
        np.testing.assert_array_equal(new["checkpoint"][k], new[k], err_msg=k)
        assert old[k].dtype == new[k].dtype, k
        assert old[k].shape == new[k].shape, k
        np.testing.assert_array_equal(old[k], new[k], err_msg=k)


def test_the_layout_is_chosen_by_the_stacked_frames():
    c = scripted_config()
    spec = env_spec(c.env)
    assert stores_frames(c, spec)
    sig = item_signature(c, spec)  # compressed by default: one zstd frame per value
    assert sig["obs_frames"].shape == (4,) and sig["obs_frames"].dtype == tf.string
    assert sig["obs_frames"].name == "frames:zstd"
    c.replay.frame_compression = "none"
    assert item_signature(c, spec)["obs_frames"].shape == (4, SIZE, SIZE)
    c.replay.frame_storage = "packed"
    assert not stores_frames(c, spec)
    assert item_signature(c, spec)["obs_pair"].shape == (2, 4, SIZE, SIZE)
    cartpole = ApexConfig()
    assert not stores_frames(cartpole, env_spec(cartpole.env))


@pytest.mark.parametrize(
    ("n_step", "compression"),
    [
        pytest.param(1, "zstd", marks=pytest.mark.slow),
        (3, "zstd"),
        (3, "none"),
        pytest.param(3, "lz4", marks=pytest.mark.slow),
        pytest.param(5, "zstd", marks=pytest.mark.slow),
    ],
)
def test_scripted_frames_reach_the_learner_bit_identical_to_the_packed_layout(n_step, compression):
    old = run_layout(scripted_config(n_step=n_step), "packed", 60)
    new = run_layout(scripted_config(n_step=n_step), "auto", 60, compression=compression)
    assert_same_items(old, new)
    assert old["episodes"] > 10  # starts, terminations, truncations all met
    # What the stacks hold: obs's newest frame is step t of its episode, the
    # older ones t-1, t-2, t-3 or, before the episode's start, its first frame
    # repeated (FrameStackObservation's 'reset' padding).
    obs, nxt = new["obs"], new["next_obs"]
    episode, t = obs[:, -1, 0, 0].astype(int), obs[:, -1, 0, 1].astype(int)
    for i in range(4):
        np.testing.assert_array_equal(obs[:, i, 0, 0], episode)
        np.testing.assert_array_equal(obs[:, i, 0, 1], np.maximum(t - 3 + i, 0))
    # The bootstrap observation: k steps later in the same episode, k <= n
    # (fewer at an episode's end), with gamma ** k or 0 (a termination).
    k = nxt[:, -1, 0, 1].astype(int) - t
    np.testing.assert_array_equal(nxt[:, -1, 0, 0], episode)
    assert ((k >= 1) & (k <= n_step)).all()
    done = new["discount"] == 0
    np.testing.assert_allclose(new["discount"][~done], 0.9 ** k[~done], rtol=1e-6)
    assert done.any() and (n_step == 1 or (k < n_step).any())
    # Each frame is stored once, plus the 3 padding frames of every episode start.
    frames = new["env_steps"] + 4 * (new["episodes"] + 3)  # each slot's first stack too
    assert new["frames_written"] == frames
    # stored as compressed values (6x6 frames are too small to shrink; Pong's do)
    assert (new["stored_bytes"] > 0) == (compression != "none")


def test_zero_padded_stacks_at_episode_starts_are_kept():
    env_id = "ApexTest/ScriptedFramesZeroPad-v0"
    old = run_layout(scripted_config(env_id), "packed", 40)
    new = run_layout(scripted_config(env_id), "auto", 40)
    assert_same_items(old, new)
    first = new["obs"][:, -1, 0, 1] == 0  # items starting at an episode's first step
    assert first.any() and (new["obs"][first, :3] == 0).all()


def test_stacks_that_are_not_sliding_windows_are_stored_whole_and_kept_exact():
    env_id = "ApexTest/ScriptedFramesShuffled-v0"
    old = run_layout(scripted_config(env_id), "packed", 40)
    new = run_layout(scripted_config(env_id), "auto", 40)
    assert_same_items(old, new)
    assert new["frames_written"] > new["env_steps"] + 4 * new["episodes"]


@pytest.mark.slow
@pytest.mark.parametrize("chunk_length", [1, 16])
def test_chunk_lengths_change_nothing_the_learner_sees(chunk_length):
    old = run_layout(scripted_config(), "packed", 30)
    new = run_layout(scripted_config(), "auto", 30, chunk_length=chunk_length)
    assert_same_items(old, new)


@pytest.mark.slow
def test_pong_frames_reach_the_learner_bit_identical_to_the_packed_layout():
    old = run_layout(atari_config(), "packed", 60, chunk_length=16)
    new = run_layout(atari_config(), "auto", 60, chunk_length=16)  # zstd, the default
    assert_same_items(old, new)
    assert new["episodes"] >= 2  # truncated at 40 steps: bootstraps at episode ends
    assert new["obs"].shape[1:] == (4, 84, 84) and new["obs"].dtype == np.uint8
    assert new["obs"].any()
    # zstd keeps a Pong frame in far fewer bytes than its 7,056 raw ones
    assert new["stored_bytes"] < new["frames_written"] * 84 * 84 / 10


def test_tools_decode_a_frame_item_into_obs_and_next_obs():
    stack = np.arange(2 * 4 * 3 * 3, dtype=np.uint8).reshape(8, 3, 3)
    item = {
        "obs_frames": stack[:4],
        "next_obs_frames": stack[4:],
        "meta": np.array([2, 0.5, 0.9, 0.1, 1, 7, 3, 1e9], np.float64),
    }
    data = unpack_item(item)
    np.testing.assert_array_equal(data["obs"], stack[:4])
    np.testing.assert_array_equal(data["next_obs"], stack[4:])
    assert int(data["action"]) == 2 and int(data["slot"]) == 7 and int(data["version"]) == 3


def test_items_png_shows_each_items_obs_and_next_obs_frames(tmp_path):
    from PIL import Image

    from tools import replay_inspect as inspect

    new = run_layout(scripted_config(), "auto", 12)
    items = inspect.select_items(new["checkpoint_path"], TRANSITIONS_TABLE, 3, "oldest")
    path = inspect.save_items_png(items, str(tmp_path / "items.png"))
    image = np.asarray(Image.open(path))
    cell = SIZE + 2  # a frame and its white gap
    assert image.shape == (3 * cell, 8 * cell)
    for row, it in enumerate(items):
        frames = np.concatenate([it["data"]["obs"], it["data"]["next_obs"]])
        for i, f in enumerate(frames):
            np.testing.assert_array_equal(
                image[row * cell : row * cell + SIZE, i * cell : i * cell + SIZE], f
            )


def manifest_of(config: ApexConfig, **replay: str) -> dict:
    """The checkpoint manifest of `config` with the `replay` fields set (the
    frame-layout refusal tests of both agents)."""
    from apex import checkpointing

    for field, value in replay.items():
        setattr(config.replay, field, value)
    return checkpointing.make_manifest(config, item_signature(config, env_spec(config.env)), [[1]])


def test_a_checkpoint_of_other_frame_compression_is_refused_naming_it():
    from apex import checkpointing

    def manifest(compression: str) -> dict:
        return manifest_of(scripted_config(), frame_compression=compression)

    old = manifest("none")
    del old["config"]["replay"]["frame_compression"]  # written before the field existed
    problems = checkpointing.compatibility_problems(old, manifest("zstd"))
    assert len(problems) == 1 and "replay signature differs" in problems[0]
    assert "resume it with --config.replay.frame_compression=none" in problems[0]
    assert checkpointing.compatibility_problems(old, manifest("none")) == []
    # blocks say their codec: a zstd run resumes an lz4 checkpoint and decodes both
    assert checkpointing.compatibility_problems(manifest("lz4"), manifest("zstd")) == []
