"""Terminal tasks in Harbor's format: bundles (read, write, Harbor's rules), their jobs in the sandbox
(or Docker) with Harbor's paths, and the multi-turn environment over them.

    bundle.py     the task format: `Bundle`, `TaskConfig` (task.toml), read/write, Terminal-Bench 1 folders
    image.py      the task's image emulated on the sandbox's base (the Dockerfile subset, installed
                  packages, downloads at run time and their stand-ins), or why only Docker can make it
    workspace.py  the working folder carried between sandbox jobs; rewards; the tests in a job of their
                  own (`run_tests`), hermetic
    session.py    one job for a step's commands that stays up while the tests run beside it, sharing only
                  the network (`TerminalEnv(keep_services=True)`, `session.solve_then_test`)
    injob/        the scripts that run inside the jobs: unpacking and packing the working folder, the
                  session's supervisor, the tests' Python start-up module
    docker.py     the same workspace in Docker, for environments the sandbox cannot emulate
    env.py        `TerminalEnv` / `TerminalFamily`: the policy types commands, the tests decide the reward
"""

from tempering.envs.terminal.bundle import (
    Bundle,
    BundleError,
    Problem,
    Step,
    TaskConfig,
    harbor_problems,
    load_bundles,
    read_bundle,
    write_bundle,
)
from tempering.envs.terminal.env import SAMPLES, TerminalEnv, TerminalFamily, bundle_task, local_problem, parse_command
from tempering.envs.terminal.image import Download, NeedsDocker, NeedsNetwork, downloads, local_image
from tempering.envs.terminal.workspace import Rewards, Workspace

__all__ = [
    "SAMPLES",
    "Bundle",
    "BundleError",
    "Download",
    "NeedsDocker",
    "NeedsNetwork",
    "Problem",
    "Rewards",
    "Step",
    "TaskConfig",
    "TerminalEnv",
    "TerminalFamily",
    "Workspace",
    "bundle_task",
    "downloads",
    "harbor_problems",
    "load_bundles",
    "local_image",
    "local_problem",
    "parse_command",
    "read_bundle",
    "write_bundle",
]
