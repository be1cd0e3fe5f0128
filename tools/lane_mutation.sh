#!/usr/bin/env bash
# A mutation check of the C lane: replace one exact text in one file (it must occur once), rebuild the lane, run the
# tests, put the file back and rebuild again. Prints how many tests failed: a change the tests do not notice is a
# gap in them.
#   bash tools/lane_mutation.sh FILE OLD NEW [PYTEST ARGS...]     (default: tests/test_native_loop.py)
# e.g. bash tools/lane_mutation.sh native/src/lane/ring.c $'    if (!by)\n        return 0;' $'    if (1)\n        return 0;'
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n 2,6p "$0"; exit 2; }
file=$1 old=$2 new=$3; shift 3
kept=$(mktemp)
cp "$file" "$kept"
restore() { cp "$kept" "$file"; rm -f "$kept"; python3 -c "from rgpu import shims; shims.build_lane()" > /dev/null; }
trap restore EXIT
python3 - "$file" "$old" "$new" <<'PY' || exit 2
import pathlib, sys
path, old, new = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
text = path.read_text()
if text.count(old) != 1:
    sys.exit(f"{path}: the text to replace occurs {text.count(old)} times, not once")
path.write_text(text.replace(old, new))
PY
python3 -c "from rgpu import shims; shims.build_lane()" > /dev/null || { echo "the mutated lane does not build"; exit 1; }
python3 -m pytest -q -p no:randomly "${@:-tests/test_native_loop.py}" 2>&1 | grep -E "^FAILED|passed|failed" | sed 's/ - .*//'
