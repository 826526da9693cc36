"""Dataclass configs for apex programs, with validation and dotted overrides.

A config file is a Python file with `get_config() -> ApexConfig`. Entry points
load it with `load_config_file` and apply `--config.a.b=value` overrides with
`apply_override`; `validate` runs before anything launches and raises a
`ConfigError` naming the field, the value and what would be valid.

Example:
    >>> cfg = ApexConfig()
    >>> apply_override(cfg, 'actor.num_actors', '4')
    >>> validate(cfg)
    >>> cfg.actor.num_actors
    4
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import types
import typing
from typing import Any

from apex.errors import ConfigError

INSERT_PRIORITIES = ("actor_td", "max_seen", "constant")
LAUNCH_TYPES = ("local_mp", "local_mt", "test_mt")
AGENTS = ("apex_dqn", "r2d2")
PREPROCESSING = ("none", "atari")
TORSOS = ("mlp", "conv")


@dataclasses.dataclass
class EnvConfig:
    """Which Gymnasium environment the actors and the evaluator step."""

    id: str = "CartPole-v1"
    """Gymnasium id; must have a Discrete action space and a Box observation."""
    max_episode_steps: int | None = None
    """Overrides the env's own time limit (None keeps the registered one)."""
    observation_indices: tuple[int, ...] | None = None
    """Keep only these components of a vector observation (None: all). Masked
    CartPole keeps (0, 2): cart position and pole angle, no velocities."""
    preprocessing: str = "none"
    """'none', or 'atari': no-op starts, frame skip with max-pool, grayscale,
    resize (gymnasium's AtariPreprocessing), then an optional frame stack."""
    frame_skip: int = 4
    """Atari: emulator frames per agent step (the max of the last two is kept)."""
    screen_size: int = 84
    """Atari: observations are screen_size x screen_size grayscale."""
    frame_stack: int = 1
    """Atari: observations stacked per agent step (4 for feed-forward agents)."""
    noop_max: int = 30
    """Atari: at most this many no-op actions after each reset."""
    terminal_on_life_loss: bool = False
    """Atari: end episodes on a life loss (off: the standard since Machado et al.)."""
    sticky_action_probability: float = 0.0
    """Atari: ALE's repeat_action_probability (0: deterministic emulator)."""
    clip_rewards: bool = False
    """Clip rewards to [-1, 1] as the actors store them (the Ape-X Atari recipe)."""
    fault_every: int | None = None
    """Fault injection: each actor env raises InjectedFault on every N-th step
    (None: never). For testing that actors restart; never set it for real runs."""


@dataclasses.dataclass
class ReplayConfig:
    """The Reverb table of n-step transitions and its rate limiter."""

    capacity: int = 20_000
    """Maximum number of transitions kept; the oldest is removed first (FIFO)."""
    min_size: int = 1_000
    """Transitions that must be inserted before the learner may sample."""
    samples_per_insert: float = 4.0
    """Target ratio of sampled to inserted transitions (SampleToInsertRatio)."""
    error_buffer: float | None = None
    """Allowed deviation from samples_per_insert, in samples; None: auto."""
    priority_exponent: float = 0.6
    """Alpha of the Prioritized sampler: P(i) ~ p_i ** alpha."""
    n_step: int = 3
    """Number of rewards summed into each stored transition."""
    discount: float = 0.99
    """Per-step discount gamma; a stored transition carries gamma ** k or 0."""
    insert_priority: str = "actor_td"
    """Initial priority: actor_td (|n-step TD| from the actor), max_seen, constant."""
    constant_priority: float = 1.0
    """Priority used by insert_priority='constant' (and the first max_seen)."""
    priority_epsilon: float = 1e-3
    """Added to every |TD| so no transition gets priority 0."""
    colocate_with_learner: bool = True
    """Run the Reverb server in the learner's process (no gRPC on sampling)."""
    port: int | None = None
    """Fixed Reverb port (None: a free one is picked)."""


