"""Math environments: procedural problems with exact answers, a retry variant, and datasets.

* ``llmgym/Math-v0`` (and ``-Easy``/``-Hard``): one answer per problem (:class:`MathEnv`).
* ``llmgym/MathMultiTurn-v0``: several attempts, told "Unfortunately your answer is wrong.
  Let's try again." after a wrong one.
* ``llmgym/MathDataset-v0``: problems from a JSONL or Parquet file (:func:`MathDatasetEnv`: a
  :class:`MathEnv` whose problem source is the file's rows, :class:`DatasetProblems`).

Answers are checked by :class:`AnswerVerifier` (exact fast path, then math-verify in a worker
process with a hard timeout). Importing this package does not import sympy or math-verify.
"""

from llmgym.envs.math.dataset import DatasetProblems, MathDatasetEnv, final_answer, load_problems
from llmgym.envs.math.env import CORRECT, WRONG_FINAL, WRONG_TRY_AGAIN, GeneratedProblems, MathEnv, ProblemSource
from llmgym.envs.math.problems import (
    DIFFICULTIES,
    PROBLEM_KINDS,
    Difficulty,
    Problem,
    ProblemKind,
    generate_problem,
)
from llmgym.envs.math.verify import AnswerVerifier, Verdict, default_verifier, fast_verdict, parse_number

__all__ = [
    "CORRECT", "DIFFICULTIES", "PROBLEM_KINDS", "WRONG_FINAL", "WRONG_TRY_AGAIN", "AnswerVerifier",
    "DatasetProblems", "Difficulty", "GeneratedProblems", "MathDatasetEnv", "MathEnv", "Problem", "ProblemKind",
    "ProblemSource", "Verdict", "default_verifier",
    "fast_verdict",
    "final_answer", "generate_problem", "load_problems", "parse_number",
]
