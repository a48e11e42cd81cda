"""llmgym envs in other tools: an OpenEnv server, a remote env, TRL and verifiers adapters.

Nothing is imported here: each submodule imports its library (FastAPI, websockets, TRL,
verifiers) when it is used, so ``import llmgym`` stays light.

* :mod:`llmgym.integrations.serve`: ``llmgym-serve ENV_ID``, any id behind OpenEnv's protocol.
* :mod:`llmgym.integrations.remote`: ``gym.make("llmgym/Remote-v0", url=...)``, a served env
  as a Gymnasium env again.
* :mod:`llmgym.integrations.trl`: an ``environment_factory`` for TRL's ``GRPOTrainer``.
* :mod:`llmgym.integrations.verifiers`: ``load_environment`` for verifiers' ``vf-eval``.
"""
