"""Rules and game-tree search of the two-player board games, free of any env machinery.

A board is a ``(rows, cols)`` ``int8`` numpy array: ``0`` empty, ``1`` the first player's
piece, ``2`` the second player's. A move is an integer index (a cell for TicTacToe, a column
for ConnectFour); its text name is what an agent writes (``"5"``, 1-based).

Search:

* TicTacToe is solved exactly (memoised negamax over all 5,478 positions), so the minimax
  player is perfect.
* ConnectFour uses depth-limited negamax with alpha-beta pruning over bitboards and a
  window-counting evaluation at the horizon, so a strong agent can beat it.

Among equally good moves both return all of them; the caller breaks ties with its own RNG.
Scores prefer quicker wins and slower losses, so a winning player does not dawdle.
"""

from __future__ import annotations

import functools
from typing import ClassVar

import numpy as np

EMPTY, FIRST, SECOND = 0, 1, 2


class BoardRules:
    """The interface the board-game env needs from a game's rules."""

    name: ClassVar[str]
    rows: ClassVar[int]
    cols: ClassVar[int]
    num_moves: ClassVar[int]
    #: What an agent writes for each move index.
    move_names: ClassVar[tuple[str, ...]]
    #: Pieces in a row that win.
    line: ClassVar[int]
    #: The goal and the move format, for prompts.
    goal: ClassVar[str]
    move_hint: ClassVar[str]

    def new_board(self) -> np.ndarray:
        return np.zeros((self.rows, self.cols), dtype=np.int8)

    def legal_mask(self, board: np.ndarray) -> np.ndarray:
        """``int8`` array of length ``num_moves``: 1 where the move is legal."""
        raise NotImplementedError

    def play(self, board: np.ndarray, move: int, piece: int) -> tuple[int, int]:
        """Put ``piece`` on ``board`` in place for a legal ``move``; return the cell it landed on."""
        raise NotImplementedError

    def wins_at(self, board: np.ndarray, row: int, col: int) -> bool:
        """Whether the piece at ``(row, col)`` is part of a winning line."""
        raise NotImplementedError

    def best_moves(self, board: np.ndarray, piece: int, depth: int | None) -> list[int]:
        """Every move of ``piece`` the search scores best (``depth``: plies; ``None``: the game's default)."""
        raise NotImplementedError

    def describe_move(self, move: int) -> str:
        """How feedback names a move, e.g. ``"cell 5"``."""
        raise NotImplementedError

    def render(self, board: np.ndarray) -> str:
        """The board as text, with the move names an agent writes."""
        raise NotImplementedError


def _line_length(board: np.ndarray, row: int, col: int, d_row: int, d_col: int) -> int:
    """Length of the run of equal pieces through ``(row, col)`` along ``(d_row, d_col)``."""
    piece = board[row, col]
    rows, cols = board.shape
    length = 1
    for sign in (1, -1):
        r, c = row + sign * d_row, col + sign * d_col
        while 0 <= r < rows and 0 <= c < cols and board[r, c] == piece:
            length += 1
            r, c = r + sign * d_row, c + sign * d_col
    return length


_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))
_SYMBOLS = (".", "X", "O")


# ---------------------------------------------------------------------------------- TicTacToe
class TicTacToeRules(BoardRules):
    """Three in a row on a 3x3 board. Moves are cells ``1``-``9``, row by row from the top left."""

    name = "TicTacToe"
    rows = 3
    cols = 3
    num_moves = 9
    move_names = tuple(str(cell) for cell in range(1, 10))
    line = 3
    goal = "Get three of your marks in a row: across, down or diagonally."
    move_hint = "the number of an empty cell (1-9)"

    def legal_mask(self, board: np.ndarray) -> np.ndarray:
        return (board.reshape(-1) == EMPTY).astype(np.int8)

    def play(self, board: np.ndarray, move: int, piece: int) -> tuple[int, int]:
        row, col = divmod(move, 3)
        board[row, col] = piece
        return row, col

    def wins_at(self, board: np.ndarray, row: int, col: int) -> bool:
        return any(_line_length(board, row, col, dr, dc) >= 3 for dr, dc in _DIRECTIONS)

    def best_moves(self, board: np.ndarray, piece: int, depth: int | None) -> list[int]:
        cells = tuple(int(value) for value in board.reshape(-1))
        scores = {move: -_ttt_negamax(_ttt_after(cells, move, piece), 3 - piece)
                  for move in range(9) if cells[move] == EMPTY}
        best = max(scores.values())
        return [move for move, score in scores.items() if score == best]

    def describe_move(self, move: int) -> str:
        return f"cell {move + 1}"

    def render(self, board: np.ndarray) -> str:
        rows = []
        for row in range(3):
            marks = [_SYMBOLS[v] if v else str(3 * row + col + 1) for col, v in enumerate(board[row])]
            rows.append(" " + " | ".join(marks))
        return "\n---+---+---\n".join(rows)


_TTT_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def _ttt_after(cells: tuple[int, ...], move: int, piece: int) -> tuple[int, ...]:
    return cells[:move] + (piece,) + cells[move + 1 :]


@functools.lru_cache(maxsize=None)
def _ttt_negamax(cells: tuple[int, ...], to_move: int) -> int:
    """``to_move``'s score with perfect play: ``1 + empty cells`` at the end for a win, negated for a loss."""
    empties = cells.count(EMPTY)
    opponent = 3 - to_move
    if any(cells[a] == cells[b] == cells[c] == opponent for a, b, c in _TTT_LINES):
        return -(1 + empties)  # the previous move won
    if empties == 0:
        return 0
    children = (_ttt_after(cells, move, to_move) for move in range(9) if cells[move] == EMPTY)
    return max(-_ttt_negamax(child, opponent) for child in children)


