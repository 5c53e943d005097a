"""Pieces the shapes share: timestamps, enums the domain has as plain values."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from service.domain.reasons import RUN_HISTORY, TIME_LIMITS, UNKNOWN
from service.domain.workloads import WORKLOAD_NAMES
from service.jobspec.model import TRAINER_DEVICES

Timestamp = Annotated[str | None, Field(json_schema_extra={"format": "date-time"},
                                        description="ISO 8601 UTC timestamp")]


def at(description: str) -> object:
    """A timestamp with its own description."""
    return Annotated[str | None, Field(json_schema_extra={"format": "date-time"},
                                       description=description)]


Workload = enum.StrEnum("Workload", {n.upper(): n for n in WORKLOAD_NAMES})
TrainerDevice = enum.StrEnum("TrainerDevice", {d.upper(): d for d in TRAINER_DEVICES})
EstimateBasis = enum.StrEnum("EstimateBasis", {v.upper(): v for v in (TIME_LIMITS, RUN_HISTORY,
                                                                      UNKNOWN)})
TokenState = enum.StrEnum("TokenState", {v.upper(): v for v in ("active", "revoked",
                                                                 "expired")})


class Answer(BaseModel):
    """An answer's shape (the service builds it as JSON; the document states it)."""

    model_config = ConfigDict(populate_by_name=True)


class Request(BaseModel):
    """A request body's shape: no field beyond the declared ones."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
