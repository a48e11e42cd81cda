"""The staleness bound of asynchronous training, under random generation and update delays, across a resume.

A simulated clock drives one engine and one trainer around a :class:`StalenessController`.
The engine decodes one token of every running episode per step (steps take random time),
stamping each token with the version it holds; weights reach it between decode steps. The
trainer takes a batch as soon as one is ready and spends a random time on the update. In the
middle of the run the controller is saved (through JSON), rebuilt, and the episodes in
flight lose their progress, as in a restart. The checks use the simulation's own token
versions, not the controller's bookkeeping.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgym.error import InvalidOptionError
from llmgym_train.data import Trajectory
from llmgym_train.generation.base import Completion
from llmgym_train.staleness import NOT_SAMPLED, StalenessController, StalenessError, oldest_version


@dataclass
class Plan:
    groups_per_batch: int
    group_size: int
    max_staleness: int
    updates: int
    capacity: int  # episodes the engine decodes at once
    lengths: list[int]  # ticket n's episode has lengths[n % len] tokens
    decode_delays: list[int]
    update_delays: list[int]
    resume_at: int  # resume right after this version is published
    keep_finished: bool  # the checkpoint kept finished, untrained episodes (else they are generated again)

    @property
    def batch_size(self) -> int:
        return self.groups_per_batch * self.group_size

    def length(self, ticket: int) -> int:
        return self.lengths[ticket % len(self.lengths)]


@dataclass
class Outcome:
    trained: list[tuple[int, int, list[int]]] = field(default_factory=list)  # (version, ticket, token versions)
    generated: dict[int, int] = field(default_factory=dict)  # ticket -> length, every finished episode
    resumed: bool = False


def simulate(plan: Plan) -> Outcome:
    controller = StalenessController(plan.batch_size, plan.max_staleness, plan.group_size)
    decode_delays, update_delays = itertools.cycle(plan.decode_delays), itertools.cycle(plan.update_delays)
    running: dict[int, list[int]] = {}  # ticket -> versions of its tokens so far
    finished: dict[int, list[int]] = {}
    outcome = Outcome()
    engine_at, trainer_done_at = 0, None
    while controller.version < plan.updates:
        if trainer_done_at is not None and trainer_done_at <= engine_at:
            clock, trainer_done_at = trainer_done_at, None
            controller.advance()  # the new weights reach the engine between two decode steps
            if controller.version == plan.resume_at < plan.updates:
                controller = resume(controller, running, finished, plan.keep_finished)
                outcome.resumed = True
        else:
            clock = engine_at
            engine_step(controller, plan, running, finished, outcome)
            engine_at = clock + next(decode_delays)
        assert controller.issued <= (controller.version + plan.max_staleness + 1) * plan.batch_size
        if trainer_done_at is None and controller.version < plan.updates and controller.batch_ready():
            batch = controller.take_batch()
            outcome.trained += [(batch.version, ticket, finished.pop(ticket)) for ticket in batch.tickets]
            trainer_done_at = clock + next(update_delays)
    return outcome


def engine_step(
    controller: StalenessController, plan: Plan, running: dict[int, list[int]], finished: dict[int, list[int]],
    outcome: Outcome,
) -> None:
    """Start whole groups while the gate and the engine have room, then decode one token of each running episode."""
    while controller.room() >= plan.group_size and plan.capacity - len(running) >= plan.group_size:
        running.update({ticket: [] for ticket in controller.start(plan.group_size)})
    for ticket, versions in list(running.items()):
        versions.append(controller.version)
        if len(versions) == plan.length(ticket):
            finished[ticket] = running.pop(ticket)
            controller.finish(ticket, oldest_version(versions, controller.version))
            outcome.generated[ticket] = len(versions)


def resume(
    controller: StalenessController, running: dict[int, list[int]], finished: dict[int, list[int]], keep_finished: bool
) -> StalenessController:
    state = json.loads(json.dumps(controller.state_dict()))
    restored = StalenessController.from_state(state)
    assert restored.state_dict() == state
    lost = restored.in_flight() + ([] if keep_finished else sorted(finished))
    for ticket in lost:
        restored.restart(ticket)
        finished.pop(ticket, None)
        running[ticket] = []
    return restored


plans = st.builds(
    Plan,
    groups_per_batch=st.integers(1, 3),
    group_size=st.integers(1, 3),
    max_staleness=st.integers(0, 3),
    updates=st.integers(2, 7),
    capacity=st.integers(3, 12),
    lengths=st.lists(st.integers(1, 25), min_size=1, max_size=40),
    decode_delays=st.lists(st.integers(1, 5), min_size=1, max_size=10),
    update_delays=st.lists(st.integers(1, 60), min_size=1, max_size=10),
    resume_at=st.integers(1, 6),
    keep_finished=st.booleans(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans)
def test_no_trained_token_lags_more_than_max_staleness_before_and_after_a_resume(plan: Plan) -> None:
    outcome = simulate(plan)
    assert outcome.resumed == (plan.resume_at < plan.updates)
    for version, ticket, versions in outcome.trained:
        sampled = [v for v in versions if v != NOT_SAMPLED]
        assert version - min(sampled) <= plan.max_staleness, (version, ticket, versions)
        assert max(sampled) <= version  # no token from the future
    # Batches in start order: batch t is tickets [t * B, (t + 1) * B), each trained once.
    assert [(version, ticket) for version, ticket, _ in outcome.trained] == [
        (ticket // plan.batch_size, ticket) for ticket in range(plan.updates * plan.batch_size)
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans)
def test_trained_episode_lengths_are_the_generated_ones(plan: Plan) -> None:
    outcome = simulate(plan)
    trained_tickets = range(plan.updates * plan.batch_size)
    trained_lengths = sorted(len(versions) for _, _, versions in outcome.trained)
    # Every episode generated for these batches is trained, none dropped: the same lengths.
    assert trained_lengths == sorted(outcome.generated[ticket] for ticket in trained_tickets)
    assert trained_lengths == sorted(plan.length(ticket) for ticket in trained_tickets)


def drop_stale_in_finish_order(lengths: list[int], batch_size: int, max_staleness: int, updates: int) -> list[int]:
    """The scheme this controller avoids: train on episodes as they finish, drop those over the bound."""
    version, clock, trained = 0, 0, []
    running = {ticket: (0, 0) for ticket in range(batch_size * 2)}  # ticket -> (start version, tokens)
    next_ticket, done = batch_size * 2, []
    while version < updates:
        clock += 1
        for ticket, (started, tokens) in list(running.items()):
            running[ticket] = (started, tokens + 1)
            if tokens + 1 == lengths[ticket % len(lengths)]:
                del running[ticket]
                if version - started <= max_staleness:
                    done.append(tokens + 1)
                running[next_ticket], next_ticket = (version, 0), next_ticket + 1
        if len(done) >= batch_size:
            trained += done[:batch_size]
            done, version = done[batch_size:], version + 1
    return trained


def test_dropping_stale_episodes_would_fail_the_length_check() -> None:
    """The length check can fail: dropping stale samples trains on short episodes mostly."""
    lengths = [2, 2, 2, 30]  # a quarter of the episodes are long
    trained = drop_stale_in_finish_order(lengths, batch_size=4, max_staleness=1, updates=20)
    assert sum(trained) / len(trained) < 0.5 * sum(lengths) / len(lengths)
    plan = Plan(2, 2, 1, 20, 8, lengths, [1], [3], resume_at=99, keep_finished=True)
    kept = [len(versions) for _, _, versions in simulate(plan).trained]
    assert sum(kept) / len(kept) == sum(lengths) / len(lengths)


def test_max_staleness_zero_is_synchronous() -> None:
    plan = Plan(2, 2, 0, 5, 8, [3, 9, 1, 4, 7], [2, 1], [5, 11], resume_at=3, keep_finished=False)
    for version, _, versions in simulate(plan).trained:
        assert set(versions) == {version}


def test_the_gate_opens_one_batch_per_published_version() -> None:
    controller = StalenessController(batch_size=4, max_staleness=1, group_size=2)
    assert controller.room() == 8  # batches 0 and 1 may generate under version 0
    tickets = controller.start(8)
    assert controller.room() == 0
    with pytest.raises(StalenessError, match="more than the gate allows"):
        controller.start(2)
    for ticket in tickets[:4]:
        controller.finish(ticket)
    batch = controller.take_batch()
    assert batch.tickets == (0, 1, 2, 3) and batch.staleness == (0, 0, 0, 0)
    assert controller.room() == 0  # the update is running: the engines still hold version 0
    controller.advance()
    assert controller.room() == 4
    controller.finish(4, oldest_version=0)
    assert controller.start(2) == [8, 9]
    with pytest.raises(StalenessError, match="cannot predate its start"):
        controller.finish(8, oldest_version=0)  # started under version 1


def test_a_stale_token_is_refused_at_training_time() -> None:
    controller = StalenessController(batch_size=1, max_staleness=0)
    [ticket] = controller.start(1)
    controller.finish(ticket)
    controller.take_batch()
    controller.advance()
    [ticket] = controller.start(1)
    controller.running[ticket] = 0  # a caller that lied about the start version
    controller.finish(ticket, oldest_version=0)
    with pytest.raises(StalenessError, match="over max_staleness 0"):
        controller.take_batch()


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(InvalidOptionError, match="multiple of group_size"):
        StalenessController(batch_size=6, max_staleness=1, group_size=4)
    with pytest.raises(InvalidOptionError, match="must be >= 0"):
        StalenessController(batch_size=4, max_staleness=-1)


def test_trajectory_carries_per_token_versions_from_its_completions() -> None:
    from llmgym_train.episode import EpisodeStart, TrajectoryBuilder

    builder = TrajectoryBuilder([1, 2, 3], EpisodeStart(0, "x", 0, 0, {}), {}, 100, [])
    builder.add_generation(Completion((7, 8), (-0.1, -0.2), "stop", policy_versions=(4, 5)), "ab", 0.0, {})
    builder.add_observation([9, 9], "obs")
    builder.add_generation(Completion((6,), (-0.3,), "stop", policy_versions=(5,)), "c", 1.0, {})
    trajectory = builder.build("terminated")
    trajectory.check()
    assert trajectory.policy_versions == [-1, -1, -1, 4, 5, -1, -1, 5]
    assert oldest_version(trajectory.policy_versions, default=9) == 4
    unstamped = TrajectoryBuilder([1], EpisodeStart(0, "x", 0, 0, {}), {}, 100, [])
    unstamped.add_generation(Completion((7,), (-0.1,), "stop"), "a", 0.0, {})
    assert unstamped.build("terminated").policy_versions is None
    assert oldest_version(None, default=9) == 9
    with pytest.raises(ValueError, match="every completion of an episode carries policy_versions or none"):
        unstamped.add_generation(Completion((7,), (-0.1,), "stop", policy_versions=(1,)), "a", 0.0, {})
    assert isinstance(trajectory, Trajectory)
