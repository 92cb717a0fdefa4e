#!/bin/bash
# Pretrained weights for a lent GPU machine, in parts that fit its transfers.
#
# A device call carries at most 64 MiB, the tree it copies included, so SmolLM2's GGUF (98.4 MB,
# the smallest exact source of its weights) goes in parts over consecutive calls on the warm
# machine, which keeps what earlier calls carried. Here:
#
#   bash scripts/device_weights.sh pack [smollm2|gemma3]     # PART_MIB: see below
#
# writes the git-ignored folder .gguf/<asset>/: part-00, part-01, ... (each at most PART_MIB MiB;
# by default what a call has room for beside the tree it copies: 64 MiB less the tracked and
# untracked-but-not-ignored files, less 1 MiB, so the parts shrink as results/ grows)
# and SHA256 (the whole file's digest and its name). The kit (.whl/, .device/) rides first, in
# the calls of its own scripts/device_kit.sh names (the warm machine keeps what ignored paths
# carried), then each call
# names one part in `carry` (`.gguf/smollm2/part-00`, then each next part, the last with
# SHA256), so no call carries more than the tree and one part. On the device, after the last:
#
#   bash scripts/device_weights.sh unpack smollm2            # PY=python3 (default there)
#
# joins the parts, refuses a digest that differs (naming the part count it found), and converts
# the GGUF where the framework looks for it (.cache/models/<asset>/, scripts/prepare_model.py
# --gguf), so `model=smollm2-135m` runs offline there as here. Both halves run on a CPU too (the
# dry run: `PY=.venv/bin/python OUT_DIR=<scratch> bash scripts/device_weights.sh unpack smollm2`
# converts into <scratch>; tests/test_device_weights.py does it and compares the weights).
set -euo pipefail
mode=${1:?usage: device_weights.sh pack|unpack [smollm2|gemma3]}
root=$(git rev-parse --show-toplevel 2>/dev/null || true)  # empty outside a git checkout
if [ -n "$root" ]; then cd "$root"; fi  # .gguf/ at the root
asset=${2:-smollm2}
PY=${PY:-python3}
dir=.gguf/$asset

case "$asset" in smollm2|gemma3) ;; *)
  echo "device_weights: asset '$asset'; allowed: smollm2, gemma3" >&2; exit 2 ;;
esac

if [ "$mode" = pack ]; then
  PY=${PY_HERE:-.venv/bin/python}
  if [ -z "${PART_MIB:-}" ]; then  # the room a call leaves beside the tree (the kit rides alone)
    if [ -n "$root" ]; then
      # du leaves out (and complains of) tracked files deleted from the checkout
      tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1 || true)
      PART_MIB=$(( (64 * 1048576 - ${tree:-0}) / 1048576 - 1 ))
      echo "device_weights: a call copies $(( ${tree:-0} / 1048576 )) MiB of tree; parts of" \
           "$PART_MIB MiB (the kit, .whl/ and .device/, in a call of its own before them)"
    else
      PART_MIB=29
      echo "device_weights: not a git checkout; parts of $PART_MIB MiB (set PART_MIB to choose)"
    fi
  fi
  if ! [[ "$PART_MIB" =~ ^[0-9]{1,3}$ ]] || [ "$PART_MIB" -lt 4 ] || [ "$PART_MIB" -gt 63 ]; then
    echo "device_weights: PART_MIB=$PART_MIB; allowed: a whole number of MiB from 4 to 63 (where" \
         "the tree leaves a call less room, shrink the tree)" >&2
    exit 2
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  gguf=$("$PY" - "$asset" "$work" <<'EOF'
import sys
from pathlib import Path
from skipdecode.models.assets import ASSETS
print(ASSETS[sys.argv[1]].fetch(Path(sys.argv[2])))
EOF
)
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  split -b "${PART_MIB}M" -d -a 2 "$gguf" "$dir.tmp/part-"
  (cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") > "$dir.tmp/SHA256"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"  # whole or not at all
  ls -l "$dir"
  echo "carry, one call each: $(cd "$dir" && ls part-* | sed "s|^|$dir/|" | tr '\n' ' ')(+ $dir/SHA256 with the last)"
elif [ "$mode" = unpack ]; then
  test -f "$dir/SHA256" || { echo "device_weights: no $dir/SHA256 (carry it with the last part)" >&2; exit 2; }
  read -r digest name < "$dir/SHA256"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cat "$dir"/part-* > "$work/$name"
  got=$(sha256sum "$work/$name" | cut -d' ' -f1)
  if [ "$got" != "$digest" ]; then
    echo "device_weights: the $(ls "$dir"/part-* | wc -l) parts in $dir join to a file whose sha256" \
         "differs from SHA256's; a part is missing or cut (carry each once, in order)" >&2
    exit 2
  fi
  out=${OUT_DIR:-}
  "$PY" scripts/prepare_model.py "$asset" --gguf "$work/$name" --no-check ${out:+--out "$out"}
else
  echo "device_weights: mode '$mode'; allowed: pack, unpack" >&2; exit 2
fi
