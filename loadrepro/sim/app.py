"""The simulated engine's HTTP surface: an OpenAI-compatible ASGI app around a SimRuntime."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from loadrepro.sim import metrics
from loadrepro.sim.config import DeathMode
from loadrepro.sim.protocol import (
    ChatBody,
    CompletionBody,
    MessagesBody,
    ResponsesBody,
    TokenizeBody,
    error_body,
    validation_message,
)
from loadrepro.sim.runtime import Fatal, RequestHandle, SimRuntime, Token
from loadrepro.sim.shapes import ChatShape, MessagesShape, ResponsesShape, Shape, logprob_entry, sse
from loadrepro.sim.steps import Finished, Rejection
from loadrepro.sim.tokenizer import render_chat, token_ids, tokenize

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # what vLLM and SGLang use when a completions request sets none


class ClosingStream(StreamingResponse):
    """A stream that ends as soon as its client leaves, its generator closed then (the engine's abort of the
    request), as a real engine aborts a request when its client leaves. Starlette, for a server of ASGI 2.4 and
    later, waits for a write to fail instead, and uvicorn drops writes to a closed connection without a word: the
    request then ran to its end; and it only stops iterating the generator, leaving its cleanup to the garbage
    collector, at a moment nothing decides."""

    def __init__(self, body: AsyncGenerator[str, None]) -> None:
        super().__init__(body, media_type="text/event-stream")
        self._body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.ensure_future(self.stream_response(send))
        leaving = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait((streaming, leaving), return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
            streaming.cancel()  # a no-op once it is done
            await asyncio.gather(streaming, leaving, return_exceptions=True)
            await self._body.aclose()
        if not streaming.cancelled() and (error := streaming.exception()) is not None:
            raise error  # a cut on purpose (ConnectionCut) drops the connection


class ConnectionCut(Exception):
    """Raised inside a stream to make the server drop the connection, as an engine that dies mid-stream does."""


def _error(status: int, message: str, code: str | None = None, flat: bool = False,
           anthropic: bool = False) -> JSONResponse:
    return JSONResponse(error_body(status, message, code, flat, anthropic), status_code=status)


_BODIES: dict[str, type[ChatBody | CompletionBody | ResponsesBody | MessagesBody]] = {
    "chat": ChatBody, "completions": CompletionBody, "responses": ResponsesBody, "messages": MessagesBody}


def _shape(api: str, request_id: int, model: str) -> Shape:
    match api:
        case "responses":
            return ResponsesShape(request_id, model)
        case "messages":
            return MessagesShape(request_id, model)
    return ChatShape(api == "chat", request_id, model)


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

    def fatal_response(message: str, api: str) -> JSONResponse:
        return _error(config.death_status, message, flat=config.death_status == 400 and api != "messages",
                      anthropic=api == "messages")

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

    async def stream(handle: RequestHandle, shape: Shape, include_usage: bool,
                     top: int | None) -> AsyncGenerator[str, None]:
        try:
            for opened in shape.opening(handle.prompt_tokens):
                yield sse(opened)
            async for event in handle.events():
                match event:
                    case Token(index=index, choice=choice):
                        listed = logprob_entry(choice, top) if top is not None else None
                        for part in shape.token(choice.text, index == 0, index < config.reasoning_tokens, listed):
                            yield sse(part)
                    case Finished() as finished:
                        for part in shape.closing(finished, include_usage):
                            yield sse(part)
                    case Fatal(message=message):
                        if config.death_mode is DeathMode.CUT:
                            raise ConnectionCut(message)
                        for part in shape.failure(config.death_status, message):
                            yield sse(part)
        finally:
            runtime.abort(handle.id)

    async def whole(handle: RequestHandle, shape: Shape, api: str) -> Response:
        text: list[str] = []
        try:
            async for event in handle.events():
                match event:
                    case Token(choice=choice):
                        text.append(choice.text)
                    case Finished() as finished:
                        cut = config.reasoning_tokens
                        return JSONResponse(shape.whole("".join(text[cut:]), "".join(text[:cut]), finished))
                    case Fatal(message=message):
                        return fatal_response(message, api)
        finally:
            runtime.abort(handle.id)
        raise AssertionError("a request's events always end with Finished or Fatal")

    def prompt_of(body: ChatBody | CompletionBody | ResponsesBody | MessagesBody) -> str | None:
        """The prompt text, or None when the body holds more than one prompt."""
        if isinstance(body, ChatBody):
            return render_chat([m.model_dump() for m in body.messages])
        if isinstance(body, CompletionBody):
            if isinstance(body.prompt, list):
                return body.prompt[0] if len(body.prompt) == 1 else None
            return body.prompt
        return body.prompt()

    async def generate(request: Request, api: str) -> Response:
        anthropic = api == "messages"
        try:
            body = _BODIES[api].model_validate(await _json_body(request))
        except _BadRequest as exc:
            return _error(400, str(exc), anthropic=anthropic)
        except ValidationError as exc:
            return _error(400, validation_message(exc), anthropic=anthropic)
        if body.model and body.model != config.model:
            return _error(404, f"The model `{body.model}` does not exist.", "model_not_found", anthropic=anthropic)
        if getattr(body, "n", 1) != 1:
            return _error(400, "The simulated engine supports only n = 1.")
        text = prompt_of(body)
        if text is None:
            return _error(400, "The simulated engine takes one prompt per request.")
        tokens = tokenize(text)
        max_tokens = body.requested_max_tokens()
        if max_tokens is None:
            max_tokens = max(1, config.max_model_len - len(tokens)) if api != "completions" else \
                COMPLETIONS_DEFAULT_MAX_TOKENS
        if max_tokens < 1:
            return _error(400, f"max_tokens must be at least 1, got {max_tokens}.", anthropic=anthropic)
        submitted = runtime.submit(tokens, max_tokens, body.ignore_eos)
        match submitted:
            case Rejection(status=status, message=message, code=code):
                return _error(status, message, code, anthropic=anthropic)
            case Fatal(message=message):
                return fatal_response(message, api)
        shape = _shape(api, submitted.id, config.model)
        if body.stream:
            include_usage = isinstance(body, (ChatBody, CompletionBody)) and body.include_usage
            return ClosingStream(stream(submitted, shape, include_usage, body.logprobs_wanted()))
        return await whole(submitted, shape, api)

    async def reset_prefix_cache(_: Request) -> Response:
        """vLLM's: forget the cached blocks nothing holds."""
        runtime.reset_prefix_cache()
        return Response(status_code=200)

    def route(api: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await generate(request, api)
        return endpoint

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
        Route("/reset_prefix_cache", reset_prefix_cache, methods=["POST"]),
        Route("/v1/chat/completions", route("chat"), methods=["POST"]),
        Route("/v1/completions", route("completions"), methods=["POST"]),
        Route("/v1/responses", route("responses"), methods=["POST"]),
        Route("/v1/messages", route("messages"), methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
