"""The llmgym leaderboard from a checkout: ``python -m benchmarks.leaderboard --agents random optimal``.

The same command as the installed ``llmgym-bench``. Agents, episodes, metrics and the files a
run writes are :mod:`llmgym_train.eval.leaderboard`'s; this script only calls it.
"""

from __future__ import annotations

from llmgym_train.eval.leaderboard import main

if __name__ == "__main__":
    main()
