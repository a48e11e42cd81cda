"""Evaluation in one place: the trainer's evaluations and the ``llmgym-bench`` leaderboard.

* which levels a trainer evaluation plays: :func:`llmgym_train.planner.plan_eval` (the one episode planner);
* :mod:`llmgym_train.eval.agents`: the leaderboard's agents (random, optimal, sb3-ppo,
  jax-ppo, vllm, checkpoint, openai) behind one batched :class:`~llmgym_train.eval.agents.Agent`;
* :mod:`llmgym_train.eval.leaderboard`: the episodes, metrics and files of ``llmgym-bench``;
* :mod:`llmgym_train.eval.results`: provenance and portable paths of every results file.

Importing this package loads neither torch nor transformers: reference agents run without them.
"""

from __future__ import annotations

from llmgym_train.planner import eval_levels, plan_eval

__all__ = ["eval_levels", "plan_eval"]
