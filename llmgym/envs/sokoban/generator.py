"""Random Sokoban levels by reverse play: a pure function of a ``numpy.random.Generator``.

The method is the classic one of gym-sokoban: carve a room with a random walk, put the boxes
on targets (the solved position), then let the player walk backwards, pulling boxes. Every
reverse move undoes a legal forward move, so the position reached is solvable by playing the
walk forwards. gym-sokoban searches the reverse moves depth-first and exhaustively for the best
position, which is exponential in the depth. Here:

* one box in a small room (at most :data:`EXHAUSTIVE_FLOOR_CELLS` floor cells): reverse play is
  a breadth-first search backwards from every solved position over (box, player) states, which
  has at most ``floor_cells ** 2`` states. Its last layer holds the positions that need the most
  moves; one of them, drawn from the generator, is the level. This is exact and polynomial.
* otherwise: one random reverse walk of ``walk_steps`` moves, keeping the position on the way
  where the boxes are furthest (Manhattan distance summed over boxes) from where they started
  with no box on any target. That is one linear pass, a few hundred microseconds.

Degenerate draws (no position with every box off its targets) are thrown away and the room is
drawn again from the same generator, so the result still depends only on the generator's state.
"""

from __future__ import annotations

import math

import numpy as np

from llmgym.envs.sokoban.level import Level, direction_offsets
from llmgym.error import InvalidOptionError

#: Smallest and largest room side, walls included: a 3x3 floor area up to a 30x30 one.
MIN_SIDE, MAX_SIDE = 5, 32
#: Share of the room's inner area carved to floor, drawn uniformly from this range.
FLOOR_SHARE = (0.55, 0.75)
#: Extra floor share for the most crowded rooms, scaled down linearly to none for one box.
CROWDED_EXTRA_FLOOR = 0.2
#: Chance that the carving walk turns at a step.
TURN_PROBABILITY = 0.35
#: Chance that a reverse move pulls the box behind the player (when there is one).
PULL_PROBABILITY = 0.8
#: Reverse-walk length per floor cell.
WALK_STEPS_PER_FLOOR_CELL = 12
#: An accepted level's boxes are at least ``num_boxes + EXTRA_DISPLACEMENT`` cells (Manhattan,
#: summed) from where they started: one push from the goal is no puzzle.
EXTRA_DISPLACEMENT = 2
#: Reverse walks tried in one carved room before a new room is drawn.
WALKS_PER_ROOM = 4
#: One-box rooms with at most this many floor cells get the exhaustive reverse search.
EXHAUSTIVE_FLOOR_CELLS = 30
#: Fewest moves an exhaustively searched one-box level needs.
MIN_SINGLE_BOX_MOVES = 4
#: Draws before :func:`generate_level` gives up (never reached within the limits above).
MAX_ATTEMPTS = 1000
# Carving brushes: (row, column) offsets cleared around the walk's position.
_BRUSHES = (
    ((0, 0),),
    ((0, 0), (0, 1)),
    ((0, 0), (1, 0)),
    ((0, 0), (0, -1)),
    ((0, 0), (-1, 0)),
    ((0, 0), (0, 1), (1, 0)),
)
_ROW_STEP = (-1, 1, 0, 0)
_COLUMN_STEP = (0, 0, -1, 1)


def check_settings(dim_room: tuple[int, int], num_boxes: int) -> tuple[int, int]:
    """Validate a room size and box count; return ``dim_room`` as a pair of ints.

    Raises:
        InvalidOptionError: the room is outside ``MIN_SIDE..MAX_SIDE`` per side, or holds too
            many boxes (more than :func:`max_boxes`), or fewer than one.
    """
    try:
        height, width = (int(side) for side in dim_room)
    except (TypeError, ValueError):
        message = f"dim_room must be a pair of ints (rows, columns), got {dim_room!r}."
        raise InvalidOptionError(message) from None
    if not (MIN_SIDE <= height <= MAX_SIDE and MIN_SIDE <= width <= MAX_SIDE):
        raise InvalidOptionError(
            f"dim_room must be between {MIN_SIDE}x{MIN_SIDE} and {MAX_SIDE}x{MAX_SIDE} "
            f"(walls included, so at least a 3x3 floor area), got {height}x{width}."
        )
    most = max_boxes((height, width))
    if not 1 <= num_boxes <= most:
        raise InvalidOptionError(
            f"num_boxes must be between 1 and {most} for a {height}x{width} room (more crowded rooms "
            f"rarely leave every box room to start off its target), got {num_boxes}. "
            "Use fewer boxes or a bigger room."
        )
    return height, width


