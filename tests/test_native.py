"""The native driver shim (libcuda.so.1): C codec and crypto against the golden vectors, and real programs
through it against a local rgpu-server on the fake backend. Each program runs in its own process (the shim
keeps one connection per process, configured from the environment)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import threading

import cffi
import pytest

from rgpu import shims
from rgpu.cli import local_server
from rgpu.protocol import ops
from rgpu.protocol.frames import Frame, frame_bytes, parse_frame
from rgpu.protocol.handshake import Hello

from .conftest import wait_for_stats_record

REPO = pathlib.Path(__file__).parents[1]
VECTORS = REPO / "tests" / "vectors"
PTX = REPO / "src" / "rgpu" / "kernels" / "demo.ptx"
TEST_KEY = bytes(range(32)).hex()


@pytest.fixture(scope="session")
def lib(shim_dir):
    ffi = cffi.FFI()
    ffi.cdef("""
        long rgpu_test_encode(uint16_t op, uint16_t flags, uint32_t rid, uint32_t status, uint32_t deferred,
                              const uint8_t *args, size_t args_len, const uint8_t *bulk, size_t bulk_len,
                              uint8_t *out, size_t cap);
        int rgpu_test_decode(const uint8_t *rec, size_t len, uint32_t fields[6], size_t *args_off,
                             size_t *args_len, size_t *bulk_off);
        int rgpu_test_hkdf(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt, size_t salt_len,
                           const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len);
        int rgpu_test_hmac(const uint8_t *key, size_t key_len, const uint8_t *data, size_t len, uint8_t out[32]);
        int rgpu_test_seal(int cipher, const uint8_t key[32], uint64_t counter, const uint8_t aad[4],
                           const uint8_t *in, size_t len, uint8_t *out);
        int rgpu_test_open(int cipher, const uint8_t key[32], uint64_t counter, const uint8_t aad[4],
                           const uint8_t *in, size_t len, uint8_t *out);
        size_t rgpu_test_image_size(const void *image);
        int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status);
        int cuMemAlloc_v2(uint64_t *p, size_t n);
        int cuLaunchKernel(void *f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           void *s, void **params, void **extra);
        int cuGetErrorName(int error, const char **name);
        int cuCtxSynchronize(void);
        int cuCtxSynchronize_v2(void *ctx);
        int cuStreamGetCaptureInfo_v2(void);
        int cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags);
    """)
    return ffi, ffi.dlopen(str(shim_dir / "libcuda.so.1"))


def test_c_codec_matches_every_golden_frame(lib):
    ffi, c = lib
    for v in json.loads((VECTORS / "frames.json").read_text()):
        args, bulk = bytes.fromhex(v["args_hex"]), bytes.fromhex(v["bulk_hex"])
        out = ffi.new("uint8_t[]", len(v["hex"]) // 2 + 64)
        n = c.rgpu_test_encode(v["opcode"], v["flags"], v["request_id"], v["status"], v["deferred_status"], args,
                               len(args), bulk, len(bulk), out, len(out))
        assert ffi.buffer(out, n)[:].hex() == v["hex"], v["name"]
        fields, ao, al, bo = ffi.new("uint32_t[6]"), ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t *")
        raw = bytes.fromhex(v["hex"])
        assert c.rgpu_test_decode(raw, len(raw), fields, ao, al, bo) == 0
        assert list(fields)[:5] == [v["opcode"], v["flags"], v["request_id"], v["status"], v["deferred_status"]]
        assert raw[ao[0] : ao[0] + al[0]] == args and raw[bo[0] :] == bulk
    bad = bytes.fromhex("14000000" "0100" "8000" + "00" * 16)  # unknown flag bit
    assert c.rgpu_test_decode(bad, len(bad), ffi.new("uint32_t[6]"), ao, al, bo) == -1


def test_c_crypto_matches_the_handshake_vectors(lib):
    ffi, c = lib
    hs = json.loads((VECTORS / "handshake.json").read_text())
    psk, th = bytes.fromhex(hs["psk_hex"]), bytes.fromhex(hs["transcript_hash_hex"])
    out = ffi.new("uint8_t[64]")
    for label, key in ((b"rgpu-v1 client proof", "client_proof_hex"), (b"rgpu-v1 server proof", "server_proof_hex")):
        assert c.rgpu_test_hmac(psk, 32, label + th, len(label) + 32, out) == 0
        assert ffi.buffer(out, 32)[:].hex() == hs[key]
    ch = parse_frame(bytes.fromhex(hs["client_hello_hex"])[4:])
    sh = parse_frame(bytes.fromhex(hs["server_hello_hex"])[4:])
    salt = Hello.from_frame(ch).nonce + Hello.from_frame(sh).nonce
    info = b"rgpu-v1 keys" + th
    assert c.rgpu_test_hkdf(psk, 32, salt, 64, info, len(info), out, 64) == 0
    assert ffi.buffer(out, 64)[:].hex() == hs["c2s_key_hex"] + hs["s2c_key_hex"]
    c2s = bytes.fromhex(hs["c2s_key_hex"])
    for cipher, records in (("AES_256_GCM", 1), ("CHACHA20_POLY1305", 2)):
        for counter, record_hex in enumerate(hs["client_records_nop_2_3"][cipher]):
            record = bytes.fromhex(record_hex)
            plain = frame_bytes(Frame(ops.NOP.code, 2 + counter))[4:]
            sealed = ffi.new("uint8_t[]", len(plain) + 16)
            assert c.rgpu_test_seal(records, c2s, counter, record[:4], plain, len(plain), sealed) == 0
            assert record[:4] + ffi.buffer(sealed)[:] == record, cipher
            opened = ffi.new("uint8_t[]", len(plain))
            assert c.rgpu_test_open(records, c2s, counter, record[:4], record[4:], len(record) - 4, opened) == 0
            tampered = bytearray(record[4:])
            tampered[3] ^= 1
            assert c.rgpu_test_open(records, c2s, counter, record[:4], bytes(tampered), len(tampered), opened) == -1


def test_get_proc_address_returns_shim_entry_points(lib):
    ffi, c = lib
    pfn, status = ffi.new("void **"), ffi.new("int *")
    assert c.cuGetProcAddress_v2(b"cuMemAlloc", pfn, 13000, 0, status) == 0 and status[0] == 0
    assert pfn[0] == ffi.cast("void *", c.cuMemAlloc_v2)
    assert c.cuGetProcAddress_v2(b"cuLaunchKernel", pfn, 13000, 2, status) == 0  # per-thread variant
    assert c.cuGetProcAddress_v2(b"cuNoSuchThing", pfn, 13000, 0, status) == 500 and pfn[0] == ffi.NULL
    assert status[0] == 1  # CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
    # A caller built for CUDA 12 gets the entry point of 12's signature, one built for 13 the 13.0 one.
    assert c.cuGetProcAddress_v2(b"cuCtxSynchronize", pfn, 12080, 0, status) == 0
    assert pfn[0] == ffi.cast("void *", c.cuCtxSynchronize)
    assert c.cuGetProcAddress_v2(b"cuCtxSynchronize", pfn, 13000, 0, status) == 0
    assert pfn[0] == ffi.cast("void *", c.cuCtxSynchronize_v2)
    assert c.cuGetProcAddress_v2(b"cuStreamGetCaptureInfo", pfn, 12000, 0, status) == 0
    assert pfn[0] == ffi.cast("void *", c.cuStreamGetCaptureInfo_v2)
    assert c.cuGetProcAddress_v2(b"cuGetProcAddress", pfn, 11080, 0, status) == 0
    assert pfn[0] == ffi.cast("void *", c.cuGetProcAddress)
    # Older than any entry point of the name: none (CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
    assert c.cuGetProcAddress_v2(b"cuGraphExecUpdate", pfn, 11080, 0, status) == 500 and status[0] == 2
    name = ffi.new("const char **")
    assert c.cuGetErrorName(801, name) == 0 and ffi.string(name[0]) == b"CUDA_ERROR_NOT_SUPPORTED"


def test_calls_before_cuinit_fail_cleanly(lib):
    ffi, c = lib
    assert c.cuMemAlloc_v2(ffi.new("uint64_t *"), 16) == 3  # CUDA_ERROR_NOT_INITIALIZED, no crash


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to make images")
def test_image_size_of_cubin_fatbin_and_ptx(lib, tmp_path):
    ffi, c = lib
    for kind, flags in (("cubin", ["-arch=sm_90"]), ("fatbin", ["-gencode", "arch=compute_75,code=compute_75",
                                                                 "-gencode", "arch=compute_90,code=sm_90"])):
        out = tmp_path / f"demo.{kind}"
        subprocess.run(["nvcc", f"--{kind}", *flags, "-o", str(out), str(REPO / "src/rgpu/kernels/demo.cu")], check=True)
        data = out.read_bytes()
        assert c.rgpu_test_image_size(data + b"\xcc" * 64) == len(data), kind
    text = PTX.read_bytes() + b"\0"
    assert c.rgpu_test_image_size(text) == len(text)


def run(shim_dir, prog, *args, env=None, timeout=60):
    e = shims.environment(shim_dir)
    e.update(env or {})
    return subprocess.run([str(shim_dir / prog), *map(str, args)], env=e, capture_output=True, text=True,
                          timeout=timeout)


def test_trace_ops_logs_every_request_decoded(shim_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("RGPU_TRACE_OPS", "1")
    log = tmp_path / "server.log"
    with local_server("fake", ["--log-level", "info", "--log-file", str(log)]) as address:
        vec = run(shim_dir, "vecadd", PTX, 1000, env={"RGPU_SERVER": address})
        assert vec.returncode == 0, vec.stderr
    text = log.read_text()
    assert "trace MEM_ALLOC" in text and "trace MODULE_LOAD" in text
    launch = next(line for line in text.splitlines() if "trace LAUNCH_KERNEL" in line)
    assert "grid_x=" in launch and "stream=" in launch and re.search(r"bulk=\d+ [0-9a-f]{16}", launch)


def test_rpc_smoke_and_vecadd_through_the_shim(shim_dir):
    with local_server("fake", ["--log-level", "warning"]) as address:
        smoke = run(shim_dir, "rpc_smoke", env={"RGPU_SERVER": address})
        assert smoke.returncode == 0, smoke.stderr
        assert "round trip of 3145728 bytes OK" in smoke.stdout and "rgpu fake GPU 0" in smoke.stdout
        assert "pipelined round trip of 9437189 bytes OK; overrunning copy: 1" in smoke.stdout
        for batch in ("1", "0"):
            # The unbatched run also never polls for replies (RGPU_SPIN_US=0): both ways of waiting are used.
            vec = run(shim_dir, "vecadd", PTX, 100_000, env={"RGPU_SERVER": address, "RGPU_BATCH": batch,
                                                              "RGPU_SPIN_US": "0" if batch == "0" else "50"})
            assert vec.returncode == 0, vec.stderr
            assert "vecadd n=100000" in vec.stdout and "OK (0 wrong)" in vec.stdout


def test_psk_through_the_shim(shim_dir, tmp_path):
    key, wrong = tmp_path / "key", tmp_path / "wrong"
    key.write_text(TEST_KEY)
    wrong.write_text(os.urandom(32).hex())
    key.chmod(0o600)
    wrong.chmod(0o600)
    with local_server("fake", ["--psk-file", str(key), "--log-level", "warning"]) as address:
        ok = run(shim_dir, "vecadd", PTX, 50_000, env={"RGPU_SERVER": address, "RGPU_PSK_FILE": str(key)})
        assert ok.returncode == 0 and "OK (0 wrong)" in ok.stdout, ok.stderr
        smoke = run(shim_dir, "rpc_smoke", env={"RGPU_SERVER": address, "RGPU_PSK_FILE": str(key)})
        assert smoke.returncode == 0 and "pipelined round trip of 9437189 bytes OK" in smoke.stdout, smoke.stderr
        bad = run(shim_dir, "rpc_smoke", env={"RGPU_SERVER": address, "RGPU_PSK_FILE": str(wrong)})
        assert bad.returncode == 2 and "authentication failed" in bad.stderr
        assert "cuInit(0) failed: CUDA_ERROR_NOT_INITIALIZED" in bad.stderr
        none = run(shim_dir, "rpc_smoke", env={"RGPU_SERVER": address})
        assert none.returncode == 2 and "requires a pre-shared key" in none.stderr


def test_server_gone_gives_no_device_quickly(shim_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    res = run(shim_dir, "rpc_smoke", env={"RGPU_SERVER": f"127.0.0.1:{port}"}, timeout=30)
    assert res.returncode == 2 and "CUDA_ERROR_NO_DEVICE" in res.stderr and "cannot reach rgpu-server" in res.stderr


def _fake_server(reply_for):
    """A one-connection TCP peer on 127.0.0.1 that answers the HELLO with reply_for(hello_frame) bytes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "little"):
            data += conn.recv(4096)
        reply = reply_for(parse_frame(data[4:]))
        try:
            if reply:
                conn.sendall(reply)
            conn.recv(1)
        except OSError:
            pass  # the client hung up first: that is the behaviour under test
        conn.close()
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}"


