"""Ape-X DQN on Atari (Pong by default): Nature-DQN convolutions, dueling head,
4 stacked 84x84 grayscale frames, rewards clipped to [-1, 1] (the Ape-X recipe).

Pick another game with --config.env.id=ALE/Breakout-v5. Sized for a small
machine: the paper's 2M-transition replay and 512-transition batches need a
GPU and tens of GB; each stored transition here holds obs and next_obs
(2 x 4 x 84 x 84 bytes before Reverb's compression).
"""

from apex.config import ApexConfig


def get_config() -> ApexConfig:
    config = ApexConfig()
    config.agent = "apex_dqn"
    config.env.id = "ALE/Pong-v5"
    config.env.preprocessing = "atari"
    config.env.frame_skip = 4
    config.env.screen_size = 84
    config.env.frame_stack = 4
    config.env.noop_max = 30
    config.env.terminal_on_life_loss = False
    config.env.clip_rewards = True
    config.learner.torso = "conv"
    config.learner.hidden_sizes = (512,)
    config.learner.dueling = True
    config.learner.batch_size = 32
    config.learner.learning_rate = 1e-4
    config.learner.adam_epsilon = 1.5e-4
    config.learner.max_grad_norm = 40.0
    config.learner.target_update_period = 2500
    config.replay.n_step = 3
    config.replay.discount = 0.99
    config.replay.capacity = 50_000
    config.replay.min_size = 5_000
    config.replay.samples_per_insert = 4.0
    config.actor.num_actors = 2
    config.actor.envs_per_actor = 8
    config.actor.params_update_period = 400
    config.evaluation.episodes = 2
    config.evaluation.epsilon = 0.001
    config.evaluation.period_seconds = 300.0
    config.evaluation.target_return = 20.0
    config.stop.max_actor_steps = 50_000_000
    config.stop.max_wall_seconds = None
    config.logging.progress_period_seconds = 30.0
    return config
