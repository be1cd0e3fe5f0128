"""Write small llama-architecture GGUF models with random weights (fixed seed) and a valid SentencePiece-style
vocabulary, for comparing llama.cpp natively and through rgpu. Only numpy is needed (no gguf package).

    python3 bench/llama/make_gguf.py OUT_DIR [mid]   # writes tiny-f16.gguf, tiny-q8_0.gguf, tiny-q4_0.gguf,
                                                     # small-q8_0.gguf; with `mid` also mid-q4_0.gguf (0.5B)

The weights are meaningless, so the text is too; what matters is that greedy decoding is deterministic, so the
same program must print the same tokens natively and through rgpu.
"""

from __future__ import annotations

import pathlib
import struct
import sys

import numpy as np

ALIGN = 32
# GGUF value types and ggml tensor types used here.
T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8

SIZES = {
    "tiny": dict(n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=768),
    "small": dict(n_embd=1024, n_layer=8, n_head=16, n_head_kv=8, n_ff=2816),
    # Qwen2.5-0.5B's shape (its vocabulary size too, which sets the output layer's cost): the size of model the
    # peers quote llama.cpp decode speed for, where a token takes milliseconds, not a launch-bound 0.2 ms.
    "mid": dict(n_embd=896, n_layer=24, n_head=14, n_head_kv=2, n_ff=4864, n_vocab=151936),
}
WORDS = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "was", "on", "with", "as", "be", "at", "by",
         "this", "hello", "world", "model", "remote", "graphics", "card", "once", "upon", "time", "there", "were"]


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(v) -> tuple[int, bytes]:
    if isinstance(v, bool):
        return T_BOOL, struct.pack("<?", v)
    if isinstance(v, int):
        return T_U32, struct.pack("<I", v)
    if isinstance(v, float):
        return T_F32, struct.pack("<f", v)
    if isinstance(v, str):
        return T_STRING, _str(v)
    if isinstance(v, tuple):  # (element type, list)
        etype, items = v
        body = b"".join(_str(x) if etype == T_STRING else struct.pack({T_F32: "<f", T_I32: "<i"}[etype], x)
                        for x in items)
        return T_ARRAY, struct.pack("<IQ", etype, len(items)) + body
    raise TypeError(v)


def vocabulary(n_vocab: int):
    tokens, types = ["<unk>", "<s>", "</s>"], [2, 3, 3]
    tokens += [f"<0x{i:02X}>" for i in range(256)]
    types += [6] * 256
    pieces = ["\u2581"] + [chr(c) for c in range(33, 127)]
    for w in WORDS:
        word = "\u2581" + w
        pieces += [word[:i] for i in range(2, len(word) + 1)]
    seen = set(tokens)
    for p in pieces:
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(1)
    while len(tokens) < n_vocab:
        tokens.append(f"\u2581w{len(tokens)}")
        types.append(1)
    # Longer pieces score higher, so SentencePiece-style merging prefers whole words.
    scores = [0.0] * 259 + [float(len(t)) - 100.0 for t in tokens[259:]]
    return tokens[:n_vocab], scores[:n_vocab], types[:n_vocab]


