"""Kernel environment: KernelBench-format problems, compiled, verified and timed in the sandbox.

problems.py    load problem folders (KernelBench's load unchanged), the built-in suite, size override
suite/         built-in CPU-sized problems and one reference submission each
submission.py  parse an answer (code, backend, sources) and static checks
harness/       the read-only scripts that run inside each verification job
verifier.py    compile (build cache) + verify + profile in the sandbox -> KernelResult
rewards.py     CUDA Agent {-1,1,2,3}, log-speedup, correctness, the [0, 1] score
feedback.py    text for the next turn
sketch.py      the kernel-sketch language, lowered to C
env.py         KernelFamily / SketchFamily / KernelEnv for the rollout engine
agent.py       tool-calling mode (write file, compile, verify, profile) and SKILL.md
synth.py       CUDA Agent's data synthesis: compose operators, filter, de-duplicate
evaluate.py    KernelBench-style evaluation table
"""

from tempering.envs.kernels.env import KernelEnv, KernelFamily, SketchFamily
from tempering.envs.kernels.problems import Problem, builtin_problems, load_problem, load_problems
from tempering.envs.kernels.verifier import KernelResult, KernelVerifier, VerifyConfig

__all__ = [
    "KernelEnv",
    "KernelFamily",
    "KernelResult",
    "KernelVerifier",
    "Problem",
    "SketchFamily",
    "VerifyConfig",
    "builtin_problems",
    "load_problem",
    "load_problems",
]
