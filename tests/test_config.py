import ast

import pytest

from tempering.config import load_config
from tempering.errors import ConfigError
from tempering.methods.rl import TrainConfig


def test_overrides_and_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("rollout:\n  group_size: 4\nloss:\n  advantage: rloo\n")
    cfg = load_config(TrainConfig, p, ["run.steps=7", "optim.lr=1e-4", 'rollout.stop=["\\n"]'])
    assert cfg.rollout.group_size == 4 and cfg.loss.advantage == "rloo" and cfg.run.steps == 7 and cfg.optim.lr == 1e-4
    assert cfg.rollout.stop == ["\n"]


def test_unknown_key_names_it_and_lists_allowed():
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, None, ["rollout.group_sise=4"])
    assert "rollout.group_sise" in str(e.value) and "group_size" in str(e.value)


def test_bad_value_is_named():
    with pytest.raises(ConfigError, match="rollout.group_size"):
        load_config(TrainConfig, None, ["rollout.group_size=0"])
    with pytest.raises(ConfigError, match="loss.loss_agg"):
        load_config(TrainConfig, None, ["loss.loss_agg=sum"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(TrainConfig, "/nonexistent.yaml")


def test_verl_and_trl_kl_options():
    cfg = load_config(
        TrainConfig, None, ["loss.kl_coef=0.1", "loss.kl_estimator=low_var_kl", "loss.kl_bias_correction=true"]
    )
    s = cfg.loss.update_settings(1.0, 16)
    assert (s.kl_estimator, s.kl_bias_correction, s.kl_coef) == ("low_var_kl", True, 0.1)
    # without a KL loss term both would do nothing: refused, naming the key and the way out
    for key in ("loss.kl_estimator=abs", "loss.kl_bias_correction=true"):
        with pytest.raises(ConfigError, match=key.split("=")[0] + ".*loss.kl_coef > 0"):
            load_config(TrainConfig, None, [key])
    with pytest.raises(ConfigError, match="loss.kl_bias_correction"):
        load_config(TrainConfig, None, ["loss.kl_coef=0.1", "loss.kl_in_reward=true", "loss.kl_bias_correction=true"])


def test_group_size_one_warns_that_group_relative_advantages_vanish():
    with pytest.warns(UserWarning, match="group_size=1.*loss.advantage=grpo gives no update a signal"):
        load_config(TrainConfig, None, ["rollout.group_size=1"])
    with pytest.warns(UserWarning, match="only the within-episode part of loss.advantage=kevin"):
        load_config(TrainConfig, None, ["rollout.group_size=1", "loss.advantage=kevin"])


def test_the_stored_reference_refuses_only_what_the_schema_refuses_and_says_the_same():
    """`check_keys` (no torch) against `build` (the schema): on every plain-typed key of `train`, for
    values a YAML line can give, a value the stored rows refuse is refused by the schema in the same words
    (so nothing the schema takes is refused early), and the wrong values of each type are caught."""
    from tempering.config import build, check_keys, describe
    from tempering.errors import ConfigError
    from tempering.recipes.reference import stored_keys
    from tempering.recipes.verbs import schema

    rows = stored_keys()["train"]
    values = ["abc", "5", " 5 ", "5.0", "1e3", "1e-3", "inf", "yes", "TRUE", "maybe", ""]
    values += [5, 5.5, 0, 1, 2, 0.0, 1.0, 2.0, -1, -0.5, 0.5, 1e9, True, False, None, [1], {"a": 1}, "-1", "0"]
    caught = set()
    for key, tname, *_ in rows:
        choices = ast.literal_eval(f"({tname[8:-1]},)") if tname.startswith("Literal[") else ()
        if tname.partition(" (")[0].removesuffix(" | None") not in ("int", "float", "bool", "str") and not choices:
            continue
        *sections, leaf = key.split(".")
        for v in [*values, *choices]:
            data: dict = {}
            node = data
            for sec in sections:
                node = node.setdefault(sec, {})
            node[leaf] = v
            try:
                check_keys(rows, data)
            except ConfigError as fast:
                with pytest.raises(ConfigError) as full:
                    build(schema("train"), data)
                assert str(full.value) == str(fast), (key, v)
                caught.add((tname, repr(v)))
    plain = {(t.partition(" (")[0], v) for t, v in caught}
    assert {("int", "'abc'"), ("int", "5.5"), ("float", "'abc'"), ("bool", "'maybe'"), ("str", "5")} <= plain
    assert ("Literal['none', 'bf16']", "'abc'") in caught  # a choice of strings (loss.autocast)
    assert ("int (>= 1)", "0") in caught and ("float (> 0)", "'0'") in caught  # ranges (rollout.group_size, optim.lr)
    assert describe(schema("train")) == [tuple(r) for r in rows]


CLIP = ("loss.clip_low", "loss.clip_high", "loss.dual_clip")


def test_only_a_clipped_loss_has_the_clip_keys(capsys):
    """The PPO-clip keys are in the `loss` section of the verbs whose loss clips the ratio and nowhere else:
    `tempering config rft` does not list them, and one given to rft is an unknown key, refused from the
    stored reference (before torch) and by the schema in the same words, naming the keys rft has."""
    from tempering.cli import main
    from tempering.config import build, check_keys
    from tempering.recipes.reference import stored_keys
    from tempering.recipes.verbs import schema

    keys = {verb: [r[0] for r in rows] for verb, rows in stored_keys().items()}
    with_loss = {verb for verb, ks in keys.items() if any(k.startswith("loss.") for k in ks)}
    clipped = {verb for verb, ks in keys.items() if all(k in ks for k in CLIP)}
    assert with_loss - clipped == {"rft", "pretrain"}, "a verb whose loss does not clip: add it to the checks below"
    assert {"train", "ppo", "distill", "tu-opd", "direct-opd", "rgrpo", "cuda-agent"} <= clipped
    for verb in with_loss - clipped:
        assert main(["config", verb]) == 0
        out = capsys.readouterr().out
        assert "| `loss.loss_agg` |" in out and not any(f"`{k}`" in out for k in CLIP)
        for key in CLIP:
            leaf = key.split(".")[1]
            with pytest.raises(ConfigError) as fast:
                check_keys(stored_keys()[verb], {"loss": {leaf: 0.1}})
            with pytest.raises(ConfigError) as full:
                build(schema(verb), {"loss": {leaf: 0.1}})
            why = str(full.value)
            assert str(fast.value) == why
            assert f"unknown key '{key}'; " in why and "allowed here: loss_agg, ppo_epochs" in why
        assert main([verb, "loss.clip_low=0.1"]) == 2
        assert "unknown key 'loss.clip_low'" in capsys.readouterr().err


def test_a_loss_without_the_clip_keys_keeps_the_clip_defaults():
    """A loss section without the clip hands the update the same settings as the clipped section's
    defaults (what those losses ran with when the keys were there and refused), so no number changes."""
    from dataclasses import asdict

    from tempering.train.config import ClippedUpdateSection, UpdateSection

    assert asdict(UpdateSection().update_settings(0.7, 32)) == asdict(ClippedUpdateSection().update_settings(0.7, 32))
    s = ClippedUpdateSection(clip_low=0.1, clip_high=0.3, dual_clip=None).update_settings(1.0, 16)
    assert (s.clip_low, s.clip_high, s.dual_clip) == (0.1, 0.3, None)


def test_paths_a_run_reads_are_stored_absolute_and_gone_ones_are_named(tmp_path, monkeypatch):
    from tempering.config import anchor_paths, gone_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.jsonl").write_text("{}\n")
    (tmp_path / "env.py").write_text("")
    (tmp_path / "train").mkdir()  # a folder named like a plain word: a word stays a word
    data = {
        "task": {
            "family": "dataset",
            "args": {"train": "data/rows.jsonl", "env": "./env.py:Env.make", "rewards": ["env.py:f", "exact"]},
            "split": "train",
        },
        "model": {"name": "Qwen/Qwen3-0.6B"},  # a Hub id, not a file here
        "run": {"out_dir": "runs/x", "note": "https://example.com/a.py"},
    }
    anchor_paths(data)
    assert data["task"]["args"] == {
        "train": str(tmp_path / "data" / "rows.jsonl"),
        "env": f"{tmp_path / 'env.py'}:Env.make",
        "rewards": [f"{tmp_path / 'env.py'}:f", "exact"],
    }
    assert data["task"]["split"] == "train" and data["model"]["name"] == "Qwen/Qwen3-0.6B"
    assert data["run"] == {"out_dir": "runs/x", "note": "https://example.com/a.py"}
    assert gone_paths(data) == []
    (tmp_path / "env.py").unlink()
    data["run"]["out_dir"] = str(tmp_path / "gone_run")  # a run's own folder is made by the run
    assert gone_paths(data) == [
        ("task.args.env", f"{tmp_path / 'env.py'}:Env.make"),
        ("task.args.rewards.0", f"{tmp_path / 'env.py'}:f"),
    ]
