"""A trained policy outside the program: export it from a run, load it, act with it.

An exported policy is a self-contained folder (`export`, or `python -m
tools.policy export RUN_DIR --out=DIR`):

    weights.npz    the flat weight list of the Q-network, in order (arr_0, arr_1, ...):
                   what the learner serves its actors and the evaluator
    policy.json    format, agent, the run's whole resolved config (the network
                   and the env are built from it by apex's own code), env id,
                   kwargs and imports, the observation the network takes, the
                   parameters' version and the evaluation return they had (with
                   the seed and episodes of that evaluation when the run's
                   metrics recorded it), the source run and checkpoint, the git
                   commit and package versions of the run

`load(DIR)` gives a `TrainedPolicy`:

    >>> policy = apex.trained_policy.load("policy/")
    >>> env = policy.make_env()                       # the env as apex evaluates it
    >>> obs, _ = env.reset(seed=0)
    >>> policy.reset()                                # at every episode start (R2D2's state)
    >>> obs, reward, terminated, truncated, _ = env.step(policy.act(obs))

`act` takes an observation of `make_env()`'s env (what apex's actors and
evaluator see), or, for an env without Atari preprocessing, one of the plain
`gymnasium.make(env_id, **env_kwargs)` env: it is encoded as apex.envs encodes
it (ObservationEncoder, env.observation_indices), then as `to_observation`.
Q-values come from apex.agents.policy.ActingPolicy, the actors' own code.
`evaluate(episodes, seed)` runs apex.evaluation.evaluate, the evaluator's
function: with the seed and episodes of a recorded evaluation it returns that
evaluation's returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from apex.config import ApexConfig, config_from_dict, to_dict
from apex.errors import ApexError

POLICY_FILE = "policy.json"
WEIGHTS_FILE = "weights.npz"
FORMAT = "apex-policy"
FORMAT_VERSION = 1
WHICH = ("best", "latest", "average")


class PolicyError(ApexError):
    """A run, checkpoint or policy folder cannot be exported or loaded; the
    message names the path and what is wrong (one line)."""


# ------------------------------------------------------------------ config


# ------------------------------------------------------------------ export


def _find_run(source: str) -> tuple[str, str]:
    """(run dir, newest complete checkpoint) of `source`: a run dir or a run checkpoint."""
    from apex import checkpointing

    path = os.path.abspath(source)
    if not os.path.isdir(path):
        raise PolicyError(f"{source} is not a directory")
    if os.path.isfile(os.path.join(path, checkpointing.COMPLETE)) and os.path.isfile(
        os.path.join(path, checkpointing.LEARNER_FILE)
    ):  # a run checkpoint: RUN_DIR/checkpoints/ckpt-N
        parent = os.path.dirname(path)
        run_dir = (
            os.path.dirname(parent)
            if os.path.basename(parent) == checkpointing.CHECKPOINTS_DIR
            else parent
        )
        return run_dir, path
    is_run = os.path.isfile(os.path.join(path, "config.json")) or os.path.isdir(
        checkpointing.checkpoints_dir(path)
    )
    if not is_run:
        raise PolicyError(
            f"{source} is not an apex run directory (no config.json, no checkpoints/) "
            "nor a run checkpoint (no COMPLETE and learner.npz)"
        )
    latest = checkpointing.latest_complete(path)
    if latest is None:
        raise PolicyError(
            f"{source} has no complete checkpoint in {checkpointing.CHECKPOINTS_DIR}/ "
            "(a run writes one every checkpoint.period_seconds and when it stops)"
        )
    return path, latest


def _run_config(run_dir: str, manifest: dict[str, Any]) -> dict[str, Any]:
    config = manifest.get("config")
    if isinstance(config, dict) and "env" in config:
        return config
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError) as err:
        raise PolicyError(
            f"neither the checkpoint's manifest nor {run_dir}/config.json has the run's "
            f"config ({err})"
        ) from None
    return to_dict(config_from_dict(config))


def evaluation_rows(run_dir: str) -> list[dict[str, Any]]:
    """The evaluator's metrics rows of RUN_DIR (metrics/evaluator.jsonl), oldest first."""
    from apex.metrics import read_jsonl

    path = os.path.join(run_dir, "metrics", "evaluator.jsonl")
    if not os.path.isfile(path):
        return []
    return [r for r in read_jsonl(path) if "evaluator/param_version" in r]


