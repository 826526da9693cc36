"""What the Atari configs share: ALE Pong with the standard preprocessing
(no-op starts, frame skip 4 with max-pool, 84x84 grayscale, no terminal on
life loss), the Nature-DQN conv torso with a 512-unit dense layer and a dueling
head, batch 32, Adam 1e-4, gradient clip 40, target period 2500, 2 actors x 8
envs, a rare near-greedy evaluation and a 50M-step budget. Each agent's file
sets the rest."""

from apex.config import ApexConfig


def atari_base(agent: str) -> ApexConfig:
    config = ApexConfig()
    config.agent = agent
    config.env.id = "ALE/Pong-v5"
    config.env.preprocessing = "atari"
    config.env.frame_skip = 4
    config.env.screen_size = 84
    config.env.noop_max = 30
    config.env.terminal_on_life_loss = False
    config.learner.torso = "conv"
    config.learner.hidden_sizes = (512,)
    config.learner.dueling = True
    config.learner.batch_size = 32
    config.learner.learning_rate = 1e-4
    config.learner.max_grad_norm = 40.0
    config.learner.target_update_period = 2500
    config.actor.num_actors = 2
    config.actor.envs_per_actor = 8
    config.evaluation.episodes = 2
    config.evaluation.epsilon = 0.001
    config.evaluation.period_seconds = 300.0
    config.evaluation.target_return = 20.0
    config.stop.max_actor_steps = 50_000_000
    config.stop.max_wall_seconds = None
    config.logging.progress_period_seconds = 30.0
    return config
