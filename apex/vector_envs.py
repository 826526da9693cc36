"""An actor's env slots as one vector env (env.vectorization).

Every mode gives the actor the same step: `SlotEnvs.step(actions)` returns
each slot's next observation, with the FINAL observation for a slot whose
episode ended, and the ended slots' first observations of their new episodes
apart (`SlotStep.reset_obs`). That is Gymnasium's same-step autoreset: no
step is ever spent on a reset, and no n-step transition or sequence crosses
an episode boundary. Observations are of the stored type (apex.envs), rewards
are clipped by apex (env.clip_rewards) in every mode, and env.fault_every
counts each slot's steps.

Modes (VECTORIZATION in apex.config.schema):

  python      a list of make_env envs stepped one by one (any env)
  gymnasium   the env's own vector entry point, all slots in one call in
              NumPy (CartPole-v1: `SameStepCartPole` below)
  gymnasium_sync / gymnasium_async
              gymnasium's SyncVectorEnv / AsyncVectorEnv (one subprocess per
              slot, spawned) over make_env envs: for slow Python envs
  ale         ale_py's AtariVectorEnv: emulation, frame skip with max-pool,
              grayscale, resize and no-op starts in C++ threads; apex stacks
              the frames (padding a new episode with its first frame, as
              gymnasium's FrameStackObservation does), so every observation
              equals the python mode's bit for bit
  envpool     EnvPool, when the user installed it (not a dependency)
  auto        the fastest of these that keeps the semantics (`resolve_mode`)
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from apex.config import EnvConfig
from apex.envs import InjectedFault, make_env, register_ale, spec_of
from apex.errors import ConfigError
from apex.specs import EnvSpec

# The vector entry point apex runs with same-step resets (the only one gymnasium 1.4 registers).
_CARTPOLE_VECTOR = "gymnasium.envs.classic_control.cartpole:CartPoleVectorEnv"
# ALE options the ale mode maps from env.kwargs (the rest need gymnasium.make: python mode).
_ALE_KWARGS = ("full_action_space", "max_num_frames_per_episode", "repeat_action_probability")
# Frames per ALE episode unless the user caps it: ALE v5's own limit.
_ALE_MAX_FRAMES = 108_000
ENVPOOL_INSTALL = "pip install envpool (into apex's .venv: .venv/bin/pip install envpool)"


@dataclasses.dataclass
class SlotStep:
    """One vector step of every slot (same-step autoreset)."""

    next_obs: np.ndarray
    """[E, ...] each slot's observation after the step; the final one where its episode ended."""
    rewards: np.ndarray
    """[E] float32, clipped to [-1, 1] with env.clip_rewards."""
    terminated: np.ndarray
    """[E] bool."""
    truncated: np.ndarray
    """[E] bool."""
    reset_obs: dict[int, np.ndarray]
    """Slot -> the first observation of its new episode, for the slots that ended."""


class SlotEnvs:
    """E env slots stepped as one (see the module docstring). Subclasses
    implement `_reset` and `_step`."""

    mode: str = ""
    # Whether the envs clip rewards themselves (make_env's, with env.clip_rewards).
    clipped_by_envs: bool = False

    def __init__(self, config: EnvConfig, num_envs: int, faults: bool):
        self._clip = config.clip_rewards and not self.clipped_by_envs
        self.num_envs = int(num_envs)
        self._fault_every = config.fault_every if faults else None
        self._steps = 0
        self.spec: EnvSpec
        self.num_actions: int

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        """Starts every slot's first episode, slot j with seeds[j]; returns [E, ...] observations."""
        return self._reset([int(s) for s in seeds])

    def step(self, actions: np.ndarray) -> SlotStep:
        """Steps every slot with its action; see SlotStep."""
        self.send(actions)
        return self.recv()

    def send(self, actions: np.ndarray) -> None:
        """Starts a step of every slot; where the mode steps outside Python (ALE's
        C++ threads, gymnasium_async's subprocesses: `steps_apart`) it runs
        while the caller goes on, until `recv`."""
        self._steps += 1
        if self._fault_every is not None and self._steps % self._fault_every == 0:
            raise InjectedFault(
                f"injected fault at step {self._steps} (env.fault_every={self._fault_every})"
            )
        self._send(np.asarray(actions, np.int64))
        self._pending = True

    def recv(self) -> SlotStep:
        """The step `send` started; see SlotStep."""
        out = self._recv()
        self._pending = False
        if self._clip:
            np.clip(out.rewards, -1.0, 1.0, out=out.rewards)
        return out

    steps_apart = False
    """Whether a step runs outside Python between `send` and `recv`."""
    _pending = False  # a step sent and not yet received

    def _send(self, actions: np.ndarray) -> None:  # stepped in recv unless overridden
        self._sent = actions

    def _recv(self) -> SlotStep:
        return self._step(self._sent)

    def _reset(self, seeds: list[int]) -> np.ndarray:
        raise NotImplementedError

    def _step(self, actions: np.ndarray) -> SlotStep:
        raise NotImplementedError

    def close(self) -> None:
        """Closes the envs (and their threads or subprocesses)."""


