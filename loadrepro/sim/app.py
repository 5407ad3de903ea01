"""The simulated engine's HTTP surface: an OpenAI-compatible ASGI app around a SimRuntime."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from loadrepro.sim import metrics
from loadrepro.sim.config import DeathMode
from loadrepro.sim.protocol import ChatBody, CompletionBody, Shape, TokenizeBody, error_body, sse, validation_message
from loadrepro.sim.runtime import Fatal, RequestHandle, SimRuntime, Token
from loadrepro.sim.scheduler import Finished, Rejection
from loadrepro.sim.tokenizer import output_token, render_chat, token_ids, tokenize

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # what vLLM and SGLang use when a completions request sets none


class ConnectionCut(Exception):
    """Raised inside a stream to make the server drop the connection, as an engine that dies mid-stream does."""


def _error(status: int, message: str, code: str | None = None, flat: bool = False) -> JSONResponse:
    return JSONResponse(error_body(status, message, code, flat), status_code=status)


class _BadRequest(Exception):
    """A request body that is not JSON at all."""


async def _json_body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"Invalid JSON body: {exc}") from exc


def create_app(runtime: SimRuntime) -> Starlette:
    config = runtime.config
    registry = metrics.metrics_registry(runtime.stats, config.model)

    def fatal_response(message: str) -> JSONResponse:
        return _error(config.death_status, message, flat=config.death_status == 400)

    async def health(_: Request) -> Response:
        if runtime.fatal is not None:
            return _error(503, f"The engine is dead: {runtime.fatal}")
        return Response(status_code=200)

    async def models(_: Request) -> Response:
        card = {"id": config.model, "object": "model", "created": 0, "owned_by": "loadrepro",
                "max_model_len": config.max_model_len}
        return JSONResponse({"object": "list", "data": [card]})

    async def render_metrics(_: Request) -> Response:
        return Response(metrics.render(registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def sim_config(_: Request) -> Response:
        described = {k: str(v) if isinstance(v, str) else v for k, v in dataclasses.asdict(config).items()}
        return JSONResponse({**described, "page_index_entries": runtime.table_width})

    async def tokenize_route(request: Request) -> Response:
        try:
            body = TokenizeBody.model_validate(await _json_body(request))
        except _BadRequest as exc:
            return _error(400, str(exc))
        except ValidationError as exc:
            return _error(400, validation_message(exc))
        if (body.prompt is None) == (body.messages is None):
            return _error(400, "Give exactly one of 'prompt' or 'messages'.")
        text = body.prompt if body.prompt is not None else render_chat(
            [m.model_dump() for m in body.messages or []], body.add_generation_prompt)
        tokens = tokenize(text)
        return JSONResponse({"count": len(tokens), "max_model_len": config.max_model_len,
                             "tokens": token_ids(tokens)})

    async def stream(handle: RequestHandle, shape: Shape, include_usage: bool) -> AsyncIterator[str]:
        try:
            async for event in handle.events():
                match event:
                    case Token(index=index):
                        yield sse(shape.token_chunk(output_token(handle.id, index), first=index == 0))
                    case Finished() as finished:
                        yield sse(shape.final_chunk(finished))
                        if include_usage:
                            yield sse(shape.usage_chunk(finished))
                        yield sse("[DONE]")
                    case Fatal(message=message):
                        if config.death_mode is DeathMode.CUT:
                            raise ConnectionCut(message)
                        yield sse(error_body(config.death_status, message))
                        yield sse("[DONE]")
        finally:
            runtime.abort(handle.id)

    async def whole(handle: RequestHandle, shape: Shape) -> Response:
        text: list[str] = []
        try:
            async for event in handle.events():
                match event:
                    case Token(index=index):
                        text.append(output_token(handle.id, index))
                    case Finished() as finished:
                        return JSONResponse(shape.whole("".join(text), finished))
                    case Fatal(message=message):
                        return fatal_response(message)
        finally:
            runtime.abort(handle.id)
        raise AssertionError("a request's events always end with Finished or Fatal")

    async def generate(request: Request, chat: bool) -> Response:
        try:
            data = await _json_body(request)
            body: ChatBody | CompletionBody = (ChatBody if chat else CompletionBody).model_validate(data)
        except _BadRequest as exc:
            return _error(400, str(exc))
        except ValidationError as exc:
            return _error(400, validation_message(exc))
        if body.model and body.model != config.model:
            return _error(404, f"The model `{body.model}` does not exist.", "model_not_found")
        if body.n != 1:
            return _error(400, "The simulated engine supports only n = 1.")
        if isinstance(body, ChatBody):
            text = render_chat([m.model_dump() for m in body.messages])
        elif isinstance(body.prompt, list) and len(body.prompt) != 1:
            return _error(400, "The simulated engine takes one prompt per request.")
        else:
            text = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
        tokens = tokenize(text)
        max_tokens = body.requested_max_tokens()
        if max_tokens is None:
            max_tokens = max(1, config.max_model_len - len(tokens)) if chat else COMPLETIONS_DEFAULT_MAX_TOKENS
        if max_tokens < 1:
            return _error(400, f"max_tokens must be at least 1, got {max_tokens}.")
        submitted = runtime.submit(tokens, max_tokens, body.ignore_eos)
        match submitted:
            case Rejection(status=status, message=message, code=code):
                return _error(status, message, code)
            case Fatal(message=message):
                return fatal_response(message)
        shape = Shape.new(chat, submitted.id, config.model)
        if body.stream:
            return StreamingResponse(stream(submitted, shape, body.include_usage), media_type="text/event-stream")
        return await whole(submitted, shape)

    async def chat_route(request: Request) -> Response:
        return await generate(request, chat=True)

    async def completions_route(request: Request) -> Response:
        return await generate(request, chat=False)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        loop_task = asyncio.create_task(runtime.run(), name="sim-engine-loop")
        try:
            yield
        finally:
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/metrics", render_metrics, methods=["GET"]),
        Route("/sim/config", sim_config, methods=["GET"]),
        Route("/tokenize", tokenize_route, methods=["POST"]),
        Route("/v1/chat/completions", chat_route, methods=["POST"]),
        Route("/v1/completions", completions_route, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
