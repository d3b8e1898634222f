"""GRPO throughput and learning curve: tempering vs TRL's GRPOTrainer on the same workload.

Both arms start from the same warm-started tiny model and tokenizer, see the same prompts in the same
order (checked: each run records a hash of its prompt sequence), and use the same group size, batch,
completion length, sampling (temperature 1, no top-k / top-p), reward (exact match of the completion's
first line), group-normalised advantages (unbiased std), clip range 0.2 / 0.28, token-mean loss over the
whole batch, beta = 0, one on-policy optimizer step per batch, AdamW (lr 3e-4 constant, betas 0.9 / 0.999,
eps 1e-8, no weight decay), gradient clipping at norm 1, and number of steps; TRL runs without its default
gradient checkpointing (it recomputes the forward to save memory this model does not need). A third arm,
tempering with asynchronous rollouts (`rollout.async_steps=1`), runs in the same pairs. Each arm runs in its own
subprocess (so peak RSS is its own), in pairs that alternate the arms; a pair shares its seed and prompt
order. Held-out pass@1 (greedy, 500 prompts) is measured every `EVAL_EVERY` steps, outside the timed steps.

    python benchmarks/grpo_vs_trl.py --steps 100 --pairs 5 --out docs/results

Extending it: an arm is a function `(model_dir, steps, seed) -> dict` registered in `ARMS` (it returns
`step_seconds`, `rewards`, `heldout` {step: pass@1} and `prompt_sha`); the regime (task, batch, lengths)
is `REGIME`. Tables compare every arm with `BASELINE`.

After the pairs, the long-completion regime (a 14M-parameter model writing up to 128 tokens) runs tempering,
tempering asynchronous and TRL again, and every arm's model FLOP/s is set against this machine's matmul peak,
measured in the same run: see `grpo_perf.py` (`--long-pairs 0` skips it). The tables are written after every
pair, so a run cut short leaves the pairs it finished.

Needs the `bench` extra (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import platform
import resource
import statistics as st
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import grpo_perf  # the long-completion regime and the distance to the matmul peak

REGIME = {
    "task": {
        "family": "arithmetic",
        "args": {"min_value": 10, "max_value": 999},
        "train_size": 20000,
        "heldout_size": 500,
    },
    "prompts_per_step": 32,
    "group_size": 8,
    "max_new_tokens": 6,
    "lr": 3e-4,
}
TASK = REGIME["task"]
PROMPTS, GROUP, MAX_NEW, LR = REGIME["prompts_per_step"], REGIME["group_size"], REGIME["max_new_tokens"], REGIME["lr"]
SHARE_PREFIX = True  # tempering's default; the prompt shared by a group runs through the model once
WARMUP_STEPS = 2  # excluded from the timed window in both arms
EVAL_EVERY = 10  # held-out pass@1 every this many steps (and at the end): one greedy evaluation swings by points
# between evaluations a few steps apart, so the curves are compared at every evaluation and on their average
BASELINE = "trl"
CHAT = False  # the prompts reach TRL as chat messages (its conversational format), rendered by the chat template
CHECK = {"tv_draws": 300, "replay": True, "thread": True}
"""How much of the equivalence check runs: first-token draws per prompt, the many-step replay, the thread cost."""
REGIME_NAME = "tiny"  # `grpo_vs_trl_real.install` switches this module's workload to a real pretrained model
PREVIOUS = {"ratio": 3.18, "long_ratio": 4.19, "load": 4.6, "trl_steps_per_s": 0.397, "tempering_steps_per_s": 1.333}
"""The table this one replaces (commit c35b5c2), measured on a loaded machine."""


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def prepare_model(out: Path, seed: int) -> str:
    from tempering.config import build
    from tempering.methods.pretrain import PretrainConfig, pretrain
    from tempering.recipes.demo import PRETRAIN

    run = {**PRETRAIN["run"], "seed": seed, "out_dir": str(out), "progress": False}
    cfg = build(PretrainConfig, {**PRETRAIN, "run": run})
    return pretrain(cfg)["model"]


def train_order(n_steps: int, seed: int):
    """The prompts of every step, in order: the same for both arms."""
    from tempering.envs.registry import make_family
    from tempering.train.cursor import PromptCursor

    fam = make_family(TASK["family"], **TASK["args"])
    tasks = fam.tasks("train", TASK["train_size"], seed=0)
    cur = PromptCursor(len(tasks), seed)
    return fam, [[tasks[i] for i in cur.next(PROMPTS)] for _ in range(n_steps)]


def prompt_sha(steps: list[list[str]]) -> str:
    return hashlib.sha256(json.dumps(steps).encode()).hexdigest()[:16]


def heldout_pass(model, tok) -> float:
    from tempering.envs.registry import make_family
    from tempering.evaluation import evaluate
    from tempering.models.chat import ChatFormat
    from tempering.rollout.engine import RolloutOptions
    from tempering.rollout.sampler import HFSampler, SamplingParams

    fam = make_family(TASK["family"], **TASK["args"])
    tasks = fam.tasks("heldout", TASK["heldout_size"], seed=0)
    opts = RolloutOptions(sampling=SamplingParams(MAX_NEW, 1.0))
    m = asyncio.run(evaluate(HFSampler(model, tok, seed=0), ChatFormat(tok), fam, tasks, opts, k=1, sampled=False))
    return m["pass@1"]


def first_line_match(completion, answer: str) -> float:
    """Both arms' reward: the arithmetic family's own verifier on the completion's first line (`exact`: the
    line, stripped, is the answer). A TRL conversational completion is its message list."""
    from types import SimpleNamespace

    from tempering.envs.synthetic import answer_text

    text = completion[-1]["content"] if isinstance(completion, list) else completion
    return family().check(SimpleNamespace(answer=answer), answer_text(text))[0]  # type: ignore[arg-type]


_FAMILY: dict = {}


def family():
    """The workload's task family (the verifier both arms score with)."""
    from tempering.envs.registry import make_family

    key = json.dumps(TASK, sort_keys=True)
    if key not in _FAMILY:
        _FAMILY[key] = make_family(TASK["family"], **TASK["args"])
    return _FAMILY[key]


def eval_due(step: int, steps: int) -> bool:
    return step % EVAL_EVERY == 0 or step == steps


def arm_tempering(model_dir: str, steps: int, seed: int, async_steps: int = 0, seed_offset: int = 0) -> dict:
    """tempering's GRPO (`grpo_perf.tempering_arm`), evaluated on the held-out prompts every `EVAL_EVERY` steps;
    asynchronous rollouts drain before each evaluation, which then never overlaps generation. The prompt order
    follows `seed`; the run (its sampler's draws) `seed + seed_offset`."""
    import torch

    fam, order = train_order(steps, seed)
    seed += seed_offset
    seen, heldout = [], {}

    def after_step(step, tr, r):
        seen.append([g.task.prompt for g in r.groups])
        if eval_due(step, steps):
            heldout[step] = heldout_pass(tr.model, tr.tokenizer)

    out = grpo_perf.tempering_arm(
        model_dir,
        fam,
        order,
        REGIME,
        steps=steps,
        seed=seed,
        threads=torch.get_num_threads(),
        async_steps=async_steps,
        name="tempering",
        loss={"share_prefix": SHARE_PREFIX},
        eval_every=EVAL_EVERY,
        after_step=after_step,
    )
    return {**out, "heldout": heldout, "prompt_sha": prompt_sha(seen)}


