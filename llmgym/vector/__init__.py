"""llmgym's vector env: many text envs stepped as one batch, also from an event loop.

``gym.make_vec("llmgym/Sokoban-v0", 64, backend="process")`` (or :func:`make_vector_env`)
returns a :class:`TextVectorEnv`: a real :class:`gymnasium.vector.VectorEnv` that adds
``await astep(...)`` / ``await areset(...)``, partial steps (``mask=``), and group seeding
(``reset(seed=s, options={"group_size": g})``, the same level for each group of ``g``). See
:class:`TextVectorEnv` for the exact semantics.

Backends, one API (``backend=``):

* ``"inline"`` (default): every sub-env in this process, stepped in a loop. No start-up cost
  and no copying; the right choice when a sub-env's step is cheap (FrozenLake, Sokoban steps)
  and for debugging. ``astep`` runs the loop on a helper thread, so the event loop stays free.
* ``"thread"``: every sub-env in this process, the sub-envs of a call run concurrently on a
  thread pool. For I/O-bound sub-envs, such as tool-use envs whose steps wait on subprocesses
  or sockets. CPU-bound Python gains nothing from threads (the GIL).
* ``"process"``: ``num_workers`` worker processes (default one per core), each owning a
  contiguous shard of the sub-envs, built inside the worker. For CPU-bound work: Sokoban level
  generation at reset, math answer verification. Each call costs one message round trip per
  worker, so it pays off when a call does more than about a millisecond of work per worker.
  Only this backend enforces ``step_timeout`` and survives a sub-env that hangs or crashes the
  interpreter (reported, then every worker is stopped). Scripts need the
  ``if __name__ == "__main__":`` guard (workers start through a fork server).
* ``"ray"``: ``num_workers`` Ray actors spread over a cluster's nodes, each owning a shard of
  the sub-envs (see :mod:`llmgym.vector.ray_backend`; ``RayEnvBackend(restart=True, ...)``
  in place of the name sets its options). Needs ``pip install ray``.
* ``ServedEnvBackend(url)`` (an object, as it needs the server's address): the sub-envs live on
  an ``llmgym-serve`` server, held by ``/ws/batch`` connections (``num_workers`` of them, default
  one); every vector call is one message and one answer (see
  :mod:`llmgym.vector.served_backend`). Needs the ``integrations`` extra.
* ``"jax"``: FrozenLake and Sokoban ids only (the ``jax`` extra): every sub-env's game
  stepped in one compiled JAX call, text parsed and rendered around it, results equal to the
  other backends' step for step (see :mod:`llmgym.vector.jax_backend`).

Gymnasium's own ``vectorization_mode="sync"`` and ``"async"`` work on every llmgym id too.
"""

from __future__ import annotations

from gymnasium.vector import AutoresetMode

from llmgym.vector.vector_env import (
    BACKENDS,
    VECTOR_OPTIONS,
    BackendName,
    EnvFactory,
    TextVectorEnv,
    make_vector_env,
)

__all__ = [
    "BACKENDS",
    "VECTOR_OPTIONS",
    "AutoresetMode",
    "BackendName",
    "EnvFactory",
    "TextVectorEnv",
    "make_vector_env",
]
