"""PPO in JAX on the numeric view of FrozenLake and Sokoban, one file, top to bottom.

Why here and not in ``benchmarks/``: the leaderboard agent ``jax-ppo:<checkpoint>`` and the
tests load the policy this file defines, so the network, the checkpoint format and the
training loop live together in the library (behind the ``jax`` extra); the benchmark script
``benchmarks/jax_ppo.py`` only chooses settings and writes the curves.

The algorithm is CleanRL's PPO (clipped surrogate, GAE, minibatch epochs over one rollout,
entropy bonus, global-norm clipping, Adam with a linearly annealed step size), compiled whole
as in PureJaxRL: one ``jit`` holds the rollout (``lax.scan`` over :func:`llmgym.jax.step_batch`)
and every epoch's minibatch updates. Where it departs from the textbook:

* Levels come from a pool drawn once from training seeds ``0 .. pool_size - 1`` with the text
  env's own generator under its train/test split (no eval level, compared by content: see
  :mod:`llmgym.splits`; ``TrainResult.eval_levels_in_pool`` counts them, 0), each episode on
  a level drawn uniformly from the pool: generating a Sokoban level costs ~0.25 ms of Python,
  more than thousands of JAX steps.
* A truncated episode is bootstrapped: its last reward gets ``gamma * V(last observation)``
  (the observation before the autoreset), so the turn limit does not look like a failure.
* The network reads the one-hot board (``GridObservation``'s) through an egocentric window:
  the square of cells around the player (cells beyond the edge marked as such) plus the
  player's row and column, into two tanh layers shared by the policy and value heads. What
  is next to the player is then the same input wherever the player stands, which is what
  lets a small network generalize over random maps; convolutions would give that too, at
  many times the arithmetic on a 2-core CPU. ``mlp`` (CleanRL's, whole board) is kept.
* Progress is measured with greedy and sampled episodes on validation levels (seeds from
  :data:`VALIDATION_SEED_BASE`), never on the eval sets; the checkpoint records which of the
  two does better there, and the leaderboard agent plays that way.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from llmgym.error import InvalidOptionError
from llmgym.eval_sets import has_eval_set, load_eval_set
from llmgym.jax.batch import observe_batch, reset_batch, step_batch
from llmgym.jax.common import GridCore
from llmgym.jax.cores import encode, levels_from_seeds, make_core
from llmgym.splits import level_key

#: Validation levels come from seeds here on: above any training pool, below the eval seeds.
VALIDATION_SEED_BASE = 900_000
#: Turns a validation episode may take when the env has no turn limit.
_UNLIMITED_TURNS = 200
CHECKPOINT_CONFIG, CHECKPOINT_PARAMS = "config.json", "params.npz"


@dataclass(frozen=True)
class PpoConfig:
    """One training run. Every field is recorded in the checkpoint.

    Attributes:
        env_id: a FrozenLake or Sokoban id.
        env_options: options of the text env (e.g. ``size``), for training and validation alike.
        train_max_turns: turn limit of training episodes (``None``: the env's own). Validation
            plays the env's own limit, as the eval does. A shorter limit stops spending samples
            on episodes already lost (a Sokoban box in a corner), and truncations are bootstrapped.
        total_steps: env steps to train for (all envs together); sets the step-size schedule.
        time_budget: stop after the update that crosses this many seconds (``None``: no limit),
            counted from the start of :func:`train` (level generation and compiling included).
        num_envs: envs stepped together.
        num_steps: steps per env per rollout.
        update_epochs: passes over each rollout.
        num_minibatches: minibatches per pass.
        learning_rate: Adam's step size at the start (annealed linearly to 0 over ``total_steps``).
        gamma: discount.
        gae_lambda: GAE's lambda.
        clip_coef: PPO's ratio clip.
        ent_coef: entropy bonus weight.
        vf_coef: value loss weight.
        max_grad_norm: global gradient norm clip.
        network: ``egocentric`` (the window around the player, two tanh layers shared by both
            heads) or ``mlp`` (the whole board, two tanh layers per head, as CleanRL).
        view_radius: the egocentric window reaches this many cells from the player.
        hidden: width of the dense layers.
        pool_size: training levels, from seeds ``0 .. pool_size - 1``.
        validation_levels: levels of each validation measurement.
        eval_every: updates between validation measurements.
        seed: seeds the network, the level draws, the actions and the slips.
    """

    env_id: str = "llmgym/FrozenLake-8x8-v0"
    env_options: dict[str, Any] = field(default_factory=dict)
    train_max_turns: int | None = None
    total_steps: int = 10_000_000
    time_budget: float | None = None
    num_envs: int = 512
    num_steps: int = 32
    update_epochs: int = 4
    num_minibatches: int = 8
    learning_rate: float = 5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    network: Literal["egocentric", "mlp"] = "egocentric"
    view_radius: int = 3
    hidden: int = 64
    pool_size: int = 100_000
    validation_levels: int = 512
    eval_every: int = 25
    seed: int = 0

    def __post_init__(self) -> None:
        if self.network not in ("egocentric", "mlp"):
            raise InvalidOptionError(f"network must be 'egocentric' or 'mlp', got {self.network!r}.")
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise InvalidOptionError(
                f"num_envs * num_steps ({self.num_envs * self.num_steps}) must be a multiple of "
                f"num_minibatches ({self.num_minibatches}); change one of them."
            )
        if not 0 < self.pool_size < VALIDATION_SEED_BASE:
            raise InvalidOptionError(
                f"pool_size must be between 1 and {VALIDATION_SEED_BASE - 1} (validation seeds start there), "
                f"got {self.pool_size}."
            )
        if self.train_max_turns is not None and self.train_max_turns < 1:
            raise InvalidOptionError(f"train_max_turns must be >= 1 or None, got {self.train_max_turns}.")
        for name in ("total_steps", "num_envs", "num_steps", "update_epochs", "validation_levels", "eval_every",
                     "view_radius", "hidden"):
            if getattr(self, name) < 1:
                raise InvalidOptionError(f"{name} must be >= 1, got {getattr(self, name)}.")

    @property
    def num_updates(self) -> int:
        return max(1, self.total_steps // (self.num_envs * self.num_steps))


# ---------------------------------------------------------------------- the network
class Board(NamedTuple):
    """The boards a network reads: ``height`` x ``width`` cells, one-hot over ``symbols``."""

    height: int
    width: int
    symbols: str


#: Board symbols that mark the player (FrozenLake ``P``; Sokoban ``@`` and ``+``).
PLAYER_SYMBOLS = "P@+"


def board_of(core: GridCore) -> Board:
    height, width = core.board_shape
    return Board(height, width, core.symbols)


def _dense(key: jax.Array, inputs: int, outputs: int, scale: float) -> dict[str, jax.Array]:
    return {"w": jax.nn.initializers.orthogonal(scale)(key, (inputs, outputs)), "b": jnp.zeros(outputs)}


def _features(config: PpoConfig, board: Board) -> int:
    if config.network == "mlp":
        return board.height * board.width * len(board.symbols)
    side = 2 * config.view_radius + 1
    return side * side * (len(board.symbols) + 1) + 2


def init_network(config: PpoConfig, board: Board, actions: int, key: jax.Array) -> dict[str, Any]:
    """Parameters of the policy and value networks (orthogonal initialization as CleanRL:
    sqrt(2) for hidden layers, 0.01 for the policy head, 1 for the value head)."""
    keys = iter(jax.random.split(key, 8))
    inputs, hidden = _features(config, board), config.hidden
    if config.network == "mlp":
        return {
            "actor": [_dense(next(keys), inputs, hidden, math.sqrt(2)),
                      _dense(next(keys), hidden, hidden, math.sqrt(2)), _dense(next(keys), hidden, actions, 0.01)],
            "critic": [_dense(next(keys), inputs, hidden, math.sqrt(2)),
                       _dense(next(keys), hidden, hidden, math.sqrt(2)), _dense(next(keys), hidden, 1, 1.0)],
        }
    return {
        "torso": [_dense(next(keys), inputs, hidden, math.sqrt(2)), _dense(next(keys), hidden, hidden, math.sqrt(2))],
        "actor": [_dense(next(keys), hidden, actions, 0.01)],
        "critic": [_dense(next(keys), hidden, 1, 1.0)],
    }


def egocentric_view(observations: jax.Array, board: Board, radius: int) -> jax.Array:
    """The ``(2 radius + 1)``-square window of the board centred on the player, flat, plus its place.

    Cells beyond the board's edge read as a symbol of their own ("outside"); the player's row
    and column (scaled to 0..1) are appended, so the policy still knows where it is.
    Returns ``(B, (2r+1)^2 * (symbols + 1) + 2)``.
    """
    count = observations.shape[0]
    grid = observations.reshape(count, board.height, board.width, len(board.symbols))  # (B, H, W, C)
    is_player = jnp.asarray([symbol in PLAYER_SYMBOLS for symbol in board.symbols], jnp.float32)
    cell = jnp.argmax((grid * is_player).sum(axis=-1).reshape(count, -1), axis=1)  # (B,)
    row, column = jnp.divmod(cell, board.width)
    margin = ((0, 0), (radius, radius), (radius, radius), (0, 0))
    outside = jnp.pad(jnp.zeros((count, board.height, board.width, 1)), margin, constant_values=1.0)
    padded = jnp.concatenate([jnp.pad(grid, margin), outside], axis=-1)  # (B, H+2r, W+2r, C+1)
    side = 2 * radius + 1
    window = jax.vmap(lambda one, top, left: jax.lax.dynamic_slice(one, (top, left, 0), (side, side, one.shape[-1])))(
        padded, row, column
    )  # (B, side, side, C+1)
    place = jnp.stack([row / max(board.height - 1, 1), column / max(board.width - 1, 1)], axis=1)
    return jnp.concatenate([window.reshape(count, -1), place.astype(jnp.float32)], axis=1)


def _layers(layers: list[dict[str, jax.Array]], hidden: jax.Array) -> jax.Array:
    for layer in layers:
        hidden = jnp.tanh(hidden @ layer["w"] + layer["b"])
    return hidden


def network(params: dict[str, Any], observations: jax.Array, board: Board, radius: int) -> tuple[jax.Array, jax.Array]:
    """``(logits (B, actions), values (B,))`` for flat one-hot ``observations`` ``(B, H*W*C)``."""
    if "torso" in params:
        hidden = _layers(params["torso"], egocentric_view(observations, board, radius))  # (B, hidden)
        actor, critic = hidden, hidden
    else:
        actor = _layers(params["actor"][:-1], observations)
        critic = _layers(params["critic"][:-1], observations)
    logits = actor @ params["actor"][-1]["w"] + params["actor"][-1]["b"]
    values = critic @ params["critic"][-1]["w"] + params["critic"][-1]["b"]
    return logits, values[:, 0]


# ---------------------------------------------------------------------- rollout and update
class Transition(NamedTuple):
    observation: jax.Array  # (T, N, D)
    action: jax.Array  # (T, N)
    log_prob: jax.Array  # (T, N)
    value: jax.Array  # (T, N)
    reward: jax.Array  # (T, N), truncations bootstrapped
    done: jax.Array  # (T, N)
    success: jax.Array  # (T, N): the episode that ended here succeeded


class Runner(NamedTuple):
    params: Any
    opt_state: Any
    env_state: Any
    observation: jax.Array  # (N, D)
    key: jax.Array


def gae_advantages(
    steps: Transition, last_value: jax.Array, gamma: float, gae_lambda: float
) -> tuple[jax.Array, jax.Array]:
    """GAE advantages and returns of ``steps`` (``(T, N)`` each), bootstrapped from ``last_value`` ``(N,)``."""

    def backwards(carry: tuple[jax.Array, jax.Array], step: Transition) -> tuple[Any, jax.Array]:
        gae, next_value = carry
        alive = 1.0 - step.done
        delta = step.reward + gamma * next_value * alive - step.value
        gae = delta + gamma * gae_lambda * alive * gae
        return (gae, step.value), gae

    _, gaes = jax.lax.scan(backwards, (jnp.zeros_like(last_value), last_value), steps, reverse=True)
    return gaes, gaes + steps.value  # (T, N) each


def ppo_loss(
    config: PpoConfig, scored: tuple[jax.Array, jax.Array], batch: tuple[jax.Array, ...]
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The clipped PPO loss of a minibatch from the policy's ``(logits, values)`` on its observations."""
    _, actions, old_log_probs, gaes, returns = batch
    logits, values = scored
    log_probs = jax.nn.log_softmax(logits)
    log_prob = jnp.take_along_axis(log_probs, actions[:, None], axis=1)[:, 0]
    ratio = jnp.exp(log_prob - old_log_probs)
    gaes = (gaes - gaes.mean()) / (gaes.std() + 1e-8)
    clipped = jnp.clip(ratio, 1 - config.clip_coef, 1 + config.clip_coef)
    policy_loss = jnp.maximum(-gaes * ratio, -gaes * clipped).mean()
    value_loss = 0.5 * ((values - returns) ** 2).mean()
    entropy = -(jnp.exp(log_probs) * log_probs).sum(axis=1).mean()
    total = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    return total, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


def make_update(config: PpoConfig, core: GridCore, optimizer: optax.GradientTransformation) -> Callable[..., Any]:
    """One PPO iteration (rollout, GAE, epochs of minibatch steps) as a pure function to ``jit``."""
    board = board_of(core)

    def policy(params: Any, observations: jax.Array) -> tuple[jax.Array, jax.Array]:
        return network(params, observations, board, config.view_radius)

    def env_step(carry: tuple[Runner, Any], _: None) -> tuple[tuple[Runner, Any], Transition]:
        runner, pool = carry
        key, action_key, reset_key = jax.random.split(runner.key, 3)
        logits, value = policy(runner.params, runner.observation)
        action = jax.random.categorical(action_key, logits)  # (N,)
        log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=1)[:, 0]
        env_state, result, reached = step_batch(core, pool, runner.env_state, action, reset_key)
        _, reached_value = policy(runner.params, reached)
        reward = result.reward + config.gamma * reached_value * result.truncated
        done = result.terminated | result.truncated
        step = Transition(runner.observation, action, log_prob, value, jax.lax.stop_gradient(reward), done,
                          result.success & done)
        runner = runner._replace(env_state=env_state, observation=observe_batch(core, env_state), key=key)
        return (runner, pool), step

    def advantages(steps: Transition, last_value: jax.Array) -> tuple[jax.Array, jax.Array]:
        return gae_advantages(steps, last_value, config.gamma, config.gae_lambda)

    def loss(params: Any, batch: tuple[jax.Array, ...]) -> tuple[jax.Array, dict[str, jax.Array]]:
        return ppo_loss(config, policy(params, batch[0]), batch)

    def minibatch_step(carry: tuple[Any, Any], batch: tuple[jax.Array, ...]) -> tuple[Any, dict[str, jax.Array]]:
        params, opt_state = carry
        grads, stats = jax.grad(loss, has_aux=True)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), stats

    def epoch(carry: tuple[Any, Any, jax.Array], _: None, flat: tuple[jax.Array, ...]) -> tuple[Any, Any]:
        params, opt_state, key = carry
        key, shuffle_key = jax.random.split(key)
        order = jax.random.permutation(shuffle_key, flat[0].shape[0])
        batches = jax.tree.map(lambda x: x[order].reshape(config.num_minibatches, -1, *x.shape[1:]), flat)
        (params, opt_state), stats = jax.lax.scan(minibatch_step, (params, opt_state), batches)
        return (params, opt_state, key), stats

    def update(runner: Runner, pool: Any) -> tuple[Runner, dict[str, jax.Array]]:
        (runner, _), steps = jax.lax.scan(env_step, (runner, pool), None, config.num_steps)
        _, last_value = policy(runner.params, runner.observation)
        gaes, returns = advantages(steps, last_value)
        flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]),
                            (steps.observation, steps.action, steps.log_prob, gaes, returns))
        key, epoch_key = jax.random.split(runner.key)
        (params, opt_state, _), stats = jax.lax.scan(
            lambda carry, _: epoch(carry, _, flat), (runner.params, runner.opt_state, epoch_key), None,
            config.update_epochs,
        )
        metrics = {name: value.mean() for name, value in stats.items()}
        metrics["episodes"] = steps.done.sum()
        metrics["successes"] = steps.success.sum()
        return runner._replace(params=params, opt_state=opt_state, key=key), metrics

    return update


