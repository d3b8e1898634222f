"""Kernel task families for the rollout engine.

- `KernelFamily`: write a kernel for a KernelBench-format problem (full C, torch_ext, CUDA or Triton
  submission); for real models.
- `SketchFamily`: write a one-line kernel sketch (`order=ikj tile=32 unroll=4 vec=1`) that tempering
  lowers to C; short enough for the built-in tiny character-level models.

Both verify with one shared `KernelVerifier` (one sandbox pool, one build cache) and return
`StepResult(score, success, done, feedback, status, info)`. `score` is the reward named in `reward`:
`score` (default, in [0, 1], see rewards.py), `cuda_agent` ({-1, 1, 2, 3}), `log_speedup` or
`correct`. `info` always carries all of them, the timings and the speedups.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from dataclasses import dataclass, field, fields

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.kernels import rewards
from tempering.envs.kernels.feedback import feedback
from tempering.envs.kernels.problems import Problem, builtin_problems, load_problems, module_constants
from tempering.envs.kernels.sketch import VALUES, lower, orders, parse_sketch, spec_for, submission
from tempering.envs.kernels.verifier import KernelResult, KernelVerifier, VerifyConfig
from tempering.errors import UserError
from tempering.types import Task

SELECTABLE = ("score",) + rewards.REWARDS

C_INSTRUCTIONS = """Write class ModelNew(nn.Module) with the same constructor and forward as Model, computing \
the same result with your own kernel. Put C in a module-level string C_SOURCE = r\"\"\"...\"\"\" (compiled with \
gcc -O3 -fopenmp), load it with `from ckernel import load_c; self.lib = load_c()` and call \
`self.lib.fn(tensor, ..., n)` (tensors become float pointers, ints long, floats float). In forward you may \
only allocate outputs (torch.empty, torch.empty_like) and call your kernel: torch operators raise."""


def result_info(res: KernelResult, extra: dict | None = None) -> dict:
    """The StepResult.info of a verified answer: all rewards, timings, speedups, the report."""
    info = res.to_dict()
    info.update(rewards={k: res.reward(k) for k in rewards.REWARDS} | {"score": res.score})
    info.update(extra or {})
    return info


