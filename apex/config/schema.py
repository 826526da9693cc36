"""The config dataclasses: every field of an apex program, with its default and
what it means. Validation lives in apex.validation and the rate-limit planner
in apex.planning (they consult the agents' builders); file loading and
`--config.a.b=value` overrides in apex.config.overrides.
"""

from __future__ import annotations

import dataclasses
from typing import Any

INSERT_PRIORITIES = ("actor_td", "max_seen", "constant")
PREPROCESSING = ("none", "atari")
VECTORIZATION = (
    "auto",
    "python",
    "gymnasium",
    "gymnasium_sync",
    "gymnasium_async",
    "ale",
    "envpool",
)
TORSOS = ("mlp", "conv")
CONV_CHANNELS = ("auto", "first", "last")
INFERENCE_MODES = ("local", "central")
EVALUATION_WEIGHTS = ("online", "average")
# Conv presets (filters, kernel, stride) per layer, VALID padding.
CONV_PRESETS: dict[str, tuple[tuple[int, int, int], ...]] = {
    # Nature DQN (Mnih et al. 2015), for 84x84 Atari frames.
    "nature": ((32, 8, 4), (64, 4, 2), (64, 3, 1)),
    # MinAtar (Young & Tian 2019): one 3x3 conv of 16 filters, for 10x10 inputs.
    "small": ((16, 3, 1),),
}


@dataclasses.dataclass
class EnvConfig:
    """Which Gymnasium environment the actors and the evaluator step."""

    id: str = "CartPole-v1"
    """Gymnasium id (or Gymnasium's 'module:EnvId' form); the env must have a
    Discrete action space. Box, Discrete, MultiBinary, Tuple and Dict
    observations are taken (see apex.envs for how each is encoded)."""
    imports: tuple[str, ...] = ()
    """Modules imported in every process before the env is made, so that a
    package can register its envs; 'module:function' also calls that function
    (e.g. ('minatar.gym:register_envs',)). Each must be importable on every host."""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments passed to gymnasium.make (e.g. {'enable_wind': True}
    for LunarLander-v3); on the command line a dict literal."""
    max_episode_steps: int | None = None
    """Overrides the env's own time limit (None keeps the registered one)."""
    observation_indices: tuple[int, ...] | None = None
    """Keep only these components of a vector observation (None: all). Masked
    CartPole keeps (0, 2): cart position and pole angle, no velocities."""
    preprocessing: str = "none"
    """'none', or 'atari': no-op starts, frame skip with max-pool, grayscale,
    resize (gymnasium's AtariPreprocessing), then an optional frame stack."""
    frame_skip: int = 4
    """Atari: emulator frames per agent step (the max of the last two is kept).
    This field and the five after it apply only with preprocessing='atari'; set
    for another env they are refused before launch."""
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
    vectorization: str = "auto"
    """How an actor steps its envs_per_actor envs (apex.vector_envs): 'python'
    (a list of envs, any env), 'gymnasium' (the env's NumPy vector entry point:
    CartPole-v1), 'gymnasium_sync' / 'gymnasium_async' (gymnasium's vector envs;
    async: a subprocess per env, for slow envs), 'ale' (ALE's C++ vector env,
    ALE ids with preprocessing='atari'), 'envpool' (an EnvPool the user
    installed); 'auto': the fastest of these that keeps the semantics, named
    in the launch line. Every mode stores the same items."""


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
    """Allowed deviation from samples_per_insert, in samples; None: auto
    (effective_error_buffer)."""
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
    frame_storage: str = "auto"
    """'auto' stores each frame once: Ape-X items on stacked image frames
    (env.frame_stack > 1) reference frame windows of their slot's frame stream;
    R2D2 sequences on image observations reference L consecutive steps of their
    slot's observation stream (overlapping sequences share them). The learner
    gets the same data, bit for bit. 'packed' stores every item's observations
    whole (the older layout; it resumes checkpoints of that layout).
    Vector observations are always packed."""
    frame_compression: str = "zstd"
    """How frames stored once (frame_storage='auto' on image observations) are
    compressed on the actor before Reverb's own Snappy: 'zstd' (default),
    'lz4' (faster, larger) or 'none'. Ape-X compresses each frame alone; R2D2
    each block of up to 8 consecutive observations (a divisor of the sequence
    length and period, so no sequence decodes more than its own steps). The
    learner decodes them back bit for bit; tools.replay shows them as images.
    Pong, per frame: Snappy alone ~374 B, zstd ~155 B, zstd blocks of 8 ~55 B
    (docs/performance.md, "What does replay cost?")."""
    transition_layout: str = "auto"
    """How Ape-X stores a transition on a vector observation. 'auto': one
    float64 row per item (obs, next_obs, action, reward, discount and
    provenance) when the observation is 1-D, at most 512 elements, of a dtype
    float64 holds exactly; Reverb's work per sampled item grows with its
    columns, so the learner samples ~2x cheaper (docs/performance.md).
    'columns': three columns (obs_pair, scalars, provenance), the older layout
    (it resumes checkpoints of that layout). Frame storage
    (frame_storage) and R2D2 sequences are not affected."""
    colocate_with_learner: bool = True
    """Run the Reverb server in the learner's process (no gRPC on sampling)."""
    port: int | None = None
    """Fixed Reverb port (None: a free one is picked)."""
    num_shards: int = 1
    """Reverb servers the replay is split into (apex.replay.shards): shard s holds
    capacity / num_shards items with its own rate limiter (min_size and
    error_buffer split the same way; samples_per_insert is per shard too) and
    its own checkpoint; actor i writes to shard i % num_shards; the learner
    samples whole batches from every shard. 1: one server, as always."""


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
    overlap: bool = False
    """Step the envs in two halves in turn: while one half's envs step (outside
    Python: env.vectorization 'ale' or 'gymnasium_async'), the other half's
    Q-values are computed (apex.vector_halves; Ape-X DQN). Off by default: on 2
    cores it gains nothing (docs/environments.md)."""
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
    inference: str = "local"
    """Where actors get Q-values: 'local' (each actor runs its own copy of the
    network on parameters it pulls) or 'central' (the inference node in the
    learner's process batches every actor's observations; actors hold no
    network). Knobs in `inference`; apex/inference/."""


