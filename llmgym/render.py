"""Tile pictures of the grid games, drawn with numpy alone (``render_mode="rgb_array"``).

Every picture is a ``uint8`` array of shape ``(H, W, 3)``: one square tile per cell, so
:class:`gymnasium.wrappers.RecordVideo` and image writers take it as it is. The tiles are
simple shapes (squares, discs, rings, strokes) built once per tile size and cached; a frame
is an index into the stacked tiles, so drawing costs one array gather per step.

:func:`png_bytes` encodes a picture as PNG with ``zlib`` (no imaging library), for reports.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Sequence

import numpy as np

#: Pixels per cell side.
TILE = 32

Color = tuple[int, int, int]

_ICE: Color = (214, 236, 250)
_ICE_EDGE: Color = (176, 210, 235)
_HOLE: Color = (28, 58, 112)
_GOAL: Color = (72, 170, 92)
_PLAYER: Color = (226, 88, 34)
_FLOOR: Color = (226, 221, 208)
_WALL: Color = (128, 74, 52)
_MORTAR: Color = (92, 52, 36)
_TARGET: Color = (208, 52, 52)
_BOX: Color = (196, 140, 62)
_BOX_EDGE: Color = (120, 80, 30)
_BOX_DONE: Color = (92, 168, 82)
_SOKOBAN_PLAYER: Color = (40, 92, 200)
_BOARD_CELL: Color = (246, 246, 240)
_BOARD_LINE: Color = (70, 70, 70)
_CROSS: Color = (200, 50, 50)
_NOUGHT: Color = (40, 90, 200)
_C4_FRAME: Color = (40, 84, 180)
_C4_EMPTY: Color = (238, 238, 238)
_C4_FIRST: Color = (214, 44, 44)
_C4_SECOND: Color = (240, 200, 40)


# ---------------------------------------------------------------------- shapes
def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates of a tile, in tile units (0 to 1)."""
    centres = (np.arange(size) + 0.5) / size
    return np.meshgrid(centres, centres, indexing="ij")  # (size, size) each: rows, columns


def _filled(size: int, color: Color) -> np.ndarray:
    return np.broadcast_to(np.array(color, np.uint8), (size, size, 3)).copy()


def _paint(tile: np.ndarray, mask: np.ndarray, color: Color) -> np.ndarray:
    tile[mask] = color
    return tile


def _disc(size: int, radius: float) -> np.ndarray:
    rows, cols = _grid(size)
    return (rows - 0.5) ** 2 + (cols - 0.5) ** 2 <= radius**2


def _ring(size: int, radius: float, width: float) -> np.ndarray:
    rows, cols = _grid(size)
    distance = np.sqrt((rows - 0.5) ** 2 + (cols - 0.5) ** 2)
    return np.abs(distance - radius) <= width / 2


def _square(size: int, margin: float) -> np.ndarray:
    rows, cols = _grid(size)
    return (rows >= margin) & (rows <= 1 - margin) & (cols >= margin) & (cols <= 1 - margin)


def _border(size: int, width: float) -> np.ndarray:
    return ~_square(size, width)


def _stroke(size: int, start: tuple[float, float], end: tuple[float, float], width: float) -> np.ndarray:
    """Pixels within ``width / 2`` of the segment ``start``-``end`` (points as (row, col))."""
    rows, cols = _grid(size)
    (r0, c0), (r1, c1) = start, end
    dr, dc = r1 - r0, c1 - c0
    along = np.clip(((rows - r0) * dr + (cols - c0) * dc) / (dr * dr + dc * dc), 0.0, 1.0)
    return (rows - r0 - along * dr) ** 2 + (cols - c0 - along * dc) ** 2 <= (width / 2) ** 2


def _person(size: int, tile: np.ndarray, color: Color) -> np.ndarray:
    """A round head over a rounded body."""
    rows, cols = _grid(size)
    head = (rows - 0.3) ** 2 + (cols - 0.5) ** 2 <= 0.15**2
    body = ((rows - 0.78) / 0.3) ** 2 + ((cols - 0.5) / 0.28) ** 2 <= 1.0
    return _paint(tile, head | (body & (rows <= 0.9)), color)


# ---------------------------------------------------------------------- tile sets
#: FrozenLake tile order: ice, hole, goal, start (ice with a mark), then the same with the player.
_LAKE_LETTERS = "FHGS"


@functools.lru_cache(maxsize=8)
def _lake_tiles(size: int) -> np.ndarray:
    ice = _paint(_filled(size, _ICE), _border(size, 0.04), _ICE_EDGE)
    hole = _paint(ice.copy(), _disc(size, 0.4), _HOLE)
    goal = _paint(ice.copy(), _square(size, 0.12), _GOAL)
    goal = _paint(goal, _stroke(size, (0.25, 0.35), (0.75, 0.35), 0.08), (250, 250, 250))
    goal = _paint(
        goal,
        _stroke(size, (0.25, 0.35), (0.42, 0.68), 0.08) | _stroke(size, (0.42, 0.68), (0.5, 0.35), 0.08),
        (250, 250, 250),
    )
    start = _paint(ice.copy(), _ring(size, 0.3, 0.06), _ICE_EDGE)
    plain = [ice, hole, goal, start]
    with_player = [_person(size, tile.copy(), _PLAYER) for tile in plain]
    return np.stack(plain + with_player)  # (8, size, size, 3)


