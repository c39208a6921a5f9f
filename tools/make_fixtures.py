#!/usr/bin/env python3
"""Writes the model fixtures that tests/model checks Strata's forward pass against.

Run on a machine with torch and transformers (the GPU machine; everything here runs on its CPU):

    python3 tools/make_fixtures.py --out tests/data/models

For each architecture Strata supports it writes a small random-weight checkpoint, saved by
transformers itself (config.json, generation_config.json, *.safetensors), and reference.safetensors:

    prompt.{i}            int32 [L]        the prompt token ids (L >= 300)
    logits.{i}            f32   [L, V]     logits at every position, computed in float64 on the CPU
    greedy.{i}            int32 [40]       greedy continuation of prompt i (full recompute per step)
    greedy_margin.{i}     f64   [40]       top-1 minus top-2 logit at each greedy step
    knockout.{name}.0     f32   [L, V]     logits of prompt 0 with one feature knocked out

transformers initialises biases to zero and norm weights to one, which would hide a dropped bias
or norm, so every parameter is perturbed: weights and biases N(0, 0.08), norm weights
1 + N(0, 0.1). Each knock-out must differ from the reference by at least 100x the test tolerance
(1e-4), which the script asserts, so the fixtures can catch those bugs.
"""

import argparse
import copy
import json
import os
import shutil

import torch
import transformers
from safetensors.torch import save_file

TOLERANCE = 1e-4          # the C++ test's bound on |logits - ref| / |ref| per position
KNOCKOUT_FACTOR = 100.0   # each knock-out must differ by at least this many tolerances
GREEDY_TOKENS = 40
MIN_GREEDY_MARGIN = 1e-3  # top-1 vs top-2 gap needed for fp32 greedy to match float64


def perturb(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=gen, dtype=torch.float64))


def build(arch, cfg_kwargs, seed):
    cfg_cls = getattr(transformers, arch.replace("ForCausalLM", "Config"))
    config = cfg_cls(**cfg_kwargs)
    want = cfg_kwargs.get("rope_parameters")
    got = dict(getattr(config, "rope_parameters", None) or {})
    if want is not None and any(got.get(k) != v for k, v in want.items()):
        raise RuntimeError(f"{arch}: rope_parameters not taken: {got}")
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, arch)(config).to(torch.float32).eval()
    perturb(model, seed)
    if config.tie_word_embeddings:
        model.tie_weights()
    return model


@torch.no_grad()
def logits_f64(model, ids):
    m = copy.deepcopy(model).to(torch.float64)
    return m(torch.tensor([ids])).logits[0]


@torch.no_grad()
def greedy(model, ids, n):
    m = copy.deepcopy(model).to(torch.float64)
    seq = list(ids)
    out, margins = [], []
    for _ in range(n):
        last = m(torch.tensor([seq])).logits[0, -1]
        top2 = torch.topk(last, 2)
        out.append(int(top2.indices[0]))
        margins.append(float(top2.values[0] - top2.values[1]))
        seq.append(out[-1])
    return out, margins


def rel_err_max(a, b):
    """max over positions of |a - b| / |b| (rows = positions): the quantity the C++ test bounds."""
    return float(((a - b).norm(dim=-1) / b.norm(dim=-1)).max())


def knock_out(model, kind):
    m = copy.deepcopy(model)
    with torch.no_grad():
        if kind == "no_bias":
            for name, p in m.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
        elif kind == "unit_norms":
            for name, p in m.named_parameters():
                if "norm" in name and p.dim() == 1:
                    p.fill_(1.0)
        elif kind == "no_qk_norm":
            for layer in m.model.layers:
                layer.self_attn.q_norm = torch.nn.Identity()
                layer.self_attn.k_norm = torch.nn.Identity()
        elif kind == "no_rope_scaling":
            cfg = copy.deepcopy(m.config)
            rp = dict(cfg.rope_parameters)
            cfg.rope_parameters = {"rope_type": "default", "rope_theta": rp["rope_theta"]}
            rotary = type(m.model.rotary_emb)(config=cfg)
            m.model.rotary_emb = rotary
        elif kind == "no_window":
            m.config.sliding_window = None
            for layer in m.model.layers:
                if hasattr(layer.self_attn, "sliding_window"):
                    layer.self_attn.sliding_window = None
                if hasattr(layer, "attention_type"):
                    layer.attention_type = "full_attention"
            if hasattr(m.config, "layer_types") and m.config.layer_types is not None:
                m.config.layer_types = ["full_attention"] * len(m.config.layer_types)
        else:
            raise ValueError(kind)
    return m


def prompts_for(vocab, lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]


def to_v4_config(path):
    """Rewrites a saved config.json into the transformers 4.x form (rope_theta + rope_scaling,
    torch_dtype), so the loader is tested on both forms."""
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp.pop("rope_theta")
    if rp.get("rope_type", "default") != "default":
        cfg["rope_scaling"] = rp
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def save_reference(path, tensors, knockouts, num_prompts, summary):
    """Writes reference.safetensors (with the versions that made it) and prints the summary."""
    meta = {"knockouts": ",".join(knockouts), "num_prompts": str(num_prompts),
            "transformers": transformers.__version__, "torch": torch.__version__}
    save_file(tensors, os.path.join(path, "reference.safetensors"), metadata=meta)
    print(json.dumps(summary), flush=True)
    return summary


