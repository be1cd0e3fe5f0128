#!/usr/bin/env bash
# Build and run the libFuzzer targets for the C codec and the reply decoders (needs clang with libFuzzer, e.g. Debian's clang-14 +
# libclang-rt-14-dev). Seeds: the golden frames. Usage: native/tests/run_fuzz.sh [runs, default 1000000]
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${CC:-$(command -v clang || command -v clang-14)}
work=$(mktemp -d)
$CC -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Inative/src \
    native/tests/fuzz_codec.c native/src/wire.c -o "$work/fuzz_codec"
mkdir -p "$work/seeds"
python3 -c "
import json, pathlib
for i, v in enumerate(json.load(open('tests/vectors/frames.json'))):
    pathlib.Path('$work/seeds/%d' % i).write_bytes(bytes.fromhex(v['hex']))
"
"$work/fuzz_codec" -runs="${1:-1000000}" -max_len=4096 "$work/seeds" 2>&1 | tail -5
$CC -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Inative/src -Inative/gen \
    native/tests/fuzz_replies.c -o "$work/fuzz_replies"
"$work/fuzz_replies" -runs="${1:-1000000}" -max_len=8192 2>&1 | tail -5
