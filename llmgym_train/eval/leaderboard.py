"""The llmgym leaderboard: agents on the frozen eval sets, reproducible to the level.

Every (agent, env) pair plays the env's frozen eval levels (:mod:`llmgym.eval_sets`), as the
episode planner lists them (:func:`llmgym_train.planner.eval_set_levels`, for every agent), each
``--samples`` times. Episode ``(level, sample)`` resets its env with a seed derived from the
run seed, the level's seed and the sample index, and gives the agent a generator from the
same triple: rerunning a row reproduces every episode, whatever else ran beside it.

One command writes four files next to each other (default ``benchmarks/results/``):

* ``leaderboard.md``: the Markdown table (paste it into a README);
* ``leaderboard.json``: provenance, settings, summaries and every episode's outcome, with the
  first ``--record-episodes`` episodes of each row played turn by turn (completions, rewards,
  observations and the level);
* ``leaderboard.png``: success rates with their 95% intervals;
* ``leaderboard.html``: a self-contained report (:mod:`llmgym_train.eval.report`): the table,
  a plot per env family, and the recorded episodes to step through, with pictures of the grid
  games' states.

A run folder of ``llmgym-train`` (``checkpoint:<run>``) plays as the run's own evaluation
does, through :func:`llmgym_train.eval.policy.evaluate_policy`: its agent, response prefix,
choices and token limits, greedy, each episode resetting with its level's eval-set seed.

Metrics per env (and per difficulty where eval records carry one): success rate with a
Wilson 95% interval, mean return, mean turns, invalid-action rate (per turn), generated
tokens per episode (LLM agents), and pass@k over samples (the unbiased estimator of Chen et
al. 2021) when ``--samples`` > 1.

    llmgym-bench --agents random optimal sb3-ppo --limit 50
    llmgym-bench --agents vllm:smollm2-135m --envs FrozenLake-v0 Sokoban-v0 --limit 20 --merge
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

import llmgym
from llmgym.error import InvalidOptionError, did_you_mean
from llmgym.eval_sets import EVAL_SET_VERSION, has_eval_set
from llmgym.wrappers.chat import ChatHistory
from llmgym_train.eval.agents import Agent, AgentOptions, Sampling, Turn, check_agent_spec, make_agent
from llmgym_train.eval.results import RESULTS_DIR, markdown_table, portable, provenance
from llmgym_train.planner import EvalLevel, eval_set_levels


@dataclass(frozen=True)
class LeaderboardConfig:
    """Everything a leaderboard run depends on; recorded in its JSON.

    Attributes:
        agents: agent specs (see :mod:`llmgym_train.eval.agents`).
        envs: env ids; every id with an eval set when empty.
        limit: play only the first ``limit`` levels of each eval set (``None``: all of them).
        samples: episodes per level; pass@k is reported for ``samples`` > 1.
        seed: run seed from which every episode's env and agent seeds derive.
        max_turns: override the envs' own turn limit (``None``: the env's default).
        options: agent options (sampling, PPO training steps).
        output_dir: where ``leaderboard.{md,json,png}`` go.
        merge: keep the rows of an existing ``leaderboard.json`` that this run does not redo.
        progress: show a progress bar over episodes.
        record_episodes: the first this many episodes of each row keep their turns (completions,
            rewards, observations) and level in the JSON, for the HTML report's replays.
    """

    agents: tuple[str, ...] = ("random", "optimal", "sb3-ppo")
    envs: tuple[str, ...] = ()
    limit: int | None = None
    samples: int = 1
    seed: int = 0
    max_turns: int | None = None
    options: AgentOptions = field(default_factory=AgentOptions)
    output_dir: Path = RESULTS_DIR
    merge: bool = False
    progress: bool = True
    record_episodes: int = 3

    def __post_init__(self) -> None:
        if not self.agents:
            raise InvalidOptionError(
                "agents is empty; name at least one agent, e.g. --agents random optimal."
            )
        for spec in self.agents:
            check_agent_spec(spec)  # before any env is played or model loaded
        if self.limit is not None and self.limit < 1:
            raise InvalidOptionError(f"limit must be >= 1 or None (every level), got {self.limit}.")
        if self.samples < 1:
            raise InvalidOptionError(f"samples must be >= 1, got {self.samples}.")
        if self.record_episodes < 0:
            raise InvalidOptionError(
                f"record_episodes must be >= 0 (0 records none), got {self.record_episodes}."
            )
        if self.max_turns is not None and self.max_turns < 1:
            raise InvalidOptionError(
                f"max_turns must be >= 1 or None (the env's default), got {self.max_turns}."
            )
        for env_id in self.envs:
            if not has_eval_set(env_id):
                known = [name for name in llmgym.env_ids() if has_eval_set(name)]
                raise InvalidOptionError(
                    f"No eval set for {env_id!r}.{did_you_mean(env_id, known)} "
                    f"Envs with eval sets: {', '.join(known)}."
                )

    def env_ids(self) -> list[str]:
        return list(self.envs) or [env_id for env_id in llmgym.env_ids() if has_eval_set(env_id)]


# ---------------------------------------------------------------------- metrics
def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% for the default ``z``).

    Unlike the normal approximation it stays inside [0, 1] and is not degenerate at 0% or 100%,
    which is where optimal and random agents sit.
    """
    if trials == 0:
        return 0.0, 1.0
    rate = successes / trials
    denominator = 1 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / denominator
    # At 0% and 100% the interval touches the bound exactly; say so without rounding noise.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """Unbiased pass@k of one level from ``correct`` successes in ``samples`` episodes:
    ``1 - C(samples - correct, k) / C(samples, k)``."""
    if not 1 <= k <= samples:
        raise InvalidOptionError(f"pass@k needs 1 <= k <= samples, got k={k} with {samples} samples.")
    if samples - correct < k:
        return 1.0
    return 1.0 - math.comb(samples - correct, k) / math.comb(samples, k)


@dataclass
class EpisodeResult:
    """One episode's outcome, as written to the JSON."""

    level_index: int
    sample: int
    env_seed: int
    success: bool = False
    episode_return: float = 0.0
    turns: int = 0
    invalid_actions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    truncated: bool = False
    optimal_steps: int | None = None
    difficulty: str | None = None
    #: The texts played each turn, where the row keeps them (rows of runs: their one-token choices).
    actions: list[str] | None = None
    #: Recorded episodes: each turn's reward.
    rewards: list[float] | None = None
    #: Recorded episodes: the first observation, then the one after each turn (cut at ``OBSERVATION_CHARS``).
    observations: list[str] | None = None
    #: Recorded episodes: the level played (the eval set's ``level``), so a replay needs no eval set.
    level: Any = None


