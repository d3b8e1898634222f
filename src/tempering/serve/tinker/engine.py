"""The one thread that runs every request of the service, and the futures the SDK polls.

Requests that change or read a training model carry the SDK's `seq_id` (1, 2, ... per model) and run in
that order whatever order they arrive in: the SDK sends a `forward_backward` and the `optim_step` after it
on two connections at once. Everything runs on one thread, so torch's threads serve one request at a time;
queued sampling requests of one sampling session with the same parameters run as one batch (each prompt
prefilled once). A request that fails for the client's reason resolves to Tinker's `{"error", "category":
"user"}`; the service and its other clients go on.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from tempering.errors import UserError
from tempering.models.io import model_folder_tokenizer
from tempering.models.tiny import TINY_SIZES
from tempering.models.tokenizer import char_tokenizer
from tempering.rollout.sampler import SamplingParams
from tempering.serve.tinker import losses, models, wire
from tempering.serve.tinker.config import TinkerConfig
from tempering.serve.tinker.wire import BadRequest

SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-")
KINDS = ("weights", "sampler_weights")


@dataclass
class Failed:
    """A request that resolved to an error (Tinker's `RequestFailedResponse`)."""

    error: str
    category: str  # "user" or "server"


@dataclass
class Proto:
    """A result the SDK reads as protobuf."""

    body: bytes


@dataclass
class SampleWork:
    session: str
    prompt: list[int]
    num_samples: int
    params: SamplingParams
    seed: int | None
    prompt_logprobs: bool
    last_n: int | None
    add_eos: bool = False
    """Stop token ids were given: the model's end-of-sequence tokens stop it too."""
    topk: int = 0
    """The likeliest tokens returned at each prompt position (the SDK's topk_prompt_logprobs)."""
    topk_sample: int = 0
    """The likeliest tokens returned at each sampled position (the SDK's topk_sample_logprobs)."""
    targets: wire.Targets | None = None
    """The token ids whose log-probs are returned at each prompt position (the SDK's target_prompt_logprobs)."""
    alt_k: int = 0
    """Tokens drawn at each prompt position after the first (the SDK's prompt_alt_tokens_k)."""

    @property
    def scores_prompt(self) -> bool:
        """Asks anything of the prompt (one forward pass over it answers all)."""
        return self.prompt_logprobs or bool(self.topk) or self.targets is not None or bool(self.alt_k)

    def check(self, vocab: int, context: int) -> None:
        models.check_ids(self.prompt, vocab, "prompt")
        if self.targets is not None:
            self.targets.check(vocab)
        if len(self.prompt) + self.params.max_new_tokens > context:
            raise BadRequest(
                f"prompt ({len(self.prompt)} tokens) + max_tokens ({self.params.max_new_tokens}) exceed the model's "
                f"context ({context})"
            )

    @property
    def batch_key(self) -> tuple | None:
        """Requests with the same key run as one batch (no own seed, nothing asked of the prompt)."""
        if self.seed is not None or self.scores_prompt:
            return None
        p = self.params
        stop_ids = None if p.stop_ids is None else tuple(p.stop_ids)
        return (self.session, p.max_new_tokens, p.temperature, p.top_p, p.top_k, tuple(p.stop), stop_ids, self.add_eos)


@dataclass
class Job:
    request_id: str
    kind: str
    run: Callable[[], Any] | None
    """The work (None: a slot of a refused request, kept so later requests of its model still run)."""
    model_id: str | None = None
    seq_id: int | None = None
    sample: SampleWork | None = None
    future: Future = field(default_factory=Future)
    retrieved: float | None = None


@dataclass
class SamplerSession:
    id: str
    base_model: str
    model_path: str | None
    target: tuple[str, str]
    """("train", model_id): a snapshot of a training model; ("base", model): a base model;
    ("path", folder): a checkpoint on disk."""


class Engine:
    def __init__(self, cfg: TinkerConfig):
        self.cfg = cfg
        self.state = Path(cfg.state_dir).expanduser().resolve()
        self.state.mkdir(parents=True, exist_ok=True)
        self.bases = models.Bases(cfg.device, cfg.dtype, cfg.seed)
        self.models: dict[str, models.TrainingModel] = {}
        self.samplers: dict[str, SamplerSession] = {}
        self.sessions: set[str] = set()
        self.jobs: dict[str, Job] = {}
        self._loaded: OrderedDict[str, models.TrainingModel] = OrderedDict()  # checkpoints sampled from disk
        self._lock = threading.Condition()
        self._ready: deque[Job] = deque()
        self._held: dict[str, dict[int, Job]] = {}
        self._next_seq: dict[str, int] = {}
        self._by_seq: dict[tuple[str, int], str] = {}
        self._rng = torch.Generator().manual_seed(cfg.seed)
        self._log = (self.state / "requests.jsonl").open("a")
        self._thread = threading.Thread(target=self._work, name="tinker-engine", daemon=True)

    def start(self) -> None:
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        self._thread.start()

    # -- names -----------------------------------------------------------------------------------------

    def resolve(self, name: str) -> str:
        """The tempering model a client's model name runs."""
        target = self.cfg.models.get(name, name)
        if not models.servable(target):
            served = ", ".join(sorted(self.cfg.models)) or "no alias"
            raise BadRequest(
                f"unknown base model {name!r}; this service serves {served} (its `models` table), any tiny size "
                f"({', '.join(TINY_SIZES)}), smollm2-135m-instruct and local Hugging Face folders"
            )
        try:
            return models.model_name(target)
        except UserError as e:
            raise BadRequest(str(e)) from None

    def tokenizer_folder(self, name: str) -> str:
        """A folder holding the tokenizer of a served name (`names/NAME`, written once): what the SDK's
        `get_tokenizer` and the cookbook's tokenizer lookup load without a download."""
        resolved = self.resolve(name)
        if Path(name).is_absolute():
            return resolved
        folder = self.state / "names" / name
        if not (folder / "tokenizer_config.json").is_file():
            tok = char_tokenizer() if resolved in TINY_SIZES else model_folder_tokenizer(resolved)
            tok.save_pretrained(folder)
        return str(folder)

    def path_folder(self, path: str) -> Path:
        """The folder of a `tinker://RUN/KIND/NAME` path."""
        parts = path.removeprefix("tinker://").split("/") if path.startswith("tinker://") else []
        if (
            len(parts) != 3
            or parts[1] not in KINDS
            or not all(p and set(p) <= SAFE and p not in (".", "..") for p in parts)
        ):
            raise BadRequest(
                f"{path!r} is not a checkpoint path; this service writes tinker://RUN/weights/NAME and tinker://RUN/sampler_weights/NAME"
            )
        return self.state / "checkpoints" / parts[0] / parts[1] / parts[2]

    def existing(self, path: str) -> Path:
        folder = self.path_folder(path)
        if not (folder / "meta.json").is_file():
            raise BadRequest(f"no checkpoint {path} in {self.state / 'checkpoints'}", status=404)
        return folder

    def model(self, model_id: str) -> models.TrainingModel:
        tm = self.models.get(model_id)
        if tm is None:
            raise BadRequest(
                f"model {model_id!r} is not loaded here (unknown, unloaded, or the service restarted); create it "
                "again, from a checkpoint with ServiceClient.create_training_client_from_state(path)",
                status=404,
            )
        return tm

    # -- submission (the HTTP thread) ------------------------------------------------------------------

    def submit(
        self,
        kind: str,
        run: Callable[[], Any] | None,
        model_id: str | None = None,
        seq_id: int | None = None,
        sample: SampleWork | None = None,
    ) -> str:
        """Queue a request; with a `seq_id` it runs after its model's earlier ones. A resent `seq_id` gets
        the request id it had."""
        with self._lock:
            if model_id is not None and seq_id is not None:
                if (model_id, seq_id) in self._by_seq:
                    return self._by_seq[(model_id, seq_id)]
                if seq_id < self._next_seq.setdefault(model_id, 1):
                    raise BadRequest(f"{kind}: seq_id {seq_id} of model {model_id} was used already")
            job = Job(f"{kind}:{uuid.uuid4().hex[:12]}", kind, run, model_id, seq_id, sample)
            self.jobs[job.request_id] = job
            if model_id is not None and seq_id is not None:
                self._by_seq[(model_id, seq_id)] = job.request_id
                self._held.setdefault(model_id, {})[seq_id] = job
                while self._next_seq[model_id] in self._held[model_id]:
                    self._ready.append(self._held[model_id].pop(self._next_seq[model_id]))
                    self._next_seq[model_id] += 1
            else:
                self._ready.append(job)
            self._forget_old()
            self._lock.notify()
        return job.request_id

    def refuse(self, kind: str, model_id: str | None, seq_id: int | None) -> None:
        """Keep the slot of a request refused at submission, so its model's later requests still run."""
        if model_id is not None and seq_id is not None and model_id in self._next_seq:
            try:
                self.submit(kind, None, model_id, seq_id)
            except BadRequest:
                pass  # its seq_id was used already: there is no slot to keep

    def _forget_old(self) -> None:
        cutoff = time.time() - 600
        for rid in [r for r, j in self.jobs.items() if j.retrieved is not None and j.retrieved < cutoff]:
            del self.jobs[rid]

    # -- the worker thread -----------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._ready:
                    self._lock.wait()
                job = self._ready.popleft()
                batch = [job]
                key = job.sample.batch_key if job.sample else None
                if key is not None:
                    batch += [j for j in self._ready if j.sample and j.sample.batch_key == key]
                    for j in batch[1:]:
                        self._ready.remove(j)
            self._run(batch)

    def _run(self, batch: list[Job]) -> None:
        start = time.perf_counter()
        record: dict[str, Any] = {"kind": batch[0].kind, "model_id": batch[0].model_id, "seq_id": batch[0].seq_id}
        try:
            if batch[0].sample is not None:
                results: list[Any] = self._sample([j.sample for j in batch])  # type: ignore[misc]
                record["requests"] = len(batch)
            else:
                results = [batch[0].run() if batch[0].run is not None else None]
                if isinstance(results[0], tuple):  # (result, metrics for the log)
                    results[0], record["metrics"] = results[0]
        except BadRequest as e:
            results = [Failed(str(e), "user")] * len(batch)
        except UserError as e:
            results = [Failed(str(e), "user")] * len(batch)
        except Exception as e:  # the service's own failure: reported to the client, logged, the service goes on
            traceback.print_exc()
            results = [Failed(f"{type(e).__name__}: {e}", "server")] * len(batch)
        record["seconds"] = round(time.perf_counter() - start, 4)
        if isinstance(results[0], Failed):
            record["error"] = results[0].error
        self._log.write(json.dumps(record) + "\n")
        self._log.flush()
        for job, result in zip(batch, results):
            job.future.set_result(result)

    # -- sampling --------------------------------------------------------------------------------------

    def sampler_module(self, session_id: str) -> tuple[torch.nn.Module, Any]:
        s = self.samplers.get(session_id)
        if s is None:
            raise BadRequest(f"unknown sampling session {session_id!r}; create a sampling client first", status=404)
        kind, ref = s.target
        if kind == "train":
            tm = self.model(ref)
            return tm.sampler_module(session_id), tm.tokenizer
        if kind == "base":
            return self.bases.get(ref)
        if ref not in self._loaded:
            self._loaded[ref] = models.from_checkpoint(self.bases, f"path:{ref}", Path(ref), None)
            while len(self._loaded) > 2:
                self._loaded.popitem(last=False)
        tm = self._loaded[ref]
        return tm.module, tm.tokenizer

    def _sample(self, works: list[SampleWork]) -> list[Proto]:
        module, tok = self.sampler_module(works[0].session)
        for w in works:
            w.check(models.vocab_size(module), models.context_length(module))
        seed = works[0].seed
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,), generator=self._rng))
        prompts = [w.prompt for w in works for _ in range(w.num_samples)]
        out = models.sample(module, tok, prompts, works[0].params, seed, works[0].add_eos)
        results, i = [], 0
        for w in works:
            if w.topk_sample:
                mine = out[i : i + w.num_samples]
                tops = models.sampled_topk(module, w.prompt, mine, w.topk_sample, w.params)
                out[i : i + w.num_samples] = [replace(s, topk=t) for s, t in zip(mine, tops, strict=True)]
            seqs = out[i : i + w.num_samples]
            if not w.scores_prompt:
                results.append(Proto(wire.sample_response(seqs, None)))
            else:
                sc = models.score_prompt(
                    module, w.prompt, w.last_n, w.topk, w.targets, w.alt_k, w.params.temperature, seed
                )
                targets = w.targets.answer(sc.targets) if w.targets and sc.targets is not None else None
                lp = sc.logprobs if w.prompt_logprobs else None
                results.append(Proto(wire.sample_response(seqs, lp, sc.topk, targets, sc.alt)))
            i += w.num_samples
        return results

    # -- the operations --------------------------------------------------------------------------------

    def new_session(self) -> str:
        sid = uuid.uuid4().hex[:16]
        self.sessions.add(sid)
        return sid

    def create_model(self, session_id: str, seq: int, base_model: str, lora: Any, optimizer: str) -> str:
        if optimizer != "adamw":
            raise BadRequest(f"optimizer {optimizer!r} is not supported; this service trains with Adam (adamw)")
        resolved = self.resolve(base_model)
        model_id = self._model_id(session_id, seq)
        spec = None
        if lora is not None:
            targets = models.lora_targets(lora.train_attn, lora.train_mlp, lora.train_unembed)
            if lora.rank < 1 or not targets:
                raise BadRequest("lora_config needs rank >= 1 and at least one of train_attn, train_mlp, train_unembed")
            alpha = self.cfg.lora_alpha if self.cfg.lora_alpha is not None else 2.0 * lora.rank
            spec = models.LoraSpec(lora.rank, alpha, targets, self.cfg.seed if lora.seed is None else lora.seed)

        def run():
            self._register(models.build(self.bases, model_id, base_model, resolved, spec))
            return {"model_id": model_id, "type": "create_model"}

        return self.submit("create_model", run)

    def _model_id(self, session_id: str, seq: int) -> str:
        model_id = f"{session_id}:train:{seq}"
        if not set(model_id) <= SAFE:
            raise BadRequest(f"session id {session_id!r} has characters a model id cannot hold")
        if model_id in self.models:
            raise BadRequest(f"model {model_id} exists already (model_seq_id {seq} of session {session_id} is used)")
        return model_id

    def _register(self, tm: models.TrainingModel) -> None:
        self.models[tm.model_id] = tm
        with self._lock:
            self._next_seq.setdefault(tm.model_id, 1)

    def info(self, model_id: str) -> dict[str, Any]:
        tm = self.model(model_id)
        arch = type(tm.module.get_base_model() if tm.lora else tm.module).__name__  # type: ignore[operator]
        return {
            "type": "get_info",
            "model_id": model_id,
            "model_name": tm.base_model,
            "is_lora": tm.lora is not None,
            "lora_rank": tm.lora.rank if tm.lora else None,
            "model_data": {
                "arch": arch,
                "model_name": tm.base_model,
                "tokenizer_id": self.tokenizer_folder(tm.base_model),
            },
        }

    def forward_backward(self, fb: wire.ForwardBackward) -> str:
        tm = self.model(fb.model_id)
        losses.settings(fb.loss_fn, fb.config)
        losses.check(fb.loss_fn, fb.data, tm.vocab, min(self.cfg.max_datum_tokens, models.context_length(tm.module)))
        kind = "forward" if fb.forward_only else "forward_backward"

        def run():
            outputs, metrics = tm.forward_backward(
                fb.loss_fn, fb.config, fb.data, fb.forward_only, self.cfg.micro_batch_tokens
            )
            return Proto(wire.forward_backward_output(outputs, metrics)), metrics

        return self.submit(kind, run, fb.model_id, fb.seq_id)

    def optim_step(self, model_id: str, seq_id: int | None, p: Any) -> str:
        tm = self.model(model_id)
        if getattr(p, "type", None) not in (None, "adamw") or not hasattr(p, "beta2"):
            raise BadRequest(f"optim_step: optimizer parameters {type(p).__name__} are not supported; use AdamParams")
        if p.learning_rate < 0 or not 0 <= p.beta1 < 1 or not 0 <= p.beta2 < 1 or p.eps <= 0:
            raise BadRequest(f"optim_step: AdamParams out of range ({p})")

        def run():
            metrics = tm.optim_step(p.learning_rate, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_clip_norm)
            return {"metrics": metrics}, metrics

        return self.submit("optim_step", run, model_id, seq_id)

    def save(
        self, model_id: str, seq_id: int | None, name: str | None, kind: str, overwrite: bool, session_seq: int | None
    ) -> str:
        tm = self.model(model_id)
        if name is None:  # an unnamed sampler snapshot, sampled through a new session
            if session_seq is None:
                raise BadRequest("save_weights_for_sampler needs a path or a sampling_session_seq_id")
            sid = f"{model_id.split(':')[0]}:sample:{session_seq}"

            def snap():
                tm.snapshot(sid, self.cfg.max_snapshots)
                self.samplers[sid] = SamplerSession(sid, tm.base_model, None, ("train", model_id))
                return {"sampling_session_id": sid, "type": "save_weights_for_sampler"}

            return self.submit("save_weights_for_sampler", snap, model_id, seq_id)
        path = f"tinker://{model_id}/{kind}/{name}"
        folder = self.path_folder(path)
        if folder.exists() and not overwrite:
            raise BadRequest(f"checkpoint {path} exists; choose another name (or overwrite=True)")

        def run():
            tm.save(folder, optimizer=kind == "weights")
            return {"path": path, "type": "save_weights" if kind == "weights" else "save_weights_for_sampler"}

        return self.submit("save_weights" if kind == "weights" else "save_weights_for_sampler", run, model_id, seq_id)

    def load(self, req: Any) -> str:
        folder = self.existing(req.path)
        if req.session_id is not None:  # a new model from the checkpoint
            if req.model_seq_id is None:
                raise BadRequest("load_weights with session_id needs model_seq_id")
            model_id = self._model_id(req.session_id, req.model_seq_id)
            base = req.base_model
            if base is not None:
                self.resolve(base)

            def create():
                tm = models.from_checkpoint(self.bases, model_id, folder, base)
                if req.optimizer:
                    tm.restore(folder, optimizer=True)
                tm.version = 0
                self._register(tm)
                return {"path": req.path, "model_id": model_id, "type": "load_weights"}

            return self.submit("load_weights", create)
        tm = self.model(req.model_id)
        meta = models.read_meta(folder)
        mine = tm.meta()
        if (meta["model"], meta["lora"]) != (mine["model"], mine["lora"]):
            raise BadRequest(
                f"{req.path} was saved from {meta['model']} with LoRA {meta['lora']}; model {tm.model_id} is {mine['model']} with LoRA {mine['lora']}"
            )

        def run():
            tm.restore(folder, optimizer=req.optimizer)
            return {"path": req.path, "model_id": tm.model_id, "type": "load_weights"}

        return self.submit("load_weights", run, req.model_id, req.seq_id)

    def sampling_session(self, session_id: str, seq: int, base_model: str | None, model_path: str | None) -> str:
        sid = f"{session_id}:sample:{seq}"
        self.samplers[sid] = self._sampler_of(sid, base_model, model_path)
        return sid

    def _sampler_of(self, sid: str, base_model: str | None, model_path: str | None) -> SamplerSession:
        if model_path is not None:
            folder = self.existing(model_path)
            return SamplerSession(
                sid, base_model or models.read_meta(folder)["base_model"], model_path, ("path", str(folder))
            )
        if base_model is None:
            raise BadRequest("a sampling client needs a base_model or a model_path")
        return SamplerSession(sid, base_model, None, ("base", self.resolve(base_model)))

    def asample(self, req: Any) -> tuple[str, list[str]]:
        if req.record_stability_info:
            raise BadRequest(
                "sample: record_stability_info is not implemented by this service: what it records is not "
                "published, and its only reader, the stable_reinforce loss, is refused here too"
            )
        sid = req.sampling_session_id
        if sid is None:  # a one-off request naming its model
            sid = f"direct:{req.model_path or req.base_model}"
            if sid not in self.samplers:
                self.samplers[sid] = self._sampler_of(sid, req.base_model, req.model_path)
        elif sid not in self.samplers:
            raise BadRequest(f"unknown sampling session {sid!r}; create a sampling client first", status=404)
        target = self.samplers[sid].target
        trained = self.model(target[1]) if target[0] == "train" else None
        prompt = []
        for c in req.prompt.chunks:
            if c.type != "encoded_text":
                raise BadRequest(
                    f"sample: the prompt has {c.type} chunks; the served models are text-only (send encoded_text tokens)"
                )
            prompt += list(c.tokens)
        if not prompt:
            raise BadRequest("sample: empty prompt")
        if len(prompt) > self.cfg.max_datum_tokens:
            raise BadRequest(
                f"sample: {len(prompt)} prompt tokens, more than max_datum_tokens={self.cfg.max_datum_tokens}",
                status=413,
            )
        sp = req.sampling_params
        if sp.max_tokens is None or sp.max_tokens < 1:
            raise BadRequest("sample: sampling_params.max_tokens must be set (>= 1)")
        if sp.temperature < 0 or not 0 < sp.top_p <= 1 or req.num_samples < 1:
            raise BadRequest(
                f"sample: needs temperature >= 0, 0 < top_p <= 1 and num_samples >= 1 (got {sp.temperature}, {sp.top_p}, {req.num_samples})"
            )
        if req.prompt_alt_tokens_k < 0:
            raise BadRequest(f"sample: prompt_alt_tokens_k must be 0 or more (got {req.prompt_alt_tokens_k})")
        self._check_answer_size(req, len(prompt))
        if req.prompt_logprobs_last_n is not None and not (
            req.prompt_logprobs and 1 <= req.prompt_logprobs_last_n < len(prompt)
        ):
            raise BadRequest("sample: prompt_logprobs_last_n needs prompt_logprobs and lies in [1, len(prompt) - 1]")
        stop = [sp.stop] if isinstance(sp.stop, str) else list(sp.stop) if sp.stop is not None else None
        strings = [s for s in stop or [] if isinstance(s, str)]
        ids = [int(s) for s in stop or [] if not isinstance(s, str)]
        params = SamplingParams(
            max_new_tokens=sp.max_tokens,
            temperature=sp.temperature,
            top_p=sp.top_p,
            top_k=max(sp.top_k, 0),
            stop=strings,
            # None: the model's end-of-sequence tokens; [] stops on nothing; ids stop there and at the end tokens
            stop_ids=[] if stop == [] else ids or None,
        )
        work = SampleWork(
            sid,
            prompt,
            req.num_samples,
            params,
            sp.seed,
            bool(req.prompt_logprobs),
            req.prompt_logprobs_last_n,
            bool(ids),
            req.topk_prompt_logprobs,
            req.topk_sample_logprobs,
            None if req.target_prompt_logprobs is None else wire.targets(req.target_prompt_logprobs, len(prompt) - 1),
            req.prompt_alt_tokens_k,
        )
        if trained is not None:  # its vocabulary is known without loading anything: refuse bad ids now
            work.check(trained.vocab, models.context_length(trained.module))
        rid = self.submit("sample", None, sample=work)
        return rid, [f"{rid}:{i}" for i in range(req.num_samples)]

    def _check_answer_size(self, req: Any, prompt_tokens: int) -> None:
        """An answer is bounded as a request is (`max_request_mb`): 8 bytes (an id and a log-prob) per cell of
        a per-position width times its positions."""
        limit = self.cfg.max_request_mb * (1 << 20)
        for name, cells in (
            ("topk_prompt_logprobs", prompt_tokens * req.topk_prompt_logprobs),
            ("prompt_alt_tokens_k", (prompt_tokens - 1) * req.prompt_alt_tokens_k),
            ("topk_sample_logprobs", req.num_samples * req.sampling_params.max_tokens * req.topk_sample_logprobs),
        ):
            if 8 * cells > limit:
                raise BadRequest(
                    f"sample: {name} asks {cells} cells, an answer over max_request_mb={self.cfg.max_request_mb}; "
                    "ask fewer per position (or a shorter prompt)",
                    status=413,
                )

    def unload(self, model_id: str) -> str:
        self.model(model_id)

        def run():
            self.models.pop(model_id, None)
            return {"model_id": model_id, "type": "unload_model"}

        return self.submit("unload_model", run)

    def capabilities(self) -> dict[str, Any]:
        names = [*self.cfg.models, *TINY_SIZES, *models.PACKAGED]
        return {"supported_models": [{"model_name": n, "trainable": True, "sampleable": True} for n in names]}
