"""The SDK's wire format, read and written with the SDK's own types and protobuf messages (the `tinker`
package is the format's definition): requests become plain token lists and numpy arrays, results become
the messages the SDK decodes. Anything malformed is a `BadRequest` naming the field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError
from tinker.proto import tinker_public_pb2 as pb


class BadRequest(Exception):
    """A request the service refuses: HTTP `status`, and the message the client sees (SDK's error format)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], body: Any, call: str) -> M:
    """A JSON body as the SDK's request type; a bad one names its fields."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        where = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'body'}: {err['msg']}" for err in e.errors())
        raise BadRequest(f"{call}: malformed request ({where})") from None


@dataclass
class Datum:
    """One training example: its input tokens and its loss inputs (`target_tokens`, `weights`, ...)."""

    tokens: np.ndarray
    """int64, (N,)."""
    inputs: dict[str, np.ndarray]


@dataclass
class ForwardBackward:
    model_id: str
    seq_id: int | None
    loss_fn: str
    config: dict[str, float | str]
    forward_only: bool
    data: list[Datum] = field(default_factory=list)


_NUMPY = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}


def _tensor(msg: Any, where: str) -> np.ndarray:
    dtype = _NUMPY.get(msg.dtype)
    if dtype is None:
        raise BadRequest(f"{where}: unsupported tensor dtype {msg.dtype} (float32 or int64)")
    shape = [int(s) for s in msg.shape]
    try:
        if msg.HasField("sparse_csr"):
            if len(shape) != 2:
                raise BadRequest(f"{where}: a sparse tensor needs a 2-D shape, got {shape}")
            values = np.frombuffer(msg.sparse_csr.values, dtype=dtype)
            crow = np.frombuffer(msg.sparse_csr.crow_indices, dtype=np.int64)
            col = np.frombuffer(msg.sparse_csr.col_indices, dtype=np.int64)
            if len(crow) != shape[0] + 1 or len(col) != len(values) or (len(col) and col.max() >= shape[1]):
                raise BadRequest(f"{where}: sparse indices do not fit the shape {shape}")
            dense = np.zeros(shape, dtype=dtype)
            rows = np.repeat(np.arange(shape[0]), np.diff(crow))
            dense[rows, col] = values
            return dense
        flat = np.frombuffer(msg.dense, dtype=dtype)
    except ValueError as e:  # a byte count that is no whole number of elements
        raise BadRequest(f"{where}: {e}") from None
    if not shape:
        shape = [len(flat)]
    if int(np.prod(shape)) != len(flat):
        raise BadRequest(f"{where}: {len(flat)} values do not fill the shape {shape}")
    return flat.reshape(shape)


def forward_backward(body: bytes) -> ForwardBackward:
    """The SDK's `ForwardBackwardRequest` protobuf (forward and forward_backward share it)."""
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as e:  # protobuf's DecodeError: the body is not this message
        raise BadRequest(f"forward_backward: the body is not a ForwardBackwardRequest protobuf ({e})") from None
    config: dict[str, float | str] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for k, v in msg.loss_fn_config_v2.items():
        config[k] = v.text if v.WhichOneof("value") == "text" else float(v.number)
    out = ForwardBackward(msg.model_id, msg.seq_id or None, msg.loss_fn, config, msg.forward_only)
    for i, d in enumerate(msg.data):
        parts = []
        for c in d.model_input:
            kind = c.WhichOneof("chunk")
            if kind != "encoded_text":
                call = "forward" if msg.forward_only else "forward_backward"
                raise BadRequest(
                    f"{call}: data[{i}].model_input has {kind} chunks; the served models are text-only (send encoded_text tokens)"
                )
            parts.append(np.frombuffer(c.encoded_text.tokens, dtype=np.int32))
        tokens = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
        inputs = {k: _tensor(t, f"data[{i}].loss_fn_inputs[{k!r}]") for k, t in d.loss_fn_inputs.items()}
        out.data.append(Datum(tokens, inputs))  # provenance spans: where tokens came from, read by no loss here
    return out


def forward_backward_output(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """`ForwardBackwardOutput` as the SDK decodes it: one record of per-datum arrays per field."""
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    for k, v in metrics.items():
        msg.metrics[k] = float(v)
    record = msg.loss_fn_outputs.add()
    record.num_datums = len(outputs)
    for name in outputs[0] if outputs else []:
        arrays = [np.ascontiguousarray(o[name], dtype=np.float32) for o in outputs]
        sizes = np.cumsum([0] + [a.nbytes for a in arrays], dtype=np.int64)
        t = record.fields[name]
        t.dtype = pb.DTYPE_FLOAT32
        t.data = b"".join(a.tobytes() for a in arrays)
        t.offsets = sizes.tobytes()
        t.trailing_shape.extend(arrays[0].shape[1:])
    return msg.SerializeToString()


@dataclass
class Sampled:
    tokens: list[int]
    logprobs: list[float]
    stopped: bool
    """Ended at a stop token or string (else it reached max_tokens)."""
    topk: tuple[np.ndarray, np.ndarray] | None = None
    """The SDK's topk_sample_logprobs: (len(tokens), k) token ids and log-probs of the likeliest tokens at each
    sampled position."""


def sample_response(
    sequences: list[Sampled], prompt_logprobs: np.ndarray | None, topk: tuple[np.ndarray, np.ndarray] | None = None
) -> bytes:
    """`SampleResponse` as the SDK decodes it; `prompt_logprobs` has NaN where none was computed; `topk`: the
    (positions, k) token ids and log-probs of the likeliest tokens at each prompt position."""
    msg = pb.SampleResponse()
    for s in sequences:
        seq = msg.sequences.add()
        seq.stop_reason = pb.STOP_REASON_STOP if s.stopped else pb.STOP_REASON_LENGTH
        seq.tokens = np.asarray(s.tokens, dtype=np.int32).tobytes()
        seq.logprobs = np.asarray(s.logprobs, dtype=np.float32).tobytes()
        if s.topk is not None:
            seq.topk_sampled_logprobs.CopyFrom(_topk_proto(*s.topk))
    if prompt_logprobs is not None:
        msg.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    if topk is not None:
        msg.topk_prompt_logprobs.CopyFrom(_topk_proto(*topk))
    return msg.SerializeToString()


def _topk_proto(ids: np.ndarray, lps: np.ndarray) -> pb.TopkLogprobs:
    return pb.TopkLogprobs(
        token_ids=ids.astype(np.int32).tobytes(),
        logprobs=lps.astype(np.float32).tobytes(),
        k=ids.shape[1],
        length=ids.shape[0],
    )
