#!/bin/sh
# Generate ./configure from a git checkout (releases ship it ready-made).
set -e
cd "$(dirname "$0")"
autoreconf --install --force --warnings=all
