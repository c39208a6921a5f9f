#!/usr/bin/env python3
"""Writes a Qwen2 (or Llama) safetensors checkpoint as a GGUF file that llama.cpp loads, tensor
for tensor: the side-by-side benchmark's peer then computes on the very weights Strata reads.

Only what a benchmark needs: the architecture's hyper-parameters from config.json, every 2-D
weight in its own dtype (BF16, F16 or F32, bytes copied unchanged), 1-D tensors (norms, biases) as
F32 (as llama.cpp's converter writes them), and no tokenizer: tokenizer.ggml.model = "none" with
<arch>.vocab_size dummy tokens (llama-bench draws random token ids). Qwen2 and Llama with
"rope_type" NEOX/NORM as llama.cpp expects them: Llama's q/k rows are permuted to the interleaved
rotary layout, Qwen2's are not (llama.cpp rotates Qwen2 in the NEOX layout HF uses).

GGUF version 3, little-endian, as ggml's docs/gguf.md specifies it:
  header       "GGUF", u32 version, u64 tensor count, u64 metadata count
  metadata     key (u64 length + UTF-8), u32 value type, value
  tensor info  name, u32 n_dims, u64 dims (innermost first), u32 ggml type, u64 data offset
  padding to general.alignment (32), then each tensor's data at its offset (32-aligned)

Usage: gguf_from_safetensors.py MODEL_DIR OUT.gguf
"""

import json
import os
import struct
import sys
from array import array

ALIGN = 32
# gguf value types
U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10
# ggml tensor types
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
DTYPES = {"F32": (GGML_F32, 4), "F16": (GGML_F16, 2), "BF16": (GGML_BF16, 2)}


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_string(key) + struct.pack("<I", vtype)
    if vtype == STRING:
        return out + gguf_string(value)
    fmt = {U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q"}[vtype]
    return out + struct.pack(fmt, value)


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def tensor_name(hf, n_layers):
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
             "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    parts = hf.split(".")
    if parts[:2] != ["model", "layers"]:
        raise SystemExit(f"unexpected tensor {hf!r}")
    i, rest = int(parts[2]), ".".join(parts[3:])
    if not 0 <= i < n_layers:
        raise SystemExit(f"tensor {hf!r} names layer {i} of {n_layers}")
    names = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
        "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    if rest not in names:
        raise SystemExit(f"unexpected tensor {hf!r}")
    return f"blk.{i}.{names[rest]}"


def to_f32(raw, dtype):
    if dtype == "F32":
        return raw
    if dtype == "BF16":
        h = array("H", raw)
        return array("I", (v << 16 for v in h)).tobytes()
    h = array("H", raw)  # F16
    return array("f", (struct.unpack("<e", struct.pack("<H", v))[0] for v in h)).tobytes()


def permute_rows(raw, rows, cols, elem, heads):
    """HF's rotate-half q/k rows -> llama.cpp's interleaved pairs (convert_hf_to_gguf's permute)."""
    row = cols * elem
    half = rows // heads // 2
    out = bytearray(len(raw))
    dst = 0
    for h in range(heads):
        for i in range(half):
            for j in (i, i + half):
                src = (h * 2 * half + j) * row
                out[dst:dst + row] = raw[src:src + row]
                dst += row
    return bytes(out)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    model_dir, out_path = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    arch = {"qwen2": "qwen2", "llama": "llama"}.get(cfg.get("model_type"))
    if arch is None:
        raise SystemExit(f"model_type {cfg.get('model_type')!r}: only qwen2 and llama")
    st_path = os.path.join(model_dir, "model.safetensors")
    header, data_start = read_safetensors(st_path)
    L = cfg["num_hidden_layers"]
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads",
                                                          cfg["num_attention_heads"])
    meta = [
        kv("general.architecture", STRING, arch),
        kv("general.name", STRING, os.path.basename(os.path.normpath(model_dir))),
        kv("general.alignment", U32, ALIGN),
        kv(f"{arch}.context_length", U32, min(cfg.get("max_position_embeddings", 4096), 1 << 17)),
        kv(f"{arch}.embedding_length", U32, cfg["hidden_size"]),
        kv(f"{arch}.block_count", U32, L),
        kv(f"{arch}.feed_forward_length", U32, cfg["intermediate_size"]),
        kv(f"{arch}.attention.head_count", U32, heads),
        kv(f"{arch}.attention.head_count_kv", U32, kv_heads),
        kv(f"{arch}.rope.freq_base", F32, float(cfg.get("rope_theta", 10000.0))),
        kv(f"{arch}.attention.layer_norm_rms_epsilon", F32, float(cfg["rms_norm_eps"])),
        kv(f"{arch}.vocab_size", U32, cfg["vocab_size"]),
        kv("tokenizer.ggml.model", STRING, "none"),
    ]
    infos, blobs, offset = [], [], 0
    with open(st_path, "rb") as f:
        for hf in sorted(header, key=lambda n: (n.count("layers"), n)):
            t = header[hf]
            if t["dtype"] not in DTYPES:
                raise SystemExit(f"tensor {hf!r}: dtype {t['dtype']} (BF16, F16 or F32 only)")
            begin, end = t["data_offsets"]
            shape = t["shape"]
            name = tensor_name(hf, L)
            f.seek(data_start + begin)
            raw = f.read(end - begin)
            if len(raw) != end - begin:
                raise SystemExit(f"{st_path}: truncated at tensor {hf!r}")
            gtype, elem = DTYPES[t["dtype"]]
            if len(shape) == 1:
                raw, gtype = to_f32(raw, t["dtype"]), GGML_F32
            elif arch == "llama" and hf.endswith(("q_proj.weight", "k_proj.weight")):
                n = heads if "q_proj" in hf else kv_heads
                raw = permute_rows(raw, shape[0], shape[1], elem, n)
            infos.append(gguf_string(name) + struct.pack("<I", len(shape)) +
                         b"".join(struct.pack("<Q", d) for d in reversed(shape)) +
                         struct.pack("<IQ", gtype, offset))
            blobs.append(raw)
            offset += (len(raw) + ALIGN - 1) // ALIGN * ALIGN
    with open(out_path, "wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(meta)))
        for m in meta:
            out.write(m)
        for i in infos:
            out.write(i)
        out.write(b"\0" * (-out.tell() % ALIGN))
        for raw in blobs:
            out.write(raw)
            out.write(b"\0" * (-len(raw) % ALIGN))
    print(f"{out_path}: {len(infos)} tensors, {offset} bytes of tensor data ({arch})")


if __name__ == "__main__":
    main()
