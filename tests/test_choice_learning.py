"""benchmarks/choice_learning.py builds the samples the trainer would, from rewards the env really gives."""

from __future__ import annotations

from typing import Any

from benchmarks.choice_learning import board_xsb, play, rooms, step_samples
from benchmarks.readability import MOVES
from llmgym_train.chat import ChatTokens


def test_each_room_credits_exactly_its_optimal_first_moves(smollm2_tokenizer: Any) -> None:
    chat = ChatTokens(smollm2_tokenizer, response_prefix="<answer>")
    choice_ids = chat.choice_token_ids(MOVES)
    found = rooms(chat, "any", range(6), test=False)
    for prompt, rewards, best in found:
        # An optimal first move saves one move by the exact solver's count (progress_reward=1); a
        # worse one saves none or loses some. (A push onto the target earns a bonus on top, so
        # of two optimal moves that one may earn more.)
        top = {move for move, reward in enumerate(rewards) if reward == max(rewards)}
        assert top and top <= set(best)
        samples = step_samples([(prompt, rewards, best)], "best", choice_ids)
        assert [s.token_ids[-1] for s in samples] == list(choice_ids)
        assert all(s.token_ids[:-1] == prompt for s in samples)
        assert [s.advantage > 0 for s in samples] == [move in top for move in range(len(MOVES))]
        assert abs(sum(s.advantage for s in samples)) < 1e-9
        (label,) = step_samples([(prompt, rewards, best)], "sft", choice_ids)
        assert label.advantage == 1.0 and MOVES[choice_ids.index(label.token_ids[-1])] in [MOVES[m] for m in best]


def test_play_tells_solved_episodes_from_loops_and_deadlocks() -> None:
    import gymnasium as gym

    solver = gym.make("llmgym/Sokoban-v1").unwrapped

    def optimal(observation: str, system: str) -> int:
        solver.reset(options={"level": board_xsb(observation)})
        return MOVES.index(solver.solution()[0])

    solved = play(optimal, "v1", 4)
    assert solved["ends"] == {"solved": 4, "loop": 0, "deadlock": 0, "turns": 0}
    assert solved["optimal_move_rate"] == 1.0
    stuck = play(lambda observation, system: MOVES.index("Up"), "v1", 4)  # up to a wall, then the same position
    assert stuck["ends"]["solved"] == 0 and stuck["ends"]["loop"] + stuck["ends"]["deadlock"] == 4
    assert stuck["optimal_move_rate"] < 1.0


def test_the_oracle_agent_is_right_on_the_share_of_positions_asked() -> None:
    from benchmarks.choice_learning import oracle_chooser

    assert play(oracle_chooser(1.0, seed=0), "v1", 6)["ends"]["solved"] == 6
    wrong = play(oracle_chooser(0.0, seed=0), "v1", 6)
    assert wrong["ends"]["solved"] == 0 and wrong["optimal_move_rate"] == 0.0
    # Fixed per position, as a greedy policy's moves: the same seed plays the same episodes.
    assert play(oracle_chooser(0.7, seed=3), "v1", 6) == play(oracle_chooser(0.7, seed=3), "v1", 6)
