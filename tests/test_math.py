"""Math envs: gold answers score 1, perturbed ones 0, equivalent forms 1; episode rules; datasets."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import gymnasium as gym
import pytest

import llmgym  # noqa: F401 - registers the ids
from llmgym.core import level_rng
from llmgym.envs.math import (
    CORRECT,
    DIFFICULTIES,
    PROBLEM_KINDS,
    WRONG_FINAL,
    WRONG_TRY_AGAIN,
    MathDatasetEnv,
    MathEnv,
    final_answer,
    generate_problem,
    load_problems,
)
from llmgym.error import DatasetError, InvalidOptionError, LevelFormatError

GOLD_PROBLEMS = 1000


def _play(env: MathEnv, completion: str) -> tuple[float, bool, bool, dict]:
    _, reward, terminated, truncated, info = env.step(completion)
    return float(reward), terminated, truncated, info


@pytest.fixture(scope="module", params=DIFFICULTIES)
def solved_levels(request):
    """1,000 generated problems at one difficulty, as levels."""
    env = MathEnv(difficulty=request.param)
    levels = []
    for seed in range(GOLD_PROBLEMS):
        env.reset(seed=seed)
        levels.append(env.level())
    return levels


def test_reference_answer_of_1000_problems_per_difficulty_scores_1(solved_levels):
    env = MathEnv()
    kinds = set()
    for level in solved_levels:
        env.reset(options={"level": level})
        reward, terminated, truncated, info = _play(env, f"Reasoning... <answer>{env.solution()[0]}</answer>")
        assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True), level
        assert info["verification"] == "fast"  # exact numbers never need the worker
        kinds.add(level["kind"])
    assert kinds == set(PROBLEM_KINDS)


def _perturbations(answer: str) -> list[str]:
    value = Fraction(answer)
    wrong = [value + 1, value - 1, value * 2 if value else Fraction(3), -value if value else Fraction(-1)]
    if value.denominator > 1:
        wrong.append(Fraction(value.numerator + 1, value.denominator))
    texts = [str(w.numerator) if w.denominator == 1 else f"{w.numerator}/{w.denominator}" for w in wrong]
    return [text for text in texts if Fraction(text) != value]


def test_perturbed_answers_score_0(solved_levels):
    env = MathEnv()
    for level in solved_levels:
        for wrong in _perturbations(level["answer"]):
            env.reset(options={"level": level})
            reward, terminated, truncated, info = _play(env, f"<answer>{wrong}</answer>")
            outcome = (reward, terminated, truncated, info["success"])
            assert outcome == (0.0, True, False, False), (level, wrong)


def _equivalent_forms(answer: str) -> list[str]:
    value = Fraction(answer)
    forms = [f"\\boxed{{{answer}}}", f"<answer>${answer}$</answer>", f"<answer>x = {answer}</answer>"]
    if value.denominator == 1:
        forms += [f"<answer>{value.numerator}.0</answer>", f"\\boxed{{\\frac{{{2 * value.numerator}}}{{2}}}}"]
        if abs(value) >= 1000:
            forms.append(f"<answer>{value.numerator:,}</answer>")
    else:
        sign = "-" if value < 0 else ""
        forms += [f"\\boxed{{{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}}}",
                  f"<answer>\\dfrac{{{value.numerator * 3}}}{{{value.denominator * 3}}}</answer>"]
        denominator = value.denominator
        while denominator % 2 == 0:
            denominator //= 2
        while denominator % 5 == 0:
            denominator //= 5
        if denominator == 1:  # a terminating decimal
            forms.append(f"<answer>{float(value)!r}</answer>")
    return forms


def test_equivalent_forms_score_1(solved_levels):
    env = MathEnv()
    for level in solved_levels:
        for form in _equivalent_forms(level["answer"]):
            env.reset(options={"level": level})
            reward, _, _, info = _play(env, form)
            assert reward == 1.0, (level["answer"], form, info)


def test_a_copied_computation_scores_nothing_and_says_why():
    """A policy can copy "Compute 5 + 11." back as its answer; the env asks for the number."""
    env = MathEnv()
    env.reset(options={"level": {"question": "Compute 5 + 11.", "answer": "16"}})
    reward, terminated, _, info = _play(env, "<answer>5 + 11</answer>")
    assert (reward, terminated, info["success"], info["verification"]) == (0.0, True, False, "computation")
    env.reset(options={"level": {"question": "Compute 5 + 11.", "answer": "16"}})
    assert _play(env, "<answer>16</answer>")[0] == 1.0


def test_half_in_every_written_form_counts():
    env = MathEnv()
    level = {"question": "What is 1/2?", "answer": "1/2"}
    for form in ("<answer>1/2</answer>", "<answer>0.5</answer>", "\\boxed{\\frac{1}{2}}", "\\boxed{\\frac12}",
                 "<answer>.5</answer>", "<answer>\\boxed{2/4}</answer>"):
        env.reset(options={"level": level})
        assert _play(env, form)[0] == 1.0, form


def test_same_seed_same_problem_and_level_round_trips():
    first, second = MathEnv(difficulty="hard"), MathEnv(difficulty="hard")
    assert first.reset(seed=42) == second.reset(seed=42)
    observation, _ = first.reset(seed=42)
    replay, info = second.reset(options={"level": json.loads(json.dumps(first.level()))})
    assert replay == observation and info["level_id"] == "custom"
    assert first.reset(seed=43)[0] != observation


def test_problems_come_only_from_the_level_seed():
    for difficulty in DIFFICULTIES:
        for kind in PROBLEM_KINDS:
            one = generate_problem(level_rng(7), difficulty, (kind,))
            assert one == generate_problem(level_rng(7), difficulty, (kind,))
            assert one.kind == kind and one.difficulty == difficulty


def test_difficulty_reset_option_and_validation():
    env = MathEnv(difficulty="easy")
    _, info = env.reset(seed=0, options={"difficulty": "hard"})
    assert info["difficulty"] == "hard"
    with pytest.raises(InvalidOptionError, match="Did you mean 'medium'"):
        MathEnv(difficulty="meduim")
    with pytest.raises(InvalidOptionError, match="kinds"):
        MathEnv(kinds=("algebra",))
    with pytest.raises(LevelFormatError, match="answer"):
        env.reset(options={"level": {"question": "What is 1 + 1?"}})


def test_no_answer_gets_the_format_penalty_and_ends_the_single_turn_episode():
    env = gym.make("llmgym/Math-v0").unwrapped
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("I think it is 12.")
    assert (reward, terminated, truncated, info["action_is_valid"]) == (-0.1, True, False, False)
    assert "<answer>" in observation


def test_a_wrong_answer_ends_the_single_turn_episode():
    env = gym.make("llmgym/Math-v0").unwrapped
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step("<answer>123456789</answer>")
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)


def test_multi_turn_says_try_again_then_congratulates_with_turn_discount():
    env = MathEnv(max_attempts=3, turn_discount=0.5)
    env.reset(seed=5)
    answer = env.solution()[0]
    observation, reward, terminated, truncated, _ = env.step("<answer>123456789</answer>")
    assert (observation, reward, terminated, truncated) == (WRONG_TRY_AGAIN, 0.0, False, False)
    observation, reward, terminated, truncated, info = env.step(f"\\boxed{{{answer}}}")
    assert (observation, reward, terminated, truncated, info["success"]) == (CORRECT, 0.5, True, False, True)


def test_registered_multi_turn_env_truncates_after_its_attempts():
    env = gym.make("llmgym/MathMultiTurn-v0").unwrapped
    env.reset(seed=5)
    outcomes = [env.step("<answer>123456789</answer>") for _ in range(3)]
    assert [o[0] for o in outcomes] == [WRONG_TRY_AGAIN, WRONG_TRY_AGAIN, WRONG_FINAL]
    assert [(o[2], o[3]) for o in outcomes] == [(False, False), (False, False), (False, True)]
    assert sum(o[1] for o in outcomes) == 0.0


def test_multi_turn_first_try_scores_1():
    env = gym.make("llmgym/MathMultiTurn-v0").unwrapped
    env.reset(seed=9)
    observation, reward, terminated, _, _ = env.step(f"<answer>{env.solution()[0]}</answer>")
    assert (observation, reward, terminated) == (CORRECT, 1.0, True)


# ---------------------------------------------------------------------- datasets
def test_gsm8k_answers_are_reduced_to_the_final_number():
    assert final_answer("Natalia sold 48/2 = 24 clips.\n#### 72") == "72"
    assert final_answer("... #### 1,072") == "1072"
    assert final_answer("\\frac{3}{4}") == "\\frac{3}{4}"


def test_shipped_dataset_gold_answers_all_score_1():
    env = gym.make("llmgym/MathDataset-v0").unwrapped
    assert len(env.problems) >= 50
    for problem in env.problems:
        env.reset(options={"level": problem.as_level()})
        assert env.step(f"<answer>{env.solution()[0]}</answer>")[1] == 1.0


def test_dataset_rows_are_sampled_by_seed(tmp_path):
    path = tmp_path / "set.jsonl"
    rows = [{"question": f"What is {n} + {n}?", "answer": f"{n} + {n} = {2 * n}\n#### {2 * n}"}
            for n in range(20)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    # A dataset of your own has no frozen eval set: the split holds out its first 5 eval-seed problems.
    env = MathDatasetEnv(dataset_path=path, held_out_levels=5)
    observation, info = env.reset(seed=3)
    assert observation.startswith(rows[info["level_id"]]["question"])
    assert env.solution() == [str(2 * info["level_id"])]
    assert MathDatasetEnv(dataset_path=path, held_out_levels=5).reset(seed=3) == (observation, info)
    drawn = {env.reset(seed=seed)[1]["level_id"] for seed in range(400)}
    held_out = {env.reset(options={"level": record["level"]})[0] for record in _eval_seed_records(path, 5)}
    assert len(drawn) == 15, "every problem but the 5 held out"
    assert not held_out & {env.reset(seed=seed)[0] for seed in range(400)}
    with pytest.raises(InvalidOptionError, match="gave only 20 distinct levels"):
        MathDatasetEnv(dataset_path=path, held_out_levels=200).reset(seed=0)  # 200 held out of 20 rows


def test_parquet_datasets_load(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    path = tmp_path / "set.parquet"
    table = pyarrow.table({"question": ["What is 2 + 3?"], "answer": ["2 + 3 = 5\n#### 5"]})
    parquet.write_table(table, path)
    problems = load_problems(path)
    assert [(p.question, p.answer) for p in problems] == [("What is 2 + 3?", "5")]
    parquet.write_table(pyarrow.table({"prompt": ["x"], "answer": ["1"]}), path)
    with pytest.raises(DatasetError, match="missing column.*question"):
        load_problems(path)


def test_dataset_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        MathDatasetEnv(dataset_path=tmp_path / "missing.jsonl")
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "answer": "1"}\n\n{"question": "q2"}\n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl:line 3: field\(s\) answer"):
        load_problems(path)
    path.write_text('{"question": "q", "answer": "1"}\n{"question": "q2", "answer": \n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2: not valid JSON"):
        load_problems(path)
    path.write_text('["not", "an", "object"]\n')
    with pytest.raises(DatasetError, match="line 1: expected a JSON object"):
        load_problems(path)
    csv = tmp_path / "set.csv"
    csv.write_text("question,answer\n")
    with pytest.raises(DatasetError, match="expected .jsonl or .parquet"):
        load_problems(csv)


def test_math_envs_import_without_sympy_or_math_verify():
    code = ("import sys, gymnasium as gym, llmgym; env = gym.make('llmgym/Math-v0'); env.reset(seed=0); "
            "env.step('<answer>1</answer>'); "
            "print(sorted(m for m in ('sympy', 'math_verify') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _eval_seed_records(path, count):
    from llmgym.splits import distinct_levels, make_unsplit

    return list(distinct_levels(make_unsplit(MathDatasetEnv, dataset_path=path), count))
