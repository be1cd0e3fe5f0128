"""What a request frame asks of a session (the first half of loop.py's step; the fuzzer drives it too)."""

from __future__ import annotations

import enum

from rgpu.errors import ProtocolError
from rgpu.protocol import ops
from rgpu.protocol.frames import FLAG_REPLY, Frame


class Step(enum.Enum):
    CALL = "call"  # one operation; reply unless NO_REPLY
    BATCH = "batch"  # deferred operations, no reply; given as the frame's bulk (the dispatcher splits it)
    GOODBYE = "goodbye"  # free everything, reply, close


def classify(frame: Frame) -> tuple[Step, object]:
    """(step, what it runs on): a BATCH's bulk, [frame] for a CALL, nothing for GOODBYE."""
    if frame.flags & FLAG_REPLY:
        raise ProtocolError("client sent a reply frame")
    if frame.opcode == ops.BATCH.code:
        return Step.BATCH, memoryview(frame.bulk).cast("B")
    if frame.opcode == ops.GOODBYE.code:
        return Step.GOODBYE, []
    if frame.opcode in ops.CONTROL_OPS:
        raise ProtocolError(f"{ops.OPS[frame.opcode].name} is not a session request (a handshake's or a copy link's)")
    return Step.CALL, [frame]