def _evaluation(
    rows: list[dict[str, Any]], config: dict[str, Any], version: int, mean: float | None = None
) -> dict[str, Any] | None:
    """The last evaluation of `version` (whose mean is `mean`, when given) in `rows`,
    with the seed it ran from."""
    found = None
    for row in rows:
        if int(row["evaluator/param_version"]) != version:
            continue
        if mean is not None and row.get("evaluator/return_mean") != mean:
            continue
        found = row
    if found is None:
        return None
    evaluation = config.get("evaluation", {})
    k = found.get("evaluator/evaluations")
    seed = found.get("evaluator/seed")  # older runs' rows lack it: the evaluator's rule
    if seed is None and k is not None:
        from apex.evaluation import evaluation_seed

        seed = evaluation_seed(int(config.get("seed", 0)), int(k) - 1)
    return {
        "return_mean": found.get("evaluator/return_mean"),
        "return_min": found.get("evaluator/return_min"),
        "return_max": found.get("evaluator/return_max"),
        "episodes": evaluation.get("episodes"),
        "epsilon": evaluation.get("epsilon"),
        "seed": seed,
        "evaluation": k,
        "env_steps": found.get("evaluator/env_steps"),
        "time": found.get("time"),
    }


def _observation_spec(config: ApexConfig) -> dict[str, Any] | None:
    """The observation the network takes (apex.specs.EnvSpec), None when the env
    cannot be made here (then `load` makes it)."""
    from apex.envs import env_spec
    from apex.errors import ConfigError

    try:
        spec = env_spec(config.env)
    except ConfigError:
        return None
    return {
        "shape": list(spec.observation_shape),
        "dtype": spec.observation_dtype,
        "num_actions": spec.num_actions,
        "scale": spec.observation_scale,
    }