def arm_trl(model_dir: str, steps: int, seed: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from tempering.models.chat import ChatFormat

    _, order = train_order(steps, seed)
    rows = [{"prompt": trl_prompt(t.prompt), "answer": t.answer} for step in order for t in step]
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    seen: list[list[str]] = []

    def exact(prompts, completions, answer, **_):
        text = [p[-1]["content"] if isinstance(p, list) else p for p in prompts]
        seen.append(list(dict.fromkeys(text)))  # the step's prompts, each once, in order
        return [first_line_match(c, a) for c, a in zip(completions, answer)]

    ends: list[float] = []
    resumes: list[float] = []
    heldout: dict[int, float] = {}

    class Clock(TrainerCallback):
        """Step end times; a held-out evaluation after a step is left out of the next step's time."""

        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())
            if eval_due(state.global_step, steps):
                heldout[state.global_step] = heldout_pass(kw["model"], tok)
            resumes.append(time.perf_counter())

    args = grpo_perf.trl_config(f"/tmp/bench_trl_{os.getpid()}", PROMPTS, GROUP, MAX_NEW, LR, steps, seed)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=exact,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[Clock()],
    )
    first: list = []
    generate = trainer._generate_single_turn

    def recorded(prompt_ids, *args, **kw):  # the token ids TRL generates from, kept for the first step
        if not first:
            first.extend(list(x) for x in prompt_ids)
        return generate(prompt_ids, *args, **kw)

    trainer._generate_single_turn = recorded  # type: ignore[method-assign]
    t0 = time.perf_counter()
    trainer.train()
    ours = [ChatFormat(tok).prompt_ids(t.prompt) for t in order[0] for _ in range(GROUP)]
    starts = [t0] + resumes[:-1]
    logs = [h for h in trainer.state.log_history if "reward" in h]
    return {
        "step_seconds": [b - a for a, b in zip(starts, ends)],
        "rewards": [h["reward"] for h in logs],
        "completion_len": [h["completions/mean_length"] for h in logs],  # EOS counted, as tempering counts it
        "heldout": heldout,
        "prompt_sha": prompt_sha(seen),
        "prompt_tokens_identical": [[int(i) for i in x] for x in first] == ours,
        "torch_threads": torch.get_num_threads(),
    }


def trl_prompt(prompt: str):
    """A prompt as TRL takes it: text, or one user message when the model has a chat template."""
    return [{"role": "user", "content": prompt}] if CHAT else prompt


def check_equivalence(model_dir: str, steps: int, seed: int) -> dict:
    """What makes the arms the same, measured on the warm start: on the first step's prompts, sampled by
    tempering and scored by the shared reward, (1) each arm's advantages, (2) the gradient of tempering's
    update (with and without the shared prefix) against `GRPOTrainer._compute_loss` on the same tensors and
    advantages, (3) the optimizer each builds, and (4) the first answer token's sampling distribution of
    each arm against the model's exact softmax (mean over the step's prompts), beside an ideal sampler's
    distance at the same number of draws, and (5) every token's sampling log-prob against the model's
    log-prob of it, teacher-forced on the whole sequence (a sampler that conditions on the wrong context,
    positions or cache differs here at any token, not only the first)."""
    import copy

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import pad

    from tempering.algos.advantages import grpo_advantage
    from tempering.algos.losses import LossNorm
    from tempering.models import load_policy
    from tempering.models.chat import ChatFormat
    from tempering.rollout.sampler import HFSampler, SamplingParams
    from tempering.train.batch import broadcast_turn_adv, collate
    from tempering.train.optim import make_optimizer
    from tempering.train.update import UpdateSettings, ppo_loss
    from tempering.types import Episode, Turn

    _, order = train_order(1, seed)
    tasks = order[0]
    model, tok = load_policy(model_dir)
    fmt, sampler = ChatFormat(tok), HFSampler(model, tok, seed=seed)
    prompts = [fmt.prompt_ids(t.prompt) for t in tasks for _ in range(GROUP)]
    samples = sampler.sample(prompts, SamplingParams(MAX_NEW, 1.0))
    with torch.no_grad():  # (5) each sampled token's recorded log-prob against the model's, teacher-forced
        logprob_gap = max(
            float(
                (
                    model(torch.tensor([p + x.ids]))
                    .logits[0, len(p) - 1 : -1]
                    .log_softmax(-1)[range(len(x.ids)), x.ids]
                    - torch.tensor(x.logprobs)
                )
                .abs()
                .max()
            )
            for p, x in zip(prompts, samples)
        )
    texts = [tok.decode(x.ids, skip_special_tokens=True) for x in samples]
    owners = [t for t in tasks for _ in range(GROUP)]
    rewards = torch.tensor([first_line_match(c, t.answer) for c, t in zip(texts, owners)])
    rewards = rewards.view(len(tasks), GROUP)
    ours = grpo_advantage(rewards)
    theirs = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)  # TRL's
    eps = [Episode(t, p, [Turn(x.ids, x.logprobs)]) for t, p, x in zip(owners, prompts, samples)]
    batch = collate(eps, sampler.pad_id)
    batch.adv_BT = broadcast_turn_adv(ours.reshape(-1, 1), batch)

    def grads(m, loss_fn) -> list:
        m.train()
        m.zero_grad()
        loss_fn(m).backward()
        return [q.grad.clone() for q in m.parameters()]

    tempering = {
        share: grads(
            copy.deepcopy(model),
            lambda m, share=share: ppo_loss(m, batch, LossNorm.of(batch.mask_BT), UpdateSettings(share_prefix=share))[
                0
            ],
        )
        for share in (False, True)
    }
    ttok = AutoTokenizer.from_pretrained(model_dir)
    args = GRPOConfig(
        output_dir=f"/tmp/bench_check_{os.getpid()}",
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=MAX_NEW,
        learning_rate=LR,
        lr_scheduler_type="constant",
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        weight_decay=0.0,
        use_cpu=True,
        gradient_checkpointing=False,  # GRPOConfig turns it on by default; it recomputes the forward
        report_to="none",
        bf16=False,
    )
    trl = GRPOTrainer(
        model=copy.deepcopy(model),
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_list([{"prompt": t.prompt} for t in tasks]),
        processing_class=ttok,
    )
    trl.current_gradient_accumulation_steps = 1
    pid, cid = [torch.tensor(x) for x in prompts], [torch.tensor(x.ids) for x in samples]
    inputs = {
        "prompt_ids": pad(pid, padding_value=tok.pad_token_id, padding_side="left"),
        "prompt_mask": pad([torch.ones_like(x) for x in pid], padding_value=0, padding_side="left"),
        "completion_ids": pad(cid, padding_value=tok.pad_token_id, padding_side="right"),
        "completion_mask": pad([torch.ones_like(x) for x in cid], padding_value=0, padding_side="right"),
        "advantages": ours.reshape(-1),  # the same advantages: this compares the update alone
        "num_items_in_batch": batch.mask_BT.sum(),
    }
    ref = grads(trl.model, lambda m: trl._compute_loss(m, inputs))
    norm = lambda gs: sum(float(g.norm() ** 2) for g in gs) ** 0.5
    rel = {share: norm([a - b for a, b in zip(g, ref)]) / norm(ref) for share, g in tempering.items()}
    trl.create_optimizer_and_scheduler(num_training_steps=steps)
    keys = ("lr", "betas", "eps", "weight_decay")
    mine = make_optimizer(model, LR, 0.0, (0.9, 0.999))
    # the first answer token of each of the step's prompts, 1000 draws from each sampler
    n = CHECK["tv_draws"]
    gen = torch.Generator().manual_seed(seed)
    trl.model.eval()
    tvs: dict[str, list[float]] = {"tempering": [], "trl": [], "ideal": []}
    for ids in {tuple(x) for x in prompts}:
        p1 = torch.tensor([list(ids)] * n)
        with torch.no_grad():
            exact = model(input_ids=p1[:1]).logits[0, -1].float().softmax(-1)
            first_token = copy.deepcopy(trl.generation_config)
            first_token.max_new_tokens = 1
            out = trl.model.generate(input_ids=p1, attention_mask=torch.ones_like(p1), generation_config=first_token)
        tv = lambda draws: float((torch.bincount(draws, minlength=exact.numel()).float() / n - exact).abs().sum() / 2)
        tvs["trl"].append(tv(out[:, p1.shape[1]]))
        tvs["ideal"].append(tv(torch.multinomial(exact, n, replacement=True, generator=gen)))
        ours_first = sampler.sample([list(ids)] * n, SamplingParams(1, 1.0))
        tvs["tempering"].append(tv(torch.tensor([x.ids[0] for x in ours_first])))
    out = {
        "advantage_max_abs_diff": float((ours - theirs).abs().max()),
        "sampler_logprob_max_abs_diff": logprob_gap,
        "grad_rel_diff": float(rel[False]),
        "grad_rel_diff_share_prefix": float(rel[True]),
        "grad_norm": norm(ref),
        "optimizer": {
            "tempering": {
                "class": type(mine).__name__,
                **{k: mine.param_groups[0][k] for k in keys},
            },
            "trl": {
                "class": type(trl.optimizer).__name__,
                "fused": bool(trl.optimizer.param_groups[0].get("fused")),
                **{k: trl.optimizer.param_groups[0][k] for k in keys},
            },
            "trl_max_grad_norm": trl.args.max_grad_norm,
            "trl_lr_scheduler": trl.args.lr_scheduler_type.value,
        },
        "first_token_tv": {**{k: st.mean(v) for k, v in tvs.items()}, "draws": n, "prompts": len(tvs["trl"])},
        "trl_generation": {
            k: getattr(trl.generation_config, k) for k in ("do_sample", "temperature", "top_k", "top_p")
        },
    }
    if CHECK["replay"]:
        out["replay"] = check_replay(model_dir, seed)
    if CHECK["thread"]:  # last: it starts torch work on a second thread, which slows this process's from then on
        out["sampler_thread"] = sampler_thread_cost(model, tok, prompts)
    return out


