#!/bin/sh
# Serve the export in $EXPORT_DIR on 0.0.0.0:$PORT. Extra arguments go to `paddle_ft serve`
# (e.g. --max-batch-size 64). With arguments that start with something other than "-", runs them
# instead (e.g. `python -m paddle_ft train ...`).
set -eu
# `docker run --user $(id -u):$(id -g)` (to write files the host user owns) gives an arbitrary uid HOME=/, and
# PaddleNLP, pip and the caches write under ~: give such a uid a home of its own
if [ -z "${HOME:-}" ] || [ "$HOME" = "/" ] || [ ! -w "$HOME" ]; then
    HOME="${TMPDIR:-/tmp}/paddle_ft-home-$(id -u)"
    mkdir -p "$HOME"
    export HOME
fi
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$@"
fi
EXPORT_DIR="${EXPORT_DIR:-/export}"
if [ ! -d "$EXPORT_DIR" ]; then
    echo "error: no export folder at $EXPORT_DIR: mount one there (-v \$PWD/out/demo/export:/export:ro)" >&2
    exit 2
fi
exec python -m paddle_ft serve --export "$EXPORT_DIR" --host "${HOST:-0.0.0.0}" --port "${PORT:-8080}" \
    --device "${DEVICE:-cpu}" "$@"