def make_evaluate(config: PpoConfig, core: GridCore, max_turns: int) -> Callable[..., jax.Array]:
    """``evaluate(params, levels, key, greedy)`` -> success per level, playing each level once."""
    board = board_of(core)

    def evaluate(params: Any, levels: Any, key: jax.Array, greedy: bool) -> jax.Array:
        count = jax.tree.leaves(levels)[0].shape[0]
        reset_key, play_key = jax.random.split(key)
        state = jax.vmap(core.reset)(jax.random.split(reset_key, count), levels)

        def turn(state: Any, key: jax.Array) -> tuple[Any, None]:
            logits, _ = network(params, observe_batch(core, state), board, config.view_radius)
            action = jnp.argmax(logits, axis=1) if greedy else jax.random.categorical(key, logits)
            state, _ = jax.vmap(core.step)(state, action)  # an ended episode stays ended
            return state, None

        state, _ = jax.lax.scan(turn, state, jax.random.split(play_key, max_turns))
        return state.episode.success

    return jax.jit(evaluate, static_argnames="greedy")


# ---------------------------------------------------------------------- training
@dataclass
class TrainResult:
    """What :func:`train` measured; ``curve`` has one entry per validation measurement."""

    config: PpoConfig
    params: Any
    act: Literal["greedy", "sample"]
    curve: list[dict[str, float]]
    seconds: dict[str, float]
    env_steps: int
    #: How many of the id's frozen eval levels the training pool holds, by content (0 under the split).
    eval_levels_in_pool: int = 0


