#!/usr/bin/env python3
"""Eager PyTorch run of a (tiny) Qwen3-VL text conditioner, written from
docs/spec/h3-conditioner.md §3, in float32 and in bf16 with the reference's
rounding points (§3.2: bf16 GEMM outputs, RMSNorm rounded before the weight,
bf16 RoPE products, bf16 SiLU and product, bf16 residual adds).

Why: the CUDA backend runs the conditioner in bf16, and 50 decoder layers of
bf16 residual adds drift from the float32 golden more than one bf16 op does.
This script measures how far the reference's own bf16 run lands from the
float32 golden on the same tiny model, so that test_gpu_goldens can hold our
bf16 run to the reference's bf16 error instead of to a guess. The float32 run
checks the script itself against the golden.

usage: h3_text_encoder_reference.py MODEL_DIR GOLDEN.safetensors [--device cuda|cpu]
Prints one JSON object: rel L2 vs the golden for f32 and bf16, and the bf16 run's
minimum per-row cosine similarity. Needs python3 + torch; stdlib otherwise.
"""
import json
import struct
import sys

import torch


def read_safetensors(path):
    dtypes = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16, "I64": torch.int64}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] not in dtypes:
            continue
        b, e = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


def rel_l2(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return float((a - b).norm() / b.norm())


def run(w, cfg, ids, layers, dt, dev):
    c = cfg["text_config"]
    D, H, KV, hd, eps = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    P = "model.language_model."
    g = lambda k: w[P + k].to(dev, dt)
    L = ids.numel()

    def rms(x, weight):
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        return weight * y.to(dt)

    inv = 1.0 / (c["rope_parameters"]["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = torch.arange(L, dtype=torch.float32)
    f = torch.outer(pos, inv)
    emb = torch.cat([f, f], -1)
    cos, sin = emb.cos().to(dev, dt), emb.sin().to(dev, dt)

    def rope(x):  # x [heads, L, hd]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    x = g("embed_tokens.weight")[ids.to(dev)]
    mask = torch.ones(L, L, dtype=torch.bool, device=dev).tril()
    for l in range(layers):
        p = f"layers.{l}."
        h = rms(x, g(p + "input_layernorm.weight"))
        q = (h @ g(p + "self_attn.q_proj.weight").T).view(L, H, hd).transpose(0, 1)
        k = (h @ g(p + "self_attn.k_proj.weight").T).view(L, KV, hd).transpose(0, 1)
        v = (h @ g(p + "self_attn.v_proj.weight").T).view(L, KV, hd).transpose(0, 1)
        q = rope(rms(q, g(p + "self_attn.q_norm.weight")))
        k = rope(rms(k, g(p + "self_attn.k_norm.weight")))
        k = k.repeat_interleave(H // KV, 0)
        v = v.repeat_interleave(H // KV, 0)
        s = (q.float() @ k.float().transpose(-1, -2)) / hd ** 0.5
        s = s.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (s @ v.float()).to(dt).transpose(0, 1).reshape(L, H * hd)
        x = x + o @ g(p + "self_attn.o_proj.weight").T
        h = rms(x, g(p + "post_attention_layernorm.weight"))
        a = torch.nn.functional.silu(h @ g(p + "mlp.gate_proj.weight").T) * (h @ g(p + "mlp.up_proj.weight").T)
        x = x + a @ g(p + "mlp.down_proj.weight").T
    return x.float().cpu()


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    model, golden = sys.argv[1], sys.argv[2]
    dev = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--device" else ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = json.load(open(model + "/config.json"))
    w = read_safetensors(model + "/model.safetensors")
    gold = read_safetensors(golden)
    layers = json.load(open(golden.replace(".safetensors", ".json"))).get("text_encoder_layer", 50)
    ids, want = gold["t2va.input_ids"], gold["t2va.prompt_embeds"]
    f32 = run(w, cfg, ids, layers, torch.float32, dev)
    b16 = run(w, cfg, ids, layers, torch.bfloat16, dev)
    cos = torch.nn.functional.cosine_similarity(b16.double(), want.double(), dim=-1)
    print(json.dumps({"device": dev, "layers": layers, "f32_rel_l2": rel_l2(f32, want),
                      "bf16_rel_l2": rel_l2(b16, want), "bf16_min_row_cosine": float(cos.min())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
