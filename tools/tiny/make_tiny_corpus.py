#!/usr/bin/env python3
"""Prepares the strata-tiny training corpus from two Debian packages (standard library only).

    python3 tools/tiny/make_tiny_corpus.py [--out .devcarry/tiny]

Sources: the King James Bible as the `bible` program of `bible-kjv` prints it, and the `fortunes`
/ `fortunes-min` collections under /usr/share/games/fortunes (the ASCII-art files left out).
scripts/install_deps.sh installs both. Writes, all UTF-8:

    train.txt           training text: Bible chapters (one verse per line, verse numbers dropped)
                        and fortunes, documents separated by one blank line
    valid.txt           every 40th training chapter and fortune, kept out of train.txt, to watch
                        over-fitting while training
    heldout_bible.txt   the held-out books (HELDOUT_BOOKS), same format: the bits-per-byte test set
    heldout_fortunes.txt  the held-out fortune file (HELDOUT_FORTUNES)
    needle_filler.txt   the held-out books' verses, one per line: the filler `strata eval needle`
                        builds its prompts from (shipped as models/strata-tiny/needle_filler.txt)
    manifest.json       sizes, the held-out lists, the package versions
"""

import argparse
import json
import os
import re
import subprocess

HELDOUT_BOOKS = ["Ruth", "Esther", "Lamentations", "Jonah", "Philemon", "1 John"]
HELDOUT_FORTUNES = ["literature"]
SKIPPED_FORTUNES = ["art", "ascii-art"]  # pictures, not text
FORTUNE_DIR = "/usr/share/games/fortunes"
VALID_EVERY = 40

HEADER = re.compile(r"^(\S.*) (\d+)$")
VERSE = re.compile(r"^ +(\d+) (.*)$")


def bible_chapters():
    """[(book, chapter, [verse, ...])] in canonical order."""
    out = subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         env=dict(os.environ, COLUMNS="200"))
    chapters, verses = [], None
    for line in out.stdout.decode("utf-8").splitlines():
        if not line.strip():
            continue
        m = HEADER.match(line)
        if m and not line.startswith(" "):
            verses = []
            chapters.append((m.group(1), int(m.group(2)), verses))
            continue
        m = VERSE.match(line)
        if m:
            verses.append(m.group(2).strip())
        elif verses:
            verses[-1] += " " + line.strip()  # a wrapped verse
        else:
            raise RuntimeError(f"unexpected line before the first chapter: {line!r}")
    if len(chapters) != 1189:
        raise RuntimeError(f"expected 1189 chapters from `bible`, got {len(chapters)}")
    return chapters


def fortunes(name):
    with open(os.path.join(FORTUNE_DIR, name), encoding="utf-8") as f:
        text = f.read()
    entries = []
    for entry in re.split(r"^%\n", text, flags=re.M):
        lines = [ln.rstrip() for ln in entry.strip("\n").split("\n")]
        lines = [ln for ln in lines if ln.strip()]  # one blank line is the document separator
        if lines:
            entries.append("\n".join(lines))
    return entries


def fortune_files():
    names = sorted(n for n in os.listdir(FORTUNE_DIR)
                   if "." not in n and os.path.isfile(os.path.join(FORTUNE_DIR, n)))
    return [n for n in names if n not in SKIPPED_FORTUNES]


def package_version(name):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True,
                             check=True)
        return out.stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write(path, docs):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(docs) + "\n")
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".devcarry/tiny")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    train, valid, held_bible, held_fortunes, filler = [], [], [], [], []
    books = {b for b, _, _ in bible_chapters()}
    missing = [b for b in HELDOUT_BOOKS if b not in books]
    if missing:
        raise RuntimeError(f"held-out books not found: {missing}")
    counter = 0
    for book, _, verses in bible_chapters():
        doc = "\n".join(verses)
        if book in HELDOUT_BOOKS:
            held_bible.append(doc)
            filler.extend(verses)
            continue
        counter += 1
        (valid if counter % VALID_EVERY == 0 else train).append(doc)
    names = fortune_files()
    for name in names:
        for entry in fortunes(name):
            if name in HELDOUT_FORTUNES:
                held_fortunes.append(entry)
                continue
            counter += 1
            (valid if counter % VALID_EVERY == 0 else train).append(entry)

    sizes = {
        "train.txt": write(os.path.join(args.out, "train.txt"), train),
        "valid.txt": write(os.path.join(args.out, "valid.txt"), valid),
        "heldout_bible.txt": write(os.path.join(args.out, "heldout_bible.txt"), held_bible),
        "heldout_fortunes.txt": write(os.path.join(args.out, "heldout_fortunes.txt"),
                                      held_fortunes),
    }
    with open(os.path.join(args.out, "needle_filler.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(filler) + "\n")
    manifest = {
        "sizes_bytes": sizes,
        "documents": {"train": len(train), "valid": len(valid), "heldout_bible": len(held_bible),
                      "heldout_fortunes": len(held_fortunes)},
        "heldout_books": HELDOUT_BOOKS,
        "heldout_fortunes": HELDOUT_FORTUNES,
        "fortune_files": [n for n in names if n not in HELDOUT_FORTUNES],
        "packages": {p: package_version(p) for p in ("bible-kjv", "fortunes", "fortunes-min")},
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(json.dumps(manifest["sizes_bytes"]))


if __name__ == "__main__":
    main()
