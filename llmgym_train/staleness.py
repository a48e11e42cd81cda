"""Policy versions and the staleness bound of asynchronous training, with no trainer inside.

**Versions.** Version ``v`` is the policy after ``v`` updates; the engines sample with the
last version published to them. Every generated token records the version that sampled it
(:attr:`~llmgym_train.generation.base.Completion.policy_versions`, kept per token in
:attr:`~llmgym_train.data.Trajectory.policy_versions`). With partial rollouts an episode
started under ``k`` can finish under ``k + 1``; its tokens then carry both. A sample trained
by the update that starts from version ``t`` has staleness ``t - min(token versions)``.

**The bound.** ``max_staleness = s``: no trained token was sampled more than ``s`` versions
before the policy its update starts from. ``s = 0`` is synchronous training.

**How it holds without dropping samples.** Dropping samples found too stale at training time
(as some asynchronous trainers do) selects against long episodes: the longer an episode
runs, the more updates happen meanwhile, so the dropped ones are the long ones and the
trained distribution drifts toward short episodes. Re-admitting stale samples instead breaks
the bound. Here nothing is ever dropped; the bound is kept where episodes *start*:

* every episode takes a ticket ``n = 0, 1, 2, ...`` when it starts, and batch ``t`` (the one
  the update from version ``t`` trains on) is exactly tickets ``[t * B, (t + 1) * B)``, in
  start order, whatever order they finish in. Which episodes are trained together does not
  depend on their lengths, so the trained lengths are the generated lengths.
* ticket ``n`` may start only while ``n < (v + s + 1) * B``, ``v`` the engines' version: so
  an episode of batch ``t`` starts under a version ``>= t - s``, and all its tokens are at
  least that new. This bounds the versions in flight (at most ``s + 1`` batches generate
  ahead of the trainer); when the gate is shut, generation starts nothing new (episodes in
  flight go on).
* the trainer waits until every episode of its batch has finished; the engines meanwhile
  keep generating later tickets, up to the gate.

**Resume.** :meth:`StalenessController.state_dict` holds the version, the tickets issued and
trained, and the versions of finished, untrained episodes. Episodes in flight at the
checkpoint keep their tickets (so their batch and level stay theirs) and are generated again
under the resumed version (:meth:`StalenessController.restart`), which is no older than the
one they first started under, so the bound still holds after a resume.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmgym.error import Error, InvalidOptionError


class StalenessError(Error, RuntimeError):
    """A sample would be trained with tokens older than ``max_staleness`` versions (a broken invariant)."""


@dataclass(frozen=True)
class TrainingBatch:
    """The episodes one update trains on: ``tickets`` in start order and each one's staleness."""

    version: int
    tickets: tuple[int, ...]
    staleness: tuple[int, ...]

    @property
    def max_staleness(self) -> int:
        return max(self.staleness, default=0)

    @property
    def mean_staleness(self) -> float:
        return sum(self.staleness) / max(len(self.staleness), 1)


@dataclass
class StalenessController:
    """Tickets for episodes, the gate that keeps ``max_staleness``, and the batches in start order.

    Arguments:
        batch_size: episodes per update (``B``); a multiple of ``group_size``.
        max_staleness: versions a trained token may lag the policy its update starts from.
        group_size: episodes start in whole groups (GRPO's groups share a level and a batch).
    """

    batch_size: int
    max_staleness: int
    group_size: int = 1
    #: The version the engines sample with: updates done and published.
    version: int = 0
    #: Tickets handed out so far.
    issued: int = 0
    #: Tickets already trained (batches taken): ``consumed // batch_size`` batches.
    consumed: int = 0
    #: Episodes in flight: ticket -> the version it (re)started under.
    running: dict[int, int] = field(default_factory=dict)
    #: Finished, untrained episodes: ticket -> the oldest version among its tokens.
    finished: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.group_size < 1 or self.batch_size < 1 or self.batch_size % self.group_size:
            raise InvalidOptionError(
                f"batch_size must be a positive multiple of group_size; got batch_size {self.batch_size}, "
                f"group_size {self.group_size}. Make episodes per step a whole number of groups."
            )
        if self.max_staleness < 0:
            raise InvalidOptionError(
                f"max_staleness counts policy versions, so it must be >= 0 (0: synchronous); got {self.max_staleness}."
            )

    # ------------------------------------------------------------------ generation side
    def room(self) -> int:
        """Episodes that may start now (whole groups); 0 means generation must not start new ones."""
        limit = (self.version + self.max_staleness + 1) * self.batch_size
        free = max(limit - self.issued, 0)
        return free - free % self.group_size

    def start(self, count: int) -> list[int]:
        """Tickets for ``count`` new episodes (whole groups, at most :meth:`room`), started under :attr:`version`."""
        if count % self.group_size or count > self.room():
            raise StalenessError(
                f"start({count}) asks for more than the gate allows: room {self.room()} episodes in whole groups of "
                f"{self.group_size} at version {self.version}; call room() first and start at most that many."
            )
        tickets = list(range(self.issued, self.issued + count))
        self.issued += count
        self.running.update(dict.fromkeys(tickets, self.version))
        return tickets

    def restart(self, ticket: int) -> None:
        """Generate ``ticket`` again from scratch under :attr:`version` (its progress was lost, e.g. by a resume)."""
        if not self.consumed <= ticket < self.issued:
            raise StalenessError(f"ticket {ticket} is not issued and untrained (untrained: [{self.consumed}, {self.issued})).")
        self.finished.pop(ticket, None)
        self.running[ticket] = self.version

    def finish(self, ticket: int, oldest_version: int | None = None) -> None:
        """Episode ``ticket`` ended; ``oldest_version``: the oldest version among its tokens.

        ``None`` (a generator that stamps no versions) takes the version it started under: no
        token of it can be older, so the bound is checked conservatively.
        """
        if ticket not in self.running:
            raise StalenessError(f"ticket {ticket} is not running (running: {sorted(self.running)[:8]}...).")
        started = self.running.pop(ticket)
        oldest = started if oldest_version is None else oldest_version
        if oldest < started:
            raise StalenessError(
                f"ticket {ticket} started under version {started} but reports a token of version {oldest}: "
                "its tokens cannot predate its start; stamp tokens with the engine's version at each decode step."
            )
        self.finished[ticket] = oldest

    def in_flight(self) -> list[int]:
        """Tickets being generated, in order."""
        return sorted(self.running)

    # ------------------------------------------------------------------ training side
    def next_tickets(self) -> range:
        """The tickets of the next batch to train on."""
        return range(self.consumed, self.consumed + self.batch_size)

    def batch_ready(self) -> bool:
        """Whether every episode of the next batch has finished (the trainer waits until then)."""
        return self.consumed < self.batch_size * (self.version + 1) and all(t in self.finished for t in self.next_tickets())

    def take_batch(self) -> TrainingBatch:
        """The next batch, each episode checked against the bound; then :meth:`advance` once its update is published."""
        if not self.batch_ready():
            raise StalenessError(
                f"batch {self.consumed // self.batch_size} is not ready at version {self.version}: wait until "
                "batch_ready(), and advance() after each update."
            )
        tickets = tuple(self.next_tickets())
        staleness = tuple(self.version - self.finished[ticket] for ticket in tickets)
        worst = max(staleness)
        if worst > self.max_staleness:
            raise StalenessError(
                f"batch {self.consumed // self.batch_size} holds a token {worst} versions older than version "
                f"{self.version}, over max_staleness {self.max_staleness}."
            )
        for ticket in tickets:
            del self.finished[ticket]
        self.consumed += self.batch_size
        return TrainingBatch(self.version, tickets, staleness)

    def advance(self) -> None:
        """The update from :attr:`version` reached the engines: they now sample with ``version + 1``."""
        if self.consumed != self.batch_size * (self.version + 1):
            raise StalenessError(f"advance() at version {self.version} before its batch was taken.")
        self.version += 1

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs, as plain JSON-able values."""
        return {
            "batch_size": self.batch_size,
            "max_staleness": self.max_staleness,
            "group_size": self.group_size,
            "version": self.version,
            "issued": self.issued,
            "consumed": self.consumed,
            "running": [[ticket, version] for ticket, version in sorted(self.running.items())],
            "finished": [[ticket, version] for ticket, version in sorted(self.finished.items())],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> StalenessController:
        """The controller :meth:`state_dict` saved; in-flight episodes still need :meth:`restart`."""
        return cls(
            batch_size=int(state["batch_size"]),
            max_staleness=int(state["max_staleness"]),
            group_size=int(state["group_size"]),
            version=int(state["version"]),
            issued=int(state["issued"]),
            consumed=int(state["consumed"]),
            running={int(t): int(v) for t, v in state["running"]},
            finished={int(t): int(v) for t, v in state["finished"]},
        )


#: ``Trajectory.policy_versions`` on tokens the model did not generate.
NOT_SAMPLED = -1


def oldest_version(versions: Sequence[int] | None, default: int) -> int:
    """The oldest policy version among sampled tokens (``NOT_SAMPLED`` ignored); ``default`` when none carry one."""
    sampled = [version for version in versions or () if version != NOT_SAMPLED]
    return min(sampled, default=default)


def per_token_versions(length: int, spans: Iterable[tuple[int, Sequence[int]]]) -> list[int]:
    """``length`` versions, ``NOT_SAMPLED`` except at each ``(start, versions)`` span."""
    tokens = [NOT_SAMPLED] * length
    for start, versions in spans:
        tokens[start : start + len(versions)] = versions
    return tokens
