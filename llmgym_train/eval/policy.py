"""Evaluation of LLM policies trained here: one loop for the trainer's evaluations and the leaderboard's run rows.

A policy trained by ``llmgym-train`` is asked what it was trained on: the run's agent
(``markov``: each turn sees the system prompt and the latest observation only), its chat
tokens (the response prefix written after the generation prompt), its choices (one token
drawn among the replies), its token limits and context length. :func:`evaluate_policy` plays
levels that way, greedily by default, through the trainer's rollout; ``Trainer.evaluate``
and :class:`RunAgent` (a ``checkpoint:<run folder>`` row of ``llmgym-bench``) both call it,
so a leaderboard row of a run measures what the run's own evaluation measured.

A plain chat model (``vllm:<model>``, ``checkpoint:`` of an HF folder) is not played here:
it has no run settings, and the leaderboard asks it in plain chat
(:class:`~llmgym_train.eval.agents.VllmAgent`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgym.error import InvalidOptionError
from llmgym.splits import level_key
from llmgym_train.agents import AgentConfig
from llmgym_train.chat import ChatTokens
from llmgym_train.config import RUN_CONFIG_FILE, EnvSpec, TrainConfig, load_config
from llmgym_train.constraints import Constrain
from llmgym_train.data import Trajectory
from llmgym_train.episode import EpisodeStart
from llmgym_train.eval.agents import AgentOptions, Reply, Turn
from llmgym_train.eval.leaderboard import EpisodeResult, LeaderboardConfig
from llmgym_train.eval.results import portable_path
from llmgym_train.generation.base import Generator, SamplingSpec
from llmgym_train.metrics import episode_metrics
from llmgym_train.envs import EnvPool
from llmgym_train.planner import EvalLevel, drawn_level_keys, plan_eval, teacher_of
from llmgym_train.rollout import rollout as run_rollout

if TYPE_CHECKING:
    from llmgym_train.config import EvalConfig, RolloutConfig


@dataclass(frozen=True)
class PlaySettings:
    """How a policy trained here plays an evaluation: the run's settings that shape its prompts and replies.

    Attributes:
        agent: registered agent name that plays each episode (``chain``, ``markov``, ...).
        response_prefix: text every assistant turn starts with, given as part of the prompt.
        choices: replies each turn chooses among, one token each; empty: free generation.
        max_new_tokens: most tokens generated per turn.
        stop: texts that end a reply (kept in it), as ``rollout.stop``.
        max_model_len: context length in tokens; a longer episode ends as ``context_overflow``.
        max_turns: the agent's turn limit (``None``: only the env ends episodes).
        temperature: 0 plays greedily, as the trainer's evaluation does.
        top_p: nucleus sampling mass (temperature above 0 only).
        constrain: the shape replies are constrained to (``rollout.constrain``; ``none``: free).
    """

    agent: str = "chain"
    response_prefix: str = ""
    choices: tuple[str, ...] = ()
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    max_model_len: int = 2048
    max_turns: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    constrain: Constrain = "none"

    @classmethod
    def of_run(cls, rollout: RolloutConfig, evaluation: EvalConfig) -> PlaySettings:
        """The greedy evaluation of a run with these ``rollout`` and ``eval`` sections (what ``Trainer.evaluate`` plays)."""
        return cls(
            agent=rollout.agent,
            response_prefix=rollout.response_prefix,
            choices=tuple(rollout.choices),
            max_new_tokens=evaluation.max_new_tokens or rollout.max_new_tokens,
            stop=tuple(rollout.stop),
            max_model_len=rollout.max_model_len,
            max_turns=evaluation.agent_max_turns(rollout.max_turns) or None,
            constrain=rollout.constrain,
        )

    def chat(self, tokenizer: Any) -> ChatTokens:
        """The chat tokens these settings play with: ``tokenizer``'s template plus the response prefix."""
        return ChatTokens(tokenizer, response_prefix=self.response_prefix)

    def record(self) -> dict[str, Any]:
        """The settings as a results file records them."""
        return {**asdict(self), "choices": list(self.choices), "stop": list(self.stop)}


