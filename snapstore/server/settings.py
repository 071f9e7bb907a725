"""The service's settings and the rules for its bearer token.

The token comes from ``$SNAPSTORE_TOKEN`` or a token file (first line, surrounding whitespace
removed). Serving without a token is allowed only on a loopback address and only when asked
for (``--no-auth``).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field

from ..errors import InvalidInputError

__all__ = ["ServerSettings", "is_loopback", "resolve_token", "TOKEN_ENV", "DEFAULT_MAX_BODY_BYTES"]

TOKEN_ENV = "SNAPSTORE_TOKEN"
DEFAULT_MAX_BODY_BYTES = 64 << 20
"""Default request body limit: 64 MiB (a checkpoint's whole message list travels in one body)."""

MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class ServerSettings:
    """How the service behaves.

    Attributes:
        token: the bearer token every API request must carry (None: no authentication; only
            for a loopback server started with ``--no-auth``).
        max_body_bytes: request bodies larger than this get 413 (bytes).
        cors_origins: origins allowed to call the API from a browser (empty: CORS off).
    """

    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    cors_origins: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if not isinstance(self.max_body_bytes, int) or self.max_body_bytes < 1:
            raise InvalidInputError(f"max_body_bytes must be a positive integer, got {self.max_body_bytes!r}")
        if self.token is not None:
            _check_token(self.token, "the token")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_token(token: str, where: str) -> str:
    if len(token) < MIN_TOKEN_CHARS or not token.isascii() or not token.isprintable() or " " in token:
        raise InvalidInputError(f"{where} must be at least {MIN_TOKEN_CHARS} printable ASCII characters "
                                "without spaces")
    return token


def resolve_token(host: str, *, no_auth: bool = False, token_file: str | None = None,
                  environ: dict | None = None) -> str | None:
    """The token the server requires, or None (no authentication).

    Args:
        host: the address the server binds to.
        no_auth: serve without a token (only allowed on loopback).
        token_file: read the token from this file (else ``$SNAPSTORE_TOKEN``).
        environ: the environment (default ``os.environ``).
    Raises:
        InvalidInputError: no token and no ``no_auth``; ``no_auth`` on a non-loopback host;
            ``no_auth`` together with a token file; an empty, short or unreadable token.
    """
    env = os.environ if environ is None else environ
    if no_auth:
        if token_file is not None:
            raise InvalidInputError("--no-auth and --token-file contradict each other")
        if not is_loopback(host):
            raise InvalidInputError(f"--no-auth is only allowed on a loopback address, not {host!r} "
                                    f"(set ${TOKEN_ENV} or --token-file)")
        return None
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.readline(4096).strip()
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidInputError(f"cannot read token file {token_file}: {e}") from None
        return _check_token(token, f"the token in {token_file}")
    token = env.get(TOKEN_ENV, "").strip()
    if not token:
        raise InvalidInputError(f"a bearer token is required: set ${TOKEN_ENV} or pass --token-file "
                                "(or --no-auth on a loopback address)")
    return _check_token(token, f"${TOKEN_ENV}")
