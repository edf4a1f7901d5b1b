"""What the conformance suite's scenarios ask every fixture for: the same data, one place.

Both fixtures (fixture_server.py, ordinary_server.py) and the ordinary provider of the integration
tests build their answers from these, so a scenario's expectation is written down once.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field

PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
"""A 1x1 PNG (made here, so no fixture ships a binary file)."""

NAME_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


class Sep1034Defaults(BaseModel):
    """SEP-1034: a default for every primitive type."""

    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active", description="User status", json_schema_extra={"enum": ["active", "inactive", "pending"]}
    )
    verified: bool = Field(default=True, description="Verification status")


def sampling_required(message: str) -> MCPError:
    """The -32021 a tool raises when its caller did not declare sampling (SEP-2575)."""
    needed = types.ClientCapabilities(sampling=types.SamplingCapability())
    data = types.MissingRequiredClientCapabilityErrorData(required_capabilities=needed)
    return MCPError(
        code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=message,
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )
