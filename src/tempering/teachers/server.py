"""A teacher behind an OpenAI-compatible completions endpoint that returns prompt log-probs (vLLM).

The student's token ids are sent as the prompt (`prompt` as lists of ids, so nothing is re-tokenised)
with `prompt_logprobs=N` and `max_tokens=1`. For every prompt position vLLM returns the log-prob of
the actual token plus the teacher's N most likely tokens, keyed by token id. So the sampled-token
log-probs and the teacher's top-k (k <= N) are exact; a requested candidate id outside the returned
top-N can only be bounded from above by the N-th log-prob, and is flagged in `cand_found_BCK`.

Serve the teacher with e.g. `vllm serve TEACHER --max-logprobs 64`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from tempering.errors import UserError
from tempering.http import ServerError, request_json
from tempering.teachers.base import Teacher, TeacherScores, pad_right


class ServerTeacher(Teacher):
    """Scores through HTTP; large teachers run on other machines."""

    supports_full = False

    def __init__(
        self,
        url: str,
        model: str,
        tokenizer,
        name: str | None = None,
        top_n: int = 20,
        batch_size: int = 16,
        concurrency: int = 4,
        timeout_s: float = 300.0,
        api_key: str | None = None,
    ):
        base = url.rstrip("/")
        self.url = base + ("/completions" if base.endswith("/v1") else "/v1/completions")
        self.model = model
        """The served model name (the `model` field of each request)."""
        self.tokenizer = tokenizer
        self.name = name or f"{model}@{url}"
        self.top_n = top_n
        """prompt_logprobs per request: the teacher's top-N come back at every position."""
        self.batch_size = batch_size
        """Sequences per HTTP request."""
        self.concurrency = concurrency
        """Requests in flight at once."""
        self.timeout_s = timeout_s
        self.api_key = api_key

    def score(self, prompts, responses, candidates_BCK=None, top_k=0, full=False) -> TeacherScores:
        if full:
            raise UserError(
                f"{self.name} is a server teacher: it returns top-N log-probs, not whole distributions; "
                "use the top-k loss (distill.loss=jsd_topk) or an in-process teacher"
            )
        if top_k > self.top_n:
            raise UserError(
                f"top_k={top_k} is more than the {self.top_n} log-probs asked of {self.name}; raise teacher.top_n "
                "(and the server's --max-logprobs) or lower k"
            )
        resp_BC, mask_BC = pad_right(responses)
        B, C = resp_BC.shape
        token = torch.zeros(B, C)
        K = 0 if candidates_BCK is None else candidates_BCK.shape[-1]
        cand, found = torch.zeros(B, C, K), torch.zeros(B, C, K)
        top_ids, top_lp = torch.zeros(B, C, top_k, dtype=torch.long), torch.zeros(B, C, top_k)
        starts = list(range(0, B, self.batch_size))
        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            replies = list(
                pool.map(
                    lambda i: self._request(
                        [p + r for p, r in zip(prompts[i : i + self.batch_size], responses[i : i + self.batch_size])]
                    ),
                    starts,
                )
            )
        for i, choices in zip(starts, replies):
            for j, entries in enumerate(choices):
                b = i + j
                p, r = prompts[b], responses[b]
                if len(entries) != len(p) + len(r):
                    raise UserError(
                        f"{self.name} returned prompt log-probs for {len(entries)} positions, expected {len(p) + len(r)}"
                    )
                for c, tok in enumerate(r):
                    at = entries[len(p) + c]
                    if at is None or tok not in at:
                        raise UserError(
                            f"{self.name} returned no log-prob for the prompt token id {tok}; is the served model's tokenizer the student's?"
                        )
                    token[b, c] = at[tok]
                    ranked = sorted(at.items(), key=lambda kv: -kv[1])[: self.top_n]
                    if top_k:
                        top_ids[b, c] = torch.tensor([t for t, _ in ranked[:top_k]])
                        top_lp[b, c] = torch.tensor([v for _, v in ranked[:top_k]])
                    if K:
                        floor = ranked[-1][1]  # an upper bound for any id the server left out
                        for k, v in enumerate(candidates_BCK[b, c].tolist()):
                            if v in at:
                                cand[b, c, k], found[b, c, k] = at[v], 1.0
                            else:
                                cand[b, c, k] = floor
        out = TeacherScores(token_logp_BC=token * mask_BC, mask_BC=mask_BC)
        if K:
            out.cand_logp_BCK, out.cand_found_BCK = cand, found
        if top_k:
            out.top_ids_BCK, out.top_logp_BCK = top_ids, top_lp
        return out

    def _request(self, prompts: list[list[int]]) -> list[list[dict[int, float] | None]]:
        body = {
            "model": self.model,
            "prompt": prompts,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": self.top_n,
        }
        try:
            data = request_json("POST", self.url, body, timeout_s=self.timeout_s, api_key=self.api_key)
        except ServerError as e:
            if e.kind == "status":
                raise UserError(
                    f"teacher server {self.url} answered HTTP {e.status}: {e.body.decode(errors='replace')}"
                ) from None
            if e.kind == "timeout":
                raise UserError(
                    f"the teacher server at {self.url} did not answer within teacher.timeout_s={self.timeout_s:g} s "
                    "(hung or overloaded); the run stops with its last checkpoint intact: restart the server, resume "
                    "with --resume"
                ) from None
            if e.kind == "not_json":
                raise UserError(f"teacher server {self.url} did not answer with JSON") from None
            raise UserError(
                f"could not reach the teacher server at {self.url} ({e.reason}); start it (e.g. "
                "`vllm serve MODEL`) or fix teacher.server; a run that was going stops with its last checkpoint "
                "intact: resume it with --resume"
            ) from None
        choices = sorted(data.get("choices") or [], key=lambda ch: ch.get("index", 0))
        if len(choices) != len(prompts):
            raise UserError(f"teacher server {self.url} returned {len(choices)} choices for {len(prompts)} prompts")
        out = []
        for ch in choices:
            pl = ch.get("prompt_logprobs")
            if pl is None:
                raise UserError(
                    f"teacher server {self.url} returned no prompt_logprobs; it must be a vLLM OpenAI-compatible server"
                )
            out.append([None if e is None else {int(t): float(v["logprob"]) for t, v in e.items()} for e in pl])
        return out
