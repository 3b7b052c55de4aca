"""Training routes under /v1/art/models: register, train (GRPO), train_sft, log, history,
checkpoints, delete_checkpoints, fork, and checkpoint files. Steps stream NDJSON: a `start` line, a
`progress` line per gradient step, `warning` lines, then a `result` line (or an `error` line)."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response, StreamingResponse

from ..core.names import NameError_, check_name
from ..service.fork import ParentNotFound, fork_checkpoint
from ..service.manager import BaseModelConflict, ModelNotFound
from ..service.reporting import ReportSettings, check_trackers
from ..service.trainable import LoraConfigError, RegistrationError
from ..store import checkpoints as ckpt
from ..trainer.guard import StepAborted
from .errors import ApiError, error_body
from .schemas import DeleteCheckpointsRequest, ForkRequest, LogRequest, RegisterRequest, SFTRequest, TrainRequest
from .serving import manager_of

log = logging.getLogger(__name__)
# Every route here needs the token: api/auth.py checks it before the app is reached.
router = APIRouter(prefix="/v1/art/models", tags=["training"])


def _model(request: Request, name: str) -> Any:
    try:
        return manager_of(request).training.get(name)
    except KeyError as error:
        raise ApiError(404, str(error.args[0]), "model_not_registered", "name") from None


def _price(request: Request, asked: float | None) -> float | None:
    """The hour's price a step is costed at: the request's (the model's option), else the server's flag."""
    price = asked if asked is not None else request.app.state.config.gpu_cost_per_hour_usd
    return price or None


def _dump_groups(groups: list) -> list[list[dict[str, Any]]]:
    return [[t.model_dump(mode="json", exclude_none=True) for t in g] for g in groups]


async def _ndjson(first: dict[str, Any], rest: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    yield orjson.dumps(first) + b"\n"
    try:
        async for line in rest:
            yield orjson.dumps(line) + b"\n"
    except StepAborted as error:  # rolled back: the model is as it was (guard.py)
        yield orjson.dumps({"type": "error", "status": error.status, **error_body(error.status, str(error), error.code)}) + b"\n"
    except OSError as error:  # the data dir: full, read-only, gone
        message = (
            f"the step could not be saved ({error.strerror or error}: {error.filename or ''}) and was rolled back; "
            "make the server's data dir writable (and free space), then train again"
        )
        yield orjson.dumps({"type": "error", "status": 507, **error_body(507, message, "storage_error")}) + b"\n"
    except Exception as error:  # the stream has started: report in-band
        log.exception("training step failed", exc_info=error)
        yield (
            orjson.dumps(
                {
                    "type": "error",
                    "status": 500,
                    **error_body(500, f"the step failed and was rolled back: {type(error).__name__}: {error}", "training_failed"),
                }
            )
            + b"\n"
        )


async def _stream(lines: AsyncGenerator[dict[str, Any], None], request: Request) -> Response:
    try:
        first = await lines.__anext__()  # validation errors still get a status code
    except ValueError as error:
        raise ApiError(400, str(error), "invalid_value") from None
    except ckpt.CheckpointNotFound as error:
        raise ApiError(404, str(error), "checkpoint_not_found") from None
    if await request.is_disconnected():
        # The client left while the step was prepared (a stopped pipeline): never begin it, so a
        # client that saw its request fail does not find the model training afterwards.
        await lines.aclose()
        return Response(status_code=204)
    return StreamingResponse(_ndjson(first, lines), media_type="application/x-ndjson")


@router.post("/register", summary="Register a trainable model (creates step 0) or resume it at its latest step")
async def register(body: RegisterRequest, request: Request) -> dict[str, Any]:
    for param, kind, value in (("name", "model", body.name), ("project", "project", body.project)):
        try:
            check_name(kind, value)
        except NameError_ as error:
            raise ApiError(400, str(error), "invalid_value", param) from None
    lora = body.lora
    training = manager_of(request).training
    try:
        report = _report_settings(body, training.reports.default)
    except ValueError as error:  # a tracker whose package the server lacks
        raise ApiError(400, str(error), "invalid_value", "report") from None
    try:
        return await training.register(body.name, body.project, body.base_model, lora, report)
    except ModelNotFound as error:
        raise ApiError(404, str(error), "model_not_found", "base_model") from None
    except (BaseModelConflict, RegistrationError) as error:
        raise ApiError(409, str(error), "conflict") from None
    except LoraConfigError as error:
        raise ApiError(400, str(error), "invalid_value", "lora") from None


def _report_settings(body: RegisterRequest, default: ReportSettings) -> ReportSettings | None:
    """The model's trackers: the request's, else the server's (None); its table size, else the server's."""
    if body.report is None and body.report_trajectories is None:
        return None
    trackers = default.trackers if body.report is None else check_trackers(body.report)
    trajectories = default.trajectories if body.report_trajectories is None else body.report_trajectories
    return ReportSettings(trackers, trajectories)


@router.get("/{name}", summary="A registered model: its step, inference name, LoRA config")
async def get_model(name: str, request: Request) -> dict[str, Any]:
    return _model(request, name).info()


@router.post("/{name}/train", summary="One GRPO step on trajectory groups; streams NDJSON progress, then the result")
async def train(name: str, body: TrainRequest, request: Request) -> Response:
    _model(request, name)
    config = body.config
    return await _stream(
        manager_of(request).training.train(
            name,
            _dump_groups(body.groups),
            config,
            body.serve_previous_during_training,
            {
                "groups_dropped_stale": body.stale_groups_dropped,
                "groups_retried_stale": body.stale_groups_retried,
                "sampling_tokens_per_second": body.sampled_tokens / body.sampling_seconds if body.sampling_seconds else 0,
                "sampling_s": body.sampling_seconds,
                **body.judge_usage(),
            },
            _price(request, body.gpu_cost_per_hour_usd),
        ),
        request,
    )


@router.post("/{name}/train_sft", summary="One SFT step (epochs over conversations); streams NDJSON like train")
async def train_sft(name: str, body: SFTRequest, request: Request) -> Response:
    _model(request, name)
    conversations = [c.model_dump(mode="json", exclude_none=True) for c in body.conversations]
    price = _price(request, body.gpu_cost_per_hour_usd)
    return await _stream(manager_of(request).training.train_sft(name, conversations, body.config, price), request)


@router.post("/{name}/log", summary="Store trajectory groups (e.g. split 'val') and their metrics at the current step")
async def log_groups(name: str, body: LogRequest, request: Request) -> dict[str, Any]:
    _model(request, name)
    try:
        check_name("split", body.split)
    except NameError_ as error:
        raise ApiError(400, str(error), "invalid_value", "split") from None
    model = _model(request, name)
    if body.step is not None and body.step > model.step:
        raise ApiError(  # a conflict with the model's state: the same body is fine once the model gets there
            409,
            f"step {body.step} is ahead of {name}'s current step {model.step}: log groups at a step the "
            "model has reached (leave step out for the current one)",
            "conflict",
            "step",
        )
    return await manager_of(request).training.log(name, body.split, _dump_groups(body.groups), body.step, body.judge_usage())


@router.get("/{name}/history", summary="Metrics rows: one per step and split")
async def history(name: str, request: Request) -> dict[str, Any]:
    _model(request, name)
    return {"rows": manager_of(request).training.history(name)}


@router.get("/{name}/checkpoints", summary="Complete checkpoints, oldest first")
async def checkpoints(name: str, request: Request) -> dict[str, Any]:
    _model(request, name)
    return {"checkpoints": manager_of(request).training.checkpoints(name)}


@router.post("/{name}/delete_checkpoints", summary="Delete all checkpoints but the latest and the best by a metric")
async def delete_checkpoints(name: str, body: DeleteCheckpointsRequest, request: Request) -> dict[str, Any]:
    _model(request, name)
    return await manager_of(request).training.delete_checkpoints(name, body.keep_best_by)


@router.post("/{name}/fork", summary="Start this model from another model's checkpoint (its latest at or before a step)")
async def fork(name: str, body: ForkRequest, request: Request) -> dict[str, Any]:
    _model(request, name)
    try:
        check_name("model", body.from_model)
        if body.from_project is not None:
            check_name("project", body.from_project)
    except NameError_ as error:
        raise ApiError(400, str(error), "invalid_value", "from_model") from None
    training = manager_of(request).training
    try:
        return await fork_checkpoint(training, name, body.from_model, body.from_project, body.not_after_step, body.overwrite)
    except ParentNotFound as error:
        raise ApiError(404, str(error), "model_not_found", "from_model") from None
    except ckpt.CheckpointNotFound as error:
        raise ApiError(404, str(error), "checkpoint_not_found", "not_after_step") from None
    except RegistrationError as error:  # ForkConflict
        raise ApiError(409, str(error), "conflict") from None
    except ValueError as error:
        raise ApiError(400, str(error), "invalid_value", "from_model") from None
    except OSError as error:
        message = f"the fork could not be written ({error.strerror or error}) and was not made; free space in the data dir, then fork again"
        raise ApiError(507, message, "storage_error") from None


@router.get("/{name}/checkpoints/{step}/files/{filename}", summary="A file of a checkpoint's PEFT adapter folder")
async def checkpoint_file(name: str, step: int, filename: str, request: Request) -> FileResponse:
    _model(request, name)
    if filename not in ("adapter_config.json", ckpt.ADAPTER_WEIGHTS):
        raise ApiError(404, f"checkpoints expose adapter_config.json and {ckpt.ADAPTER_WEIGHTS}", "not_found", "filename")
    path = manager_of(request).training.checkpoint_path(name, step)
    if path is None:
        raise ApiError(404, f"model {name!r} has no complete checkpoint {step}", "model_not_found", "step")
    return FileResponse(path / filename)
