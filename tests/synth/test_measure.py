"""Pass rates through the rollout engine: n rollouts per task, mean success, configurations in one
batch, bundles as multi-turn terminal episodes."""

import asyncio

from tempering.models import char_tokenizer
from tempering.models.chat import ChatFormat
from tempering.rollout.sampler import Sample
from tempering.synth.measure import PolicyMeasure
from tempering.synth.task_seeds import TaskFamilySeed

TOK = char_tokenizer()


class AddingSampler:
    """Solves sums and gets everything else wrong; counts its batches."""

    tokenizer = TOK

    def __init__(self):
        self.batches = []

    def sample(self, contexts, params):
        self.batches.append(len(contexts))
        out = []
        for ctx in contexts:
            prompt = TOK.decode(ctx).rstrip("=")
            a, op, b = prompt.partition("+")
            text = str(int(a) + int(b)) if op else "?"
            ids = TOK.encode(text, add_special_tokens=False) + [TOK.eos_token_id]
            out.append(Sample(ids, [-0.5] * len(ids), False))
        return out


def arith(ops, data_seed=0):
    return TaskFamilySeed.of("arithmetic", data_seed, min_value=10, max_value=99, ops=ops)


def test_configurations_are_measured_in_one_batch():
    sampler = AddingSampler()
    m = PolicyMeasure(sampler, ChatFormat(TOK, use_chat_template=False), rollouts=3, tasks=5)
    mixed = arith("+-", data_seed=4)
    sums = sum("+" in t.prompt for t in mixed.make_family().tasks("train", 5, seed=4))
    assert 0 < sums < 5
    rates = asyncio.run(m.many([arith("+"), arith("-"), mixed]))
    assert rates == [1.0, 0.0, sums / 5]
    assert sampler.batches == [3 * 5 * 3]
    assert asyncio.run(m.pass_rates([arith("+")])) == {arith("+").name: 1.0}


class ShellSampler:
    """Turn 1: the oracle's commands for even-numbered episodes, `submit` for odd ones; then `submit`."""

    tokenizer = TOK

    def __init__(self, solve):
        self.solve = solve

    def sample(self, contexts, params):
        out = []
        for i, ctx in enumerate(contexts):
            first = "[exit" not in TOK.decode(ctx)
            text = f"```bash\n{self.solve}\n```" if first and i % 2 == 0 else "submit"
            ids = TOK.encode(text, add_special_tokens=False) + [TOK.eos_token_id]
            out.append(Sample(ids, [-0.5] * len(ids), False))
        return out


def test_a_bundle_is_measured_by_terminal_episodes(seeds, sandbox):
    seed = seeds[0]
    m = PolicyMeasure(
        ShellSampler(seed.bundle.text("solution/solve.sh")),
        ChatFormat(TOK, use_chat_template=False),
        rollouts=4,
        max_context_tokens=8192,
        sandbox_backend=sandbox.backend,
    )
    assert asyncio.run(m(seed)) == 0.5


def test_the_loop_measures_accepted_configurations():
    from tempering.synth.generators import MutatorGenerator
    from tempering.synth.loop import SynthConfig, synthesize
    from tempering.synth.task_seeds import TaskSeedChecker

    m = PolicyMeasure(AddingSampler(), ChatFormat(TOK, use_chat_template=False), rollouts=2, tasks=3)
    seeds = [arith("+"), arith("-")]
    rates = asyncio.run(m.pass_rates(seeds))
    rep = asyncio.run(synthesize(seeds, rates, MutatorGenerator(), TaskSeedChecker(), SynthConfig(target=2), measure=m))
    got = {a.candidate.name: a.measured for a in rep.accepted}
    # from a pass rate of 1 FORGE makes sums harder (still sums: 1.0); from 0 it makes differences easier (0.0)
    assert sorted(got.values()) == [0.0, 1.0] and rep.summary()["frontier_share"] == 0.0
    assert {a.action.name for a in rep.accepted} == {"increase/in_depth", "reduce/in_depth"}
