"""The settings of `tempering serve tinker` (light: importing it imports no torch)."""

from __future__ import annotations

from pydantic import Field

from tempering.config import Schema

DEFAULT_MODELS = {"meta-llama/Llama-3.2-1B": "smollm2-135m-instruct"}
"""Cookbook names served by default: the smallest Llama the cookbook knows, run by SmolLM2-135M (a Llama too)."""


class TinkerConfig(Schema):
    """`tempering serve tinker`: the Tinker API on tempering's models, one process."""

    host: str = Field("127.0.0.1", description="Address to listen on (127.0.0.1: this machine only).")
    port: int = Field(8000, ge=1, le=65535, description="Port to listen on.")
    state_dir: str = Field(
        "runs/tinker",
        description="Folder of the checkpoints (tinker:// paths resolve here, so they survive a restart), "
        "the served names' tokenizers (names/) and the request log (requests.jsonl).",
    )
    models: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_MODELS),
        description="Served model names (a client's base_model) and the tempering model each runs: a tiny size, "
        "a packaged model (smollm2-135m-instruct) or a local Hugging Face folder. Every tempering name is "
        "also served as itself.",
    )
    device: str = Field("auto", description="auto (a CUDA GPU when one is visible, else the CPU), cpu, cuda or cuda:N.")
    dtype: str = Field("float32", description="Weights' dtype: float32, bfloat16 or float16.")
    threads: int = Field(0, ge=0, description="Torch CPU threads (0: torch's default, one per core).")
    seed: int = Field(
        0, description="Seed of the samplers (a request's own seed wins) and of LoRA weights without one."
    )
    lora_alpha: float | None = Field(
        None, gt=0, description="LoRA scaling numerator (update = alpha / rank * B A); default 2 * rank (ours)."
    )
    micro_batch_tokens: int = Field(
        2048, ge=1, description="Padded tokens per forward/backward micro-batch (bounds memory; same gradient)."
    )
    max_request_mb: float = Field(
        64.0,
        gt=0,
        description="Largest request body, after decompression; the SDK is told to split larger batches. A sampling "
        "answer's per-position widths (top-k, alternatives) are bounded by it too.",
    )
    max_datum_tokens: int = Field(
        32768, ge=1, description="Longest datum or prompt accepted (and at most the model's context length)."
    )
    max_snapshots: int = Field(
        8, ge=1, description="Unnamed sampler snapshots kept per training model (older ones are dropped)."
    )
    log_level: str = Field("warning", description="uvicorn's log level: debug, info, warning or error.")
