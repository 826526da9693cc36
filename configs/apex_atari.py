"""Ape-X DQN on Atari (Pong by default): Nature-DQN convolutions, dueling head,
4 stacked 84x84 grayscale frames, rewards clipped to [-1, 1] (the Ape-X recipe).

Pick another game with --config.env.id=ALE/Breakout-v5. Sized for a small
machine: the paper's 2M-transition replay and 512-transition batches need a
GPU and tens of GB; each stored transition here holds obs and next_obs
(2 x 4 x 84 x 84 bytes before Reverb's compression).
"""

from apex.config import ApexConfig
from configs._atari import atari_base


def get_config() -> ApexConfig:
    config = atari_base("apex_dqn")
    config.env.frame_stack = 4
    config.env.clip_rewards = True
    config.learner.adam_epsilon = 1.5e-4
    config.replay.n_step = 3
    config.replay.discount = 0.99
    config.replay.capacity = 50_000
    config.replay.min_size = 5_000
    config.replay.samples_per_insert = 4.0
    config.actor.params_update_period = 400
    return config
