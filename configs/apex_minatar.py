"""Ape-X DQN on MinAtar: Breakout by default; the other games with
--config.env.id=MinAtar/Asterix-v1, Freeway-v1, Seaquest-v1 or SpaceInvaders-v1.

MinAtar (Young & Tian 2019) is five Atari analogues on 10x10 grids, made for
CPU-scale experiments; it needs the `minatar` extra (`.venv/bin/pip install -e
'.[minatar]'`). As its authors run it: sticky actions (0.1), the minimal action
sets (the -v1 ids), one 3x3 conv of 16 filters and a hidden layer of 128 units.
Greedy evaluations of 5 episodes every 20 s, episodes cut at 10,000 steps (the
games have no time limit but Freeway's).
"""

from apex.config import ApexConfig


def get_config() -> ApexConfig:
    config = ApexConfig()
    config.env.imports = ("minatar.gym:register_envs",)
    config.env.id = "MinAtar/Breakout-v1"
    config.env.kwargs = {"sticky_action_prob": 0.1}
    config.env.max_episode_steps = 10_000
    config.learner.torso = "conv"
    config.learner.conv_layers = "small"
    config.learner.hidden_sizes = (128,)
    config.learner.learning_rate = 1e-3
    config.learner.learning_rate_final = 2.5e-4
    config.learner.learning_rate_decay_steps = 50_000
    config.learner.target_update_period = 500
    config.learner.batch_size = 64
    config.replay.capacity = 100_000
    config.replay.min_size = 5_000
    config.replay.samples_per_insert = 8.0
    config.replay.n_step = 3
    config.evaluation.episodes = 5
    config.evaluation.period_seconds = 20.0
    config.evaluation.max_episode_steps = 10_000
    config.stop.max_actor_steps = None
    config.stop.max_wall_seconds = 600.0
    return config
