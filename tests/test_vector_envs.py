"""An actor's envs as one vector env (apex.vector_envs): every mode steps real
envs with same-step resets, and the modes that can agree with the python mode
bit for bit do."""

from __future__ import annotations

import numpy as np
import pytest

from apex.config import ApexConfig, EnvConfig
from apex.envs import InjectedFault
from apex.errors import ConfigError
from apex.vector_envs import ale_game, check_vectorization, make_slots, resolve_mode

CORRIDOR = dict(id="ThirdParty/DictCorridor-v0", imports=("tests.thirdparty_envs",))


def pong(**kw) -> EnvConfig:
    """Pong as configs/apex_atari.py has it, with no no-op starts and short
    episodes (emulator frames) so that a few hundred steps cross several ends."""
    base = dict(
        id="ALE/Pong-v5",
        preprocessing="atari",
        frame_stack=4,
        noop_max=0,
        max_episode_steps=120,
        clip_rewards=True,
    )
    return EnvConfig(**{**base, **kw})


def roll(env: EnvConfig, mode: str, steps: int, num_envs: int = 3, seed: int = 0) -> list:
    """(obs, [SlotStep...]) of `steps` steps with seeded random actions."""
    env.vectorization = mode
    slots = make_slots(env, num_envs)
    try:
        assert slots.mode == mode
        obs = slots.reset([seed + j for j in range(num_envs)])
        rng = np.random.default_rng(seed)
        out = [slots.step(rng.integers(0, slots.num_actions, num_envs)) for _ in range(steps)]
        return [obs, out]
    finally:
        slots.close()


def assert_same_rollouts(a: list, b: list) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    for x, y in zip(a[1], b[1]):
        np.testing.assert_array_equal(x.next_obs, y.next_obs)
        np.testing.assert_array_equal(x.rewards, y.rewards)
        np.testing.assert_array_equal(x.terminated, y.terminated)
        np.testing.assert_array_equal(x.truncated, y.truncated)
        assert sorted(x.reset_obs) == sorted(y.reset_obs)
        for j in x.reset_obs:
            np.testing.assert_array_equal(x.reset_obs[j], y.reset_obs[j])


@pytest.mark.parametrize("mode", ["gymnasium_sync", "gymnasium_async"])
def test_gymnasium_vector_envs_step_a_third_party_env_exactly_as_the_python_list(mode):
    env = EnvConfig(**CORRIDOR)
    python = roll(EnvConfig(**CORRIDOR), "python", 80)
    vector = roll(env, mode, 80)
    assert_same_rollouts(vector, python)
    assert sum(len(s.reset_obs) for s in python[1]) > 3  # episodes ended and restarted
    assert python[0].shape == (3, 10)  # the Dict observation, encoded flat (apex.envs)


def test_the_ale_vector_env_gives_the_python_modes_observations_bit_for_bit():
    python = roll(pong(), "python", 100, num_envs=2)
    ale = roll(pong(), "ale", 100, num_envs=2)
    assert_same_rollouts(ale, python)
    ends = [j for s in python[1] for j in s.reset_obs]
    assert len(ends) >= 4  # every slot crossed an episode end
    first = python[1][-1].reset_obs or next(s.reset_obs for s in python[1] if s.reset_obs)
    stack = next(iter(first.values()))
    assert all((stack[k] == stack[-1]).all() for k in range(4))  # padded with its first frame


def test_the_ale_mode_with_no_op_starts_and_sticky_actions_keeps_the_episode_semantics():
    env = pong(noop_max=30, sticky_action_probability=0.25, max_episode_steps=200)
    obs, steps = roll(env, "ale", 120, num_envs=4)
    assert obs.shape == (4, 4, 84, 84) and obs.dtype == np.uint8
    prev = obs
    for s in steps:
        ended = s.terminated | s.truncated
        assert sorted(s.reset_obs) == np.flatnonzero(ended).tolist()
        # A slot that goes on sees its stack shift by one frame.
        go_on = ~ended
        np.testing.assert_array_equal(s.next_obs[go_on, :-1], prev[go_on, 1:])
        assert set(np.unique(s.rewards)) <= {-1.0, 0.0, 1.0}  # clipped by apex
        prev = s.next_obs.copy()
        for j, first in s.reset_obs.items():
            prev[j] = first
    assert any(s.truncated.any() for s in steps)


def test_the_cartpole_vector_entry_point_restarts_an_ended_slot_in_the_same_step():
    obs, steps = roll(EnvConfig(), "gymnasium", 400, num_envs=8)
    ends = 0
    for s in steps:
        for j, first in s.reset_obs.items():
            ends += 1
            final = s.next_obs[j]
            if s.terminated[j]:  # the final state is past a bound
                assert abs(final[0]) > 2.4 or abs(final[2]) > 12 * 2 * np.pi / 360
            assert np.all(np.abs(first) <= 0.05)  # a new episode's start
        assert not (s.terminated & s.truncated).any()
    assert ends > 20
    assert obs.dtype == np.float32


