"""The agents the leaderboard evaluates, all behind one batched interface.

An agent answers a batch of :class:`Turn` s (one per live episode) with one :class:`Reply`
each: the completion text and the tokens it cost. Batching is what makes LLM rows
affordable (vLLM decodes every live episode's turn together); the reference agents simply
loop.

Agent specs, as given on the command line:

* ``random``: a uniformly random valid action each turn (from the env's ``valid_actions()``
  when it has one, else its ``action_names``, else a sample of its action space).
* ``optimal``: the first action of ``env.solution()``, re-planned every turn (so a slip on
  slippery ice is recovered from); for math, the reference answer.
* ``sb3-ppo``: stable-baselines3 PPO on :func:`llmgym.wrappers.make_classic_env`, trained
  once per env with a fixed seed and cached under ``~/.cache/llmgym/sb3``.
* ``jax-ppo:<checkpoint>``: a policy trained by :mod:`llmgym.jax.ppo` (the ``jax`` extra),
  loaded from its checkpoint folder; it plays the envs whose board it was trained on.
* ``vllm:<model>``: a local model through the vLLM backend (``vllm`` = ``vllm:smollm2-135m``).
* ``checkpoint:<dir>``: a run folder of ``llmgym-train`` (one with ``config.yaml``) plays its
  ``model/`` (saved at each checkpoint) as the run was trained and evaluated: the run's agent,
  response prefix, choices and token limits, through the trainer's evaluation loop
  (:class:`llmgym_train.eval.policy.RunAgent`). Any other HF model folder plays in plain chat
  like ``vllm:<model>``. Both through the vLLM backend (``--backend hf``: transformers).
* ``base:<dir>``: the model a run folder started from (its config's ``model``), played as the
  run plays (``checkpoint:<dir>``'s settings): the before-training row a trained run is read
  against, on as many levels as the leaderboard plays.
* ``openai:<base_url>#<model>``: any OpenAI-compatible chat endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from llmgym.core import TextEnv
from llmgym.error import DependencyNotInstalled, InvalidOptionError, did_you_mean
from llmgym.wrappers.classic import BOARD_SPECS, board_shape, encode_board, make_classic_env
from llmgym_train.eval.results import portable_path

#: The file that makes a folder a run folder of ``llmgym-train`` (as ``llmgym_train.config.RUN_CONFIG_FILE``,
#: not imported from there: the config module loads the trainer's side, and reference agents run without it).
RUN_CONFIG_FILE = "config.yaml"

Message = dict[str, str]

AGENT_KINDS = ("random", "optimal", "sb3-ppo", "jax-ppo", "vllm", "checkpoint", "base", "openai")


@dataclass
class Turn:
    """One decision an agent is asked for.

    Attributes:
        env: the unwrapped env of the episode (reference agents read its solver or actions).
        messages: the chat so far, ending with the user turn to answer.
        rng: the episode's own generator, seeded from the run seed, level and sample, so an
            agent's choices are reproducible to the episode whatever the batch holds.
        number: turns already played in the episode (0 on the first).
    """

    env: TextEnv
    messages: list[Message]
    rng: np.random.Generator
    number: int = 0


@dataclass(frozen=True)
class Reply:
    """An agent's completion for one turn and what it cost in tokens (0 for non-LLM agents)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class Sampling:
    """How LLM agents sample; recorded with every result.

    Attributes:
        temperature: 0 for greedy decoding.
        top_p: nucleus sampling mass.
        max_tokens: most tokens generated per turn.
        history: most recent user/assistant exchanges kept in the prompt besides the system
            prompt and the current user turn (every observation holds the full state, so old
            turns only cost context).
        max_model_len: local models' context length; prompts are cut (oldest exchanges first) to
            fit ``max_model_len - max_tokens``.
        concurrency: requests in flight at once against an OpenAI-compatible endpoint.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    history: int = 4
    max_model_len: int = 2048
    concurrency: int = 8

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise InvalidOptionError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise InvalidOptionError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.max_tokens < 1 or self.history < 0 or self.concurrency < 1:
            raise InvalidOptionError(
                "max_tokens and concurrency must be >= 1 and history >= 0; got "
                f"max_tokens={self.max_tokens}, concurrency={self.concurrency}, history={self.history}."
            )
        if self.max_model_len <= self.max_tokens:
            raise InvalidOptionError(
                f"max_model_len ({self.max_model_len}) must exceed max_tokens ({self.max_tokens}) to leave "
                "room for the prompt; raise max_model_len or lower max_tokens."
            )


class Agent(Protocol):
    """What the leaderboard runs. ``settings`` is recorded with the agent's results."""

    name: str
    settings: dict[str, Any]

    def supports(self, env: TextEnv) -> bool:
        """Whether the agent can play ``env`` at all (an unsupported pair is skipped, not failed)."""
        ...

    def prepare(self, env_id: str) -> None:
        """Called before the episodes of ``env_id`` (e.g. train or load a per-env policy)."""
        ...

    def act(self, turns: Sequence[Turn]) -> list[Reply]:
        """One reply per turn, in order."""
        ...

    def close(self) -> None:
        """Release engines and connections."""
        ...


