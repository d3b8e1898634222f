"""`tempering config --from-verl` on verl's own files: its flattened PPO trainer config and a GRPO example
script's overrides (tests/envs/data/verl/SOURCE.md)."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tempering.recipes.reference import verl_yaml
from tempering.verl_names import convert, load, script_overrides

DATA = Path(__file__).parent / "envs" / "data" / "verl"
PPO, GRPO = str(DATA / "ppo_trainer.yaml"), str(DATA / "run_qwen2-7b.sh")


def _read(path):
    return Path(path).read_text()


def test_verls_ppo_trainer_config_is_tempering_ppo():
    c = convert(load([PPO], _read))
    assert c.verb == "ppo"
    k = c.keys
    assert (k["loss.gamma"], k["loss.lam"], k["critic.lr"], k["critic.value_clip"]) == (1.0, 1.0, 1e-5, 0.5)
    assert (k["loss.clip_low"], k["loss.clip_high"], k["loss.dual_clip"]) == (0.2, 0.2, 3.0)
    assert k["loss.mini_batches"] == 1024 // 256 and k["rollout.prompts_per_step"] == 1024
    assert k["rollout.top_k"] == 0 and k["rollout.max_context_tokens"] == 512 + 512
    assert k["run.out_dir"] == "checkpoints/verl_examples/gsm8k"  # its interpolation resolved
    assert k["run.wandb"] == "verl_examples" and k["task.args.train"].endswith("gsm8k/train.parquet")
    assert "trainer.total_epochs=30" in str(c.missing) and "custom_reward_function.path=None" in str(c.missing)
    assert c.unread == [] and c.inert > 200


def test_a_grpo_scripts_overrides_are_tempering_train():
    assert "algorithm.adv_estimator=grpo" in script_overrides(_read(GRPO))
    c = convert(load([PPO, GRPO], _read))
    assert c.verb == "train"
    k = c.keys
    assert k["loss.advantage"] == "grpo" and k["loss.kl_coef"] == 0.001 and k["loss.kl_estimator"] == "low_var_kl"
    assert k["rollout.group_size"] == 5 and k["rollout.max_new_tokens"] == 1024 and k["rollout.backend"] == "vllm"
    assert k["model.name"] == "Qwen/Qwen2-7B-Instruct" and k["run.checkpoint_every"] == 20 and k["run.eval_every"] == 5
    assert "data.filter_overlong_prompts=True" in str(c.missing)
    alone = convert(load([GRPO], _read))  # the script alone: verl's defaults fill in the rest
    assert {k: v for k, v in alone.keys.items() if not k.startswith("run.eval_on")} == {
        k: v for k, v in c.keys.items() if k not in ("run.out_dir", "run.eval_on_start", "optim.betas")
    }


def test_the_converted_yaml_is_a_valid_config_and_the_cli_prints_it(tmp_path, capsys):
    text = verl_yaml([PPO, GRPO])
    assert text.startswith("# tempering train THIS.yaml\n")
    assert yaml.safe_load(text)["loss"]["advantage"] == "grpo"
    assert "for `tempering train`: mapped" in capsys.readouterr().err
    (tmp_path / "nothing.yaml").write_text("lr: 1\n")
    r = subprocess.run(
        [sys.executable, "-m", "tempering.cli", "config", "--from-verl", str(tmp_path / "nothing.yaml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "holds none of verl's sections" in r.stderr


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.adv_estimator=opo", "algorithm.adv_estimator='opo'"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=magic", "loss_mode='magic'"),
        ("actor_rollout_ref.rollout.name=sglang", "rollout.name='sglang'"),
    ],
)
def test_what_has_no_equivalent_is_named(tmp_path, override, message):
    script = tmp_path / "run.sh"
    script.write_text(f"python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n    {override} $@\n")
    c = convert(load([str(script)], _read))
    assert message in str(c.missing)