def test_version_mismatch_and_silent_or_garbage_servers_fail_cleanly(shim_dir):
    def newer(frame):
        return frame_bytes(Hello(major=2, max_frame=1 << 20).to_frame(reply_to=frame))

    res = run(shim_dir, "rpc_smoke", env={"RGPU_SERVER": _fake_server(newer)})
    assert res.returncode == 2 and "speaks protocol 2.x" in res.stderr and "NOT_INITIALIZED" in res.stderr
    res = run(shim_dir, "rpc_smoke", env={"RGPU_SERVER": _fake_server(lambda f: b"HTTP/1.1 400 Bad\r\n\r\n")})
    assert res.returncode == 2 and "NOT_INITIALIZED" in res.stderr


# A driver-API program in Python over the stand-in (argv: libcuda.so.1, demo PTX): it loads `fill`, allocates 1 KiB
# and has `params` ready to fill 4 floats; the tests add what they exercise.
DRIVE_PRELUDE = textwrap.dedent("""
    import cffi, sys
    ffi = cffi.FFI()
    ffi.cdef('''
        int cuInit(unsigned); int cuDeviceGet(int *, int); int cuDevicePrimaryCtxRetain(void **, int);
        int cuCtxSetCurrent(void *); int cuModuleLoadData(void **, const void *);
        int cuModuleGetFunction(void **, void *, const char *);
        int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           void *, void **, void **);
        int cuCtxSynchronize(void); int cuMemAlloc_v2(unsigned long long *, size_t);
        int cuMipmappedArrayDestroy(void *);
    ''')
    c = ffi.dlopen(sys.argv[1])
    dev, ctx, mod, fn = ffi.new("int *"), ffi.new("void **"), ffi.new("void **"), ffi.new("void **")
    assert c.cuInit(0) == 0 and c.cuDeviceGet(dev, 0) == 0
    assert c.cuDevicePrimaryCtxRetain(ctx, dev[0]) == 0 and c.cuCtxSetCurrent(ctx[0]) == 0
    assert c.cuModuleLoadData(mod, open(sys.argv[2], "rb").read() + b"\\0") == 0
    assert c.cuModuleGetFunction(fn, mod[0], b"fill") == 0
    p = ffi.new("unsigned long long *")
    assert c.cuMemAlloc_v2(p, 1024) == 0
    args = [ffi.new("unsigned long long *", p[0]), ffi.new("float *", 1.0), ffi.new("int *", 4)]
    params = ffi.new("void *[3]", [ffi.cast("void *", a) for a in args])
""")