@dataclasses.dataclass
class R2D2Config:
    """Sequences and recurrent learning; used when agent='r2d2'."""

    sequence_length: int = 80
    """Steps per stored sequence (L), burn-in included."""
    sequence_period: int = 40
    """Steps between the starts of consecutive sequences (P; overlap L - P)."""
    burn_in: int = 40
    """First steps of a sequence only unrolled from the stored state, no gradient."""
    skip_burn_in_at_episode_start: bool = True
    """A sequence that starts at an episode's first step has the exact (zero)
    state, so all its L steps are trained: no step of a short episode is lost."""
    lstm_size: int = 512
    """LSTM units."""
    priority_eta: float = 0.9
    """Sequence priority eta * max|delta| + (1 - eta) * mean|delta|."""
    value_rescaling: bool = True
    """Learn h(Q) with h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (R2D2's
    invertible value rescaling) instead of clipping rewards."""
    value_rescaling_epsilon: float = 1e-3
    """eps of h."""


@dataclasses.dataclass
class ActorConfig:
    """Epsilon-greedy actors, each stepping a vector of envs."""

    num_actors: int = 2
    """Actor processes."""
    envs_per_actor: int = 16
    """Envs stepped by one actor with one batched forward pass per step."""
    epsilon_base: float = 0.4
    """Ape-X ladder: slot i of M gets epsilon_base ** (1 + alpha * i / (M - 1))."""
    epsilon_alpha: float = 7.0
    """Exponent spread of the Ape-X epsilon ladder."""
    params_update_period: int = 400
    """Env steps (summed over the actor's envs) between parameter pulls."""
    report_period_seconds: float = 1.0
    """Seconds between an actor's reports to the coordinator."""
    max_restarts: int = 20
    """Restarts of a failed actor (an exception in its envs or loop) before the
    program is stopped with stop_reason 'node failed'."""
    restart_backoff_seconds: float = 1.0
    """First wait before restarting a failed actor; doubles per restart, at most 30 s."""


@dataclasses.dataclass
class LearnerConfig:
    """Double DQN learner on prioritized n-step transitions."""

    torso: str = "mlp"
    """'mlp' (vector observations) or 'conv' (Nature-DQN convolutions, images)."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Widths of the dense layers (ReLU) after the torso's input (mlp) or its
    convolutions (conv)."""
    dueling: bool = False
    """Use a dueling head (value + advantage)."""
    batch_size: int = 64
    """Transitions per SGD step."""
    learning_rate: float = 2e-3
    """Adam step size."""
    adam_epsilon: float = 1e-8
    """Adam epsilon."""
    max_grad_norm: float = 10.0
    """Global-norm gradient clipping."""
    huber_delta: float = 1.0
    """Huber loss threshold."""
    target_update_period: int = 100
    """SGD steps between target-network copies."""
    importance_exponent: float = 0.4
    """Beta of the importance-sampling weights (N * P(i)) ** -beta."""
    num_sample_workers: int = 1
    """Reverb sampling streams (worker threads) feeding the learner."""
    in_flight_batches: int = 8
    """Batches each sampling stream keeps requested ahead of the learner."""
    prefetch_batches: int = 8
    """Batches prefetched ahead of the SGD step."""
    priority_update_period: int = 4
    """SGD steps whose priority updates are merged into one Reverb call."""
    seed: int = 0
    """Seed of the network initialisation."""


@dataclasses.dataclass
class EvaluationConfig:
    """Greedy evaluation on the latest parameters."""

    episodes: int = 10
    """Episodes per evaluation (run side by side)."""
    epsilon: float = 0.0
    """Exploration during evaluation (0: greedy)."""
    period_seconds: float = 2.0
    """Seconds between the starts of two evaluations."""
    target_return: float = 475.0
    """Mean evaluation return that counts as solved (CartPole-v1: 475)."""


@dataclasses.dataclass
class StopConfig:
    """When the coordinator stops the program (the first reached wins)."""

    max_actor_steps: int | None = 1_000_000
    """Env steps summed over all actors (None: no limit)."""
    max_learner_steps: int | None = None
    """Learner SGD steps (None: no limit)."""
    max_wall_seconds: float | None = 120.0
    """Seconds since launch (None: no limit)."""
    when_solved: bool = False
    """Stop as soon as the evaluation reaches evaluation.target_return."""


