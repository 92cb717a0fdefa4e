#!/bin/bash
# What a lent GPU machine needs beside the working tree, built here from a clean commit.
#
# The device machine has torch, lightning and pyarrow, but no package index and no hub, and takes
# at most 64 MiB a call (the run tool's `carry`). This writes two git-ignored folders to carry:
#   .whl/     the wheels it lacks, at the versions this checkout's .venv runs (transformers,
#             hydra-core, omegaconf, antlr4 (built here: PyPI has only its sdist), datasets, dill,
#             multiprocess, regex, gguf: scripts/device_weights.sh converts a GGUF there), for
#             the device's Python (PY_DEVICE, default 3.12);
#   .device/  tree.json (the manifest of the committed tree: records made on the device name this
#             commit, and the copy is checked against it), smollm2/ (SmolLM2-135M-Instruct's
#             config and tokenizer, for random weights in its shape: scripts/random_weights.py) and
#             shared/data/e2e (the E2E files the GPU training runs read).
# On the device (docs/BENCHMARKS.md, "The CUDA-graph path and the prepared GPU run"):
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD/src SKIPDECODE_TREE_MANIFEST=.device/tree.json
#   make bench-gpu PY=python3 STAMP=pyproject.toml ...
#
#   bash scripts/device_kit.sh            # PY=.venv/bin/python PY_DEVICE=3.12 SHARED=../shared
set -euo pipefail
PY=${PY:-.venv/bin/python}
PY_DEVICE=${PY_DEVICE:-3.12}
SHARED=${SHARED:-../shared}
MODEL=${MODEL:-.cache/models/smollm2-135m-instruct}

if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "device_kit: the checkout has uncommitted changes; commit them first, so that the" \
       "manifest names the code the device runs" >&2
  exit 2
fi
test -f "$MODEL/config.json" || { echo "device_kit: no $MODEL (run make smollm2)" >&2; exit 2; }
test -d "$SHARED/data/e2e" || { echo "device_kit: no $SHARED/data/e2e (set SHARED=...)" >&2; exit 2; }

pinned() {  # name==version as this checkout's environment runs it
  "$PY" -m pip list --format=freeze 2>/dev/null | grep -i "^$1==" || {
    echo "device_kit: $1 is not installed in $PY" >&2; exit 2; }
}
tag=${PY_DEVICE/./}
rm -rf .whl.tmp && mkdir -p .whl.tmp
"$PY" -m pip download -q --no-deps --dest .whl.tmp --python-version "$PY_DEVICE" \
  --implementation cp --abi "cp$tag" --platform manylinux2014_x86_64 --only-binary=:all: \
  "$(pinned transformers)" "$(pinned hydra-core)" "$(pinned omegaconf)" "$(pinned datasets)" \
  "$(pinned dill)" "$(pinned multiprocess)" "$(pinned regex)" "$(pinned gguf)"
"$PY" -m pip wheel -q --no-deps --wheel-dir .whl.tmp "$(pinned antlr4-python3-runtime)"

rm -rf .device.tmp && mkdir -p .device.tmp/smollm2 .device.tmp/shared/data
cp "$MODEL"/{config.json,generation_config.json,tokenizer.json,tokenizer_config.json} .device.tmp/smollm2/
cp "$MODEL"/{chat_template.jinja,gguf_metadata.json} .device.tmp/smollm2/ 2>/dev/null || true
cp -r "$SHARED/data/e2e" .device.tmp/shared/data/e2e
"$PY" -m skipdecode.manifest write .device.tmp/tree.json

# whole or not at all: the old folders are replaced only once both new ones are complete
rm -rf .whl .device && mv .whl.tmp .whl && mv .device.tmp .device
du -sh .whl .device
mib() { echo $(( ($(cat | tail -1 | cut -f1) + 1048575) / 1048576 )); }
# what a call copies: tracked and untracked-but-not-ignored files (as scripts/device_weights.sh)
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | mib)
whl=$(du -cb .whl .device/tree.json | mib)
rest=$(du -cb .device/smollm2 .device/shared | mib)
if [ $(( tree + whl + rest )) -le 63 ]; then
  echo "carry: .whl .device ($(( tree + whl + rest )) MiB with the tree's $tree MiB)"
elif [ $(( tree + whl )) -le 63 ] && [ $(( tree + rest )) -le 63 ]; then
  # a call carries at most 64 MiB: the rest of the kit in the next call (the machine keeps it)
  echo "carry: .whl .device/tree.json ($(( tree + whl )) MiB with the tree's $tree MiB)," \
       "then .device/smollm2 .device/shared in the next call ($(( tree + rest )) MiB): the tree," \
       ".whl and all of .device come to $(( tree + whl + rest )) MiB, over a call's 64"
else
  echo "device_kit: the tree ($tree MiB) leaves no call room for .whl and the manifest" \
       "($whl MiB) or for the rest of .device ($rest MiB); a call carries at most 64 MiB:" \
       "shrink the tree" >&2
  exit 2
fi
