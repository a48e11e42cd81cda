"""Rollout engines on Ray: generators in Ray actors used as one, fed new weights after every update.

With ``distributed.ray_address`` set to ``auto`` or a cluster address, the trainer's generator is
a :class:`RolloutEngines`: ``num_rollout_engines`` generators (vLLM or HF, the same backends as
on one machine), each in its own Ray actor, spread over the cluster's nodes. It implements the
:class:`~llmgym_train.generation.base.Generator` protocol, so the rollout does not know the
difference: each batch of requests is cut into near-equal contiguous shares, one per engine,
run at once, and put back in order. Requests that carry a sampling seed give the same
completion whichever engine serves them. (The rollout's envs go to Ray through the vector
env's Ray backend, in :class:`llmgym_train.envs.EnvPool`.)

Weight sync, through one :class:`WeightTransport` interface:

* ``object_store`` (CPU, the default): the trainer copies its weights to CPU once and puts
  them in Ray's object store; each engine's node fetches that one object and the engine
  loads it in place (``Generator.update_weights``). Cost: one serialization plus one
  transfer per node; right for CPU clusters and small models.
* ``nccl`` (GPU): the trainer (rank 0) and the engines form one NCCL group with vLLM's
  ``StatelessProcessGroup`` and ``PyNcclCommunicator`` (no global ``torch.distributed``
  state, so it lives beside the engines' own groups); each tensor is broadcast GPU to GPU and
  streamed into vLLM's ``reload_weights``. Written against the same calls as the CPU path;
  it needs CUDA on the trainer and every engine and has not run on this project's CPU-only
  machines.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from llmgym.error import DependencyNotInstalled, InvalidOptionError, WorkerDiedError
from llmgym_train.generation.base import Completion, SamplingSpec, per_prompt

if TYPE_CHECKING:
    import torch

    from llmgym_train.config import DistributedConfig, TransportName

EngineBackend = Literal["vllm", "hf"]
#: Seconds Ray gets to place the engines and the engines to load their model.
_START_TIMEOUT = 900.0


# ---------------------------------------------------------------------- the engine actor
class RolloutEngine:
    """The body of one engine actor: a generator plus the receiving end of weight sync."""

    def __init__(self, backend: EngineBackend, model: str, max_model_len: int, seed: int) -> None:
        from llmgym_train.generation import make_generator

        self.generator = make_generator(backend, model, max_model_len=max_model_len, seed=seed)
        self._communicator: Any = None

    def describe(self) -> tuple[tuple[int, ...], int, str]:
        """``(end-of-turn ids, max_model_len, Ray node id)``; also the readiness probe."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        return tuple(self.generator.eos_token_ids), self.generator.max_model_len, node

    def generate(self, prompts: list[list[int]], specs: list[SamplingSpec]) -> list[Completion]:
        return self.generator.generate(prompts, specs)

    def load_weights(self, state: dict[str, torch.Tensor], version: int | None = None) -> None:
        """Object-store path: ``state`` arrives resolved from the object store (CPU tensors).

        ``version``: publish them as that policy version (asynchronous training: completions are
        stamped with it from now on).
        """
        if version is None:
            self.generator.update_weights(state.items())
        else:
            self.generator.publish(state.items(), version)

    def join_weight_group(self, host: str, port: int, rank: int, world_size: int) -> None:
        """NCCL path: join the trainer's broadcast group as ``rank``."""
        self._communicator = nccl_communicator(host, port, rank, world_size)

    def receive_weights(self, metadata: list[tuple[str, str, tuple[int, ...]]], version: int | None = None) -> None:
        """NCCL path: receive each tensor of ``metadata`` from rank 0 and stream it into the engine (as ``version``, if given)."""
        import torch

        def received() -> Iterable[tuple[str, torch.Tensor]]:
            for name, dtype, shape in metadata:
                tensor = torch.empty(shape, dtype=getattr(torch, dtype), device="cuda")
                self._communicator.broadcast(tensor, src=0, stream=torch.cuda.current_stream())
                yield name, tensor

        if version is None:
            self.generator.update_weights(received())
        else:
            self.generator.publish(received(), version)

    def weights_digest(self) -> str:
        """SHA-256 of the engine's current weights (a model's HF state dict, or vLLM's own layout)."""
        model = getattr(self.generator, "model", None)
        if model is not None:
            return state_digest(model.state_dict().items())
        llm = self.generator.llm  # type: ignore[attr-defined]
        digests = llm.collective_rpc(_vllm_worker_digest)
        return digests[0]

    def sleep(self) -> None:
        self.generator.sleep()

    def wake(self) -> None:
        self.generator.wake()

    def close(self) -> None:
        self.generator.close()


def _vllm_worker_digest(worker: Any) -> str:
    """Runs inside vLLM's worker (``collective_rpc``): the digest of the loaded model."""
    return state_digest(worker.model_runner.model.state_dict().items())