def test_deferred_launch_error_surfaces_at_the_next_sync_and_unsupported_calls_log_once(shim_dir, tmp_path):
    script = tmp_path / "drive.py"
    script.write_text(DRIVE_PRELUDE + textwrap.dedent("""
        bogus_stream = ffi.cast("void *", 0x0400000000000099)
        launch = c.cuLaunchKernel(fn[0], 1, 1, 1, 4, 1, 1, 0, bogus_stream, params, ffi.NULL)
        sync = c.cuCtxSynchronize()
        again = c.cuCtxSynchronize()
        unsupported = [c.cuMipmappedArrayDestroy(ffi.NULL) for _ in range(3)]
        print(launch, sync, again, unsupported)
    """))
    with local_server("fake", ["--log-level", "warning"]) as address:
        for batch, expected in (("1", "0 400 0 [801, 801, 801]"), ("0", "400 0 0 [801, 801, 801]")):
            e = shims.environment(shim_dir)
            e.update(RGPU_SERVER=address, RGPU_BATCH=batch)
            res = subprocess.run([sys.executable, str(script), str(shim_dir / "libcuda.so.1"), str(PTX)], env=e,
                                 capture_output=True, text=True, timeout=60)
            assert res.returncode == 0, res.stderr
            assert res.stdout.strip() == expected, (batch, res.stdout, res.stderr)
            assert res.stderr.count("cuMipmappedArrayDestroy is not supported") == 1