def write_policy(
    out: str,
    config: dict[str, Any] | ApexConfig,
    weights: Sequence[np.ndarray],
    version: int,
    eval_return: float | None = None,
    evaluation: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    git_commit: str | None = None,
    packages: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Writes a policy folder `out` (weights.npz, policy.json); returns policy.json's content.

    `out` must not exist, or be empty, or (with `overwrite`) be a policy folder.
    """
    config_dict = to_dict(config) if isinstance(config, ApexConfig) else dict(config)
    cfg = config_from_dict(config_dict)
    out = os.path.abspath(out)
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise PolicyError(f"{out} exists and is not a directory")
        if os.listdir(out) and not (overwrite and os.path.isfile(os.path.join(out, POLICY_FILE))):
            raise PolicyError(
                f"{out} exists and is not empty"
                + (
                    " (a policy folder: --force, or overwrite=True, replaces it)"
                    if is_policy_dir(out)
                    else ""
                )
            )
    from apex.agents import get_builder

    env = cfg.env
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "agent": cfg.agent,
        "recurrent": bool(get_builder(cfg).recurrent),
        "env_id": env.id,
        "env_kwargs": config_dict.get("env", {}).get("kwargs", {}),
        "env_imports": list(env.imports),
        "env": {
            "preprocessing": env.preprocessing,
            "observation_indices": None
            if env.observation_indices is None
            else list(env.observation_indices),
            "max_episode_steps": env.max_episode_steps,
            "clip_rewards": env.clip_rewards,
            "encoding": "apex.envs.make_env (gymnasium.make, Atari preprocessing, "
            "ObservationEncoder, observation_indices), then apex.envs.to_observation",
        },
        "observation": _observation_spec(cfg),
        "network": {
            "torso": cfg.learner.torso,
            "conv_layers": config_dict.get("learner", {}).get("conv_layers"),
            "conv_channels": cfg.learner.conv_channels,
            "hidden_sizes": list(cfg.learner.hidden_sizes),
            "dueling": cfg.learner.dueling,
            "lstm_size": cfg.r2d2.lstm_size if get_builder(cfg).recurrent else None,
            "shapes": [list(np.shape(w)) for w in weights],
        },
        "weights": WEIGHTS_FILE,
        "version": int(version),
        "eval_return": None if eval_return is None else float(eval_return),
        "evaluation": evaluation,
        "source": source or {},
        "git_commit": git_commit,
        "packages": packages or {},
        "created": time.time(),
        "config": config_dict,
    }
    parent = os.path.dirname(out)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = f"{out}.partial.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        with open(os.path.join(tmp, WEIGHTS_FILE), "wb") as f:
            np.savez(f, *[np.asarray(w) for w in weights])
        with open(os.path.join(tmp, POLICY_FILE), "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.write("\n")
        if os.path.exists(out):
            shutil.rmtree(out)
        os.rename(tmp, out)
    except OSError as err:
        raise PolicyError(f"cannot write {err.filename or out}: {err.strerror or err}") from None
    return meta


def export(source: str, out: str, which: str = "best", overwrite: bool = False) -> dict[str, Any]:
    """Exports the policy of `source` (a run dir: its newest complete checkpoint;
    or a run checkpoint) to the folder `out`; returns policy.json's content.

    which='best': the best evaluated parameters the checkpoint keeps (PolicyError
    when it has none): online weights or their average, as the run's
    evaluation.weights evaluated; 'latest': the online weights at the
    checkpoint (version: the learner steps then; eval return: the run's last
    evaluation of that version, None if it has none); 'average': the average
    of the online weights at the checkpoint (runs with
    evaluation.weights='average'). policy.json's `parameters` says which.
    """
    from apex import checkpointing

    if which not in WHICH:
        raise PolicyError(f"--which={which!r} is not one of {', '.join(WHICH)}")
    run_dir, path = _find_run(source)
    try:
        ckpt = checkpointing.load(path)
    except checkpointing.CheckpointError as err:
        raise PolicyError(str(err)) from None
    config = _run_config(run_dir, ckpt.manifest)
    learner = ckpt.learner
    rows = evaluation_rows(run_dir)
    evaluated = config_from_dict(config).evaluation  # which weights the run evaluated
    if which == "best":
        if "best_version" not in learner:
            raise PolicyError(
                f"{path} keeps no best evaluated parameters (no evaluation had finished, or "
                "the checkpoint predates them): export --which=latest for its online weights"
            )
        version = int(learner["best_version"])
        eval_return: float | None = float(learner["best_return_mean"])
        prefix = "best/"
        evaluation = _evaluation(rows, config, version, eval_return)
        parameters = f"the best evaluated: {evaluated.describe_weights()}"
    else:
        if which == "average" and "average/0" not in learner:
            raise PolicyError(
                f"{path} keeps no average of the online weights (the run evaluated "
                f"evaluation.weights={evaluated.weights!r}): export --which=latest "
                "for its online weights"
            )
        version = int(learner.get("steps", ckpt.step))
        kind = "average" if which == "average" else "online"
        prefix = f"{kind}/"
        taken = dataclasses.replace(evaluated, weights=kind)
        parameters = f"at the checkpoint: {taken.describe_weights()}"
        # The run's evaluations are of this kind of weights only when it evaluated them.
        evaluation = _evaluation(rows, config, version) if evaluated.weights == kind else None
        eval_return = None if evaluation is None else evaluation["return_mean"]
    count = sum(1 for k in learner if k.startswith(prefix))
    weights = [learner[f"{prefix}{i}"] for i in range(count)]
    shapes = ckpt.manifest.get("network_shapes")
    if not weights or (shapes and [list(w.shape) for w in weights] != shapes):
        raise PolicyError(
            f"{path}: the {prefix}* arrays ({[list(w.shape) for w in weights]}) do not match "
            f"the network's shapes in its manifest ({shapes})"
        )
    versions = {}
    try:
        with open(os.path.join(run_dir, "versions.json")) as f:
            versions = json.load(f)
    except (OSError, ValueError):
        pass
    source_info = {
        "run_dir": run_dir,
        "checkpoint": path,
        "checkpoint_step": ckpt.step,
        "which": which,
        "parameters": parameters,
    }
    return write_policy(
        out,
        config,
        weights,
        version,
        eval_return,
        evaluation,
        source_info,
        ckpt.manifest.get("git_commit") or versions.get("git_commit"),
        ckpt.manifest.get("packages") or versions.get("packages"),
        overwrite=overwrite,
    )


# -------------------------------------------------------------------- load


def is_policy_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, POLICY_FILE))


class TrainedPolicy:
    """An exported policy: greedy actions and Q-values for single observations.

    Attributes: config (the run's ApexConfig), spec (apex.specs.EnvSpec), weights
    (the flat list), version, eval_return, env_id, recurrent, metadata (policy.json).
    """

    def __init__(self, metadata: dict[str, Any], weights: list[np.ndarray], path: str = ""):
        from apex.agents import make_policy

        self.path = path
        self.metadata = metadata
        self.config = config_from_dict(metadata["config"])
        self.weights = weights
        self.version: int = int(metadata["version"])
        self.eval_return: float | None = metadata.get("eval_return")
        self.env_id: str = self.config.env.id
        self.spec = self._spec(metadata.get("observation"))
        self._policy = make_policy(self.config, self.spec)
        self._policy.set_weights(weights)
        self.recurrent: bool = bool(self._policy.recurrent)
        self._state = self._policy.initial_state(1)
        self._encoders: list[Any] | None = None
        self._probe: Any = None

    def _spec(self, observation: dict[str, Any] | None):
        from apex.envs import EnvSpec, env_spec

        if observation:
            return EnvSpec(
                observation_shape=tuple(observation["shape"]),
                observation_dtype=observation["dtype"],
                num_actions=int(observation["num_actions"]),
                observation_scale=float(observation["scale"]),
            )
        return env_spec(self.config.env)

    # ------------------------------------------------------------ envs
    def make_env(self, **kwargs: Any):
        """The env as apex's evaluator makes it (apex.envs.make_env of the run's
        env config); `kwargs` are added to env.kwargs (e.g. render_mode='rgb_array')."""
        from apex.envs import make_env

        env = self.config.env
        if kwargs:
            env = dataclasses.replace(env, kwargs={**env.kwargs, **kwargs})
        return make_env(env)

    def episode_cap(self, env: Any) -> int:
        """Steps after which apex's evaluator cuts an episode of `env` (apex.evaluation)."""
        from apex.evaluation import episode_cap

        return episode_cap(self.config, env)

    def evaluate(self, episodes: int = 10, seed: int | None = None) -> np.ndarray:
        """Greedy returns of `episodes` episodes through apex.evaluation.evaluate, the
        evaluator's own function (episode i from seed + i; default seed: that of the
        recorded evaluation, else the evaluator's first). Leaves act()'s state alone."""
        from apex.evaluation import evaluate

        returns = evaluate(self.config, self._policy, int(episodes), 0.0, self.default_seed(seed))
        assert returns is not None  # no should_stop: never cut short
        return returns

    def default_seed(self, seed: int | None = None) -> int:
        """`seed`, else the recorded evaluation's seed, else the evaluator's first seed."""
        if seed is not None:
            return int(seed)
        recorded = (self.metadata.get("evaluation") or {}).get("seed")
        if recorded is not None:
            return int(recorded)
        from apex.evaluation import evaluation_seed

        return evaluation_seed(self.config.seed, 0)

    # ---------------------------------------------------------- acting
    def reset(self) -> None:
        """Starts an episode: a recurrent policy's state back to zero (no-op otherwise)."""
        self._state = self._policy.initial_state(1)

    def observation(self, observation: Any) -> np.ndarray:
        """`observation` as the network takes it (see the module doc)."""
        import gymnasium as gym

        from apex.envs import to_observation

        shape = tuple(self.spec.observation_shape)
        if not isinstance(observation, (dict, tuple)):
            obs = np.asarray(observation)
            if obs.shape == shape:  # make_env's observation (or one that needs only a cast)
                wanted = np.uint8 if self.spec.observation_dtype == "uint8" else np.float32
                return to_observation(obs.astype(wanted, copy=False))
        if self.config.env.preprocessing == "atari":
            raise ValueError(
                f"an observation of shape {shape} from policy.make_env() expected "
                "(Atari preprocessing happens in the env, not per observation)"
            )
        encoders = self._raw_encoders()
        raw_space = encoders[0].env.observation_space  # ObservationEncoder's: gymnasium.make's
        raw_shape = getattr(raw_space, "shape", None)
        if isinstance(raw_space, gym.spaces.Box) and np.shape(observation) != raw_shape:
            raise ValueError(
                f"an observation of shape {shape} (policy.make_env()'s) or {raw_shape} "
                f"(gymnasium.make({self.env_id!r})'s) expected, not {np.shape(observation)}"
            )
        encoded = observation
        try:
            for wrapper in encoders:
                encoded = wrapper.observation(encoded)
            out = to_observation(encoded)
        except Exception as err:  # noqa: BLE001 - the user's value: say what was expected
            raise ValueError(
                f"cannot encode the observation for {self.env_id}: {type(err).__name__}: {err}"
            ) from None
        if out.shape != shape:
            raise ValueError(
                f"the observation encodes to shape {out.shape}; the network takes {shape}"
            )
        return out

    def _raw_encoders(self) -> list[Any]:
        """make_env's observation wrappers, innermost first, from ObservationEncoder on."""
        if self._encoders is None:
            import gymnasium as gym

            from apex.envs import ObservationEncoder

            self._probe = self.make_env()
            chain, env = [], self._probe
            while isinstance(env, gym.Wrapper):
                if isinstance(env, gym.ObservationWrapper):
                    chain.append(env)
                if isinstance(env, ObservationEncoder):
                    break
                env = env.env
            self._encoders = chain[::-1]
        return self._encoders

    def _forward(self, obs: np.ndarray) -> tuple[np.ndarray, Any]:
        batch = self.observation(obs)[None]
        if self._state is None:
            q, _ = self._policy(batch)
            return q[0], None
        q, state = self._policy(batch, self._state)
        return q[0], state

    def q_values(self, observation: Any) -> np.ndarray:
        """Q-values [num_actions] of one observation (a recurrent policy: from its
        current state, which this call does not advance)."""
        return np.asarray(self._forward(observation)[0])

    def act(self, observation: Any) -> int:
        """The greedy action for one observation (a recurrent policy advances its
        state: call reset() at each episode start)."""
        q, state = self._forward(observation)
        if state is not None:
            self._state = state
        return int(np.argmax(q))

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None
            self._encoders = None

    def __repr__(self) -> str:
        return (
            f"TrainedPolicy({self.metadata.get('agent')} on {self.env_id}, version "
            f"{self.version}, eval return {self.eval_return})"
        )


def read_metadata(path: str) -> dict[str, Any]:
    """policy.json of the policy folder `path`; PolicyError if it is not one."""
    file = os.path.join(path, POLICY_FILE)
    if not os.path.isdir(path):
        raise PolicyError(f"{path} is not a directory")
    if not os.path.isfile(file):
        raise PolicyError(
            f"{path} is not a policy folder (no {POLICY_FILE}; make one with "
            "python -m tools.policy export RUN_DIR --out=DIR)"
        )
    try:
        with open(file) as f:
            meta = json.load(f)
    except (OSError, ValueError) as err:
        raise PolicyError(f"{file} cannot be read: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise PolicyError(f"{file} is not an apex policy (format {FORMAT!r} expected)")
    if meta.get("format_version") != FORMAT_VERSION:
        raise PolicyError(
            f"{file} has policy format version {meta.get('format_version')!r}; this apex "
            f"reads {FORMAT_VERSION}"
        )
    missing = [k for k in ("config", "version") if k not in meta]
    if missing:
        raise PolicyError(f"{file} lacks {', '.join(missing)}")
    return meta


def load(path: str) -> TrainedPolicy:
    """The policy of an exported folder (see the module doc); PolicyError names what
    is wrong with it."""
    meta = read_metadata(path)
    file = os.path.join(path, meta.get("weights") or WEIGHTS_FILE)
    try:
        with np.load(file) as data:
            weights = [data[f"arr_{i}"] for i in range(len(data.files))]
    except Exception as err:  # noqa: BLE001 - missing, or a damaged npz
        raise PolicyError(f"{file} cannot be read: {type(err).__name__}: {err}") from None
    shapes = (meta.get("network") or {}).get("shapes")
    if shapes is not None and [list(w.shape) for w in weights] != shapes:
        raise PolicyError(
            f"{file} holds arrays of shapes {[list(w.shape) for w in weights]}; "
            f"{POLICY_FILE} says {shapes}"
        )
    return TrainedPolicy(meta, weights, os.path.abspath(path))
