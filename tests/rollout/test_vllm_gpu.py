"""vLLM on a GPU: the colocated engine's log-probs agree with the trainer's, weight sync changes what it
samples, and the recipe trains through it. Skipped without a CUDA GPU and the `vllm` extra; run with
benchmarks/gpu/run_checks.sh."""

import asyncio
import copy

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
vllm = pytest.importorskip("vllm")

from tempering.models import char_tokenizer, load_policy, save_policy, tiny_model  # noqa: E402
from tempering.recipes.runner import trainer  # noqa: E402
from tempering.rollout.sampler import HFSampler, SamplingParams  # noqa: E402
from tempering.rollout.vllm_sampler import VLLMSampler, VLLMSection, mismatch_kl  # noqa: E402
from tempering.train.batch import collate  # noqa: E402
from tempering.train.update import token_logprobs  # noqa: E402
from tempering.types import Episode, Task, Turn  # noqa: E402

PROMPTS = [char_tokenizer().encode(f"{a}+{b}=", add_special_tokens=False) for a in range(3, 40, 3) for b in (1, 22)]


@pytest.fixture(scope="module")
def engine(pretrained_dir, tmp_path_factory):
    folder = save_policy(*load_policy(pretrained_dir), tmp_path_factory.mktemp("vllm") / "policy")
    s = VLLMSampler(
        folder,
        char_tokenizer(),
        seed=0,
        options=VLLMSection(gpu_memory_utilization=0.2, dtype="float32", enforce_eager=True),
    )
    return s, folder


def test_sampling_logprobs_agree_with_the_trainer(engine):
    sampler, folder = engine
    model = load_policy(str(folder))[0]  # the trainer's view, in fp32 on the CPU
    samples = sampler.sample(PROMPTS * 4, SamplingParams(max_new_tokens=6, temperature=1.0))
    eps = [
        Episode(Task(str(i), ""), p, [Turn(s.ids, s.logprobs)]) for i, (p, s) in enumerate(zip(PROMPTS * 4, samples))
    ]
    b = collate(eps, pad_id=0)
    with torch.no_grad():
        trainer = token_logprobs(model, b)[0]
    kl = float(mismatch_kl(trainer, b.sample_logp_BT, b.mask_BT))
    print(f"vLLM vs trainer mismatch KL (fp32): {kl:.2e}")
    assert kl < 1e-3


def test_weight_sync_changes_what_the_engine_samples(engine):
    sampler, _ = engine
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    new = tiny_model("tiny-xs", seed=11).cuda()
    sampler.sync_weights(new)
    want = HFSampler(copy.deepcopy(new), char_tokenizer()).sample(PROMPTS, greedy)
    assert [s.ids for s in sampler.sample(PROMPTS, greedy)] == [s.ids for s in want]


def test_the_recipe_trains_through_colocated_vllm(pretrained_dir, tmp_path):
    from tempering.config import build
    from tempering.methods.rl import TrainConfig

    cfg = build(
        TrainConfig,
        {
            "model": {"name": str(pretrained_dir)},
            "task": {
                "family": "arithmetic",
                "args": {"min_value": 0, "max_value": 30},
                "train_size": 64,
                "heldout_size": 8,
            },
            "rollout": {
                "group_size": 4,
                "prompts_per_step": 8,
                "max_new_tokens": 4,
                "backend": "vllm",
                "vllm": {"gpu_memory_utilization": 0.2, "enforce_eager": True},
            },
            "loss": {"rollout_correction": "tis"},
            "run": {"steps": 2, "out_dir": str(tmp_path), "progress": False, "tensorboard": False},
        },
    )
    t = trainer("train", cfg)
    t.model.cuda()
    for _ in range(2):
        r = asyncio.run(t.step())
    assert t.sampler.syncs == 2 and r.metrics["reward"] > 0
    assert 0 <= r.metrics["rollout/mismatch_kl"] < 0.1