def test_doctor_reports_the_shim(shim_dir):
    with local_server("fake", ["--log-level", "warning"]) as address:
        res = subprocess.run([sys.executable, "-m", "rgpu.cli", "doctor", "--shims", str(shim_dir), "--server",
                              address, "--", str(shim_dir / "rpc_smoke")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "libcuda.so.1" in res.stdout and "rgpu stand-in" in res.stdout and "needed by" in res.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to make images")
def test_default_compressed_fatbin_runs_on_the_fake_backend(shim_dir, tmp_path):
    """nvcc 13 zstd-compresses the PTX in fatbins by default; the fake backend must still run them."""
    fatbin = tmp_path / "demo.fatbin"
    subprocess.run(["nvcc", "--fatbin", "-gencode", "arch=compute_75,code=compute_75", "-o", str(fatbin),
                    str(REPO / "src/rgpu/kernels/demo.cu")], check=True)
    data = fatbin.read_bytes()
    assert b".entry" not in data  # really compressed
    with local_server("fake", ["--log-level", "warning"]) as address:
        res = run(shim_dir, "vecadd", fatbin, 100_000, env={"RGPU_SERVER": address})
    assert res.returncode == 0 and "OK (0 wrong)" in res.stdout, res.stderr


_SYNCS_SCRIPT = textwrap.dedent("""
    import cffi, sys
    ffi = cffi.FFI()
    ffi.cdef('''
        int cuInit(unsigned); int cuDeviceGet(int *, int); int cuDevicePrimaryCtxRetain(void **, int);
        int cuCtxSetCurrent(void *); int cuStreamSynchronize(void *); int cuMemAlloc_v2(unsigned long long *, size_t);
        int cuMemsetD8Async(unsigned long long, unsigned char, size_t, void *);
        int cuMemcpyHtoDAsync_v2(unsigned long long, const void *, size_t, void *);
        int cuMemcpyDtoH_v2(void *, unsigned long long, size_t);
        int cuStreamCreate(void **, unsigned); int cuStreamDestroy_v2(void *);
    ''')
    c = ffi.dlopen(sys.argv[1])
    dev, ctx, p = ffi.new("int *"), ffi.new("void **"), ffi.new("unsigned long long *")
    assert c.cuInit(0) == 0 and c.cuDeviceGet(dev, 0) == 0
    assert c.cuDevicePrimaryCtxRetain(ctx, dev[0]) == 0 and c.cuCtxSetCurrent(ctx[0]) == 0
    assert c.cuMemAlloc_v2(p, 4096) == 0
    results = [c.cuStreamSynchronize(ffi.NULL) for _ in range(5)]        # no work: deferred, then idle
    assert c.cuMemsetD8Async(p[0], 7, 4096, ffi.NULL) == 0
    results += [c.cuStreamSynchronize(ffi.NULL) for _ in range(3)]       # work: 1 round trip, then idle
    assert c.cuMemsetD8Async(p[0], 7, 1 << 20, ffi.NULL) == 0            # past the allocation: fails
    results += [c.cuStreamSynchronize(ffi.NULL) for _ in range(2)]       # the failure, then 1 more trip
    bogus = ffi.cast("void *", 0x0400000000000099)
    results += [c.cuStreamSynchronize(bogus) for _ in range(2)]          # not a stream of ours: both go
    # A deferred synchronize of another stream, then a read of what its copy wrote: the server keeps the order.
    s = ffi.new("void **")
    assert c.cuStreamCreate(s, 1) == 0
    data, back = bytes(range(256)) * 16, ffi.new("unsigned char[4096]")
    assert c.cuMemcpyHtoDAsync_v2(p[0], data, len(data), s[0]) == 0
    results.append(c.cuStreamSynchronize(s[0]))                          # only a copy in: deferred
    assert c.cuMemcpyDtoH_v2(back, p[0], 4096) == 0 and bytes(back) == data
    assert c.cuStreamDestroy_v2(s[0]) == 0
    results.append(c.cuStreamSynchronize(s[0]))                          # destroyed: it goes, and fails
    print(results)
""")


@pytest.mark.parametrize("mode", ["default", "exact"])
def test_stream_synchronize_waits_only_when_work_may_be_running(shim_dir, tmp_path, mode):
    # llama.cpp synchronizes its stream ~19 times per token: mostly with nothing queued in between (answered
    # by the shim, as NVIDIA's driver answers an idle stream at once), or after small input copies (sent
    # without waiting: the server keeps the order). After device work, on a stream the server did not make, or
    # with RGPU_SYNC=exact, the call waits for the server's answer; failures come back.
    script = tmp_path / "syncs.py"
    script.write_text(_SYNCS_SCRIPT)
    stats = tmp_path / "stats.jsonl"
    with local_server("fake", ["--log-level", "warning", "--stats-file", str(stats)]) as address:
        e = shims.environment(shim_dir)
        e.update(RGPU_SERVER=address)
        if mode == "exact":
            e.update(RGPU_SYNC="exact")
        res = subprocess.run([sys.executable, str(script), str(shim_dir / "libcuda.so.1")], env=e,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        wait_for_stats_record(stats, timeout=10)
    results = eval(res.stdout)  # noqa: S307 (our own script's list of ints)
    assert results[:8] == [0] * 8 and results[8] != 0 and results[9] == 0 and all(results[10:12])
    assert results[12] == 0 and results[13] != 0
    (record,) = [json.loads(line) for line in stats.read_text().splitlines()]
    waited = record["blocking_by_op"]["STREAM_SYNCHRONIZE"]
    assert waited == (1 + 1 + 2 + 2 + 1 + 1 if mode == "exact" else 0 + 1 + 2 + 2 + 0 + 1)


_HELD_SCRIPT = textwrap.dedent("""
    import cffi, sys
    ffi = cffi.FFI()
    ffi.cdef('''
        int cuInit(unsigned); int cuDeviceGet(int *, int); int cuDevicePrimaryCtxRetain(void **, int);
        int cuCtxSetCurrent(void *); int cuStreamSynchronize(void *); int cuMemAlloc_v2(unsigned long long *, size_t);
        int cuMemcpyHtoDAsync_v2(unsigned long long, const void *, size_t, void *);
        int cuMemcpyDtoH_v2(void *, unsigned long long, size_t);
        int cuStreamCreate(void **, unsigned); int cuEventCreate(void **, unsigned); int cuEventRecord(void *, void *);
        int cuCtxCreate_v2(void **, unsigned, int);
    ''')
    c = ffi.dlopen(sys.argv[1])
    dev, ctx, p = ffi.new("int *"), ffi.new("void **"), ffi.new("unsigned long long *")
    assert c.cuInit(0) == 0 and c.cuDeviceGet(dev, 0) == 0
    assert c.cuDevicePrimaryCtxRetain(ctx, dev[0]) == 0 and c.cuCtxSetCurrent(ctx[0]) == 0
    s1, s2, ev = ffi.new("void **"), ffi.new("void **"), ffi.new("void **")
    assert c.cuMemAlloc_v2(p, 4096) == 0 and c.cuStreamCreate(s1, 1) == 0 and c.cuStreamCreate(s2, 1) == 0
    assert c.cuEventCreate(ev, 0) == 0
    for i in range(6):  # llama.cpp's inputs: copy, synchronize
        assert c.cuMemcpyHtoDAsync_v2(p[0] + 16 * i, bytes([i + 1]) * 16, 16, s1[0]) == 0
        assert c.cuStreamSynchronize(s1[0]) == 0
    assert c.cuEventRecord(ev[0], s1[0]) == 0 and c.cuStreamSynchronize(s1[0]) == 0
    assert c.cuMemcpyHtoDAsync_v2(p[0] + 512, b"\\x09" * 16, 16, s2[0]) == 0  # another stream: s1's goes first
    assert c.cuStreamSynchronize(s2[0]) == 0
    back = ffi.new("unsigned char[4096]")
    assert c.cuMemcpyDtoH_v2(back, p[0], 4096) == 0                      # waits: s2's goes first
    assert bytes(back[0:96]) == b"".join(bytes([i + 1]) * 16 for i in range(6)) and bytes(back[512:528]) == b"\\x09" * 16
    # The NULL stream's are held too, up to a change of the context they run in.
    other, p2 = ffi.new("void **"), ffi.new("unsigned long long *")
    assert c.cuCtxCreate_v2(other, 0, dev[0]) == 0 and c.cuMemAlloc_v2(p2, 64) == 0
    assert c.cuCtxSetCurrent(ctx[0]) == 0
    for i in range(3):
        assert c.cuMemcpyHtoDAsync_v2(p[0] + 1024 + 16 * i, b"\\x05" * 16, 16, ffi.NULL) == 0
        assert c.cuStreamSynchronize(ffi.NULL) == 0
        assert c.cuStreamSynchronize(s2[0]) == 0  # nothing on s2 since its last: answered here, nothing sent
    assert c.cuCtxSetCurrent(other[0]) == 0
    assert c.cuMemcpyHtoDAsync_v2(p2[0], b"\\x06" * 16, 16, ffi.NULL) == 0  # another context: the held one first
    assert c.cuMemcpyDtoH_v2(back, p2[0], 16) == 0 and bytes(back[0:16]) == b"\\x06" * 16
""")


def test_deferred_synchronizes_are_held_until_a_request_may_not_pass_them(shim_dir, tmp_path, monkeypatch, capfd):
    # Copies and event records of the same stream pass a held synchronize, and a later one of that stream replaces
    # it; anything else (another stream's copy, a call that waits) sends it first, in its place in the order.
    script = tmp_path / "held.py"
    script.write_text(_HELD_SCRIPT)
    stats = tmp_path / "stats.jsonl"
    monkeypatch.setenv("RGPU_TRACE_OPS", "1")
    with local_server("fake", ["--log-level", "info", "--stats-file", str(stats)]) as address:
        e = shims.environment(shim_dir)
        e.update(RGPU_SERVER=address, RGPU_CLIENT_STATS="1")
        res = subprocess.run([sys.executable, str(script), str(shim_dir / "libcuda.so.1")], env=e,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        wait_for_stats_record(stats, timeout=10)
    (record,) = [json.loads(line) for line in stats.read_text().splitlines()]
    # The client's side, at exit: as many round trips as the server answered (the handshake's aside).
    waited = re.search(r"rgpu client stats: requests \d+, waited for (\d+), [\d.]+ s waiting", res.stderr)
    assert waited and int(waited.group(1)) >= record["blocking"], res.stderr
    assert record["calls_by_op"]["STREAM_SYNCHRONIZE"] == 3 and "STREAM_SYNCHRONIZE" not in record["blocking_by_op"]
    watched = ("MEMCPY_HTOD_ASYNC", "EVENT_RECORD", "STREAM_SYNCHRONIZE", "MEMCPY_DTOH", "CTX_SET_CURRENT")
    order = [word for line in capfd.readouterr().err.splitlines() if " trace " in line
             for word in [line.split(" trace ", 1)[1].split()[0]] if word in watched]
    order = order[order.index("MEMCPY_HTOD_ASYNC"):]  # (from the first copy on)
    assert order == ["MEMCPY_HTOD_ASYNC"] * 6 + ["EVENT_RECORD", "STREAM_SYNCHRONIZE", "MEMCPY_HTOD_ASYNC",
                                                 "STREAM_SYNCHRONIZE", "MEMCPY_DTOH", "CTX_SET_CURRENT"] + \
        ["MEMCPY_HTOD_ASYNC"] * 3 + ["STREAM_SYNCHRONIZE", "CTX_SET_CURRENT", "MEMCPY_HTOD_ASYNC", "MEMCPY_DTOH"]


def test_a_batch_goes_out_early_after_a_reply_and_grows(shim_dir, tmp_path):
    """After a reply the program waited for, the C client sends its queue at 8 calls, then 16, 32, ... (so the
    GPU starts while the program still enqueues); RGPU_BATCH_FIRST=256 is the old rule, one batch at 256."""
    script = tmp_path / "launches.py"
    script.write_text(DRIVE_PRELUDE + textwrap.dedent("""
        for _ in range(300):  # (after cuMemAlloc, a reply waited for: the ramp starts again)
            assert c.cuLaunchKernel(fn[0], 1, 1, 1, 4, 1, 1, 0, ffi.NULL, params, ffi.NULL) == 0
        assert c.cuCtxSynchronize() == 0
    """))
    frames = {}
    for first in ("8", "256"):
        stats = tmp_path / f"stats-{first}.jsonl"
        with local_server("fake", ["--log-level", "warning", "--stats-file", str(stats)]) as address:
            e = shims.environment(shim_dir)
            e.update(RGPU_SERVER=address, RGPU_BATCH_FIRST=first)
            res = subprocess.run([sys.executable, str(script), str(shim_dir / "libcuda.so.1"), str(PTX)], env=e,
                                 capture_output=True, text=True, timeout=60)
            assert res.returncode == 0, res.stderr
            wait_for_stats_record(stats, timeout=10)
        record = json.loads(stats.read_text().splitlines()[-1])
        assert record["calls_by_op"]["LAUNCH_KERNEL"] == 300
        frames[first] = record["frames"]
    # 300 launches: batches of 8, 16, 32, 64 and 128, the last 52 with the synchronize; against 256 and then 44
    assert frames["8"] - frames["256"] == 4, frames


_COPY_CHILD = """
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1])
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
n = 3 << 20
assert cu.cuMemAlloc_v2(ctypes.byref(ptr), n) == 0
data = bytes(range(256)) * (n // 256)
if sys.argv[2] == "async":
    assert cu.cuMemcpyHtoDAsync_v2(ptr, data, ctypes.c_size_t(n), None) == 0
else:
    assert cu.cuMemcpyHtoD_v2(ptr, data, ctypes.c_size_t(n)) == 0
back = ctypes.create_string_buffer(n)
assert cu.cuMemcpyDtoH_v2(back, ptr, ctypes.c_size_t(n)) == 0
assert back.raw == data
print("COPIED")
"""


@pytest.mark.parametrize("call", ["async", "sync"])
@pytest.mark.parametrize("records", ["plain", "sealed", "sealed_256k"])
def test_sealed_copies_go_in_records_the_servers_c_loop_opens(shim_dir, tmp_path, records, call):
    """With a PSK the stand-ins send a deferred host-to-device copy in 1 MiB records (the worker's C loop opens
    records up to its buffer whole; larger ones would be Python's): a 3 MiB copy is 3 of them, plain it is one;
    RGPU_SEALED_COPY_KIB=256 (a benchmark's knob) makes them 256 KiB, 12. A synchronous copy's chunks but the last
    go as asynchronous copies on the NULL stream, so that the server waits for the device once, after the last."""
    child, stats, key = tmp_path / "child.py", tmp_path / "stats.jsonl", tmp_path / "key"
    child.write_text(_COPY_CHILD)
    key.write_text(TEST_KEY)
    key.chmod(0o600)
    env = shims.environment(shim_dir)
    sealed = records != "plain"
    args = ["--stats-file", str(stats), "--log-level", "warning"] + (["--psk-file", str(key)] if sealed else [])
    with local_server("fake", args) as address:
        env.update(RGPU_SERVER=address, **({"RGPU_PSK_FILE": str(key)} if sealed else {}))
        if records == "sealed_256k":
            env["RGPU_SEALED_COPY_KIB"] = "256"
        res = subprocess.run([sys.executable, str(child), str(shim_dir / "libcuda.so.1"), call], env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and "COPIED" in res.stdout, res.stderr
        wait_for_stats_record(stats, 30)
    (record,) = [json.loads(line) for line in stats.read_text().splitlines()]
    chunks = {"plain": 1, "sealed": 3, "sealed_256k": 12}[records]
    expected = (chunks, 0) if call == "async" else (chunks - 1, 1)
    assert tuple(record["calls_by_op"].get(op, 0) for op in ("MEMCPY_HTOD_ASYNC", "MEMCPY_HTOD")) == expected, \
        record["calls_by_op"]