@dataclasses.dataclass
class CheckpointConfig:
    """Whole-run checkpoints in RUN_DIR/checkpoints (learner, counters, replay)."""

    period_seconds: float | None = 60.0
    """Seconds between two periodic checkpoints (None: only the one at the stop)."""
    on_stop: bool = True
    """Write a final checkpoint when the program stops in order (a stop
    criterion, Ctrl-C, SIGTERM, a failed node)."""
    keep: int = 2
    """Complete checkpoints kept; older ones are deleted after a new one completes."""


@dataclasses.dataclass
class LoggingConfig:
    """Terminal progress and metrics files."""

    progress_period_seconds: float = 5.0
    """Seconds between two progress lines (0 disables them)."""
    metrics_period_seconds: float = 1.0
    """Seconds between two metrics rows per component."""
    tensorboard: bool = True
    """Also write TensorBoard event files to RUN_DIR/tensorboard/<component>."""
    heartbeat_period_seconds: float = 1.0
    """Seconds between two heartbeats of a node (RUN_DIR/heartbeats; 0 disables)."""
    stall_seconds: float = 30.0
    """A learner waiting for samples, or an actor held in an insert, this long
    makes the coordinator log a named reason with the rate limiter's numbers."""
    epsilon_bands: tuple[float, ...] = (0.01, 0.1)
    """Band edges for per-epsilon-band returns and sample shares: (0.01, 0.1)
    gives bands eps < 0.01, 0.01 <= eps < 0.1 and eps >= 0.1."""


