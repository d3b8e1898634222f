"""The HTTP routes the `tinker` SDK calls (FastAPI), its error format and the request limits.

Every refusal is an HTTP 4xx whose JSON body is Tinker's `{"error": ..., "category": "user"}`, which the
SDK shows in its exception (4xx statuses other than 408/409/429 are not retried). A call the SDK knows and
this service does not implement is a 404 naming it. Work runs on the engine's thread; the routes only
check and queue it, so a slow request of one client never blocks another's polling.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Callable
from typing import Any

import zstandard
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from tinker import types

from tempering.serve.tinker import wire
from tempering.serve.tinker.config import TinkerConfig
from tempering.serve.tinker.engine import Engine, Failed, Proto
from tempering.serve.tinker.wire import BadRequest

POLL_S = 20.0
"""How long `retrieve_future` waits for a result before answering try-again (the SDK waits 45 s)."""

IMPLEMENTED = {
    "ServiceClient (session, heartbeat, client config, telemetry)": [
        "POST /api/v1/client/config",
        "POST /api/v1/client/dynamic_config",
        "POST /api/v1/create_session",
        "POST /api/v1/session_heartbeat",
        "POST /api/v1/sessions/{id}/finish",
        "POST /api/v1/telemetry",
    ],
    "RestClient.get_server_capabilities / health": ["GET /api/v1/get_server_capabilities", "GET /api/v1/healthz"],
    "ServiceClient.create_lora_training_client (and a full one: no lora_config)": ["POST /api/v1/create_model"],
    "TrainingClient.get_info": ["POST /api/v1/get_info"],
    "TrainingClient.forward / forward_backward / forward_backward_custom": ["POST /api/v1/forward_backward"],
    "TrainingClient.optim_step": ["POST /api/v1/optim_step"],
    "TrainingClient.save_state": ["POST /api/v1/save_weights"],
    "TrainingClient.save_weights_for_sampler / save_weights_and_get_sampling_client": [
        "POST /api/v1/save_weights_for_sampler"
    ],
    "ServiceClient.create_training_client_from_state[_with_optimizer], TrainingClient.load_state": [
        "POST /api/v1/load_weights"
    ],
    "ServiceClient.create_sampling_client": ["POST /api/v1/create_sampling_session", "GET /api/v1/samplers/{id}"],
    "SamplingClient.sample / compute_logprobs": ["POST /api/v1/asample"],
    "futures (every APIFuture)": ["POST /api/v1/retrieve_future", "POST /api/v1/cancel_future"],
    "unload a model": ["POST /api/v1/unload_model"],
}
"""What the service answers, by the SDK call that uses it (docs/tinker.md shows the same)."""

NOT_IMPLEMENTED = {
    "/api/v1/save_weights_external": "TrainingClient.save_weights_external",
    "/api/v1/create_custom_loss": "ServiceClient.create_custom_loss",
    "/api/v1/copy_weights": "ServiceClient.copy_weights",
    "/api/v1/join_sampling_session": "SamplingClient (unpickled copies joining a session)",
    "/api/v1/retrieve_futures": "SamplingClient (session-wide polling)",
    "/api/v1/auth/token": "JWT authentication",
    "/api/v1/weights_info": "RestClient.get_weights_info_by_tinker_path",
    "/api/v1/training_runs": "RestClient (training runs and checkpoints listing)",
    "/api/v1/sessions": "RestClient (sessions listing)",
    "/api/v1/checkpoints": "RestClient (checkpoints listing)",
}
"""Calls of the SDK this service answers with a 404 naming them."""


def error(message: str, status: int = 400, category: str = "user") -> JSONResponse:
    return JSONResponse({"error": message, "category": category}, status_code=status)


def create_app(cfg: TinkerConfig, engine: Engine) -> FastAPI:
    app = FastAPI(title="tempering: Tinker API", docs_url=None, redoc_url=None, openapi_url=None)
    limit = int(cfg.max_request_mb * (1 << 20))

    @app.exception_handler(BadRequest)
    async def refused(request: Request, e: BadRequest) -> JSONResponse:
        return error(str(e), e.status)

    async def body(request: Request) -> bytes:
        size = request.headers.get("content-length")
        if size is not None and int(size) > limit:
            raise BadRequest(f"request of {int(size)} bytes is over max_request_mb={cfg.max_request_mb}", 413)
        raw = await request.body()
        if len(raw) > limit:
            raise BadRequest(f"request of {len(raw)} bytes is over max_request_mb={cfg.max_request_mb}", 413)
        if request.headers.get("content-encoding") == "zstd":
            raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read(limit + 1)
            if len(raw) > limit:
                raise BadRequest(f"request decompresses to over max_request_mb={cfg.max_request_mb}", 413)
        return raw

    async def payload(request: Request) -> Any:
        raw = await body(request)
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise BadRequest(f"{request.url.path}: the body is not JSON") from None

    def future(request_id: str, **extra: Any) -> dict[str, Any]:
        return {"request_id": request_id, **extra}

    def queued(kind: str, model_id: str | None, seq_id: int | None, submit: Callable[[], str]) -> dict[str, Any]:
        """Submit a training model's request; one refused keeps its `seq_id`'s slot, so the later ones still run."""
        try:
            return future(submit())
        except BadRequest:
            engine.refuse(kind, model_id, seq_id)
            raise

    # -- session -------------------------------------------------------------------------------------

    @app.post("/api/v1/client/config")
    async def client_config(request: Request):
        await payload(request)
        return {
            "pjwt_auth_enabled": False,
            "use_pyqwest_transport": False,
            "fwdbwd_max_chunk_bytes_count": limit // 2,  # the SDK splits a batch into requests under the limit
            "sample_use_retrieve_futures": False,
            "custom_loss_server_side": False,
            "sample_join_sampling_session": False,
        }

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config(request: Request):
        await payload(request)
        return {}

    @app.post("/api/v1/create_session")
    async def create_session(request: Request):
        wire.parse(types.CreateSessionRequest, await payload(request), "create_session")
        return {"type": "create_session", "session_id": engine.new_session()}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request):
        req = wire.parse(types.SessionHeartbeatRequest, await payload(request), "session_heartbeat")
        if req.session_id not in engine.sessions:
            return error(f"session {req.session_id} is unknown here (the service restarted?)", 410)
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str, request: Request):
        await payload(request)
        engine.sessions.discard(session_id)
        return {}

    @app.post("/api/v1/telemetry")
    async def telemetry(request: Request):
        await body(request)  # the SDK's own events: read and dropped
        return {"status": "accepted"}

    @app.get("/api/v1/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities():
        return engine.capabilities()

    # -- training ------------------------------------------------------------------------------------

    @app.post("/api/v1/create_model")
    async def create_model(request: Request):
        req = wire.parse(types.CreateModelRequest, await payload(request), "create_model")
        optimizer = getattr(req.optimizer_config, "type", "adamw")
        return future(engine.create_model(req.session_id, req.model_seq_id, req.base_model, req.lora_config, optimizer))

    @app.post("/api/v1/get_info")
    async def get_info(request: Request):
        req = wire.parse(types.GetInfoRequest, await payload(request), "get_info")
        return engine.info(req.model_id)

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request):
        if "protobuf" not in request.headers.get("content-type", ""):
            raise BadRequest("forward_backward takes the SDK's protobuf body (application/x-protobuf)", 415)
        fb = wire.forward_backward(await body(request))
        return queued("forward_backward", fb.model_id, fb.seq_id, lambda: engine.forward_backward(fb))

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request):
        req = wire.parse(types.OptimStepRequest, await payload(request), "optim_step")
        return queued(
            "optim_step",
            req.model_id,
            req.seq_id,
            lambda: engine.optim_step(req.model_id, req.seq_id, req.optim_params),
        )

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request):
        req = wire.parse(types.SaveWeightsRequest, await payload(request), "save_weights")

        def save() -> str:
            if not req.path:
                raise BadRequest("save_weights needs a name (path)")
            return engine.save(req.model_id, req.seq_id, req.path, "weights", req.overwrite, None)

        return queued("save_weights", req.model_id, req.seq_id, save)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampler(request: Request):
        req = wire.parse(types.SaveWeightsForSamplerRequest, await payload(request), "save_weights_for_sampler")
        return queued(
            "save_weights_for_sampler",
            req.model_id,
            req.seq_id,
            lambda: engine.save(
                req.model_id, req.seq_id, req.path, "sampler_weights", False, req.sampling_session_seq_id
            ),
        )

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request):
        req = wire.parse(types.LoadWeightsRequest, await payload(request), "load_weights")
        return queued("load_weights", req.model_id, req.seq_id, lambda: engine.load(req))

    @app.post("/api/v1/unload_model")
    async def unload_model(request: Request):
        req = wire.parse(types.UnloadModelRequest, await payload(request), "unload_model")
        return future(engine.unload(req.model_id))

    # -- sampling ------------------------------------------------------------------------------------

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request):
        req = wire.parse(types.CreateSamplingSessionRequest, await payload(request), "create_sampling_session")
        sid = engine.sampling_session(req.session_id, req.sampling_session_seq_id, req.base_model, req.model_path)
        return {"type": "create_sampling_session", "sampling_session_id": sid}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str):
        s = engine.samplers.get(sampler_id)
        if s is None:
            raise BadRequest(f"unknown sampling session {sampler_id!r}", 404)
        return {"sampler_id": s.id, "base_model": s.base_model, "model_path": s.model_path}

    @app.post("/api/v1/asample")
    async def asample(request: Request):
        req = wire.parse(types.SampleRequest, await payload(request), "sample")
        rid, ids = engine.asample(req)
        return future(rid, sample_sequence_ids=ids)

    # -- futures -------------------------------------------------------------------------------------

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request):
        req = wire.parse(types.FutureRetrieveRequest, await payload(request), "retrieve_future")
        job = engine.jobs.get(req.request_id)
        if job is None:
            raise BadRequest(f"unknown request {req.request_id!r} (results are kept 10 minutes after retrieval)", 404)
        try:
            result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job.future)), POLL_S)
        except asyncio.TimeoutError:
            return {"type": "try_again", "request_id": job.request_id, "queue_state": "active"}
        job.retrieved = job.retrieved or time.time()
        if isinstance(result, Failed):
            return {"error": result.error, "category": result.category}
        if isinstance(result, Proto):
            return Response(result.body, media_type="application/x-protobuf")
        return result

    @app.post("/api/v1/cancel_future")
    async def cancel_future(request: Request):
        await payload(request)  # sampling runs to its end; the result is dropped unread
        return {}

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def not_implemented(path: str, request: Request):
        route = "/" + path
        call = next((c for p, c in NOT_IMPLEMENTED.items() if route == p or route.startswith(p + "/")), None)
        what = f"{call} ({request.method} {route})" if call else f"{request.method} {route}"
        return error(f"{what} is not implemented by tempering's Tinker service; see docs/tinker.md for what is", 404)

    return app
