#!/usr/bin/env bash
# tools/tiny/make_tiny_corpus.py rebuilds strata-tiny's text from the Debian packages exactly: the
# needle filler it writes equals the one models/strata-tiny ships, and the held-out books are
# nowhere in the training text.
# Usage: tiny_corpus_test.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$src/tools/tiny/make_tiny_corpus.py" --out "$tmp" >/dev/null
cmp "$tmp/needle_filler.txt" "$src/models/strata-tiny/needle_filler.txt"
# A verse of each held-out book must not occur in train.txt.
for verse in "for whither thou goest, I will go" "Now it came to pass in the days of Ahasuerus" \
             "Now the word of the LORD came unto Jonah the son of Amittai"; do
  grep -q "$verse" "$tmp/heldout_bible.txt"
  if grep -q "$verse" "$tmp/train.txt"; then echo "FAIL: held-out '$verse' is in train.txt"; exit 1; fi
done
echo "tiny_corpus_test: 1 passed, 0 failed"
