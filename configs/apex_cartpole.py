"""Ape-X DQN on CartPole-v1: the default, solved in about a minute on 2 cores."""

from apex.config import ApexConfig


def get_config() -> ApexConfig:
    config = ApexConfig()
    config.env.id = "CartPole-v1"
    config.evaluation.target_return = 475.0
    return config
