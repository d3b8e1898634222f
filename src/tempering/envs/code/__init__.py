"""Code tasks with tests, verified in the sandbox (see docs/code.md).

`load_problems` reads the built-in problems or a local HumanEval, MBPP, LiveCodeBench or native
file; `grade` checks one answer; `CodeEnv` is one multi-turn episode (feedback from public tests
only, reward from hidden ones); `CodeTaskFamily` serves a problem file as train / heldout / all.
"""

from tempering.envs.code.env import CodeEnv, CodeTaskFamily, Grade, extract_code, grade, problem_task
from tempering.envs.code.formats import load_problems
from tempering.envs.code.problems import CodeProblem, Test

__all__ = [
    "CodeEnv",
    "CodeProblem",
    "CodeTaskFamily",
    "Grade",
    "Test",
    "extract_code",
    "grade",
    "load_problems",
    "problem_task",
]
