"""Built-in families: the six actions are real parameter moves, every result passes the static checks,
and gold verification in the sandbox accepts good bundles and rejects broken ones for the right reason."""

import asyncio

import pytest

from tempering.envs.terminal.workspace import NeedsDocker, local_image
from tempering.synth.checks import check_bundle
from tempering.synth.families import Params, families, family_of
from tempering.synth.scoring import ACTIONS, Action
from tempering.synth.verify import SandboxVerifier, docker_unreachable, make_verifier

A = Action.parse


def test_actions_move_the_parameters():
    fam = families()["ledger"]
    p = Params(2, ("exclusions",), "sum", "bank", 5)
    assert fam.mutate(p, A("increase/in_depth")).depth == 3
    assert fam.mutate(p, A("reduce/in_depth")).depth == 1
    assert fam.mutate(p, A("increase/in_breadth")).features == ("exclusions", "date_window")
    assert fam.mutate(p, A("reduce/in_breadth")).features == ()
    assert fam.mutate(p, A("diversify/in_depth")).op == "count_over"
    assert fam.mutate(p, A("diversify/in_breadth")).domain == "payroll"
    assert fam.mutate(Params(1, (), "sum", "bank"), A("reduce/in_depth")) is None
    assert fam.mutate(Params(4, (), "sum", "bank"), A("increase/in_depth")) is None
    assert fam.mutate(Params(1, (), "sum", "bank"), A("reduce/in_breadth")) is None
    assert fam.mutate(p, A("increase/in_depth"), salt=1).data_seed != fam.mutate(p, A("increase/in_depth")).data_seed
    assert fam.skills(fam.mutate(p, A("increase/in_breadth"))) == fam.skills(p) | {"dates"}


def test_rendering_is_deterministic(seeds):
    fam, p = family_of(seeds[0].bundle)
    assert fam.render(p).files == seeds[0].bundle.files


def test_every_seed_and_every_action_passes_the_static_checks(seeds):
    n = 0
    for seed in seeds:
        assert check_bundle(seed.bundle) == []
        for action in ACTIONS:
            contract = seed.contract(action)
            if contract is None:
                continue
            child = seed.mutate(action)
            probs = check_bundle(child.bundle, seed.bundle, action.edit_mask, contract.required)
            assert probs == [], (seed.name, action.name, [str(p) for p in probs])
            assert child.bundle.metadata["parent"] == seed.name and child.skills == contract.required
            n += 1
    assert n >= 45


def test_difficulty_grows_with_depth_and_features(seeds):
    by_level = {}
    for s in seeds:
        fam, p = family_of(s.bundle)
        by_level.setdefault(p.depth + len(p.features), set()).add(s.bundle.metadata["difficulty"])
    assert by_level[1] == {"easy"} and by_level[5] == {"hard"}


def _verify(sandbox, bundles):
    v = SandboxVerifier(sandbox)
    return asyncio.run(_gather(v, bundles))


async def _gather(v, bundles):
    return await asyncio.gather(*(v.verify(b) for b in bundles))


def test_gold_verification_accepts_the_seeds_and_their_hardest_children(sandbox, seeds):
    bundles = [s.bundle for s in seeds[2::3]]  # the depth-3 seed of each family
    bundles += [s.mutate(A("increase/in_depth")).bundle for s in seeds[2::3]]
    verdicts = _verify(sandbox, bundles)
    assert [v.stage for v in verdicts] == ["ok"] * len(bundles), [v.summary for v in verdicts]
    assert all(v.reward == 1.0 for v in verdicts)


@pytest.mark.slow
def test_gold_verification_accepts_every_action_of_every_seed(sandbox, seeds):
    bundles = [s.mutate(a).bundle for s in seeds for a in ACTIONS if s.contract(a) is not None]
    verdicts = _verify(sandbox, bundles)
    bad = [(b.name, v.stage, v.summary[:300]) for b, v in zip(bundles, verdicts) if not v.accepted]
    assert bad == []