@dataclasses.dataclass
class ModelStoreConfig:
    """The model store (apex/model_store.py): a node that holds the parameters the
    learner pushes and serves them to the actors and the evaluator."""

    enabled: bool = False
    """True: the learner pushes every `push_period_steps` SGD steps to the store,
    and actors and the evaluator pull from the store (N actors cost the learner
    one push per version, not N pulls); the store keeps the best evaluated
    parameters. False: they pull from the learner, which keeps the best."""
    keep_last: int = 3
    """Versions the store holds (the newest first): the evaluator's result is
    matched to the exact version it evaluated."""
    push_period_steps: int = 25
    """Learner SGD steps between two pushes (with actor.params_update_period, it
    sets the actors' policy lag)."""


@dataclasses.dataclass
class InferenceConfig:
    """The central inference node (actor.inference='central'), in the learner's process."""

    max_batch: int = 256
    """The most observations in one forward pass (at least actor.envs_per_actor:
    one actor's request is never split)."""
    max_wait_ms: float = 2.0
    """The longest a batch waits for more requests after its first one. A batch
    also goes as soon as every actor has a request in it."""
    params_period_seconds: float = 0.1
    """Seconds between the server's reads of the learner's newest parameters
    (in-process: no network pull)."""
    call_timeout_seconds: float = 30.0
    """An actor's request fails after this long (a dead server never hangs an actor)."""


