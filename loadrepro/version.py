"""loadrepro's version: defined here, below every other module (pyproject.toml reads it from here), so that what
reports it (report.json's environment) need not import the package's root, which imports the public API. Not read
from the installed package's metadata: looking that up cost every command 35 ms before its first step."""

__version__ = "0.1.0"
