"""The pass-key prompt of `strata eval needle`, in Python (standard library only).

src/eval/needle.cc builds the same prompts in C++; tests/engine/strata_tiny_test.cc checks that
the two agree token for token on a prompt this module wrote into the strata-tiny fixture, so the
figures of tools/tiny/train_tiny.py and of `strata eval needle` come from one definition. The format
(docs/strata-tiny.md):

    <prefix: encode("", add_special_tokens=True), i.e. BOS>
    <filler lines, each encoded as encode(line + "\\n")>     the first line cut from the front
    "The pass key is 48213. Remember it.\\n"                at the line boundary nearest depth
    <more filler lines>
    "What is the pass key? The pass key is "                the prompt ends here
    answer: "48213"                                         5 tokens, one per digit

The prompt and the answer together are exactly `context` tokens, so a context of 4096 fits a
model of 4096 positions. Everything random comes from SplitMix64
seeded by a pure function of (seed, context, depth, trial), so one prompt never depends on which
other prompts a run asks for: two configurations run on the same prompts compare pair by pair.
"""

import math

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15

NEEDLE = "The pass key is {key}. Remember it.\n"
QUESTION = "What is the pass key? The pass key is "


def fmix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def splitmix64(x):
    return fmix((x + GOLDEN) & MASK)


class Rng:
    """SplitMix64: next() = fmix(state += GOLDEN)."""

    def __init__(self, state):
        self.state = state & MASK

    def next(self):
        self.state = (self.state + GOLDEN) & MASK
        return fmix(self.state)


def depth_permille(depth):
    return int(math.floor(depth * 1000 + 0.5))  # C++: std::floor, the same rounding


def prompt_rng(seed, context, depth, trial):
    s = splitmix64(seed & MASK)
    s = splitmix64(s ^ context)
    s = splitmix64(s ^ depth_permille(depth))
    s = splitmix64(s ^ trial)
    return Rng(s)


class FillerUnits:
    """The filler text's non-blank lines (split on "\\n" only), each encoded as line + "\\n"."""

    def __init__(self, text, encode):
        lines = text.split("\n")
        self.units = [encode(line + "\n") for line in lines if line.strip(" \t\r")]
        if not self.units:
            raise ValueError("the filler text has no lines")


def build_prompt(units, encode, prefix, seed, context, depth, trial):
    """Returns dict(prompt=[ids], answer=[ids], key=str, needle_pos=int). `encode(text)` encodes
    without special tokens; `prefix` is encode("", add_special_tokens=True)."""
    rng = prompt_rng(seed, context, depth, trial)
    key = str(10000 + rng.next() % 90000)
    needle = encode(NEEDLE.format(key=key))
    question = encode(QUESTION)
    answer = encode(key)
    num_filler = context - len(prefix) - len(needle) - len(question) - len(answer)
    if num_filler < 0:
        raise ValueError(f"context {context} is too short for the needle, question and answer")
    # Whole lines from a random start (wrapping around) until there are enough, then the first
    # line is cut from the front, so the filler ends on a complete line.
    unit = rng.next() % len(units.units)
    filler, starts = [], []
    while len(filler) < num_filler:
        starts.append(len(filler))
        filler.extend(units.units[unit])
        unit = (unit + 1) % len(units.units)
    drop = len(filler) - num_filler
    filler = filler[drop:]
    boundaries = sorted({0, num_filler} | {s - drop for s in starts if s - drop > 0})
    target = depth * num_filler
    pos = min(boundaries, key=lambda b: (abs(b - target), b))
    return dict(prompt=list(prefix) + filler[:pos] + needle + filler[pos:] + question,
                answer=answer, key=key, needle_pos=len(prefix) + pos)
