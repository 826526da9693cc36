"""R2D2 on Atari (Pong by default): Nature-DQN convolutions -> LSTM(512) ->
dueling head on single 84x84 grayscale frames (the LSTM is the memory: no
frame stack), sequences of 80 steps every 40 with a 40-step burn-in, n = 5,
gamma 0.997, value rescaling instead of reward clipping, target period 2500,
priority exponent 0.9 and eta 0.9 (Kapturowski et al. 2019).

Sized for a small machine: the paper's 64-sequence batches and 4M-step replay
need a GPU and tens of GB; here batch 32 and 4,000 sequences (160k new steps).
"""

from apex.config import ApexConfig
from configs._atari import atari_base


def get_config() -> ApexConfig:
    config = atari_base("r2d2")
    config.env.frame_stack = 1
    config.env.clip_rewards = False
    config.r2d2.sequence_length = 80
    config.r2d2.sequence_period = 40
    config.r2d2.burn_in = 40
    config.r2d2.lstm_size = 512
    config.r2d2.priority_eta = 0.9
    config.r2d2.value_rescaling = True
    config.learner.adam_epsilon = 1e-3
    config.learner.importance_exponent = 0.6
    config.replay.priority_exponent = 0.9
    config.replay.n_step = 5
    config.replay.discount = 0.997
    config.replay.capacity = 4_000
    config.replay.min_size = 200
    config.replay.samples_per_insert = 1.0
    return config
