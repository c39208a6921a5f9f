#!/usr/bin/env python3
"""PyTorch's attention on the shapes of bench/cuda/decode_bench.cc and prefill_bench.cc.

torch.nn.functional.scaled_dot_product_attention with one query token per sequence, BF16,
32 query / 8 KV heads (enable_gqa), head dim 128, K and V stored contiguously
([batch, kv_heads, context, head_dim]). Each SDPA backend that accepts the shape is timed, plus
the default dispatch; the figure compared against is the fastest. Output is checked against a
float64 reference before timing. Times are medians of individually event-timed calls. KV bytes
count K and V once, as in the Strata benchmark. Also measures the device-to-device copy bandwidth,
the bf16 matrix rate (8192^3 products on random data), and SDPA's prefill TFLOP/s (causal, GQA;
a chunk on a cached prefix uses the bottom-right causal mask) for bench/cuda/prefill_bench.cc's
shapes.

  python3 tools/gpu/bench_decode_torch.py [--json FILE] [--reps N]
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(1, 1024), (1, 65536), (16, 32768), (64, 4096), (256, 1024)]
QO_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth(reps):
    n = 2 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), reps)
    return 2 * n / (ms * 1e-3) / 1e9


def matmul_tflops(reps):
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    ms = median_ms(lambda: a @ b, reps)
    return 2 * 8192 ** 3 / (ms * 1e-3) / 1e12


PREFILL = [(0, 4096), (0, 16384), (4096, 4096), (12288, 4096), (16384, 16384)]


def prefill(reps):
    from torch.nn.attention.bias import causal_lower_right
    rows = []
    for prefix, chunk in PREFILL:
        kv = prefix + chunk
        q = torch.empty(1, QO_HEADS, chunk, HEAD_DIM, dtype=torch.bfloat16, device="cuda").uniform_(-2, 2)
        k = torch.empty(1, KV_HEADS, kv, HEAD_DIM, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
        v = torch.empty_like(k).uniform_(-1, 1)
        pairs = chunk * prefix + 0.5 * chunk * (chunk + 1)
        flops = 4 * QO_HEADS * HEAD_DIM * pairs
        row = {"prefix": prefix, "chunk": chunk, "backends": {}}
        for name, backend in {"default": None, "flash": SDPBackend.FLASH_ATTENTION,
                              "cudnn": SDPBackend.CUDNN_ATTENTION}.items():
            def call(backend=backend):
                kw = {"is_causal": True} if prefix == 0 else {"attn_mask": causal_lower_right(chunk, kv)}
                if backend is None:
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
            try:
                call()
                torch.cuda.synchronize()
                ms = median_ms(call, max(5, reps // 3))
                row["backends"][name] = {"median_us": ms * 1e3, "tflops": flops / (ms * 1e-3) / 1e12}
            except Exception as e:
                row["backends"][name] = {"error": str(e).splitlines()[0][:120]}
        ok = {n: r for n, r in row["backends"].items() if "tflops" in r}
        best = max(ok, key=lambda n: ok[n]["tflops"]) if ok else None
        row["best_backend"] = best
        row["tflops"] = ok[best]["tflops"] if best else float("nan")
        row["median_us"] = ok[best]["median_us"] if best else float("nan")
        rows.append(row)
        parts = ", ".join(f"{n} {r['tflops']:.0f}" if "tflops" in r else f"{n}: {r['error']}"
                          for n, r in row["backends"].items())
        print(f"prefill prefix {prefix:5d} chunk {chunk:5d}: best {best} {row['tflops']:.1f} TFLOP/s [{parts}]",
              flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def reference(q, k, v, b):
    qd = q[b].double()  # [H, 1, D]
    kd = k[b].double().repeat_interleave(QO_HEADS // KV_HEADS, dim=0)
    vd = v[b].double().repeat_interleave(QO_HEADS // KV_HEADS, dim=0)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(HEAD_DIM)
    return torch.softmax(s, dim=-1) @ vd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    torch.manual_seed(0)
    copy_gbs = copy_bandwidth(args.reps)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"device-to-device copy {copy_gbs:.0f} GB/s (read + write)")
    backends = {"default": None, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    results = []
    for batch, ctx in SHAPES:
        q = torch.empty(batch, QO_HEADS, 1, HEAD_DIM, dtype=torch.bfloat16, device="cuda").uniform_(-2, 2)
        k = torch.empty(batch, KV_HEADS, ctx, HEAD_DIM, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
        v = torch.empty_like(k).uniform_(-1, 1)
        kv_bytes = 2 * k.numel() * k.element_size()
        ref = reference(q, k, v, 0)
        row = {"batch": batch, "context": ctx, "kv_bytes": kv_bytes, "backends": {}}
        for name, backend in backends.items():
            def call(backend=backend):
                if backend is None:
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            try:
                out = call()
                torch.cuda.synchronize()
            except Exception as e:  # a backend that does not take this shape
                row["backends"][name] = {"error": str(e).splitlines()[0][:120]}
                continue
            err = (out[0].double() - ref).abs().max().item()
            if not err < 1e-2:
                row["backends"][name] = {"error": f"max abs error {err:.3g}"}
                continue
            ms = median_ms(call, args.reps)
            row["backends"][name] = {"median_us": ms * 1e3, "gbs": kv_bytes / (ms * 1e-3) / 1e9,
                                     "max_abs_err": err}
        ok = {n: r for n, r in row["backends"].items() if "gbs" in r}
        best = max(ok, key=lambda n: ok[n]["gbs"]) if ok else None
        row["best_backend"] = best
        row["median_us"] = ok[best]["median_us"] if best else float("nan")
        row["gbs"] = ok[best]["gbs"] if best else float("nan")
        results.append(row)
        parts = ", ".join(f"{n} {r['gbs']:.0f} GB/s" if "gbs" in r else f"{n}: {r['error']}"
                          for n, r in row["backends"].items())
        print(f"{batch:3d} x {ctx:5d}: best {best} {row['median_us']:.1f} us {row['gbs']:.0f} GB/s "
              f"({row['gbs'] / copy_gbs:.2f} of copy) [{parts}]", flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    mm = matmul_tflops(args.reps)
    print(f"bf16 matrix product 8192^3: {mm:.0f} TFLOP/s", flush=True)
    prefill_rows = prefill(args.reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "copy_bandwidth_gbs": copy_gbs, "matmul_tflops": mm, "results": results,
                       "prefill": prefill_rows}, f, indent=1)


if __name__ == "__main__":
    main()
