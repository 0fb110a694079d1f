#!/usr/bin/env python3
"""Eager PyTorch reference of the MiniMax-H3 VAE decoders for h3-bench --vae.

Written from docs/spec/h3-vaes.md, not from diffusers:
  video (§3.5-§3.8): per temporal window of 7 latents (5-frame cross-fade) and
    per 256-px spatial tile (linear blends, diffusers' stitch order), the ViT
    decoder with the official fp16 recipe: fp16 Linear weights, fp32 residual
    stream, norms and layer scales, fp16 SDPA (torch picks flash/cuDNN/efficient),
    fp16 tiles and blends. Tile by tile, as diffusers decodes.
  audio (§4.3-§4.4): BigVGAN in fp32 (weight norm folded once, anti-aliased
    SnakeBeta from conv_transpose1d/conv1d), stereo as batch 2.

Reads h3-bench's dump (--dump DIR): vae/ and audio_vae/ (config.json +
random float32 safetensors), the latents and our outputs. Times each decode with
torch.cuda.synchronize() wall time (median after a warm-up) and prints one line
"H3VAE {json}" with ms and the relative L2 of ours against torch.
"""
import argparse
import json
import math
import os
import sys
import time

import mmap
import statistics
import warnings

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I32": torch.int32, "I64": torch.int64}
DEV = "cuda"


def read_safetensors(path):
    """name -> CPU tensor over a read-only mmap of the file (no numpy, no safetensors package needed): the
    format is an 8-byte little-endian header length, the JSON header, then the raw data."""
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


def gpu(a, dtype):
    return a.to(DEV).to(dtype)


def rel_l2(ours, ref):
    ours, ref = ours.double(), ref.double()
    return float((ours - ref).norm() / ref.norm())


def timed(fn, reps):
    fn()  # warm-up
    torch.cuda.synchronize()
    ts = []
    out = None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(statistics.median(ts)), ts, out


# ---- video VAE ---------------------------------------------------------------------------------

