"""Ape-X DQN on CartPole-v1: the default, solved in under a minute on 2 cores.

Adam's step size falls linearly from 2e-3 to 2e-4 over the first 20k SGD steps
(about a minute here): fast to solve, and a solved policy flickers far less
afterwards (bench/stability.py; docs/benchmarks.md, "Staying solved").
"""

from apex.config import ApexConfig


def get_config() -> ApexConfig:
    config = ApexConfig()
    config.env.id = "CartPole-v1"
    config.learner.learning_rate_final = 2e-4
    config.learner.learning_rate_decay_steps = 20_000
    return config
