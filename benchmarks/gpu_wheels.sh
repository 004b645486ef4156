#!/usr/bin/env bash
# Fetches, once, on a machine that reaches the package registry, the wheels benchmarks/gpu_check.sh installs on
# a GPU machine that has torch, lightning and pytest but nothing else: the CLI's jsonargparse with what its
# signatures need. All pure Python (any Python 3 on the GPU machine takes them); PyYAML and typing-extensions
# come with lightning and torch there. Into $1 (default ./.whl, git-ignored); carry that folder along.
#
#   bash benchmarks/gpu_wheels.sh [folder]
set -eu
cd "$(dirname "$0")/.."
DEST=${1:-$PWD/.whl}
PY=${PYTHON:-python}
mkdir -p "$DEST"
$PY -m pip download --no-deps --only-binary=:all: -d "$DEST" \
    "jsonargparse[signatures]==4.53.0" "docstring-parser==0.18.0" "typeshed-client==2.15.0"
ls -l "$DEST"
