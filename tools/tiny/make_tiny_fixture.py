#!/usr/bin/env python3
"""Writes the strata-tiny reference that tests/engine/strata_tiny_test.cc checks Strata against.

    python3 tools/tiny/make_tiny_fixture.py --model models/strata-tiny --data .devcarry/tiny \
        --out tests/data/models/strata-tiny-reference

Run where torch, transformers and tokenizers are installed (the H200 GPU machine; all of it runs on
its CPU). The checkpoint is loaded as transformers loads it (AutoModelForCausalLM, the BF16 weights
upcast to float32, eager attention) and the reference computed in float64. Files:

reference.safetensors
    prompt.{i}          int32 [L]      0: the first 256 tokens of the held-out books (BOS first);
                                       1: the pass-key prompt of needle.json (512 tokens)
    positions.{i}       int32 [P]      the positions whose logits are stored (every 16th/32nd + last)
    logits.{i}          f32   [P, V]   logits at those positions, float64 forward
    greedy.{i}          int32 [n<=24]  greedy continuation (float64), cut before the first step
                                       whose top-2 gap is under 1e-3
    knockout.no_qk_norm.0  f32 [P, V]  prompt 0 with the q/k norms removed: must be far off
tokenizer_ids.json      texts with the ids of the `tokenizers` library (with and without special
                        tokens), which the C++ tokenizer must equal
needle.json             pass-key prompts (seed, context, depth, trial -> ids, answer) built by
                        tools/tiny/tiny_needle.py, which src/eval must rebuild token for token
"""

import argparse
import copy
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_needle  # noqa: E402
import train_tiny  # noqa: E402

TOLERANCE = 1e-4
KNOCKOUT_FACTOR = 100.0
GREEDY_TOKENS = 24
MIN_GREEDY_MARGIN = 1e-3
TEXTS = [
    "And it came to pass",
    "In the beginning God created the heaven and the earth.\n",
    "The pass key is 48213. Remember it.\nWhat is the pass key? The pass key is ",
    "  two spaces, a tab\tand\r\nWindows line ends\n\n\nthree newlines",
    "Numbers: 3.14159, 1,000,000 and 2024-01-31; 007!",
    "Unicode: café, naïve, Ångström, 東京, emoji 🙂, ligature ﬁ",
    "<|im_start|>user\nWho was Boaz?<|im_end|>\n<|im_start|>assistant\n",
    "It's, we're, I'll, they'd -- contractions and UPPERCASE LETTERS.",
    "\t\t-- Mark Twain, \"Pudd'nhead Wilson's Calendar\"",
    "",
]


def rel_err_rows(a, b):
    return float(((a - b).norm(dim=-1) / b.norm(dim=-1)).max())


@torch.no_grad()
def greedy(model, ids, n):
    seq, out = list(ids), []
    for _ in range(n):
        top2 = torch.topk(model(torch.tensor([seq])).logits[0, -1], 2)
        if float(top2.values[0] - top2.values[1]) < MIN_GREEDY_MARGIN:
            break
        out.append(int(top2.indices[0]))
        seq.append(out[-1])
    return out


def needle_prompts(tok, filler):
    with open(filler, encoding="utf-8") as f:
        text = f.read()
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    units = tiny_needle.FillerUnits(text, enc)
    prefix = tok.encode("", add_special_tokens=True).ids
    cases = [(1, 512, 0.5, 0), (7, 256, 0.0, 3), (7, 256, 1.0, 3), (99, 300, 0.3, 11)]
    out = []
    for seed, context, depth, trial in cases:
        p = tiny_needle.build_prompt(units, enc, prefix, seed, context, depth, trial)
        out.append(dict(seed=seed, context=context, depth=depth, trial=trial, **p))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default=".devcarry/tiny")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__}

    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(args.model)
    ids = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids,
            "ids_with_special": tok.encode(t, add_special_tokens=True).ids} for t in TEXTS]
    summary["auto_tokenizer_agrees"] = all(
        auto(t["text"], add_special_tokens=True)["input_ids"] == t["ids_with_special"] for t in ids)
    summary["chat"] = auto.apply_chat_template([{"role": "user", "content": "Hi"}],
                                               tokenize=False, add_generation_prompt=True)
    with open(os.path.join(args.out, "tokenizer_ids.json"), "w") as f:
        json.dump(ids, f, indent=1, ensure_ascii=False)
    needles = needle_prompts(tok, os.path.join(args.model, "needle_filler.txt"))
    with open(os.path.join(args.out, "needle.json"), "w") as f:
        json.dump(needles, f)

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="eager").eval()
    f64 = copy.deepcopy(hf).to(torch.float64)
    with open(os.path.join(args.data, "heldout_bible.txt"), encoding="utf-8") as f:
        text_prompt = tok.encode(f.read(), add_special_tokens=True).ids[:256]
    prompts = [text_prompt, needles[0]["prompt"]]
    steps = [16, 32]

    # Our training module on the same weights agrees with transformers (same architecture).
    ours = train_tiny.TinyForCausalLM(train_tiny.CONFIG)
    weights = load_file(os.path.join(args.model, "model.safetensors"))
    ours.load_state_dict({k: v.float() for k, v in weights.items()})
    with torch.no_grad():
        x = torch.tensor([text_prompt])
        summary["train_module_vs_hf_fp32"] = rel_err_rows(ours.eval()(x)[0].double(),
                                                          hf(x).logits[0].double())

    tensors = {}
    with torch.no_grad():
        for i, (p, step) in enumerate(zip(prompts, steps)):
            pos = sorted(set(range(0, len(p), step)) | {len(p) - 1})
            ref = f64(torch.tensor([p])).logits[0]
            fp32 = hf(torch.tensor([p])).logits[0].double()
            summary[f"hf_fp32_vs_f64.{i}"] = rel_err_rows(fp32, ref)
            tensors[f"prompt.{i}"] = torch.tensor(p, dtype=torch.int32)
            tensors[f"positions.{i}"] = torch.tensor(pos, dtype=torch.int32)
            tensors[f"logits.{i}"] = ref[pos].to(torch.float32).contiguous()
            g = greedy(f64, p, GREEDY_TOKENS)
            summary[f"greedy_len.{i}"] = len(g)
            summary[f"greedy_text.{i}"] = tok.decode(g)
            tensors[f"greedy.{i}"] = torch.tensor(g, dtype=torch.int32)
        ko = copy.deepcopy(f64)
        for layer in ko.model.layers:
            layer.self_attn.q_norm = torch.nn.Identity()
            layer.self_attn.k_norm = torch.nn.Identity()
        pos0 = tensors["positions.0"].long()
        ko_logits = ko(torch.tensor([prompts[0]])).logits[0][pos0]
        diff = rel_err_rows(ko_logits, f64(torch.tensor([prompts[0]])).logits[0][pos0])
        summary["knockout.no_qk_norm"] = diff
        if diff < KNOCKOUT_FACTOR * TOLERANCE:
            raise RuntimeError(f"knock-out no_qk_norm differs by only {diff:.3g}")
        tensors["knockout.no_qk_norm.0"] = ko_logits.to(torch.float32).contiguous()
    summary["needle_answer"] = tok.decode(needles[0]["answer"])
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "num_prompts": "2"}
    save_file(tensors, os.path.join(args.out, "reference.safetensors"), metadata=meta)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
    print(json.dumps(summary, indent=1, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
