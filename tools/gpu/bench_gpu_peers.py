#!/usr/bin/env python3
"""The GPU engine's peer and floors, measured on the GPU machine in the same call as Strata's runs
(docs/benchmarks.md, "GPU engine"):

  floors     copy bandwidth (a 4 GiB device-to-device copy, bytes read + written per second) and
             the bf16 GEMM rate (8192^3 torch.matmul), each the median of 5 timed runs
  offline    transformers' continuous batching (generate_batch) on a Llama-shaped model with
             random bf16 weights: NUM_PROMPTS prompts of INPUT_LEN random token ids, OUTPUT_LEN
             greedy tokens each, EOS ignored; output tokens/s, and every output's length asserted
  prefill    transformers' forward pass (sdpa) over one LONG_PROMPT-token prompt: seconds, the
             time to first token of a server without queueing

    python3 tools/gpu/bench_gpu_peers.py --config bench/models/llama-3.1-8b/config.json --json OUT

Prints one JSON object (also written to --json).
"""

import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.generation import GenerationConfig


def timed(fn, runs=5):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def floors():
    n = 1 << 31  # 4 GiB of bf16
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    copy_gbs = 2 * n * 2 / t / 1e9
    del src, dst
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    t = timed(lambda: a @ b)
    return {"copy_gbs": copy_gbs, "gemm_tflops": 2 * 8192 ** 3 / t / 1e12}


def build(config_path):
    config = AutoConfig.from_pretrained(config_path)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16,
                                                 attn_implementation="sdpa")
    return model.eval()


def offline(model, num_prompts, input_len, output_len, seed):
    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    prompts = [torch.randint(0, vocab, (input_len,), generator=gen).tolist()
               for _ in range(num_prompts)]
    cfg = GenerationConfig(max_new_tokens=output_len, min_new_tokens=output_len, do_sample=False,
                           eos_token_id=None, pad_token_id=0)
    # Warm-up on a few requests (graph capture, allocator), then the timed run.
    model.generate_batch(inputs=prompts[:4], generation_config=cfg, progress_bar=False)
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate_batch(inputs=prompts, generation_config=cfg, progress_bar=False)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    lengths = [len(o.generated_tokens) for o in out.values()]
    assert len(lengths) == num_prompts, f"{len(lengths)} outputs for {num_prompts} prompts"
    assert all(n == output_len for n in lengths), f"output lengths {sorted(set(lengths))}"
    return {"seconds": seconds, "output_tokens": sum(lengths),
            "output_tokens_per_s": sum(lengths) / seconds}


@torch.no_grad()
def prefill(model, length, seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (1, length), generator=gen).to("cuda")
    t = timed(lambda: model(ids, logits_to_keep=1, use_cache=False), runs=3)
    return {"prompt_tokens": length, "seconds": t}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="bench/models/llama-3.1-8b/config.json")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--long-prompt", type=int, default=32768)
    ap.add_argument("--skip-offline", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    result = {"transformers": transformers.__version__, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(), "floors": floors()}
    print(json.dumps(result["floors"]), flush=True)
    model = build(args.config)
    result["weight_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    result["prefill"] = prefill(model, args.long_prompt, args.seed)
    print(json.dumps(result["prefill"]), flush=True)
    if not args.skip_offline:
        result["offline"] = offline(model, args.num_prompts, args.input_len, args.output_len,
                                    args.seed)
        print(json.dumps(result["offline"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