def test_the_cartpole_vector_entry_point_follows_cartpoles_dynamics():
    import gymnasium as gym

    env = EnvConfig(vectorization="gymnasium")
    slots = make_slots(env, 4)
    obs = slots.reset([3, 4, 5, 6])
    actions = np.array([0, 1, 1, 0])
    out = slots.step(actions)
    slots.close()
    one = gym.make("CartPole-v1").unwrapped
    for j in range(4):
        one.reset()
        one.state = obs[j].astype(np.float64)
        o, r, term, _, _ = one.step(int(actions[j]))
        np.testing.assert_allclose(out.next_obs[j], o, atol=1e-6)
        assert out.rewards[j] == r and out.terminated[j] == term


def test_masked_cartpole_keeps_its_components_in_the_vector_entry_point():
    env = EnvConfig(observation_indices=(0, 2))
    assert resolve_mode(env) == "gymnasium"
    obs, steps = roll(env, "gymnasium", 50, num_envs=2)
    assert obs.shape == (2, 2) and steps[0].next_obs.shape == (2, 2)


@pytest.mark.parametrize(
    "env,mode",
    [
        (EnvConfig(), "python"),
        (EnvConfig(), "gymnasium"),
        (EnvConfig(**CORRIDOR), "gymnasium_sync"),
        (pong(), "ale"),
    ],
)
def test_fault_injection_raises_on_the_nth_step_in_every_mode(env, mode):
    env.fault_every = 5
    env.vectorization = mode
    slots = make_slots(env, 2, faults=True)
    slots.reset([0, 1])
    for _ in range(4):
        slots.step(np.zeros(2, np.int64))
    with pytest.raises(InjectedFault, match="env.fault_every=5"):
        slots.step(np.zeros(2, np.int64))
    slots.close()


def test_auto_picks_the_fastest_mode_that_keeps_the_semantics():
    assert resolve_mode(EnvConfig()) == "gymnasium"
    assert resolve_mode(pong()) == "ale"
    assert resolve_mode(EnvConfig(id="Acrobot-v1")) == "python"
    assert resolve_mode(EnvConfig(kwargs={"render_mode": "rgb_array"})) == "python"
    assert resolve_mode(pong(kwargs={"mode": 1})) == "python"  # an option ale does not map
    assert ale_game("ALE/MsPacman-v5") == "ms_pacman" and ale_game("ALE/Pong-v5") == "pong"


@pytest.mark.parametrize(
    "env,expected",
    [
        (EnvConfig(vectorization="ale"), "'ale' only for an ALE id"),
        (EnvConfig(id="Acrobot-v1", vectorization="gymnasium"), "'gymnasium_async'"),
        (pong(vectorization="ale", kwargs={"mode": 1}), "'python' for env.kwargs ['mode']"),
        (EnvConfig(vectorization="envpool"), "pip install envpool"),
    ],
)
def test_a_mode_that_cannot_run_the_env_is_refused_naming_the_field(env, expected):
    if env.vectorization == "envpool":
        import importlib.util

        if importlib.util.find_spec("envpool") is not None:
            pytest.skip("EnvPool is installed here: nothing to refuse")
    with pytest.raises(ConfigError) as err:
        check_vectorization(env)
    assert err.value.field == "env.vectorization"
    assert expected in str(err.value)


def test_an_unknown_mode_is_refused_before_anything_else():
    from apex.validation import validate

    c = ApexConfig()
    c.env.vectorization = "threads"
    with pytest.raises(ConfigError, match="env.vectorization='threads' is invalid"):
        validate(c)


def test_envpool_restarts_an_ended_slot_in_the_same_step():
    """Runs where the user installed EnvPool (not a dependency; skipped elsewhere)."""
    pytest.importorskip("envpool")
    obs, steps = roll(EnvConfig(), "envpool", 200, num_envs=4)
    ends = 0
    for s in steps:
        assert sorted(s.reset_obs) == np.flatnonzero(s.terminated | s.truncated).tolist()
        for j, first in s.reset_obs.items():
            ends += 1
            assert np.all(np.abs(first) <= 0.05)  # a new episode's first observation
            if s.terminated[j]:
                final = s.next_obs[j]
                assert abs(final[0]) > 2.4 or abs(final[2]) > 12 * 2 * np.pi / 360
        assert np.all(s.rewards == 1.0)  # no step is spent on a reset
    assert ends > 10 and obs.shape == (4, 4)
