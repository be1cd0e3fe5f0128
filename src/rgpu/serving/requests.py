"""What a request frame asks of a session (the first half of loop.py's step; the fuzzer drives it too)."""

from __future__ import annotations

import enum

from rgpu.errors import ProtocolError
from rgpu.protocol import ops
from rgpu.protocol.frames import FLAG_REPLY, Frame, batch_records


class Step(enum.Enum):
    CALL = "call"  # one operation; reply unless NO_REPLY
    BATCH = "batch"  # deferred operations, no reply; given as their unparsed records
    GOODBYE = "goodbye"  # free everything, reply, close


def classify(frame: Frame, max_record: int) -> tuple[Step, list]:
    if frame.flags & FLAG_REPLY:
        raise ProtocolError("client sent a reply frame")
    if frame.opcode == ops.BATCH.code:
        return Step.BATCH, batch_records(frame.bulk, max_record)
    if frame.opcode == ops.GOODBYE.code:
        return Step.GOODBYE, []
    if frame.opcode in ops.CONTROL_OPS:
        raise ProtocolError(f"{ops.OPS[frame.opcode].name} is only valid during the handshake")
    return Step.CALL, [frame]
