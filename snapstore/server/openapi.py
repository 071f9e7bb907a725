"""The OpenAPI document of the service, as committed in ``docs/openapi.json``.

``python -m snapstore.server.openapi docs/openapi.json`` writes it (stdout without an argument);
``tests/server/test_openapi.py`` fails when the committed file differs from what the app serves.
"""

from __future__ import annotations

import json
import sys

__all__ = ["document", "render", "main"]


def document() -> dict:
    """The OpenAPI document of an app built with default settings (it does not depend on them)."""
    from .app import create_app
    from ..stores.memory import MemoryStore
    from ..manager.facade import CheckpointManager

    return create_app(CheckpointManager(MemoryStore())).openapi()


def render(doc: dict) -> str:
    """The committed text form: indented JSON, keys in the app's order, trailing newline."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Write the document to the file named by the first argument, or to stdout."""
    argv = sys.argv[1:] if argv is None else argv
    text = render(document())
    if argv:
        with open(argv[0], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