@dataclasses.dataclass
class ApexConfig:
    """A whole program: Ape-X DQN or R2D2."""

    agent: str = "apex_dqn"
    """'apex_dqn' (feed-forward, n-step transitions) or 'r2d2' (recurrent, sequences)."""
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    r2d2: R2D2Config = dataclasses.field(default_factory=R2D2Config)
    actor: ActorConfig = dataclasses.field(default_factory=ActorConfig)
    learner: LearnerConfig = dataclasses.field(default_factory=LearnerConfig)
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    stop: StopConfig = dataclasses.field(default_factory=StopConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    run_dir: str = ""
    """Where metrics, config and summary.json go ('' : runs/<time>-<config>)."""
    seed: int = 0
    """Seed of envs and exploration; actor i, slot j uses seed + 1000 * i + j."""


def effective_error_buffer(replay: ReplayConfig, batch_size: int) -> float:
    """The rate limiter's error buffer: the configured one, or a safe default."""
    if replay.error_buffer is not None:
        return float(replay.error_buffer)
    spi = max(1.0, replay.samples_per_insert)
    return float(max(10 * batch_size, replay.min_size * spi * 0.5, 4 * spi))


def env_step_replay_ratio(config: ApexConfig) -> float:
    """How many times the learner trains on each env step, on average, at the
    target samples_per_insert: SPI for Ape-X (one item per env step); for R2D2
    SPI x trained steps per sequence (L - burn_in) / new env steps per sequence (P)."""
    spi = float(config.replay.samples_per_insert)
    if config.agent != "r2d2":
        return spi
    q = config.r2d2
    return spi * (q.sequence_length - q.burn_in) / q.sequence_period


def env_steps_per_item(config: ApexConfig) -> float:
    """Env steps (per env slot) that yield one replay item: 1 for Ape-X's
    transitions, r2d2.sequence_period for R2D2's sequences."""
    return float(config.r2d2.sequence_period) if config.agent == "r2d2" else 1.0


def rate_limit_plan(config: ApexConfig) -> str:
    """The replay and learner settings read together, as the launch line states them."""
    r, lc = config.replay, config.learner
    spi = float(r.samples_per_insert)
    buffer = effective_error_buffer(r, lc.batch_size)
    per_item = env_steps_per_item(config)
    unit = "sequences" if config.agent == "r2d2" else "transitions"
    return (
        f"learner starts at {r.min_size:,} {unit} (~{r.min_size * per_item:,.0f} env steps); "
        f"then {spi:g} samples per insert = {spi / lc.batch_size:.3g} SGD steps per item, "
        f"each env step used ~{env_step_replay_ratio(config):.3g} times; actors may run "
        f"~{buffer / spi:,.0f} items ahead of that ratio (error buffer {buffer:g}) before "
        "their inserts wait, and the learner as far behind before its samples wait"
    )


def _check_rate_limits(c: ApexConfig) -> None:
    """Refuses settings under which the rate limiter would never let the learner
    (or the actors) through."""
    r, s = c.replay, c.stop
    per_item = env_steps_per_item(c)
    if s.max_actor_steps is not None:
        items = s.max_actor_steps / per_item
        _check(
            items >= r.min_size,
            "replay.min_size",
            r.min_size,
            f"at most the {items:,.0f} items that stop.max_actor_steps={s.max_actor_steps:,} env "
            "steps can insert, or the program stops before the learner samples once",
        )


def _check(cond: bool, field: str, value: Any, valid: str) -> None:
    if not cond:
        raise ConfigError(field, value, valid)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Field rules: (dotted path, kind, optional). Kinds: "int>=0", "int>=1",
# "num>0", "num>=0", "num in [0,1]", "num". Optional fields may be None.
_RULES: tuple[tuple[str, str, bool], ...] = (
    ("env.max_episode_steps", "int>=1", True),
    ("env.frame_skip", "int>=1", False),
    ("env.screen_size", "int>=1", False),
    ("env.frame_stack", "int>=1", False),
    ("env.noop_max", "int>=0", False),
    ("env.sticky_action_probability", "num in [0,1]", False),
    ("r2d2.sequence_length", "int>=2", False),
    ("r2d2.sequence_period", "int>=1", False),
    ("r2d2.burn_in", "int>=0", False),
    ("r2d2.lstm_size", "int>=1", False),
    ("r2d2.priority_eta", "num in [0,1]", False),
    ("r2d2.value_rescaling_epsilon", "num>=0", False),
    ("replay.capacity", "int>=1", False),
    ("replay.min_size", "int>=1", False),
    ("replay.samples_per_insert", "num>0", False),
    ("replay.priority_exponent", "num in [0,1]", False),
    ("replay.n_step", "int>=1", False),
    ("replay.discount", "num in [0,1]", False),
    ("replay.constant_priority", "num>0", False),
    ("replay.priority_epsilon", "num>0", False),
    ("actor.num_actors", "int>=1", False),
    ("actor.envs_per_actor", "int>=1", False),
    ("actor.epsilon_base", "num in [0,1]", False),
    ("actor.epsilon_alpha", "num>=0", False),
    ("actor.params_update_period", "int>=1", False),
    ("actor.report_period_seconds", "num>0", False),
    ("actor.max_restarts", "int>=0", False),
    ("actor.restart_backoff_seconds", "num>=0", False),
    ("env.fault_every", "int>=1", True),
    ("checkpoint.period_seconds", "num>0", True),
    ("checkpoint.keep", "int>=1", False),
    ("learner.batch_size", "int>=1", False),
    ("learner.learning_rate", "num>0", False),
    ("learner.adam_epsilon", "num>0", False),
    ("learner.max_grad_norm", "num>0", False),
    ("learner.huber_delta", "num>0", False),
    ("learner.target_update_period", "int>=1", False),
    ("learner.importance_exponent", "num in [0,1]", False),
    ("learner.num_sample_workers", "int>=1", False),
    ("learner.in_flight_batches", "int>=1", False),
    ("learner.prefetch_batches", "int>=0", False),
    ("learner.priority_update_period", "int>=1", False),
    ("evaluation.episodes", "int>=1", False),
    ("evaluation.epsilon", "num in [0,1]", False),
    ("evaluation.period_seconds", "num>0", False),
    ("evaluation.target_return", "num", False),
    ("stop.max_actor_steps", "int>=1", True),
    ("stop.max_learner_steps", "int>=1", True),
    ("stop.max_wall_seconds", "num>0", True),
    ("logging.progress_period_seconds", "num>=0", False),
    ("logging.metrics_period_seconds", "num>0", False),
    ("logging.heartbeat_period_seconds", "num>=0", False),
    ("logging.stall_seconds", "num>0", False),
    ("seed", "int>=0", False),
)

_KINDS: dict[str, tuple[Any, str]] = {
    "int>=0": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "int>=1": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "int>=2": (lambda v: _is_int(v) and v >= 2, "an integer >= 2"),
    "num>0": (lambda v: _is_num(v) and v > 0, "a number > 0"),
    "num>=0": (lambda v: _is_num(v) and v >= 0, "a number >= 0"),
    "num in [0,1]": (lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "num": (_is_num, "a number"),
}


def _get(config: Any, path: str) -> Any:
    for name in path.split("."):
        config = getattr(config, name)
    return config


def validate(config: ApexConfig) -> None:
    """Raises ConfigError for the first invalid field; returns None if all are valid."""
    c = config
    _check(
        isinstance(c.env.id, str) and bool(c.env.id),
        "env.id",
        c.env.id,
        "a Gymnasium id such as 'CartPole-v1'",
    )
    for path, choices in (
        ("agent", AGENTS),
        ("env.preprocessing", PREPROCESSING),
        ("learner.torso", TORSOS),
    ):
        _check(_get(c, path) in choices, path, _get(c, path), f"one of {list(choices)}")
    for path, kind, optional in _RULES:
        value = _get(c, path)
        if optional and value is None:
            continue
        ok, valid = _KINDS[kind]
        _check(ok(value), path, value, f"None or {valid}" if optional else valid)

    r, lr, s = c.replay, c.learner, c.stop
    _check(
        r.min_size <= r.capacity,
        "replay.min_size",
        r.min_size,
        f"at most replay.capacity ({r.capacity}), or the learner could never sample",
    )
    _check(
        r.insert_priority in INSERT_PRIORITIES,
        "replay.insert_priority",
        r.insert_priority,
        f"one of {list(INSERT_PRIORITIES)}",
    )
    if r.port is not None:
        _check(
            _is_int(r.port) and 1 <= r.port <= 65535,
            "replay.port",
            r.port,
            "None or a port in [1, 65535]",
        )
    _check(
        isinstance(lr.hidden_sizes, (tuple, list))
        and len(lr.hidden_sizes) >= 1
        and all(_is_int(h) and h >= 1 for h in lr.hidden_sizes),
        "learner.hidden_sizes",
        lr.hidden_sizes,
        "a non-empty tuple of integers >= 1, e.g. (128, 128)",
    )
    if c.env.observation_indices is not None:
        _check(
            isinstance(c.env.observation_indices, (tuple, list))
            and len(c.env.observation_indices) >= 1
            and all(_is_int(i) and i >= 0 for i in c.env.observation_indices),
            "env.observation_indices",
            c.env.observation_indices,
            "None or a non-empty tuple of integers >= 0, e.g. (0, 2)",
        )
    if c.agent == "r2d2":
        q = c.r2d2
        _check(
            q.sequence_period <= q.sequence_length,
            "r2d2.sequence_period",
            q.sequence_period,
            f"at most r2d2.sequence_length ({q.sequence_length}); a larger period skips steps",
        )
        _check(
            q.burn_in < q.sequence_length - 1,
            "r2d2.burn_in",
            q.burn_in,
            f"less than r2d2.sequence_length - 1 ({q.sequence_length - 1}), so that some "
            "steps are trained",
        )
    _check(
        lr.batch_size <= r.capacity,
        "learner.batch_size",
        lr.batch_size,
        f"at most replay.capacity ({r.capacity})",
    )
    if r.error_buffer is not None:
        _check(_is_num(r.error_buffer), "replay.error_buffer", r.error_buffer, "None or a number")
        need = max(2.0 * max(1.0, r.samples_per_insert), float(lr.batch_size))
        _check(
            r.error_buffer >= need,
            "replay.error_buffer",
            r.error_buffer,
            f"None or >= {need:g} (2 * max(1, samples_per_insert) and >= learner.batch_size); a smaller buffer "
            "makes the rate limiter block the learner in the middle of a batch",
        )
    _check_rate_limits(c)
    _check(
        s.max_actor_steps is not None
        or s.max_learner_steps is not None
        or s.max_wall_seconds is not None
        or s.when_solved,
        "stop",
        "no limit",
        "at least one of stop.max_actor_steps, stop.max_learner_steps, stop.max_wall_seconds, stop.when_solved",
    )
    bands = c.logging.epsilon_bands
    _check(
        isinstance(bands, (tuple, list))
        and all(_is_num(b) and 0 < b < 1 for b in bands)
        and list(bands) == sorted(set(bands)),
        "logging.epsilon_bands",
        bands,
        "a tuple of increasing numbers in (0, 1), e.g. (0.01, 0.1), or ()",
    )
    _check(isinstance(c.run_dir, str), "run_dir", c.run_dir, "a path string")


# --------------------------------------------------------------------------- overrides


def _field_types(obj: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(type(obj))
    return {f.name: hints[f.name] for f in dataclasses.fields(obj)}


def _coerce(path: str, text: str, typ: Any) -> Any:
    """Parses `text` as a value of annotation `typ`, or raises ConfigError."""
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if text.strip().lower() in ("none", "null"):
            return None
        last: ConfigError | None = None
        for a in non_none:
            try:
                return _coerce(path, text, a)
            except ConfigError as err:
                last = err
        assert last is not None
        raise last
    if typ is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(path, text, "a boolean (true/false)")
    if typ is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(path, text, "an integer") from None
    if typ is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(path, text, "a number") from None
    if typ is str:
        return text
    if origin in (tuple, list):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise ConfigError(path, text, "a tuple literal such as (128, 128)") from None
        if isinstance(value, (int, float)):
            value = (value,)
        if not isinstance(value, (tuple, list)):
            raise ConfigError(path, text, "a tuple literal such as (128, 128)")
        return tuple(value)
    raise ConfigError(path, text, f"a value of type {typ}")


def apply_override(config: Any, path: str, text: str) -> None:
    """Sets the field at dotted `path` (e.g. 'actor.num_actors') from its text form."""
    parts = path.split(".")
    node = config
    for i, name in enumerate(parts):
        types_ = _field_types(node)
        prefix = ".".join(parts[:i])
        if name not in types_:
            where = f"'{prefix}'" if prefix else "the config"
            raise ConfigError(
                path, text, f"an existing field; {where} has: {', '.join(sorted(types_))}"
            )
        if i == len(parts) - 1:
            if dataclasses.is_dataclass(getattr(node, name)):
                raise ConfigError(
                    path,
                    text,
                    f"a leaf field; '{path}' is a section with: {', '.join(sorted(_field_types(getattr(node, name))))}",
                )
            setattr(node, name, _coerce(path, text, types_[name]))
        else:
            node = getattr(node, name)
            if not dataclasses.is_dataclass(node):
                raise ConfigError(
                    path, text, f"a path through sections; '{'.'.join(parts[: i + 1])}' is a value"
                )


def load_config_file(path: str) -> Any:
    """Imports `path` and returns its get_config()."""
    if not os.path.isfile(path):
        raise ConfigError(
            "--config", path, "the path of an existing config file such as configs/apex_cartpole.py"
        )
    if not path.endswith(".py"):
        raise ConfigError("--config", path, "a Python file (.py) that defines get_config()")
    spec = importlib.util.spec_from_file_location(f"_apex_config_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise ConfigError("--config", path, "a Python file (.py) that defines get_config()")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's file: name it and its error
        raise ConfigError(
            "--config", path, f"a config file that imports ({type(err).__name__}: {err})"
        ) from None
    if not hasattr(module, "get_config"):
        raise ConfigError("--config", path, "a file that defines get_config()")
    try:
        config = module.get_config()
    except Exception as err:  # noqa: BLE001 - the user's function: name it and its error
        raise ConfigError(
            "--config", path, f"a file whose get_config() runs ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(config, ApexConfig):
        raise ConfigError(
            "--config",
            path,
            f"a file whose get_config() returns an apex.config.ApexConfig, not "
            f"{type(config).__name__}",
        )
    return config


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain JSON-able dicts."""
    return dataclasses.asdict(config)
