#!/usr/bin/env bash
# Prints an identity of the code a run used: a SHA-256 over native/ and src/'s C, header and Python sources, by
# path and content. Run scripts on the GPU box record it beside `git log -1`, because the box's copy of .git may
# be older than the tree it was given (its `git log` named a commit two behind the tree that ran); run this here,
# on a checkout, to see which tree a result came from.
cd "$(dirname "$0")/.." || exit 1
find native src -type f \( -name '*.c' -o -name '*.h' -o -name '*.py' -o -name '*.cu' \) -not -path '*/__pycache__/*' \
  | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