@dataclass
class KernelFamily(TaskFamily):
    """KernelBench-format problems; the policy answers with a full submission."""

    problems_dir: str | None = None
    """Folder of problem files (KernelBench level folders load unchanged); None: the built-in suite."""
    scale: float = 1.0
    """Size override: module-level size constants are multiplied by this (see docs/kernels.md)."""
    reward: str = "score"
    """StepResult.score: `score` ([0, 1]), `cuda_agent`, `log_speedup` or `correct`."""
    success_reward: int = 2
    """An answer succeeds (ends the episode) at this CUDA Agent reward (2: faster than eager)."""
    heldout_share: float = 0.2
    """Share of problems reserved for the held-out split (by a hash of the name)."""
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    """Compile / verify / profile settings."""
    memoize: bool = False
    """Reuse the verification of an identical submission to the same problem (timed once): RL policies repeat
    themselves, and each verification is a fresh process that imports torch."""
    problem_names: list[str] | None = None
    """Only these problems (file names such as `01_relu`; each keeps its train / held-out split); None: all."""
    name: str = "kernels"

    def __post_init__(self):
        if self.reward not in SELECTABLE:
            raise UserError(f"kernels: reward must be one of {', '.join(SELECTABLE)}, got {self.reward!r}")
        if isinstance(self.verify, dict):
            known = {f.name for f in fields(VerifyConfig)}
            bad = set(self.verify) - known
            if bad:
                raise UserError(f"kernels: unknown verify keys {sorted(bad)}; allowed: {sorted(known)}")
            self.verify = VerifyConfig(**self.verify)
        self._verifier: KernelVerifier | None = None
        self._problems: list[Problem] | None = None
        self._memo: dict[tuple[str, str], KernelResult | asyncio.Future] = {}

    @property
    def verifier(self) -> KernelVerifier:
        if self._verifier is None:
            self._verifier = KernelVerifier(self.verify)
        return self._verifier

    def problems(self) -> list[Problem]:
        if self._problems is None:
            if self.problems_dir:
                self._problems = load_problems(self.problems_dir, scale=self.scale)[0]
            else:
                self._problems = builtin_problems(scale=self.scale)
            found = [p for p in self._problems if self.accepts(p)]
            if self.problem_names is not None:
                unknown = sorted(set(self.problem_names) - {p.name for p in found})
                if unknown:
                    raise UserError(
                        f"{self.name}: no problem named {', '.join(unknown)} here; choose from "
                        f"{', '.join(p.name for p in found)}"
                    )
                found = [p for p in found if p.name in self.problem_names]
            self._problems = found
        return self._problems

    def accepts(self, problem: Problem) -> bool:
        return True

    def split_of(self, problem: Problem) -> str:
        h = int(hashlib.sha256(problem.name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return "heldout" if h < self.heldout_share else "train"

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in ("train", "heldout"):
            raise UserError(f"kernels: split must be train or heldout, got {split!r}")
        pool = [p for p in self.problems() if self.split_of(p) == split]
        if not pool:
            raise UserError(
                f"{self.name}: no problem falls in the {split} split ({len(self.problems())} problems, "
                f"heldout_share={self.heldout_share}); add problems or change heldout_share"
            )
        rng = random.Random(seed)
        order = list(pool)
        out: list[Task] = []
        while len(out) < n:
            rng.shuffle(order)
            out += [self.make_task(p, rng) for p in order[: n - len(out)]]
        return out

    def make_task(self, problem: Problem, rng: random.Random | None = None) -> Task:
        prompt = f"{problem.source.rstrip()}\n\n# {C_INSTRUCTIONS}\n"
        # answer: the reference submission where the problem ships one (a supervised target), else the name
        return Task(
            id=f"{self.name}:{problem.name}",
            prompt=prompt,
            answer=problem.solution or problem.name,
            family=self.name,
            meta={"problem": problem},
        )

    def make_env(self, task: Task) -> Env:
        return KernelEnv(task, self)

    async def verify_submission(self, problem: Problem, text: str) -> KernelResult:
        """Verify (or, with `memoize`, reuse an identical earlier verification, sharing one in flight)."""
        if not self.memoize:
            return await self.verifier.verify(problem, text)
        key = (problem.name, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
        hit = self._memo.get(key)
        if isinstance(hit, KernelResult):
            return hit
        if hit is None or hit.get_loop() is not asyncio.get_running_loop():
            hit = self._memo[key] = asyncio.ensure_future(self.verifier.verify(problem, text))
        res = await hit
        self._memo[key] = res
        return res

    def to_submission(self, problem: Problem, text: str) -> tuple[str | None, str, dict]:
        """(submission text, or None with a parse error message, extra info)."""
        return text, "", {}


class KernelEnv(Env):
    """One episode of one kernel problem; each step verifies one answer."""

    def __init__(self, task: Task, family: KernelFamily):
        super().__init__(task)
        self.family = family

    async def step(self, action: str) -> StepResult:
        fam = self.family
        problem: Problem = self.task.meta["problem"]
        text, error, extra = fam.to_submission(problem, action)
        if text is None:
            return StepResult(
                score=failure_value(fam.reward),
                success=False,
                done=False,
                feedback=error,
                status="parse_error",
                info={"message": error, **extra},
            )
        res = await fam.verify_submission(problem, text)
        value = res.score if fam.reward == "score" else res.reward(fam.reward)
        success = res.correct and res.cuda_agent_reward >= fam.success_reward and not res.interpreted
        return StepResult(
            score=value,
            success=success,
            done=success,
            feedback=feedback(res),
            status=res.status,
            info=result_info(res, extra),
        )


def failure_value(reward: str) -> float:
    return {"score": 0.0, "cuda_agent": -1.0, "log_speedup": -1.0, "correct": 0.0}[reward]


WARM_START_KEYS = ("tile", "unroll", "vec", "fuse")


def warm_start_sketch(kind: str, rng: random.Random, keys: tuple[str, ...] = WARM_START_KEYS) -> str:
    """A valid sketch with the `keys` knobs random (one thread; correct by construction unless `tail` is
    one of them).

    It is the task's `answer`, so that a supervised warm start teaches the grammar; it is not the
    fastest sketch (RL finds those)."""
    parts = [f"order={rng.choice(orders(kind))}"] if kind != "map" else []
    for key in keys:
        parts.append(f"{key}={rng.choice(VALUES[key])}")
    return " ".join(parts)


@dataclass
class SketchFamily(KernelFamily):
    """Built-in problems with a sketch spec; the policy writes a kernel sketch (see sketch.py)."""

    verify: VerifyConfig = field(default_factory=lambda: VerifyConfig(seeds=3, signed_trials=1, timed_runs=10))
    """Cheaper checks than full submissions (many short rollouts). A sketch's `threads` is capped at
    `verify.threads` (1 by default), the count eager PyTorch gets: more cores are not a speedup."""
    memoize: bool = True
    """Sketch policies repeat sketches often: verify each distinct (problem, sketch) once."""
    answer_keys: tuple[str, ...] = WARM_START_KEYS
    """Knobs the tasks' warm-start answers vary (fewer: a narrower warm start and fewer distinct kernels to
    verify; with `tail` in them some answers are wrong, which gives feedback turns something to fix)."""
    name: str = "kernel_sketch"

    def __post_init__(self):
        super().__post_init__()
        bad = sorted(set(self.answer_keys) - set(VALUES))
        if bad:
            raise UserError(f"{self.name}: answer_keys {bad} are not sketch knobs ({', '.join(VALUES)})")
        self.answer_keys = tuple(self.answer_keys)

    def accepts(self, problem: Problem) -> bool:
        return spec_for(problem.name) is not None

    def make_task(self, problem: Problem, rng: random.Random | None = None) -> Task:
        spec = spec_for(problem.name)
        assert spec is not None  # accepts(): only problems with a sketch spec
        short = problem.name.split("_", 1)[1]
        prompt = f"sketch {short} {spec.kind} loops={'|'.join(orders(spec.kind))}:"
        return Task(
            id=f"{self.name}:{problem.name}",
            prompt=prompt,
            answer=warm_start_sketch(spec.kind, rng or random.Random(0), self.answer_keys),
            family=self.name,
            difficulty={"map": 1.0, "reduce": 2.0, "matmul": 3.0}[spec.kind],
            meta={"problem": problem},
        )

    def to_submission(self, problem: Problem, text: str) -> tuple[str | None, str, dict]:
        spec = spec_for(problem.name)
        assert spec is not None  # accepts(): only problems with a sketch spec
        line = text.strip().splitlines()[0] if text.strip() else ""
        try:
            settings = parse_sketch(line, spec.kind)
        except UserError as e:
            return None, f"Sketch parse error: {e}", {"sketch": line}
        c_source = lower(spec, settings, max_threads=self.verify.threads)
        return submission(spec, c_source, module_constants(problem.source)), "", {"sketch": line, "settings": settings}
