"""Python code tasks with unit tests, verified in the sandbox (see docs/sandbox.md).

`CodeTaskFamily` serves the built-in problems (problems.jsonl, 40+ of graded difficulty) or any
JSONL file in the same format; `CodeEnv` is one multi-turn episode; `grade` checks one answer.
"""

from tempering.envs.code.env import CodeEnv, CodeTaskFamily, Grade, extract_code, grade
from tempering.envs.code.problems import CodeProblem, Test, load_problems

__all__ = ["CodeEnv", "CodeProblem", "CodeTaskFamily", "Grade", "Test", "extract_code", "grade", "load_problems"]
