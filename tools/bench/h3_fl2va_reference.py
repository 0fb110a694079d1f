#!/usr/bin/env python3
"""Eager PyTorch reference of the FL2VA keyframe path for h3-bench --fl2va.

Written from docs/spec/h3-conditioner.md §5.3 (transformers Qwen3VLVisionModel) and
docs/spec/h3-vaes.md §3.4, §3.7, §3.10 (diffusers AutoencoderKLMiniMaxH3.encode), following our
h3core/model/h3_vision.c and h3_video_vae_encoder.c for the exact structure:
  vision tower, bf16: patch embedding as a linear, the bilinear position-embedding interpolation
    (4 taps, bf16 weights, summed in bf16, permuted into merge-window order), 2-D rotary applied in
    fp32, 27 pre-LN blocks (LayerNorm, qkv, SDPA bidirectional over the image, proj, GELU-tanh MLP),
    the DeepStack mergers after blocks 8/16/24 (post-shuffle LayerNorm) and the final merger;
  VAE encoder of one keyframe: ImageNet normalisation, 256-px tiles with 64-px minimum overlap,
    per tile conv_in, 6 levels of ResnetBlock3d (GroupNorm per frame + SiLU, 3x3x3 convs with reflect
    spatial padding and 2 causal zero frames) and Downsample3d (reflect pad right/bottom, stride),
    norm_out + SiLU, conv_out, quant_conv; the tile moments stitched in latent space (diffusers'
    blend order). Three variants: bf16 with full conv3d (what eager diffusers in bf16 does), bf16
    with the last temporal tap only as conv2d (the same arithmetic our encoder does for one frame),
    and fp32 with TF32 convs (the official encode recipe).

Reads h3-bench's dump (--dump DIR): vision_io/vision_weights.safetensors and
vae_io/vae_encoder_weights.safetensors (the very values our side drew), times each computation as
synchronised wall time (median after a warm-up, host input to host output like our calls) and
prints one line "H3FL2VA {json}" with ms and the relative L2 of ours against torch. Every part
catches its own failure and reports it; the JSON line is always printed.
"""
import argparse
import json
import math
import mmap
import os
import statistics
import sys
import time
import traceback
import warnings

try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # no torch: say so in the protocol line, not in a traceback
    print(f"h3_fl2va_reference: cannot import torch ({e})", flush=True)
    print("H3FL2VA " + json.dumps({"error": f"cannot import torch: {e}"}), flush=True)
    sys.exit(1)

DEV = "cuda"
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16}


def log(msg):
    print(msg, flush=True)


