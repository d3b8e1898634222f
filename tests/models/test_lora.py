"""LoRA: only adapters train, merging keeps the outputs, adapters round-trip in peft's format."""

import copy
import importlib.util

import pytest
import torch

from tempering.errors import UserError
from tempering.models import tiny_model
from tempering.models.lora import (
    add_lora,
    load_adapter,
    merged_copy,
    merged_state_dict,
    save_adapter,
    trainable_parameters,
)
from tempering.train.batch import collate
from tempering.train.update import UpdateSettings, policy_update
from tempering.types import Episode, Task, Turn

if importlib.util.find_spec("peft") is None:  # found, not imported: collection stays cheap
    pytest.skip("peft is not installed", allow_module_level=True)

IDS = torch.tensor([[5, 9, 7, 11, 6, 8, 12]])


def _trained_lora():
    model = add_lora(tiny_model("tiny-xs", seed=0), rank=4)
    eps = [Episode(Task(str(i), ""), [5, 6, 7], [Turn([8 + i, 9, 10], [-1.0] * 3)]) for i in range(4)]
    batch = collate(eps, pad_id=0)
    batch.adv_BT = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None] * batch.mask_BT
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        policy_update(model, opt, None, batch, UpdateSettings(micro_batch_size=2))
    return model


def test_only_adapters_train_and_the_base_stays_fixed():
    base = tiny_model("tiny-xs", seed=0)
    before = copy.deepcopy(base.state_dict())
    model = add_lora(base, rank=4)
    counts = trainable_parameters(model)
    assert 0 < counts["trainable"] < counts["total"] / 10
    assert all(("lora_A" in n or "lora_B" in n) == p.requires_grad for n, p in model.named_parameters())
    with torch.no_grad():  # B starts at 0: the wrapped model computes exactly the base function
        torch.testing.assert_close(model(input_ids=IDS).logits, tiny_model("tiny-xs", seed=0)(input_ids=IDS).logits)
    model = _trained_lora()
    base_now = {
        n.replace("base_model.model.", "").replace(".base_layer", ""): p
        for n, p in model.named_parameters()
        if "lora_" not in n
    }
    assert set(before) - set(base_now) <= {"lm_head.weight"}  # every base weight is compared (lm_head is tied)
    for k in base_now:
        assert torch.equal(base_now[k], before[k]), k
    assert any(float(p.detach().abs().sum()) > 0 for n, p in model.named_parameters() if "lora_B" in n)


@pytest.mark.slow
def test_merged_model_gives_the_adapted_outputs():
    from peft import PeftModel

    model = _trained_lora().eval()
    with torch.no_grad():
        want = model(input_ids=IDS).logits
        base = tiny_model("tiny-xs", seed=0)(input_ids=IDS).logits
        merged = merged_copy(model)
        got = merged(input_ids=IDS).logits
    assert not isinstance(merged, PeftModel)
    assert float((want - base).abs().max()) > 1e-3  # the adapters changed the function
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    sd = merged_state_dict(model)
    assert set(sd) == set(tiny_model("tiny-xs", seed=0).state_dict())  # base names, ready for a sampler or vLLM
    assert isinstance(model, PeftModel)  # the training model still has its adapters


def test_adapters_round_trip_in_peft_format(tmp_path, tiny):
    from peft import PeftModel

    model = _trained_lora().eval()
    out = save_adapter(model, tiny[1], tmp_path / "adapter")
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert not list(tmp_path.glob(".adapter.*"))  # no temporary folder left
    again = PeftModel.from_pretrained(tiny_model("tiny-xs", seed=0), out).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=IDS).logits, model(input_ids=IDS).logits)
    loaded = load_adapter(tiny_model("tiny-xs", seed=0), out, trainable=True)
    assert trainable_parameters(loaded)["trainable"] == trainable_parameters(model)["trainable"]


def test_bad_lora_settings_name_the_way_out(tmp_path):
    with pytest.raises(UserError, match="not linear layers of this model; its linear layers are: .*q_proj"):
        add_lora(tiny_model("tiny-xs", seed=0), rank=4, target_modules=["c_attn"])
    with pytest.raises(UserError, match="rank must be >= 1"):
        add_lora(tiny_model("tiny-xs", seed=0), rank=0)
    with pytest.raises(UserError, match="no adapter_config.json"):
        load_adapter(tiny_model("tiny-xs", seed=0), tmp_path)