@dataclasses.dataclass
class LearnerConfig:
    """Double DQN learner on prioritized n-step transitions."""

    torso: str = "mlp"
    """'mlp' (vector observations) or 'conv' (convolutions over images, then dense)."""
    conv_layers: tuple[tuple[int, int, int], ...] | str = "nature"
    """The conv torso's layers: a preset ('nature': Nature DQN for 84x84 frames;
    'small': one 3x3 conv of 16 filters for MinAtar-sized 10x10 inputs) or a
    tuple of (filters, kernel, stride) per layer, VALID padding. A stack that
    does not fit the observation is refused before launch."""
    conv_channels: str = "auto"
    """Where an image observation's channels are: 'first' (C, H, W, e.g. stacked
    Atari frames), 'last' (H, W, C, e.g. MinAtar), or 'auto': the smaller of
    the first and last axis (last on a tie). 2-D observations have one channel."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Widths of the dense layers (ReLU) after the torso's input (mlp) or its
    convolutions (conv)."""
    dueling: bool = False
    """Use a dueling head (value + advantage)."""
    batch_size: int = 64
    """Transitions per SGD step."""
    learning_rate: float = 2e-3
    """Adam step size (at the first SGD step)."""
    learning_rate_final: float | None = None
    """Adam step size reached, linearly, after learning_rate_decay_steps SGD
    steps and kept after (None: learning_rate throughout). A smaller step once
    the task is learned keeps a solved policy from flickering."""
    learning_rate_decay_steps: int = 20_000
    """SGD steps over which learning_rate moves to learning_rate_final."""
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
    steps_per_call: int = 1
    """SGD steps per call of the traced step (one replay server): K prefetched
    batches, trained on in turn, their priorities sent as one update. The K
    inlined steps are traced on a thread of their own at the start; until then
    the learner trains one step per call, so its first step does not wait."""
    jit_compile: bool = False
    """Compile the SGD step's math with XLA (tf.function(jit_compile=True)). On
    this CPU it makes the whole step slower (docs/performance.md); a
    local_mp launch then spawns its nodes instead of forking them (TensorFlow
    cannot run the compiled function in a process forked after its import)."""
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
    target_return: float | str | None = "auto"
    """Mean evaluation return that counts as solved. 'auto': the env spec's
    reward_threshold (CartPole-v1: 475, Acrobot-v1: -100, LunarLander-v3: 200),
    or None where the spec has none. None: no target (stop.when_solved is then
    refused). Resolved before launch; config.json holds the number."""
    max_episode_steps: int | None = None
    """Steps after which an evaluation episode is cut (None: the env's own time
    limit, or 27,000 steps for an env that has none: 108,000 Atari frames)."""
    weights: str = "online"
    """The parameters evaluated (and kept as the best): 'online', the learner's
    latest, or 'average', an exponential moving average of them updated after
    every SGD step (evaluation.average_decay). Actors always act with the
    online weights; the average is in every checkpoint and `apex policy
    export --which=average` takes it."""
    average_decay: float = 0.999
    """With evaluation.weights='average': the average's decay per SGD step
    (0.999: a horizon of about 1,000 SGD steps)."""

    def describe_weights(self) -> str:
        """The evaluated parameters in words (summary.json, policy.json)."""
        if self.weights == "average":
            return f"average of the online weights (decay {self.average_decay:g} per SGD step)"
        return "online weights (the learner's latest)"


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
    max_program_restarts: int = 10
    """Whole-program restarts per launch after a node other than an actor dies
    (the learner, a replay shard, the coordinator): the launcher stops what is
    left and starts the program again from the newest complete checkpoint
    (0: stop with exit 1 instead). Actors restart on their own (actor.max_restarts)."""
    crash_loop_seconds: float = 120.0
    """A program life shorter than this that ends with a node's failure is quick;
    3 quick lives in a row ended by the same node are a crash loop: the program
    stops (exit 1) naming the node and its failure."""


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
    wandb: bool = False
    """Also send the metrics to Weights & Biases (the `wandb` extra): offline,
    into RUN_DIR/wandb, unless credentials are set (WANDB_API_KEY or `wandb
    login`); WANDB_MODE, WANDB_ENTITY and the like are honoured."""
    wandb_project: str = "apex"
    """The W&B project of the run."""
    mlflow: bool = False
    """Also send the metrics to MLflow (the `mlflow` extra)."""
    mlflow_tracking_uri: str = ""
    """Where MLflow keeps runs ('': a local file store, RUN_DIR/mlruns; or e.g.
    'http://host:5000', 'sqlite:///mlflow.db')."""
    mlflow_experiment: str = "apex"
    """The MLflow experiment the run is logged under."""
    group: str = ""
    """A name that groups runs (W&B's group; an MLflow tag); launch.experiment
    sets it to the experiment's folder name."""
    mlflow_parent_run_id: str = ""
    """The MLflow run this run is nested under (launch.experiment sets it)."""