def test_gold_verification_rejects_broken_bundles_at_the_right_stage(sandbox, seeds):
    good = seeds[0].bundle
    wrong = good.files | {"solution/solve.sh": b'cd "${APP_DIR:-/app}"\necho 1 > answer.txt\n'}
    crash = good.files | {"solution/solve.sh": b"exit 3\n"}
    silent = good.files | {"tests/test.sh": b'python3 "$TESTS_DIR/test_outputs.py"\n'}
    lax = good.files | {"tests/test_outputs.py": b"pass\n"}
    needs_docker = good.files | {"environment/Dockerfile": b"FROM alpine:3.20\nRUN apk add jq\n"}
    cases = [wrong, crash, silent, lax, needs_docker]
    bundles = [type(good)(good.name, good.instruction, good.config, files) for files in cases]
    verdicts = _verify(sandbox, bundles)
    assert [v.stage for v in verdicts] == ["tests", "solution", "unsolved", "unsolved", "environment"]
    assert "found '1'" in verdicts[0].summary or "expected" in verdicts[0].summary
    assert "exited with 3" in verdicts[1].summary
    assert "wrote no reward" in verdicts[2].summary
    assert "already pass" in verdicts[3].summary
    assert "base image 'alpine:3.20'" in verdicts[4].summary


def test_local_image_follows_copy_and_env(seeds):
    b = seeds[8].bundle
    img = local_image(b)
    assert set(img.files) == {
        p[len("environment/") :] for p in b.files if p.startswith("environment/") and not p.endswith("Dockerfile")
    }
    b2 = type(b)(
        b.name,
        b.instruction,
        b.config,
        b.files
        | {
            "environment/Dockerfile": b"FROM python:3.12-slim\nWORKDIR /app\nENV MODE=fast LEVEL=2\nCOPY inbox/ /app/in/\n"
        },
    )
    img = local_image(b2)
    assert img.env == {"MODE": "fast", "LEVEL": "2"} and all(k.startswith("in/") for k in img.files)
    b3 = type(b)(
        b.name, b.instruction, b.config, b.files | {"environment/Dockerfile": b"FROM python:3.12\nWORKDIR /usr/src\n"}
    )
    with pytest.raises(NeedsDocker, match="/usr/src is a system folder"):
        local_image(b3)


def test_docker_backend_says_clearly_when_no_engine_is_reachable(monkeypatch):
    from tempering.errors import UserError

    why = docker_unreachable()
    if why is None:
        pytest.skip("a Docker engine answers on this machine")
    with pytest.raises(UserError, match="no Docker engine is reachable.*sandbox backend"):
        make_verifier("docker")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert docker_unreachable() == "the `docker` command is not installed"


def test_both_backends_run_the_same_steps(seeds):
    """gold_steps is the one sequence both verifiers use: per step, tests, oracle, tests."""
    from tempering.envs.terminal.workspace import Rewards, Run
    from tempering.synth.verify import gold_steps

    class Recorder:
        harbor_paths = True

        def __init__(self):
            self.calls, self.solved = [], set()

        async def run_tests(self, step):
            self.calls.append(("tests", step.name))
            return Rewards({"reward": 1.0 if step.name in self.solved else 0.0}), Run(0, "", "ok", {}, 0.0)

        async def solve(self, step):
            self.calls.append(("solve", step.name))
            self.solved.add(step.name)
            return Run(0, "", "ok", {}, 0.0)

    from tempering.envs.terminal import SAMPLES, read_bundle

    ws = Recorder()
    verdict = asyncio.run(gold_steps(ws, read_bundle(SAMPLES / "notes-steps")))
    assert verdict.accepted and ws.calls == [
        ("tests", "01-collect"),
        ("solve", "01-collect"),
        ("tests", "01-collect"),
        ("tests", "02-sort"),
        ("solve", "02-sort"),
        ("tests", "02-sort"),
    ]
