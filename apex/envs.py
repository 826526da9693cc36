"""Environments: one env as apex makes it (apex.vector_envs steps an actor's envs as one).

What an env must have: a Discrete action space (DQN agents). Observations are
stored as one array per step, encoded from the env's space by
`ObservationEncoder`:

  Box                 kept as it is (an image keeps its shape); bool -> uint8 0/1,
                      integers in [0, 255] -> uint8, other numbers -> float32
  Discrete(n)         one-hot, n uint8
  MultiBinary         flat uint8 0/1
  MultiDiscrete       the one-hots of each component, concatenated (uint8)
  Tuple, Dict         every leaf encoded as above and flattened, concatenated in
                      the space's order (a Dict's keys in the space's order);
                      uint8 if every leaf is uint8, else float32

so that replay holds the compact dtype and both agents see a flat vector (or
an image). `EnvSpec.observation_scale` tells the conv torso how to bring uint8
images to [0, 1].
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import Any

# gymnasium imports pygame with every Box2D env; its banner is not ours to print.
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from apex.config import ApexConfig, EnvConfig  # noqa: E402
from apex.errors import ConfigError  # noqa: E402
from apex.specs import EnvSpec, to_observation  # noqa: E402, F401 - named here too

# Evaluation episodes of an env with no time limit are cut here (108,000 Atari
# frames at frame skip 4, the usual cap) unless evaluation.max_episode_steps says.
DEFAULT_EVAL_EPISODE_CAP = 27_000
# Ids the unknown-id error suggests: a Discrete action space, observations apex takes.
EXAMPLE_IDS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3", "ALE/Pong-v5")


class InjectedFault(RuntimeError):
    """Raised by an actor's envs with EnvConfig.fault_every set (fault-tolerance
    tests; apex.vector_envs counts each slot's steps)."""


def register_ale() -> None:
    """Registers ALE's ids with gymnasium; ConfigError naming the Atari extra when
    ale-py is not installed."""
    try:
        import ale_py  # the optional Atari extra: imported for ALE ids only
    except ImportError:
        raise ConfigError(
            "env.id",
            "ALE/...",
            "an installed ale-py for Atari ids: pip install -e '.[atari]' (scripts/setup.sh does)",
        ) from None
    gym.register_envs(ale_py)


def _make_atari(config: EnvConfig, kwargs: dict) -> gym.Env:
    register_ale()
    # Frame skipping and max-pooling happen in AtariPreprocessing, so the
    # emulator itself must not skip.
    env = gym.make(
        config.id,
        frameskip=1,
        repeat_action_probability=config.sticky_action_probability,
        **kwargs,
    )
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=config.noop_max,
        frame_skip=config.frame_skip,
        screen_size=config.screen_size,
        terminal_on_life_loss=config.terminal_on_life_loss,
        grayscale_obs=True,
        scale_obs=False,  # uint8 in replay: 4x smaller than float32
    )
    if config.frame_stack > 1:
        env = gym.wrappers.FrameStackObservation(env, config.frame_stack)
    return env


_IMPORTED: set[str] = set()


def import_env_modules(config: EnvConfig) -> None:
    """Imports env.imports (each registers its envs) once per process; 'module:function'
    also calls module.function() (a package's register function, e.g.
    'minatar.gym:register_envs'). ConfigError naming the entry that fails."""
    for entry in config.imports:
        if entry in _IMPORTED:
            continue
        name, _, function = entry.partition(":")
        try:
            module = importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - the user's module: name it and its error
            raise ConfigError(
                "env.imports",
                entry,
                "a module importable in every process of the program: an installed package, "
                f"or a module on PYTHONPATH ({type(err).__name__}: {err})",
            ) from None
        if function:
            register = getattr(module, function, None)
            if not callable(register):
                raise ConfigError(
                    "env.imports",
                    entry,
                    f"'module:function' with a function of {name} (it has no {function!r})",
                )
            try:
                register()
            except Exception as err:  # noqa: BLE001 - the user's function: name its error
                raise ConfigError(
                    "env.imports", entry, f"a function that runs ({type(err).__name__}: {err})"
                ) from None
        _IMPORTED.add(entry)


