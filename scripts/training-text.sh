#!/usr/bin/env bash
# Writes the English training text of the main job to OUT (default build/data/fortunes.txt): every
# collection of Debian's `fortunes` package (quotations, literature, proverbs; installed by
# scripts/install-deps.sh), with the '%' separators between entries turned into blank lines.
# About 1.9 MB. Any other UTF-8 text file works as `tpf train --data` too.
set -euo pipefail

out=${1:-build/data/fortunes.txt}
readonly src=/usr/share/games/fortunes
if [[ ! -d "$src" ]]; then
  echo "training-text.sh: $src not found; install the 'fortunes' package (scripts/install-deps.sh)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp"
: > "$tmp"
# The collections are the files without an extension (.dat are indexes, .u8 links); ascii-art
# is pictures, not prose.
for f in "$src"/*; do
  name=$(basename "$f")
  [[ -f "$f" && ! -L "$f" && "$name" != *.* && "$name" != ascii-art ]] || continue
  sed 's/^%$//' "$f" >> "$tmp"
done
mv "$tmp" "$out"
echo "training-text.sh: wrote $out ($(wc -c < "$out") bytes from $src)"
