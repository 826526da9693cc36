"""The peer of bench/solve_vs_sb3.py: Stable-Baselines3 DQN on CartPole-v1 with the
RL Baselines3 Zoo's hyperparameters, trained until a greedy evaluation solves it.

Runs inside .venv-sb3 (made by bench/peers/setup_sb3.sh), not apex's venv:

    .venv-sb3/bin/python bench/peers/sb3_cartpole.py --seed 0 [--budget 300]

Learns in chunks of --eval-every env steps; after each chunk, a greedy
(deterministic) evaluation of --eval-episodes episodes on a separate CartPole-v1
env. Stops at the first evaluation mean >= 475 or when --budget wall seconds have
passed since the process started. Prints one JSON line at the end.
"""

from spawn_clock import T_SPAWN  # first: the imports below count as start-up

# isort: split

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import stable_baselines3  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import DQN  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

# SB3 trains on one core: a 256x256 MLP on batches of 64 gains nothing from more
# intra-op threads, and one thread keeps the comparison to one core per process.
torch.set_num_threads(1)

ENV_ID = "CartPole-v1"
TARGET_RETURN = 475.0

# The RL Baselines3 Zoo's hyperparameters for DQN on CartPole-v1, from
# hyperparams/dqn.yml of DLR-RM/rl-baselines3-zoo (commit 22e3ff2, April 2026;
# the file marks them "Almost Tuned"):
#   n_timesteps: 5e4, policy: MlpPolicy, learning_rate: 2.3e-3, batch_size: 64,
#   buffer_size: 100000, learning_starts: 1000, gamma: 0.99,
#   target_update_interval: 10, train_freq: 256, gradient_steps: 128,
#   exploration_fraction: 0.16, exploration_final_eps: 0.04,
#   policy_kwargs: dict(net_arch=[256, 256])
ZOO_N_TIMESTEPS = 50_000
ZOO_HYPERPARAMS = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}


class ZooScheduleDQN(DQN):
    """DQN whose schedules run over the zoo's n_timesteps however learn() is chunked.

    learn(n, reset_num_timesteps=False) sets the schedules' horizon to the steps so
    far + n, so chunks of 1000 steps would end exploration within the first 160
    steps. Measured against ZOO_N_TIMESTEPS, epsilon anneals from 1 to 0.04 over
    the first 8000 steps, as in one learn(5e4) call, and stays at 0.04 after 5e4.
    (The learning rate is constant, so only epsilon depends on it.)
    """

    def _update_current_progress_remaining(self, num_timesteps: int, total_timesteps: int) -> None:
        super()._update_current_progress_remaining(num_timesteps, ZOO_N_TIMESTEPS)


def versions() -> dict:
    return {
        "stable_baselines3": stable_baselines3.__version__,
        "gymnasium": gym.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=300.0, help="wall seconds from spawn")
    parser.add_argument("--eval-every", type=int, default=1000, help="env steps per chunk")
    parser.add_argument("--eval-episodes", type=int, default=10)
    args = parser.parse_args()

    model = ZooScheduleDQN(
        "MlpPolicy", gym.make(ENV_ID), seed=args.seed, verbose=0, **ZOO_HYPERPARAMS
    )
    eval_env = DummyVecEnv([lambda: Monitor(gym.make(ENV_ID))])
    eval_env.seed(args.seed + 10_000)

    first_train: list[float] = []
    train = model.train

    def timed_train(*a, **kw) -> None:
        if not first_train:
            first_train.append(time.time())
        train(*a, **kw)

    model.train = timed_train  # type: ignore[method-assign]

    t_ready = time.time()
    learn_seconds = eval_seconds = 0.0
    history = []  # [env_steps, seconds from spawn, eval mean]
    solved_at = None
    while time.time() - T_SPAWN < args.budget:
        t0 = time.time()
        model.learn(args.eval_every, reset_num_timesteps=False)
        t1 = time.time()
        mean, _ = evaluate_policy(
            model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True
        )
        t2 = time.time()
        learn_seconds += t1 - t0
        eval_seconds += t2 - t1
        history.append([model.num_timesteps, round(t2 - T_SPAWN, 3), float(mean)])
        if mean >= TARGET_RETURN:
            solved_at = t2
            break

    print(
        json.dumps(
            {
                "peer": "sb3-dqn",
                "seed": args.seed,
                "solved": solved_at is not None,
                "solve_seconds_from_spawn": None if solved_at is None else solved_at - T_SPAWN,
                "startup_seconds": t_ready - T_SPAWN,
                "learn_seconds": learn_seconds,
                "eval_seconds": eval_seconds,
                "env_steps": int(model.num_timesteps),
                "evaluations": len(history),
                "versions": versions(),
                # unix times, so that a driver can count from its own spawn time
                "spawn_time": T_SPAWN,
                "ready_time": t_ready,
                "solved_at_time": solved_at,
                "first_train_time": first_train[0] if first_train else None,
                "first_train_seconds_from_spawn": first_train[0] - T_SPAWN if first_train else None,
                "budget": args.budget,
                "eval_every": args.eval_every,
                "eval_episodes": args.eval_episodes,
                "target_return": TARGET_RETURN,
                "best_eval_mean": max((h[2] for h in history), default=None),
                "eval_history": history,
                "hyperparams": {"n_timesteps": ZOO_N_TIMESTEPS, **ZOO_HYPERPARAMS},
                "argv": sys.argv[1:],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
