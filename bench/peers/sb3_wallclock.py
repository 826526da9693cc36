"""The peer of bench/vs_sb3.py: Stable-Baselines3 DQN on one env for a wall-clock
budget, with the settings its own community uses there.

Runs inside .venv-sb3 (made by bench/peers/setup_sb3.sh), not apex's venv:

    .venv-sb3/bin/python bench/peers/sb3_wallclock.py \
        --env MinAtar/Breakout-v1 --seed 0 --budget 600

MinAtar/* (Young & Tian 2019, "MinAtar", the DQN with experience replay and a
target network of their examples/dqn.py): one 3x3 conv of 16 filters, a hidden
layer of 128 units; RMSprop (lr 2.5e-4, alpha 0.95, centered, eps 0.01); batch
32; replay 100k; learning starts at 5,000 frames; one SGD step per frame; target
network every 1,000 steps; epsilon 1.0 -> 0.1 over the first 100k frames;
discount 0.99; Huber loss. Sticky actions 0.1, the minimal action sets (-v1).

Acrobot-v1, LunarLander-v3: the RL Baselines3 Zoo's tuned DQN hyperparameters
(hyperparams/dqn.yml; the same for both), epsilon's schedule measured against
the Zoo's n_timesteps (1e5) however long the budget lets it run.

Every --eval-seconds of wall time (the learning paused), a greedy evaluation of
--eval-episodes episodes (cut at 10,000 steps) on a separate env, and one at the
budget. Stops when --budget wall seconds have passed since the process started.
Prints one JSON line.
"""

from spawn_clock import T_SPAWN  # first: the imports below count as start-up

# isort: split

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gymnasium as gym  # noqa: E402
import minatar  # noqa: E402
import minatar.gym  # noqa: E402
import numpy as np  # noqa: E402
import stable_baselines3  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import DQN  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor  # noqa: E402

torch.set_num_threads(1)  # one core, as one process of SB3 uses it on a small net
minatar.gym.register_envs()

AUTHORS_FRAMES = 5_000_000  # MinAtar's runs; epsilon's schedule is measured against it
MINATAR = {
    "learning_rate": 2.5e-4,
    "batch_size": 32,
    "buffer_size": 100_000,
    "learning_starts": 5_000,
    "gamma": 0.99,
    "target_update_interval": 1_000,
    "train_freq": 1,
    "gradient_steps": 1,
    "exploration_initial_eps": 1.0,
    "exploration_final_eps": 0.1,
    "exploration_fraction": 100_000 / AUTHORS_FRAMES,
    "max_grad_norm": 1e9,  # the authors clip nothing
}
ZOO_N_TIMESTEPS = 100_000
# DLR-RM/rl-baselines3-zoo hyperparams/dqn.yml, Acrobot-v1 and LunarLander-v2 alike.
ZOO = {
    "learning_rate": 6.3e-4,
    "batch_size": 128,
    "buffer_size": 50_000,
    "learning_starts": 0,
    "gamma": 0.99,
    "target_update_interval": 250,
    "train_freq": 4,
    "gradient_steps": -1,
    "exploration_fraction": 0.12,
    "exploration_final_eps": 0.1,
}
MAX_EPISODE_STEPS = 10_000


class MinAtarConv(BaseFeaturesExtractor):
    """Conv(16, 3x3, stride 1) + ReLU on the (10, 10, C) grid, then 128 units + ReLU."""

    def __init__(self, observation_space: gym.spaces.Box):
        super().__init__(observation_space, features_dim=128)
        h, w, c = observation_space.shape
        self.conv = torch.nn.Conv2d(c, 16, kernel_size=3, stride=1)
        self.fc = torch.nn.Linear(16 * (h - 2) * (w - 2), 128)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(obs.float().permute(0, 3, 1, 2)))
        return torch.relu(self.fc(x.flatten(1)))


def make_env(env_id: str) -> gym.Env:
    if env_id.startswith("MinAtar/"):
        return gym.wrappers.TimeLimit(gym.make(env_id, sticky_action_prob=0.1), MAX_EPISODE_STEPS)
    return gym.make(env_id)


