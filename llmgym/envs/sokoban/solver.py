"""Exact Sokoban solver: the fewest player moves (steps) from a position to all boxes on targets.

The textbook exact method is breadth-first search over (player cell, box cells) with one player
move per edge. That spends most of its time walking the player around. Here the search nodes
are the positions right after a push (the player stands on the cell the box left), and an edge
is "walk to a push cell by a shortest path, then push once", costing ``walk + 1`` moves. Every
move sequence splits into such walk-then-push segments, and each walk is at least the shortest
path, so the cheapest path in this graph is the fewest moves: the search stays exact while
having far fewer nodes.

The search is A*. Its heuristic is the fewest pushes if every box went to its own target with
the other boxes out of the way: the minimum over assignments of boxes to distinct targets of
the summed lone-box push distances (up to 3 boxes; with more, each box's nearest target, a
weaker bound without the factorial). A push costs at least one move and moves one box one cell,
which changes every assignment's sum by at most one, so the heuristic is consistent and the
first solved position popped is optimal. Pruned as dead ends: a box on a square from which no
push sequence reaches a target (corners without a target, walls without a target, ...), boxes
that no assignment can bring home, and a box that closes a 2x2 block of walls and boxes with a
box off target (none of them can ever move).

The player's walks are breadth-first searches on bitboards (one Python int per layer), which
costs a few integer operations per layer instead of a loop over cells.

Cells are indices into a :class:`~llmgym.envs.sokoban.level.PaddedMaze`; :func:`solve` and
:func:`optimal_steps` take a plain :class:`~llmgym.envs.sokoban.level.Level`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import numpy as np

from llmgym.envs.sokoban.level import ACTIONS, Level, PaddedMaze, direction_offsets

#: Push distance of a square from which no box reaches a target.
UNREACHABLE = 1 << 30
#: Position key -> (parent key, parent's player, parent's box mask, pushed box, push step).
_Parents = dict[int, tuple[int, int, int, int, int]]


class Solver:
    """Solves positions of one maze; the per-maze tables are built once and reused.

    Args:
        maze: the fixed part of the level (walls and targets).
    """

    def __init__(self, maze: PaddedMaze) -> None:
        width = maze.padded_width
        walls = maze.walls
        self._size = size = len(walls)
        self._walls = walls
        self._width = width
        self._offsets = direction_offsets(width)
        self._goal_mask = sum(1 << cell for cell in maze.targets)
        wall_bits = np.packbits(np.frombuffer(walls, np.uint8), bitorder="little").tobytes()
        self._wall_mask = int.from_bytes(wall_bits, "little")
        self._floor_mask = ((1 << size) - 1) & ~self._wall_mask
        self._off_target_mask = self._floor_mask & ~self._goal_mask
        self._squares: dict[int, tuple[tuple[int, int], ...]] = {}
        self._push_table: dict[int, tuple[tuple[int, int, int, int, int, int], ...]] = {}
        #: Per target: fewest pushes from each cell to that target for a lone box.
        self._target_distance = [self._push_distances((target,)) for target in maze.targets]
        self.push_distance = (
            [min(column) for column in zip(*self._target_distance, strict=True)]
            if len(self._target_distance) > 1
            else self._target_distance[0]
        )

    def _push_distances(self, targets: Iterable[int]) -> list[int]:
        """Fewest pushes from each cell to one of ``targets`` for a lone box (:data:`UNREACHABLE` if none).

        Breadth-first from the targets backwards: a box reaches ``cell`` from ``cell - step`` when
        that square and the player's square behind it, ``cell - 2 * step``, are floor.
        """
        walls = self._walls
        distance = [UNREACHABLE] * self._size
        frontier = list(targets)
        for cell in frontier:
            distance[cell] = 0
        pushes = 0
        while frontier:
            pushes += 1
            reached = []
            for cell in frontier:
                for step in self._offsets:
                    before = cell - step
                    if distance[before] == UNREACHABLE and not walls[before] and not walls[before - step]:
                        distance[before] = pushes
                        reached.append(before)
            frontier = reached
        return distance

    # ------------------------------------------------------------------ public
    def optimal_steps(self, player: int, boxes: Iterable[int], budget: int | None = None) -> int | None:
        """The fewest moves that solve the position, or ``None`` (unsolvable, or ``budget`` ran out).

        ``budget`` caps the number of expanded positions; ``None`` searches to the end.
        """
        found = self._search(player, tuple(boxes), budget, None)
        return None if found is None else found[0]

    def plan(self, player: int, boxes: Iterable[int], budget: int | None = None) -> list[str] | None:
        """Action names of an optimal solution (``[]`` if already solved), or ``None`` as above."""
        parents: _Parents = {}
        found = self._search(player, tuple(boxes), budget, parents)
        if found is None:
            return None
        _, key = found
        pushes = []
        while key in parents:
            key, before_player, before_mask, box, step = parents[key]
            pushes.append((before_player, before_mask, box, step))
        names = dict(zip(self._offsets, ACTIONS, strict=True))
        actions: list[str] = []
        for before_player, before_mask, box, step in reversed(pushes):
            actions += self._walk(before_player, box - step, before_mask)
            actions.append(names[step])
        return actions

    # ------------------------------------------------------------------ search
    def _search(
        self, player: int, boxes: tuple[int, ...], budget: int | None, parents: _Parents | None
    ) -> tuple[int, int] | None:
        """A* over push positions; returns ``(moves, final key)`` or ``None``."""
        size, goal_mask, push_table = self._size, self._goal_mask, self._push_table
        frozen, estimate_of, walk_distances = self._frozen, self._estimate, self._walk_distances
        estimate = estimate_of(boxes)
        if estimate >= UNREACHABLE:
            return None
        mask = sum(1 << box for box in boxes)
        best = {mask * size + player: 0}
        heap = [(estimate, 0, player, mask, boxes)]
        expanded = 0
        while heap:
            _, negative_moves, player, mask, boxes = heapq.heappop(heap)
            moves = -negative_moves
            key = mask * size + player
            if best[key] < moves:
                continue  # a cheaper way here was found after this entry was queued
            if mask == goal_mask:
                return moves, key
            expanded += 1
            if budget is not None and expanded > budget:
                return None
            pushes = []
            wanted = 0
            for box in boxes:
                box_pushes = push_table.get(box)
                if box_pushes is None:
                    box_pushes = push_table[box] = self._pushes_of(box)
                for push in box_pushes:  # see _pushes_of for the tuple's layout
                    if not mask & push[4]:  # the target cell is free
                        pushes.append(push)
                        wanted |= push[3]  # not a sum: two pushes may start from one cell
            walk = walk_distances(player, mask, wanted)
            for before, step, target, _, _, change in pushes:
                distance = walk.get(before)
                if distance is None:
                    continue
                box = before + step
                next_mask = mask ^ change
                next_moves = moves + distance + 1
                next_key = next_mask * size + box
                if next_moves < best.get(next_key, UNREACHABLE) and not frozen(target, next_mask):
                    index = boxes.index(box)
                    next_boxes = (*boxes[:index], target, *boxes[index + 1 :])
                    next_estimate = estimate_of(next_boxes)
                    if next_estimate >= UNREACHABLE:
                        continue
                    best[next_key] = next_moves
                    entry = (next_moves + next_estimate, -next_moves, box, next_mask, next_boxes)
                    heapq.heappush(heap, entry)
                    if parents is not None:
                        parents[next_key] = (key, player, mask, box, step)
        return None

    def _pushes_of(self, box: int) -> tuple[tuple[int, int, int, int, int, int], ...]:
        """The pushes of a box on ``box`` that the walls allow and that do not end on a dead square.

        Each is ``(player cell, step, target cell, player bit, target bit, box bits to flip)``.
        """
        pushes = []
        for step in self._offsets:
            before, target = box - step, box + step
            if not self._walls[before] and self.push_distance[target] < UNREACHABLE:
                pushes.append((before, step, target, 1 << before, 1 << target, (1 << box) | (1 << target)))
        return tuple(pushes)

    def _estimate(self, boxes: tuple[int, ...]) -> int:
        """Fewest pushes if each box went to its own target ignoring the others (a lower bound on moves).

        Minimum over assignments of boxes to targets for up to 3 boxes; with more, the sum of each
        box's nearest target (a weaker bound that avoids the factorial).
        """
        if len(boxes) == 1:
            return self.push_distance[boxes[0]]
        if len(boxes) == 2:
            first, second = boxes
            to_first, to_second = self._target_distance
            return min(to_first[first] + to_second[second], to_second[first] + to_first[second])
        if len(boxes) == 3:
            a, b, c = boxes
            to_0, to_1, to_2 = self._target_distance
            a0, a1, a2 = to_0[a], to_1[a], to_2[a]
            b0, b1, b2 = to_0[b], to_1[b], to_2[b]
            c0, c1, c2 = to_0[c], to_1[c], to_2[c]
            return min(a0 + b1 + c2, a0 + b2 + c1, a1 + b0 + c2, a1 + b2 + c0, a2 + b0 + c1, a2 + b1 + c0)
        push_distance = self.push_distance
        return sum(push_distance[box] for box in boxes)

    def _walk_distances(self, start: int, mask: int, wanted: int) -> dict[int, int]:
        """Moves from ``start`` to each cell of the bitmask ``wanted`` the player reaches around the boxes.

        Breadth-first on bitboards: each layer is one integer, grown by shifting one row or
        column each way; the wall ring keeps shifts from wrapping across rows.
        """
        width = self._width
        unvisited = self._floor_mask & ~mask & ~(1 << start)
        layer = 1 << start
        found: dict[int, int] = {}
        moves = 0
        while True:
            hit = layer & wanted
            if hit:
                wanted ^= hit
                while hit:
                    lowest = hit & -hit
                    found[lowest.bit_length() - 1] = moves
                    hit ^= lowest
                if not wanted:
                    return found
            layer = ((layer << 1) | (layer >> 1) | (layer << width) | (layer >> width)) & unvisited
            if not layer:
                return found
            unvisited ^= layer
            moves += 1

    def _frozen(self, box: int, mask: int) -> bool:
        """Whether ``box`` closes a 2x2 block of walls and boxes holding a box off target.

        No box of such a block can ever move: pushing one needs a free cell on both of its sides
        along some axis, and the block fills one side of each.
        """
        squares = self._squares.get(box)
        if squares is None:
            squares = self._squares[box] = self._square_masks(box)
        blocked = self._wall_mask | mask
        for others, whole in squares:
            if blocked & others == others and mask & whole & self._off_target_mask:
                return True
        return False

    def _square_masks(self, cell: int) -> tuple[tuple[int, int], ...]:
        """For each 2x2 square holding ``cell``: the bitmask of its other three cells, and of all four."""
        masks = []
        for across in (-1, 1):
            for down in (-self._width, self._width):
                others = (1 << (cell + across)) | (1 << (cell + down)) | (1 << (cell + across + down))
                masks.append((others, others | (1 << cell)))
        return tuple(masks)

    def _walk(self, start: int, goal: int, mask: int) -> list[str]:
        """Action names of a shortest walk from ``start`` to ``goal`` around the boxes in ``mask``."""
        came_from = {start: (start, 0)}
        frontier = [start]
        while goal not in came_from:
            reached = []
            for cell in frontier:
                for step in self._offsets:
                    neighbour = cell + step
                    free = not self._walls[neighbour] and not (mask >> neighbour) & 1
                    if free and neighbour not in came_from:
                        came_from[neighbour] = (cell, step)
                        reached.append(neighbour)
            assert reached, "the search only walks to reachable cells"
            frontier = reached
        names = dict(zip(self._offsets, ACTIONS, strict=True))
        path = []
        cell = goal
        while cell != start:
            cell, step = came_from[cell]
            path.append(names[step])
        return path[::-1]


def solve(level: Level, budget: int | None = None) -> list[str] | None:
    """Action names of a fewest-moves solution of ``level`` (``None``: unsolvable or out of budget)."""
    maze = PaddedMaze.of(level)
    return Solver(maze).plan(maze.pad(level.player), [maze.pad(box) for box in level.boxes], budget)


def optimal_steps(level: Level, budget: int | None = None) -> int | None:
    """The fewest moves that solve ``level`` (``None``: unsolvable or out of budget)."""
    maze = PaddedMaze.of(level)
    return Solver(maze).optimal_steps(maze.pad(level.player), [maze.pad(box) for box in level.boxes], budget)
