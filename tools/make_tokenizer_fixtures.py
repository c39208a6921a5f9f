#!/usr/bin/env python3
"""Expected token ids for Strata's tokenizer tests, computed by Hugging Face `tokenizers`.

Run where `tokenizers` (and optionally `transformers`) are installed; no network is needed:

    python3 tools/make_tokenizer_fixtures.py --tokenizers tests/data/tokenizers --out fixtures.tar.gz

For every tokenizer folder (tokenizer.json + tokenizer_config.json) and every text of a fixed,
deterministically generated list it records:
  ids          Tokenizer.encode(text, add_special_tokens=False)
  ids_post     Tokenizer.encode(text, add_special_tokens=True)  (tokenizer.json's post-processor)
  ids_hf       transformers AutoTokenizer(text)["input_ids"]      (adds add_bos_token/add_eos_token)
  decoded      Tokenizer.decode(ids, skip_special_tokens=False)
  decoded_skip Tokenizer.decode(ids_hf, skip_special_tokens=True)
The texts go to texts.json once; each tokenizer gets <name>.json. Both are packed into one tar.gz.
`--texts-only` writes texts.json alone (to inspect the list without tokenizers installed).
"""

import argparse
import io
import json
import os
import random
import sys
import tarfile

FRAGMENTS = [
    "Hello world", "hello", " world", "HELLO WORLD!!!", "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see it's what they've done; he'd say we're right.", "DON'T YOU'LL I'M 'S 'T 'Re",
    "def foo(x):\n\treturn x * 2\n", "if (a &&  b) {\n        return c;\n    }", "\t\t\tindent",
    "int main() {\r\n  return 0;\r\n}\r\n", "x = [1, 2, 3]  # comment", "    ", "                 ",
    "a\u00a0b\u3000c\u2003d", "line one\nline two\n\nline four", "\r\n\r\n", "\n\n\n", " \n \n",
    "你好，世界！", "我们今天去公园散步吧。", "日本語のテキストとカタカナ、ひらがな。", "한국어 텍스트입니다",
    "مرحبا بالعالم", "السلام عليكم ورحمة الله", "שלום עולם", "नमस्ते दुनिया", "ภาษาไทย", "Ελληνικά κείμενο",
    "Привет, мир!", "café naïve résumé", "e\u0301 a\u0300 o\u0302\u0323", "\u1100\u1161\u11a8", "Å Å",
    "ﬁ ﬂ ①②③ ｆｕｌｌｗｉｄｔｈ", "😀😃😄", "👨\u200d👩\u200d👧\u200d👦", "👍🏽 👋🏿", "🇺🇸🇯🇵🏳️\u200d🌈",
    "❤️ ✨ ☃", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕿𝖊𝖝𝖙", "𠜎𠜱𠝹", "12345678901234567890", "3.14159 2,718 1e-10 0x1F",
    "٣٤٥ ١٢", "Ⅻ ½ ²", "https://example.com/path?query=1&b=two#frag", "user@example.org",
    "C:\\Users\\name\\file.txt", "<html><body class=\"x\">text</body></html>", "{\"key\": [1, null, true]}",
    "SELECT * FROM t WHERE id = 42;", "$$\\frac{a}{b}$$", "...!!!???", "--- *** ___", "'''\"\"\"",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>", "<|endoftext|>",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "<|eot_id|>",
    "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<s>", "</s>", "<unk>",
    "<s> [INST] hi [/INST]", "<|im_start", "<|im_end |>", "<<|im_end|>>", "< |eot_id|>", "<|eot_id",
    "<｜User", "<s", "</s >", "▁▁hello▁world", "▁", "<0x41>", "\x00\x01\x07\x1b[0m", "\u200b\u200c\u200d\ufeff",
    "tab\tseparated\tvalues", "trailing spaces   ", "   leading spaces", " ", "a", "\u00e9", "'s", "'",
]

SEPARATORS = ["", " ", "  ", "\n", "\t", "\r\n", " \n", "   ", ", "]


def make_texts():
    rng = random.Random(20261129)
    texts = ["", " ", "\n", "\t"] + list(FRAGMENTS)
    for _ in range(260):
        n = rng.randint(1, 6)
        parts = [rng.choice(FRAGMENTS) for _ in range(n)]
        text = parts[0]
        for part in parts[1:]:
            text += rng.choice(SEPARATORS) + part
        texts.append(text)
    texts.append("".join(chr(rng.randint(0x20, 0x7e)) for _ in range(400)))
    texts.append("".join(chr(rng.choice([rng.randint(0x4e00, 0x9fa5), rng.randint(0x3040, 0x30ff),
                                          rng.randint(0x0600, 0x06ff), 0x20]))
                         for _ in range(300)))
    texts.append(" " * 100 + "x" + "\t" * 30 + "y" + "\n" * 20)
    texts.append("9" * 200)
    big = []
    size = 0
    while size < 20 * 1024:
        part = rng.choice(FRAGMENTS) + rng.choice(SEPARATORS)
        big.append(part)
        size += len(part.encode("utf-8"))
    texts.append("".join(big))
    return texts


def load_transformers(folder):
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(folder)
    except Exception as e:  # recorded, not fatal: tokenizers alone still gives ids and ids_post
        print(f"transformers could not load {folder}: {e}", file=sys.stderr)
        return None


def run_one(folder, texts):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    hf = load_transformers(folder)
    cases = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_post = tok.encode(text, add_special_tokens=True).ids
        ids_hf = hf(text)["input_ids"] if hf is not None else None
        cases.append({
            "ids": ids,
            "ids_post": ids_post,
            "ids_hf": ids_hf,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip": tok.decode(ids_hf if ids_hf is not None else ids_post,
                                       skip_special_tokens=True),
        })
    return cases


def add_json(tar, name, obj):
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", default="tests/data/tokenizers")
    ap.add_argument("--out", default="tokenizer_fixtures.tar.gz")
    ap.add_argument("--texts-only", action="store_true")
    args = ap.parse_args()
    texts = make_texts()
    if args.texts_only:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(texts, f, ensure_ascii=False)
        return
    import tokenizers
    versions = {"tokenizers": tokenizers.__version__}
    try:
        import transformers
        versions["transformers"] = transformers.__version__
    except ImportError:
        pass
    with tarfile.open(args.out, "w:gz") as tar:
        add_json(tar, "texts.json", texts)
        for name in sorted(os.listdir(args.tokenizers)):
            folder = os.path.join(args.tokenizers, name)
            if not os.path.isfile(os.path.join(folder, "tokenizer.json")):
                continue
            add_json(tar, f"{name}.json", {"versions": versions, "cases": run_one(folder, texts)})
            print(f"{name}: {len(texts)} texts", file=sys.stderr)


if __name__ == "__main__":
    main()
