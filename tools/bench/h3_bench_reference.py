#!/usr/bin/env python3
"""h3_bench_reference.py - the PyTorch side of h3-bench, run by it on the same GPU.

Measures, with CUDA events after warm-up (medians):
  * the bf16 GEMM peak (torch.matmul 8192^3 on random data),
  * F.linear at the DiT block's GEMM shapes,
  * SDPA at the benchmark's sequence lengths with each backend (flash, cuDNN, efficient),
  * an eager bf16 MiniMax-H3 block written from docs/spec/h3-transformer.md §3.7, with the
    weights h3-bench used (read from the dump directory), at each sequence length;
and checks the eager block's output against h3-bench's block output on the same input
(relative L2). Prints one JSON object on a line starting with "H3REF ".

Usage (normally run by h3-bench): h3_bench_reference.py --dump DIR --seq 34710,37966
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

D, H, HD, FFN, ROT = 5376, 56, 128, 14336, 96
EPS = 1e-5


def timed(fn, reps, warmup=2):
    """Median milliseconds of fn() over reps, CUDA events, after warmup calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def rnd(*shape, scale=1.0):
    return (torch.rand(*shape, device="cuda", dtype=torch.float32) * 2 - 1).mul_(scale).to(torch.bfloat16)


def gemm_peak(reps):
    n = 8192
    a, b = rnd(n, n), rnd(n, n)
    ms = timed(lambda: torch.matmul(a, b), reps, warmup=3)
    return 2 * n ** 3 / ms / 1e9  # TFLOP/s


def linear_shapes(S, reps):
    out = {}
    for name, (N, K) in {"q": (H * HD, D), "out": (D, H * HD), "fc1": (2 * FFN, D), "fc2": (D, FFN)}.items():
        x, w = rnd(S, K), rnd(N, K, scale=0.02)
        ms = timed(lambda: F.linear(x, w), reps)
        out[name] = {"ms": ms, "tflops": 2 * S * N * K / ms / 1e9}
        del x, w
    return out


def sdpa_backends(S, reps):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = rnd(1, H, S, HD, scale=3.5)
    k = rnd(1, H, S, HD, scale=1.7)
    v = rnd(1, H, S, HD)
    flops = 4 * S * S * H * HD
    out = {}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                ms = timed(lambda: F.scaled_dot_product_attention(q, k, v), reps)
            out[name] = {"ms": ms, "tflops": flops / ms / 1e9}
        except Exception as e:  # a backend this build or GPU lacks
            out[name] = {"error": str(e).splitlines()[0][:200]}
    return out


