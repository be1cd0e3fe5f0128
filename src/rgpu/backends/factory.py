"""Choosing a backend. Apart from base.py because it names both implementations: the base class must not
import its own subclasses."""

from __future__ import annotations

import logging
import os
import secrets

from rgpu.backends.base import Backend, BackendUnavailable
from rgpu.errors import CudaError

log = logging.getLogger("rgpu.backend")


# Which devices a server shows, set by rgpu-server's --devices / --fake-devices for itself and its workers.
DEVICES_ENV = "RGPU_DEVICES"  # "0,2": those devices only, renumbered from 0 as CUDA_VISIBLE_DEVICES does
FAKE_DEVICES_ENV = "RGPU_FAKE_DEVICES"  # how many devices the fake backend emulates (default 1)
FAKE_SLOT_ENV = "RGPU_FAKE_ADDRESS_SLOT"  # tests: the fake backend's address slot (default random)
FAKE_SLOTS = 1 << 12
SLOTS_BASE = 0x1000_0000_0000  # (the last slot ends below 0x5000_0000_0000)
MAX_FAKE_DEVICES = 64


def parse_devices(text: str) -> tuple[int, ...]:
    """'0,2' -> (0, 2); ValueError for anything but distinct non-negative ordinals."""
    try:
        devices = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--devices {text!r}: a comma-separated list of device ordinals, such as 0,2") from None
    if any(d < 0 for d in devices) or len(set(devices)) != len(devices):
        raise ValueError(f"--devices {text!r}: distinct device ordinals from 0, each at most once")
    return devices


def parse_fake_devices(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_FAKE_DEVICES:
        raise ValueError(f"--fake-devices {text!r}: a number of devices from 1 to {MAX_FAKE_DEVICES}")
    return count


def _selected() -> tuple[int, ...] | None:
    text = os.environ.get(DEVICES_ENV, "")
    return parse_devices(text) if text else None


def _restrict_cuda(devices: tuple[int, ...]) -> None:
    """Show the driver only `devices` (indices into what it shows now, so an operator's own
    CUDA_VISIBLE_DEVICES still applies first). Must run before the driver initialises in this process."""
    current = os.environ.get("CUDA_VISIBLE_DEVICES")
    if current is not None:
        listed = [d.strip() for d in current.split(",") if d.strip()]
        missing = [d for d in devices if d >= len(listed)]
        if missing:
            raise BackendUnavailable(f"--devices {','.join(map(str, devices))}: CUDA_VISIBLE_DEVICES={current} "
                                     f"shows {len(listed)} device(s)")
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(listed[d] for d in devices)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))


def _fake():
    from rgpu.backends.fake import FakeBackend

    # Addresses from a random one of 2**12 slots 16 GiB apart: a program using two fake servers at once sees
    # disjoint device addresses (as processes of a real driver do), which is how its client tells them apart. All
    # of them lie in a process's own half of the address space, below BASE_ADDRESS, as a real driver's do: managed
    # memory maps its device addresses in the program (native/src/managed.c).
    slot = os.environ.get(FAKE_SLOT_ENV, "")
    base = SLOTS_BASE + ((int(slot) % FAKE_SLOTS if slot.isdigit() else secrets.randbelow(FAKE_SLOTS)) << 34)
    try:
        return FakeBackend(device_count=parse_fake_devices(os.environ.get(FAKE_DEVICES_ENV, "1")),
                           visible=_selected(), base_address=base)
    except ValueError as e:
        raise BackendUnavailable(str(e)) from None


def make_backend(kind: str) -> Backend:
    """`cuda`, `fake`, or `auto` (cuda when a driver and a GPU answer, else fake with a loud warning). The
    devices shown are those of $RGPU_DEVICES (all by default); the fake one emulates $RGPU_FAKE_DEVICES."""
    if kind == "fake":
        return _fake()
    if kind in ("cuda", "auto"):
        try:
            from rgpu.backends.cuda import CudaBackend

            try:
                devices = _selected()
            except ValueError as e:
                raise BackendUnavailable(str(e)) from None
            if devices is not None:
                _restrict_cuda(devices)
            backend = CudaBackend()
            backend.init()
            if backend.device_count() == 0:
                raise BackendUnavailable("the driver reports no CUDA device")
            if devices is not None and backend.device_count() != len(devices):
                raise BackendUnavailable(f"--devices {','.join(map(str, devices))}: the driver shows "
                                         f"{backend.device_count()} of them")
            return backend
        except (BackendUnavailable, ImportError, CudaError) as e:
            if kind == "cuda":
                raise BackendUnavailable(f"cuda backend unavailable: {e}") from e

            log.warning("NO GPU: %s -- falling back to the FAKE backend (emulated memory and kernels; "
                        "nothing runs on a GPU)", e)
            return _fake()
    raise ValueError(f"unknown backend {kind!r} (cuda, fake, auto)")

