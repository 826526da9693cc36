"""R2D2 on MinAtar: Breakout by default, every game as in configs/apex_minatar.py
(the same env, sticky actions, conv torso, evaluation and budget), with the
recurrent agent: the conv -> LSTM(128) -> head on single frames, sequences
of 40 steps every 20 with a 10-step burn-in, n = 5, value rescaling, priority
exponent 0.9 and eta 0.9 (Kapturowski et al. 2019, sized for 2 cores).

Each stored sequence holds 40 steps: 10,000 sequences are ~200k env steps
(each step in two sequences); a batch of 32 sequences trains 30 steps each.
Needs the `minatar` extra, as the Ape-X config does.
"""

from apex.config import ApexConfig
from configs.apex_minatar import get_config as apex_minatar


def get_config() -> ApexConfig:
    config = apex_minatar()
    config.agent = "r2d2"
    config.r2d2.sequence_length = 40
    config.r2d2.sequence_period = 20
    config.r2d2.burn_in = 10
    config.r2d2.lstm_size = 128
    config.r2d2.priority_eta = 0.9
    config.r2d2.value_rescaling = True
    config.learner.batch_size = 32
    config.learner.target_update_period = 1000
    config.learner.learning_rate = 5e-4
    config.learner.learning_rate_final = None
    config.replay.priority_exponent = 0.9
    config.replay.n_step = 5
    config.replay.discount = 0.99
    config.replay.capacity = 10_000
    config.replay.min_size = 250
    config.replay.samples_per_insert = 2.0
    return config