def pool_eval_levels(env_id: str, levels: Sequence[Any]) -> int:
    """How many of ``env_id``'s frozen eval levels are among ``levels`` (compared by :func:`~llmgym.splits.level_key`)."""
    if not has_eval_set(env_id):
        return 0
    held_out = {level_key(record["level"]) for record in load_eval_set(env_id)}
    return len(held_out & {level_key(level) for level in levels})


def train(config: PpoConfig, log: Callable[[str], None] = print) -> TrainResult:
    """Train PPO on ``config.env_id``; see the module docstring."""
    start = time.monotonic()
    core = make_core(config.env_id, **config.env_options)
    key = jax.random.PRNGKey(config.seed)
    pool_levels = levels_from_seeds(config.env_id, range(config.pool_size), **config.env_options)
    eval_levels_in_pool = pool_eval_levels(config.env_id, pool_levels)
    pool = jax.tree.map(jnp.asarray, encode(core, pool_levels))
    seeds = range(VALIDATION_SEED_BASE, VALIDATION_SEED_BASE + config.validation_levels)
    validation = jax.tree.map(jnp.asarray, core.encode_levels(levels_from_seeds(config.env_id, seeds,
                                                                                **config.env_options)))
    levels_seconds = time.monotonic() - start
    log(f"{config.pool_size} training and {config.validation_levels} validation levels in {levels_seconds:.1f}s")

    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(optax.linear_schedule(config.learning_rate, 0.0, config.num_updates * config.update_epochs
                                         * config.num_minibatches), eps=1e-5),
    )
    key, init_key, env_key = jax.random.split(key, 3)
    params = init_network(config, board_of(core), len(core.action_names), init_key)
    training_core = core if config.train_max_turns is None else replace(core, max_turns=config.train_max_turns)
    env_state = reset_batch(training_core, pool, env_key, config.num_envs)
    runner = Runner(params, optimizer.init(params), env_state, observe_batch(training_core, env_state), key)
    update = jax.jit(make_update(config, training_core, optimizer))
    evaluate = make_evaluate(config, core, core.max_turns or _UNLIMITED_TURNS)

    curve: list[dict[str, float]] = []
    steps_per_update = config.num_envs * config.num_steps
    episodes = successes = 0.0
    compile_seconds = 0.0
    for iteration in range(1, config.num_updates + 1):
        tick = time.monotonic()
        runner, metrics = update(runner, pool)
        metrics = jax.device_get(metrics)
        if iteration == 1:
            compile_seconds = time.monotonic() - tick
        episodes += float(metrics["episodes"])
        successes += float(metrics["successes"])
        elapsed = time.monotonic() - start
        last = iteration == config.num_updates or (config.time_budget is not None and elapsed > config.time_budget)
        if iteration % config.eval_every == 0 or last:
            point = _measure(evaluate, runner.params, validation, key)
            point.update(update=iteration, env_steps=iteration * steps_per_update, seconds=round(elapsed, 2),
                         load_average=os.getloadavg()[0],
                         train_success=successes / max(episodes, 1.0), train_episodes=episodes,
                         entropy=float(metrics["entropy"]), value_loss=float(metrics["value_loss"]))
            curve.append(point)
            episodes = successes = 0.0
            log(_describe(point))
        if last:
            break
    final = curve[-1]
    act: Literal["greedy", "sample"] = "greedy" if final["greedy_success"] >= final["sampled_success"] else "sample"
    seconds = {"levels": round(levels_seconds, 2), "compile": round(compile_seconds, 2),
               "total": round(time.monotonic() - start, 2)}
    return TrainResult(config, runner.params, act, curve, seconds, iteration * steps_per_update, eval_levels_in_pool)