def _unknown_id(config: EnvConfig, err: Exception) -> ConfigError:
    hint = ""
    namespace = config.id.split(":")[-1].split("/")[0] if "/" in config.id else ""
    if namespace and not config.imports:
        hint = (
            f"; if a package registers {namespace}/... when it is imported, name it in "
            "env.imports: the module that registers it, or 'module:function' for a register "
            f"function to call (e.g. --config.env.imports={namespace.lower()}.gym:register_envs)"
        )
    return ConfigError(
        "env.id",
        config.id,
        f"a registered Gymnasium id with a Discrete action space (e.g. {', '.join(EXAMPLE_IDS)})"
        f": {err}{hint}",
    )


def _leaf_encoding(space: gym.Space, path: str) -> tuple[int, bool]:
    """(flat size, encodes to uint8) of a leaf of a composite observation space."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n), True
    if isinstance(space, gym.spaces.MultiBinary):
        return int(np.prod(space.shape)), True
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec)), True
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape)), _box_dtype(space) == np.uint8
    raise ValueError(
        f"{path or 'the observation'} is a {type(space).__name__} space; apex encodes Box, "
        "Discrete, MultiBinary, MultiDiscrete, Tuple and Dict"
    )


def _box_dtype(space: gym.spaces.Box) -> type:
    if space.dtype == np.bool_:
        return np.uint8
    if np.issubdtype(space.dtype, np.integer):
        if np.all(space.low >= 0) and np.all(space.high <= 255):
            return np.uint8
    if space.dtype == np.uint8:
        return np.uint8
    return np.float32


def _leaves(space: gym.Space, path: str = "") -> list[tuple[str, gym.Space]]:
    if isinstance(space, gym.spaces.Tuple):
        return [x for i, s in enumerate(space.spaces) for x in _leaves(s, f"{path}[{i}]")]
    if isinstance(space, gym.spaces.Dict):
        return [x for k, s in space.spaces.items() for x in _leaves(s, f"{path}[{k!r}]")]
    return [(path, space)]


def _encode_leaf(space: gym.Space, value: Any, dtype: type) -> np.ndarray:
    if isinstance(space, gym.spaces.Discrete):
        out = np.zeros(int(space.n), dtype)
        out[int(value) - int(space.start)] = 1
        return out
    if isinstance(space, gym.spaces.MultiDiscrete):
        parts = []
        for n, start, v in zip(
            space.nvec.reshape(-1), space.start.reshape(-1), np.asarray(value).reshape(-1)
        ):
            one = np.zeros(int(n), dtype)
            one[int(v) - int(start)] = 1
            parts.append(one)
        return np.concatenate(parts)
    return np.asarray(value).reshape(-1).astype(dtype)


class ObservationEncoder(gym.ObservationWrapper):
    """Encodes any supported observation space as one Box (see the module docstring):
    its observations are already of the stored type (apex.specs.to_observation),
    so an actor stores what its envs return as it is."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        self._box = isinstance(space, gym.spaces.Box)
        if self._box:
            dtype = _box_dtype(space)
            if dtype == np.uint8 and space.dtype != np.uint8:
                low = np.clip(space.low, 0, 255).astype(np.uint8)
                high = np.clip(space.high, 0, 255).astype(np.uint8)
                self.observation_space = gym.spaces.Box(low, high, dtype=np.uint8)
            elif dtype == np.float32 and space.dtype != np.float32:
                low, high = space.low.astype(np.float32), space.high.astype(np.float32)
                self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
            self._dtype = dtype
            return
        self._leaves = _leaves(space)
        encodings = [_leaf_encoding(s, p) for p, s in self._leaves]
        self._dtype = np.uint8 if all(u for _, u in encodings) else np.float32
        size = sum(n for n, _ in encodings)
        if self._dtype == np.uint8:
            self.observation_space = gym.spaces.Box(0, 1, (size,), np.uint8)
            if any(isinstance(s, gym.spaces.Box) for _, s in self._leaves):
                self.observation_space = gym.spaces.Box(0, 255, (size,), np.uint8)
        else:
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        if self._box:
            obs = np.asarray(observation)
            if self._dtype == np.uint8:
                return obs.astype(np.uint8)
            return obs.astype(np.float32, copy=False)
        values = _leaves_of(self.env.observation_space, observation)
        return np.concatenate(
            [_encode_leaf(s, v, self._dtype) for (_, s), v in zip(self._leaves, values)]
        )


