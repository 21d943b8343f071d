#!/bin/sh
# Generate ./configure from a git checkout (releases ship it ready-made).
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
autoreconf --install --force --warnings=all
