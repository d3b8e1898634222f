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
class Targets:
    """The SDK's `target_prompt_logprobs`: its cells (each a row, scored at prompt position row + 1, and the token
    id asked there, -1 for none) and the request's layout, which the answer keeps."""

    rows: np.ndarray
    """int64, (cells,): a dense request's every cell in row-major order, a sparse one's listed cells."""
    ids: np.ndarray
    """int64, (cells,)."""
    shape: list[int]
    csr: tuple[np.ndarray, np.ndarray] | None = None
    """A sparse request's CSR row pointers and column indices (None: dense)."""

    def answer(self, logprobs: np.ndarray) -> pb.Tensor:
        """The answer from each cell's log-prob ((cells,)): float32 in the request's layout, 0.0 where none was
        asked."""
        values = np.where(self.ids >= 0, logprobs, 0.0).astype(np.float32)
        msg = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=self.shape)
        if self.csr is None:
            msg.dense = values.tobytes()
        else:
            msg.sparse_csr.values = values.tobytes()
            msg.sparse_csr.crow_indices = self.csr[0].tobytes()
            msg.sparse_csr.col_indices = self.csr[1].tobytes()
        return msg

    def check(self, vocab: int) -> None:
        bad = np.flatnonzero(self.ids >= vocab)
        if len(bad):
            raise BadRequest(
                f"sample: target_prompt_logprobs holds token id {self.ids[bad[0]]} (row {self.rows[bad[0]]}), "
                f"outside the vocabulary [0, {vocab})"
            )


def targets(td: Any, rows: int) -> Targets:
    """The request's `target_prompt_logprobs` (the SDK's JSON `TensorData`, dense or sparse CSR), checked against
    its layout and the prompt's length (`rows`: one per prompt position after the first)."""
    name = "sample: target_prompt_logprobs"
    if td.dtype != "int64":
        raise BadRequest(f"{name} holds token ids: int64, not {td.dtype}")
    shape = [int(n) for n in td.shape or []]
    if len(shape) != 2 or shape[1] < 0:
        raise BadRequest(f"{name} needs a 2-D shape [len(prompt) - 1, K], got {td.shape}")
    if shape[0] != rows:
        raise BadRequest(
            f"{name} has {shape[0]} rows; a prompt of {rows + 1} tokens needs {rows} (row i scores position i + 1)"
        )
    raw = np.asarray(td.data)
    if raw.size and raw.dtype.kind not in "iu":
        raise BadRequest(f"{name} holds token ids: whole numbers, not {raw.dtype} values")
    ids = raw.astype(np.int64)
    if (td.sparse_crow_indices is None) != (td.sparse_col_indices is None):
        raise BadRequest(f"{name}: a sparse tensor needs both sparse_crow_indices and sparse_col_indices")
    if td.sparse_crow_indices is None:
        if len(ids) != rows * shape[1]:
            raise BadRequest(f"{name}: {len(ids)} values do not fill the shape {shape}")
        out = Targets(np.repeat(np.arange(rows), shape[1]), ids, shape)
    else:
        crow = np.asarray(td.sparse_crow_indices, dtype=np.int64)
        col = np.asarray(td.sparse_col_indices, dtype=np.int64)
        fits = (
            len(crow) == rows + 1 and crow[0] == 0 and (np.diff(crow) >= 0).all() and crow[-1] == len(col) == len(ids)
        )
        row_of = np.repeat(np.arange(rows), np.diff(crow)) if fits else None
        if row_of is None or (
            len(col)
            and (col.min() < 0 or col.max() >= shape[1] or ((np.diff(col) <= 0) & (np.diff(row_of) == 0)).any())
        ):
            raise BadRequest(
                f"{name}: its sparse CSR indices do not fit the shape {shape} (row pointers from 0 to the number of "
                "values, columns below K and increasing within a row)"
            )
        out = Targets(row_of, ids, shape, (crow, col))
    bad = np.flatnonzero(out.ids < -1)
    if len(bad):
        raise BadRequest(f"{name} holds {out.ids[bad[0]]} (row {out.rows[bad[0]]}): a token id, or -1 to ask nothing")
    if not (out.ids >= 0).any():
        raise BadRequest(f"{name} names no token id (every cell is -1, which asks nothing)")
    return out


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
    sequences: list[Sampled],
    prompt_logprobs: np.ndarray | None,
    topk: tuple[np.ndarray, np.ndarray] | None = None,
    targets: pb.Tensor | None = None,
    alt: tuple[np.ndarray, np.ndarray] | None = None,
) -> bytes:
    """`SampleResponse` as the SDK decodes it; `prompt_logprobs` has NaN where none was computed; `topk`: the
    (positions, k) token ids and log-probs of the likeliest tokens at each prompt position; `targets`: the
    answer to `target_prompt_logprobs` (`Targets.answer`); `alt`: the `prompt_alt_tokens_k` draws, (len(prompt)
    - 1, k) token ids and log-probs."""
    msg = pb.SampleResponse()
    if targets is not None:
        msg.target_prompt_logprobs.CopyFrom(targets)
    if alt is not None:
        ids, lps = alt
        msg.prompt_alt_tokens.tokens.CopyFrom(  # int32 ids, as the SDK's proto says
            pb.Tensor(dtype=pb.DTYPE_INT32, shape=list(ids.shape), dense=ids.astype(np.int32).tobytes())
        )
        msg.prompt_alt_tokens.logprobs.CopyFrom(
            pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=list(lps.shape), dense=lps.astype(np.float32).tobytes())
        )
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
