"""Config building: YAML + overrides, type coercion, unknown keys, invalid combinations, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgym.error import InvalidOptionError, UnknownOptionError
from llmgym_train.cli import build_parser, config_from_args, main
from llmgym_train.config import EnvSpec, TrainConfig, leaf_keys, load_config, save_config
from llmgym_train.eval.policy import PlaySettings


def test_yaml_then_overrides_then_values(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "algo: ppo\n"
        "train_envs:\n  - {id: llmgym/FrozenLake-v0, n_groups: 2, options: {max_turns: 3}}\n"
        "optim: {lr: 1.0e-4}\n"
        "rollout: {group_size: 1}\n"
    )
    config = load_config(path, ["optim.lr=3e-6", "loss.filter_void_turns=true"], {"seed": 7})
    assert config.algo == "ppo"
    assert config.optim.lr == pytest.approx(3e-6)
    assert config.loss.filter_void_turns is True
    assert config.seed == 7
    assert config.train_envs == [EnvSpec("llmgym/FrozenLake-v0", 2, {"max_turns": 3})]
    assert config.episodes_per_step == 2


def test_saved_config_loads_back_identically(tmp_path: Path) -> None:
    config = load_config(overrides=["rollout.group_size=4", "train_envs=llmgym/FrozenLake-v0:3"])
    save_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config


def test_unknown_key_suggests_the_dotted_key() -> None:
    with pytest.raises(UnknownOptionError, match=r"Unknown config key 'group_size'\. Did you mean 'rollout\.group_size'\?"):
        load_config(overrides=["group_size=4"])
    with pytest.raises(UnknownOptionError, match=r"'optim\.lrr'\. Did you mean 'optim\.lr'\?"):
        load_config(overrides=["optim.lrr=1e-5"])
    with pytest.raises(UnknownOptionError, match=r"Did you mean 'n_groups'\?"):
        load_config(values={"train_envs": [{"id": "llmgym/FrozenLake-v0", "ngroups": 2}]})


def test_closed_sets_and_ranges_are_checked_with_exact_messages() -> None:
    with pytest.raises(InvalidOptionError) as info:
        load_config(overrides=["loss.aggregation=token_mean"])
    assert str(info.value) == (
        "loss.aggregation must be one of 'token-mean', 'seq-mean-token-sum', 'seq-mean-token-mean'; "
        "got 'token_mean'. Did you mean 'token-mean'?"
    )
    with pytest.raises(InvalidOptionError, match=r"optim\.lr must be in \(0\.0, inf\]; got -1\.0\."):
        load_config(overrides=["optim.lr=-1"])
    with pytest.raises(InvalidOptionError, match="takes a number"):
        load_config(overrides=["optim.lr=fast"])
    with pytest.raises(InvalidOptionError, match=r"optim\.lr_schedule must be one of .*Did you mean 'cosine'\?"):
        load_config(overrides=["optim.lr_schedule=cosin"])
    with pytest.raises(InvalidOptionError, match=r"optim\.lr_final must be in \[0\.0, 1\.0\]"):
        load_config(overrides=["optim.lr_final=1.5"])
    with pytest.raises(InvalidOptionError, match=r"both 0, so loss\.credit=gigpo gives every sample a zero advantage"):
        load_config(overrides=["loss.credit=gigpo", "rollout.layout=turn", "loss.step_weight=0", "loss.episode_weight=0"])
    assert load_config(overrides=["loss.credit=gigpo", "rollout.layout=turn", "loss.episode_weight=0"]).loss.episode_weight == 0.0


def test_a_temperature_vllm_refuses_is_refused_at_load_with_the_fix() -> None:
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    from llmgym_train.config import VLLM_MAX_TEMPERATURE

    SamplingParams(temperature=VLLM_MAX_TEMPERATURE)  # the limit is vLLM's own
    with pytest.raises(VLLMValidationError, match="temperature"):
        SamplingParams(temperature=VLLM_MAX_TEMPERATURE + 0.5)
    refused = r"rollout\.temperature=2\.5 is above 2\.0.*rollout\.backend=hf, or rollout\.choices"
    with pytest.raises(InvalidOptionError, match=refused):
        load_config(overrides=["rollout.temperature=2.5"])
    assert load_config(overrides=["rollout.temperature=2.5", "rollout.backend=hf"]).rollout.temperature == 2.5
    # A one-token choice above the limit is drawn by the vLLM backend from the engine's scores.
    choice = ["rollout.temperature=6", 'rollout.choices=["Up","Down"]', "rollout.max_new_tokens=1"]
    assert load_config(overrides=choice).rollout.temperature == 6.0


def test_learning_rate_schedules_run_from_lr_to_its_final_fraction() -> None:
    from llmgym_train.update import scheduled_lr

    for kind in ("linear", "cosine"):
        optim = load_config(overrides=["optim.lr=0.02", f"optim.lr_schedule={kind}", "optim.lr_final=0.1"]).optim
        assert scheduled_lr(optim, 0.0) == pytest.approx(0.02)
        assert scheduled_lr(optim, 1.0) == scheduled_lr(optim, 7.0) == pytest.approx(0.002)
        assert scheduled_lr(optim, 0.5) == pytest.approx(0.011)  # both are halfway at the middle
    linear = load_config(overrides=["optim.lr=0.02", "optim.lr_schedule=linear", "optim.lr_final=0"]).optim
    cosine = load_config(overrides=["optim.lr=0.02", "optim.lr_schedule=cosine", "optim.lr_final=0"]).optim
    assert scheduled_lr(linear, 0.25) == pytest.approx(0.015)
    assert scheduled_lr(cosine, 0.25) == pytest.approx(0.01 * (1 + 2**-0.5))  # cosine stays higher early
    assert scheduled_lr(load_config().optim, 0.9) == load_config().optim.lr  # constant by default
    warm = load_config(overrides=["optim.lr=0.02", "optim.warmup_steps=4", "optim.lr_schedule=linear", "optim.lr_final=0"]).optim
    assert [scheduled_lr(warm, 0.0, step) for step in range(5)] == pytest.approx([0.005, 0.01, 0.015, 0.02, 0.02])
    assert scheduled_lr(warm, 0.5, 1) == pytest.approx(0.005)  # half the warmup of half the decayed rate
    with pytest.raises(InvalidOptionError, match="warmup_steps"):
        load_config(overrides=["optim.warmup_steps=-1"])


def test_grpo_with_group_size_one_is_rejected() -> None:
    with pytest.raises(InvalidOptionError) as info:
        TrainConfig(algo="grpo", rollout=load_config(overrides=["algo=ppo", "rollout.group_size=1"]).rollout)
    assert "rollout.group_size must be >= 2; got 1" in str(info.value)
    assert load_config(overrides=["algo=reinforce_pp", "rollout.group_size=1"]).rollout.group_size == 1


def test_every_field_is_documented_where_declared() -> None:
    import dataclasses
    import inspect
    import typing

    sections = [TrainConfig, EnvSpec] + [
        hint for hint in typing.get_type_hints(TrainConfig).values() if dataclasses.is_dataclass(hint)
    ]
    for section in sections:
        lines = [line.strip() for line in inspect.getsource(section).splitlines()]
        for declared in dataclasses.fields(section):
            index = next(i for i, line in enumerate(lines) if line.startswith(f"{declared.name}:"))
            assert lines[index - 1].startswith("#:"), f"{section.__name__}.{declared.name} has no '#:' doc line"


def test_cli_flags_build_an_env_mixture() -> None:
    args = build_parser().parse_args(
        ["--env", "llmgym/FrozenLake-v0:8", "--env", "llmgym/Sokoban-v0:4", "--algo", "ppo", "optim.lr=2e-5"]
    )
    config = config_from_args(args)
    assert [(spec.id, spec.n_groups) for spec in config.train_envs] == [
        ("llmgym/FrozenLake-v0", 8), ("llmgym/Sokoban-v0", 4)
    ]
    assert config.validation_envs == config.train_envs
    assert config.optim.lr == pytest.approx(2e-5)


def test_cli_rejects_a_bad_config_before_loading_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--env", "llmgym/FrozenLake-v0:x"]) == 2
    assert "ID:N_GROUPS" in capsys.readouterr().err
    assert main(["--algo", "grpo", "rollout.group_size=1", "--model", "/nonexistent"]) == 2
    assert "group_size must be >= 2" in capsys.readouterr().err


def test_unknown_env_ids_and_agent_names_fail_at_config_load_with_a_suggestion() -> None:
    with pytest.raises(InvalidOptionError, match="Unknown env id 'llmgym/FrozenLak-v0'. Did you mean 'llmgym/FrozenLake-v0'"):
        load_config(overrides=["train_envs=llmgym/FrozenLak-v0:2"])
    with pytest.raises(InvalidOptionError, match="Did you mean 'llmgym/FrozenLake-v0'"):  # not Gymnasium's own
        load_config(values={"train_envs": ["FrozenLake-v0"]})
    with pytest.raises(InvalidOptionError, match=r"Did you mean 'llmgym/Sokoban-v[01]'"):
        load_config(values={"eval_envs": [{"id": "llmgym/Sokoban-v9"}]})
    with pytest.raises(InvalidOptionError, match="Unknown agent 'chian'. Did you mean 'chain'"):
        load_config(overrides=["rollout.agent=chian"])
    assert load_config(overrides=["rollout.agent=self-play"]).rollout.agent == "self-play"


def test_cli_rejects_an_unknown_env_or_agent_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The model does not exist: reaching it would fail with exit code 1 and a model error.
    missing = str(tmp_path / "no-model")
    assert main(["--env", "llmgym/FrozenLak-v0:2", "--model", missing, "--output", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert "config error" in error and "Did you mean 'llmgym/FrozenLake-v0'" in error
    assert main(["--model", missing, "--output", str(tmp_path / "run"), "rollout.agent=self_play"]) == 2
    assert "Did you mean 'self-play'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists(), "nothing is written before the config holds"


def test_choices_need_one_token_turns_and_distinct_replies() -> None:
    from llmgym_train.config import load_config

    config = load_config(None, ['rollout.choices=["Left","Down","Right","Up"]', "rollout.max_new_tokens=1"])
    assert config.rollout.choices == ["Left", "Down", "Right", "Up"]
    with pytest.raises(InvalidOptionError, match="max_new_tokens must be 1"):
        load_config(None, ['rollout.choices=["Left","Down"]'])
    with pytest.raises(InvalidOptionError, match="distinct"):
        load_config(None, ['rollout.choices=["Left","Left"]', "rollout.max_new_tokens=1"])


def test_an_evaluation_cut_shorter_than_its_env_allows_is_refused_unless_asked_for() -> None:
    from llmgym_train.eval.policy import PlaySettings

    envs = {"train_envs": [{"id": "llmgym/Sokoban-v1", "options": {"max_turns": 6}}],
            "eval_envs": [{"id": "llmgym/Sokoban-v1", "options": {"max_turns": 30}}]}
    with pytest.raises(InvalidOptionError, match=r"rollout.max_turns=4 would also stop the evaluation's .* "
                                                 r"allows 30 turns. Set eval.max_turns=0"):
        load_config(values={**envs, "rollout": {"max_turns": 4}})
    full = load_config(values={**envs, "rollout": {"max_turns": 4}, "eval": {"max_turns": 0}})
    assert PlaySettings.of_run(full.rollout, full.eval).max_turns is None
    cut = load_config(values={**envs, "rollout": {"max_turns": 4}, "eval": {"max_turns": 4}})
    assert PlaySettings.of_run(cut.rollout, cut.eval).max_turns == 4
    # The default still plays the rollout's limit where it cuts nothing (the calculator recipe's last-turn answer).
    same = load_config(values={**envs, "rollout": {"max_turns": 30}})
    assert PlaySettings.of_run(same.rollout, same.eval).max_turns == 30


def test_an_empty_stop_text_is_refused_with_an_example() -> None:
    with pytest.raises(InvalidOptionError, match=r"rollout.stop=\[</answer>\]"):
        load_config(overrides=["rollout.stop=['']"])
    config = load_config(overrides=["rollout.stop=[</answer>]"])
    assert config.rollout.stop == ["</answer>"]
    assert PlaySettings.of_run(config.rollout, config.eval).stop == ("</answer>",)  # the evaluation stops alike
