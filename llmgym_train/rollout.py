"""The rollout: many agents play episodes concurrently; one inference loop serves them all.

Each episode runs as an asyncio task (its agent's ``collect_trajectory``). Agents put their
requests on one observation queue; the inference loop drains it and feeds the generator:

* a streaming generator (vLLM) gets each request as soon as it arrives and is stepped one
  decoding step at a time, so an agent whose env step just returned joins the running batch
  (continuous batching across turns: no turn waits for the slowest episode of the previous one);
* a batch-only generator (hf) gets a batch once every live agent has a request waiting
  (or ``max_batch_wait`` seconds passed).

Envs: every episode is a sub-env of llmgym's vector env (:class:`llmgym_train.envs.EnvPool`,
one vector env per env id and options, any backend); the env calls its agents make in one
event-loop tick go out as one masked ``astep`` / ``areset``. Which episodes to play (groups,
seeds, mixtures, eval levels) is the planner's business (:mod:`llmgym_train.planner`).

Entry points: :func:`rollout` (blocking) and :func:`arollout` (in a running event loop).
:class:`EpisodeStream` is the same loop kept open for episodes that join while it runs (the
asynchronous trainer's producer, :mod:`llmgym_train.async_loop`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from llmgym_train.agents import AgentConfig, GenerationRequest, get_agent
from llmgym_train.chat import ChatTokens
from llmgym_train.data import Trajectory
from llmgym_train.envs import AsyncEnv, EnvPool, EnvTimer, VectorEpisodes
from llmgym_train.episode import EpisodeStart
from llmgym_train.generation.base import Completion, Generator, StreamingGenerator
from llmgym_train.metrics import episode_figures
from llmgym_train.tree import TreeRollout, TreeShape


@dataclass
class RolloutResult:
    """Trajectories in episode order and the rollout's metrics (see :func:`rollout_metrics`)."""

    trajectories: list[Trajectory]
    metrics: dict[str, float]


@dataclass
class _Timing:
    generation: float = 0.0
    generation_calls: int = 0


def rollout(
    generator: Generator,
    chat: ChatTokens,
    episodes: Sequence[EpisodeStart],
    *,
    agent: str = "chain",
    config: AgentConfig | None = None,
    max_batch_wait: float = 0.05,
    env_pool: EnvPool | None = None,
    tree: TreeShape | None = None,
) -> RolloutResult:
    """Play ``episodes`` with the registered ``agent`` on ``generator``; blocking.

    Arguments:
        chat: the model's chat-template token pieces.
        episodes: from the planner (:func:`llmgym_train.planner.plan_groups`, ``plan_eval``).
        agent: registered agent name (see :func:`llmgym_train.agents.register_agent`).
        config: sampling, turn limit, context length (default: ``AgentConfig()`` with the
            generator's ``max_model_len``).
        max_batch_wait: batch-only generators: longest wait for more requests before a batch.
        env_pool: the vector envs to play on, kept between rollouts (e.g. on Ray env actors:
            ``EnvPool("ray")``); ``None``: a pool on the thread backend for this rollout only.
        tree: play each group as a tree rollout of this shape (see :mod:`llmgym_train.tree`);
            ``None``: every episode is a chain of its own.
    """
    return asyncio.run(arollout(
        generator, chat, episodes, agent=agent, config=config, max_batch_wait=max_batch_wait, env_pool=env_pool,
        tree=tree,
    ))


