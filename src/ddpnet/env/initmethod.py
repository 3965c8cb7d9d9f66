"""Parsing the init methods the guides use: ``env://``, ``tcp://host:port``, ``file:///path``."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

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
    try:
        parts = urlsplit(text)
        port = parts.port if parts.scheme == "tcp" else None
    except ValueError as exc:
        raise ConfigError(f"{where} is malformed ({exc})", _HINT) from None
    if parts.scheme == "tcp":
        return _tcp_method(parts, port, where)
    if parts.scheme == "file":
        return _file_method(parts, where)
    raise ConfigError(f"{where}: unknown scheme {parts.scheme!r}", _HINT)


def _tcp_method(parts: SplitResult, port: int | None, where: str) -> InitMethod:
    if not parts.hostname:
        raise ConfigError(f"{where} has no host", _HINT)
    if port is None:
        raise ConfigError(f"{where} has no port", _HINT)
    if not 1 <= port <= 65535:
        raise ConfigError(f"{where}: port {port} is outside 1..65535", _HINT)
    if parts.path not in ("", "/") or parts.query:
        raise ConfigError(f"{where} has a path or query after the port", _HINT)
    return InitMethod("tcp", host=parts.hostname, port=port)


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
