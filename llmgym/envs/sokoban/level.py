"""Sokoban levels: an immutable :class:`Level` and its XSB text form.

XSB symbols: ``#`` wall, `` `` floor (``-`` and ``_`` are read as floor too), ``.`` target,
``$`` box, ``*`` box on target, ``@`` player, ``+`` player on target. Lines starting with
``;`` are comments (Boxoban files put the level number there). Rows may be ragged: short
rows are padded with floor, which is how XSB writes the space outside a level's walls.

Cells are numbered row-major, ``row * width + column``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgym.error import LevelFormatError

#: The largest level accepted, in cells (keeps observations inside the Text space).
MAX_LEVEL_CELLS = 64 * 64
_FLOOR_SYMBOLS = frozenset(" -_")
_SYMBOLS = frozenset("#.$*@+") | _FLOOR_SYMBOLS
_RUN_LENGTH_HINT = " (run-length encoded XSB is not supported: write the rows out)"
_WALL_SYMBOLS = bytes.maketrans(b"\x00\x01", b" #")


@dataclass(frozen=True, slots=True)
class Level:
    """A Sokoban position: the fixed maze (``walls``, ``targets``) plus ``boxes`` and ``player``.

    Attributes:
        height: rows.
        width: columns.
        walls: ``height * width`` bytes, 1 where a wall is.
        targets: target cells, sorted.
        boxes: box cells, sorted.
        player: the player's cell.
    """

    height: int
    width: int
    walls: bytes
    targets: tuple[int, ...]
    boxes: tuple[int, ...]
    player: int

    def xsb(self) -> str:
        """The level as XSB text, rows joined by newlines, trailing floor removed from each row."""
        symbols = bytearray(self.walls.translate(_WALL_SYMBOLS))
        for cell in self.targets:
            symbols[cell] = ord(".")
        for cell in self.boxes:
            symbols[cell] = ord("*") if symbols[cell] == ord(".") else ord("$")
        symbols[self.player] = ord("+") if symbols[self.player] == ord(".") else ord("@")
        text = symbols.decode("ascii")
        return "\n".join(text[row : row + self.width].rstrip(" ") for row in range(0, len(text), self.width))

    @property
    def is_solved(self) -> bool:
        return self.boxes == self.targets


def parse_xsb(text: str) -> Level:
    """Read an XSB level (see the module docstring); raise :class:`LevelFormatError` on bad input.

    The error names the line and column (both from 1) of the first offending character.
    """
    if not isinstance(text, str):
        raise LevelFormatError(
            f"A Sokoban level is XSB text (a str such as '#####\\n#@$.#\\n#####'); got {type(text).__name__}."
        )
    numbered = [
        (number, line.rstrip("\r"))
        for number, line in enumerate(text.split("\n"), start=1)
        if line.strip() and not line.lstrip().startswith(";")
    ]
    if not numbered:
        raise LevelFormatError(
            "The Sokoban level is empty: expected XSB rows such as '#####\\n#@$.#\\n#####'."
        )
    height, width = len(numbered), max(len(line) for _, line in numbered)
    if height * width > MAX_LEVEL_CELLS:
        raise LevelFormatError(
            f"The Sokoban level is {height}x{width}; at most {MAX_LEVEL_CELLS} cells are accepted. "
            "Use a smaller level."
        )
    walls = bytearray(height * width)
    targets, boxes, players = [], [], []
    for row, (number, line) in enumerate(numbered):
        for column, symbol in enumerate(line):
            if symbol not in _SYMBOLS:
                hint = _RUN_LENGTH_HINT if symbol.isdigit() else ""
                raise LevelFormatError(
                    f"Line {number}, column {column + 1}: unexpected symbol {symbol!r}{hint}. "
                    "Use # wall, space floor, . target, $ box, * box on target, @ player, + player on target."
                )
            cell = row * width + column
            if symbol == "#":
                walls[cell] = 1
            if symbol in ".*+":
                targets.append(cell)
            if symbol in "$*":
                boxes.append(cell)
            if symbol in "@+":
                players.append((number, column + 1, cell))
    if len(players) != 1:
        where = ", ".join(f"line {number} column {column}" for number, column, _ in players)
        raise LevelFormatError(
            f"A Sokoban level needs exactly one player (@ or +); got {len(players)}"
            f"{f' at {where}' if where else ''}."
        )
    if not boxes or len(boxes) != len(targets):
        raise LevelFormatError(
            f"A Sokoban level needs as many boxes ($ or *) as targets (., * or +), and at least one; "
            f"got {len(boxes)} boxes and {len(targets)} targets."
        )
    return Level(height, width, bytes(walls), tuple(targets), tuple(boxes), players[0][2])


#: Action names, in the order of :func:`direction_offsets`.
ACTIONS = ("Up", "Down", "Left", "Right")


def direction_offsets(width: int) -> tuple[int, int, int, int]:
    """Cell-index steps of Up, Down, Left, Right on a grid ``width`` cells wide."""
    return (-width, width, -1, 1)


@dataclass(frozen=True, slots=True)
class PaddedMaze:
    """A level's fixed part on a grid with one extra ring of wall around it.

    The ring means a neighbour index never leaves the grid, so the engine and the solver step
    with ``cell + offset`` and no bounds checks. Cells here are padded indices; convert with
    :meth:`pad` and :meth:`unpad`.
    """

    height: int  # of the level, without the ring
    width: int
    walls: bytes  # (height + 2) * (width + 2) bytes, 1 = wall
    targets: tuple[int, ...]  # padded cells, sorted

    @classmethod
    def of(cls, level: Level) -> PaddedMaze:
        padded_width = level.width + 2
        walls = bytearray(b"\x01" * ((level.height + 2) * padded_width))
        for row in range(level.height):
            start = (row + 1) * padded_width + 1
            walls[start : start + level.width] = level.walls[row * level.width : (row + 1) * level.width]
        targets = tuple(_pad(cell, level.width) for cell in level.targets)
        return cls(level.height, level.width, bytes(walls), targets)

    @property
    def padded_width(self) -> int:
        return self.width + 2

    def pad(self, cell: int) -> int:
        return _pad(cell, self.width)

    def unpad(self, cell: int) -> int:
        row, column = divmod(cell, self.width + 2)
        return (row - 1) * self.width + column - 1


def _pad(cell: int, width: int) -> int:
    """``cell`` of a grid ``width`` wide, as an index into the same grid with a one-cell ring."""
    return cell + width + 3 + 2 * (cell // width)