async def arollout(
    generator: Generator,
    chat: ChatTokens,
    episodes: Sequence[EpisodeStart],
    *,
    agent: str = "chain",
    config: AgentConfig | None = None,
    max_batch_wait: float = 0.05,
    env_pool: EnvPool | None = None,
    tree: TreeShape | None = None,
) -> RolloutResult:
    """:func:`rollout` inside a running event loop."""
    agent_cls = get_agent(agent)
    config = config or AgentConfig(max_context_tokens=generator.max_model_len)
    if config.max_context_tokens > generator.max_model_len:
        raise ValueError(
            f"max_context_tokens={config.max_context_tokens} exceeds the generator's max_model_len="
            f"{generator.max_model_len}; lower it or build the generator with a longer max_model_len."
        )
    started = time.perf_counter()
    env_timer, timing = EnvTimer(), _Timing()
    obs_queue: asyncio.Queue[GenerationRequest | None] = asyncio.Queue()
    act_queues: dict[int, asyncio.Queue[Completion]] = {episode.episode_index: asyncio.Queue() for episode in episodes}
    if len(act_queues) != len(episodes):
        raise ValueError("Every EpisodeStart needs its own episode_index (it routes the agent's completions).")
    own_pool = env_pool is None and not agent_cls.needs_local_env
    pool = EnvPool() if own_pool else env_pool
    envs: list[Any] = []
    coordinators: list[VectorEpisodes] = []
    live = {"agents": len(episodes)}
    trees = TreeRollout(tree, episodes) if tree is not None else None

    async def play(index: int) -> Trajectory:
        try:
            player = agent_cls(chat, config)
            act_queue = act_queues[episodes[index].episode_index]
            if trees is not None:
                return await trees.play(player, episodes[index], envs[index], obs_queue, act_queue)
            return await player.collect_trajectory(episodes[index], envs[index], obs_queue, act_queue)
        finally:
            live["agents"] -= 1
            obs_queue.put_nowait(None)  # wakes the loop to re-check how many agents are live

    try:
        envs, coordinators = _episode_envs(episodes, pool, agent_cls.needs_local_env, env_timer)
        tasks = [asyncio.create_task(play(index)) for index in range(len(episodes))]
        server = asyncio.create_task(_serve(generator, obs_queue, act_queues, live, timing, max_batch_wait))
        await _wait_all([server, *tasks])
        trajectories = [task.result() for task in tasks]
    finally:
        for coordinator in coordinators:
            await coordinator.settle()
        for env in envs:
            env.close()
        if own_pool and pool is not None:
            pool.close()
    elapsed = time.perf_counter() - started
    return RolloutResult(trajectories, rollout_metrics(trajectories, elapsed, timing.generation, env_timer.seconds))


def _episode_envs(
    episodes: Sequence[EpisodeStart], pool: EnvPool | None, local: bool, timer: EnvTimer, slot: str = ""
) -> tuple[list[Any], list[VectorEpisodes]]:
    """Each episode's env handle, in order: a sub-env of the pool's vector envs, or (``local``) an env object here."""
    if local or pool is None:  # the agent reaches into the env object: one gymnasium env per episode
        return [AsyncEnv(gym.make(episode.env_id, **episode.env_kwargs), timer) for episode in episodes], []
    handles, coordinators = pool.episodes(episodes, timer, slot)
    return list(handles), coordinators