def _f16_bits(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def quantize(w: np.ndarray, kind: int) -> bytes:
    """Rows of w (numpy row = ggml ne[0]) in ggml's block formats."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    if kind == GGML_Q8_0:
        amax = np.abs(blocks).max(axis=1)
        d = amax / 127.0
        inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0)
        q = np.clip(np.rint(blocks * inv[:, None]), -127, 127).astype(np.int8)
        out = np.empty(len(blocks), dtype=[("d", "<f2"), ("qs", "i1", 32)])
        out["d"], out["qs"] = d.astype(np.float16), q
        return out.tobytes()
    if kind == GGML_Q4_0:
        idx = np.abs(blocks).argmax(axis=1)
        mx = blocks[np.arange(len(blocks)), idx]
        d = mx / -8.0
        inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0)
        q = np.clip(np.floor(blocks * inv[:, None] + 8.5), 0, 15).astype(np.uint8)
        out = np.empty(len(blocks), dtype=[("d", "<f2"), ("qs", "u1", 16)])
        out["d"], out["qs"] = d.astype(np.float16), q[:, :16] | (q[:, 16:] << 4)
        return out.tobytes()
    raise ValueError(kind)


def write_model(path: pathlib.Path, size: str, wtype: int, *, seed: int = 1234) -> None:
    cfg = SIZES[size]
    n_vocab = cfg.get("n_vocab", 1024)
    e, L, H, HKV, F = cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["n_head_kv"], cfg["n_ff"]
    hd = e // H
    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary(n_vocab)
    kv = {
        "general.architecture": "llama", "general.name": f"rgpu-{size}", "general.alignment": ALIGN,
        "llama.context_length": 4096, "llama.embedding_length": e, "llama.block_count": L,
        "llama.feed_forward_length": F, "llama.attention.head_count": H, "llama.attention.head_count_kv": HKV,
        "llama.rope.dimension_count": hd, "llama.rope.freq_base": 10000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.vocab_size": n_vocab,
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": (T_STRING, tokens),
        "tokenizer.ggml.scores": (T_F32, scores), "tokenizer.ggml.token_type": (T_I32, types),
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
    }
    tensors = []  # (name, numpy shape (outer..inner), ggml type, bytes)

    def weight(name, shape, scale=0.05, quantizable=True):
        w = (rng.standard_normal(shape, dtype=np.float32) * scale)
        t = wtype if quantizable else GGML_F32
        if t == GGML_F16:
            data = _f16_bits(w).tobytes()
        elif t == GGML_F32:
            data = w.astype(np.float32).tobytes()
        else:
            data = quantize(w, t)
        tensors.append((name, shape, t, data))

    def norm(name):
        tensors.append((name, (e,), GGML_F32, (1.0 + 0.1 * rng.standard_normal(e, dtype=np.float32)).tobytes()))

    weight("token_embd.weight", (n_vocab, e), 1.0)
    for i in range(L):
        norm(f"blk.{i}.attn_norm.weight")
        weight(f"blk.{i}.attn_q.weight", (e, e))
        weight(f"blk.{i}.attn_k.weight", (HKV * hd, e))
        weight(f"blk.{i}.attn_v.weight", (HKV * hd, e))
        weight(f"blk.{i}.attn_output.weight", (e, e))
        norm(f"blk.{i}.ffn_norm.weight")
        weight(f"blk.{i}.ffn_gate.weight", (F, e))
        weight(f"blk.{i}.ffn_up.weight", (F, e))
        weight(f"blk.{i}.ffn_down.weight", (e, F))
    norm("output_norm.weight")
    weight("output.weight", (n_vocab, e), 0.2)

    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, value in kv.items():
        vtype, body = _value(value)
        out += _str(key) + struct.pack("<I", vtype) + body
    offset = 0
    for name, shape, t, data in tensors:
        dims = list(reversed(shape))
        out += _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", t, offset)
        offset += (len(data) + ALIGN - 1) // ALIGN * ALIGN
    out += b"\0" * (-len(out) % ALIGN)
    for _, _, _, data in tensors:
        out += data + b"\0" * (-len(data) % ALIGN)
    path.write_bytes(out)


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[1] if len(argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    models = [("tiny-f16", "tiny", GGML_F16), ("tiny-q8_0", "tiny", GGML_Q8_0), ("tiny-q4_0", "tiny", GGML_Q4_0),
              ("small-q8_0", "small", GGML_Q8_0)]
    if "mid" in argv[2:]:
        models.append(("mid-q4_0", "mid", GGML_Q4_0))
    for name, size, t in models:
        write_model(out / f"{name}.gguf", size, t)
        print(f"wrote {out / name}.gguf ({(out / f'{name}.gguf').stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
