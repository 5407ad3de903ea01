"""How what a target did becomes a request's outcome: an exception of the transport or of parsing, a status that is
not 200, an error object inside a stream. The one place each is decided."""

from __future__ import annotations

import json
from collections.abc import Mapping

import aiohttp

from loadrepro.judge.signatures import CATALOG, Signature, SignatureClass, match
from loadrepro.load.streams import ProtocolViolation
from loadrepro.records import Outcome

# Everything a target or the network can make the client raise: transport errors, timeouts, and text that is not
# JSON (orjson's decode error is json's). A TypeError, KeyError or other ValueError is a bug in loadrepro itself,
# not the target's protocol error.
TARGET_FAULTS = (aiohttp.ClientError, OSError, TimeoutError, ProtocolViolation, json.JSONDecodeError,
                  UnicodeDecodeError)



def outcome_for_exception(exc: BaseException, got_response: bool) -> tuple[Outcome, str]:
    """The one place a transport or parsing exception becomes an outcome; most specific first."""
    described = f"{type(exc).__name__}: {exc}"
    match exc:
        case aiohttp.ClientConnectorError() | aiohttp.ConnectionTimeoutError():
            return Outcome.UNREACHABLE, described
        case aiohttp.ServerTimeoutError():
            return Outcome.STALLED, "no byte from the target within the stall timeout"
        case aiohttp.ServerDisconnectedError() | aiohttp.ClientPayloadError() | aiohttp.ClientOSError() | \
                ConnectionResetError():
            return Outcome.TRUNCATED, f"connection closed by the target: {described}"
        case ProtocolViolation() | aiohttp.ClientResponseError() | json.JSONDecodeError() | UnicodeDecodeError():
            return Outcome.PROTOCOL_ERROR, described
        case TimeoutError():
            return Outcome.TIMEOUT, "the request exceeded request_timeout_s"
        case aiohttp.ClientError() | OSError():
            return (Outcome.TRUNCATED if got_response else Outcome.UNREACHABLE), described
    return Outcome.PROTOCOL_ERROR, f"unexpected response: {described}"


def outcome_for_status(status: int, text: str, retry_after: bool,
                       signatures: tuple[Signature, ...] = CATALOG) -> Outcome:
    """A non-200 answer: the text decides, since TensorRT-LLM reports engine failures as 400."""
    if status == 429 or (status == 503 and retry_after):
        return Outcome.THROTTLED
    if 400 <= status < 500:
        signature = match(text, signatures)
        return Outcome.SERVER_ERROR if signature and signature.klass is SignatureClass.FATAL else Outcome.REJECTED
    if status >= 500:
        return Outcome.SERVER_ERROR
    return Outcome.PROTOCOL_ERROR


def retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return 1.0  # an HTTP date: wait a little rather than parse it


def outcome_for_stream_error(text: str, code: int | None, signatures: tuple[Signature, ...] = CATALOG) -> Outcome:
    """An error object inside a 200 stream: a 503 or temporary-pressure text is a refusal to retry (vLLM's
    --max-num-queued-reqs answers surplus streams so), anything else a stream error."""
    signature = match(text, signatures)
    if code in (429, 503, 529) or (signature is not None and signature.throttling):
        return Outcome.THROTTLED
    return Outcome.STREAM_ERROR