@dataclasses.dataclass
class ClusterConfig:
    """Placement on a Ray cluster (`--launcher=ray`; a local launch ignores it).

    The learner (with the replay it serves), the coordinator and the evaluator
    go to one node: one with `learner_resource` (and `learner_gpus`) when set,
    else the launcher's own node. Actors are spread over the other nodes (those
    with `actor_resource` when set), and over the learner's node's spare CPUs
    only when the others are full. CPUs are Ray's logical CPUs.
    """

    learner_cpus: float = 1.0
    """CPUs the learner's process takes (with the replay server when
    replay.colocate_with_learner)."""
    replay_cpus: float = 1.0
    """CPUs the replay server's process takes when it is a node of its own."""
    coordinator_cpus: float = 0.5
    """CPUs of the coordinator's process (with the evaluator in it)."""
    model_store_cpus: float = 0.5
    """CPUs of the model store's process (model_store.enabled)."""
    actor_cpus: float = 1.0
    """CPUs each actor's process takes."""
    learner_gpus: float = 0.0
    """GPUs the learner's process takes (its node must have them)."""
    learner_resource: str | None = None
    """A custom Ray resource (e.g. 'apex_learner', declared with `ray start
    --resources='{"apex_learner": 1}'`) the learner's node must have."""
    actor_resource: str | None = None
    """A custom Ray resource every actor's node must have (None: any node)."""
    start_timeout_seconds: float = 120.0
    """How long the launcher waits for every node's Ray actor to be placed and
    started before it gives up (naming the ones still pending)."""
    actor_lost_after_seconds: float | None = 60.0
    """An actor on another host that has not heard from the coordinator for this
    long stops itself (fenced: its lease ran out); the coordinator counts it
    lost 5 s later and the launcher starts it again on a host that can reach
    the program (docs/cluster.md, "When the network fails"). A replay shard in
    a process of its own (replay.num_shards > 1) holds the same lease: it is
    started again empty, its items counted lost, and the learner and its
    actors follow it to its new address. At least 4 heartbeat periods. None:
    no leases, and an actor or shard silent for 60 s stops the program."""


@dataclasses.dataclass
class ApexConfig:
    """A whole program: Ape-X DQN or R2D2."""

    agent: str = "apex_dqn"
    """A name in the agent registry (apex.agents.BUILDERS): 'apex_dqn' (feed-forward,
    n-step transitions) or 'r2d2' (recurrent, sequences), or one you register."""
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    r2d2: R2D2Config = dataclasses.field(default_factory=R2D2Config)
    actor: ActorConfig = dataclasses.field(default_factory=ActorConfig)
    inference: InferenceConfig = dataclasses.field(default_factory=InferenceConfig)
    model_store: ModelStoreConfig = dataclasses.field(default_factory=ModelStoreConfig)
    learner: LearnerConfig = dataclasses.field(default_factory=LearnerConfig)
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    stop: StopConfig = dataclasses.field(default_factory=StopConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    cluster: ClusterConfig = dataclasses.field(default_factory=ClusterConfig)
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
