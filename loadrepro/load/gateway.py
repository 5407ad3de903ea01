"""A gateway in front of the engine, recognised by what it serves without a model call: LiteLLM's proxy answers
GET /health/readiness with its `litellm_version`. Its /health is no health check of the gateway: it calls every
model behind it on each poll (seconds each, and load on the engine being measured), so a run polls its
/health/liveliness instead and says that the health it watches is the gateway's, not the engine's."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.load.transport import Transport, get_json

DEFAULT_HEALTH = "/health"


@dataclass(frozen=True, slots=True)
class Gateway:
    name: str
    evidence: str  # how it was recognised
    liveness_path: str  # its own health check, which sends nothing to the engine
    costly_health: str  # its health path that calls the models behind it

    def owns(self, health_path: str) -> str:
        """Words for a report: the health path is the gateway's, not the engine's."""
        return f"{health_path} belongs to the {self.name} gateway ({self.evidence}), not to the engine behind it"


async def find_gateway(http: Transport) -> Gateway | None:
    """The gateway at the target's URL, when it is one loadrepro knows; None for an engine (or anything else)."""
    readiness = await get_json(http, "/health/readiness")
    if isinstance(readiness, dict) and "litellm_version" in readiness:
        return Gateway("LiteLLM", f"GET /health/readiness says litellm_version {readiness['litellm_version']!r}",
                       "/health/liveliness", DEFAULT_HEALTH)
    return None


def health_path_for(gateway: Gateway | None, health_path: str) -> tuple[str, str | None]:
    """The health path to poll, and a note when it is not the profile's: a gateway's costly /health left at the
    default is replaced by its own liveness path."""
    if gateway is None or health_path != gateway.costly_health:
        return health_path, None
    return gateway.liveness_path, (
        f"health: the target is a {gateway.name} gateway ({gateway.evidence}); its {health_path} calls every model "
        f"behind it on each poll (seconds each, and load on the engine), so {gateway.liveness_path} is polled "
        "instead: it tells whether the gateway lives, not the engine behind it, whose death is judged from the "
        "requests that fail")