class Video:
    def __init__(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        st = read_safetensors(os.path.join(d, "diffusion_pytorch_model.safetensors"))
        h16, f32 = torch.float16, torch.float32
        self.mean = torch.tensor(cfg["latents_mean"], dtype=f32, device=DEV)
        self.std = torch.tensor(cfg["latents_std"], dtype=f32, device=DEV)
        self.heads, self.hd = cfg["decoder_num_attention_heads"], cfg["decoder_attention_head_dim"]
        self.eps = cfg["decoder_norm_eps"]
        self.rot = int(self.hd * cfg["decoder_rope_dim_ratio"])
        self.theta = cfg["decoder_rope_theta"]
        C = cfg["latent_channels"]
        self.pq_w = gpu(st["post_quant_conv.weight"].reshape(C, C), h16)
        self.pq_b = gpu(st["post_quant_conv.bias"], h16)
        self.in_w, self.in_b = gpu(st["decoder.proj_in.weight"], h16), gpu(st["decoder.proj_in.bias"], h16)
        self.reg = gpu(st["decoder.register_tokens"][0], f32)
        self.no_w, self.no_b = gpu(st["decoder.norm_out.weight"], f32), gpu(st["decoder.norm_out.bias"], f32)
        self.out_w, self.out_b = gpu(st["decoder.proj_out.weight"], h16), gpu(st["decoder.proj_out.bias"], h16)
        self.blocks = []
        for i in range(cfg["decoder_num_layers"]):
            p = f"decoder.transformer_blocks.{i}."
            b = {k: gpu(st[p + k], f32) for k in ("norm1.weight", "norm2.weight", "scale1", "scale2")}
            for k in ("attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "ff.net.0.proj", "ff.net.2"):
                b[k + ".w"] = gpu(st[p + k + ".weight"], h16)
                b[k + ".b"] = gpu(st[p + k + ".bias"], h16)
            self.blocks.append(b)
        self.rope_cache = {}

    def rope(self, t, h, w):
        """cos/sin [S, rot] fp32 for a t×h×w tile plus 5 suffix tokens at (0,0,0) (§3.5 step 5)."""
        key = (t, h, w)
        if key not in self.rope_cache:
            nf = self.rot // 6
            inv = 1.0 / (self.theta ** torch.arange(0, 1, 6 / self.rot, dtype=torch.float32, device=DEV))[:nf]
            grids = [2 * (torch.arange(n, dtype=torch.float32, device=DEV) + 0.5) / n - 1 for n in (t, h, w)]
            pt, py, px = torch.meshgrid(*grids, indexing="ij")
            pos = torch.stack([pt.reshape(-1), py.reshape(-1), px.reshape(-1)], -1)
            pos = torch.cat([pos, torch.zeros(5, 3, device=DEV)], 0)
            ang = (2 * math.pi * pos[:, :, None] * inv[None, None, :]).reshape(pos.shape[0], -1)  # [S, 24]
            ang = torch.cat([ang, ang], -1)
            self.rope_cache[key] = (ang.cos(), ang.sin())
        return self.rope_cache[key]

    def rms(self, x, w=None):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return y * w if w is not None else y

    def apply_rope(self, x, cos, sin):  # x [S, H, hd] fp16; rotation in fp32, back to fp16
        r, half = self.rot, self.rot // 2
        xr = x[..., :r].float()
        rot = torch.cat([-xr[..., half:], xr[..., :half]], -1)
        xr = xr * cos[:, None, :] + rot * sin[:, None, :]
        return torch.cat([xr.to(x.dtype), x[..., r:]], -1)

    def tile(self, z, t, h, w):
        """z [N, 24] fp32 (de-normalized latents of the tile) -> raw tile [3, 4t, 16h, 16w] fp16."""
        N, H, hd = z.shape[0], self.heads, self.hd
        zq = F.linear(z.half(), self.pq_w, self.pq_b)
        e = F.linear(zq, self.in_w, self.in_b)
        x = torch.cat([e.float(), self.reg, torch.zeros(1, e.shape[1], device=DEV)], 0)
        S = x.shape[0]
        cos, sin = self.rope(t, h, w)
        for b in self.blocks:
            a = self.rms(x, b["norm1.weight"]).half()
            q = F.linear(a, b["attn.to_q.w"], b["attn.to_q.b"]).view(S, H, hd)
            k = F.linear(a, b["attn.to_k.w"], b["attn.to_k.b"]).view(S, H, hd)
            v = F.linear(a, b["attn.to_v.w"], b["attn.to_v.b"]).view(S, H, hd)
            q = self.apply_rope(self.rms(q).half(), cos, sin)
            k = self.apply_rope(self.rms(k).half(), cos, sin)
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                               v.transpose(0, 1)[None], scale=1.0 / math.sqrt(hd))
            o = o[0].transpose(0, 1).reshape(S, H * hd)
            x = x + b["scale1"] * F.linear(o, b["attn.to_out.0.w"], b["attn.to_out.0.b"]).float()
            f = self.rms(x, b["norm2.weight"]).half()
            u, g = F.linear(f, b["ff.net.0.proj.w"], b["ff.net.0.proj.b"]).chunk(2, -1)
            x = x + b["scale2"] * F.linear(u * F.silu(g), b["ff.net.2.w"], b["ff.net.2.b"]).float()
        y = F.layer_norm(x[:N], (x.shape[1],), self.no_w, self.no_b, self.eps).half()
        y = F.linear(y, self.out_w, self.out_b)  # [N, 3·4·16·16]
        return y.view(t, h, w, 3, 4, 16, 16).permute(3, 0, 4, 1, 5, 2, 6).reshape(3, 4 * t, 16 * h, 16 * w)


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
    la = a.shape[dim]
    head = a.narrow(dim, la - e, e) * (1 - w) + b.narrow(dim, 0, e) * w
    out.narrow(dim, 0, e).copy_(head)
    return out


def decode_window(m, z):
    """z [24, 7, Hl, Wl] de-normalized -> [3, 28, 16Hl, 16Wl] fp16, tiled and stitched (§3.7)."""
    T, Hl, Wl = z.shape[1:]
    ys, th, ovy = split_tiles(16 * Hl)
    xs, tw, ovx = split_tiles(16 * Wl)
    tl_h, tl_w = th // 16, tw // 16
    raw = [[None] * len(xs) for _ in ys]
    for i, y0 in enumerate(ys):
        for j, x0 in enumerate(xs):
            zt = z[:, :, y0 // 16: y0 // 16 + tl_h, x0 // 16: x0 // 16 + tl_w]
            raw[i][j] = m.tile(zt.permute(1, 2, 3, 0).reshape(-1, z.shape[0]), T, tl_h, tl_w)
    rows = []
    for i in range(len(ys)):
        row = []
        for j in range(len(xs)):
            t = raw[i][j]
            if i > 0:
                t = blend(raw[i - 1][j], t, ovy[i - 1], 2)
            if j > 0:
                t = blend(raw[i][j - 1], t, ovx[j - 1], 3)
            hh = th - ovy[i] if i < len(ys) - 1 else th
            ww = tw - ovx[j] if j < len(xs) - 1 else tw
            row.append(t[:, :, :hh, :ww])
        rows.append(torch.cat(row, 3))
    return torch.cat(rows, 2)


def decode_video(m, lat):
    """lat [24, T, Hl, Wl] normalized fp32 -> [3, F, H, W] fp16 (§3.6)."""
    z = lat * m.std[:, None, None, None] + m.mean[:, None, None, None]
    T = z.shape[1]
    n = (T + 3) // 5 - 1
    out, overlap = [], None
    for i in range(n):
        clip = decode_window(m, z[:, 5 * i: 5 * i + 7])
        c0 = clip[:, 3:20]
        if overlap is not None:
            c0 = blend(overlap, c0, 5, 1)
        out.append(c0)
        overlap = clip[:, 23:28]
    out.append(overlap)
    return torch.cat(out, 1)


# ---- audio VAE ---------------------------------------------------------------------------------

class Audio:
    def __init__(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        st = read_safetensors(os.path.join(d, "diffusion_pytorch_model.safetensors"))
        f32 = torch.float32
        self.mean = torch.tensor(cfg["latents_mean"], dtype=f32, device=DEV)[None, :, None]
        self.std = torch.tensor(cfg["latents_std"], dtype=f32, device=DEV)[None, :, None]
        self.rates, self.kernels = cfg["decoder_rates"], cfg["decoder_kernel_sizes"]
        self.rk, self.dil = cfg["resblock_kernel_sizes"], cfg["resblock_dilation_sizes"]
        t = lambda k: gpu(st[k], f32)

        def wn(p):  # w = g·v/‖v‖ over every dim but 0
            v, g = t(p + ".weight_v"), t(p + ".weight_g")
            w = v * (g / v.norm(dim=(1, 2), keepdim=True))
            b = t(p + ".bias") if p + ".bias" in st else None
            return w, b

        def act(p, C):
            return (t(p + ".act.alpha").exp().view(1, C, 1), 1.0 / (t(p + ".act.beta").exp().view(1, C, 1) + 1e-9),
                    t(p + ".upsample.filter").view(1, 1, 12).expand(C, 1, 12).contiguous(),
                    t(p + ".downsample.lowpass.filter").view(1, 1, 12).expand(C, 1, 12).contiguous())

        self.in_w, self.in_b = t("dec_in_proj.weight"), t("dec_in_proj.bias")
        self.pre = wn("decoder.conv_pre")
        self.ups, self.res = [], []
        C = cfg["decoder_dim"]
        for s in range(len(self.rates)):
            self.ups.append(wn(f"decoder.ups.{s}.0"))
            C //= 2
            for j in range(len(self.rk)):
                r = s * len(self.rk) + j
                nd = len(self.dil[j])
                blk = {"c1": [wn(f"decoder.resblocks.{r}.convs1.{i}") for i in range(nd)],
                       "c2": [wn(f"decoder.resblocks.{r}.convs2.{i}") for i in range(nd)],
                       "a": [act(f"decoder.resblocks.{r}.activations.{a}", C) for a in range(2 * nd)]}
                self.res.append(blk)
        self.post_act = act("decoder.activation_post", C)
        self.post = wn("decoder.conv_post")

    @staticmethod
    def activation(x, a):
        """Anti-aliased SnakeBeta (§4.3): up ×2, snake, down ×2."""
        alpha, inv_beta, fu, fd = a
        C, L = x.shape[1], x.shape[2]
        y = 2 * F.conv_transpose1d(F.pad(x, (5, 5), mode="replicate"), fu, stride=2, groups=C)[..., 15:15 + 2 * L]
        y = y + inv_beta * torch.sin(y * alpha).pow(2)
        return F.conv1d(F.pad(y, (5, 6), mode="replicate"), fd, stride=2, groups=C)

    def amp(self, x, blk, K, dils):
        for i, d in enumerate(dils):
            t = self.activation(x, blk["a"][2 * i])
            t = F.conv1d(t, *blk["c1"][i], padding=d * (K - 1) // 2, dilation=d)
            t = self.activation(t, blk["a"][2 * i + 1])
            t = F.conv1d(t, *blk["c2"][i], padding=(K - 1) // 2)
            x = x + t
        return x

    def decode(self, lat):
        z = lat * self.std + self.mean
        x = F.conv1d(z, self.in_w, self.in_b)
        x = F.conv1d(x, *self.pre, padding=3)
        nk = len(self.rk)
        for s, (u, k) in enumerate(zip(self.rates, self.kernels)):
            x = F.conv_transpose1d(x, *self.ups[s], stride=u, padding=(k - u) // 2)
            acc = None
            for j in range(nk):
                y = self.amp(x, self.res[s * nk + j], self.rk[j], self.dil[j])
                acc = y if acc is None else acc + y
            x = acc / nk
        x = self.activation(x, self.post_act)
        x = F.conv1d(x, self.post[0], None, padding=3)
        return x.clamp(-1, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--skip-video", action="store_true")
    args = ap.parse_args()
    d = args.dump
    torch.backends.cuda.matmul.allow_tf32 = False
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    print(f"torch {torch.__version__} on {res['gpu']}", flush=True)
    with torch.inference_mode():
        # audio: strict fp32 (the official decode: fp32, no autocast), and with torch's default TF32 convs
        a = Audio(os.path.join(d, "audio_vae"))
        lat = gpu(read_safetensors(os.path.join(d, "audio_latents.safetensors"))["latents"], torch.float32)
        ours = gpu(read_safetensors(os.path.join(d, "audio_ours.safetensors"))["audio"], torch.float32)
        torch.backends.cudnn.allow_tf32 = True
        ms_tf32, _, out_tf32 = timed(lambda: a.decode(lat), 3 * args.reps)
        torch.backends.cudnn.allow_tf32 = False
        ms, ts, out = timed(lambda: a.decode(lat), 3 * args.reps)
        out = out[:, 0]
        res["audio"] = {"ms": ms, "ms_tf32": ms_tf32, "rel_l2": rel_l2(ours, out),
                        "rel_l2_tf32": rel_l2(ours, out_tf32[:, 0]), "samples": out.shape[1],
                        "clipped": float((out.abs() >= 1).float().mean()), "rms": float(out.pow(2).mean().sqrt())}
        print(f"audio: {ms:.2f} ms fp32 ({ms_tf32:.2f} ms with TF32 convs), rel L2 ours/torch {res['audio']['rel_l2']:.2e}"
              f" (vs TF32 {res['audio']['rel_l2_tf32']:.2e}), rms {res['audio']['rms']:.3f}, clipped "
              f"{100 * res['audio']['clipped']:.2f}%", flush=True)
        del a
        if not args.skip_video:
            t0 = time.perf_counter()
            m = Video(os.path.join(d, "vae"))
            print(f"video: weights loaded in {time.perf_counter() - t0:.1f} s", flush=True)
            lat = gpu(read_safetensors(os.path.join(d, "vae_latents.safetensors"))["latents"], torch.float32)
            ms, ts, out = timed(lambda: decode_video(m, lat), args.reps)
            ours = read_safetensors(os.path.join(d, "vae_ours.safetensors"))["video"]
            ours = ours.to(DEV)
            res["video"] = {"ms": ms, "reps_ms": ts, "shape": list(out.shape), "rel_l2": rel_l2(ours, out),
                            "max_abs": float((ours - out.float()).abs().max()), "rms": float(out.float().pow(2).mean().sqrt())}
            print(f"video: {ms:.1f} ms (reps {', '.join(f'{t:.0f}' for t in ts)}), output {list(out.shape)}, rel L2 "
                  f"ours/torch {res['video']['rel_l2']:.2e}, max |diff| {res['video']['max_abs']:.3g}, rms "
                  f"{res['video']['rms']:.3f}; peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB",
                  flush=True)
            # per-tile profile of the eager tile forward (where torch's time goes)
            z = lat[:, :7, :16, :16] * m.std[:, None, None, None] + m.mean[:, None, None, None]
            tok = z.permute(1, 2, 3, 0).reshape(-1, 24)
            tms, _, _ = timed(lambda: m.tile(tok, 7, 16, 16), 5)
            res["video"]["tile_ms"] = tms
            print(f"video: one tile forward {tms:.2f} ms (x196 = {196 * tms / 1e3:.2f} s)", flush=True)
    print("H3VAE " + json.dumps(res), flush=True)


if __name__ == "__main__":
    sys.exit(main())
