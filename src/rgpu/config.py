"""Client configuration read the same way by `rgpu.connect()`, the `rgpu` commands and (for what they pass
on to programs) the native stand-ins: RGPU_SERVER and RGPU_PSK_FILE, with one set of checks and messages."""

from __future__ import annotations

import logging
import os
import stat

from rgpu.errors import RgpuError
from rgpu.transport import DEFAULT_PORT

DEFAULT_SERVER = f"127.0.0.1:{DEFAULT_PORT}"
ADDRESS_FORMS = "host:port, host, or [ipv6]:port"

log = logging.getLogger("rgpu")
_warned_modes: set[str] = set()


class ConfigurationError(RgpuError, ValueError):
    """A setting the user gave (argument or environment) is unusable; the message says which and why."""


def server_address(address: str | None = None) -> str:
    """The server to use: `address` if given, else $RGPU_SERVER, else 127.0.0.1:9713."""
    return address or os.environ.get("RGPU_SERVER") or DEFAULT_SERVER


def server_addresses(address: str | None = None) -> list[str]:
    """The servers of `server_address(address)`: one, or several as "hostA:port,hostB:port" (one program using
    the devices of them all, numbered in that order)."""
    names = [a.strip() for a in server_address(address).split(",")]
    if not all(names):
        raise ConfigurationError(f"bad server list {server_address(address)!r}: expected {ADDRESS_FORMS}, "
                                 "comma-separated for several servers")
    return names


def psk_files(path: str | None, servers: int) -> list[str | None]:
    """One PSK file per server: `psk_file(path)` is one key for all of them, or a comma-separated file per
    server, in RGPU_SERVER's order."""
    chosen = psk_file(path)
    if chosen is None:
        return [None] * servers
    files = chosen.split(",")
    if len(files) == 1:
        return files * servers
    if len(files) != servers:
        raise ConfigurationError(f"{len(files)} PSK files for {servers} servers: give one key for all of them, "
                                 "or one file per server in the same order")
    return files


def psk_file(path: str | None = None) -> str | None:
    """The PSK file to use: `path` if given, else $RGPU_PSK_FILE, else none."""
    return path or os.environ.get("RGPU_PSK_FILE") or None


def parse_address(address: str) -> tuple[str, int]:
    """(host, port) of "host:port", "host" (port 9713) or "[ipv6]:port"; a clear error for anything else."""
    text = address.strip()
    if text.startswith("["):
        host, close, rest = text[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise ConfigurationError(f"bad server address {address!r}: expected {ADDRESS_FORMS}")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif text.count(":") == 0:
        host, port_text = text, None
    else:
        raise ConfigurationError(f"bad server address {address!r}: write an IPv6 address in brackets, "
                                 "such as [::1]:9713")
    if not host:
        raise ConfigurationError(f"bad server address {address!r}: no host (expected {ADDRESS_FORMS})")
    if port_text is None:
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ConfigurationError(f"bad server address {address!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


ALLOW_READABLE_PSK = "RGPU_ALLOW_READABLE_PSK"  # "1": use a PSK file others can read (as --allow-readable-psk)


def readable_psk_message(path: str, mode: int, *, refused: bool) -> str:
    """One message for a PSK file others may read, wherever it is read (the stand-ins print the same)."""
    what = (f"refusing it; run: chmod 600 {path} (to use it anyway: --allow-readable-psk or "
            f"{ALLOW_READABLE_PSK}=1)") if refused else f"used anyway, as asked; run: chmod 600 {path}"
    return (f"PSK file {path} can be read by other users (mode {stat.S_IMODE(mode):04o}), so anyone who reads it "
            f"can use the server or pose as it: {what}")


def readable_psk_allowed() -> bool:
    return os.environ.get(ALLOW_READABLE_PSK, "") not in ("", "0")


def load_psk(path: str, *, allow_readable: bool | None = None) -> bytes:
    """The key in a PSK file, with the file named in every error. A file that group or others may read (or
    write) is refused, as ssh refuses such a private key, unless `allow_readable` (default: $RGPU_ALLOW_
    READABLE_PSK) -- then it is used and warned about once."""
    from rgpu.protocol.handshake import load_psk_file

    try:
        mode = os.stat(path).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO) and not (readable_psk_allowed() if allow_readable is None
                                                         else allow_readable):
            raise ConfigurationError(readable_psk_message(path, mode, refused=True))
        key = load_psk_file(path)
    except FileNotFoundError:
        raise ConfigurationError(f"PSK file {path} does not exist (make one with `rgpu keygen {path}`)") from None
    except OSError as e:
        raise ConfigurationError(f"cannot read PSK file {path}: {e.strerror or e}") from None
    except ConfigurationError:
        raise
    except ValueError as e:
        raise ConfigurationError(f"PSK file {path}: {e}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO) and path not in _warned_modes:
        _warned_modes.add(path)
        log.warning("%s", readable_psk_message(path, mode, refused=False))
    return key
