"""Generation on vLLM, with the same `sample(prompts, params) -> list[Sample]` as `HFSampler`.

Two modes:
- `colocated`: a vLLM engine inside the trainer process, on the trainer's GPU (`gpu_memory_utilization`
  bounds its share). After each update the trainer's weights are loaded into it directly.
- `server`: a vLLM OpenAI-compatible server started separately (other GPUs or nodes). Prompts go as
  token ids to /v1/completions; after each update the trainer writes its weights (safetensors) to a
  folder both can read and asks the server's workers to load them through /collective_rpc. Start it with

      VLLM_SERVER_DEV_MODE=1 vllm serve MODEL_DIR --worker-extension-cls tempering.rollout.vllm_sampler.WeightSync \
          --logprobs-mode processed_logprobs

After every load the workers report sums over the parameters they hold (`WeightSync.tempering_fingerprint`,
the same /collective_rpc), which must equal the trainer's over what it sent (`rollout/sync.py`): a sync
that left the engine on other weights stops the run naming both versions.

Log-probs are those of the distribution tokens were sampled from (after temperature and top-k/top-p,
vLLM's `processed_logprobs`), as `HFSampler` records them. They still differ a little from the
trainer's (other kernels, other precision); `loss.rollout_correction` (algos/correction.py) reweights or masks for that,
as the GRPO note describes, and `mismatch_kl` measures it. The trainer's cover the whole vocabulary, so a
correction with top-k/top-p sampling is refused when the config is read.

Needs the `vllm` extra and a CUDA GPU: `pip install 'tempering[vllm]'`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from tempering.config import Schema
from tempering.errors import UserError
from tempering.http import ServerError, request_json
from tempering.rollout.sampler import Sample, SamplingParams
from tempering.rollout.sync import SyncCheck, WeightSums, combine_reports, engine_report, weight_sums


class VLLMSection(Schema):
    """Options of the vLLM generation backend (`rollout.backend=vllm`)."""

    mode: Literal["colocated", "server"] = Field(
        "colocated", description="Engine in the trainer process, or a separate vLLM server."
    )
    url: str = Field("http://127.0.0.1:8000", description="Server mode: base URL of the vLLM server.")
    sync_dir: str | None = Field(
        None,
        description="Server mode: folder both trainer and server read, for weight files (default: a temp folder, one machine).",
    )
    gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="Colocated mode: share of GPU memory vLLM may take."
    )
    dtype: str = Field("auto", description="Colocated mode: vLLM weight dtype (auto, bfloat16, float16, float32).")
    max_model_len: int | None = Field(
        None, description="Colocated mode: context length the engine reserves (default: the model's)."
    )
    enforce_eager: bool = Field(
        False, description="Colocated mode: no CUDA graphs (slower, starts faster, less memory)."
    )
    timeout_s: float = Field(600.0, gt=0, description="Server mode: seconds to wait for one request.")


# ---- the sampler ------------------------------------------------------------------------------
def _require_vllm():
    if not torch.cuda.is_available():
        raise UserError(
            "rollout.backend=vllm needs a CUDA GPU and this machine has none; "
            "use rollout.backend=hf (Hugging Face generation on the CPU)"
        )
    try:
        import vllm
    except ImportError as e:
        raise UserError("rollout.backend=vllm needs vLLM: pip install 'tempering[vllm]'") from e
    return vllm


class WeightSync:
    """Methods added to vLLM's GPU workers (`worker_extension_cls`), called through collective_rpc."""

    model_runner: Any  # the vLLM worker this class is mixed into provides it

    def tempering_load_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Load (name, tensor) pairs in Hugging Face naming (vLLM fuses q/k/v itself)."""
        named = list(named)
        self.model_runner.model.load_weights(weights=named)
        return len(named)

    def tempering_load_file(self, path: str) -> int:
        """Load a safetensors file the trainer wrote (server mode)."""
        from safetensors.torch import load_file

        return self.tempering_load_weights(load_file(path, device="cpu").items())

    def tempering_fingerprint(self) -> dict:
        """Sums over this worker's parameters as it holds them after loading (`rollout/sync.py`), for the
        trainer to compare with what it sent."""
        return engine_report(self.model_runner.model.named_parameters(remove_duplicate=False))


def policy_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full weights under Hugging Face names, from the trainer's module in any of its forms:
    plain, DDP (`.module`), FSDP2 (sharded: gathered) or peft LoRA (adapters merged)."""
    model = getattr(model, "module", model)
    if hasattr(model, "merge_and_unload"):
        from tempering.models.lora import merged_state_dict

        return merged_state_dict(model)
    dtensor: tuple[type, ...]
    try:
        from torch.distributed.tensor import DTensor

        dtensor = (DTensor,)
    except ImportError:  # pragma: no cover - old torch
        dtensor = ()
    if any(isinstance(p, dtensor) for p in model.parameters()):
        from tempering.models.io import full_state_dict

        return full_state_dict(model)
    return {k: v.detach() for k, v in model.state_dict().items()}