class PythonSlots(SlotEnvs):
    """A list of make_env envs, stepped one by one."""

    mode = "python"
    clipped_by_envs = True

    def __init__(self, config: EnvConfig, num_envs: int, faults: bool = False):
        super().__init__(config, num_envs, faults)
        self._envs = [make_env(config) for _ in range(self.num_envs)]
        self.spec = spec_of(self._envs[0])
        self.num_actions = self.spec.num_actions

    def _reset(self, seeds: list[int]) -> np.ndarray:
        obs = []
        for env, seed in zip(self._envs, seeds):
            o, _ = env.reset(seed=seed)
            env.action_space.seed(seed)
            obs.append(o)
        return np.stack(obs)

    def _step(self, actions: np.ndarray) -> SlotStep:
        e = self.num_envs
        next_obs, rewards = [], np.empty(e, np.float32)
        terminated, truncated = np.zeros(e, bool), np.zeros(e, bool)
        reset_obs: dict[int, np.ndarray] = {}
        for j, env in enumerate(self._envs):
            o, r, term, trunc, _ = env.step(int(actions[j]))
            next_obs.append(o)
            rewards[j], terminated[j], truncated[j] = r, term, trunc
            if term or trunc:
                reset_obs[j], _ = env.reset()
        return SlotStep(np.stack(next_obs), rewards, terminated, truncated, reset_obs)

    def close(self) -> None:
        for env in self._envs:
            env.close()