def _measure(evaluate: Callable[..., jax.Array], params: Any, levels: Any, key: jax.Array) -> dict[str, float]:
    greedy = float(evaluate(params, levels, key, greedy=True).mean())
    sampled = float(evaluate(params, levels, key, greedy=False).mean())
    return {"greedy_success": greedy, "sampled_success": sampled}


def _describe(point: dict[str, float]) -> str:
    return (f"update {point['update']:5d}  steps {point['env_steps']:>11,}  {point['seconds']:7.1f}s  "
            f"train {point['train_success']:.3f}  val greedy {point['greedy_success']:.3f}  "
            f"sampled {point['sampled_success']:.3f}  entropy {point['entropy']:.3f}")


# ---------------------------------------------------------------------- checkpoints and acting
def save_checkpoint(result: TrainResult, folder: Path) -> Path:
    """Write ``config.json`` (settings, act mode, board) and ``params.npz`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    leaves = jax.tree.leaves(result.params)
    np.savez(folder / CHECKPOINT_PARAMS, **{f"leaf_{index}": np.asarray(leaf) for index, leaf in enumerate(leaves)})
    core = make_core(result.config.env_id, **result.config.env_options)
    record = {"config": asdict(result.config), "act": result.act, "board": list(board_of(core)),
              "action_names": list(core.action_names), "env_steps": result.env_steps}
    (folder / CHECKPOINT_CONFIG).write_text(json.dumps(record, indent=1) + "\n")
    return folder


class Policy:
    """A trained PPO policy, loaded from a checkpoint folder; acts on one-hot boards.

    Attributes:
        config: the training settings.
        act_mode: ``greedy`` (argmax) or ``sample``, as chosen on validation levels.
        board: the boards it reads (:class:`Board`).
        symbols, action_names: the board symbols and actions it was trained with.
    """

    def __init__(self, folder: Path | str) -> None:
        folder = Path(folder)
        config_path = folder / CHECKPOINT_CONFIG
        if not config_path.is_file():
            raise InvalidOptionError(
                f"No JAX PPO checkpoint at {folder} (expected {CHECKPOINT_CONFIG} and {CHECKPOINT_PARAMS}). "
                "Train one with `python -m benchmarks.jax_ppo` or pass the folder train() saved."
            )
        record = json.loads(config_path.read_text())
        self.config = PpoConfig(**record["config"])
        self.act_mode: str = record["act"]
        self.board = Board(*record["board"])
        self.symbols: str = self.board.symbols
        self.action_names: tuple[str, ...] = tuple(record["action_names"])
        template = init_network(self.config, self.board, len(self.action_names), jax.random.PRNGKey(0))
        with np.load(folder / CHECKPOINT_PARAMS) as stored:
            leaves = [jnp.asarray(stored[f"leaf_{index}"]) for index in range(len(stored.files))]
        self.params = jax.tree.unflatten(jax.tree.structure(template), leaves)
        radius = self.config.view_radius
        self._logits = jax.jit(lambda params, observations: network(params, observations, self.board, radius)[0])

    def probabilities(self, observations: np.ndarray) -> np.ndarray:
        """``(B, actions)`` action probabilities for flat one-hot boards ``(B, H*W*C)``."""
        count = observations.shape[0]
        padded = 1 << max(0, (count - 1).bit_length())  # few distinct shapes, few compilations
        batch = np.zeros((padded, observations.shape[1]), dtype=np.float32)
        batch[:count] = observations
        logits = np.asarray(self._logits(self.params, batch), dtype=np.float64)[:count]
        logits -= logits.max(axis=1, keepdims=True)
        weights = np.exp(logits)
        return weights / weights.sum(axis=1, keepdims=True)


def with_overrides(config: PpoConfig, **overrides: Any) -> PpoConfig:
    """``config`` with some fields replaced (validated again)."""
    return replace(config, **overrides)