def sampler_thread_cost(model, tok, prompts: list[list[int]], reps: int = 6) -> dict:
    """Why tempering samples on the update's thread: the seconds of one sampling call of the step's prompts
    on the calling thread, then in a worker thread beside it (as `asyncio.to_thread` would), then on the
    calling thread again (the worker's OpenMP team still exists). Medians over `reps` calls."""
    from concurrent.futures import ThreadPoolExecutor

    from tempering.rollout.sampler import HFSampler, SamplingParams

    sampler, params = HFSampler(model, tok, seed=0), SamplingParams(MAX_NEW, 1.0)

    def seconds(call) -> float:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        return st.median(times)

    here = seconds(lambda: sampler.sample(prompts, params))
    with ThreadPoolExecutor(1) as pool:
        worker = seconds(lambda: pool.submit(sampler.sample, prompts, params).result())
    return {
        "same_thread_s": here,
        "worker_thread_s": worker,
        "same_thread_after_s": seconds(lambda: sampler.sample(prompts, params)),
    }


REPLAY_STEPS = 20
SAMPLER_DRAWS = 48  # batches of the replayed steps' prompts x GROUP drawn from each sampler, per policy


def check_replay(model_dir: str, seed: int, steps: int = REPLAY_STEPS) -> dict:
    """What one step cannot show: (1) the update over many steps. tempering trains `steps` steps; then TRL's
    own training loop (`GRPOTrainer.train`: its rewards, advantages, loss, accumulation, clipping, fused AdamW
    and schedule) trains a copy of the warm start on the completions tempering sampled, its generation
    replaced by them, and the two sets of weights are compared after every step. (2) Each arm's sampler at
    a fixed policy, the warm start and TRL's replayed weights after `steps` steps: its success rate against
    the model's exact expected reward, and the share of groups whose rewards are all equal (no signal)
    against independent draws; a sampler that drew a group's samples dependently would show here, not in
    the success rate."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    fam, order = train_order(steps, seed)
    sampled: list[list[list[int]]] = []
    weights: list[dict[str, torch.Tensor]] = []

    def record(step, tr, r):
        sampled.append([list(e.turns[0].action_ids) for g in r.groups for e in g.episodes])
        weights.append({k: v.detach().clone() for k, v in tr.model.named_parameters()})

    ours = grpo_perf.tempering_arm(
        model_dir,
        fam,
        order,
        REGIME,
        steps=steps,
        seed=seed,
        threads=torch.get_num_threads(),
        async_steps=0,
        name="replay",
        loss={"share_prefix": SHARE_PREFIX},
        after_step=record,
    )
    rows = [{"prompt": t.prompt, "answer": t.answer} for step in order for t in step]
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    start = {k: v.detach().clone() for k, v in model.named_parameters()}
    rel_diffs: list[float] = []
    norm = lambda d: sum(float(v.norm() ** 2) for v in d.values()) ** 0.5

    class Compare(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            ref = weights[state.global_step - 1]
            gap = {k: p.detach() - ref[k] for k, p in model.named_parameters()}
            rel_diffs.append(norm(gap) / norm(ref))

    def exact(prompts, completions, answer, **_):
        return [first_line_match(c, a) for c, a in zip(completions, answer)]

    trl = GRPOTrainer(
        model=model,
        reward_funcs=exact,
        args=grpo_perf.trl_config(f"/tmp/bench_replay_{os.getpid()}", PROMPTS, GROUP, MAX_NEW, LR, steps, seed),
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[Compare()],
    )
    calls = iter(sampled)

    def replayed(prompt_ids, *_, **__):
        completions = next(calls)
        assert len(completions) == len(prompt_ids), "TRL asked for a batch of another size"
        return completions, None

    trl._generate_single_turn = replayed  # type: ignore[method-assign]
    tasks = [t for step in order[:3] for t in step]
    samplers = {"warm_start": sampler_check(model, tok, trl.generation_config, tasks, seed)}
    trl.train()
    theirs = [h["reward"] for h in trl.state.log_history if "reward" in h]
    samplers[f"after_{steps}_steps"] = sampler_check(model, tok, trl.generation_config, tasks, seed)
    moved = {k: weights[-1][k] - start[k] for k in start}
    return {
        "steps": steps,
        "param_rel_diffs": rel_diffs,
        "moved_rel": norm(moved) / norm(start),
        "reward_max_abs_diff": max(abs(a - b) for a, b in zip(ours["rewards"], theirs)),
        "samplers": samplers,
    }


def sampler_check(model, tok, generation_config, tasks, seed: int, draws: int = SAMPLER_DRAWS) -> dict:
    """Each arm's sampler on `tasks` x GROUP, `draws` times, against the model: the success rate beside the exact
    expected reward (the probability of the answer followed by a newline or EOS; completions with spaces around
    the answer also score, so it is exact up to those), and the share of all-equal groups beside
    mean(p^G + (1 - p)^G) of independent draws at each prompt's exact p."""
    import torch

    from tempering.models.chat import ChatFormat
    from tempering.rollout.sampler import HFSampler, SamplingParams

    fmt = ChatFormat(tok)
    ends = [tok.encode("\n", add_special_tokens=False)[0], tok.eos_token_id]
    was = model.training
    model.eval()
    exact = []
    with torch.no_grad():
        for t in tasks:
            p, a = fmt.prompt_ids(t.prompt), tok.encode(t.answer, add_special_tokens=False)
            logp = model(torch.tensor([p + a])).logits[0].float().log_softmax(-1)
            answer = sum(float(logp[len(p) - 1 + i, x]) for i, x in enumerate(a))
            exact.append(math.exp(answer) * float(logp[len(p) + len(a) - 1, ends].exp().sum()))
    prompts = [fmt.prompt_ids(t.prompt) for t in tasks for _ in range(GROUP)]
    owners = [t for t in tasks for _ in range(GROUP)]
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(x)) + x for x in prompts])
    mask = (torch.arange(width) >= width - torch.tensor([len(x) for x in prompts])[:, None]).long()
    ours = HFSampler(model, tok, seed=seed)
    torch.manual_seed(seed)
    rewards: dict[str, list[float]] = {"tempering": [], "trl": []}
    score = lambda texts: [first_line_match(c, t.answer) for c, t in zip(texts, owners)]
    with torch.no_grad():
        for _ in range(draws):
            out = ours.sample(prompts, SamplingParams(MAX_NEW, 1.0))
            rewards["tempering"] += score([tok.decode(x.ids, skip_special_tokens=True) for x in out])
            gen = model.generate(input_ids=ids, attention_mask=mask, generation_config=generation_config)
            rewards["trl"] += score(tok.batch_decode(gen[:, width:], skip_special_tokens=True))
    model.train(was)
    all_equal = lambda r: st.mean(
        float(min(r[i : i + GROUP]) == max(r[i : i + GROUP])) for i in range(0, len(r), GROUP)
    )
    return {
        "samples": len(rewards["trl"]),
        "exact_reward": st.mean(exact),
        "all_equal_groups_independent": st.mean(p**GROUP + (1 - p) ** GROUP for p in exact),
        **{f"{arm}_reward": st.mean(r) for arm, r in rewards.items()},
        **{f"{arm}_reward_se": (st.mean(r) * (1 - st.mean(r)) / len(r)) ** 0.5 for arm, r in rewards.items()},
        **{f"{arm}_all_equal_groups": all_equal(r) for arm, r in rewards.items()},
    }