def check_max_level_moves(max_level_moves: int | None, dim_room: tuple[int, int], num_boxes: int) -> None:
    """Validate a cap on generated levels' fewest moves (``None``: no cap).

    Raises:
        InvalidOptionError: ``max_level_moves`` is below 1, or set for more than one box or for a
            room whose inner area exceeds :data:`EXHAUSTIVE_FLOOR_CELLS` cells (there levels
            come from one random reverse walk, whose depth is not known exactly).
    """
    if max_level_moves is None:
        return
    if isinstance(max_level_moves, bool) or not isinstance(max_level_moves, int) or max_level_moves < 1:
        raise InvalidOptionError(f"max_level_moves must be None or an int >= 1, got {max_level_moves!r}.")
    height, width = dim_room
    inner_cells = (height - 2) * (width - 2)
    if num_boxes != 1 or inner_cells > EXHAUSTIVE_FLOOR_CELLS:
        raise InvalidOptionError(
            f"max_level_moves needs one box in a room of at most {EXHAUSTIVE_FLOOR_CELLS} inner cells "
            f"(up to 7x7 walls included), got {num_boxes} box(es) in {height}x{width}. "
            "Drop max_level_moves, or use num_boxes=1 and a smaller dim_room."
        )


def max_boxes(dim_room: tuple[int, int]) -> int:
    """The most boxes :func:`generate_level` places in a room of ``dim_room`` (walls included).

    One below the square root of the inner area (one box below 4x4): 3 in a 6x6 room, 5 in 8x8,
    7 in 10x10. Denser settings make a position with every box off target so rare that
    generation slows by orders of magnitude.
    """
    height, width = dim_room
    inner_cells = (height - 2) * (width - 2)
    return 1 if inner_cells < 16 else math.isqrt(inner_cells) - 1


def generate_level(
    rng: np.random.Generator,
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    max_level_moves: int | None = None,
) -> Level:
    """A random solvable level of ``dim_room`` (walls included) with ``num_boxes`` boxes, none on a target.

    ``max_level_moves`` (one box in a room of at most :data:`EXHAUSTIVE_FLOOR_CELLS` inner cells
    only, see :func:`check_max_level_moves`) caps the fewest moves the level needs: it is drawn
    among the positions that need exactly ``max_level_moves`` moves, or the room's deepest when the
    room has none that far. ``None`` draws the deepest. The level depends only on ``rng``'s
    state (and the settings): the same seed gives the same level anywhere.
    """
    height, width = check_settings(dim_room, num_boxes)
    check_max_level_moves(max_level_moves, (height, width), num_boxes)
    inner_cells = (height - 2) * (width - 2)
    # Crowded rooms get more floor, so that the boxes have room to leave their targets.
    crowding = (num_boxes - 1) / max(1, max_boxes((height, width)) - 1)
    for _ in range(MAX_ATTEMPTS):
        share = rng.uniform(*FLOOR_SHARE) + CROWDED_EXTRA_FLOOR * crowding
        floor_cells = min(inner_cells, max(num_boxes + 2, round(share * inner_cells)))
        walls = carve_room(rng, height, width, floor_cells)
        if num_boxes == 1 and floor_cells <= EXHAUSTIVE_FLOOR_CELLS:
            level = deepest_single_box(rng, walls, height, width, max_level_moves)
            if level is not None:
                return level
            continue
        for _ in range(WALKS_PER_ROOM):
            walk_steps = WALK_STEPS_PER_FLOOR_CELL * floor_cells
            level = reverse_play(rng, walls, height, width, num_boxes, walk_steps)
            if level is not None:
                return level
    raise InvalidOptionError(
        f"Could not generate a {height}x{width} level with {num_boxes} boxes in {MAX_ATTEMPTS} draws; "
        "use fewer boxes."
    )


def carve_room(rng: np.random.Generator, height: int, width: int, floor_cells: int) -> bytearray:
    """Walls of a ``height`` x ``width`` room after a random walk clears ``floor_cells`` inner cells.

    The walk keeps its direction and turns with :data:`TURN_PROBABILITY`, clearing a small
    random brush at each position, so rooms have corridors and pockets rather than noise.
    """
    walls = bytearray(b"\x01" * (height * width))
    row, column = int(rng.integers(1, height - 1)), int(rng.integers(1, width - 1))
    direction = int(rng.integers(4))
    carved = 0
    while carved < floor_cells:
        batch = 4 * floor_cells
        turns = (rng.random(batch) < TURN_PROBABILITY).tolist()
        directions = rng.integers(0, 4, batch).tolist()
        brushes = rng.integers(0, len(_BRUSHES), batch).tolist()
        for turn, new_direction, brush in zip(turns, directions, brushes, strict=True):
            if turn:
                direction = new_direction
            for row_offset, column_offset in _BRUSHES[brush]:
                brush_row, brush_column = row + row_offset, column + column_offset
                if 0 < brush_row < height - 1 and 0 < brush_column < width - 1:
                    cell = brush_row * width + brush_column
                    if walls[cell]:
                        walls[cell] = 0
                        carved += 1
            if carved >= floor_cells:
                break
            next_row, next_column = row + _ROW_STEP[direction], column + _COLUMN_STEP[direction]
            if 0 < next_row < height - 1 and 0 < next_column < width - 1:
                row, column = next_row, next_column
    return walls


