"""Pure tensor functions of the RL algorithms: advantages, losses, off-policy corrections and sample filters.

Nothing here touches models, envs or the optimizer; :mod:`llmgym_train.trainer` wires them.
:func:`with_advantages` (:mod:`~llmgym_train.algorithms.estimator`) is where the estimator is chosen.
"""

from llmgym_train.algorithms.advantages import (
    broadcast_to_tokens,
    discounted_returns,
    episode_normalized,
    gae,
    group_normalized,
    masked_whiten,
    place_turn_rewards,
    reinforce_pp,
    step_grouped,
    turn_returns,
)
from llmgym_train.algorithms.estimator import with_advantages
from llmgym_train.algorithms.filters import group_variance_keep, void_turn_keep
from llmgym_train.algorithms.losses import (
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    KLEstimator,
    LossAggregation,
    aggregate,
    clip_stats,
    clipped_surrogate,
    clipped_token_losses,
    entropy_from_logits,
    kl_divergence,
    token_logprobs,
    value_loss,
)
from llmgym_train.algorithms.off_policy import (
    IMPORTANCE_LEVELS,
    ImportanceLevel,
    decoupled_surrogate,
    truncated_importance_weights,
)
from llmgym_train.algorithms.tree import tree_advantages, tree_values

__all__ = [
    "IMPORTANCE_LEVELS",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "ImportanceLevel",
    "KLEstimator",
    "LossAggregation",
    "aggregate",
    "broadcast_to_tokens",
    "clip_stats",
    "clipped_surrogate",
    "clipped_token_losses",
    "decoupled_surrogate",
    "discounted_returns",
    "entropy_from_logits",
    "episode_normalized",
    "gae",
    "group_normalized",
    "group_variance_keep",
    "kl_divergence",
    "masked_whiten",
    "place_turn_rewards",
    "reinforce_pp",
    "step_grouped",
    "token_logprobs",
    "truncated_importance_weights",
    "tree_advantages",
    "tree_values",
    "turn_returns",
    "value_loss",
    "void_turn_keep",
    "with_advantages",
]
