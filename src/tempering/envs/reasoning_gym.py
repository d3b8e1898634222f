"""The reasoning-gym package's procedural generators as a task family (`pip install 'tempering[ecosystem]'`).

`name` is one generator (`basic_arithmetic`), a list of them (equal weights) or a mapping
`{generator: weight}`, which is built with the package's own `composite` dataset. `config` holds the
generator's config arguments (for several generators: `{generator: {arg: value}}`).

The verifier is the package's: the completion's answer is the text inside its last
`<answer>...</answer>` tag (the package's `extract_answer`, stripped; None when there is no complete
tag), and `dataset.score_answer(answer, entry)` scores it. That score is the reward, partial credit
included; an answer succeeds when it reaches `success_threshold`. A scorer that raises on an answer
(`prime_factorization` on `((((`: ValueError) scores it 0 as unreadable, and says so: the turn's
`info["scorer_error"]` names the generator and the exception, the step's `scorer_errors` counts them,
and the first of each kind is a warning.

Splits: the package makes item `idx` of a dataset seeded `s` from `Random(s + idx)`, so datasets with
nearby seeds share almost all their items, and some generators draw from a fixed pool (ARC tasks,
GSM templates) or a small question space whatever the seed. Each split therefore draws from its own
seed range (`(2 * seed + split) * SEED_STRIDE`, never overlapping between splits or seeds), and a
question belongs to the held-out split only when its hash lands in `heldout_share` (as for the
built-in synthetic families): the train split skips held-out questions, so the two splits never share
a question, whatever the seeds.
"""

from __future__ import annotations

import difflib
import hashlib
from typing import Any

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.synthetic import SPLITS, in_heldout
from tempering.errors import UserError
from tempering.progress import warn
from tempering.types import Task

SEED_STRIDE = 2**24
"""Items one split of one seed may draw before its package seeds reach the next split's."""

PROMPT_TEMPLATE = "{question}\n\nGive only your final answer inside <answer></answer> tags, e.g. <answer>42</answer>."

MISSING = "task.family=reasoning_gym needs the reasoning-gym package: pip install 'tempering[ecosystem]'"


def _package():
    try:
        import reasoning_gym
        from reasoning_gym.factory import DATASETS
        from reasoning_gym.utils import extract_answer
    except ImportError as e:
        raise UserError(MISSING) from e
    return reasoning_gym, DATASETS, extract_answer


def generator_names() -> list[str]:
    """The package's registered generators (its `composite` combinator left out)."""
    return sorted(n for n in _package()[1] if n != "composite")


def extract(completion: str) -> str | None:
    """The answer of a completion: the text of its last complete `<answer>...</answer>` tag, stripped
    (the package's `extract_answer`); None when it has no such tag."""
    return _package()[2](completion)


def _weights(name: Any) -> dict[str, float]:
    if isinstance(name, str):
        weights = {name: 1.0}
    elif isinstance(name, (list, tuple)) and all(isinstance(n, str) for n in name):
        weights = {n: 1.0 for n in name}
        if len(weights) != len(name):
            raise UserError(f"reasoning_gym: task.args.name lists a generator twice: {list(name)}")
    elif isinstance(name, dict):
        weights = {}
        for n, w in name.items():
            if not isinstance(w, (int, float)) or isinstance(w, bool) or w <= 0:
                raise UserError(f"reasoning_gym: weight of {n!r} is {w!r}; give a positive number")
            weights[str(n)] = float(w)
    else:
        raise UserError(
            f"reasoning_gym: task.args.name is {name!r}; give a generator name, a list of names, or a mapping "
            "{name: weight}"
        )
    if not weights:
        raise UserError("reasoning_gym: task.args.name is empty; give at least one generator")
    known = generator_names()
    for n in weights:
        if n == "composite":
            raise UserError(
                "reasoning_gym: 'composite' is built from task.args.name itself; give a mapping {generator: weight}, "
                "e.g. name: {chain_sum: 2, spell_backward: 1}"
            )
        if n not in known:
            near = difflib.get_close_matches(n, known, n=5, cutoff=0.5)
            hint = f"nearest: {', '.join(near)}" if near else f"available: {', '.join(known)}"
            raise UserError(f"reasoning_gym: unknown generator {n!r}; {hint}")
    return weights