def summarize(episodes: Sequence[EpisodeResult], samples: int) -> dict[str, Any]:
    """The row's figures from its episodes."""
    count = len(episodes)
    successes = sum(episode.success for episode in episodes)
    turns = sum(episode.turns for episode in episodes)
    low, high = wilson_interval(successes, count)
    summary: dict[str, Any] = {
        "episodes": count,
        "success_rate": successes / count if count else 0.0,
        "success_ci95": [low, high],
        "mean_return": float(np.mean([episode.episode_return for episode in episodes])) if count else 0.0,
        "mean_turns": turns / count if count else 0.0,
        "invalid_action_rate": sum(episode.invalid_actions for episode in episodes) / turns if turns else 0.0,
        "completion_tokens_per_episode": sum(e.completion_tokens for e in episodes) / count if count else 0.0,
        "prompt_tokens_per_episode": sum(e.prompt_tokens for e in episodes) / count if count else 0.0,
    }
    if samples > 1:
        summary["pass_at_k"] = _pass_at_ks(episodes, samples)
    return summary


def _pass_at_ks(episodes: Sequence[EpisodeResult], samples: int) -> dict[str, float]:
    correct: dict[int, int] = {}
    for episode in episodes:
        correct[episode.level_index] = correct.get(episode.level_index, 0) + int(episode.success)
    return {
        str(k): float(np.mean([pass_at_k(samples, count, k) for count in correct.values()]))
        for k in range(1, samples + 1)
    }


# ---------------------------------------------------------------------- playing
#: A recorded observation is cut after this many characters.
OBSERVATION_CHARS = 2000