class SameStepCartPole(gym.vector.VectorEnv):
    """gymnasium's CartPoleVectorEnv with same-step resets: an ended slot's
    final observation goes to info['final_obs'] and the slot starts its new
    episode in the same step (gymnasium's own resets it one step later)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, **kwargs: Any):
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

        self._env = CartPoleVectorEnv(num_envs=num_envs, **kwargs)
        self.num_envs = num_envs
        self.single_observation_space = self._env.single_observation_space
        self.single_action_space = self._env.single_action_space
        self.observation_space = self._env.observation_space
        self.action_space = self._env.action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        return self._env.reset(seed=seed, options=options)

    def step(self, actions: np.ndarray) -> tuple:
        env = self._env
        obs, reward, terminated, truncated, info = env.step(actions)
        done = env.prev_done  # what its next step would reset: reset here instead
        if done.any():
            info = {"final_obs": obs.copy(), "_final_obs": done.copy()}
            env.state[:, done] = env.np_random.uniform(
                low=env.low, high=env.high, size=(4, int(done.sum()))
            )
            env.steps[done] = 0
            env.prev_done = np.zeros_like(done)
            obs = env.state.T.astype(np.float32)
        return obs, reward, terminated, truncated, info

    def close(self, **kwargs: Any) -> None:
        self._env.close()


class GymnasiumSlots(SlotEnvs):
    """Any gymnasium VectorEnv in same-step autoreset mode (final observations in
    info['final_obs']). `encode` turns a batch of its observations into the stored
    type; `of_make_env`: its envs are make_env's (encoded, rewards clipped);
    `one_seed`: it seeds all its slots from one seed (the first slot's)."""

    def __init__(
        self,
        config: EnvConfig,
        env: gym.vector.VectorEnv,
        mode: str,
        faults: bool = False,
        encode: Any = None,
        spec: EnvSpec | None = None,
        of_make_env: bool = True,
        one_seed: bool = False,
    ):
        self.clipped_by_envs = of_make_env
        super().__init__(config, env.num_envs, faults)
        self.mode = mode
        self._one_seed = one_seed
        self._env = env
        self._encode = encode or (lambda obs: obs)
        self.steps_apart = hasattr(env, "step_async")  # gymnasium's AsyncVectorEnv
        if spec is None:
            space = env.single_observation_space
            probe = gym.Env()
            probe.observation_space, probe.action_space = space, env.single_action_space
            spec = spec_of(probe)
        self.spec = spec
        self.num_actions = spec.num_actions

    def _reset(self, seeds: list[int]) -> np.ndarray:
        obs, _ = self._env.reset(seed=seeds[0] if self._one_seed else seeds)
        return self._encode(obs)

    def _send(self, actions: np.ndarray) -> None:
        if self.steps_apart:
            self._env.step_async(actions)
        else:
            self._sent = actions

    def _recv(self) -> SlotStep:
        if self.steps_apart:
            return self._result(*self._env.step_wait())
        return self._result(*self._env.step(self._sent))

    def _result(self, obs, rewards, terminated, truncated, info) -> SlotStep:
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        obs = self._encode(obs)
        ended = np.flatnonzero(terminated | truncated)
        next_obs = obs.copy() if len(ended) else obs
        reset_obs: dict[int, np.ndarray] = {}
        if len(ended):
            next_obs[ended] = self._encode(
                np.stack([np.asarray(info["final_obs"][j]) for j in ended])
            )
            reset_obs = {int(j): obs[j] for j in ended}
        return SlotStep(
            next_obs, np.asarray(rewards, np.float32).copy(), terminated, truncated, reset_obs
        )

    def close(self) -> None:
        if self._pending and self.steps_apart:
            try:  # a step sent and not received (actor.overlap): end it first
                self._env.step_wait()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        self._env.close()


class AleSlots(SlotEnvs):
    """ale_py's AtariVectorEnv (one frame per slot and step, in C++ threads); the
    frame stack is kept here as FrameStackObservation keeps it."""

    mode = "ale"

    def __init__(self, config: EnvConfig, num_envs: int, faults: bool = False):
        super().__init__(config, num_envs, faults)
        from ale_py.vector_env import AtariVectorEnv

        kwargs = dict(config.kwargs)
        frames = kwargs.pop("max_num_frames_per_episode", _ALE_MAX_FRAMES)
        if config.max_episode_steps is not None:
            # As in the python mode, where gymnasium.make's TimeLimit wraps the
            # emulator itself: an Atari env's limit counts emulator frames.
            frames = config.max_episode_steps
        self._env = AtariVectorEnv(
            ale_game(config.id),
            self.num_envs,
            num_threads=min(self.num_envs, _cpus()),
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            max_num_frames_per_episode=frames,
            repeat_action_probability=kwargs.pop(
                "repeat_action_probability", config.sticky_action_probability
            ),
            full_action_space=kwargs.pop("full_action_space", False),
            img_height=config.screen_size,
            img_width=config.screen_size,
            grayscale=True,
            stack_num=1,
            frameskip=config.frame_skip,
            maxpool=True,
            noop_max=config.noop_max,
            episodic_life=config.terminal_on_life_loss,
            reward_clipping=False,  # apex clips (env.clip_rewards)
            use_fire_reset=False,  # AtariPreprocessing presses no FIRE
        )
        self._k = max(1, config.frame_stack)
        size = config.screen_size
        shape = (self._k, size, size) if config.frame_stack > 1 else (size, size)
        self.spec = EnvSpec(
            observation_shape=shape,
            observation_dtype="uint8",
            num_actions=int(self._env.single_action_space.n),
            observation_scale=1.0 / 255.0,
        )
        self.num_actions = self.spec.num_actions
        self._stack = np.zeros((self.num_envs, self._k, size, size), np.uint8)

    def _view(self, stack: np.ndarray) -> np.ndarray:
        return stack if self._k > 1 else stack[:, 0]

    def _reset(self, seeds: list[int]) -> np.ndarray:
        frames, _ = self._env.reset(seed=np.asarray(seeds, np.int64))
        self._stack[:] = frames[:, -1:]  # a new episode's stack: its first frame K times
        return self._view(self._stack).copy()

    steps_apart = True  # ALE's C++ threads step between send and recv

    def _send(self, actions: np.ndarray) -> None:
        self._env.send(actions)

    def _recv(self) -> SlotStep:
        frames, rewards, terminated, truncated, info = self._env.recv()
        stack = self._stack
        stack[:, :-1] = stack[:, 1:]
        stack[:, -1] = frames[:, -1]
        ended = np.flatnonzero(terminated | truncated)
        reset_obs: dict[int, np.ndarray] = {}
        if len(ended):
            final = info["final_obs"]
            for j in ended:
                stack[j, -1] = final[j, -1]
        next_obs = self._view(stack).copy()
        for j in ended:
            stack[j] = frames[j, -1]
            reset_obs[int(j)] = self._view(stack[j : j + 1])[0].copy()
        return SlotStep(
            next_obs,
            np.asarray(rewards, np.float32),
            np.asarray(terminated, bool),
            np.asarray(truncated, bool),
            reset_obs,
        )

    def close(self) -> None:
        self._env.close()


class EnvpoolSlots(SlotEnvs):
    """EnvPool's gymnasium interface (installed by the user). EnvPool resets an
    ended env on its next step; the ended slots alone are stepped once more
    (env_id) to start their new episodes in this one. EnvPool seeds its envs
    from one seed (the first slot's)."""

    mode = "envpool"

    def __init__(self, config: EnvConfig, num_envs: int, faults: bool = False):
        super().__init__(config, num_envs, faults)
        self._envpool = import_envpool()
        self._task, self._kwargs = envpool_task(config)
        self._env = self._make(None)
        probe = gym.Env()
        probe.observation_space = self._env.observation_space
        probe.action_space = self._env.action_space
        self.spec = spec_of(probe)
        self.num_actions = self.spec.num_actions

    def _make(self, seed: int | None) -> Any:
        kwargs = dict(self._kwargs)
        if seed is not None:
            kwargs["seed"] = seed
        return self._envpool.make(
            self._task, env_type="gymnasium", num_envs=self.num_envs, **kwargs
        )

    def _reset(self, seeds: list[int]) -> np.ndarray:
        self._env.close()
        self._env = self._make(seeds[0])
        obs, _ = self._env.reset()
        return np.asarray(obs)

    def _step(self, actions: np.ndarray) -> SlotStep:
        obs, rewards, terminated, truncated, _ = self._env.step(actions)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        ended = np.flatnonzero(terminated | truncated)
        reset_obs: dict[int, np.ndarray] = {}
        if len(ended):
            first = self._env.step(np.zeros(len(ended), np.int64), ended.astype(np.int32))[0]
            reset_obs = {int(j): np.asarray(first[i]) for i, j in enumerate(ended)}
        return SlotStep(
            np.asarray(obs), np.asarray(rewards, np.float32), terminated, truncated, reset_obs
        )

    def close(self) -> None:
        self._env.close()


def _cpus() -> int:
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def ale_game(env_id: str) -> str:
    """ALE's ROM name of an ALE id: 'ALE/MsPacman-v5' -> 'ms_pacman'."""
    name = env_id.split("/", 1)[-1].rsplit("-v", 1)[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def import_envpool() -> Any:
    try:
        import envpool  # the user's own install: not a dependency of apex
    except ImportError:
        raise ConfigError(
            "env.vectorization", "envpool", f"an installed EnvPool ({ENVPOOL_INSTALL})"
        ) from None
    return envpool


def envpool_task(config: EnvConfig) -> tuple[str, dict[str, Any]]:
    """EnvPool's task id and options for env.id: ALE ids map to EnvPool's
    Atari task ('ALE/Pong-v5' -> 'Pong-v5') with the Atari settings."""
    if not config.id.startswith("ALE/"):
        return config.id, dict(config.kwargs)
    return config.id.split("/", 1)[1], {
        "frame_skip": config.frame_skip,
        "img_height": config.screen_size,
        "img_width": config.screen_size,
        "stack_num": config.frame_stack,
        "noop_max": config.noop_max,
        "episodic_life": config.terminal_on_life_loss,
        "repeat_action_probability": config.sticky_action_probability,
        "reward_clip": False,
        "use_fire_reset": False,
        **config.kwargs,
    }


def _gym_spec(config: EnvConfig) -> Any:
    from apex.envs import import_env_modules

    import_env_modules(config)
    try:
        return gym.spec(config.id)
    except gym.error.Error:
        return None


def _has_vector_form(config: EnvConfig) -> bool:
    spec = _gym_spec(config)
    return spec is not None and spec.vector_entry_point == _CARTPOLE_VECTOR


def _cartpole_kwargs(config: EnvConfig) -> dict[str, Any] | None:
    """CartPoleVectorEnv's arguments for the config, None where make_env would differ
    (a render mode or an argument it does not take)."""
    allowed = {"sutton_barto_reward"}
    if set(config.kwargs) - allowed:
        return None
    kwargs = dict(config.kwargs)
    spec = _gym_spec(config)
    kwargs["max_episode_steps"] = config.max_episode_steps or spec.max_episode_steps
    return kwargs


def resolve_mode(config: EnvConfig) -> str:
    """The mode env.vectorization='auto' picks (others as they are): ale for ALE
    ids with Atari preprocessing and options it maps, gymnasium for an env whose
    vector entry point apex runs with same-step resets, else python."""
    mode = config.vectorization
    if mode != "auto":
        return mode
    if (
        config.preprocessing == "atari"
        and config.id.startswith("ALE/")
        and not set(config.kwargs) - set(_ALE_KWARGS)
    ):
        return "ale"
    if config.preprocessing == "none" and _has_vector_form(config) and _cartpole_kwargs(config):
        return "gymnasium"
    return "python"


def check_vectorization(config: EnvConfig) -> str:
    """The resolved mode; ConfigError (env.vectorization) where it cannot run this env."""
    mode = resolve_mode(config)
    field, value = "env.vectorization", config.vectorization
    if mode == "ale":
        if config.preprocessing != "atari" or not config.id.startswith("ALE/"):
            raise ConfigError(
                field,
                value,
                "'ale' only for an ALE id with env.preprocessing='atari' (e.g. ALE/Pong-v5); "
                f"{config.id!r} with preprocessing={config.preprocessing!r}: 'auto' or 'python'",
            )
        extra = sorted(set(config.kwargs) - set(_ALE_KWARGS))
        if extra:
            raise ConfigError(
                field,
                value,
                f"'python' for env.kwargs {extra}: the ale mode maps only {list(_ALE_KWARGS)}",
            )
        register_ale()
    elif mode == "gymnasium":
        if not _has_vector_form(config) or config.preprocessing != "none":
            raise ConfigError(
                field,
                value,
                f"'gymnasium' only for an env with a vector entry point apex runs with same-step "
                f"resets (CartPole-v1); {config.id!r} has none: 'gymnasium_sync', "
                "'gymnasium_async' (a subprocess per env, for slow envs), 'python' or 'auto'",
            )
        if _cartpole_kwargs(config) is None:
            raise ConfigError(
                field,
                value,
                f"'gymnasium' with env.kwargs {dict(config.kwargs)}: CartPoleVectorEnv takes "
                "only 'sutton_barto_reward'; 'python' or 'gymnasium_sync' for the others",
            )
    elif mode == "envpool":
        import_envpool()
    return mode


def make_slots(
    config: EnvConfig, num_envs: int, faults: bool = False, mode: str | None = None
) -> SlotEnvs:
    """The env slots of one actor in env.vectorization's mode (ConfigError if it cannot run)."""
    mode = mode or check_vectorization(config)
    if mode == "python":
        return PythonSlots(config, num_envs, faults)
    if mode == "ale":
        return AleSlots(config, num_envs, faults)
    if mode == "envpool":
        return EnvpoolSlots(config, num_envs, faults)
    same_step = gym.vector.AutoresetMode.SAME_STEP
    if mode == "gymnasium":
        env = SameStepCartPole(num_envs, **_cartpole_kwargs(config))
        keep = config.observation_indices
        encode = None
        if keep is not None:
            idx = np.asarray(keep, np.int64)
            encode = lambda obs: np.ascontiguousarray(obs[:, idx])  # noqa: E731
        one = make_env(config)  # the spec as the python mode's env has it
        try:
            spec = spec_of(one)
        finally:
            one.close()
        return GymnasiumSlots(
            config, env, mode, faults, encode, spec, of_make_env=False, one_seed=True
        )
    thunks = [functools.partial(make_env, config) for _ in range(num_envs)]
    if mode == "gymnasium_sync":
        env = gym.vector.SyncVectorEnv(thunks, autoreset_mode=same_step)
    else:
        env = gym.vector.AsyncVectorEnv(thunks, autoreset_mode=same_step, context="fork")
    return GymnasiumSlots(config, env, mode, faults)
