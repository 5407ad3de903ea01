"""loadrepro: reproduce KV-cache capacity and admission failures of LLM inference servers."""

from importlib.metadata import PackageNotFoundError, version

from loadrepro.errors import LoadreproError, ProfileError, SimConfigError, TargetError, TargetUnreachable, UsageError

try:
    __version__ = version("loadrepro")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["LoadreproError", "ProfileError", "SimConfigError", "TargetError", "TargetUnreachable", "UsageError",
           "__version__"]
