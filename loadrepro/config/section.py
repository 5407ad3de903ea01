"""The base of every profile section: frozen once read, and strict (a key it does not know is an error naming it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
