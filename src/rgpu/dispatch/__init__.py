"""Opcode -> handler -> backend: the handlers (registered with `rgpu.dispatch.handlers.handles`) and the
dispatcher that decodes a request and runs its handler against a session."""