def _leaves_of(space: gym.Space, value: Any) -> list[Any]:
    if isinstance(space, gym.spaces.Tuple):
        return [x for s, v in zip(space.spaces, value) for x in _leaves_of(s, v)]
    if isinstance(space, gym.spaces.Dict):
        return [x for k, s in space.spaces.items() for x in _leaves_of(s, value[k])]
    return [value]


def make_env(config: EnvConfig, seed: int | None = None) -> gym.Env:
    """Makes one env and checks it fits a DQN agent; raises ConfigError otherwise."""
    import_env_modules(config)
    kwargs = dict(config.kwargs)
    if config.max_episode_steps is not None:
        kwargs["max_episode_steps"] = config.max_episode_steps
    try:
        if config.preprocessing == "atari":
            if not config.id.startswith("ALE/"):
                raise ConfigError(
                    "env.id",
                    config.id,
                    "an ALE id such as 'ALE/Pong-v5' with preprocessing='atari'",
                )
            env = _make_atari(config, kwargs)
        else:
            if config.id.startswith("ALE/"):
                register_ale()
            env = gym.make(config.id, **kwargs)
    except gym.error.Error as err:
        raise _unknown_id(config, err) from None
    except (ModuleNotFoundError, ImportError) as err:
        raise ConfigError(
            "env.id",
            config.id,
            f"an env whose package is installed ({type(err).__name__}: {err})",
        ) from None
    except ConfigError:
        raise
    except TypeError as err:
        if not config.kwargs:
            raise
        raise ConfigError(
            "env.kwargs",
            dict(config.kwargs),
            f"keyword arguments {config.id} takes ({err})",
        ) from None
    except Exception as err:  # noqa: BLE001 - the env's own constructor: name its error
        field, value = (
            ("env.kwargs", dict(config.kwargs)) if config.kwargs else ("env.id", config.id)
        )
        raise ConfigError(
            field, value, f"an env that can be made ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(env.action_space, gym.spaces.Discrete):
        env.close()
        raise ConfigError(
            "env.id",
            config.id,
            f"an env with a Discrete action space for a DQN agent, not {env.action_space} "
            "(apex's agents pick one of n actions)",
        )
    try:
        env = ObservationEncoder(env)
    except ValueError as err:
        env.close()
        raise ConfigError(
            "env.id", config.id, f"an env whose observations apex encodes: {err}"
        ) from None
    if config.observation_indices is not None:
        dim = int(np.prod(env.observation_space.shape))
        bad = [i for i in config.observation_indices if i >= dim]
        if len(env.observation_space.shape) != 1 or bad:
            env.close()
            raise ConfigError(
                "env.observation_indices",
                config.observation_indices,
                f"indices into the flat observation of {config.id} (shape "
                f"{env.observation_space.shape}): each in [0, {dim - 1}]",
            )
        keep = np.asarray(config.observation_indices, np.int64)
        space = env.observation_space
        env = gym.wrappers.TransformObservation(
            env,
            lambda obs: obs[keep],
            gym.spaces.Box(space.low[keep], space.high[keep], dtype=space.dtype),
        )
    if config.clip_rewards:
        env = gym.wrappers.ClipReward(env, -1.0, 1.0)
    if seed is not None:
        env.action_space.seed(seed)
    return env


def spec_of(env: gym.Env) -> EnvSpec:
    """The spec of an env made by make_env."""
    space = env.observation_space
    uint8 = space.dtype == np.uint8
    high = float(np.max(space.high)) if uint8 else 1.0
    return EnvSpec(
        observation_shape=tuple(space.shape),
        observation_dtype="uint8" if uint8 else "float32",
        num_actions=int(env.action_space.n),
        observation_scale=1.0 / high if uint8 and high > 1 else 1.0,
    )


def env_spec(config: EnvConfig) -> EnvSpec:
    """Makes one env to read its spec."""
    env = make_env(config)
    try:
        return spec_of(env)
    finally:
        env.close()


@dataclasses.dataclass(frozen=True)
class PreparedEnv:
    """What `prepare_env` found out before launch."""

    spec: EnvSpec
    episode_limit: int | None
    """The env's own time limit (steps), None when it has none."""
    packages: dict[str, str | None]
    """Distribution -> version of every package the env came from (its entry
    point's, env.imports', and any they imported), or module -> None for an
    env.imports module that belongs to no installed distribution."""
    warnings: tuple[str, ...]
    """Notes for the user (an env with no time limit)."""


def _top_modules() -> set[str]:
    return {name.split(".")[0] for name in list(sys.modules)}


def _referenced_tops(module_names: set[str]) -> set[str]:
    """Top-level names of the modules that `module_names` (and their submodules, as
    far as imported) refer to: what an env's package imported to build it."""
    tops: set[str] = set()
    for name, module in list(sys.modules.items()):
        if module is None or not any(name == m or name.startswith(m + ".") for m in module_names):
            continue
        tops.add(name.split(".")[0])
        for value in list(vars(module).values()):
            owner = (
                value.__name__
                if isinstance(value, type(sys))
                else getattr(value, "__module__", None)
            )
            if isinstance(owner, str) and owner:
                tops.add(owner.split(".")[0])
    return tops


def _has_distribution(md: Any, name: str) -> bool:
    try:
        md.version(name)
        return True
    except md.PackageNotFoundError:
        return False


def _env_packages(config: EnvConfig, env: gym.Env, new_modules: set[str]) -> dict[str, Any]:
    import importlib.metadata as md  # only before launch, to name the env's packages

    roots = {entry.split(":")[0] for entry in config.imports}
    entry = getattr(env.spec, "entry_point", None)
    entry_module = (
        entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    )
    if entry_module:
        roots.add(entry_module.rsplit(".", 1)[0] if "." in entry_module else entry_module)
    if config.id.startswith("ALE/"):
        roots.add("ale_py")
    tops = set(new_modules) | _referenced_tops(roots)
    owners = md.packages_distributions()
    user_tops = {n.split(":")[0].split(".")[0] for n in config.imports}
    out: dict[str, Any] = {}
    for top in sorted(t for t in tops if t and not t.startswith("_")):
        dists = owners.get(top) or [
            d for d in {top, top.replace("_", "-")} if _has_distribution(md, d)
        ]
        if not dists:
            if top in user_tops:
                out[top] = None  # a user's module outside any distribution
            continue
        for dist in dists:
            try:
                out[md.metadata(dist)["Name"] or dist] = md.version(dist)
            except md.PackageNotFoundError:
                out[dist] = None
    return out


def resolve_target(config: ApexConfig, env: gym.Env) -> float | None:
    """evaluation.target_return as a number or None ('auto': the spec's reward_threshold;
    None with clip_rewards, whose clipped returns the threshold does not measure)."""
    target = config.evaluation.target_return
    if target != "auto":
        return target
    threshold = getattr(env.spec, "reward_threshold", None)
    if threshold is None or config.env.clip_rewards:
        return None
    return float(threshold)


def prepare_env(config: ApexConfig) -> PreparedEnv:
    """Before launch: imports env.imports, makes one env (ConfigError if it does not
    fit), resolves evaluation.target_return='auto' in `config` (in place), refuses
    stop.when_solved without a target, and says what the env's packages are."""
    before = _top_modules()
    env = make_env(config.env)
    try:
        spec = spec_of(env)
        target = resolve_target(config, env)
        limit = getattr(env.spec, "max_episode_steps", None)
        packages = _env_packages(config.env, env, _top_modules() - before)
    finally:
        env.close()
    asked = config.evaluation.target_return
    config.evaluation.target_return = target
    if target is None and config.stop.when_solved:
        if asked is None:
            why = "evaluation.target_return is None"
        elif config.env.clip_rewards:
            why = "evaluation.target_return='auto' has no target with env.clip_rewards"
        else:
            why = f"evaluation.target_return='auto' finds no reward_threshold in {config.env.id}'s spec"
        raise ConfigError(
            "stop.when_solved",
            True,
            f"False: {why}; set --config.evaluation.target_return to the mean return that "
            "counts as solved",
        )
    warnings = []
    if limit is None:
        cap = config.evaluation.max_episode_steps or DEFAULT_EVAL_EPISODE_CAP
        warnings.append(
            f"{config.env.id} has no time limit: evaluation episodes are cut at {cap:,} steps "
            "(evaluation.max_episode_steps) and the actors' episodes are unbounded; "
            "set env.max_episode_steps to bound both"
        )
    return PreparedEnv(spec, limit, packages, tuple(warnings))