ASYNC_SEED_OFFSET = 10_000
"""The asynchronous arm's run seed is its pair's plus this: the same prompts, its own sampler draws, so it is a
second independent comparison with the synchronous arm rather than a replay of its draws."""
ARMS = {
    "tempering": arm_tempering,
    "trl": arm_trl,
    "tempering-async": partial(arm_tempering, async_steps=1, seed_offset=ASYNC_SEED_OFFSET),
}
"""Arm name -> function run in its own process; the pairs run them in this order."""


def run_arm(arm: str, model_dir: str, steps: int, seed: int, threads: int) -> dict:
    out = Path(f"/tmp/bench_arm_{arm}_{os.getpid()}.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [
        sys.executable,
        __file__,
        "--arm",
        arm,
        "--model",
        model_dir,
        "--steps",
        str(steps),
        "--seed",
        str(seed),
        "--threads",
        str(threads),
        "--regime",
        REGIME_NAME,
        "--arm-out",
        str(out),
    ]
    load_before = os.getloadavg()[0]
    subprocess.run(cmd, check=True, env=env)
    res = json.loads(out.read_text())
    out.unlink()
    if "heldout" in res:
        res["heldout"] = {int(k): v for k, v in res["heldout"].items()}
    res["load_1min"] = [load_before, os.getloadavg()[0]]
    return res


def summarize(res: dict) -> dict:
    timed = res["step_seconds"][WARMUP_STEPS:]
    steps_per_s = safe_div(len(timed), sum(timed))
    final = res["heldout"][max(res["heldout"])]
    return {
        "steps_per_s": steps_per_s,
        "completions_per_s": steps_per_s * PROMPTS * GROUP,
        "peak_rss_mb": res["peak_rss_mb"],
        "reward_last10": st.mean(res["rewards"][-10:]),
        "heldout_pass_at_1": final,
        "heldout_curve_avg": st.mean(res["heldout"].values()),
    }


def safe_div(part: float, seconds: float) -> float:
    """`part` per timed second; NaN for a run no longer than the warm-up (a smoke run times nothing)."""
    return part / seconds if seconds > 0 else float("nan")


MARGIN = 5.0
"""Points of held-out pass@1 (averaged over the curve) by which one arm may trail another and still count as
equal (ours: the goal says 'equal curves' without a tolerance)."""


def claims(head: dict) -> dict[str, dict]:
    """Equal curves (each arm no worse than the other within MARGIN), tempering above TRL, and the asynchronous
    arm no worse than the synchronous one; each arm's held-out pass@1 averaged over its evaluations, paired by
    pair seed."""
    from tempering.experiments import Arm, judge

    seeds = list(range(head["seed"], head["seed"] + head["pairs"]))
    rollouts = head["steps"] * head["prompts_per_step"] * head["group_size"]
    heldout = f"{head['regime']['task']['heldout_size']} held-out prompts, greedy, every {head['eval_every']} steps"
    avg = lambda curve: sum(curve.values()) / len(curve)
    arm = lambda name: Arm(name, dict(zip(seeds, map(avg, head["heldout_curves"][name]))), heldout, rollouts)
    return {
        "tempering's held-out curve is above TRL's": judge(arm("tempering"), arm(BASELINE)),
        f"tempering's held-out curve is no worse than TRL's (within {MARGIN:g} points)": judge(
            arm("tempering"), arm(BASELINE), margin=MARGIN
        ),
        f"TRL's held-out curve is no worse than tempering's (within {MARGIN:g} points)": judge(
            arm(BASELINE), arm("tempering"), margin=MARGIN
        ),
        f"asynchronous tempering's held-out curve is no worse than synchronous tempering's (within {MARGIN:g} points)": judge(
            arm("tempering-async"), arm("tempering"), margin=MARGIN
        ),
    }


def claims_section(head: dict) -> str:
    """The claims table, and what the pairs are: the asynchronous arm runs on its pair's seed."""
    from tempering.experiments import claims_table

    head["claims"] = claims(head)
    return "\n".join(
        [
            f"Claims, on each run's held-out pass@1 averaged over its evaluations, paired by pair (seeds "
            f"{head['seed']}..{head['seed'] + head['pairs'] - 1}; {MARGIN:g} points is a margin of ours). "
            + (
                f"The asynchronous arm of a pair runs on its own seed (the pair's + {head['async_seed_offset']}) "
                "with the pair's prompts."
                if head.get("async_seed_offset")
                else "The asynchronous arm of a pair runs on the synchronous arm's seed, so it shares its random "
                "draws where their states agree: it is no second independent comparison with TRL."
            ),
            "",
            *claims_table(head["claims"]),
        ]
    )


def rendered_note(head: dict) -> str:
    if "rendered" not in head:
        return ""
    return f"\nPage and claims rewritten from the stored numbers: `{head['rendered']}`\\"


def interval_text(diffs: list[float]) -> str:
    """A paired difference in points as the shared rule's mean and 95% t-interval."""
    from tempering.experiments import interval

    iv = interval(diffs)
    if iv.n < 2:
        return f"{iv.mean:+.1f} (one pair: no interval)"
    return f"{iv.mean:+.1f}, 95% interval [{iv.ci95[0]:+.1f}, {iv.ci95[1]:+.1f}] over {iv.n} pairs"


