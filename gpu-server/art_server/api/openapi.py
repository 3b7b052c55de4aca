"""The server's OpenAPI schema without starting it: `python -m art_server.api.openapi [FILE]`.

`npm run docs` writes it to docs/openapi.json; a test keeps that file equal to what the routes
say. A running server serves the same schema at /openapi.json when started with `--docs`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..core.config import ServerConfig
from .app import create_app


def openapi_schema() -> dict[str, Any]:
    return create_app(ServerConfig(docs=True)).openapi()


def openapi_json() -> str:
    """The schema as the file holds it: sorted keys, two-space indents, a final newline."""
    return json.dumps(openapi_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    text = openapi_json()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
