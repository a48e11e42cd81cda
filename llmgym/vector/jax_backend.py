"""``backend="jax"``: llmgym's vector env with its games stepped in JAX, text in and text out.

``gym.make_vec("llmgym/Sokoban-v0", 4096, backend="jax")`` gives a
:class:`~llmgym.vector.TextVectorEnv` like any other backend (the same seeding, groups,
partial steps and autoreset modes) whose observations, rewards, ``terminated``,
``truncated`` and infos equal the inline backend's, step for step. Per call:

* resets run the text env itself (one per sub-env, kept here), so a seed gives the same
  level and the same reset info; its level is then loaded into the JAX batch;
* step actions are parsed in Python with the env's own parser and move reader, and every
  sub-env of the call moves in one compiled ``step``; slippery ice draws its slips from the
  text env's own ``np_random``, in the text env's order, so even slips match;
* observations are rendered from the JAX state: boards decoded once per batch, then
  prefixed with the feedback line of each step's event.

Actions may also be integers (an index into the env's ``action_names``): the numeric-action
fast path, which skips parsing and plays as ``<answer>Name</answer>`` would.

``call`` reaches the text envs, which hold each episode's starting level but not its
current position: ``render`` is answered from the JAX state; ``solution`` and ``level_xsb``
(which read the position) are refused with the reason.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import traceback
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import jax
import numpy as np

from llmgym.core import to_charset
from llmgym.error import InvalidOptionError
from llmgym.jax.common import EVENT_INVALID, EVENT_OVER, INVALID_ACTION, GridCore, select
from llmgym.jax.cores import core_for_env
from llmgym.jax.frozen_lake import Slip
from llmgym.vector.backends import Failure, Op, SubEnvSet, build_sub_envs

_OVER_TEXT = "The episode is over; call reset() to start a new one."
#: ``call`` names that read the position, which lives in JAX arrays with this backend.
_POSITION_READERS = frozenset({"solution", "level_xsb"})


def render_boards(core: GridCore, grids: np.ndarray) -> list[str]:
    """Board texts of ``grids`` (``(B, height, width)`` symbol indices), rows joined by newlines.

    One lookup and one decode for the whole batch; each board is then a slice of the text.
    """
    count, height, width = grids.shape
    lookup = np.frombuffer(core.symbols.encode("ascii"), dtype=np.uint8)
    characters = np.full((count, height, width + 1), ord("\n"), dtype=np.uint8)
    characters[:, :, :width] = lookup[grids]
    text = characters.tobytes().decode("ascii")
    stride = height * (width + 1)
    return [text[start : start + stride - 1] for start in range(0, count * stride, stride)]


class JaxEnvBackend:
    """``backend="jax"`` of :class:`~llmgym.vector.TextVectorEnv` (see the module docstring)."""

    name: ClassVar[str] = "jax"

    def start(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None,
        step_timeout: float | None,
        describe: Callable[[gym.Env], None],
    ) -> JaxTextBackend:
        if num_workers is not None or step_timeout is not None:
            raise InvalidOptionError(
                "backend='jax' steps every sub-env in one compiled call in this process; num_workers and "
                f"step_timeout do not apply (got num_workers={num_workers!r}, step_timeout={step_timeout!r}). "
                "Drop them."
            )
        sub_envs = build_sub_envs(dict(enumerate(env_fns)))
        try:
            first = sub_envs.envs[0]
            describe(first)
            return JaxTextBackend(sub_envs, core_for_env(first))
        except Exception:
            sub_envs.close()
            raise


class JaxTextBackend:
    """The running backend: text envs for resets and parsing, one JAX batch for the games."""

    def __init__(self, sub_envs: SubEnvSet, core: GridCore) -> None:
        self._sub_envs = sub_envs
        self._text_envs = [sub_envs.envs[index].unwrapped for index in range(len(sub_envs.envs))]
        self.core = core
        count = len(self._text_envs)
        self._rewards = core.rewards()
        self._levels = jax.tree.map(lambda leaf: np.zeros((count, *leaf.shape[1:]), leaf.dtype),
                                    core.encode_levels([]))
        self._keys = jax.random.split(jax.random.PRNGKey(0), count)  # slips come from the text envs
        self._reset_rows = jax.jit(self._reset_where)
        self._step_rows = jax.jit(self._step_where)
        self._grids = jax.jit(jax.vmap(core.symbol_grid))
        self._state = self._reset_rows(None, self._levels, np.ones(count, dtype=bool))
        self._started = np.zeros(count, dtype=bool)
        self._ended = np.zeros(count, dtype=bool)
        self._helper: concurrent.futures.ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ compiled parts
    def _reset_where(self, state: Any, levels: Any, mask: jax.Array) -> Any:
        fresh = jax.vmap(self.core.reset)(self._keys, levels)
        return fresh if state is None else select(mask, fresh, state)

    def _step_where(self, state: Any, actions: jax.Array, mask: jax.Array, slips: Any) -> tuple[Any, Any, jax.Array]:
        stepped, result = jax.vmap(self.core.step)(state, actions, slips)
        state = select(mask, stepped, state)
        episode = state.episode
        return state, (result, episode.invalid_count, episode.turn), jax.vmap(self.core.symbol_grid)(state)

    # ------------------------------------------------------------------ the Backend protocol
    @property
    def envs(self) -> list[gym.Env]:
        return list(self._sub_envs.envs.values())

    def run(self, ops: Sequence[Op]) -> list[Any]:
        results: list[Any] = [None] * len(ops)
        resets = [(slot, op) for slot, op in enumerate(ops) if op.kind == "reset"]
        steps = [(slot, op) for slot, op in enumerate(ops) if op.kind in ("step", "step_reset")]
        if resets:
            self._run_resets(resets, results)
        if steps:
            self._run_steps(steps, results)
        for slot, op in enumerate(ops):
            if op.kind == "call":
                results[slot] = self._call(op)
        return results

    async def arun(self, ops: Sequence[Op]) -> list[Any]:
        if self._helper is None:
            self._helper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llmgym-jax")
        return await asyncio.get_running_loop().run_in_executor(self._helper, self.run, ops)

    def close(self) -> None:
        if self._helper is not None:
            self._helper.shutdown(wait=True)
            self._helper = None
        self._sub_envs.close()

    # ------------------------------------------------------------------ resets
    def _run_resets(self, items: Sequence[tuple[int, Op]], results: list[Any]) -> None:
        """Reset the text envs of ``items``, then load their levels into the JAX batch."""
        mask = np.zeros(len(self._text_envs), dtype=bool)
        for slot, op in items:
            outcome = self._sub_envs.run_one(op)
            if not isinstance(outcome, Failure):
                try:
                    encoded = self.core.encode_levels([self._text_envs[op.index].level()])
                except Exception as error:  # e.g. a level of another size than the batch's
                    outcome = _failure(op.index, error)
                else:
                    for leaf, row in zip(jax.tree.leaves(self._levels), jax.tree.leaves(encoded), strict=True):
                        leaf[op.index] = row[0]
                    mask[op.index] = True
            results[slot] = outcome
        self._state = self._reset_rows(self._state, self._levels, mask)
        self._started |= mask
        self._ended &= ~mask

    # ------------------------------------------------------------------ steps
    def _run_steps(self, items: Sequence[tuple[int, Op]], results: list[Any]) -> None:
        count = len(self._text_envs)
        actions = np.full(count, INVALID_ACTION, dtype=np.int32)
        mask = np.zeros(count, dtype=bool)
        slipped, sides = np.zeros(count, dtype=bool), np.zeros(count, dtype=np.int32)
        notes: dict[int, tuple[str | None, str | None]] = {}
        for slot, op in items:
            try:
                code, parsed, invalid_line = self._read(op.index, op.args[0])
            except Exception as error:
                results[slot] = _failure(op.index, error)
                continue
            if code >= 0 and self.core.slippery:
                slipped[op.index], sides[op.index] = self.core.draw_slip(self._text_envs[op.index].np_random)
            actions[op.index], mask[op.index] = code, True
            notes[op.index] = (parsed, invalid_line)
        slips = Slip(slipped, sides) if self.core.slippery else None
        self._state, outputs, grids = self._step_rows(self._state, actions, mask, slips)
        (result, invalid_counts, turns), grids = jax.device_get((outputs, grids))
        stepped = [(slot, op) for slot, op in items if op.index in notes]
        indices = [op.index for _, op in stepped]
        boards = render_boards(self.core, grids[indices])
        ended = result.terminated | result.truncated
        self._ended[mask] |= ended[mask]
        finished = []
        for (slot, op), board in zip(stepped, boards, strict=True):
            index = op.index
            parsed, invalid_line = notes[index]
            event = int(result.event[index])
            terminated, truncated = bool(result.terminated[index]), bool(result.truncated[index])
            observation = self._text(event, board, invalid_line, parsed, terminated, int(invalid_counts[index]))
            info = {
                "success": bool(result.success[index]),
                "action_is_valid": bool(result.valid[index]),
                "action_is_effective": bool(result.effective[index]),
                "parsed_action": None if event == EVENT_OVER else parsed,
                "turn": int(turns[index]),
                "state_key": board,  # the text envs' key: the board as observed, feedback aside
            }
            results[slot] = (observation, float(self._rewards[event]), terminated, truncated, info)
            if op.kind == "step_reset" and (terminated or truncated):
                finished.append((slot, op))
        if finished:
            self._reset_finished(finished, results)

    def _read(self, index: int, action: Any) -> tuple[int, str | None, str | None]:
        """``(action code, parsed action, feedback line of an invalid action)`` for one sub-env."""
        if self._ended[index]:
            return INVALID_ACTION, None, None  # the core answers "the episode is over"
        names = self.core.action_names
        if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
            if not 0 <= action < len(names):
                raise InvalidOptionError(
                    f"A numeric action is an index into {list(names)}: 0 to {len(names) - 1}; got {action}."
                )
            return int(action), names[int(action)], None
        parsed = self._text_envs[index]._parse(action)
        if parsed is None:
            return INVALID_ACTION, None, None
        code = self.core.read_action(parsed)
        return (INVALID_ACTION, parsed, code) if isinstance(code, str) else (code, parsed, None)

    def _text(
        self, event: int, board: str, invalid_line: str | None, parsed: str | None, terminated: bool, invalid_count: int
    ) -> str:
        """The observation the text env gives after a step with ``event`` (see ``TextEnv.step``)."""
        if event == EVENT_OVER:
            return _OVER_TEXT
        if event != EVENT_INVALID:
            return f"{self.core.feedback[event]}\n{board}"
        if parsed is None:
            format_hint = type(self._text_envs[0]).format_hint
            text = f"Invalid action: {format_hint}\n\n{board}"
        else:
            text = f"{invalid_line}\n{board}"
        if terminated:
            text += f"\n\nToo many invalid actions ({invalid_count}); the episode is over."
        return to_charset(text)

    def _reset_finished(self, items: list[tuple[int, Op]], results: list[Any]) -> None:
        """``SAME_STEP`` autoreset: reset the ended sub-envs and nest their step in the reset info."""
        resets = [(slot, Op("reset", op.index, (None, None))) for slot, op in items]
        finals = {slot: results[slot] for slot, _ in items}
        self._run_resets(resets, results)
        for slot, _ in items:
            outcome = results[slot]
            if isinstance(outcome, Failure):
                continue
            observation, info = outcome
            final_observation, reward, terminated, truncated, final_info = finals[slot]
            merged = {"final_obs": final_observation, "final_info": final_info, **info}
            results[slot] = (observation, reward, terminated, truncated, merged)

    # ------------------------------------------------------------------ calls
    def _call(self, op: Op) -> Any:
        name = op.args[0]
        index = op.index
        if name == "render":
            if self._text_envs[index].render_mode != "ansi":
                return None
            if not self._started[index]:
                return ""
            grid = np.asarray(self._grids(self._state)[index])
            return render_boards(self.core, grid[None])[0]
        if name in _POSITION_READERS:
            error = InvalidOptionError(
                f"call({name!r}) reads the current position, which backend='jax' keeps in JAX arrays, not in "
                "the text envs. Use backend='inline' for solver or position queries."
            )
            return _failure(index, error)
        return self._sub_envs.run_one(op)


def _failure(index: int, error: Exception) -> Failure:
    return Failure(index, type(error).__name__, str(error), traceback.format_exc())
