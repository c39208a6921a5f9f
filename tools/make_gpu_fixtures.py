#!/usr/bin/env python3
"""Writes the fixtures that the GPU engine's correctness test checks against (docs/gpu-engine.md).

Run on the GPU machine (torch + transformers + a CUDA device):

    python3 tools/make_gpu_fixtures.py --out tests/data/models-gpu

The GPU runs in bf16, which is not bitwise-invariant, so its rule is relative to transformers' own
bf16 error: for every position of a teacher-forced prompt,

    |Strata - ref| <= 2 x |transformers-bf16 - ref|       (L2 over the vocabulary)

where ref is the float64 forward pass of the same (bf16-stored) checkpoint. Each fixture holds a
small random-weight checkpoint saved in bf16 by transformers itself, with head dims the CUDA
attention kernels take (64, 128), and reference.safetensors:

    prompt.{i}          int32 [L]      prompt token ids
    logits.{i}          f32   [L, V]   float64 reference logits at every position
    logits_bf16.{i}     f32   [L, V]   transformers' bf16 forward on the GPU (sdpa attention)
    knockout.{name}.0   f32   [L, V]   reference logits of prompt 0 with one feature knocked out

A knock-out must sit at least KNOCKOUT_FACTOR x transformers' bf16 error away from the reference
(asserted here), so the test can tell a dropped feature from bf16 noise.
"""

import argparse
import copy
import json
import os
import shutil

import torch
import transformers

from make_fixtures import build, knock_out, prompts_for, save_reference

KNOCKOUT_FACTOR = 10.0


def row_err(a, b):
    """Per position L2 distance between two [L, V] logit matrices."""
    return (a.to(torch.float64) - b.to(torch.float64)).norm(dim=-1)


@torch.no_grad()
def forward(model, ids, dtype, device):
    m = copy.deepcopy(model).to(dtype=dtype, device=device)
    return m(torch.tensor([ids], device=device)).logits[0].to("cpu", torch.float64)


def write_fixture(out_dir, name, model, knockouts, seed, lengths):
    path = os.path.join(out_dir, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(path)
    # The reference and the bf16 run both use the checkpoint as transformers loads it.
    fp32 = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager").eval()
    bf16 = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    prompts = prompts_for(model.config.vocab_size, lengths, seed * 1000)
    tensors, summary = {}, {"name": name, "knockouts": {}}
    for i, p in enumerate(prompts):
        ref = forward(fp32, p, torch.float64, "cpu")
        low = forward(bf16, p, torch.bfloat16, "cuda")
        err = row_err(low, ref)
        summary[f"bf16_err_mean.{i}"] = float(err.mean())
        summary[f"ref_norm_mean.{i}"] = float(ref.norm(dim=-1).mean())
        tensors[f"prompt.{i}"] = torch.tensor(p, dtype=torch.int32)
        tensors[f"logits.{i}"] = ref.to(torch.float32).contiguous()
        tensors[f"logits_bf16.{i}"] = low.to(torch.float32).contiguous()
        if i == 0:
            ref0, err0 = ref, err
    for kind in knockouts:
        ko = forward(knock_out(fp32, kind), prompts[0], torch.float64, "cpu")
        ratio = float(row_err(ko, ref0).mean() / err0.mean())
        summary["knockouts"][kind] = ratio
        if ratio < KNOCKOUT_FACTOR:
            raise RuntimeError(f"{name}: knock-out {kind} is only {ratio:.3g}x the bf16 error")
        tensors[f"knockout.{kind}.0"] = ko.to(torch.float32).contiguous()
    return save_reference(path, tensors, knockouts, len(prompts), summary)


COMMON = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              max_position_embeddings=1024, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/models-gpu")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}", flush=True)
    lengths = (160, 97)
    summaries = []

    llama3_rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 64}
    llama3 = build("LlamaForCausalLM", dict(COMMON, hidden_size=256, intermediate_size=384,
                                            num_attention_heads=4, num_key_value_heads=2,
                                            head_dim=128, rope_parameters=llama3_rope), seed=11)
    summaries.append(write_fixture(args.out, "llama3-gqa-hd128", llama3,
                                   ["no_rope_scaling", "unit_norms"], seed=11, lengths=lengths))

    qwen2 = build("Qwen2ForCausalLM", dict(COMMON, num_attention_heads=4, num_key_value_heads=2,
                                           head_dim=64, tie_word_embeddings=True,
                                           rope_parameters={"rope_type": "default",
                                                            "rope_theta": 1000000.0}), seed=12)
    summaries.append(write_fixture(args.out, "qwen2-bias-hd64", qwen2, ["no_bias"], seed=12,
                                   lengths=lengths))

    qwen3 = build("Qwen3ForCausalLM", dict(COMMON, num_attention_heads=4, num_key_value_heads=2,
                                           head_dim=64,
                                           rope_parameters={"rope_type": "default",
                                                            "rope_theta": 1000000.0}), seed=13)
    summaries.append(write_fixture(args.out, "qwen3-qknorm-hd64", qwen3, ["no_qk_norm"], seed=13,
                                   lengths=lengths))

    mistral = build("MistralForCausalLM", dict(COMMON, num_attention_heads=4, num_key_value_heads=1,
                                               head_dim=64, sliding_window=48,
                                               rope_parameters={"rope_type": "default",
                                                                "rope_theta": 10000.0}), seed=14)
    summaries.append(write_fixture(args.out, "mistral-swa-hd64", mistral, ["no_window"], seed=14,
                                   lengths=lengths))

    with open(os.path.join(args.out, "fixtures.json"), "w") as f:
        json.dump({"knockout_factor": KNOCKOUT_FACTOR, "fixtures": summaries}, f, indent=2)


if __name__ == "__main__":
    main()