def paired_diff(a: list[float], b: list[float]) -> tuple[list[float], float, float]:
    """Per-pair differences a - b in points, their mean and the standard error of the mean."""
    d = [100 * (x - y) for x, y in zip(a, b)]
    se = st.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("nan")
    return d, st.mean(d), se


def render(head: dict) -> str:
    """The results table, from the JSON's numbers only."""
    f = lambda xs: ", ".join(f"{x:.3f}" for x in xs)
    e = head["equivalence"]
    opt = lambda o: (
        f"{o['class']} lr {o['lr']}, betas {tuple(o['betas'])}, eps {o['eps']}, weight decay {o['weight_decay']}"
    )
    curve_rows = "\n".join(
        f"| {s} | {head['tempering_heldout_curve_mean'][str(s)]:.3f} | {head['trl_heldout_curve_mean'][str(s)]:.3f} | "
        f"{head['heldout_curve_diff_points'][str(s)][0]:+.1f} ± {head['heldout_curve_diff_points'][str(s)][1]:.1f} |"
        for s in head["heldout_steps"]
    )
    return f"""# GRPO throughput and learning curve: tempering vs TRL

Command: `{head["command"]}`\\{rendered_note(head)}
Machine: {head["machine"]}; torch threads per run: {head["threads"]}; TRL {head["trl_version"]}, transformers {head["transformers_version"]}.\\
Load: 1-minute load average around each run: median {head["load_1min_median"]:.1f}, range
{head["load_1min_range"][0]:.1f} to {head["load_1min_range"][1]:.1f} ({os.cpu_count()} cores). Timings are relative to that load.

Workload (both arms): warm-started `tiny-s` (0.54M parameters, character tokenizer), arithmetic `a+b=` (10..999),
{PROMPTS} prompts x {GROUP} completions per step, at most {MAX_NEW} new tokens, temperature 1, lr {LR} constant, AdamW
(betas 0.9 / 0.999, eps 1e-8, no weight decay), gradient norm clipped at 1, beta = 0, one on-policy update per batch,
clip 0.2 / 0.28, token-mean loss, reward = exact match of the completion's first line, {head["steps"]} steps, the same
prompt order (every pair's two runs recorded the same prompt-sequence hash: {head["prompt_order_identical"]}).
TRL runs without its default gradient checkpointing. Each arm runs in its own process; runs alternate tempering, TRL,
tempering asynchronous ({head["pairs"]} pairs, seeds
{head["seed"]}..{head["seed"] + head["pairs"] - 1}). The first {WARMUP_STEPS} steps of each run are excluded from timing,
and held-out evaluations (every {EVAL_EVERY} steps) are outside the timed steps.

| | tempering | TRL GRPOTrainer | ratio |
| --- | --- | --- | --- |
| steps/s (median) | {head["tempering_steps_per_s"]:.3f} | {head["trl_steps_per_s"]:.3f} | {head["throughput_ratio"]:.2f}x (median of paired ratios: {f(head["throughput_ratios"])}) |
| completions/s (median) | {head["tempering_completions_per_s"]:.0f} | {head["trl_completions_per_s"]:.0f} | |
| peak RSS, MB (median) | {head["tempering_peak_rss_mb"]:.0f} | {head["trl_peak_rss_mb"]:.0f} | |
| mean reward, last 10 steps (per run) | {f(head["tempering_reward_last10"])} | {f(head["trl_reward_last10"])} | |
| held-out pass@1 after the run (greedy, {TASK["heldout_size"]} prompts) | {f(head["tempering_heldout_pass_at_1"])} | {f(head["trl_heldout_pass_at_1"])} | |

Where tempering's step time goes (median share over runs): generation {100 * head["tempering_generation_share"]:.0f}%, policy update
{100 * head["tempering_update_share"]:.0f}%, the rest (verification, collation, logging) {100 * (1 - head["tempering_generation_share"] - head["tempering_update_share"]):.0f}%.

{thread_note(head)}

Both arms run the same Hugging Face model, and at this size its forward and backward are most of a step.
Most of each sequence is the prompt, shared by a group's {GROUP} samples: {share_note(head)}

## Learning curve

Held-out pass@1 (mean over runs) and tempering minus TRL in points (mean ± standard error over the {head["pairs"]} pairs):

| step | tempering | TRL | difference |
| --- | --- | --- | --- |
{curve_rows}

{curve_note(head)}

{claims_section(head)}

{async_section(head)}
## Is anything different between the arms?

Earlier tables had tempering behind TRL early in the run: after 30 steps in 3 of 3 pairs (-3.4, -3.0, -4.2 points;
a rerun on another machine gave -3.4, -3.2, -4.2, but with the same seeds, so it repeated the same three draws
rather than adding three), and at step 50 of 100 in 5 of 5 pairs (mean -7.6 ± 2.2 points, evaluated at steps 50 and
100 only), while step 100 agreed within noise. Every setting of the two arms was compared, and the benchmark
measures the comparison itself, first on one step of the warm start (the first step's prompts, sampled by
tempering, scored by the shared reward):

- update: tempering's gradient against `GRPOTrainer._compute_loss`'s on the same completions and advantages,
  relative difference
  {e["grad_rel_diff"]:.1e} (with `loss.share_prefix`: {e["grad_rel_diff_share_prefix"]:.1e}; gradient norm {e["grad_norm"]:.2f},
  so both clip at 1);
- advantages: TRL divides by std + 1e-4, tempering by std + 1e-6: at most {e["advantage_max_abs_diff"]:.1e} apart;
- optimizer: tempering {opt(e["optimizer"]["tempering"])}; TRL {opt(e["optimizer"]["trl"])}{" (fused)" if e["optimizer"]["trl"]["fused"] else ""},
  gradient clipping {e["optimizer"]["trl_max_grad_norm"]}, `{e["optimizer"]["trl_lr_scheduler"]}` schedule;
- sampling: TRL generates with {e["trl_generation"]}; over {e["first_token_tv"]["draws"]} draws of the first answer token
  of each of the step's {e["first_token_tv"]["prompts"]} prompts, the mean total variation to the model's exact softmax is
  {e["first_token_tv"]["tempering"]:.3f} for tempering and {e["first_token_tv"]["trl"]:.3f} for TRL, where an ideal sampler gets
  {e["first_token_tv"]["ideal"]:.3f}; every token tempering sampled on that step has a recorded log-prob within
  {e["sampler_logprob_max_abs_diff"]:.1e} of the model's, teacher-forced on the whole sequence;
- reward: the same exact match of the first line (tempering's arithmetic verifier also reads only the first line);
  evaluation: the same greedy held-out pass@1 function on both arms' models.

{replay_note(head)}

The benchmark sets every optimizer and sampling value explicitly in both arms, checks that both arms saw the same
prompts, runs {head["steps"]} steps over {head["pairs"]} pairs, and reports the paired difference with its standard error
(`heldout_diff_mean_points`, `heldout_diff_se_points`, `heldout_diffs_points` in the JSON). It evaluates every
{EVAL_EVERY} steps instead of every 50 as before: a greedy evaluation of one run moves by several points from one
evaluation to the next in both arms (above), so two snapshots per run could not tell a gap from noise, and the
curves are also compared on their average over all evaluations (`heldout_avg_diff_mean_points`,
`heldout_avg_diff_se_points`) and on the training reward averaged over the run, the sampled success both arms
optimise: tempering minus TRL, in points, {interval_text(head["reward_avg_diffs_points"])}. Warm start (before RL):
held-out pass@1 {head["heldout_start"]:.3f}.

Goal: at least 2x TRL's steps/s with an equal learning curve. Measured: {head["throughput_ratio"]:.2f}x, so the
throughput goal is {"met" if head["throughput_ratio"] >= 2 else "not met"} at this load. {load_note(head)} The previous
table's {PREVIOUS["ratio"]}x (and {PREVIOUS["long_ratio"]}x in the long regime) was measured at a median 1-minute load of {PREVIOUS["load"]} on 2
cores, beside other experiments: TRL ran {PREVIOUS["trl_steps_per_s"]} steps/s there, {head["trl_steps_per_s"] / PREVIOUS["trl_steps_per_s"]:.1f}x slower than here, and
tempering {PREVIOUS["tempering_steps_per_s"]}, {head["tempering_steps_per_s"] / PREVIOUS["tempering_steps_per_s"]:.1f}x slower than here (its sampler has moved to the update's
thread since), so those ratios described the contention more than the two implementations.
"""