def write_fixture(out_dir, name, model, knockouts, seed, lengths=(300, 317), shard=None,
                  save_dtype=None, v4_config=False):
    path = os.path.join(out_dir, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    saved = model if save_dtype is None else copy.deepcopy(model).to(save_dtype)
    kwargs = {"max_shard_size": shard} if shard else {}
    saved.save_pretrained(path, **kwargs)
    if v4_config:
        to_v4_config(os.path.join(path, "config.json"))
    # The reference is computed from the checkpoint as transformers loads it: the saved weights
    # (bf16/f16 rounding included) with RoPE tables computed afresh in fp32. Upcasting the in-memory
    # bf16 model instead would keep a bf16-rounded inv_freq buffer, which no real load has.
    ref_model = model
    if save_dtype is not None:
        ref_model = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="eager").eval()
    vocab = model.config.vocab_size

    tensors, summary = {}, {"name": name, "knockouts": {}}
    for attempt in range(20):
        prompts = prompts_for(vocab, lengths, seed * 1000 + attempt)
        results = [greedy(ref_model, p, GREEDY_TOKENS) for p in prompts]
        margin = min(min(m) for _, m in results)
        if margin >= MIN_GREEDY_MARGIN:
            break
    else:
        raise RuntimeError(f"{name}: no prompt set with a clear greedy margin")
    summary["min_greedy_margin"] = margin
    ref0 = None
    for i, (p, (toks, margins)) in enumerate(zip(prompts, results)):
        ref = logits_f64(ref_model, p)
        if i == 0:
            ref0 = ref
        tensors[f"prompt.{i}"] = torch.tensor(p, dtype=torch.int32)
        tensors[f"logits.{i}"] = ref.to(torch.float32).contiguous()
        tensors[f"greedy.{i}"] = torch.tensor(toks, dtype=torch.int32)
        tensors[f"greedy_margin.{i}"] = torch.tensor(margins, dtype=torch.float64)
    # Sanity: transformers' own fp32 forward agrees with the float64 reference far inside tolerance.
    with torch.no_grad():
        f32 = ref_model.to(torch.float32)(torch.tensor([prompts[0]])).logits[0].to(torch.float64)
    summary["hf_fp32_vs_f64"] = rel_err_max(f32, ref0)
    for kind in knockouts:
        ko = logits_f64(knock_out(ref_model, kind), prompts[0])
        diff = rel_err_max(ko, ref0)
        summary["knockouts"][kind] = diff
        if diff < KNOCKOUT_FACTOR * TOLERANCE:
            raise RuntimeError(f"{name}: knock-out {kind} differs by only {diff:.3g}")
        tensors[f"knockout.{kind}.0"] = ko.to(torch.float32).contiguous()
    return save_reference(path, tensors, knockouts, len(prompts), summary)


COMMON = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              max_position_embeddings=1024, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/models")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}", flush=True)
    summaries = []

    llama2 = build("LlamaForCausalLM", dict(COMMON, num_attention_heads=4, num_key_value_heads=4,
                                            rope_parameters={"rope_type": "default",
                                                             "rope_theta": 10000.0}), seed=1)
    summaries.append(write_fixture(args.out, "llama2-mha", llama2, ["unit_norms"], seed=1))

    llama_mqa = build("LlamaForCausalLM", dict(COMMON, num_attention_heads=4, num_key_value_heads=1,
                                               attention_bias=True, mlp_bias=True,
                                               rope_parameters={"rope_type": "default",
                                                                "rope_theta": 10000.0}), seed=2)
    summaries.append(write_fixture(args.out, "llama-mqa-bias", llama_mqa,
                                   ["no_bias", "unit_norms"], seed=2))

    llama3_rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 64}
    llama3 = build("LlamaForCausalLM", dict(COMMON, hidden_size=128, intermediate_size=192,
                                            num_attention_heads=8, num_key_value_heads=2,
                                            rope_parameters=llama3_rope), seed=3)
    summaries.append(write_fixture(args.out, "llama3-gqa", llama3,
                                   ["no_rope_scaling", "unit_norms"], seed=3, v4_config=True))
    summaries.append(write_fixture(args.out, "llama3-gqa-bf16", llama3, [], seed=3,
                                   save_dtype=torch.bfloat16))

    mistral = build("MistralForCausalLM", dict(COMMON, num_attention_heads=4, num_key_value_heads=2,
                                               sliding_window=64,
                                               rope_parameters={"rope_type": "default",
                                                                "rope_theta": 10000.0}), seed=4)
    summaries.append(write_fixture(args.out, "mistral-swa", mistral, ["no_window", "unit_norms"],
                                   seed=4))

    qwen2 = build("Qwen2ForCausalLM", dict(COMMON, num_attention_heads=4, num_key_value_heads=2,
                                           tie_word_embeddings=True,
                                           rope_parameters={"rope_type": "default",
                                                            "rope_theta": 1000000.0}), seed=5)
    summaries.append(write_fixture(args.out, "qwen2-tied", qwen2, ["no_bias", "unit_norms"], seed=5,
                                   shard="40KB"))

    qwen3 = build("Qwen3ForCausalLM", dict(COMMON, num_attention_heads=4, num_key_value_heads=2,
                                           head_dim=32,
                                           rope_parameters={"rope_type": "default",
                                                            "rope_theta": 1000000.0}), seed=6)
    summaries.append(write_fixture(args.out, "qwen3-qknorm", qwen3, ["no_qk_norm", "unit_norms"],
                                   seed=6))
    summaries.append(write_fixture(args.out, "qwen3-qknorm-f16", qwen3, [], seed=6,
                                   save_dtype=torch.float16))

    with open(os.path.join(args.out, "fixtures.json"), "w") as f:
        json.dump({"tolerance": TOLERANCE, "knockout_factor": KNOCKOUT_FACTOR,
                   "greedy_tokens": GREEDY_TOKENS, "fixtures": summaries}, f, indent=2)


if __name__ == "__main__":
    main()