@dataclass
class PolicyEvaluation:
    """What :func:`evaluate_policy` played: the episodes in ``starts`` order, their labels and metrics.

    Attributes:
        trajectories: one per start, token-exact (``messages`` hold the texts played).
        labels: the metric label of each trajectory (its env spec's label).
        metrics: :func:`~llmgym_train.metrics.episode_metrics` of the episodes, as the trainer logs them.
    """

    trajectories: list[Trajectory]
    labels: list[str]
    metrics: dict[str, Any]


def evaluate_policy(
    generator: Generator,
    chat: ChatTokens,
    settings: PlaySettings,
    starts: Sequence[EpisodeStart],
    labels: Sequence[str],
    *,
    env_pool: EnvPool | None = None,
    sampling_seed: int | None = None,
    play: Callable[[Sequence[EpisodeStart], str, AgentConfig], list[Trajectory]] | None = None,
) -> PolicyEvaluation:
    """Play ``starts`` (e.g. from :func:`~llmgym_train.planner.plan_eval`) as ``settings`` say.

    Arguments:
        generator: the policy's generator (the trainer's own, or one loaded from a run's ``model/``).
        chat: the tokenizer's chat tokens with ``settings.response_prefix`` (see :meth:`PlaySettings.chat`).
        labels: one metric label per start.
        env_pool: the vector envs to play on (the trainer's own, possibly on Ray); ``None``: new ones in this process.
        sampling_seed: seeds every request when ``settings.temperature`` > 0 (see
            :class:`~llmgym_train.agents.AgentConfig`), so a sampled evaluation replays exactly.
        play: plays the episodes ``(starts, agent, config) -> trajectories`` instead of a rollout
            of their own (asynchronous training: in the producer's running stream, beside training).
    """
    if chat.response_prefix != settings.response_prefix:
        raise InvalidOptionError(
            f"The chat tokens write the response prefix {chat.response_prefix!r}, the settings say "
            f"{settings.response_prefix!r}; build the chat tokens with settings.chat(tokenizer)."
        )
    choice_ids = chat.choice_token_ids(settings.choices)
    sampling = SamplingSpec(
        max_tokens=settings.max_new_tokens, temperature=settings.temperature, top_p=settings.top_p,
        stop=settings.stop, allowed_token_ids=choice_ids,
    )
    config = AgentConfig(
        sampling=sampling, max_turns=settings.max_turns, max_context_tokens=settings.max_model_len,
        sampling_seed=sampling_seed, constrain=settings.constrain,
    )
    if play is not None:
        trajectories = play(starts, settings.agent, config)
    else:
        trajectories = run_rollout(generator, chat, starts, agent=settings.agent, config=config, env_pool=env_pool).trajectories
    return PolicyEvaluation(trajectories, list(labels), episode_metrics(trajectories, labels))


# ---------------------------------------------------------------------- leaderboard rows of runs
def read_run_config(run: str | Path) -> TrainConfig:
    """The config a run folder was trained with; a config this version cannot read fails with the fix."""
    path = Path(run).expanduser() / RUN_CONFIG_FILE
    try:
        return load_config(path)
    except InvalidOptionError as error:
        raise InvalidOptionError(
            f"Cannot read the run config {str(path)!r} ({error}). A run row plays as the run was trained, so it "
            f"needs the run's settings; fix the config file, or play the model as a plain chat model with "
            f"--agents vllm:{Path(run) / 'model'}."
        ) from error


