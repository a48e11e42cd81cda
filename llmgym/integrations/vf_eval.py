"""``vf-eval`` with llmgym's taskset registered.

    python -m llmgym.integrations.vf_eval llmgym [vf-eval options]

verifiers 0.4 finds a taskset by a top-level module name or under ``verifiers.v1.tasksets``; importing
:mod:`llmgym.integrations.verifiers` registers it there as ``llmgym``, then verifiers' own CLI runs.
"""

from __future__ import annotations

import llmgym.integrations.verifiers  # noqa: F401 - registers the "llmgym" taskset id


def main() -> None:
    from verifiers.v1.cli.eval.main import main as vf_eval

    vf_eval()


if __name__ == "__main__":
    main()