#: Sokoban tile order: floor, wall, target, box, box on target, player, player on target, outside.
_SOKOBAN_SYMBOLS = " #.$*@+"


@functools.lru_cache(maxsize=8)
def _sokoban_tiles(size: int) -> np.ndarray:
    floor = _filled(size, _FLOOR)
    wall = _filled(size, _WALL)
    rows, cols = _grid(size)
    mortar = (np.abs(rows - 0.5) < 0.04) | (rows < 0.04) | ((np.abs(cols - 0.5) < 0.04) & (rows < 0.5))
    mortar |= (cols < 0.04) & (rows > 0.5)
    wall = _paint(wall, mortar, _MORTAR)
    target = _paint(floor.copy(), _ring(size, 0.18, 0.08), _TARGET)
    box = _paint(_paint(floor.copy(), _square(size, 0.1), _BOX_EDGE), _square(size, 0.18), _BOX)
    box = _paint(
        box,
        _stroke(size, (0.22, 0.22), (0.78, 0.78), 0.06) | _stroke(size, (0.22, 0.78), (0.78, 0.22), 0.06),
        _BOX_EDGE,
    )
    done = _paint(_paint(floor.copy(), _square(size, 0.1), _BOX_EDGE), _square(size, 0.18), _BOX_DONE)
    player = _person(size, floor.copy(), _SOKOBAN_PLAYER)
    player_on_target = _person(size, target.copy(), _SOKOBAN_PLAYER)
    outside = _filled(size, (255, 255, 255))
    return np.stack([floor, wall, target, box, done, player, player_on_target, outside])


@functools.lru_cache(maxsize=8)
def _board_tiles(size: int, game: str) -> np.ndarray:
    """Empty, first player's, second player's piece, for ``game`` "TicTacToe" or "ConnectFour"."""
    if game == "ConnectFour":
        frame = _filled(size, _C4_FRAME)
        return np.stack(
            [_paint(frame.copy(), _disc(size, 0.4), color) for color in (_C4_EMPTY, _C4_FIRST, _C4_SECOND)]
        )
    cell = _paint(_filled(size, _BOARD_CELL), _border(size, 0.03), _BOARD_LINE)
    cross = _stroke(size, (0.22, 0.22), (0.78, 0.78), 0.1) | _stroke(size, (0.22, 0.78), (0.78, 0.22), 0.1)
    return np.stack(
        [cell, _paint(cell.copy(), cross, _CROSS), _paint(cell.copy(), _ring(size, 0.28, 0.09), _NOUGHT)]
    )


def _compose(tiles: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Lay ``tiles[indices[r, c]]`` out on a grid: ``(rows * size, cols * size, 3)`` uint8."""
    size = tiles.shape[1]
    rows, cols = indices.shape
    picture = tiles[indices]  # (rows, cols, size, size, 3)
    return np.ascontiguousarray(picture.transpose(0, 2, 1, 3, 4).reshape(rows * size, cols * size, 3))


# ---------------------------------------------------------------------- pictures
def frozen_lake(rows: Sequence[str], position: tuple[int, int], tile: int = TILE) -> np.ndarray:
    """A FrozenLake map (rows of ``S F H G``) with the player at ``position`` (row, column)."""
    indices = np.array([[_LAKE_LETTERS.index(letter) for letter in row] for row in rows], np.intp)
    indices[position] += len(_LAKE_LETTERS)
    return _compose(_lake_tiles(tile), indices)


def sokoban(xsb: str, tile: int = TILE) -> np.ndarray:
    """A Sokoban position in XSB text (``#`` wall, ``.`` target, ``$`` box, ``*`` box on target,
    ``@`` player, ``+`` player on target); short rows are padded with blank cells."""
    lines = xsb.split("\n")
    width = max(len(line) for line in lines)
    outside = len(_SOKOBAN_SYMBOLS)
    indices = np.full((len(lines), width), outside, np.intp)
    for row, line in enumerate(lines):
        inside = False
        for col, symbol in enumerate(line):
            inside = inside or symbol != " "
            indices[row, col] = _SOKOBAN_SYMBOLS.index(symbol) if inside else outside
    return _compose(_sokoban_tiles(tile), indices)


def board(cells: np.ndarray, game: str, tile: int = TILE) -> np.ndarray:
    """A TicTacToe or ConnectFour board (``0`` empty, ``1`` first player, ``2`` second)."""
    return _compose(_board_tiles(tile, game), np.asarray(cells, np.intp))


# ---------------------------------------------------------------------- encoding
def png_bytes(picture: np.ndarray) -> bytes:
    """``picture`` (``(H, W, 3)`` uint8) as a PNG file's bytes."""
    if picture.dtype != np.uint8 or picture.ndim != 3 or picture.shape[2] != 3:
        raise ValueError(f"png_bytes expects a (H, W, 3) uint8 array, got {picture.dtype} {picture.shape}.")
    height, width, _ = picture.shape
    raw = np.concatenate([np.zeros((height, 1), np.uint8), picture.reshape(height, width * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
        + chunk(b"IEND", b"")
    )
