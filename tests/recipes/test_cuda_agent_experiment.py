"""The CUDA Agent experiment's claims on the paper's ablation, from hand-made per-seed arm results."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "examples" / "cuda_agent" / "run_cuda_agent.py"
COLUMNS = ("correct_rate", "faster_than_eager_rate", "faster_than_compile_rate", "reward_mean")
SIZES = {
    "heldout_problems": ["01_relu"],
    "eval_k": 8,
    "rl": {"steps": 6},
    "rollout": {"prompts_per_step": 4, "group_size": 4},
}


def _script():
    spec = importlib.util.spec_from_file_location("run_cuda_agent", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _arm(per_seed: list[float], rft: float = 0.5) -> dict:
    mean = sum(per_seed) / len(per_seed)
    cols = lambda v: {c: v for c in COLUMNS}
    return {
        **cols(mean),
        **{f"{c}_sd": 0.0 for c in COLUMNS},
        "collapsed_seeds": [],
        "stages": {"rft": cols(rft), "rl": cols(mean)},
        "per_seed": {str(s): {"rft": cols(rft), "rl": cols(v)} for s, v in enumerate(per_seed)},
    }


def test_the_claims_follow_the_per_seed_differences():
    mod = _script()
    ahead = {
        "full": _arm([0.9, 0.85, 0.95]),
        "no_rft": _arm([0.5, 0.5, 0.55]),
        "no_critic_pretrain": _arm([0.5, 0.4, 0.5]),
    }
    claims = mod.claims({"arms": ahead, "sizes": SIZES})
    rft = "the full recipe beats the recipe without RFT (faster than eager and torch.compile)"
    assert claims[rft]["verdict"] == "reproduced"
    assert claims[rft]["difference_points"]["per_seed"] == pytest.approx([40.0, 35.0, 40.0])
    noisy = {"full": _arm([0.9, 0.1, 0.6]), "no_rft": _arm([0.5, 0.5, 0.5]), "no_critic_pretrain": _arm([0.5] * 3)}
    assert mod.claims({"arms": noisy, "sizes": SIZES})[rft]["verdict"] == "inconclusive"
    worse = {"full": _arm([0.2, 0.2, 0.25]), "no_rft": _arm([0.5, 0.5, 0.5]), "no_critic_pretrain": _arm([0.5] * 3)}
    claims = mod.claims({"arms": worse, "sizes": SIZES})
    assert claims[rft]["verdict"] == "not reproduced"
    text = mod.findings({"arms": worse})
    assert "full - no_rft: -28.3 points" in text
    assert "full -28.3 (after rft)" in text  # the multi-turn stage against the RFT stage: 0.2167 - 0.5