class ReasoningGymEnv(Env):
    """Scores one completion with the package's `score_answer` on the task's entry."""

    def __init__(self, task: Task, dataset: Any, threshold: float, errors: dict[tuple[str, str], int] | None = None):
        super().__init__(task)
        self.dataset, self.threshold = dataset, threshold
        self.errors = {} if errors is None else errors
        """(generator, exception type) -> answers its scorer raised on; shared by the family's envs."""

    async def step(self, action: str) -> StepResult:
        entry = self.task.meta["entry"]
        answer = extract(action)
        try:
            score = float(self.dataset.score_answer(answer, entry))
        except Exception as e:  # the package's scorer failing on an odd answer: the answer is unreadable
            generator = self.task.meta.get("generator", "?")
            cause = f"reasoning_gym generator {generator!r}: score_answer raised {type(e).__name__}: {e}"[:500]
            key = (generator, type(e).__name__)
            self.errors[key] = self.errors.get(key, 0) + 1
            if self.errors[key] == 1:
                warn(f"{cause} (answer {str(answer)[:80]!r}); such answers score 0 as unreadable (scorer_errors)")
            return StepResult(
                score=0.0,
                success=False,
                done=False,
                feedback=f"the answer could not be scored ({type(e).__name__}); give it in the format the question asks",
                status="parse_error",
                info={"answer": answer, "scorer_error": cause},
            )
        ok = score >= self.threshold
        if ok:
            feedback, status = f"score {score:g}", "correct"
        elif answer is None:
            feedback = "no <answer>...</answer> tag found; end with your final answer inside <answer></answer>"
            status = "parse_error"
        else:
            feedback, status = f"score {score:g} (needs {self.threshold:g}); try again", "incorrect"
        return StepResult(score=score, success=ok, done=ok, feedback=feedback, status=status, info={"answer": answer})


