"""The FastAPI application: routers, error handlers, the body limit and the model manager."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from .. import __version__
from ..core.config import ServerConfig
from ..service.manager import ModelManager
from . import dialect_routes, serving, training
from .auth import TokenGate
from .chat_route import ChatCompletionsRoute
from .errors import install_error_handlers
from .limits import BodyLimit
from .openapi_contract import faithful, served_limits

log = logging.getLogger(__name__)


def create_app(config: ServerConfig) -> FastAPI:
    manager = ModelManager(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if config.base_model:
            await manager.ensure_base(config.base_model)
        yield
        await manager.close()

    docs: dict[str, Any] = {} if config.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(
        title="art-server",
        version=__version__,
        lifespan=lifespan,
        **docs,
        description="OpenAI-compatible serving of a base model and its per-step LoRA adapters, "
        "with GRPO and SFT training. Every route but /health needs `Authorization: Bearer <token>`.",
    )
    app.state.config = config
    app.state.manager = manager
    install_error_handlers(app)
    app.include_router(serving.public)
    app.include_router(serving.router)
    app.include_router(dialect_routes.router)
    app.include_router(training.router)
    routes_schema = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:  # FastAPI's own schema, cached on the app: made faithful in place, once
            faithful(routes_schema())
            served_limits(app.openapi_schema or {}, config)
        return app.openapi_schema  # pyright: ignore[reportReturnType]  (set by the line above)

    app.openapi = openapi
    return app


def create_asgi(app: FastAPI) -> Any:
    """What uvicorn serves: the token check (before any body is read), the body limit, then chat
    completions ahead of FastAPI, then the app."""
    config: ServerConfig = app.state.config
    public = {"/health"} | (
        {p for p in (app.docs_url, app.redoc_url, app.openapi_url, app.swagger_ui_oauth2_redirect_url) if p}
        if config.docs
        else set()
    )
    return TokenGate(BodyLimit(ChatCompletionsRoute(app), config.max_body_bytes), config.token, public)