class RunAgent:
    """A run folder of ``llmgym-train`` on the leaderboard, played as the run's own evaluation plays it.

    Its model is the run's ``model/`` (the policy at the last checkpoint); its settings are the
    run's (:meth:`PlaySettings.of_run`), greedy unless the leaderboard samples (``--temperature``).
    An env the run evaluated on is played with that eval env's options (say, a lenient action
    parser, a shorter turn limit); any other env with the env's own. The row records both.
    Rather than answering turns one by one (:meth:`act`), it plays whole levels
    (:meth:`play_levels`) through :func:`evaluate_policy`.

    Arguments:
        run: the run folder.
        generator: a generator on the run's model, with a context of at least ``settings.max_model_len``.
        tokenizer: the model's tokenizer.
        config: the run's config (its ``config.yaml``).
        settings: how to play; default: the run's evaluation.
        name: the row's agent name.
        extra_settings: more settings to record (model folder, backend, seed).
    """

    def __init__(
        self,
        run: str | Path,
        generator: Generator,
        tokenizer: Any,
        config: TrainConfig,
        settings: PlaySettings | None = None,
        name: str | None = None,
        extra_settings: dict[str, Any] | None = None,
    ) -> None:
        self.run = Path(run)
        self.config = config
        self.play_settings = settings or PlaySettings.of_run(config.rollout, config.eval)
        if self.play_settings.max_model_len > generator.max_model_len:
            raise InvalidOptionError(
                f"The run plays with a {self.play_settings.max_model_len}-token context and the generator holds "
                f"{generator.max_model_len}; start the generator with max_model_len={self.play_settings.max_model_len}."
            )
        self.generator = generator
        self.chat = self.play_settings.chat(tokenizer)
        self.name = name or f"checkpoint:{portable_path(run)}"
        self._base_settings = {
            **(extra_settings or {}), "run": str(self.run), "plays": "as trained (the run's evaluation)",
            **self.play_settings.record(),
        }
        self.settings: dict[str, Any] = dict(self._base_settings)

    @classmethod
    def from_run(cls, run: str | Path, options: AgentOptions, name: str | None = None, base: bool = False) -> RunAgent:
        """Load the run folder's config and model (``options.backend``: ``vllm`` or ``hf``) and play as it was trained.

        ``base``: play the model the run started from (its config's ``model``) instead of its
        ``model/``, with the same settings: the run's before-training row.

        The leaderboard's sampling options other than temperature and top_p (``--max-tokens``,
        ``--history``, ``--max-model-len``) are for chat models and do not apply: the run's own do.
        """
        from transformers import AutoTokenizer

        from llmgym_train.generation import make_generator
        from llmgym_train.models import resolve_model

        config = read_run_config(run)
        sampling = options.sampling
        settings = replace(
            PlaySettings.of_run(config.rollout, config.eval), temperature=sampling.temperature, top_p=sampling.top_p
        )
        folder = resolve_model(config.model if base else str(run))
        generator = make_generator(
            options.backend, folder, max_model_len=settings.max_model_len, seed=options.seed  # type: ignore[arg-type]
        )
        tokenizer = AutoTokenizer.from_pretrained(folder)
        extra = {"model": str(folder), "backend": options.backend, "seed": options.seed,
                 "weights": "the run's starting model" if base else "the run's last checkpoint",
                 # Ties the row to the run that made the checkpoint (a learning-curve JSON's ``steps``).
                 "trained_steps": 0 if base else trained_steps(Path(run)),
                 # Who besides the env's rewards shaped training (None: nobody, or untrained).
                 "teacher": None if base else teacher_of(config.train_envs)}
        return cls(run, generator, tokenizer, config, settings, name, extra)

    def env_spec(self, env_id: str, max_turns: int | None = None) -> EnvSpec:
        """The env ``env_id`` as the run evaluated it (its eval env's options), ``max_turns`` overriding the turn limit."""
        own = [spec for spec in self.config.validation_envs if spec.id == env_id]
        options = dict(own[0].options) if own else {}
        if max_turns is not None:
            options["max_turns"] = max_turns
        return EnvSpec(id=env_id, options=options, name=own[0].label if own else "")

    def supports(self, env: Any) -> bool:
        return True

    def eval_levels_trained_on(self, levels: Sequence[EvalLevel]) -> int:
        """How many of ``levels`` the run's training steps drew, by content (0 for the run's starting model)."""
        if self._base_settings.get("weights") == "the run's starting model":
            return 0
        steps = trained_steps(self.run)
        drawn = drawn_level_keys(self.config.train_envs, self.config.seed, steps)
        return sum(level_key(level.options["level"]) in drawn for level in levels if level.options)

    def prepare(self, env_id: str) -> None:
        """Record the env options the next row plays with (a new dict: earlier rows keep theirs)."""
        own = any(spec.id == env_id for spec in self.config.validation_envs)
        self.settings = {
            **self._base_settings, "env_options": dict(self.env_spec(env_id).options), "env_of_the_run": own,
        }

    def act(self, turns: Sequence[Turn]) -> list[Reply]:
        raise NotImplementedError(
            "RunAgent plays whole levels as the run's evaluation does; call play_levels (the leaderboard does)."
        )

    def play_levels(
        self, env_id: str, levels: Sequence[EvalLevel], config: LeaderboardConfig
    ) -> list[EpisodeResult]:
        """Every (level, sample) of ``levels`` (the first eval-set levels), through :func:`evaluate_policy`.

        Each episode resets with its level's eval-set seed and plays the level itself, as in the
        trainer's evaluation; samples of a level differ only when the leaderboard samples.
        """
        spec = self.env_spec(env_id, config.max_turns)
        plan = plan_eval([spec], len(levels), samples=config.samples)
        starts, labels = plan.starts, plan.labels
        planned = [(start.seed, start.reset_options) for start in starts[:: config.samples]]
        if planned != [(level.seed, level.options) for level in levels]:
            raise InvalidOptionError(
                f"The leaderboard's levels of {env_id} are not the first {len(levels)} of its eval set; a run row "
                "plays the eval set's levels in order (use --limit, not a reordered eval set)."
            )
        seed = config.seed if self.play_settings.temperature > 0 else None
        evaluation = evaluate_policy(self.generator, self.chat, self.play_settings, starts, labels, sampling_seed=seed)
        return [
            episode_result(trajectory, levels[index // config.samples], index % config.samples)
            for index, trajectory in enumerate(evaluation.trajectories)
        ]

    def close(self) -> None:
        self.generator.close()


def trained_steps(run: Path) -> int:
    """The training steps a run folder's ``metrics.jsonl`` records (its last ``train`` record's step)."""
    path = run / "metrics.jsonl"
    steps = 0
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                if record.get("kind") == "train":
                    steps = max(steps, int(record["step"]))
    return steps


def episode_result(trajectory: Trajectory, level: EvalLevel, sample: int) -> EpisodeResult:
    """The leaderboard's record of one played level: the same figures as its other rows, plus the texts played.

    A turn's prompt tokens are the context the model saw for it (the latest observation's
    context for ``markov``, everything before it for ``chain``).
    """
    turns = trajectory.turns
    start = (lambda turn: turn.observation_start) if trajectory.fresh_contexts else (lambda turn: 0)
    return EpisodeResult(
        level_index=level.index,
        sample=sample,
        env_seed=int(trajectory.seed if trajectory.seed is not None else level.seed),
        success=trajectory.success,
        episode_return=trajectory.episode_return,
        turns=len(turns),
        invalid_actions=sum(not turn.action_is_valid for turn in turns),
        prompt_tokens=sum(turn.start - start(turn) for turn in turns),
        completion_tokens=sum(turn.end - turn.start for turn in turns),
        truncated=trajectory.end_reason != "terminated",
        optimal_steps=level.optimal_steps,
        difficulty=level.difficulty,
        actions=[message["content"] for message in trajectory.messages if message["role"] == "assistant"],
    )


__all__ = ["PlaySettings", "PolicyEvaluation", "RunAgent", "episode_result", "evaluate_policy"]
