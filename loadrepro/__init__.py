"""loadrepro: reproduce KV-cache capacity and admission failures of LLM inference servers.

    import loadrepro
    report = loadrepro.run("quickstart")              # the embedded simulated engine, stock policy
    assert not report.passed and report.findings[0].name == "engine_death"
    assert loadrepro.ab("quickstart").fix_confirmed   # stock fails, patched holds

`run`, `arun`, `ab`, `shrink_failure` and `load_profile` (loadrepro/api.py) import the engine-driving parts when
first used, so that importing loadrepro (and starting the command line) stays quick.
"""

from typing import TYPE_CHECKING, Any

from loadrepro.errors import (
    InternalError,
    LoadreproError,
    ProfileError,
    SimConfigError,
    TargetError,
    TargetUnreachable,
    UsageError,
)
from loadrepro.version import __version__

if TYPE_CHECKING:
    from loadrepro.api import ab, arun, load_profile, run, shrink_failure, sweep
    from loadrepro.compare.comparison import Comparison
    from loadrepro.config.profile import Profile
    from loadrepro.schema.run_report import RunReport

_LAZY = {"ab": "loadrepro.api", "arun": "loadrepro.api", "load_profile": "loadrepro.api", "run": "loadrepro.api",
         "shrink_failure": "loadrepro.api", "sweep": "loadrepro.api",
         "Comparison": "loadrepro.compare.comparison", "Profile": "loadrepro.config.profile",
         "RunReport": "loadrepro.schema.run_report"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'loadrepro' has no attribute {name!r}")


__all__ = ["Comparison", "InternalError", "LoadreproError", "Profile", "ProfileError", "RunReport", "SimConfigError",
           "TargetError", "TargetUnreachable", "UsageError", "__version__", "ab", "arun", "load_profile", "run",
           "shrink_failure", "sweep"]