def replay_note(head: dict) -> str:
    """What one step cannot show, measured over many: the update of each arm on the same samples, and each
    arm's sampler on the whole completion at a fixed policy."""
    r = head["equivalence"]["replay"]
    rows = "\n".join(
        f"| {name.replace('_', ' ')} | {c['exact_reward']:.4f} | {c['tempering_reward']:.4f} ± {c['tempering_reward_se']:.4f} | "
        f"{c['trl_reward']:.4f} ± {c['trl_reward_se']:.4f} | {c['all_equal_groups_independent']:.3f} | "
        f"{c['tempering_all_equal_groups']:.3f} | {c['trl_all_equal_groups']:.3f} |"
        for name, c in r["samplers"].items()
    )
    n = next(iter(r["samplers"].values()))["samples"]
    return f"""One step cannot show what drifts over many, so the check also runs {r["steps"]} steps:

- update over many steps: tempering trains {r["steps"]} steps; then TRL's own training loop (`GRPOTrainer.train`: its
  rewards, advantages, loss, clipping, fused AdamW and schedule) trains a copy of the warm start on the completions
  tempering sampled, its generation replaced by them. After every step the two sets of weights are within
  {max(r["param_rel_diffs"]):.1e} of each other (relative; {r["param_rel_diffs"][0]:.1e} after the first step, the rounding of Adam's
  first normalised step), while tempering's moved {r["moved_rel"]:.1e} from the warm start; the two reward functions
  agree on every completion (largest per-step mean difference {r["reward_max_abs_diff"]:.1e}).
- sampling over the whole completion: at the warm start and at TRL's weights after those {r["steps"]} steps, {n}
  completions from each arm's sampler for the first steps' prompts x {head["group_size"]}, against the model's exact expected reward
  (the probability of the answer followed by a newline or EOS; completions with spaces around the answer also
  score, so it is exact up to those), and the share of groups whose {head["group_size"]} rewards are all equal (no signal) against
  independent draws at each prompt's exact probability (a sampler whose draws within a group depended on each
  other would show there):

| policy | exact reward | tempering sampler | TRL generation | all-equal groups, independent | tempering | TRL |
| --- | --- | --- | --- | --- | --- | --- |
{rows}

{sampling_verdict(r)}"""


def sampling_verdict(r: dict) -> str:
    """Whether both samplers' success rates agree with the exact expected reward (within 3 standard errors)."""
    off = [
        f"{arm} at {name.replace('_', ' ')}"
        for name, c in r["samplers"].items()
        for arm in ("tempering", "trl")
        if abs(c[f"{arm}_reward"] - c["exact_reward"]) > 3 * c[f"{arm}_reward_se"]
    ]
    if off:
        return "A sampler's success rate is more than 3 standard errors from the exact reward: " + ", ".join(off) + "."
    return (
        "Both samplers' success rates are within 3 standard errors of the exact reward at both policies, and given "
        "the same samples the two updates reach the same weights: the arms differ only in their random draws, "
        "so nothing in tempering was changed."
    )


def thread_note(head: dict) -> str:
    """The measured cost of sampling on another thread than the update's (the reason tempering does not)."""
    t = head["equivalence"].get("sampler_thread")
    if t is None:
        return ""
    return (
        f"tempering samples on the thread its update runs on (`HFSampler.in_process`). Measured in this run on the "
        f"warm start, one sampling call of a step's {PROMPTS} x {GROUP} completions takes {t['same_thread_s']:.3f} s "
        f"there and {t['worker_thread_s']:.3f} s in a worker thread beside it, as `asyncio.to_thread` ran it before, and "
        f"{t['same_thread_after_s']:.3f} s on the first thread again once the worker's OpenMP thread team exists: with "
        "more OpenMP threads than cores, every team waits less efficiently. The previous tables sampled in such a "
        "worker thread, beside the update's thread team."
    )


def load_note(head: dict) -> str:
    """What the load around the runs means for the throughput ratio."""
    load, cores = head["load_1min_median"], os.cpu_count() or 1
    if load <= cores:
        return (
            f"The machine was otherwise quiet (1-minute load average at a median {load:.1f} on {cores} cores, about "
            "the runs' own threads)."
        )
    return (
        f"With the 1-minute load average at a median {load:.1f} on {cores} cores, each run had a fraction of a core, "
        "and how much an arm slows down under such contention depends on how it uses its threads: the ratio "
        "describes this load, not a quiet machine."
    )


def async_section(head: dict) -> str:
    """The asynchronous arm against the synchronous one, from the same pairs."""
    f = lambda xs: ", ".join(f"{x:.3f}" for x in xs)
    pct = lambda k: f"{100 * head[k]:.0f}%"
    g = head["tempering_generation_share"]
    bound = 1 / max(g, 1 - g)  # perfect overlap of generation with the rest, each on cores of its own
    step_sync = 1 / head["tempering_steps_per_s"]
    upd_sync = head["tempering_update_share"] * step_sync
    upd_async = head["tempering_async_update_share"] / head["tempering_async_steps_per_s"]
    d = head["async_pass_at_1_diffs"]
    return f"""## Asynchronous rollouts

The third arm of each pair is tempering with `rollout.async_steps=1`: a producer thread generates the next batch
while the trainer updates on this one (each batch sampled by weights one update old, `loss.rollout_correction=tis`),
with the 2 torch threads split, 1 for the update and 1 for the sampler; it drains before each held-out evaluation.

| | tempering | tempering async (k = 1) |
| --- | --- | --- |
| steps/s (median) | {head["tempering_steps_per_s"]:.3f} | {head["tempering_async_steps_per_s"]:.3f} |
| held-out pass@1 after the run (per run) | {f(head["tempering_heldout_pass_at_1"])} | {f(head["tempering_async_heldout_pass_at_1"])} |
| mean reward, last 10 steps (per run) | {f(head["tempering_reward_last10"])} | {f(head["tempering_async_reward_last10"])} |
| generation, share of the step time | {pct("tempering_generation_share")} | {pct("tempering_async_generation_share")} (in the producer, overlapping) |
| update, share of the step time | {pct("tempering_update_share")} | {pct("tempering_async_update_share")} |
| the trainer waiting for its batch | | {pct("tempering_async_wait_share")} |

- asynchronous / synchronous: {head["async_speedup"]:.2f}x (paired {f(head["async_speedups"])}); goal 1.3x:
  {"met" if head["async_speedup"] >= 1.3 else "not met"}. Mean staleness {head["tempering_async_staleness"]:.2f} updates.
- held-out pass@1, asynchronous minus synchronous, per pair: {", ".join(f"{x:+.1f}" for x in d)} points; mean
  {interval_text(d)}. Averaged over the whole curve (every {EVAL_EVERY} steps):
  {", ".join(f"{x:+.1f}" for x in head["async_curve_avg_diffs"])} points; mean {interval_text(head["async_curve_avg_diffs"])}
  ({sum(x > 0 for x in head["async_curve_avg_diffs"])} of {len(head["async_curve_avg_diffs"])} pairs ahead; the claims table judges it). The comparison is at the same
  number of updates, and each asynchronous update learns from samples one update old.
- What bounds it: with generation at {100 * g:.0f}% of a synchronous step, hiding it entirely behind the rest of the
  step gives at most {bound:.2f}x, and only if the two sides had cores of their own. Here they split 2 cores: the
  update, on 1 thread, takes {upd_async:.2f} s of each asynchronous step, against {upd_sync:.2f} s on 2 threads in a whole
  synchronous step of {step_sync:.2f} s, so the update alone {"is longer than" if upd_async > step_sync else "fits in"} a synchronous step.
"""