def answer(action: str) -> str:
    """``action`` in the default answer format every llmgym env parses."""
    return f"<answer>{action}</answer>"


def action_choices(env: TextEnv) -> Sequence[str] | None:
    """The env's valid actions right now if it says (``valid_actions()``), else its fixed
    ``action_names``, else ``None`` (an open action set, such as a math answer)."""
    valid_actions = getattr(env, "valid_actions", None)
    if callable(valid_actions):
        choices = valid_actions()
        if choices:
            return list(choices)
    names = getattr(env, "action_names", None)
    return list(names) if names else None


# ---------------------------------------------------------------------- reference agents
class RandomAgent:
    """A uniformly random valid action each turn, drawn from the episode's generator."""

    name = "random"
    settings: dict[str, Any] = {}

    def supports(self, env: TextEnv) -> bool:
        return True

    def prepare(self, env_id: str) -> None:
        pass

    def act(self, turns: Sequence[Turn]) -> list[Reply]:
        return [Reply(self._choose(turn)) for turn in turns]

    @staticmethod
    def _choose(turn: Turn) -> str:
        choices = action_choices(turn.env)
        if choices is not None:
            return answer(choices[int(turn.rng.integers(len(choices)))])
        # An open action set has no uniform valid action: a random string of the action
        # space is the honest floor (it is almost always invalid).
        turn.env.action_space.seed(int(turn.rng.integers(2**31)))
        return turn.env.action_space.sample()

    def close(self) -> None:
        pass


class OptimalAgent:
    """Play the env's solver, re-planning every turn so that a slip (slippery ice) is recovered from.

    ``solution()`` is asked each turn. A solver that plans from the current state returns the
    rest of the previous plan after a step as planned, and a new plan after a slip: either way
    its first action is played. A solver whose plan is fixed for the episode (math's reference
    answer, tool use's tool calls then answer) returns the same plan again: then the agent
    plays that plan's next action.
    """

    name = "optimal"
    settings: dict[str, Any] = {"replan": "every turn"}

    def __init__(self) -> None:
        self._plans: dict[int, tuple[list[str], int]] = {}  # id(env) -> (last plan, actions played from it)

    def supports(self, env: TextEnv) -> bool:
        return type(env).solution is not TextEnv.solution

    def prepare(self, env_id: str) -> None:
        self._plans.clear()

    def act(self, turns: Sequence[Turn]) -> list[Reply]:
        return [Reply(self._next_action(turn)) for turn in turns]

    def _next_action(self, turn: Turn) -> str:
        key = id(turn.env)
        plan = turn.env.solution()
        previous, played = self._plans.get(key, (None, 0)) if turn.number > 0 else (None, 0)
        if plan and plan == previous and played < len(plan):
            self._plans[key] = (plan, played + 1)
            return answer(plan[played])
        if plan:
            self._plans[key] = (plan, 1)
            return answer(plan[0])
        # No plan (the state is lost, e.g. after a slip): any valid action is as good as any.
        return RandomAgent._choose(turn)

    def close(self) -> None:
        self._plans.clear()


#: PPO rollout length per update (SB3's default is 2048).
PPO_N_STEPS = 256