class ZooScheduleDQN(DQN):
    """DQN whose schedules run over `horizon` env steps however long learn() runs:
    epsilon anneals as in one learn(horizon) call and stays at its end after."""

    horizon = AUTHORS_FRAMES

    def _update_current_progress_remaining(self, num_timesteps: int, total: int) -> None:
        super()._update_current_progress_remaining(num_timesteps, self.horizon)


def build(env_id: str, seed: int) -> tuple[DQN, dict]:
    if env_id.startswith("MinAtar/"):
        hyper, horizon = dict(MINATAR), AUTHORS_FRAMES
        policy_kwargs = {
            "features_extractor_class": MinAtarConv,
            "net_arch": [],
            "optimizer_class": torch.optim.RMSprop,
            "optimizer_kwargs": {"alpha": 0.95, "centered": True, "eps": 0.01},
            "normalize_images": False,
        }
    else:
        hyper, horizon = dict(ZOO), ZOO_N_TIMESTEPS
        policy_kwargs = {"net_arch": [256, 256]}
    ZooScheduleDQN.horizon = horizon
    model = ZooScheduleDQN(
        "MlpPolicy", make_env(env_id), seed=seed, verbose=0, policy_kwargs=policy_kwargs, **hyper
    )
    return model, hyper


def evaluate(model: DQN, env: gym.Env, episodes: int, seed: int) -> float:
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, term, trunc, _ = env.step(int(action))
            total += float(reward)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns))


class WallClock(BaseCallback):
    """Evaluates every `every` wall seconds; stops training at the budget."""

    def __init__(self, budget: float, every: float, episodes: int, seed: int, env_id: str):
        super().__init__()
        self.budget, self.every, self.episodes, self.seed = budget, every, episodes, seed
        self.eval_env = make_env(env_id)
        self.history: list[list[float]] = []  # [env steps, seconds from spawn, eval mean]
        self.eval_seconds = 0.0
        self._next = T_SPAWN + every

    def _on_step(self) -> bool:
        now = time.time()
        if now >= self._next:
            self._evaluate()
            self._next = time.time() + self.every
        return time.time() - T_SPAWN < self.budget

    def _evaluate(self) -> None:
        t0 = time.time()
        seed = self.seed * 1000 + 10_000 + len(self.history) * self.episodes
        mean = evaluate(self.model, self.eval_env, self.episodes, seed)
        self.eval_seconds += time.time() - t0
        self.history.append([self.model.num_timesteps, round(time.time() - T_SPAWN, 3), mean])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="MinAtar/Breakout-v1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=600.0, help="wall seconds from spawn")
    parser.add_argument("--eval-seconds", type=float, default=20.0)
    parser.add_argument("--eval-episodes", type=int, default=5)
    args = parser.parse_args()

    model, hyper = build(args.env, args.seed)
    clock = WallClock(args.budget, args.eval_seconds, args.eval_episodes, args.seed, args.env)
    t_ready = time.time()
    model.learn(10**9, callback=clock)
    clock._evaluate()  # the final evaluation, at the budget
    print(
        json.dumps(
            {
                "peer": "sb3-dqn",
                "env": args.env,
                "seed": args.seed,
                "startup_seconds": t_ready - T_SPAWN,
                "eval_seconds": clock.eval_seconds,
                "env_steps": int(model.num_timesteps),
                "final_eval_mean": clock.history[-1][2],
                "eval_history": clock.history,
                "budget": args.budget,
                "eval_every_seconds": args.eval_seconds,
                "eval_episodes": args.eval_episodes,
                "hyperparams": hyper,
                "versions": {
                    "stable_baselines3": stable_baselines3.__version__,
                    "minatar": getattr(minatar, "__version__", "1.0.15"),
                    "torch": torch.__version__,
                    "numpy": np.__version__,
                    "python": platform.python_version(),
                },
                "argv": sys.argv[1:],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