class _Episode:
    """One live episode: its env (with chat history), seeds and running totals.

    Sample ``k`` of a level resets with a seed drawn from (run seed, level seed, ``k``) and plays
    the level through its reset options, so samples of a level differ by their env's RNG only.
    """

    def __init__(
        self, env: ChatHistory, level: EvalLevel, sample: int, run_seed: int, record: bool = False
    ) -> None:
        self.env = env
        seeds = np.random.SeedSequence([run_seed, level.seed, sample])
        env_seed = int(seeds.generate_state(1, dtype=np.uint32)[0])
        self.rng = np.random.default_rng(seeds.spawn(1)[0])
        self.result = EpisodeResult(
            level_index=level.index,
            sample=sample,
            env_seed=env_seed,
            optimal_steps=level.optimal_steps,
            difficulty=level.difficulty,
        )
        observation, _ = env.reset(seed=env_seed, options=level.options)
        self.done = False
        if record:
            result = self.result
            result.actions, result.rewards, result.observations = [], [], [observation[:OBSERVATION_CHARS]]

    def turn(self) -> Turn:
        env: Any = self.env.unwrapped
        return Turn(env=env, messages=self.env.messages, rng=self.rng, number=self.result.turns)

    def step(self, text: str, prompt_tokens: int, completion_tokens: int) -> None:
        observation, reward, terminated, truncated, info = self.env.step(text)
        result = self.result
        if result.observations is not None:
            result.actions.append(text)  # type: ignore[union-attr]
            result.rewards.append(float(reward))  # type: ignore[union-attr]
            result.observations.append(observation[:OBSERVATION_CHARS])
        result.turns += 1
        result.episode_return += float(reward)
        result.invalid_actions += not info["action_is_valid"]
        result.prompt_tokens += prompt_tokens
        result.completion_tokens += completion_tokens
        result.success = bool(info["success"])
        result.truncated = bool(truncated)
        self.done = bool(terminated or truncated)


def play(
    agent: Agent,
    env_id: str,
    levels: Sequence[EvalLevel],
    config: LeaderboardConfig,
    advance: Any = None,
) -> list[EpisodeResult]:
    """Play every (level, sample) of ``levels`` with ``agent``, all episodes in lockstep.

    ``levels`` come from the planner (:func:`~llmgym_train.planner.eval_set_levels`), as every row's do.

    Lockstep turns let an LLM agent decode every live episode's turn in one batch.
    ``advance(n)`` is called as episodes finish (a progress bar's hook).
    """
    env_options = {} if config.max_turns is None else {"max_turns": config.max_turns}
    episodes = [
        _Episode(
            ChatHistory(gym.make(env_id, render_mode="ansi", **env_options)), level, sample, config.seed,
            record=index * config.samples + sample < config.record_episodes,
        )
        for index, level in enumerate(levels)
        for sample in range(config.samples)
    ]
    live = list(episodes)
    while live:
        replies = agent.act([episode.turn() for episode in live])
        for episode, reply in zip(live, replies, strict=True):
            episode.step(reply.text, reply.prompt_tokens, reply.completion_tokens)
        finished = sum(episode.done for episode in live)
        live = [episode for episode in live if not episode.done]
        if advance is not None and finished:
            advance(finished)
    for episode in episodes:
        episode.env.close()
    return [episode.result for episode in episodes]


@runtime_checkable
class LevelPlayer(Protocol):
    """An agent that plays whole levels itself rather than answering turns in lockstep.

    A run folder of ``llmgym-train`` is one (:class:`~llmgym_train.eval.policy.RunAgent`): it
    plays through the trainer's evaluation loop, so its row measures what the run's own
    evaluation measured.
    """

    def play_levels(
        self, env_id: str, levels: Sequence[EvalLevel], config: LeaderboardConfig
    ) -> list[EpisodeResult]:
        """Every (level, sample) of ``levels``, in that order (level-major)."""
        ...


