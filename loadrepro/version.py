"""The installed loadrepro's version: read here, below every other module, so that what reports it (report.json's
environment) need not import the package's root, which imports the public API."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("loadrepro")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"