def sdpa_vae(reps, S=1797, heads=32, hd=64):
    """SDPA at the video VAE's ViT tile (one tile of S rows, heads x hd, fp16, scale 1/sqrt(hd)), each backend:
    what h3-bench --attention only sets the head_dim-64 kernels against."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    f16 = lambda x: x.to(torch.float16)
    q, k, v = f16(rnd(1, heads, S, hd, scale=3.5)), f16(rnd(1, heads, S, hd, scale=1.7)), f16(rnd(1, heads, S, hd))
    flops = 4 * S * S * heads * hd
    out = {}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                ms = timed(lambda: F.scaled_dot_product_attention(q, k, v), reps)
            out[name] = {"ms": ms, "tflops": flops / ms / 1e9}
        except Exception as e:  # a backend this build or GPU lacks
            out[name] = {"error": str(e).splitlines()[0][:200]}
    return out


def load_bf16(path, shape):
    a = np.fromfile(path, dtype=np.int16)
    return torch.from_numpy(a).view(torch.bfloat16).reshape(shape).cuda()


def load_f32(path, shape):
    return torch.from_numpy(np.fromfile(path, dtype=np.float32)).reshape(shape).cuda()


def load_block(dump):
    j = lambda n: os.path.join(dump, n)
    W = {
        "wq": load_bf16(j("wq.bin"), (H * HD, D)), "wk": load_bf16(j("wk.bin"), (H * HD, D)),
        "wv": load_bf16(j("wv.bin"), (H * HD, D)), "wo": load_bf16(j("wo.bin"), (D, H * HD)),
        "w1": load_bf16(j("w1.bin"), (2 * FFN, D)), "w2": load_bf16(j("w2.bin"), (D, FFN)),
        "norm1": load_bf16(j("norm1.bin"), (D,)), "norm2": load_bf16(j("norm2.bin"), (D,)),
        "norm_q": load_bf16(j("norm_q.bin"), (HD,)), "norm_k": load_bf16(j("norm_k.bin"), (HD,)),
        "tables": load_bf16(j("tables.bin"), (6, -1, D)),  # sh1 sc1 g1 sh2 sc2 g2, each [T, D]
    }
    return W


def rope(x, cos, sin):
    """Rotate-half RoPE on channels [0, 96) of every head; x [S, H, 128], cos/sin [S, 96]."""
    r, p = x[..., :ROT], x[..., ROT:]
    x1, x2 = r[..., :ROT // 2], r[..., ROT // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    r = r * cos[:, None, :] + rot * sin[:, None, :]
    return torch.cat([r, p], dim=-1)


def h3_block(X, W, sel, cos, sin):
    """One MiniMax-H3 main block, eager bf16 (docs/spec/h3-transformer.md §3.7)."""
    S = X.shape[0]
    sh1, sc1, g1, sh2, sc2, g2 = (W["tables"][i][sel] for i in range(6))
    h = F.rms_norm(X, (D,), W["norm1"], EPS) * (1 + sc1) + sh1
    q = F.rms_norm(F.linear(h, W["wq"]).view(S, H, HD), (HD,), W["norm_q"], EPS)
    k = F.rms_norm(F.linear(h, W["wk"]).view(S, H, HD), (HD,), W["norm_k"], EPS)
    v = F.linear(h, W["wv"]).view(S, H, HD)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])
    o = o[0].transpose(0, 1).reshape(S, H * HD)
    X = X + g1 * F.linear(o, W["wo"])
    h = F.rms_norm(X, (D,), W["norm2"], EPS) * (1 + sc2) + sh2
    value, gate = F.linear(h, W["w1"]).chunk(2, dim=-1)
    return X + g2 * F.linear(value * F.silu(gate), W["w2"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True, help="directory with h3-bench's block weights and tensors")
    ap.add_argument("--seq", default="34710,37966")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    seqs = [int(s) for s in args.seq.split(",")]
    torch.backends.cuda.matmul.allow_tf32 = False
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    t0 = time.time()
    res["gemm_peak_tflops"] = gemm_peak(20)
    res["linear"] = linear_shapes(seqs[0], args.reps)
    res["sdpa"] = {str(S): sdpa_backends(S, args.reps) for S in seqs}

    meta = json.load(open(os.path.join(args.dump, "meta.json")))
    W = load_block(args.dump)
    res["block"] = {}
    for S in seqs:
        X = rnd(S, D)
        sel = torch.randint(0, W["tables"].shape[1], (S,), device="cuda")
        ang = torch.rand(S, ROT, device="cuda") * 6.28
        cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        with torch.no_grad():
            ms = timed(lambda: h3_block(X, W, sel, cos, sin), args.reps, warmup=1)
        flops = 770703360 * S + 4 * S * S * H * HD
        res["block"][str(S)] = {"ms": ms, "tflops": flops / ms / 1e9}
        del X, sel, cos, sin
        torch.cuda.empty_cache()

    # parity: the eager block on h3-bench's input against h3-bench's output
    S = meta["S"]
    X0 = load_bf16(os.path.join(args.dump, "x_in.bin"), (S, D))
    X1 = load_bf16(os.path.join(args.dump, "x_out.bin"), (S, D))
    sel = torch.from_numpy(np.fromfile(os.path.join(args.dump, "sel.bin"), dtype=np.int32)).long().cuda()
    cos = load_f32(os.path.join(args.dump, "cos.bin"), (S, ROT)).to(torch.bfloat16)
    sin = load_f32(os.path.join(args.dump, "sin.bin"), (S, ROT)).to(torch.bfloat16)
    with torch.no_grad():
        ref = h3_block(X0, W, sel, cos, sin).float()
        # the block's update, X1 - X0, is what the kernels computed; X0 itself is shared
        d_ours, d_ref = X1.float() - X0.float(), ref - X0.float()
        res["parity"] = {
            "S": S,
            "rel_l2_block_output": ((X1.float() - ref).norm() / ref.norm()).item(),
            "rel_l2_block_update": ((d_ours - d_ref).norm() / d_ref.norm()).item(),
        }
    res["seconds"] = time.time() - t0
    print("H3REF " + json.dumps(res), flush=True)


if __name__ == "__main__":
    sys.exit(main())