def _cache_root() -> Path:
    root = os.environ.get("LLMGYM_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "llmgym"


class PpoAgent:
    """stable-baselines3 PPO on the discrete / one-hot-grid view of a board env.

    One policy per env id, trained with a fixed seed on levels drawn from training seeds (the
    eval levels come from seeds far away, see :mod:`llmgym.eval_sets`), saved under the cache
    and reloaded on later runs with the same id, timesteps and seed.
    """

    name = "sb3-ppo"

    def __init__(self, timesteps: int = 50_000, seed: int = 0, cache_dir: Path | None = None) -> None:
        if timesteps < 1:
            raise InvalidOptionError(f"PPO timesteps must be >= 1, got {timesteps}.")
        self.timesteps = timesteps
        self.seed = seed
        self.cache_dir = cache_dir or _cache_root() / "sb3"
        self.settings = {"timesteps": timesteps, "seed": seed, "n_steps": PPO_N_STEPS,
                         "policy": "MlpPolicy", "deterministic": True}
        self._model: Any = None

    def supports(self, env: TextEnv) -> bool:
        return type(env).__name__ in BOARD_SPECS

    def prepare(self, env_id: str) -> None:
        self._model = train_ppo(env_id, self.timesteps, self.seed, self.cache_dir)

    def act(self, turns: Sequence[Turn]) -> list[Reply]:
        observations = np.stack([_grid_observation(turn.env) for turn in turns])
        actions, _ = self._model.predict(observations, deterministic=True)
        # The classic view's action i is the env's action_names[i] (see DiscreteActions).
        return [
            Reply(answer(turn.env.action_names[int(action)]))  # type: ignore[attr-defined]
            for turn, action in zip(turns, actions, strict=True)
        ]

    def close(self) -> None:
        self._model = None


def _grid_observation(env: TextEnv) -> np.ndarray:
    spec = BOARD_SPECS[type(env).__name__]
    return encode_board(env.render() or "", spec.symbols, board_shape(env, spec)).reshape(-1)


def train_ppo(env_id: str, timesteps: int, seed: int, cache_dir: Path, n_steps: int = PPO_N_STEPS) -> Any:
    """A PPO policy for ``env_id``: loaded from ``cache_dir`` if trained before, else trained and saved.

    ``n_steps`` (rollout length per update) is smaller than SB3's 2048 so that a short budget
    still makes many updates.
    """
    try:
        import torch
        from stable_baselines3 import PPO
    except ImportError as error:
        raise DependencyNotInstalled(
            f"The sb3-ppo agent needs stable-baselines3; run `pip install 'llmgym[baselines]'` ({error})."
        ) from error
    path = cache_dir / f"{env_id.replace('/', '_')}-ppo-{timesteps}x{n_steps}-seed{seed}.zip"
    if path.is_file():
        return PPO.load(path, device="cpu")
    torch.set_num_threads(1)  # a tiny MLP: more threads only fight over the cores
    env = make_classic_env(env_id)
    model = PPO("MlpPolicy", env, n_steps=n_steps, batch_size=64, seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=timesteps)
    cache_dir.mkdir(parents=True, exist_ok=True)
    model.save(path)
    env.close()
    return model


class JaxPpoAgent:
    """A :mod:`llmgym.jax.ppo` policy on the one-hot board, from a checkpoint folder.

    It plays an env when the env's board has the shape and symbols it was trained on. It
    acts greedily or samples, as its checkpoint says (chosen on validation levels when it
    was trained); samples come from the episode's generator, so episodes replay exactly.
    """

    def __init__(self, checkpoint: str) -> None:
        try:
            from llmgym.jax.ppo import Policy
        except ImportError as error:
            raise DependencyNotInstalled(
                f"The jax-ppo agent needs JAX; run `pip install 'llmgym[jax]'` ({error})."
            ) from error
        self.policy = Policy(checkpoint)
        self.name = f"jax-ppo:{checkpoint}"
        config = self.policy.config
        self.settings = {"checkpoint": checkpoint, "act": self.policy.act_mode, "trained_on": config.env_id,
                         "network": config.network, "seed": config.seed}

    def supports(self, env: TextEnv) -> bool:
        spec = BOARD_SPECS.get(type(env).__name__)
        if spec is None or spec.symbols != self.policy.symbols:
            return False
        return board_shape(env, spec) == self.policy.board[:2]

    def prepare(self, env_id: str) -> None:
        pass

    def act(self, turns: Sequence[Turn]) -> list[Reply]:
        observations = np.stack([_grid_observation(turn.env) for turn in turns])
        probabilities = self.policy.probabilities(observations)
        replies = []
        for turn, weights in zip(turns, probabilities, strict=True):
            if self.policy.act_mode == "greedy":
                action = int(np.argmax(weights))
            else:
                action = int(turn.rng.choice(len(weights), p=weights))
            replies.append(Reply(answer(self.policy.action_names[action])))
        return replies

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------- LLM agents
def windowed(messages: Sequence[Message], history: int) -> list[Message]:
    """System prompt (if any) + the last ``history`` exchanges + the current user turn."""
    head = [messages[0]] if messages and messages[0]["role"] == "system" else []
    body = list(messages[len(head) :])
    return head + body[-(2 * history + 1) :]


class VllmAgent:
    """A chat model behind a token-level generator (the vLLM backend of ``llmgym_train``).

    Arguments:
        generator: a :class:`llmgym_train.generation.base.Generator` (prompts and completions
            are token ids, so the prompt is exactly the chat template's tokens).
        tokenizer: the model's tokenizer (chat template and decoding).
        sampling: sampling settings; ``max_model_len`` must not exceed the generator's.
        name: the row's agent name.
        settings: extra settings recorded with the row (model folder, backend, seed).
    """

    def __init__(
        self,
        generator: Any,
        tokenizer: Any,
        sampling: Sampling,
        name: str,
        settings: dict[str, Any] | None = None,
    ) -> None:
        if sampling.max_model_len > generator.max_model_len:
            raise InvalidOptionError(
                f"max_model_len {sampling.max_model_len} exceeds the generator's {generator.max_model_len}; "
                "lower it or start the generator with a longer context."
            )
        self.generator = generator
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.name = name
        self.settings = {**(settings or {}), **asdict(sampling)}

    @classmethod
    def from_model(
        cls, model: str, sampling: Sampling, seed: int = 0, name: str | None = None, backend: str = "vllm"
    ) -> VllmAgent:
        """Resolve ``model`` (alias, HF folder or run folder) and load it in an in-process generator.

        ``backend``: ``vllm`` (a vLLM engine) or ``hf`` (transformers, no vLLM needed).
        """
        from transformers import AutoTokenizer

        from llmgym_train.generation import make_generator
        from llmgym_train.models import resolve_model

        folder = resolve_model(model)
        generator = make_generator(backend, folder, max_model_len=sampling.max_model_len, seed=seed)  # type: ignore[arg-type]
        settings = {"model": str(folder), "backend": backend, "seed": seed}
        tokenizer = AutoTokenizer.from_pretrained(folder)
        return cls(generator, tokenizer, sampling, name or f"vllm:{model}", settings)

    def supports(self, env: TextEnv) -> bool:
        return True

    def prepare(self, env_id: str) -> None:
        pass

    def act(self, turns: Sequence[Turn]) -> list[Reply]:
        from llmgym_train.generation.base import SamplingSpec

        prompts = [self._prompt(turn.messages) for turn in turns]
        specs = [
            SamplingSpec(
                max_tokens=self.sampling.max_tokens,
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                seed=int(turn.rng.integers(2**31)),
            )
            for turn in turns
        ]
        completions = self.generator.generate(prompts, specs)
        return [
            Reply(
                self.tokenizer.decode(completion.token_ids, skip_special_tokens=True),
                prompt_tokens=len(prompt),
                completion_tokens=len(completion.token_ids),
            )
            for prompt, completion in zip(prompts, completions, strict=True)
        ]

    def _prompt(self, messages: Sequence[Message]) -> list[int]:
        """Token ids of the chat template over the windowed history, cut to fit the context."""
        budget = self.sampling.max_model_len - self.sampling.max_tokens
        history = self.sampling.history
        while True:
            text = self.tokenizer.apply_chat_template(
                windowed(messages, history), tokenize=False, add_generation_prompt=True
            )
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) <= budget or history == 0:
                return ids[-budget:]
            history -= 1

    def close(self) -> None:
        self.generator.close()