def read_safetensors(path):
    """name -> CPU tensor over a read-only mmap of the file (no safetensors package needed)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "non-writable buffer": we only read
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            dt = DTYPES[info["dtype"]]
            count = (b - a) // torch.empty(0, dtype=dt).element_size()
            t = torch.frombuffer(mm, dtype=dt, count=count, offset=8 + n + a) if count else torch.empty(0, dtype=dt)
            out[name] = t.reshape(info["shape"])
    return out


def rel_l2(ours, ref):
    ours, ref = ours.double().cpu(), ref.double().cpu()
    den = float(ref.norm())
    return float((ours - ref).norm()) / den if den > 0 else float("nan")


def timed(fn, reps):
    out = fn()  # warm-up
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(statistics.median(ts)), ts, out


# ---- the vision tower ------------------------------------------------------------------------------

BLOCK_KEYS = ["norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
              "norm2.weight", "norm2.bias", "mlp.linear_fc1.weight", "mlp.linear_fc1.bias", "mlp.linear_fc2.weight",
              "mlp.linear_fc2.bias"]
MERGER_KEYS = ["norm.weight", "norm.bias", "linear_fc1.weight", "linear_fc1.bias", "linear_fc2.weight",
               "linear_fc2.bias"]
LN_EPS = 1e-6


class Vision:
    def __init__(self, w, cfg):
        self.C, self.H = cfg["hidden_size"], cfg["num_heads"]
        self.dh = self.C // self.H
        self.depth, self.m = cfg["depth"], cfg["spatial_merge_size"]
        self.ds_idx = list(cfg.get("deepstack_visual_indexes", []))
        self.side = math.isqrt(cfg["num_position_embeddings"])
        theta = float(cfg.get("rope_parameters", {}).get("rope_theta", 10000.0))
        P = "model.visual."

        def g(n):
            return w[P + n].to(DEV).to(torch.bfloat16)

        self.patch_w = g("patch_embed.proj.weight").reshape(self.C, -1)
        self.patch_b = g("patch_embed.proj.bias")
        self.pos = g("pos_embed.weight")
        self.blocks = [{k: g(f"blocks.{l}.{k}") for k in BLOCK_KEYS} for l in range(self.depth)]
        self.merger = {k: g(f"merger.{k}") for k in MERGER_KEYS}
        self.ds = [{k: g(f"deepstack_merger_list.{i}.{k}") for k in MERGER_KEYS} for i in range(len(self.ds_idx))]
        dim = self.dh // 2  # VisionRotaryEmbedding(head_dim // 2), fp32 on the CPU
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))

    def pos_embed(self, gh, gw):
        """fast_pos_embed_interpolate: linspace on the CPU in fp32, 4 taps with bf16 weights summed in bf16."""
        s, m = self.side, self.m
        h, w = torch.linspace(0, s - 1, gh), torch.linspace(0, s - 1, gw)
        hf, wf = h.int(), w.int()
        hc, wc = (hf + 1).clip(max=s - 1), (wf + 1).clip(max=s - 1)
        dh, dw = h - hf, w - wf
        idx = torch.stack([(hf[:, None] * s + wf[None]).flatten(), (hf[:, None] * s + wc[None]).flatten(),
                           (hc[:, None] * s + wf[None]).flatten(), (hc[:, None] * s + wc[None]).flatten()])
        wts = torch.stack([((1 - dh)[:, None] * (1 - dw)[None]).flatten(), ((1 - dh)[:, None] * dw[None]).flatten(),
                           (dh[:, None] * (1 - dw)[None]).flatten(), (dh[:, None] * dw[None]).flatten()])
        idx, wts = idx.long().to(DEV), wts.to(torch.bfloat16).to(DEV)
        pe = self.pos[idx] * wts[:, :, None]
        pe = pe[0] + pe[1] + pe[2] + pe[3]
        return pe.view(gh // m, m, gw // m, m, -1).permute(0, 2, 1, 3, 4).reshape(gh * gw, -1)

    def rotary(self, gh, gw):
        """rot_pos_emb in merge-window order: angles [row·f, col·f], duplicated; cos/sin in fp32."""
        m = self.m
        br, bc, ir = torch.arange(gh // m), torch.arange(gw // m), torch.arange(m)
        row = (br[:, None, None, None] * m + ir[None, None, :, None]).expand(gh // m, gw // m, m, m).reshape(-1)
        col = (bc[None, :, None, None] * m + ir[None, None, None, :]).expand(gh // m, gw // m, m, m).reshape(-1)
        emb = torch.cat([row[:, None].float() * self.inv_freq[None], col[:, None].float() * self.inv_freq[None]], -1)
        emb = torch.cat([emb, emb], -1).to(DEV)
        return emb.cos(), emb.sin()

    @staticmethod
    def rope(x, cos, sin):  # x [n, H, dh] bf16; the rotation in fp32, back to bf16
        xf = x.float()
        half = xf.shape[-1] // 2
        rot = torch.cat([-xf[..., half:], xf[..., :half]], -1)
        return (xf * cos[:, None] + rot * sin[:, None]).to(x.dtype)

    def block(self, x, b, cos, sin):
        n, C, H, dh = x.shape[0], self.C, self.H, self.dh
        h = F.layer_norm(x, (C,), b["norm1.weight"], b["norm1.bias"], LN_EPS)
        q, k, v = F.linear(h, b["attn.qkv.weight"], b["attn.qkv.bias"]).view(n, 3, H, dh).unbind(1)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])
        o = o[0].transpose(0, 1).reshape(n, C)
        x = x + F.linear(o, b["attn.proj.weight"], b["attn.proj.bias"])
        h = F.layer_norm(x, (C,), b["norm2.weight"], b["norm2.bias"], LN_EPS)
        h = F.gelu(F.linear(h, b["mlp.linear_fc1.weight"], b["mlp.linear_fc1.bias"]), approximate="tanh")
        return x + F.linear(h, b["mlp.linear_fc2.weight"], b["mlp.linear_fc2.bias"])

    def merge(self, x, w, post):
        W = self.C * self.m * self.m
        if post:
            t = F.layer_norm(x.reshape(-1, W), (W,), w["norm.weight"], w["norm.bias"], LN_EPS)
        else:
            t = F.layer_norm(x, (self.C,), w["norm.weight"], w["norm.bias"], LN_EPS).reshape(-1, W)
        t = F.gelu(F.linear(t, w["linear_fc1.weight"], w["linear_fc1.bias"]))  # exact erf
        return F.linear(t, w["linear_fc2.weight"], w["linear_fc2.bias"])

    def forward(self, pix_cpu, grid):
        _, gh, gw = grid
        x = pix_cpu.to(DEV).to(torch.bfloat16)
        x = F.linear(x, self.patch_w, self.patch_b)
        x = x + self.pos_embed(gh, gw)
        cos, sin = self.rotary(gh, gw)
        ds = []
        for l, b in enumerate(self.blocks):
            x = self.block(x, b, cos, sin)
            if l in self.ds_idx:
                ds.append(self.merge(x, self.ds[self.ds_idx.index(l)], True))
        return self.merge(x, self.merger, False), ds


def run_vision(args, res):
    cfg = json.load(open(args.te_config))["vision_config"]
    t0 = time.perf_counter()
    io = read_safetensors(os.path.join(args.dump, "vision_io.safetensors"))
    m = Vision(read_safetensors(os.path.join(args.dump, "vision_weights.safetensors")), cfg)
    log(f"vision: weights loaded in {time.perf_counter() - t0:.1f} s")
    pix = io["pixel_values"].clone()
    grid = [int(v) for v in io["grid_thw"][0].tolist()]
    if grid[0] != 1:
        raise ValueError(f"grid {grid}: only still images")
    ms, ts, (emb, ds) = timed(lambda: m.forward(pix, grid), args.reps)
    ours = io["ours.embeds"]
    r = {"ms": ms, "reps_ms": ts, "tokens": int(emb.shape[0]), "rel_l2": rel_l2(ours, emb)}
    if ds:
        r["rel_l2_deepstack"] = rel_l2(torch.cat([io[f"ours.deepstack.{k}"] for k in range(len(ds))]),
                                       torch.cat([d.float() for d in ds]))
        r["rel_l2_deepstack_each"] = [rel_l2(io[f"ours.deepstack.{k}"], d) for k, d in enumerate(ds)]
    r["rms"] = float(emb.float().pow(2).mean().sqrt())
    res["vision"] = r
    log(f"vision: {ms:.2f} ms (reps {', '.join(f'{t:.1f}' for t in ts)}), {emb.shape[0]} tokens, rel L2 ours/torch "
        f"{r['rel_l2']:.2e}, DeepStack {r.get('rel_l2_deepstack', float('nan')):.2e}, rms {r['rms']:.3f}; peak "
        f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    del m


# ---- the VAE encoder ----------------------------------------------------------------------------

PIXEL_MEAN = (0.485, 0.456, 0.406)
PIXEL_STD = (0.229, 0.224, 0.225)


def split_tiles(length, tile=256, min_ov=64, r=16):
    if tile >= length:
        return [0], length, []
    n = math.ceil(length / tile)
    while tile * n - min_ov * (n - 1) - length < 0:
        n += 1
    ov = [min_ov] * (n - 1)
    slack = tile * n - sum(ov) - length
    for i in range(slack // r):
        ov[i % (n - 1)] += r
    starts = [0]
    for i in range(n - 1):
        starts.append(starts[-1] + tile - ov[i])
    return starts, tile, ov


def blend(a, b, e, dim):
    """b with its first e entries along dim cross-faded from a's last e (weights in b's dtype)."""
    e = min(a.shape[dim], b.shape[dim], e)
    shape = [1] * b.dim()
    shape[dim] = e
    w = (torch.arange(e, device=b.device, dtype=torch.float32) / e).to(b.dtype).view(shape)
    out = b.clone()
    head = a.narrow(dim, a.shape[dim] - e, e) * (1 - w) + b.narrow(dim, 0, e) * w
    out.narrow(dim, 0, e).copy_(head)
    return out


class Encoder:
    def __init__(self, w, cfg, dtype, last_tap):
        self.dtype, self.last_tap = dtype, last_tap
        self.w = {k: v.to(DEV).to(dtype) for k, v in w.items()}
        self.ch = cfg["block_out_channels"]
        self.sd = cfg["spatial_downsample_factors"]
        self.td = cfg["temporal_downsample_factors"]
        self.layers = cfg["layers_per_block"]
        self.groups = cfg.get("norm_num_groups", 32)
        self.eps = cfg.get("norm_eps", 1e-6)
        self.z = cfg["latent_channels"]

    @staticmethod
    def reflect(x, pad):  # x [1, C, T, H, W]; reflect over H and W as a 2-D pad with T folded into channels
        _, C, T, H, W = x.shape
        y = F.pad(x.reshape(1, C * T, H, W), pad, mode="reflect")
        return y.view(1, C, T, y.shape[-2], y.shape[-1])

    def conv(self, x, name, k=3, stride=(1, 1, 1), down=False):
        w, b = self.w[name + ".weight"], self.w[name + ".bias"]
        if k == 1:
            return F.conv3d(x, w, b)
        x = self.reflect(x, (0, 1, 0, 1) if down and stride[1] == 2 else (0, 0, 0, 0) if down else (1, 1, 1, 1))
        if self.last_tap and x.shape[2] == 1:  # one frame meets only the last temporal tap
            return F.conv2d(x[:, :, 0], w[:, :, -1], b, stride=stride[1:])[:, :, None]
        x = F.pad(x, (0, 0, 0, 0, 2, 0))  # two causal zero frames
        return F.conv3d(x, w, b, stride=stride)

    def gn_silu(self, x, name):  # GroupNorm per frame: T folded into the batch
        _, C, T, H, W = x.shape
        y = x.permute(0, 2, 1, 3, 4).reshape(T, C, H, W)
        y = F.group_norm(y, self.groups, self.w[name + ".weight"], self.w[name + ".bias"], self.eps)
        return F.silu(y.reshape(1, T, C, H, W).permute(0, 2, 1, 3, 4))

    def resnet(self, x, p, cin, cout):
        h = self.conv(self.gn_silu(x, p + ".norm1"), p + ".conv1")
        h = self.conv(self.gn_silu(h, p + ".norm2"), p + ".conv2")
        return (self.conv(x, p + ".conv_shortcut", k=1) if cin != cout else x) + h

    def tile(self, x):
        x = self.conv(x, "encoder.conv_in")
        cin = self.ch[0]
        for l, cout in enumerate(self.ch):
            for j in range(self.layers):
                x = self.resnet(x, f"encoder.down_blocks.{l}.resnets.{j}", cin if j == 0 else cout, cout)
            if self.sd[l] * self.td[l] > 1:
                x = self.conv(x, f"encoder.down_blocks.{l}.downsamplers.0.conv",
                              stride=(self.td[l], self.sd[l], self.sd[l]), down=True)
            cin = cout
        x = self.conv(self.gn_silu(x, "encoder.norm_out"), "encoder.conv_out")
        return self.conv(x, "quant_conv", k=1)

    def encode(self, rgb_cpu):
        """uint8 [H, W, 3] on the host -> moments [1, 2z, 1, H/16, W/16] float32 on the host."""
        x = rgb_cpu.to(DEV).permute(2, 0, 1).float() / 255.0
        mean = torch.tensor(PIXEL_MEAN, device=DEV)[:, None, None]
        std = torch.tensor(PIXEL_STD, device=DEV)[:, None, None]
        x = ((x - mean) / std)[None, :, None].to(self.dtype)
        H, W = x.shape[-2:]
        ys, th, ovy = split_tiles(H)
        xs, tw, ovx = split_tiles(W)
        raw = [[self.tile(x[..., y0:y0 + th, x0:x0 + tw]).float() for x0 in xs] for y0 in ys]
        rows = []
        for i in range(len(ys)):
            row = []
            for j in range(len(xs)):
                t = raw[i][j]
                if i > 0:
                    t = blend(raw[i - 1][j], t, ovy[i - 1] // 16, 3)
                if j > 0:
                    t = blend(raw[i][j - 1], t, ovx[j - 1] // 16, 4)
                hh = th // 16 - ovy[i] // 16 if i < len(ys) - 1 else th // 16
                ww = tw // 16 - ovx[j] // 16 if j < len(xs) - 1 else tw // 16
                row.append(t[..., :hh, :ww])
            rows.append(torch.cat(row, 4))
        return torch.cat(rows, 3).cpu()


def run_vae(args, res):
    cfg = json.load(open(args.vae_config))
    io = read_safetensors(os.path.join(args.dump, "vae_io.safetensors"))
    w = read_safetensors(os.path.join(args.dump, "vae_encoder_weights.safetensors"))
    rgb = io["rgb"].clone()
    ours_mean, ours_logvar = io["ours.mean"], io["ours.logvar"]
    res["vae"] = {}
    for key, dtype, last_tap, label in [("bf16", torch.bfloat16, False, "bf16, conv3d with the causal zero frames"),
                                         ("bf16_lasttap", torch.bfloat16, True, "bf16, last temporal tap (conv2d)"),
                                         ("fp32", torch.float32, False, "fp32 with TF32 convs (official)")]:
        try:
            torch.backends.cudnn.allow_tf32 = True  # torch's default: the official encode's convs run in TF32
            enc = Encoder(w, cfg, dtype, last_tap)
            ms, ts, mom = timed(lambda: enc.encode(rgb), args.reps)
            z = enc.z
            mean, logvar = mom[0, :z], mom[0, z:].clamp(-30, 20)
            r = {"ms": ms, "reps_ms": ts, "shape": list(mom.shape), "rel_l2_mean": rel_l2(ours_mean, mean),
                 "rel_l2_logvar": rel_l2(ours_logvar, logvar),
                 "rel_l2": rel_l2(torch.cat([ours_mean.flatten(), ours_logvar.flatten()]),
                                  torch.cat([mean.flatten(), logvar.flatten()])),
                 "rms_mean": float(mean.pow(2).mean().sqrt())}
            res["vae"][key] = r
            log(f"VAE encoder ({label}): {ms:.2f} ms (reps {', '.join(f'{t:.1f}' for t in ts)}), moments "
                f"{list(mom.shape)}, rel L2 ours/torch {r['rel_l2']:.2e} (mean {r['rel_l2_mean']:.2e}, logvar "
                f"{r['rel_l2_logvar']:.2e}), rms(mean) {r['rms_mean']:.3f}")
            del enc
            torch.cuda.empty_cache()
        except Exception as e:
            traceback.print_exc(file=sys.stdout)
            res["vae"][key] = {"error": f"{type(e).__name__}: {e}"}
            log(f"VAE encoder ({label}): FAILED: {type(e).__name__}: {e}")


def clean(v):
    """NaN and infinities as null: the C side parses strict JSON (json-glib) and reads null as missing."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--te-config", required=True, help="text_encoder/config.json (its vision_config)")
    ap.add_argument("--vae-config", required=True, help="vae/config.json")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skip-vision", action="store_true")
    ap.add_argument("--skip-vae", action="store_true")
    args = ap.parse_args()
    res = {"torch": torch.__version__}
    try:
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        res["gpu"] = torch.cuda.get_device_name()
        log(f"torch {torch.__version__} on {res['gpu']}")
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.inference_mode():
            for skip, name, fn in [(args.skip_vision, "vision", run_vision), (args.skip_vae, "vae", run_vae)]:
                if skip:
                    continue
                try:
                    fn(args, res)
                except Exception as e:
                    traceback.print_exc(file=sys.stdout)
                    res[name] = {"error": f"{type(e).__name__}: {e}"}
                    log(f"{name}: FAILED: {type(e).__name__}: {e}")
                torch.cuda.empty_cache()
    except Exception as e:
        traceback.print_exc(file=sys.stdout)
        res["error"] = f"{type(e).__name__}: {e}"
    print("H3FL2VA " + json.dumps(clean(res)), flush=True)
    return 0 if "error" not in res else 1


if __name__ == "__main__":
    sys.exit(main())