class ReasoningGymFamily(TaskFamily):
    """Tasks of reasoning-gym generators, scored by the package.

    name: a generator, a list of generators, or `{generator: weight}` (the package's composite).
    config: the generator's config arguments; for several generators `{generator: {arg: value}}`
    (`seed` and `size` are the family's: each split draws from its own seeds). success_threshold: the
    score an answer needs to succeed (default 1.0: the package's full marks). heldout_share: the share
    of questions (by hash) kept for the held-out split. prompt_template: the prompt around
    `{question}`; it should ask for `<answer>` tags, which the verifier reads.
    """

    def __init__(
        self,
        name: str | list[str] | dict[str, float] = "basic_arithmetic",
        config: dict[str, Any] | None = None,
        success_threshold: float = 1.0,
        heldout_share: float = 0.1,
        prompt_template: str = PROMPT_TEMPLATE,
        family_name: str = "reasoning_gym",
    ):
        self.name = family_name
        self.weights = _weights(name)
        self.single = isinstance(name, str)
        if not 0 < heldout_share < 1:
            raise UserError(f"reasoning_gym: heldout_share={heldout_share} must be in (0, 1)")
        self.heldout_share, self.success_threshold = heldout_share, float(success_threshold)
        if "{question}" not in prompt_template:
            raise UserError(f"reasoning_gym: prompt_template {prompt_template!r} has no {{question}} field")
        try:
            prompt_template.format(question="q")
        except (KeyError, IndexError, ValueError) as e:
            raise UserError(
                f"reasoning_gym: prompt_template {prompt_template!r} is not a template over {{question}}: {e}"
            ) from e
        self.prompt_template = prompt_template
        self.configs = self._configs(config or {})
        self.scorer = self._build(0, 1)  # bad config arguments fail here, not at the first draw
        """The dataset whose `score_answer` scores every task (scoring reads the entry, not the seed)."""
        self._datasets: dict[tuple[int, int], Any] = {}
        self.scorer_errors: dict[tuple[str, str], int] = {}
        """(generator, exception type) -> answers the package's scorer raised on (each kind warned once)."""

    def _configs(self, config: dict[str, Any]) -> dict[str, dict[str, Any]]:
        if not isinstance(config, dict):
            raise UserError(f"reasoning_gym: task.args.config is {config!r}; give a mapping of config arguments")
        if self.single:
            per = {next(iter(self.weights)): config}
        else:
            extra = [k for k in config if k not in self.weights]
            if extra or not all(isinstance(v, dict) for v in config.values()):
                raise UserError(
                    f"reasoning_gym: with several generators task.args.config maps each generator to its config "
                    f"arguments ({{generator: {{arg: value}}}}); got keys {sorted(config)} for generators "
                    f"{sorted(self.weights)}"
                )
            per = {n: dict(config.get(n, {})) for n in self.weights}
        for n, c in per.items():
            fixed = sorted({"seed", "size"} & set(c))
            if fixed:
                raise UserError(
                    f"reasoning_gym: config of {n!r} sets {', '.join(fixed)}; the family chooses them (each split "
                    "draws from its own seeds, as many items as it needs): remove them"
                )
        return per

    def _build(self, seed: int, size: int) -> Any:
        rg, _, _ = _package()
        try:
            if self.single:
                n = next(iter(self.weights))
                return rg.create_dataset(n, seed=seed, size=size, **self.configs[n])
            from reasoning_gym.composite import DatasetSpec

            specs = [{"name": n, "weight": w, "config": self.configs[n]} for n, w in self.weights.items()]
            return rg.create_dataset("composite", seed=seed, size=size, datasets=[DatasetSpec(**s) for s in specs])
        except (TypeError, ValueError, AssertionError) as e:
            raise UserError(
                f"reasoning_gym: the package rejects the config of {sorted(self.weights)} "
                f"({self.configs}): {type(e).__name__}: {e}; see the generator's config class in reasoning_gym"
            ) from e

    def _dataset_for(self, seed: int, size: int) -> Any:
        """The package dataset of one split's seed, big enough for `size` draws (built again when not)."""
        if (seed, size) not in self._datasets:
            self._datasets[(seed, size)] = self._build(seed, size)
        return self._datasets[(seed, size)]

    def package_seed(self, split: str, seed: int) -> int:
        """The package seed a split starts from; splits and seeds never reach each other's seeds."""
        return (2 * seed + SPLITS.index(split)) * SEED_STRIDE

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r}; use one of {SPLITS}")
        share = self.heldout_share if split == "heldout" else 1 - self.heldout_share
        limit = int(4 * n / share) + 200
        ds = self._dataset_for(self.package_seed(split, seed), limit)
        out: dict[str, Task] = {}
        for idx in range(limit):
            if len(out) >= n:
                break
            try:
                entry = ds[idx]
            except IndexError:  # generators with a finite supply (word ladders) end early
                break
            q = entry["question"]
            if (split == "heldout") != in_heldout(q, self.heldout_share) or q in out:
                continue
            out[q] = self._task(entry)
        if len(out) < n:
            raise UserError(
                f"reasoning_gym: only {len(out)} distinct {split} questions of {sorted(self.weights)} in "
                f"{limit} draws (asked for {n}); ask for fewer (task.train_size / task.heldout_size) or widen the "
                "generator's config"
            )
        return list(out.values())

    def _task(self, entry: dict[str, Any]) -> Task:
        q = entry["question"]
        source = entry.get("metadata", {}).get("source_dataset", next(iter(self.weights)))
        digest = hashlib.blake2b(q.encode(), digest_size=6).hexdigest()
        oracle = entry.get("answer")
        difficulty = entry.get("metadata", {}).get("difficulty")
        return Task(
            id=f"{self.name}:{source}:{digest}",
            prompt=self.prompt_template.format(question=q),
            answer=None if oracle is None else f"<answer>{oracle}</answer>",
            family=self.name,
            difficulty=0.0,
            meta={"entry": entry, "generator": source, "difficulty": difficulty},
        )

    def make_env(self, task: Task) -> Env:
        return ReasoningGymEnv(task, self.scorer, self.success_threshold, self.scorer_errors)
