"""The CUDA Agent experiment's verdict on the paper's ablation, from hand-made arm results."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "examples" / "cuda_agent" / "run_cuda_agent.py"
COLUMNS = ("correct_rate", "faster_than_eager_rate", "faster_than_compile_rate", "reward_mean")


def _script():
    spec = importlib.util.spec_from_file_location("run_cuda_agent", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _arm(ftc: float, sd: float, rft_ftc: float = 0.5) -> dict:
    cols = {c: ftc for c in COLUMNS}
    return {
        **cols,
        **{f"{c}_sd": sd for c in COLUMNS},
        "collapsed_seeds": [],
        "stages": {"rft": {**cols, "faster_than_compile_rate": rft_ftc}, "rl": cols},
    }


def test_the_verdict_follows_the_seeds_spread():
    mod = _script()
    holds = {"arms": {"full": _arm(0.9, 0.05), "no_rft": _arm(0.5, 0.05), "no_critic_pretrain": _arm(0.5, 0.1)}}
    assert "holds at this scale" in mod.findings(holds)
    noisy = {"arms": {"full": _arm(0.6, 0.3), "no_rft": _arm(0.5, 0.05), "no_critic_pretrain": _arm(0.5, 0.05)}}
    assert "cannot be judged at this scale" in mod.findings(noisy)
    worse = {"arms": {"full": _arm(0.2, 0.05), "no_rft": _arm(0.5, 0.05), "no_critic_pretrain": _arm(0.5, 0.05)}}
    text = mod.findings(worse)
    assert "does not hold" in text and "full - no_rft: -30.0 points" in text
    assert "full -30.0 (after rft)" in text  # the multi-turn stage against the RFT stage: 0.2 - 0.5