class EpisodeStream:
    """A rollout that episodes join while it runs: one inference loop, open until :meth:`close`.

    :func:`arollout` plays a fixed list of episodes and its loop ends with the last one. Here
    the same loop (continuous batching on a streaming generator, batches on a batch-only one)
    serves every episode :meth:`play` has started so far, so episodes of several training
    batches and evaluation episodes share the engine's running batch. Build, use and close it
    in one running event loop; code of that loop may change the generator's weights between
    two engine calls (the loop calls the engine synchronously, so no call is in progress then).

    Arguments:
        agent: the registered agent that plays episodes unless :meth:`play` names another.
        env_pool: the vector envs to play on; ``None``: a pool of this stream's own (closed with it).
    """

    def __init__(
        self,
        generator: Generator,
        chat: ChatTokens,
        *,
        agent: str = "chain",
        env_pool: EnvPool | None = None,
        max_batch_wait: float = 0.05,
    ) -> None:
        self.generator, self.chat, self.agent = generator, chat, agent
        self._own_pool = env_pool is None
        self.env_pool = EnvPool() if env_pool is None else env_pool
        self.env_timer, self.timing = EnvTimer(), _Timing()
        self._obs_queue: asyncio.Queue[GenerationRequest | None] = asyncio.Queue()
        self._act_queues: dict[int, asyncio.Queue[Completion]] = {}
        self._live = {"agents": 1}  # the stream itself holds the loop open until close()
        #: The inference loop; it fails if the engine fails (await it or check ``done()``).
        self.server = asyncio.create_task(
            _serve(generator, self._obs_queue, self._act_queues, self._live, self.timing, max_batch_wait)
        )

    @property
    def generation_seconds(self) -> float:
        """Seconds spent inside the generator so far."""
        return self.timing.generation

    async def play(
        self,
        starts: Sequence[EpisodeStart],
        config: AgentConfig,
        *,
        slot: str = "",
        agent: str | None = None,
        on_episode: Callable[[EpisodeStart, Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """Play ``starts`` to their ends; their trajectories in order.

        Arguments:
            starts: episodes whose ``episode_index`` no episode in flight has (it routes completions).
            slot: the env pool slot of these episodes (see :meth:`EnvPool.episodes`).
            on_episode: called with each episode's start and trajectory as soon as that episode ends.
        """
        agent_cls = get_agent(agent or self.agent)
        taken = [start.episode_index for start in starts if start.episode_index in self._act_queues]
        if taken or len({start.episode_index for start in starts}) != len(starts):
            raise ValueError(f"Episode indices must be unique among episodes in flight; {taken or 'repeated'} are not.")
        envs, coordinators = _episode_envs(starts, self.env_pool, agent_cls.needs_local_env, self.env_timer, slot)
        tasks = [asyncio.create_task(self._play_one(agent_cls(self.chat, config), start, env, on_episode))
                 for start, env in zip(starts, envs, strict=True)]
        try:
            await _wait_all(tasks)
            return [task.result() for task in tasks]
        except BaseException:  # failed or cancelled: its episodes stop too
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            for coordinator in coordinators:
                await coordinator.settle()
            for env in envs:
                env.close()

    async def _play_one(
        self, player: Any, start: EpisodeStart, env: Any,
        on_episode: Callable[[EpisodeStart, Trajectory], None] | None,
    ) -> Trajectory:
        act_queue: asyncio.Queue[Completion] = asyncio.Queue()
        self._act_queues[start.episode_index] = act_queue
        self._live["agents"] += 1
        try:
            trajectory = await player.collect_trajectory(start, env, self._obs_queue, act_queue)
        finally:
            self._live["agents"] -= 1
            del self._act_queues[start.episode_index]
            self._obs_queue.put_nowait(None)  # wakes the loop to re-check how many agents are live
        if on_episode is not None:
            on_episode(start, trajectory)
        return trajectory

    async def close(self, abort: bool = False) -> None:
        """Let the loop end once no episode is left; re-raises the loop's failure, if any.

        ``abort``: stop at once, dropping the engine's requests in flight (their episodes were cancelled).
        """
        self._live["agents"] -= 1
        self._obs_queue.put_nowait(None)
        if abort:
            self.server.cancel()
        try:
            await asyncio.gather(self.server, return_exceptions=abort)
        finally:
            if self._own_pool:
                self.env_pool.close()


async def _wait_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Wait for every task; on the first failure cancel the rest and re-raise it."""
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    failed = [task for task in done if not task.cancelled() and task.exception() is not None]
    if failed:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise failed[0].exception()  # type: ignore[misc]


async def _serve(
    generator: Generator,
    obs_queue: asyncio.Queue[GenerationRequest | None],
    act_queues: dict[int, asyncio.Queue[Completion]],
    live: dict[str, int],
    timing: _Timing,
    max_batch_wait: float,
) -> None:
    if isinstance(generator, StreamingGenerator):
        await _serve_streaming(generator, obs_queue, act_queues, live, timing)
    else:
        await _serve_batches(generator, obs_queue, act_queues, live, timing, max_batch_wait)


async def _serve_streaming(
    generator: StreamingGenerator,
    obs_queue: asyncio.Queue[GenerationRequest | None],
    act_queues: dict[int, asyncio.Queue[Completion]],
    live: dict[str, int],
    timing: _Timing,
) -> None:
    request_numbers = itertools.count()
    owners: dict[str, int] = {}
    try:
        await _stream(generator, obs_queue, act_queues, live, timing, owners, request_numbers)
    finally:
        if owners:  # failed or cancelled: leave the engine without our half-done requests
            generator.abort(list(owners))


async def _stream(
    generator: StreamingGenerator,
    obs_queue: asyncio.Queue[GenerationRequest | None],
    act_queues: dict[int, asyncio.Queue[Completion]],
    live: dict[str, int],
    timing: _Timing,
    owners: dict[str, int],
    request_numbers: itertools.count[int],
) -> None:
    while live["agents"] > 0 or owners:
        if not owners and obs_queue.empty():
            _submit(generator, await obs_queue.get(), owners, request_numbers)
        while not obs_queue.empty():
            _submit(generator, obs_queue.get_nowait(), owners, request_numbers)
        if not owners:
            continue
        start = time.perf_counter()
        finished = generator.poll()
        step_seconds = time.perf_counter() - start
        timing.generation += step_seconds
        timing.generation_calls += 1
        for request_id, completion in finished:
            _deliver(act_queues, owners.pop(request_id), completion)
        if finished:
            grace = turn_grace(step_seconds, len(finished), len(owners))
            await _await_next_turns(generator, obs_queue, len(finished), grace, owners, request_numbers)
        await asyncio.sleep(0)  # let woken agents run up to their next await


#: The least share of an engine step's time the loop waits after it for the next requests of
#: the agents whose turns it finished (see :func:`turn_grace`).
TURN_GRACE = 0.05


def turn_grace(step_seconds: float, finished: int, running: int) -> float:
    """Seconds the loop waits, after a step that finished ``finished`` turns, for those agents' next requests.

    An episode whose env answers within the wait (a grid game, a parser) costs no engine step
    at its turn boundary: its next turn joins the very next step instead of waiting for steps
    that started without it, and of running its turn's last step late, in a batch of its own
    (on this CPU a step costs about 70 ms before its first sequence). The wait idles the
    ``running`` requests that are still decoding, so it is the finished share of the batch
    times the step's time, and at least :data:`TURN_GRACE` of it: when a step finished every
    request (a turn of lockstep episodes) the loop waits up to a whole step for all of them,
    and a slower env is not waited for past that.
    """
    share = finished / max(finished + running, 1)
    return step_seconds * max(TURN_GRACE, share)


async def _await_next_turns(
    generator: StreamingGenerator,
    obs_queue: asyncio.Queue[GenerationRequest | None],
    expected: int,
    grace: float,
    owners: dict[str, int],
    request_numbers: itertools.count[int],
) -> None:
    """Submit what arrives on ``obs_queue`` until ``expected`` items came (a request or an agent's end) or ``grace`` s passed."""
    deadline = time.perf_counter() + grace
    for _ in range(expected):
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return
        try:
            request = await asyncio.wait_for(obs_queue.get(), remaining)
        except TimeoutError:
            return
        _submit(generator, request, owners, request_numbers)


def _submit(
    generator: StreamingGenerator,
    request: GenerationRequest | None,
    owners: dict[str, int],
    request_numbers: itertools.count[int],
) -> None:
    if request is None:
        return
    request_id = f"{request.agent_id}-{next(request_numbers)}"
    owners[request_id] = request.agent_id
    generator.submit(request_id, request.token_ids, request.sampling)


async def _serve_batches(
    generator: Generator,
    obs_queue: asyncio.Queue[GenerationRequest | None],
    act_queues: dict[int, asyncio.Queue[Completion]],
    live: dict[str, int],
    timing: _Timing,
    max_batch_wait: float,
) -> None:
    while live["agents"] > 0:
        batch: list[GenerationRequest] = []
        deadline: float | None = None
        while len(batch) < live["agents"]:
            timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
            try:
                request = await asyncio.wait_for(obs_queue.get(), timeout)
            except TimeoutError:
                break
            if request is not None:
                batch.append(request)
                deadline = deadline or time.perf_counter() + max_batch_wait
        if not batch:
            continue
        start = time.perf_counter()
        completions = generator.generate([request.token_ids for request in batch], [request.sampling for request in batch])
        timing.generation += time.perf_counter() - start
        timing.generation_calls += 1
        for request, completion in zip(batch, completions, strict=True):
            _deliver(act_queues, request.agent_id, completion)


def _deliver(act_queues: dict[int, asyncio.Queue[Completion]], agent_id: int, completion: Completion) -> None:
    """Hand ``completion`` to its agent; an agent that is gone (its episode was cancelled) gets nothing."""
    queue = act_queues.get(agent_id)
    if queue is not None:
        queue.put_nowait(completion)


def rollout_metrics(
    trajectories: Sequence[Trajectory], seconds: float, generation_seconds: float, env_seconds: float
) -> dict[str, float]:
    """Success, return, turns, validity, token and time figures of a rollout, plus per-env success.

    The episode figures are :func:`~llmgym_train.metrics.episode_figures`, as in the trainer's metrics.

    Time split: ``time/generation_s`` is spent inside the generator; ``time/env_s`` sums env
    calls over episodes (they run in worker threads, partly beside generation);
    ``time/bookkeeping_s`` is the wall time left after both (agents' token work, queueing;
    a lower bound, as env time that overlapped generation is subtracted too).
    """
    count = max(len(trajectories), 1)
    turns = [turn for trajectory in trajectories for turn in trajectory.turns]
    figures = episode_figures(trajectories)
    generated = figures["generated_tokens"]
    metrics = {
        "episodes": float(len(trajectories)),
        "success_rate": figures["success_rate"],
        "mean_return": figures["mean_return"],
        "mean_turns": figures["mean_turns"],
        "invalid_action_rate": figures["invalid_action_rate"],
        "cut_turn_rate": sum(turn.finish_reason == "length" for turn in turns) / max(len(turns), 1),
        "context_overflow": float(sum(t.end_reason == "context_overflow" for t in trajectories)),
        "truncated_rate": sum(t.truncated for t in trajectories) / count,
        "tokens/generated": float(generated),
        "tokens/total": float(sum(len(t.token_ids) for t in trajectories)),
        "tokens/generated_per_s": generated / seconds if seconds > 0 else 0.0,
        "time/total_s": seconds,
        "time/generation_s": generation_seconds,
        "time/env_s": env_seconds,
        "time/bookkeeping_s": max(seconds - generation_seconds - env_seconds, 0.0),
    }
    for env_id in sorted({t.env_id for t in trajectories}):
        env_figures = episode_figures([t for t in trajectories if t.env_id == env_id])
        metrics[f"env/{env_id}/success_rate"] = env_figures["success_rate"]
        metrics[f"env/{env_id}/mean_return"] = env_figures["mean_return"]
    return metrics