def share_note(head: dict) -> str:
    """What each arm's update runs of the shared prompts."""
    if head.get("tempering_share_prefix"):
        return (
            "tempering's update runs each shared prompt through the model once (`loss.share_prefix`, on by "
            "default) and only the completions per sample; TRL's runs every prompt-plus-completion row in full."
        )
    return "both arms run every prompt-plus-completion row in full (tempering's `loss.share_prefix` was off)."


def curve_note(head: dict) -> str:
    """Final held-out pass@1 differences per pair, with their interval and one measurement's standard error."""
    diffs = head["heldout_diffs_points"]
    p = st.mean(head["tempering_heldout_pass_at_1"] + head["trl_heldout_pass_at_1"])
    one = 100 * (p * (1 - p) / TASK["heldout_size"]) ** 0.5
    return (
        f"After {head['steps']} steps, tempering minus TRL held-out pass@1 per pair is "
        f"{', '.join(f'{d:+.1f}' for d in diffs)} points (tempering ahead in {sum(d > 0 for d in diffs)} of "
        f"{len(diffs)}): {interval_text(diffs)} (one pass@1 measurement alone has a binomial standard error of about "
        f"{one:.1f} points)." + early_note(head)
    )


def early_note(head: dict) -> str:
    """The evaluations before the last step whose paired 95% interval excludes 0, against how many of them
    chance alone would put there, and the curves' averages."""
    from tempering.experiments import interval

    curves, earlier = head["heldout_curves"], head["heldout_steps"][:-1]
    if not earlier or head["pairs"] < 2:
        return ""
    beyond = []
    for step in earlier:
        pick = lambda arm: [r[str(step)] for r in curves[arm]]
        iv = interval(paired_diff(pick("tempering"), pick(BASELINE))[0])
        if iv.ci95[0] > 0 or iv.ci95[1] < 0:
            beyond.append(f"step {step}: {iv.mean:+.1f}, tempering {'behind' if iv.mean < 0 else 'ahead'}")
    found = "; ".join(beyond) if beyond else "none"
    d = head["heldout_avg_diffs_points"]
    return (
        f" Of the {len(earlier)} earlier evaluations, those whose 95% interval excludes 0: {found} (chance alone puts "
        "about one in twenty there). One run's greedy pass@1 moves by a median of "
        f"{head['tempering_heldout_swing_points']:.1f} points (tempering) and {head[f'{BASELINE}_heldout_swing_points']:.1f} "
        f"points (TRL) between evaluations {EVAL_EVERY} steps apart, so a single evaluation is a noisy snapshot; "
        f"averaged over the whole curve, tempering minus TRL is {interval_text(d)} "
        f"({sum(x > 0 for x in d)} of {len(d)} pairs ahead), judged in the claims table."
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="docs/results")
    p.add_argument("--model", help="warm-started model folder (default: pre-train one now)")
    p.add_argument("--arm", choices=[*ARMS, "check"], help=argparse.SUPPRESS)
    p.add_argument("--arm-out", help=argparse.SUPPRESS)
    p.add_argument("--regime", default="tiny", choices=["tiny", "real"], help=argparse.SUPPRESS)
    p.add_argument("--render", metavar="JSON", help="rewrite the table from an earlier run's JSON (no runs)")
    p.add_argument("--equivalence", metavar="JSON", help="reuse an earlier run's equivalence check (same model, seed)")
    p.add_argument("--long-steps", type=int, default=4, help="steps of each long-regime run")
    p.add_argument("--long-pairs", type=int, default=3, help="pairs of the long regime (0: skip it)")
    a = p.parse_args()
    if a.regime == "real" or (a.model and not Path(a.model).exists()):  # a pretrained model's name
        import grpo_vs_trl_real

        grpo_vs_trl_real.install(sys.modules[__name__])
        if not a.arm:
            grpo_vs_trl_real.main(a, sys.modules[__name__])
            return
    if a.render:
        head = json.loads(Path(a.render).read_text())
        head["rendered"] = "python benchmarks/grpo_vs_trl.py " + " ".join(sys.argv[1:])
        write(Path(a.out), head)
        return
    if a.arm:
        import torch

        torch.set_num_threads(a.threads)
        torch.manual_seed(a.seed)
        res = (check_equivalence if a.arm == "check" else ARMS[a.arm])(a.model, a.steps, a.seed)
        res["peak_rss_mb"] = peak_rss_mb()
        Path(a.arm_out).write_text(json.dumps(res))
        return
    model_dir = a.model or prepare_model(Path("/tmp/bench_grpo_model"), a.seed)
    peak = grpo_perf.peak_matmul_flops(a.threads)  # again after each pair; the largest counts
    if a.equivalence:  # an earlier run's check of the same model and seed (the check is slow on a busy machine)
        check = json.loads(Path(a.equivalence).read_text())
    else:
        check = run_arm("check", model_dir, a.steps, a.seed, a.threads)
    print("equivalence", json.dumps(check), flush=True)
    from tempering.models import load_policy

    start = heldout_pass(*load_policy(model_dir))
    long_head: dict = {}
    flops_arms: list = []
    if a.long_pairs:  # first: it is short, and the pairs below are written as they finish
        long_model = grpo_perf.long_model(Path("/tmp/bench_grpo_long_model"), a.seed)
        long_head = grpo_perf.measure_long(long_model, a.long_steps, a.long_pairs, a.seed, a.threads)
        flops_arms = grpo_perf.long_flops_arms(long_head, long_model)
    run_pairs(a, model_dir, {**long_head, "equivalence": check, "heldout_start": start}, peak, flops_arms, write)


