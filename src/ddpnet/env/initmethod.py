"""Parsing the init methods the guides use: ``env://``, ``tcp://host:port``, ``file:///path``."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from ddpnet.address import REQUIRED_PORT, parse_address
from ddpnet.errors import ConfigError

_HINT = "use env://, tcp://HOST:PORT (IPv6 as tcp://[fd00::1]:23456) or file:///shared/dir/file"


@dataclass(frozen=True)
class InitMethod:
    scheme: str  # env | tcp | file
    host: str | None = None
    port: int | None = None
    path: str | None = None

    @property
    def url(self) -> str:
        if self.scheme == "tcp":
            host = f"[{self.host}]" if self.host and ":" in self.host else self.host
            return f"tcp://{host}:{self.port}"
        if self.scheme == "file":
            return f"file://{self.path}"
        return "env://"


def parse_init_method(url: str, source: str = "init_method") -> InitMethod:
    """Parse and check an init method URL; ConfigError with a hint when malformed."""
    text = url.strip()
    if text in ("env://", "env:"):
        return InitMethod("env")
    where = f"{source}={url!r}"
    scheme, sep, after = text.partition("://")
    if scheme == "tcp" and sep:
        netloc, slash, path = after.partition("/")
        netloc, query, tail = netloc.partition("?")
        return _tcp_method(netloc, slash + path + query + tail, where)
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise ConfigError(f"{where} is malformed ({exc})", _HINT) from None
    if parts.scheme == "file":
        return _file_method(parts, where)
    raise ConfigError(f"{where}: unknown scheme {parts.scheme!r}", _HINT)


def _tcp_method(netloc: str, rest: str, where: str) -> InitMethod:
    """``tcp://HOST:PORT`` through the one address parser (IPv6 in brackets, a link-local
    zone as ``%eth0`` or ``%25eth0``)."""
    if not netloc or netloc.startswith(":"):
        raise ConfigError(f"{where} has no host", _HINT)
    if rest not in ("", "/"):
        raise ConfigError(f"{where} has a path or query after the port", _HINT)
    try:
        addr = parse_address(netloc, "the host of", port=REQUIRED_PORT, url=True)
    except ConfigError as exc:
        if "has no port" in str(exc):
            raise ConfigError(f"{where} has no port", _HINT) from None
        raise ConfigError(f"{where}: {exc}", exc.hint) from None
    return InitMethod("tcp", host=addr.dial, port=addr.port)


def _file_method(parts: SplitResult, where: str) -> InitMethod:
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise ConfigError(
            f"{where} is not an absolute file URL",
            "use three slashes: file:///shared/dir/init_file",
        )
    if parts.path.endswith("/"):
        raise ConfigError(
            f"{where} names a directory, not a file",
            "name a file in a shared directory: file:///shared/dir/init_file",
        )
    return InitMethod("file", path=parts.path)
