"""TRL's GRPOConfig names: the table matches TRL's own fields and defaults, `--from-trl` converts
hand-written configs, and a TRL name given as a key is an error naming tempering's."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from tempering.cli import main
from tempering.config import ConfigError, load_config
from tempering.methods.rl import TrainConfig
from tempering.trl_names import ANY, DEFAULTS, LOSSES, NAMES, NEEDS, NONE, RETIRED, SAME, from_trl

ROOT = Path(__file__).resolve().parents[1]


def convert(tmp_path, capsys, trl: dict, suffix=".yaml") -> tuple[int, dict, str, str]:
    path = tmp_path / f"grpo{suffix}"
    path.write_text(json.dumps(trl) if suffix == ".json" else yaml.safe_dump(trl, sort_keys=False))
    rc = main(["config", "--from-trl", str(path)])
    out, err = capsys.readouterr()
    return rc, (yaml.safe_load(out) if rc == 0 else {}), out, err


def test_hand_written_config(tmp_path, capsys):
    trl = {
        "output_dir": "out/grpo",
        "num_generations": 4,
        "learning_rate": 2e-6,
        "beta": 0.04,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "max_completion_length": 64,
        "loss_type": "dr_grpo",
        "scale_rewards": False,
        "max_steps": 200,
        "warmup_steps": 0.1,
        "lr_scheduler_type": "cosine",
        "per_device_train_batch_size": 8,
        "entropy_coef": 0.0,
        "logging_steps": 5,
    }
    rc, cfg, _, err = convert(tmp_path, capsys, trl)
    assert rc == 0
    assert cfg["rollout"] == {"group_size": 4, "max_new_tokens": 64, "prompts_per_step": 2}  # 8 answers / 4
    assert cfg["loss"] == {
        "clip_low": 0.2,
        "clip_high": 0.28,
        "dual_clip": None,  # TRL's delta unset: no dual clip
        "kl_coef": 0.04,
        "kl_bias_correction": True,  # TRL's default, read since beta > 0
        "loss_agg": "seq-mean-token-sum-norm",
        "advantage": "dr_grpo",
        "autocast": "bf16",  # TRL's bf16, True unless fp16 is set
        "entropy_coef": 0.0,
    }
    assert cfg["optim"] == {"lr": 2e-6, "warmup_steps": 20, "schedule": "cosine", "min_lr_ratio": 0.0}
    assert cfg["run"] == {"out_dir": "out/grpo", "steps": 200, "seed": 42, "checkpoint_every": 500}
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("mapped 14 keys (output_dir, num_generations, learning_rate, beta, epsilon,")
    assert "TRL's defaults of delta, seed, save_steps, use_bias_correction_kl" in err
    assert "gradient_accumulation_steps" in err and "not mapped: none" in err
    # logging_steps, and TRL's default vllm_importance_sampling_correction=True without use_vllm
    assert err.strip().endswith("keys that change nothing here: 2")
    load_config(TrainConfig, None, [f"{k}.{kk}={json.dumps(v)}" for k, s in cfg.items() for kk, v in s.items()])


def test_defaults_when_left_out_and_values_without_equivalent(tmp_path, capsys):
    rc, cfg, _, err = convert(tmp_path, capsys, {"epsilon": 0.3, "loss_type": "grpo", "top_k": 5}, ".json")
    assert rc == 0
    # epsilon_high defaults to epsilon; bf16 (None) to True, TRL's mixed precision: bf16 autocast
    assert cfg["loss"] == {
        "clip_low": 0.3,
        "clip_high": 0.3,
        "dual_clip": None,
        "autocast": "bf16",
        "loss_agg": "seq-mean-token-mean",
    }
    assert cfg["rollout"] == {"top_k": 5, "max_new_tokens": 512, "prompts_per_step": 1}  # TRL's 8 answers / 8
    assert cfg["optim"] == {"schedule": "linear", "min_lr_ratio": 0.0}  # TRL's default decay; its lr is ours
    # CISPO bounds the ratio at epsilon_high, which defaults to epsilon: a bound below 1 has no equivalent
    rc, cfg, _, err = convert(tmp_path, capsys, {"epsilon": 0.3, "loss_type": "cispo"}, ".json")
    assert rc == 0 and "loss_type='cispo' (loss_type=cispo bounds the ratio at epsilon_high=0.3" in err
    assert "max_steps=-1 (TRL then counts epochs; set run.steps)" in err
    # Trainer keeps every checkpoint at save_total_limit 0; tempering's 0 keeps none, so it is not carried over
    rc, cfg, _, err = convert(tmp_path, capsys, {"save_total_limit": 0}, ".json")
    assert rc == 0 and "keep_checkpoints" not in cfg.get("run", {})
    assert "save_total_limit=0 (Trainer then keeps every checkpoint" in err


def test_bf16_is_bf16_autocast_where_the_machine_computes_in_bf16(tmp_path, capsys, monkeypatch):
    from tempering.recipes import reference

    for here in (True, False):
        monkeypatch.setattr(reference, "_bf16_computes_here", lambda here=here: here)
        for bf16, autocast in ((True, "bf16" if here else "none"), (False, "none")):
            rc, cfg, _, err = convert(tmp_path, capsys, {"bf16": bf16})
            assert rc == 0 and cfg["loss"].get("autocast", "none") == autocast, err
            assert ("this machine does not compute in bf16" in err) == (bf16 and not here)


def test_switches_read_only_with_another(tmp_path, capsys):
    """TRL reads use_bias_correction_kl only with beta > 0 and the vLLM keys only with use_vllm."""
    off = {"beta": 0.0, "use_bias_correction_kl": True, "use_vllm": False, "vllm_mode": "server"}
    rc, cfg, _, err = convert(tmp_path, capsys, off)
    assert rc == 0 and "kl_bias_correction" not in cfg["loss"] and cfg["rollout"]["backend"] == "hf"
    on = {"beta": 0.1, "use_bias_correction_kl": True, "use_vllm": True, "vllm_mode": "colocate"}
    rc, cfg, _, err = convert(tmp_path, capsys, on)
    assert rc == 0 and cfg["loss"]["kl_bias_correction"] is True
    assert cfg["rollout"]["backend"] == "vllm" and cfg["rollout"]["vllm"] == {"mode": "colocated"}


def test_refuses_keys_trl_does_not_have(tmp_path, capsys):
    rc, _, out, err = convert(tmp_path, capsys, {"num_generations": 8, "lr": 1e-6, "rollout": {}})
    assert rc == 2 and out == ""
    assert err.strip().endswith(
        "neither GRPOConfig fields nor `trl grpo` script arguments: lr, rollout; fix or remove them"
    )


def test_refuses_values_of_the_wrong_type(tmp_path, capsys):
    rc, _, out, err = convert(tmp_path, capsys, {"max_steps": "many"})
    assert rc == 2 and out == "" and err.strip().endswith("max_steps='many' is not a number; fix the file")


def test_refuses_what_tempering_refuses(tmp_path, capsys):
    rc, _, out, err = convert(tmp_path, capsys, {"num_generations": 0})
    assert rc == 2 and out == "" and "rollout.group_size" in err


@pytest.mark.parametrize(
    "override,hint",
    [
        ("num_generations=8", "'num_generations' is TRL's name: write rollout.group_size=8"),
        ("learning_rate=0.000001", "'learning_rate' is TRL's name: write optim.lr=1e-06"),
        ("loss_type=grpo", "write loss.loss_agg=seq-mean-token-mean"),
        ("scale_rewards=false", "write loss.advantage=dr_grpo"),
        ("loss_type=cispo", "'loss_type' is TRL's name for loss.loss_agg, but loss_type='cispo' has none"),
        ("loss_type=sapo", "write loss.loss_agg=seq-mean-token-mean loss.policy_loss=sapo"),
        ("importance_sampling_level=sequence", "write loss.policy_loss=gspo"),
        ("rollout.epsilon=0.1", "'epsilon' is TRL's name: write loss.clip_low=0.1"),
        ("max_steps=abc", "'max_steps' is TRL's name for run.steps"),
        ("warmup_ratio=0.1", "'warmup_ratio' is older TRL's; today's warmup_steps below 1 is the ratio"),
        ("per_device_train_batch_size=4", "'per_device_train_batch_size' is TRL's name for rollout.prompts_per_step"),
        ("vllm_importance_sampling_correction=1", "and vllm_importance_sampling_correction=1 is not true or false"),
    ],
)
def test_unknown_key_names_tempering_key(override, hint):
    with pytest.raises(ConfigError, match="unknown key") as e:
        load_config(TrainConfig, None, [override])
    assert hint in str(e.value)


def test_hint_only_for_keys_the_verb_has():
    from tempering.methods.pretrain import PretrainConfig

    with pytest.raises(ConfigError) as e:
        load_config(PretrainConfig, None, ["beta=0.04"])
    assert "TRL" not in str(e.value)


def test_docs_name_every_key():
    """Every mapped name, and every one that can change training, is in docs/from_trl.md."""
    doc = (ROOT / "docs" / "from_trl.md").read_text()
    for name in [*SAME, *(k for k, (_, inactive) in NONE.items() if inactive is not ANY)]:
        assert f"`{name}" in doc, name


# against TRL itself


@pytest.fixture
def grpo():
    return pytest.importorskip("trl").GRPOConfig


def fields(grpo) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(grpo)}


def test_every_name_is_a_grpo_config_field(grpo):
    assert sorted(NAMES - set(fields(grpo))) == []


def test_retired_names_are_not_fields(grpo):
    assert sorted(set(RETIRED) & set(fields(grpo))) == []


def test_every_grpo_config_field_is_known(grpo):
    assert sorted(set(fields(grpo)) - NAMES) == []


def test_defaults_are_trls(grpo):
    f = fields(grpo)
    assert {k: f[k].default for k in DEFAULTS} == DEFAULTS


def test_other_mapped_defaults_agree_with_temperings(grpo):
    """Where DEFAULTS says nothing, TRL's default converts to tempering's own default."""
    f, ours = fields(grpo), TrainConfig()
    for name in set(SAME) - set(DEFAULTS) - {"output_dir", "save_total_limit"}:
        keys, _, _, _ = from_trl({name: f[name].default, "use_vllm": True})  # use_vllm: the vllm_* keys count
        section, *rest = SAME[name].split(".")
        here = getattr(ours, section)
        for part in rest:
            here = getattr(here, part)
        if SAME[name] not in keys:  # TRL reads it only with another key's value, or its default sets nothing
            assert name in NEEDS or name in LOSSES, name
            continue
        value = keys[SAME[name]]
        assert here == (tuple(value) if isinstance(value, list) else value) or name == "use_vllm", name


def test_trls_own_defaults_convert(grpo, tmp_path, capsys):
    """A whole GRPOConfig as asdict dumps it: every key known, the result a valid tempering config."""
    full = json.loads(json.dumps(dataclasses.asdict(grpo(output_dir=str(tmp_path), use_cpu=True)), default=str))
    keys, mapped, missing, inert = from_trl(full)
    assert len(mapped) + sum(map(len, missing.values())) + inert == len(full)
    assert keys["rollout.group_size"] == 8 and keys["optim.lr"] == 1e-6 and keys["loss.clip_high"] == 0.2
    rc, cfg, _, err = convert(tmp_path, capsys, full, ".json")
    assert rc == 0, err
    assert cfg["run"]["out_dir"] == str(tmp_path)
    assert cfg["optim"]["schedule"] == "linear" and cfg["rollout"]["prompts_per_step"] == 1


@pytest.mark.parametrize(
    "trl,want",
    [
        ({"loss_type": "dapo"}, {"loss.loss_agg": "token-mean"}),
        ({"loss_type": "bnpo"}, {"loss.loss_agg": "token-mean", "loss.norm_scope": "micro_batch"}),
        (
            {"loss_type": "luspo", "importance_sampling_level": "sequence"},
            {"loss.policy_loss": "gspo", "loss.loss_agg": "seq-mean-token-sum"},
        ),
        ({"loss_type": "grpo", "importance_sampling_level": "sequence"}, {"loss.policy_loss": "gspo"}),
        (
            {"loss_type": "cispo", "epsilon_high": 5.0},
            {"loss.policy_loss": "cispo", "loss.clip_low": 1.0, "loss.clip_high": 4.0},
        ),
        ({"loss_type": "sapo", "sapo_temperature_pos": 0.5}, {"loss.policy_loss": "sapo", "loss.sapo_tau_pos": 0.5}),
        ({"loss_type": "vespo", "vespo_k_pos": 1.5}, {"loss.policy_loss": "vespo", "loss.vespo_k_pos": 1.5}),
        (
            {"entropy_coef": 0.01, "top_entropy_quantile": 0.2},
            {"loss.entropy_coef": 0.01, "loss.entropy_top_quantile": 0.2},
        ),
        (
            {"use_adaptive_entropy": True, "entropy_target": 0.3},
            {"loss.entropy_adaptive": True, "loss.entropy_target": 0.3},
        ),
        (
            {"multi_objective_aggregation": "normalize_then_sum"},
            {"loss.advantage": "gdpo", "loss.credit_args": {"eps": 1e-4, "batch_norm": "episodes"}},
        ),
        ({"off_policy_mask_threshold": 0.5}, {"loss.off_policy_mask_threshold": 0.5}),
    ],
)
def test_loss_settings_convert(trl, want, tmp_path, capsys):
    keys, _, missing, _ = from_trl({"max_steps": 10, "lr_scheduler_type": "constant", **trl})
    assert not missing and {k: keys[k] for k in want} == want
    rc, _, _, err = convert(tmp_path, capsys, {"max_steps": 10, "lr_scheduler_type": "constant", **trl})
    assert rc == 0, err  # a valid tempering config: no key the chosen loss does not read


def test_settings_of_another_loss_are_read_only_with_it():
    """sapo_* without loss_type=sapo, an entropy target without adaptive entropy: TRL ignores them, and so does
    the conversion (they would be refused here)."""
    keys, mapped, _, inert = from_trl({"sapo_temperature_pos": 0.5, "entropy_target": 0.3, "max_steps": 1})
    assert "loss.sapo_tau_pos" not in keys and "loss.entropy_target" not in keys and inert >= 2


# `trl grpo --config` files: the script's arguments beside GRPOConfig's


@pytest.fixture
def script_classes():
    pytest.importorskip("trl")
    from trl import DatasetMixtureConfig, ModelConfig
    from trl.scripts.grpo import GRPOScriptArguments

    return GRPOScriptArguments, ModelConfig, DatasetMixtureConfig


def test_script_names_are_the_scripts_fields(script_classes):
    from trl import rewards

    from tempering.trl_names import REWARDS, SCRIPT_DEFAULTS, SCRIPT_NAMES, SCRIPT_NONE

    theirs = {f.name: f for c in script_classes for f in dataclasses.fields(c)}
    assert sorted(SCRIPT_NAMES ^ set(theirs)) == []
    assert {k: theirs[k].default for k in SCRIPT_DEFAULTS} == SCRIPT_DEFAULTS
    for name, (_, inactive) in SCRIPT_NONE.items():  # TRL's default never reads as a gap, but LoRA's dropout
        if name == "lora_dropout":
            continue
        f = theirs[name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        assert inactive is ANY or default in inactive, name
    assert all(callable(getattr(rewards, r)) for r in REWARDS)


def test_a_trl_grpo_script_config_converts(script_classes, tmp_path, capsys, monkeypatch):
    from trl import GRPOConfig, TrlParser, rewards

    from tempering.envs.rewards import resolve_rewards

    script = {
        "model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "dataset_name": "trl-lib/DeepMath-103K",
        "reward_funcs": ["accuracy_reward", "think_format_reward", "my_lib.rewards.custom_reward"],
        "use_peft": True,
        "lora_r": 8,
        "lora_dropout": 0.0,
        "lora_target_modules": ["q_proj", "v_proj"],
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 2,
        "num_generations": 4,
        "learning_rate": 1e-5,
        "lr_scheduler_type": "linear",
        "warmup_ratio": 0.1,
        "max_steps": 100,
        "bf16": False,
        "output_dir": "out/grpo",
    }
    path = tmp_path / "grpo.yaml"
    legal = {k: v for k, v in script.items() if k != "warmup_ratio"}  # older TRL's, which today's refuses
    path.write_text(yaml.safe_dump(legal))
    parser = TrlParser((*script_classes[:2], GRPOConfig, script_classes[2]))
    monkeypatch.setattr("sys.argv", ["trl", "--config", str(path)])
    parsed = parser.parse_args_and_config()  # TRL's own parser reads the file as `trl grpo` would
    assert parsed[1].lora_r == 8 and parsed[2].per_device_train_batch_size == 8
    rc, cfg, _, err = convert(tmp_path, capsys, script)
    assert rc == 0, err
    assert cfg["model"] == {
        "name": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "lora_rank": 8,
        "lora_alpha": 32,
        "lora_targets": ["q_proj", "v_proj"],
    }
    assert cfg["task"] == {
        "family": "dataset",
        "args": {
            "train": "trl-lib/DeepMath-103K",
            "reward": [
                "trl.rewards:accuracy_reward",
                "trl.rewards:think_format_reward",
                "my_lib.rewards:custom_reward",
            ],
        },
    }
    assert cfg["rollout"]["prompts_per_step"] == 4  # 8 x 2 answers in groups of 4
    assert cfg["optim"] == {"lr": 1e-5, "schedule": "linear", "min_lr_ratio": 0.0, "warmup_steps": 10}
    assert "warmup_ratio" in err.split(";")[0] and "not mapped: none" in err
    resolved = resolve_rewards(cfg["task"]["args"]["reward"][:2], None)
    assert [r.fn for r in resolved] == [rewards.accuracy_reward, rewards.think_format_reward]


def test_script_settings_without_equivalent_are_named(script_classes, tmp_path, capsys):
    script = {
        "reward_model_name_or_path": "some/rm",
        "use_peft": True,
        "reward_funcs": ["get_soft_overlong_punishment"],
    }
    rc, cfg, _, err = convert(tmp_path, capsys, {**script, "num_generations": 3})
    assert rc == 0, err
    assert "reward_model_name_or_path='some/rm' (rewards are functions" in err
    assert "lora_dropout=0.05 (LoRA adapters train without dropout)" in err  # ModelConfig's default, with use_peft
    assert "get_soft_overlong_punishment is not one of" in err
    assert "per_device_train_batch_size=8, gradient_accumulation_steps=1 (a step's 8 answers" in err
    # without use_peft the LoRA keys change nothing
    rc, cfg, _, err = convert(tmp_path, capsys, {"lora_r": 4, "lora_dropout": 0.1})
    assert rc == 0 and "model" not in cfg and "keys that change nothing here" in err