def evaluate(
    agent: Agent, env_id: str, config: LeaderboardConfig, advance: Any = None
) -> dict[str, Any] | None:
    """One leaderboard row (with its episodes), or ``None`` when the agent cannot play ``env_id``."""
    probe = gym.make(env_id).unwrapped
    supported = agent.supports(probe)  # type: ignore[arg-type]
    probe.close()
    if not supported:
        return None
    eval_set_size = len(eval_set_levels(env_id))
    levels = eval_set_levels(env_id, config.limit)
    agent.prepare(env_id)
    start = time.perf_counter()
    if isinstance(agent, LevelPlayer):
        episodes = agent.play_levels(env_id, levels, config)
        if advance is not None:
            advance(len(episodes))
    else:
        episodes = play(agent, env_id, levels, config, advance)
    row: dict[str, Any] = {
        "agent": agent.name,
        "env_id": env_id,
        "levels": len(levels),
        "eval_set_size": eval_set_size,
        "eval_set_version": EVAL_SET_VERSION,
        "samples": config.samples,
        "seed": config.seed,
        "max_turns": config.max_turns,
        "agent_settings": agent.settings,
        "seconds": round(time.perf_counter() - start, 3),
        "summary": summarize(episodes, config.samples),
    }
    trained_on = getattr(agent, "eval_levels_trained_on", None)
    if trained_on is not None:  # a trained model's row says how many of its levels the run trained on
        row["eval_levels_trained_on"] = trained_on(levels)
    difficulties = sorted({episode.difficulty for episode in episodes if episode.difficulty is not None})
    if len(difficulties) > 1:
        row["by_difficulty"] = {
            name: summarize([e for e in episodes if e.difficulty == name], config.samples)
            for name in difficulties
        }
    for index, episode in enumerate(episodes[: config.record_episodes]):
        level = levels[index // config.samples].options
        if episode.actions is not None and level is not None:
            episode.level = level.get("level")
    # Episodes that keep no turns write none of those keys: they read as they always have.
    optional = {"actions", "rewards", "observations", "level"}
    row["episodes"] = [
        {key: value for key, value in asdict(episode).items() if key not in optional or value is not None}
        for episode in episodes
    ]
    return row


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Any]:
    """A rich progress bar when available and wanted; otherwise a silent stand-in."""
    if enabled:
        try:
            from rich.progress import Progress
        except ImportError:
            enabled = False
    if not enabled:
        yield None
        return
    with Progress() as progress:
        yield progress


def run(config: LeaderboardConfig) -> dict[str, Any]:
    """Evaluate every agent on every env; returns the leaderboard document (not yet written)."""
    env_ids = config.env_ids()
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    run_provenance = provenance()
    with _progress_bar(config.progress) as progress:
        for spec in config.agents:
            agent = make_agent(spec, config.options)
            try:
                for env_id in env_ids:
                    advance = _task(progress, agent.name, env_id, config)
                    row = evaluate(agent, env_id, config, advance)
                    if row is None:
                        skipped.append({"agent": agent.name, "env_id": env_id})
                        continue
                    row["provenance"] = run_provenance
                    rows.append(row)
            finally:
                agent.close()
    return {**run_provenance, "config": _config_record(config), "results": rows, "skipped": skipped}


def _task(progress: Any, agent_name: str, env_id: str, config: LeaderboardConfig) -> Any:
    if progress is None:
        return None
    total = len(eval_set_levels(env_id, config.limit)) * config.samples
    task = progress.add_task(f"{agent_name} on {env_id}", total=total)
    return lambda count: progress.advance(task, count)


def _config_record(config: LeaderboardConfig) -> dict[str, Any]:
    record = asdict(config)
    record["output_dir"] = str(config.output_dir)
    return record