class VLLMSampler:
    """`HFSampler`'s interface on a vLLM engine (colocated or server), with weight sync."""

    def __init__(self, model_dir: str | Path, tokenizer, seed: int = 0, options: VLLMSection | None = None):
        """model_dir: Hugging Face folder the engine starts from (the trainer's initial weights)."""
        self.options = options or VLLMSection()
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.generator = torch.Generator().manual_seed(seed)
        """Seeds vLLM's per-request sampling, so that a run is reproducible from its seed."""
        self.syncs = 0
        if self.options.mode == "colocated":
            self.engine: _Engine = _Colocated(str(model_dir), self.options)
        else:
            self.engine = _Server(str(model_dir), self.options)
        where = (
            "the colocated vLLM engine"
            if self.options.mode == "colocated"
            else f"the vLLM server at {self.options.url}"
        )
        self.sync_check = SyncCheck(where)

    def sample(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        if not prompts:
            return []
        seeds = torch.randint(0, 2**31 - 1, (len(prompts),), generator=self.generator).tolist()
        return self.engine.generate(prompts, params, seeds)

    def sync_weights(self, train_model: torch.nn.Module, version: int | None = None) -> None:
        """Load the trainer's current weights into the engine (after every update), and check them."""
        self.load_weights(policy_weights(train_model), version)

    def load_weights(self, weights: dict[str, torch.Tensor], version: int | None = None) -> None:
        """Load weights under Hugging Face names (a snapshot, e.g. from asynchronous rollouts), then check
        that the engine holds them (sums of `weights`)."""
        self.engine.load(weights)
        self.syncs += 1
        self.verify(weights, version)

    def verify(self, weights: dict[str, torch.Tensor], version: int | None = None) -> WeightSums:
        """Compare the engine's weight sums with those of `weights`; a mismatch raises `SyncError`."""
        held = combine_reports(self.engine.fingerprint(), self.sync_check.what)
        self.sync_check.check(version, weight_sums(weights, held.dtype), [held])
        return held


class _Engine:
    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]) -> list[Sample]:
        raise NotImplementedError

    def load(self, weights: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def fingerprint(self) -> list[dict]:
        """Every worker's `WeightSync.tempering_fingerprint`."""
        raise NotImplementedError


class _Colocated(_Engine):
    def __init__(self, model_dir: str, o: VLLMSection):
        vllm = _require_vllm()
        # the engine in this process: collective_rpc then hands tensors over without copies
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.vllm = vllm
        kw: dict[str, Any] = dict(
            model=model_dir,
            gpu_memory_utilization=o.gpu_memory_utilization,
            dtype=o.dtype,
            enforce_eager=o.enforce_eager,
            worker_extension_cls=f"{__name__}.WeightSync",
            logprobs_mode="processed_logprobs",
        )
        if o.max_model_len:
            kw["max_model_len"] = o.max_model_len
        self.llm = vllm.LLM(**kw)

    def generate(self, prompts, params, seeds):
        sp = [self.vllm.SamplingParams(**_sampling_kwargs(params), seed=s) for s in seeds]
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        return [_sample_from_output(o.outputs[0]) for o in outs]

    def load(self, weights):
        self.llm.collective_rpc("tempering_load_weights", args=(list(weights.items()),))
        self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights

    def fingerprint(self):
        return list(self.llm.collective_rpc("tempering_fingerprint"))


def _sampling_kwargs(p: SamplingParams) -> dict[str, Any]:
    return dict(
        n=1,
        max_tokens=p.max_new_tokens,
        temperature=p.temperature,
        top_p=p.top_p,
        top_k=p.top_k if p.top_k > 0 else -1,
        stop=list(p.stop) or None,
        include_stop_str_in_output=True,
        logprobs=0,
    )


def _sample_from_output(c) -> Sample:
    """One vLLM CompletionOutput -> Sample (the sampled token's log-prob at each step)."""
    ids = list(c.token_ids)
    lps = [float(step[t].logprob) for t, step in zip(ids, c.logprobs or [])]
    if len(lps) != len(ids):
        raise RuntimeError(f"vLLM returned {len(lps)} log-probs for {len(ids)} tokens; is logprobs=0 honoured?")
    return Sample(ids, lps, truncated=c.finish_reason == "length")


class _Server(_Engine):
    def __init__(self, model_dir: str, o: VLLMSection):
        self.o = o
        self.url = o.url.rstrip("/")
        self.sync_dir = Path(o.sync_dir) if o.sync_dir else None
        """Made at the first load when not given: a server that cannot be reached leaves no folder behind."""
        models = self._call("GET", "/v1/models")
        names = [m["id"] for m in models.get("data", [])]
        if not names:
            raise UserError(f"the vLLM server at {self.url} serves no model; start it with the policy's folder")
        self.model = model_dir if model_dir in names else names[0]

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        try:
            return request_json(method, self.url + path, body, timeout_s=self.o.timeout_s)
        except ServerError as e:
            if e.kind == "status":
                hint = (
                    " (weight sync needs VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls "
                    "tempering.rollout.vllm_sampler.WeightSync on the server)"
                    if path in ("/collective_rpc", "/reset_prefix_cache")
                    else ""
                )
                raise UserError(f"vLLM server {self.url}{path} answered {e.status}: {e.body!r}{hint}") from None
            if e.kind == "timeout":
                raise UserError(
                    f"the vLLM server at {self.url} did not answer {path} within vllm.timeout_s={self.o.timeout_s:g} s "
                    "(hung or overloaded); the run stops. The last checkpoint is intact: restart the server, resume "
                    "with --resume"
                ) from None
            if e.kind == "not_json":
                raise UserError(
                    f"the vLLM server at {self.url} answered {path} with no JSON: {e.body[:200]!r}"
                ) from None
            raise UserError(
                f"cannot reach the vLLM server at {self.url} ({e.reason}); start it (see "
                "docs/scaling.md) or set vllm.url; a run that was going stops with its last checkpoint intact: "
                "resume it with --resume"
            ) from None

    def generate(self, prompts, params, seeds):
        kw = _sampling_kwargs(params)
        body = {
            "model": self.model,
            "prompt": prompts,
            "max_tokens": kw["max_tokens"],
            "temperature": kw["temperature"],
            "top_p": kw["top_p"],
            "top_k": kw["top_k"],
            "stop": kw["stop"],
            "include_stop_str_in_output": True,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
        }
        # no seed: one seed for the whole request would give every copy of a prompt (a group) the same answer
        out = self._call("POST", "/v1/completions", body)
        choices = sorted(out["choices"], key=lambda c: c["index"])
        if len(choices) != len(prompts):
            raise RuntimeError(f"vLLM server returned {len(choices)} completions for {len(prompts)} prompts")
        return [_sample_from_choice(c) for c in choices]

    def load(self, weights):
        from safetensors.torch import save_file

        if self.sync_dir is None:
            self.sync_dir = Path(tempfile.mkdtemp(prefix="tempering-vllm-sync-"))
        self.sync_dir.mkdir(parents=True, exist_ok=True)
        path = self.sync_dir / "policy.safetensors"
        tmp = self.sync_dir / f".policy.{os.getpid()}.tmp"
        save_file(
            {k: v.detach().to("cpu", copy=True).contiguous() for k, v in weights.items()}, str(tmp)
        )  # copies: tied weights
        os.replace(tmp, path)  # the server never reads a half-written file
        self._call("POST", "/collective_rpc", {"method": "tempering_load_file", "args": [str(path)]})
        self._call("POST", "/reset_prefix_cache")

    def fingerprint(self):
        out = self._call("POST", "/collective_rpc", {"method": "tempering_fingerprint", "args": []})
        return out.get("results") or []


def _sample_from_choice(c: dict) -> Sample:
    """One /v1/completions choice (tokens as `token_id:N`) -> Sample."""
    lp = c.get("logprobs") or {}
    tokens = lp.get("tokens") or []
    ids = [int(t.split(":", 1)[1]) for t in tokens]
    lps = [float(x) for x in (lp.get("token_logprobs") or [])]
    if len(lps) != len(ids):
        raise RuntimeError(f"vLLM server returned {len(lps)} log-probs for {len(ids)} tokens")
    return Sample(ids, lps, truncated=c.get("finish_reason") == "length")


# ---- wiring into the RL recipe ------------------------------------------------------------------
def make_vllm_sampler(
    model: torch.nn.Module, tokenizer, out_dir: str | Path, seed: int, options: VLLMSection
) -> VLLMSampler:
    """A vLLM sampler holding `model`'s current weights: colocated engines start from a copy written
    into the run folder; a server gets them through a weight sync."""
    if options.mode == "colocated":
        _require_vllm()  # before writing anything
    from tempering.models import save_policy

    policy: Any = getattr(model, "module", model)  # the unwrapped Hugging Face model
    init = save_policy(policy, tokenizer, Path(out_dir) / "vllm_init")
    sampler = VLLMSampler(init, tokenizer, seed=seed, options=options)
    if options.mode == "server":
        sampler.sync_weights(model, version=0)
    else:
        sampler.verify(policy_weights(model), version=0)  # the engine started from these
    return sampler