class OpenAIAgent:
    """Any OpenAI-compatible chat endpoint (``openai:<base_url>#<model>``).

    The key comes from ``OPENAI_API_KEY``; local servers ignore it, so a placeholder is sent
    when it is unset.
    """

    def __init__(self, base_url: str, model: str, sampling: Sampling, seed: int = 0) -> None:
        try:
            import openai
        except ImportError as error:
            raise DependencyNotInstalled(
                f"The openai agent needs the openai client; run `pip install openai` ({error})."
            ) from error
        self.name = f"openai:{base_url}#{model}"
        self.model = model
        self.sampling = sampling
        self.settings = {"base_url": base_url, "model": model, "seed": seed, **asdict(sampling)}
        self.client = openai.OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "EMPTY"))
        self._pool = ThreadPoolExecutor(max_workers=sampling.concurrency)

    def supports(self, env: TextEnv) -> bool:
        return True

    def prepare(self, env_id: str) -> None:
        pass

    def act(self, turns: Sequence[Turn]) -> list[Reply]:
        requests = [
            (windowed(turn.messages, self.sampling.history), int(turn.rng.integers(2**31))) for turn in turns
        ]
        return list(self._pool.map(lambda request: self._complete(*request), requests))

    def _complete(self, messages: list[Message], seed: int) -> Reply:
        response = self.client.chat.completions.create(
            model=self.model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=self.sampling.max_tokens,
            temperature=self.sampling.temperature,
            top_p=self.sampling.top_p,
            seed=seed,
        )
        usage = response.usage
        return Reply(
            response.choices[0].message.content or "",
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.client.close()


# ---------------------------------------------------------------------- specs
@dataclass(frozen=True)
class AgentOptions:
    """Options shared by every agent a leaderboard run builds.

    Attributes:
        sampling: LLM sampling settings.
        seed: run seed (PPO training, engine seed).
        ppo_timesteps: PPO training steps per env.
        backend: generation backend of ``checkpoint:<dir>`` agents: ``vllm`` or ``hf`` (transformers).
    """

    sampling: Sampling = field(default_factory=Sampling)
    seed: int = 0
    ppo_timesteps: int = 50_000
    backend: str = "vllm"

    def __post_init__(self) -> None:
        if self.backend not in ("vllm", "hf"):
            raise InvalidOptionError(
                f"backend must be 'vllm' or 'hf'; got {self.backend!r}.{did_you_mean(self.backend, ('vllm', 'hf'))}"
            )


def check_agent_spec(spec: str) -> None:
    """Raise :class:`InvalidOptionError` unless ``spec`` has one of the agent forms (nothing is built)."""
    kind, _, argument = spec.partition(":")
    valid = (
        (kind in ("random", "optimal", "sb3-ppo") and not argument)
        or kind == "vllm"
        or (kind in ("checkpoint", "base", "jax-ppo") and bool(argument))
        or (kind == "openai" and "#" in argument)
    )
    if not valid:
        raise InvalidOptionError(
            f"Unknown agent {spec!r}.{did_you_mean(kind, AGENT_KINDS)} Expected one of: random, optimal, "
            "sb3-ppo, jax-ppo:<checkpoint dir>, vllm[:<model>], checkpoint:<dir>, base:<run dir>, "
            "openai:<base_url>#<model> "
            "(e.g. openai:http://127.0.0.1:8000/v1#my-model)."
        )


def is_run_folder(path: str | Path) -> bool:
    """Whether ``path`` is a run folder of ``llmgym-train`` (it holds the run's ``config.yaml``)."""
    return (Path(path).expanduser() / RUN_CONFIG_FILE).is_file()


def make_agent(spec: str, options: AgentOptions) -> Agent:
    """Build the agent ``spec`` names (see the module docstring for the forms)."""
    check_agent_spec(spec)
    kind, _, argument = spec.partition(":")
    if kind == "random":
        return RandomAgent()
    if kind == "optimal":
        return OptimalAgent()
    if kind == "sb3-ppo":
        return PpoAgent(options.ppo_timesteps, options.seed)
    if kind == "jax-ppo":
        return JaxPpoAgent(argument)
    if kind == "vllm":
        return VllmAgent.from_model(argument or "smollm2-135m", options.sampling, options.seed)
    if kind == "checkpoint":
        # The row's name holds the folder as results files hold paths: never the machine's absolute path.
        name = f"checkpoint:{portable_path(argument)}"
        if is_run_folder(argument):
            from llmgym_train.eval.policy import RunAgent  # torch and the trainer's rollout: only for run rows

            return RunAgent.from_run(argument, options, name=name)  # type: ignore[return-value]
        return VllmAgent.from_model(argument, options.sampling, options.seed, name=name, backend=options.backend)
    if kind == "base":
        if not is_run_folder(argument):
            raise InvalidOptionError(
                f"base:{argument} needs a run folder of llmgym-train (one with {RUN_CONFIG_FILE}); for a plain "
                f"model use vllm:{argument}."
            )
        from llmgym_train.eval.policy import RunAgent

        return RunAgent.from_run(argument, options, name=f"base:{portable_path(argument)}", base=True)  # type: ignore[return-value]
    base_url, _, model = argument.rpartition("#")
    return OpenAIAgent(base_url, model, options.sampling, options.seed)