def deepest_single_box(
    rng: np.random.Generator, walls: bytearray, height: int, width: int, max_level_moves: int | None = None
) -> Level | None:
    """A one-box level on a random target that needs the most moves this room allows, or ``None``.

    Breadth-first backwards from every solved position (box on the target, player anywhere).
    A state (box, player) is reached backwards from (box, player + step) by the player stepping
    back (a forward walk), and, when the box sits at ``player + 2 * step``, also by pulling it to
    ``player + step`` (a forward push). The search's distance is the exact fewest moves forwards.
    ``None`` when even the furthest position needs fewer than :data:`MIN_SINGLE_BOX_MOVES` moves
    (or than ``max_level_moves``, when that is smaller). With ``max_level_moves`` the search
    stops at that depth, so the level needs at most that many moves.
    """
    floor = [cell for cell, wall in enumerate(walls) if not wall]
    size = len(walls)
    target = floor[int(rng.integers(len(floor)))]
    offsets = direction_offsets(width)
    seen = bytearray(size * size)  # state = box * size + player
    layer = [target * size + player for player in floor if player != target]
    for state in layer:
        seen[state] = 1
    moves = 0
    while max_level_moves is None or moves < max_level_moves:
        reached = []
        for state in layer:
            box, player = divmod(state, size)
            for step in offsets:
                before = player - step
                if walls[before] or before == box:
                    continue
                walked = box * size + before
                if not seen[walked]:
                    seen[walked] = 1
                    reached.append(walked)
                if box == player + step:
                    pushed = player * size + before
                    if not seen[pushed]:
                        seen[pushed] = 1
                        reached.append(pushed)
        if not reached:
            break
        layer = reached
        moves += 1
    if moves < min(MIN_SINGLE_BOX_MOVES, max_level_moves or MIN_SINGLE_BOX_MOVES):
        return None
    box, player = divmod(layer[int(rng.integers(len(layer)))], size)
    return Level(height, width, bytes(walls), (target,), (box,), player)


def reverse_play(
    rng: np.random.Generator, walls: bytearray, height: int, width: int, num_boxes: int, walk_steps: int
) -> Level | None:
    """Place boxes on targets and walk the player backwards; ``None`` if no good position came up.

    The room must be closed by walls (``carve_room`` leaves its outer ring), so a neighbour
    index never leaves the grid.
    """
    floor = [cell for cell, wall in enumerate(walls) if not wall]
    if len(floor) < num_boxes + 2:
        return None
    picks = rng.permutation(len(floor))[: num_boxes + 1].tolist()
    targets = sorted(floor[pick] for pick in picks[:-1])
    player = floor[picks[-1]]
    offsets = direction_offsets(width)
    is_target = bytearray(len(walls))
    box_at = [-1] * len(walls)  # box number on each cell, -1 for none
    for number, cell in enumerate(targets):
        is_target[cell] = 1
        box_at[cell] = number
    boxes = list(targets)
    boxes_on_targets, displacement = num_boxes, 0
    best_score, best_boxes, best_player, tracking = 0, (), player, False
    # One draw per move: the low two bits pick the direction, the rest decide the pull.
    draws = rng.integers(0, 4 << 16, walk_steps).tolist()
    pull_below = int(PULL_PROBABILITY * (1 << 16))
    for draw in draws:
        step = offsets[draw & 3]
        pull = draw >> 2 < pull_below
        ahead = player + step
        if walls[ahead] or box_at[ahead] >= 0:
            continue
        behind = player - step
        number = box_at[behind] if pull else -1
        if number >= 0:
            box_at[behind], box_at[player], boxes[number] = -1, number, player
            boxes_on_targets += is_target[player] - is_target[behind]
            origin = targets[number]
            displacement += _manhattan(player, origin, width) - _manhattan(behind, origin, width)
            tracking = boxes_on_targets == 0 and displacement > best_score
            if tracking:
                best_score, best_boxes = displacement, tuple(sorted(boxes))
        player = ahead
        if tracking:
            best_player = player
    if best_score < num_boxes + EXTRA_DISPLACEMENT:
        return None
    return Level(height, width, bytes(walls), tuple(targets), best_boxes, best_player)


def _manhattan(cell: int, other: int, width: int) -> int:
    row, column = divmod(cell, width)
    other_row, other_column = divmod(other, width)
    return abs(row - other_row) + abs(column - other_column)