def run_pairs(a, model_dir: str, extra: dict, peak: float, flops_arms: list, write_fn) -> None:
    """`a.pairs` rounds of every arm in `ARMS`; `write_fn(out, head)` after each round."""
    long_head = {k: v for k, v in extra.items() if k.startswith("long_")}
    p_len = grpo_perf.prompt_len(model_dir, train_order(1, a.seed)[0], n=min(2000, TASK["train_size"]))
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    raw: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for i in range(a.pairs):
        for arm in ARMS:
            res = run_arm(arm, model_dir, a.steps, a.seed + i, a.threads)
            raw[arm].append(res)
            runs[arm].append(summarize(res))
            print(arm, i, {k: round(v, 3) for k, v in runs[arm][-1].items()}, res["load_1min"], flush=True)
        head = {**summary(runs, raw, a), **extra}
        peak = max(peak, grpo_perf.peak_matmul_flops(a.threads))
        short = [(arm, model_dir, PROMPTS, GROUP, p_len, WARMUP_STEPS, raw[arm]) for arm in ARMS]
        grpo_perf.add_flops(head, peak, short + flops_arms)
        loads = [
            x
            for runs_ in [*head["load_1min"].values(), *long_head.get("long_load_1min", {}).values()]
            for r in runs_
            for x in r
        ]
        head["load_1min_median"], head["load_1min_range"] = st.median(loads), [min(loads), max(loads)]
        write_fn(Path(a.out), head)  # after every pair: the tables stand with the pairs done if the run is cut short


def summary(runs: dict[str, list[dict]], raw: dict[str, list[dict]], a) -> dict:
    """The JSON: per-arm medians and per-run lists under `{arm}_*` keys, comparisons with `BASELINE`."""
    med = lambda arm, k: st.median(r[k] for r in runs[arm])
    head: dict = {}
    for arm in ARMS:
        key = arm.replace("-", "_")
        for k in ("steps_per_s", "completions_per_s", "peak_rss_mb"):
            head[f"{key}_{k}"] = med(arm, k)
        head[f"{key}_reward_last10"] = [r["reward_last10"] for r in runs[arm]]
        head[f"{key}_heldout_pass_at_1"] = [r["heldout_pass_at_1"] for r in runs[arm]]
        head[f"{key}_heldout_curve_mean"] = {
            str(s): st.mean(r["heldout"][s] for r in raw[arm]) for s in sorted(raw[arm][0]["heldout"])
        }
        head[f"{key}_completion_len"] = st.median(st.mean(r["completion_len"]) for r in raw[arm])
    share = lambda r, k: safe_div(sum(r[k][WARMUP_STEPS:]), sum(r["step_seconds"][WARMUP_STEPS:]))
    for arm in ("tempering", "tempering_async"):
        head[f"{arm}_generation_share"] = st.median(share(r, "gen_seconds") for r in raw[arm.replace("_", "-")])
        head[f"{arm}_update_share"] = st.median(share(r, "update_seconds") for r in raw[arm.replace("_", "-")])
    asy = raw["tempering-async"]
    head["tempering_async_wait_share"] = st.median(share(r, "wait_seconds") for r in asy)
    head["tempering_async_staleness"] = st.mean(x for r in asy for x in r["staleness"][1:])
    speedups = [a["steps_per_s"] / s["steps_per_s"] for a, s in zip(runs["tempering-async"], runs["tempering"])]
    head["async_speedup"], head["async_speedups"] = st.median(speedups), speedups
    diffs, mean, se = paired_diff(head["tempering_async_heldout_pass_at_1"], head["tempering_heldout_pass_at_1"])
    head.update(async_pass_at_1_diffs=diffs, async_pass_at_1_diff=mean, async_pass_at_1_diff_se=se)
    curve_avg = lambda arm: [r["heldout_curve_avg"] for r in runs[arm]]
    diffs, mean, se = paired_diff(curve_avg("tempering-async"), curve_avg("tempering"))
    head.update(async_curve_avg_diffs=diffs, async_curve_avg_diff=mean, async_curve_avg_diff_se=se)
    ratios = [t["steps_per_s"] / r["steps_per_s"] for t, r in zip(runs["tempering"], runs[BASELINE])]
    head["throughput_ratio"], head["throughput_ratios"] = st.median(ratios), ratios
    diffs, mean, se = paired_diff(head["tempering_heldout_pass_at_1"], head[f"{BASELINE}_heldout_pass_at_1"])
    head.update(heldout_diffs_points=diffs, heldout_diff_mean_points=mean, heldout_diff_se_points=se)
    for arm in ("tempering", BASELINE):
        head[f"{arm}_heldout_curve_avg"] = [r["heldout_curve_avg"] for r in runs[arm]]
        # how far one run's greedy pass@1 moves between consecutive evaluations (median |change|, points)
        values = [[r["heldout"][s] for s in sorted(r["heldout"])] for r in raw[arm]]
        moves = [100 * abs(b - a) for v in values for a, b in zip(v, v[1:])]
        head[f"{arm}_heldout_swing_points"] = st.median(moves) if moves else float("nan")
    diffs, mean, se = paired_diff(head["tempering_heldout_curve_avg"], head[f"{BASELINE}_heldout_curve_avg"])
    head.update(heldout_avg_diffs_points=diffs, heldout_avg_diff_mean_points=mean, heldout_avg_diff_se_points=se)
    # the training reward (sampled, on-policy success) averaged over the whole run: the quantity both optimise
    avg_reward = lambda arm: [st.mean(r["rewards"]) for r in raw[arm]]
    diffs, mean, se = paired_diff(avg_reward("tempering"), avg_reward(BASELINE))
    head.update(reward_avg_diffs_points=diffs, reward_avg_diff_mean_points=mean, reward_avg_diff_se_points=se)
    steps = sorted(raw["tempering"][0]["heldout"])
    head["heldout_steps"] = steps
    head["heldout_curve_diff_points"] = {
        str(s): list(
            paired_diff([r["heldout"][s] for r in raw["tempering"]], [r["heldout"][s] for r in raw[BASELINE]])[1:]
        )
        for s in steps
    }
    head["trl_prompt_tokens_identical"] = [r.get("prompt_tokens_identical", False) for r in raw[BASELINE]]
    head["prompt_order_identical"] = all(
        len({raw[arm][i]["prompt_sha"] for arm in ARMS}) == 1 for i in range(len(raw[BASELINE]))
    )
    loads = [x for arm in ARMS for r in raw[arm] for x in r["load_1min"]]
    head["load_1min_median"], head["load_1min_range"] = st.median(loads), [min(loads), max(loads)]
    head.update(
        steps=a.steps,
        pairs=len(raw[BASELINE]),
        threads=a.threads,
        seed=a.seed,
        tempering_share_prefix=SHARE_PREFIX,
        async_seed_offset=ASYNC_SEED_OFFSET,
        prompts_per_step=PROMPTS,
        group_size=GROUP,
        max_completion_length=MAX_NEW,
        lr=LR,
        regime=REGIME,
        eval_every=EVAL_EVERY,
        trl_version=__import__("trl").__version__,
        transformers_version=__import__("transformers").__version__,
        machine=f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        command="python benchmarks/grpo_vs_trl.py " + " ".join(sys.argv[1:]),
        curves={arm: [r["rewards"] for r in raw[arm]] for arm in raw},
        heldout_curves={arm: [{str(k): v for k, v in r["heldout"].items()} for r in raw[arm]] for arm in raw},
        load_1min={arm: [r["load_1min"] for r in raw[arm]] for arm in raw},
    )
    return head


def write(out: Path, head: dict) -> None:
    from tempering.runlog import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    head["seeds"] = list(range(head["seed"], head["seed"] + head["pairs"]))
    md = render(head) + "\n" + grpo_perf.render(head)  # sets head["claims"]
    atomic_write_text(out / "grpo_vs_trl.json", json.dumps(head, indent=2) + "\n")
    atomic_write_text(out / "grpo_vs_trl.md", md)
    print(md)


if __name__ == "__main__":
    main()
