"""n-step transitions against an independent reference, on scripted episodes."""

import numpy as np
import pytest

from apex.agents.dqn.acting import nstep_td  # the TD the accumulator's fields make
from apex.replay.nstep import NStepAccumulator

GAMMA = 0.9


def reference(episode, n, gamma):
    """Every transition of one scripted episode, computed from the whole episode.

    episode: dict(obs=[T+1 ids], rewards=[T], end='terminated'|'truncated'|None)
    Returns {obs_id: (reward, discount, next_obs_id)}.
    """
    obs, rewards, end = episode["obs"], episode["rewards"], episode["end"]
    t_len = len(rewards)
    out = {}
    for t in range(t_len):
        k = min(n, t_len - t)
        if end is None and t + n > t_len:
            continue  # still waiting for more steps
        ret = sum(gamma**j * rewards[t + j] for j in range(k))
        reaches_end = t + k == t_len and end is not None
        disc = 0.0 if (reaches_end and end == "terminated") else gamma**k
        out[obs[t]] = (ret, disc, obs[t + k])
    return out


def drive(slot_episodes, n, gamma, next_value_of=lambda o: 0.01 * o, q_of=lambda o: 0.5):
    """Steps one accumulator over per-slot lists of scripted episodes, run side by side."""
    num = len(slot_episodes)
    acc = NStepAccumulator(num, n, gamma)
    streams = []
    for eps in slot_episodes:
        steps = []
        for ep in eps:
            for t in range(len(ep["rewards"])):
                last = t == len(ep["rewards"]) - 1
                steps.append(
                    (
                        ep["obs"][t],
                        ep["rewards"][t],
                        last and ep["end"] == "terminated",
                        last and ep["end"] == "truncated",
                        ep["obs"][t + 1],
                    )
                )
        streams.append(steps)
    horizon = len(streams[0])
    assert all(len(s) == horizon for s in streams), "scripts of all slots must have equal length"
    got = {}
    for i in range(horizon):
        rows = [s[i] for s in streams]
        obs = np.array([[r[0]] for r in rows], np.float32)
        out = acc.add(
            obs,
            np.zeros(num, int),
            np.array([q_of(r[0]) for r in rows]),
            np.full(num, 7),
            np.array([r[1] for r in rows]),
            np.array([r[2] for r in rows]),
            np.array([r[3] for r in rows]),
            np.array([[r[4]] for r in rows], np.float32),
            np.array([next_value_of(r[4]) for r in rows]),
        )
        if out is None:
            continue
        td = nstep_td(out)
        for j in range(len(out["reward"])):
            key = int(out["obs"][j][0])
            assert key not in got, f"transition from obs {key} emitted twice"
            got[key] = (
                float(out["reward"][j]),
                float(out["discount"][j]),
                int(out["next_obs"][j][0]),
                int(out["slot"][j]),
                float(td[j]),
                int(out["version"][j]),
            )
    return got


def episode(first_id, rewards, end):
    return {
        "obs": list(range(first_id, first_id + len(rewards) + 1)),
        "rewards": list(rewards),
        "end": end,
    }


def check(slot_episodes, n):
    got = drive(slot_episodes, n, GAMMA)
    expected = {}
    for eps in slot_episodes:
        for ep in eps:
            expected.update(reference(ep, n, GAMMA))
    assert set(got) == set(expected)
    for key, (ret, disc, nxt) in expected.items():
        g = got[key]
        assert g[0] == pytest.approx(ret, rel=1e-5), key
        assert g[1] == pytest.approx(disc, rel=1e-6), key
        assert g[2] == nxt, key
        assert g[4] == pytest.approx(ret + disc * 0.01 * nxt - 0.5, rel=1e-4, abs=1e-5), key
        assert g[5] == 7
    return got


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_terminated_episode_does_not_bootstrap_at_its_end(n):
    got = check([[episode(100, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "terminated")]], n)
    assert got[105][1] == 0.0  # the last transition of a terminated episode has discount 0


@pytest.mark.parametrize("n", [1, 3])
def test_truncated_episode_bootstraps_from_the_final_observation(n):
    got = check([[episode(200, [1.0] * 6, "truncated")]], n)
    assert got[205][1] == pytest.approx(GAMMA)  # one reward left, bootstraps with gamma ** 1
    assert got[205][2] == 206  # from the final observation


@pytest.mark.parametrize("length", [1, 2])
def test_episode_shorter_than_n_emits_one_transition_per_step(length):
    got = check(
        [
            [
                episode(300, [1.0] * length, "terminated"),
                episode(400, [2.0] * (8 - length), "terminated"),
            ]
        ],
        3,
    )
    assert {k for k in got if 300 <= k < 400} == set(range(300, 300 + length))


def test_no_transition_crosses_an_episode_boundary():
    got = check([[episode(500, [1.0] * 4, "terminated"), episode(600, [1.0] * 4, "truncated")]], 3)
    for key, g in got.items():
        assert g[2] // 100 == key // 100  # the next obs is of the same episode


def test_vector_slots_that_reset_at_different_times():
    slots = [
        [episode(1000, [1.0] * 3, "terminated"), episode(1100, [2.0] * 9, "truncated")],
        [episode(2000, [0.5] * 7, "truncated"), episode(2100, [1.0] * 5, "terminated")],
        [episode(3000, [1.0] * 12, None)],  # still running at the end
        [
            episode(4000, [1.0] * 1, "terminated"),
            episode(4100, [3.0] * 2, "terminated"),
            episode(4200, [1.0] * 9, None),
        ],
    ]
    got = check(slots, 3)
    assert {g[3] for k, g in got.items() if k // 1000 == 2} == {1}  # slot ids are kept


def test_episode_that_is_both_terminated_and_truncated_does_not_bootstrap():
    acc = NStepAccumulator(1, 3, GAMMA)
    out = acc.add(
        np.zeros((1, 1)), [0], [0.0], [0], [1.0], [True], [True], np.ones((1, 1)), [100.0]
    )
    assert out["discount"].tolist() == [0.0]
    assert nstep_td(out).tolist() == [1.0]
