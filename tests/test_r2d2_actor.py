"""The R2D2 actor end to end with fixed weights: stored states are the actor's
real LSTM states, priorities are the eta mixture of its own TD errors."""

import numpy as np
import tensorflow as tf

from apex.agents.r2d2.acting import (
    RecurrentActor,
    sequence_priorities_np,
    sequence_td_np,
    train_mask_np,
)
from apex.agents.r2d2.networks import RecurrentQNetwork
from apex.config import ApexConfig
from tests.fakes import FakeVariableSource, RecordingWriter


def config():
    c = ApexConfig()
    c.agent = "r2d2"
    c.env.observation_indices = (0, 2)
    c.actor.envs_per_actor = 3
    c.actor.params_update_period = 10**9  # one set of weights for the whole test
    c.r2d2.sequence_length, c.r2d2.sequence_period, c.r2d2.burn_in = 12, 6, 6
    c.r2d2.lstm_size = 8
    c.learner.hidden_sizes = (16,)
    c.replay.n_step = 3
    c.replay.priority_epsilon = 1e-3
    return c


def test_stored_states_and_priorities_come_from_the_actors_own_network():
    c = config()
    net = RecurrentQNetwork((2,), 2, (16,), 8, seed=5)
    rec = RecordingWriter()
    actor = RecurrentActor(c, 0, FakeVariableSource(net.get_weights(), version=1), rec)
    while rec.items_written < 60:
        actor.step()
    items = rec.items()
    starts = {j: [d for d, _ in items if d["slot"] == j and d["start_step"] == 0] for j in range(3)}
    checked_states = 0
    for data, prio in items:
        # Unroll the network from the stored state over the item: same Q as the actor saw.
        q = net.unroll(
            tf.constant(data["obs"][None]),
            (tf.constant(data["state_h"][None]), tf.constant(data["state_c"][None])),
        ).numpy()
        n = int(data["mask"].sum())
        np.testing.assert_allclose(q[0, :n], data["q"][:n], rtol=1e-4, atol=1e-5)
        td, valid = sequence_td_np(
            q,
            data["action"][None],
            data["reward"][None],
            data["discount"][None],
            data["mask"][None],
            3,
            True,
            c.r2d2.value_rescaling_epsilon,
        )
        w = train_mask_np(valid, np.array([data["start_step"]]), 6, True)
        expected = sequence_priorities_np(td, w, 0.9)[0] + 1e-3
        np.testing.assert_allclose(prio, expected, rtol=1e-3, atol=1e-5)
        # The state stored with a sequence starting at step 6 is the LSTM state after
        # the first 6 steps of the same episode's sequence that started at step 0
        # (found by its overlapping observations).
        if int(data["start_step"]) != 6:
            continue
        slot = int(data["slot"])
        for first in starts[slot]:
            if np.array_equal(first["obs"][6:12], data["obs"][:6]):
                state = net.initial_state(1)
                for t in range(6):
                    _, state = net.step(tf.constant(first["obs"][t][None]), state)
                np.testing.assert_allclose(state[0].numpy()[0], data["state_h"], atol=1e-5)
                np.testing.assert_allclose(state[1].numpy()[0], data["state_c"], atol=1e-5)
                checked_states += 1
    assert checked_states > 0
    assert actor.items_written == len(items)
