"""Request fields typed as JSON Schema types them, so that the published schema and the validation
agree: an integer is 3 or 3.0, never "3" or true; a number is never true. Request models set
`strict=True` (pydantic's lax mode would turn true into 1 and "3" into 3) and type their integers
with these.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# 3.0 is the integer 3 (JSON Schema's "integer"). In an Annotated with bounds, put the bounds first:
# `Annotated[int, Field(ge=1), INTEGRAL] | None` (after it, pydantic publishes them as "ge", not "minimum").
INTEGRAL = BeforeValidator(_integral)

# An integer field whose bounds come from `= Field(default, ge=..., le=...)` (not for `| None` fields).
WholeNumber = Annotated[int, INTEGRAL]