def state_digest(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 over names, dtypes, shapes and bytes, in name order: equal digests, equal weights."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(named_tensors, key=lambda item: item[0]):
        data = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}|{data.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(data.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


# ---------------------------------------------------------------------- weight transports
class WeightTransport(Protocol):
    """Carries the trainer's weights to every engine; returns when all of them hold the new ones.

    ``version``: the policy version the weights are (asynchronous training stamps tokens with it); ``None``: a plain sync.
    """

    def broadcast(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], engines: Sequence[Any], version: int | None = None
    ) -> None:
        ...

    def close(self) -> None: ...


class ObjectStoreTransport:
    """CPU path: one CPU copy in Ray's object store, fetched once per node, loaded by every engine."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray

    def broadcast(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], engines: Sequence[Any], version: int | None = None
    ) -> None:
        state = {name: tensor.detach().to("cpu").contiguous() for name, tensor in named_tensors}
        reference = self._ray.put(state)
        del state
        # An ObjectRef passed as an argument reaches the actor as its value: the engine sees tensors.
        loading = [engine.load_weights.remote(reference, version) for engine in engines]
        _get_all(self._ray, loading, "loading new weights")

    def close(self) -> None:
        """Nothing to release: the object is freed once no engine call holds it."""


class NcclTransport:
    """GPU path: rank 0 (the trainer) broadcasts each tensor over NCCL to the engines (ranks 1..N).

    Arguments:
        host, port: where rank 0 listens for the group's rendezvous (a free port on the
            trainer's node, reachable from the engines' nodes).
    """

    def __init__(self, ray: Any, engines: Sequence[Any], host: str, port: int) -> None:
        import torch

        if not torch.cuda.is_available():
            raise InvalidOptionError(
                "distributed.weight_transport='nccl' broadcasts GPU to GPU, but this trainer has no CUDA "
                "device; use weight_transport=object_store on CPU machines."
            )
        self._ray = ray
        world_size = len(engines) + 1
        joining = [
            engine.join_weight_group.remote(host, port, rank, world_size)
            for rank, engine in enumerate(engines, start=1)
        ]
        self._communicator = nccl_communicator(host, port, 0, world_size)
        _get_all(ray, joining, "joining the NCCL weight group")

    def broadcast(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], engines: Sequence[Any], version: int | None = None
    ) -> None:
        import torch

        tensors = [(name, tensor.detach().to("cuda").contiguous()) for name, tensor in named_tensors]
        metadata = [(name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape))
                    for name, tensor in tensors]
        receiving = [engine.receive_weights.remote(metadata, version) for engine in engines]
        stream = torch.cuda.current_stream()
        for _, tensor in tensors:
            self._communicator.broadcast(tensor, src=0, stream=stream)
        _get_all(self._ray, receiving, "receiving new weights over NCCL")

    def close(self) -> None:
        self._communicator = None


def nccl_communicator(host: str, port: int, rank: int, world_size: int) -> Any:
    """A NCCL communicator over a ``StatelessProcessGroup`` (vLLM's utilities; no global torch state)."""
    import torch

    try:
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup
    except ImportError as error:
        raise DependencyNotInstalled(
            f"weight_transport='nccl' uses vLLM's NCCL utilities; run `pip install vllm` ({error})."
        ) from error
    group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size)
    return PyNcclCommunicator(group, device=torch.cuda.current_device())


# ---------------------------------------------------------------------- the engine group
class RolloutEngines:
    """``num_engines`` generators in Ray actors, used as one :class:`Generator` (see the module docstring).

    Arguments:
        backend: ``vllm`` or ``hf``, built inside each actor from the HF folder ``model``.
        model: a local HF model folder every node can read at the same path.
        num_engines: actors; Ray spreads them over the nodes.
        max_model_len: longest prompt + completion per request.
        seed: engine ``i`` samples unseeded requests with ``seed + i``.
        num_cpus, num_gpus: Ray resources reserved per engine.
        transport: ``object_store`` or ``nccl``.
        address: the cluster to join when Ray is not initialized yet.
        nccl_endpoint: ``(host, port)`` for the NCCL rendezvous (nccl transport only).
    """

    def __init__(
        self,
        backend: EngineBackend,
        model: str | Path,
        *,
        num_engines: int,
        max_model_len: int = 2048,
        seed: int = 0,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        transport: TransportName = "object_store",
        address: str | None = None,
        nccl_endpoint: tuple[str, int] | None = None,
    ) -> None:
        from llmgym.vector.ray_backend import connect

        if num_engines < 1:
            raise InvalidOptionError(f"num_engines must be >= 1; got {num_engines}.")
        self._ray = connect(address)
        actor = self._ray.remote(RolloutEngine).options(
            num_cpus=num_cpus, num_gpus=num_gpus, scheduling_strategy="SPREAD"
        )
        self._transport: WeightTransport | None = None
        self.engines = [
            actor.remote(backend, str(model), max_model_len, seed + index) for index in range(num_engines)
        ]
        try:
            described = self._wait_started(num_cpus, num_gpus)
            self._transport = self._make_transport(transport, nccl_endpoint)
        except BaseException:
            self.close()
            raise
        self.eos_token_ids: tuple[int, ...] = described[0][0]
        self.max_model_len: int = described[0][1]
        #: The Ray node id of each engine.
        self.nodes: list[str] = [node for _, _, node in described]
        #: The policy version published last (``None``: none; completions then carry the engines' own stamps, if any).
        self.policy_version: int | None = None

    def _wait_started(self, num_cpus: float, num_gpus: float) -> list[tuple[tuple[int, ...], int, str]]:
        """Each engine's :meth:`RolloutEngine.describe`, once all have loaded their model."""
        probes = [engine.describe.remote() for engine in self.engines]
        ready, _ = self._ray.wait(probes, num_returns=len(probes), timeout=_START_TIMEOUT)
        if len(ready) < len(probes):
            raise InvalidOptionError(
                f"{len(probes) - len(ready)} of {len(probes)} rollout engines did not start within "
                f"{_START_TIMEOUT:.0f} s. Usually the cluster has no room for engines of "
                f"num_cpus={num_cpus}, "
                f"num_gpus={num_gpus} (free now: {self._ray.available_resources()}): lower "
                "distributed.num_rollout_engines or the per-engine resources, or add nodes."
            )
        return _get_all(self._ray, probes, "starting")

    @classmethod
    def from_config(cls, distributed: DistributedConfig, backend: EngineBackend, model: str | Path,
                    *, max_model_len: int, seed: int) -> RolloutEngines:
        """The engines a trainer config asks for."""
        return cls(
            backend,
            model,
            num_engines=distributed.num_rollout_engines,
            max_model_len=max_model_len,
            seed=seed,
            num_cpus=distributed.engine_cpus,
            num_gpus=distributed.engine_gpus,
            transport=distributed.weight_transport,
            address=distributed.address,
        )

    def _make_transport(self, transport: TransportName, endpoint: tuple[str, int] | None) -> WeightTransport:
        if transport == "object_store":
            return ObjectStoreTransport(self._ray)
        if endpoint is None:
            endpoint = (self._ray.util.get_node_ip_address(), _free_port())
        return NcclTransport(self._ray, self.engines, *endpoint)

    # ------------------------------------------------------------------ Generator protocol
    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingSpec | Sequence[SamplingSpec]
    ) -> list[Completion]:
        """Each engine generates one contiguous share of ``prompts``; results come back in order."""
        specs = per_prompt(sampling, len(prompts))
        shares = _shares(len(prompts), len(self.engines))
        calls = [
            engine.generate.remote([list(prompts[i]) for i in share], [specs[i] for i in share])
            for engine, share in zip(self.engines, shares)
            if share
        ]
        return [completion for part in _get_all(self._ray, calls, "generating") for completion in part]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Send the trainer's weights to every engine; returns once all of them hold them."""
        assert self._transport is not None, "the engines are closed"
        self._transport.broadcast(named_tensors, self.engines)

    def publish(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Send the weights of policy ``version`` to every engine; each stamps its tokens with it from then on.

        Called between two ``generate`` calls (the asynchronous loop owns the engines), so no
        engine is mid-batch; an engine that streams (vLLM) would take them between decode steps.
        """
        assert self._transport is not None, "the engines are closed"
        self._transport.broadcast(named_tensors, self.engines, version)
        self.policy_version = version

    def weights_digests(self) -> list[str]:
        """Each engine's :func:`state_digest`: all equal after a sync."""
        hashing = [engine.weights_digest.remote() for engine in self.engines]
        return _get_all(self._ray, hashing, "hashing weights")

    def sleep(self) -> None:
        _get_all(self._ray, [engine.sleep.remote() for engine in self.engines], "sleeping")

    def wake(self) -> None:
        _get_all(self._ray, [engine.wake.remote() for engine in self.engines], "waking")

    def close(self) -> None:
        """Stop every engine actor (safe to call twice, and after Ray shut down: that ended them)."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        engines, self.engines = self.engines, []
        if self._ray.is_initialized():
            for engine in engines:
                self._ray.kill(engine, no_restart=True)


def _shares(count: int, parts: int) -> list[range]:
    base, extra = divmod(count, parts)
    shares, start = [], 0
    for part in range(parts):
        stop = start + base + (part < extra)
        shares.append(range(start, stop))
        start = stop
    return shares


def _get_all(ray: Any, references: list[Any], doing: str) -> list[Any]:
    """``ray.get`` that names the engine phase when an actor died."""
    try:
        return ray.get(references)
    except ray.exceptions.RayActorError as error:
        raise WorkerDiedError(
            f"A rollout engine actor died while {doing}: {str(error).strip().splitlines()[0]}. Check the "
            "node's memory and Ray's logs (`ray logs`), then restart the run from its last checkpoint "
            "(--resume).",
            index=-1,
            seed=None,
        ) from None


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


__all__ = [
    "NcclTransport",
    "ObjectStoreTransport",
    "RolloutEngine",
    "RolloutEngines",
    "WeightTransport",
    "state_digest",
]
