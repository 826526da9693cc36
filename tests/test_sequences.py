"""SequenceAccumulator edges, table-driven: which items come out, and what they hold.

Observation of slot j at episode step t is [j, t, episode]; the state passed
in before step t is h = c = 1000 * j + t. So every emitted field can be
checked against the step it must come from.
"""

import numpy as np
import pytest

from apex.replay.sequences import SequenceAccumulator

GAMMA = 0.9


def drive(episodes_per_slot, length, period, burn_in, skip=True, terminated=True):
    """Runs the accumulator; episodes_per_slot[j] = list of episode lengths of slot j."""
    num = len(episodes_per_slot)
    acc = SequenceAccumulator(num, length, period, burn_in, skip)
    plans = [list(eps) for eps in episodes_per_slot]
    step = [0] * num
    episode = [0] * num
    items = []
    total_steps = max(sum(eps) for eps in episodes_per_slot)
    for _ in range(total_steps):
        obs = np.array([[j, step[j], episode[j]] for j in range(num)], np.float32)
        done = np.zeros(num, bool)
        disc = np.full(num, GAMMA, np.float32)
        live = np.array([bool(plans[j]) for j in range(num)])
        for j in range(num):
            if plans[j] and step[j] + 1 == plans[j][0]:
                done[j] = True
                if terminated:
                    disc[j] = 0.0
        h = np.array([[1000.0 * j + step[j]] for j in range(num)], np.float32)
        out = acc.add(
            obs,
            np.array([step[j] % 2 for j in range(num)]),
            np.array([float(step[j]) for j in range(num)], np.float32),
            disc,
            np.zeros((num, 2), np.float32),
            (h, h.copy()),
            np.full(num, 7),
            done & live,
        )
        if out is not None:
            items += [{k: v[i] for k, v in out.items()} for i in range(len(out["slot"]))]
        for j in range(num):
            if not plans[j]:
                continue
            step[j] += 1
            if done[j]:
                plans[j].pop(0)
                step[j] = 0
                episode[j] += 1
    return items


def summary(items):
    return sorted(
        (int(it["slot"]), int(it["obs"][0, 2]), int(it["start_step"]), int(it["mask"].sum()))
        for it in items
    )


# (name, episodes per slot, L, P, burn_in, skip, expected (slot, episode, start, valid steps))
CASES = [
    ("episode shorter than L", [[4]], 6, 3, 3, True, [(0, 0, 0, 4)]),
    # start 3 of a 4-step episode has 1 step, inside its burn-in of 3: not emitted.
    ("short episode, burn-in 0 emits the tail", [[4]], 6, 3, 0, True, [(0, 0, 0, 4), (0, 0, 3, 1)]),
    (
        "episode ending mid-sequence",
        [[10]],
        6,
        3,
        3,
        True,
        [(0, 0, 0, 6), (0, 0, 3, 6), (0, 0, 6, 4)],
    ),
    ("exact multiple of L, no overlap", [[8]], 4, 4, 2, True, [(0, 0, 0, 4), (0, 0, 4, 4)]),
    (
        "without the episode-start exception a short episode yields nothing",
        [[2]],
        6,
        3,
        3,
        False,
        [],
    ),
    (
        "vector envs ending at different steps",
        [[3, 5], [7]],
        4,
        2,
        2,
        True,
        [(0, 0, 0, 3), (0, 1, 0, 4), (0, 1, 2, 3), (1, 0, 0, 4), (1, 0, 2, 4), (1, 0, 4, 3)],
    ),
]


@pytest.mark.parametrize("name,episodes,length,period,burn_in,skip,expected", CASES)
def test_items_emitted(name, episodes, length, period, burn_in, skip, expected):
    items = drive(episodes, length, period, burn_in, skip)
    assert summary(items) == sorted(expected), name


@pytest.mark.parametrize("name,episodes,length,period,burn_in,skip,expected", CASES)
def test_item_contents_come_from_their_steps(
    name, episodes, length, period, burn_in, skip, expected
):
    for it in drive(episodes, length, period, burn_in, skip):
        j, s = int(it["slot"]), int(it["start_step"])
        n = int(it["mask"].sum())
        # Mask: n ones then zeros; padding is all zeros.
        np.testing.assert_array_equal(it["mask"], [1.0] * n + [0.0] * (length - n))
        np.testing.assert_array_equal(it["obs"][n:], 0)
        np.testing.assert_array_equal(it["reward"][n:], 0)
        # Real steps are consecutive steps of one episode of one slot, from the start.
        np.testing.assert_array_equal(it["obs"][:n, 0], j)
        np.testing.assert_array_equal(it["obs"][:n, 1], np.arange(s, s + n))
        assert len(set(it["obs"][:n, 2].tolist())) == 1, "crosses an episode"
        np.testing.assert_array_equal(it["reward"][:n], np.arange(s, s + n))
        np.testing.assert_array_equal(it["action"][:n], np.arange(s, s + n) % 2)
        # Stored state = the actor's state before the item's first step.
        assert it["state_h"][0] == 1000 * j + s and it["state_c"][0] == 1000 * j + s
        assert it["version"] == 7


def test_terminal_discount_and_truncation():
    (item,) = drive([[4]], 6, 6, 0, terminated=True)
    np.testing.assert_allclose(item["discount"], [GAMMA, GAMMA, GAMMA, 0, 0, 0])
    (item,) = drive([[4]], 6, 6, 0, terminated=False)  # truncated: no zero discount
    np.testing.assert_allclose(item["discount"], [GAMMA] * 4 + [0, 0])


def test_overlap_alignment_across_consecutive_items():
    length, period = 8, 3
    items = [it for it in drive([[40]], length, period, 2) if it["mask"].sum() == length]
    items.sort(key=lambda it: int(it["start_step"]))
    assert [int(it["start_step"]) for it in items] == list(range(0, 40 - length + 1, period))
    for a, b in zip(items, items[1:]):
        np.testing.assert_array_equal(a["obs"][period:], b["obs"][: length - period])


def test_period_larger_than_length_is_refused():
    with pytest.raises(ValueError, match="period"):
        SequenceAccumulator(1, 4, 5)