# ---------------------------------------------------------------------- output
def merge_results(previous: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """``current`` plus the rows of ``previous`` for (agent, env) pairs ``current`` did not run."""
    redone = {(row["agent"], row["env_id"]) for row in current["results"]}
    kept = [row for row in previous.get("results", []) if (row["agent"], row["env_id"]) not in redone]
    return {**current, "results": kept + current["results"]}


def markdown(document: dict[str, Any]) -> str:
    """The leaderboard table, one row per (env, agent), best success first within an env."""
    rows = sorted(
        document["results"], key=lambda row: (row["env_id"], -row["summary"]["success_rate"], row["agent"])
    )
    show_pass = any(row["samples"] > 1 for row in rows)
    header = ["env", "agent", "levels", "success % (95% CI)", "return", "turns", "invalid %", "tokens/ep"]
    header += ["pass@k"] if show_pass else []
    table = [_table_row(row, show_pass) for row in rows]
    commits = sorted({row.get("provenance", document).get("commit", "unknown")[:10] for row in rows})
    footer = (
        "\n\nLevels: eval levels played / eval set size (fewer means a `--limit`). "
        "Trained models' rows say how many of the levels their run drew in training (by content; 0 under "
        "the train/test split). Success interval: Wilson 95%. Invalid %: per turn. "
        "Tokens/ep: generated tokens per episode (LLM agents). "
        f"Commit {', '.join(commits)}; every episode's outcome, seeds and settings are in `leaderboard.json`.\n"
    )
    return markdown_table(header, table) + footer


def summary_cells(summary: dict[str, Any]) -> list[str]:
    """A row's figures as table cells: success (95% interval), return, turns, invalid %, tokens per episode."""
    low, high = summary["success_ci95"]
    tokens = summary.get("completion_tokens_per_episode", 0.0)
    return [
        f"{100 * summary['success_rate']:.1f} ({100 * low:.1f}-{100 * high:.1f})",
        f"{summary['mean_return']:.3f}",
        f"{summary['mean_turns']:.1f}",
        f"{100 * summary['invalid_action_rate']:.1f}",
        f"{tokens:.0f}" if tokens else "-",
    ]


def _table_row(row: dict[str, Any], show_pass: bool) -> list[str]:
    summary = row["summary"]
    levels = str(row["levels"])
    if row["levels"] != row["eval_set_size"]:
        levels += f"/{row['eval_set_size']}"
    if row["samples"] > 1:
        levels += f" x{row['samples']}"
    if row.get("max_turns"):
        levels += f" (max {row['max_turns']} turns)"
    if row.get("eval_levels_trained_on") is not None:
        levels += f", {row['eval_levels_trained_on']} trained on"
    cells = [row["env_id"].removeprefix("llmgym/"), f"`{row['agent']}`", levels, *summary_cells(summary)]
    if show_pass:
        pass_k = summary.get("pass_at_k")
        cells.append(f"{100 * pass_k[str(row['samples'])]:.1f} (k={row['samples']})" if pass_k else "-")
    return cells


def chart(document: dict[str, Any], path: Path) -> Path:
    """Success rates with Wilson 95% intervals: one panel per env family, each id's rows side by side.

    Rows are ordered and coloured by kind (trained, base model, classic RL, random, optimal), as
    in the HTML report (:mod:`llmgym_train.eval.report`).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llmgym_train.eval.report import KINDS, agent_kind, family_of, ordered_rows, short_agent

    families: dict[str, list[dict[str, Any]]] = {}
    for row in ordered_rows(document):
        families.setdefault(family_of(row["env_id"]), []).append(row)
    sizes = [len(rows) for rows in families.values()] or [1]
    figure, axes_list = plt.subplots(
        len(sizes), 1, figsize=(10, 1.0 + 0.28 * sum(sizes) + 0.6 * len(sizes)),
        gridspec_kw={"height_ratios": sizes}, squeeze=False,
    )
    for axes, (family, rows) in zip(axes_list[:, 0], families.items() or [("", [])], strict=True):
        for position, row in enumerate(rows):
            rate = row["summary"]["success_rate"]
            low, high = row["summary"]["success_ci95"]
            # max: rounding at 0% and 100%
            errors = [[100 * max(rate - low, 0.0)], [100 * max(high - rate, 0.0)]]
            axes.barh(position, 100 * rate, xerr=errors, capsize=2, color=KINDS[agent_kind(row["agent"])])
        axes.set_yticks(range(len(rows)))
        axes.set_yticklabels(
            [f"{row['env_id'].removeprefix('llmgym/')}  {short_agent(row['agent'])}" for row in rows],
            fontsize="small",
        )
        axes.invert_yaxis()
        axes.set_xlim(0, 100)
        axes.set_title(family, loc="left", fontsize="medium")
    axes_list[-1, 0].set_xlabel("success rate % (Wilson 95% interval)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=color) for color in KINDS.values()]
    figure.legend(handles, list(KINDS), loc="upper right", ncol=len(KINDS), fontsize="small")
    inches = figure.get_figheight()
    # Fixed margins (in inches, for any height) instead of tight_layout, which takes seconds here.
    figure.subplots_adjust(
        left=0.36, right=0.97, top=1 - 0.55 / inches, bottom=0.55 / inches, hspace=0.9 * len(sizes) / inches
    )
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def to_json(document: dict[str, Any]) -> str:
    """Indented JSON with one line per episode: readable and diffable at a third of the size."""
    episodes: list[list[dict[str, Any]]] = []
    rows = []
    for row in document["results"]:
        rows.append({**row, "episodes": f"@episodes{len(episodes)}@"})
        episodes.append(row["episodes"])
    text = json.dumps({**document, "results": rows}, indent=1, default=str)
    for index, row_episodes in enumerate(episodes):
        lines = ",\n   ".join(json.dumps(episode, sort_keys=True) for episode in row_episodes)
        text = text.replace(f'"@episodes{index}@"', f"[\n   {lines}\n  ]" if row_episodes else "[]", 1)
    return text + "\n"


def write(document: dict[str, Any], output_dir: Path) -> dict[str, Path]:
    """Write ``leaderboard.{json,md,png,html}`` into ``output_dir``; returns their paths."""
    from llmgym_train.eval.report import write_report

    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {suffix: output_dir / f"leaderboard.{suffix}" for suffix in ("json", "md", "png", "html")}
    document = portable(document)
    paths["json"].write_text(to_json(document))
    paths["md"].write_text(markdown(document))
    chart(document, paths["png"])
    write_report(document, paths["html"])
    return paths


# ---------------------------------------------------------------------- command line
def parse_args(argv: Sequence[str] | None = None) -> LeaderboardConfig:
    parser = argparse.ArgumentParser(prog="llmgym-bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", nargs="+", default=list(LeaderboardConfig.agents),
                        help="random, optimal, sb3-ppo, jax-ppo:<checkpoint dir>, vllm[:<model>], "
                             "checkpoint:<dir>, openai:<base_url>#<model>")
    parser.add_argument("--envs", nargs="+", default=[], help="env ids (default: every id with an eval set)")
    parser.add_argument("--limit", type=int, default=None, help="first N levels of each eval set")
    parser.add_argument("--samples", type=int, default=1, help="episodes per level (pass@k for > 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-turns", type=int, default=None, help="override the envs' turn limit")
    parser.add_argument("--temperature", type=float, default=Sampling.temperature)
    parser.add_argument("--top-p", type=float, default=Sampling.top_p)
    parser.add_argument("--max-tokens", type=int, default=Sampling.max_tokens, help="tokens per turn")
    parser.add_argument("--history", type=int, default=Sampling.history, help="past exchanges in the prompt")
    parser.add_argument("--max-model-len", type=int, default=Sampling.max_model_len)
    parser.add_argument("--concurrency", type=int, default=Sampling.concurrency,
                        help="openai requests in flight")
    parser.add_argument("--ppo-timesteps", type=int, default=AgentOptions.ppo_timesteps)
    parser.add_argument("--backend", choices=("vllm", "hf"), default=AgentOptions.backend,
                        help="generation backend of checkpoint:<dir> agents")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--merge", action="store_true",
                        help="keep other rows of an existing leaderboard.json")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--record-episodes", type=int, default=LeaderboardConfig.record_episodes,
                        help="episodes per row kept turn by turn for the HTML report's replays (0: none)")
    args = parser.parse_args(argv)
    sampling = Sampling(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, history=args.history,
        max_model_len=args.max_model_len, concurrency=args.concurrency,
    )
    return LeaderboardConfig(
        agents=tuple(args.agents),
        envs=tuple(env if "/" in env else f"llmgym/{env}" for env in args.envs),
        limit=args.limit,
        samples=args.samples,
        seed=args.seed,
        max_turns=args.max_turns,
        options=AgentOptions(sampling=sampling, seed=args.seed, ppo_timesteps=args.ppo_timesteps,
                             backend=args.backend),
        output_dir=args.output_dir,
        merge=args.merge,
        progress=not args.no_progress,
        record_episodes=args.record_episodes,
    )


def main(argv: Sequence[str] | None = None) -> None:
    config = parse_args(argv)
    document = run(config)
    previous = config.output_dir / "leaderboard.json"
    if config.merge and previous.is_file():
        document = merge_results(json.loads(previous.read_text()), document)
    paths = write(document, config.output_dir)
    print(markdown(document))
    print("wrote " + ", ".join(str(path) for path in paths.values()))


if __name__ == "__main__":
    main()
