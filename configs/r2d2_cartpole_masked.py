"""R2D2 on masked CartPole-v1: only cart position and pole angle are observed.

Without the velocities a feed-forward agent sees an aliased state; the LSTM
recovers them from consecutive observations. Sequences are shorter than the
paper's Atari 80/40/40 (episodes here are 10-500 steps): L=20, P=10, burn-in
10; a sequence that starts at an episode's first step trains all 20 steps.
"""

from apex.config import ApexConfig


def get_config() -> ApexConfig:
    config = ApexConfig()
    config.agent = "r2d2"
    config.env.id = "CartPole-v1"
    config.env.observation_indices = (0, 2)
    config.r2d2.sequence_length = 20
    config.r2d2.sequence_period = 10
    config.r2d2.burn_in = 10
    config.r2d2.lstm_size = 64
    config.learner.hidden_sizes = (64,)
    config.learner.batch_size = 32
    config.learner.learning_rate = 1e-3
    config.learner.target_update_period = 100
    config.replay.n_step = 5
    config.replay.discount = 0.99
    config.replay.capacity = 5_000
    config.replay.min_size = 200
    config.replay.samples_per_insert = 2.0
    config.stop.max_wall_seconds = 180.0
    return config