# -------------------------------------------------------------------------------- ConnectFour
#: Bitboard layout: bit ``col * 7 + height`` (height 0 = bottom); bit 6 of each column is a sentinel.
_C4_ROWS, _C4_COLS, _C4_STRIDE = 6, 7, 7
_C4_ORDER = (3, 2, 4, 1, 5, 0, 6)  # centre first: better alpha-beta cut-offs
_C4_BOTTOM = [1 << (col * _C4_STRIDE) for col in range(_C4_COLS)]
_C4_TOP = [1 << (col * _C4_STRIDE + _C4_ROWS - 1) for col in range(_C4_COLS)]
_C4_FULL = sum(((1 << _C4_ROWS) - 1) << (col * _C4_STRIDE) for col in range(_C4_COLS))
_C4_WIN = 1_000_000
#: Horizon evaluation weight of a window holding 0..3 of one player's pieces and none of the other's.
_C4_WINDOW_WEIGHTS = (0, 1, 4, 16)


def _c4_windows() -> tuple[int, ...]:
    windows = []
    for col in range(_C4_COLS):
        for height in range(_C4_ROWS):
            for d_col, d_height in ((1, 0), (0, 1), (1, 1), (1, -1)):
                cells = [(col + i * d_col, height + i * d_height) for i in range(4)]
                if all(0 <= c < _C4_COLS and 0 <= h < _C4_ROWS for c, h in cells):
                    windows.append(sum(1 << (c * _C4_STRIDE + h) for c, h in cells))
    return tuple(windows)


_C4_WINDOWS = _c4_windows()  # the 69 lines of four


def _c4_aligned(position: int) -> bool:
    for shift in (1, _C4_STRIDE, _C4_STRIDE - 1, _C4_STRIDE + 1):
        pairs = position & (position >> shift)
        if pairs & (pairs >> (2 * shift)):
            return True
    return False


def _c4_evaluate(own: int, other: int) -> int:
    score = 0
    for window in _C4_WINDOWS:
        if not window & other:
            score += _C4_WINDOW_WEIGHTS[(window & own).bit_count()]
        elif not window & own:
            score -= _C4_WINDOW_WEIGHTS[(window & other).bit_count()]
    return score


def _c4_negamax(own: int, mask: int, depth: int, alpha: int, beta: int) -> int:
    """Score for the player to move, whose pieces are ``own``; ``mask`` holds every piece."""
    if mask == _C4_FULL:
        return 0
    if depth == 0:
        return _c4_evaluate(own, own ^ mask)
    for col in _C4_ORDER:
        if mask & _C4_TOP[col]:
            continue
        new_mask = mask | (mask + _C4_BOTTOM[col])
        if _c4_aligned(own | (new_mask ^ mask)):
            score = _C4_WIN + depth
        else:
            score = -_c4_negamax(own ^ mask, new_mask, depth - 1, -beta, -alpha)
        if score > alpha:
            alpha = score
            if alpha >= beta:
                break
    return alpha


class ConnectFourRules(BoardRules):
    """Four in a row on a 6x7 board with gravity. Moves are columns ``1``-``7``."""

    name = "ConnectFour"
    rows = _C4_ROWS
    cols = _C4_COLS
    num_moves = _C4_COLS
    move_names = tuple(str(col) for col in range(1, _C4_COLS + 1))
    line = 4
    goal = (
        "Drop discs into the columns of a 6x7 grid; a disc falls to the lowest empty row. "
        "Get four of your discs in a row: across, down or diagonally."
    )
    move_hint = "the number of a column that is not full (1-7)"
    #: Plies searched by ``best_moves`` when no depth is given.
    default_depth: ClassVar[int] = 4

    def legal_mask(self, board: np.ndarray) -> np.ndarray:
        return (board[0] == EMPTY).astype(np.int8)

    def play(self, board: np.ndarray, move: int, piece: int) -> tuple[int, int]:
        row = int(np.flatnonzero(board[:, move] == EMPTY)[-1])
        board[row, move] = piece
        return row, move

    def wins_at(self, board: np.ndarray, row: int, col: int) -> bool:
        return any(_line_length(board, row, col, dr, dc) >= 4 for dr, dc in _DIRECTIONS)

    def best_moves(self, board: np.ndarray, piece: int, depth: int | None) -> list[int]:
        depth = self.default_depth if depth is None else depth
        own, mask = _c4_bitboards(board, piece)
        scores = {}
        for col in _C4_ORDER:
            if mask & _C4_TOP[col]:
                continue
            new_mask = mask | (mask + _C4_BOTTOM[col])
            if _c4_aligned(own | (new_mask ^ mask)):
                scores[col] = _C4_WIN + depth
            else:
                scores[col] = -_c4_negamax(own ^ mask, new_mask, depth - 1, -_C4_WIN * 2, _C4_WIN * 2)
        best = max(scores.values())
        return sorted(col for col, score in scores.items() if score == best)

    def describe_move(self, move: int) -> str:
        return f"column {move + 1}"

    def render(self, board: np.ndarray) -> str:
        header = " ".join(self.move_names)
        rows = [" ".join(_SYMBOLS[value] for value in row) for row in board]
        return "\n".join([header, *rows])


def _c4_bitboards(board: np.ndarray, piece: int) -> tuple[int, int]:
    """``(own, mask)`` bitboards of ``board`` for the player with ``piece``."""
    own = mask = 0
    for col in range(_C4_COLS):
        for height in range(_C4_ROWS):
            value = board[_C4_ROWS - 1 - height, col]
            if value == EMPTY:
                break
            bit = 1 << (col * _C4_STRIDE + height)
            mask |= bit
            if value == piece:
                own |= bit
    return own, mask
