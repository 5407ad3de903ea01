"""Profiles as files: a built-in one by name or a TOML file by path, read, overridden (`--set a.b=VALUE`, VALUE read
as TOML, or as a plain string when it is not valid TOML), validated strictly, and written back."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import ValidationError

from loadrepro.config.profile import Profile
from loadrepro.errors import ProfileError

# Shipped inside the package, so that an installed wheel has them; the project's top-level profiles/ links here.
PROFILES_DIR = Path(str(resources.files("loadrepro") / "profiles"))


def builtin_profiles() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PROFILES_DIR.glob("*.toml"))}


def _resolve(path_or_name: str) -> Path:
    """A name with a path separator or ending in .toml is a file; any other is a built-in profile, whatever the
    current folder holds (run folders are often named after their profile)."""
    path = Path(path_or_name)
    if path.suffix == ".toml" or "/" in path_or_name or (os.sep != "/" and os.sep in path_or_name):
        if not path.is_file():
            raise ProfileError(f"profile file not found: {path}")
        return path
    known = builtin_profiles()
    if path_or_name not in known:
        here = f" (a file of that name is here: give ./{path_or_name})" if path.is_file() else ""
        raise ProfileError(f"no built-in profile named {path_or_name!r}{here}; known: {', '.join(known) or 'none'}")
    return known[path_or_name]


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """`a.b=VALUE` -> (["a", "b"], value); VALUE is TOML (4, 0.5, true, "x", [1, 2]) or else a plain string."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise ProfileError(f"--set wants KEY=VALUE, got {assignment!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def _apply(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ProfileError(f"--set {'.'.join(path)}: {part} is not a section")
        node = child
    node[path[-1]] = value


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "profile"
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


def load_profile(path_or_name: str, overrides: list[str] | tuple[str, ...] = ()) -> Profile:
    """Read, override and validate a profile; ProfileError names every bad key."""
    path = _resolve(path_or_name)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"cannot read profile {path}: {exc}") from exc
    data.setdefault("name", path.stem)
    workload = data.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("trace"), str) and workload["trace"]:
        # A trace path written in a profile is relative to the profile's own folder; one given with --set is
        # relative to where the command runs.
        workload["trace"] = str((path.parent / workload["trace"]).resolve())
    for phase in data.get("phases") or ():
        # a [[phases]] profile given as a file is relative to this profile's folder, as a trace is
        given = phase.get("profile") if isinstance(phase, dict) else None
        if isinstance(given, str) and (given.endswith(".toml") or "/" in given):
            phase["profile"] = str((path.parent / given).resolve())
    return _overridden(data, overrides, str(path))


def with_overrides(profile: Profile, overrides: list[str] | tuple[str, ...]) -> Profile:
    """A loaded profile with `KEY=VALUE` overrides applied and checked as load_profile checks them."""
    return _overridden(profile.model_dump(mode="json", by_alias=True), overrides, profile.name)


def _overridden(data: dict[str, Any], overrides: Sequence[str], name: str) -> Profile:
    """`data` with `KEY=VALUE` overrides applied, as a checked Profile."""
    for assignment in overrides:
        _apply(data, *parse_override(assignment))
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"profile {name} is not valid:\n{_describe(exc)}") from exc


def write_profile(profile: Profile, path: Path) -> Path:
    """The resolved profile as TOML, loadable with load_profile (unset keys, which TOML cannot hold, left out)."""
    data = profile.model_dump(mode="json", by_alias=True)
    for section, values in data.items():
        if isinstance(values, dict):
            data[section] = {k: v for k, v in values.items() if v is not None}
    if not data["signatures"]:
        del data["signatures"]
    if not data["phases"]:
        del data["phases"]
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path
