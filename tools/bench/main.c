/* h3-bench - times the CUDA backend at the full MiniMax-H3 configuration and
 * compares it, in the same run, with PyTorch on the same GPU.
 *
 * Random bf16 weights for --blocks of the 50 main blocks (D 5376, 56 × 128,
 * SwiGLU 14336) are drawn on the device; everything is timed with CUDA
 * events on the backend's stream after warm-up and medians are reported.
 * The sections, one file each (bench.h lists them), run in this order:
 *   ops.c         each hot op, the block's GEMMs, attention, one hand-written
 *                 DiT block (block.c) and a forward of them at S = 34,710 and
 *                 37,966, against tools/bench/h3_bench_reference.py;
 *   forward.c     the product's own forward (h3_dit_create_random +
 *                 h3_dit_begin / h3_dit_forward) at 1280×736×124 next to the
 *                 hand-written block (--forward on, the default; only: alone),
 *   forward_tp.c  or the same over tensor-parallel ranks (--devices,
 *                 --tp-sweep, --backend vsa; h3_bench_tp.c);
 *   vsa.c         VSA-H3 against our dense attention (--vsa on|off|only);
 *   vae.c         the VAE decoders against tools/bench/h3_vae_reference.py
 *                 (--vae on|off|only|audio), after vae_profile.c's ViT block and audio_profile.c's decoder op by op;
 *   fl2va.c       one 1280×736 keyframe: the vision tower and the VAE encoder
 *                 against tools/bench/h3_fl2va_reference.py, and what FL2VA
 *                 adds over T2VA (--fl2va on|off|only);
 *   attention.c   alone with --attention only: every dense attention kernel
 *                 and torch SDPA, and the probes of the default one;
 *   breakdown.c   alone with --breakdown only: the block's ops back to back
 *                 against alone (warm and cold L2): the time lost between ops;
 *   fp8.c         precision=fp8 against bf16 (--fp8 on|off|only, default off):
 *                 the block's GEMMs and the forward, times and rel-L2.
 *   stream.c      with --stream on|only: the product's forward resident and
 *                 memory=stream (no cap, 80, 48, 24 GiB), overhead, peaks.
 * Results go to stdout; --perf-md FILE also records the ops and VSA rows in
 * that file's tables (docs/PERFORMANCE.md). This file parses the options and
 * calls the sections. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend/cuda/h3_backend_cuda_bench.h"
#include "bench.h"
#include "h3_bench_tp.h"

static void usage(void) {
    fprintf(stderr,
            "usage: h3-bench [--blocks N (1..50, default 50)] [--reps R] [--forward-reps R] [--commit HASH]\n"
            "                [--perf-md FILE] [--reference SCRIPT|none] [--python PY] [--dump-dir DIR]\n"
            "                [--vsa on|off|only] [--vae on|off|only|audio] [--vae-reps R] [--fl2va on|off|only] [--attention only]\n"
            "                [--breakdown only]\n"
            "                [--forward on|off|only] [--stream on|off|only] [--devices LIST] [--tp-sweep] [--backend fa|vsa]\n"
            "                [--attention-variant NAME] [--vsa-pipelined 0|1|2] [--vsa-lists random|smooth] [--vsa-anchors DIR] [--tp-project LIST [--link-gbps G]]\n"
            "                [--fp8 on|off|only]\n"
            "  --perf-md FILE  also record the run's rows in FILE's tables (docs/PERFORMANCE.md);\n"
            "                  without it (or with \"-\") results go to stdout only\n"
            "  --devices LIST  the forward section's GPUs, one tensor-parallel rank each, NCCL between them\n"
            "                  (\"0,1,2,3\"; default \"0\": today's single-GPU forward next to the hand-written block;\n"
            "                  the count must divide the 56 heads: 1, 2, 4, 7 or 8)\n"
            "  --tp-sweep      the forward at TP1 and every valid degree up to the device count (first devices\n"
            "                  of the list), with the speedup and efficiency against TP1\n"
            "  --tp-project LIST  one rank's share of a TP forward at each degree of LIST (\"2,4,8\") on the first\n"
            "                  device, every collective replaced by a device copy of its bytes: a projection, next\n"
            "                  to TP1 measured in the same run, with the bytes each rank all-reduces per forward\n"
            "  --link-gbps G   the all-reduce bus bandwidth the projection assumes, GB/s (default 360)\n"
            "  --backend fa|vsa  the forward's attention: dense (default) or VSA-H3 at sparsity 0.9\n"
            "  --attention-variant NAME  the attention kernel every section uses where it does not force one:\n"
            "                  auto (default), wgmma, wgmma-simple, wgmma-fa3, wgmma-fa3-s2, wgmma-fa3-nopp,\n"
            "                  wgmma-fa3-lazy, wgmma-fa3-n176, wgmma-fa3-n192, mma or generic; wgmma-d64[-n192] is\n"
            "                  auto with the Hopper head_dim-64 kernel (128- or 192-key tiles) for f16/bf16\n"
            "                  head_dim 64 (the video VAE)\n"
            "  --vsa-anchors DIR  FastVideo's ThunderKittens and Triton VSA kernels (../shared/anchors/vsa copied\n"
            "                  into the checkout) timed by DIR/bench_vsa_anchors.py in the same run at the VSA\n"
            "                  section's shapes; the table gets the ratios against them\n"
            "  --vsa-pipelined 0|1|2  the Hopper VSA kernel's consumer: 0 one tile at a time (default),\n"
            "                  1 pipelined, 2 paired\n"
            "  --vsa-lists random|smooth  the VSA section's q and k: random (default), or with a video model's\n"
            "                  locality (random Fourier features of each token's t, y, x), whose neighbouring query\n"
            "                  tiles share most of their top-k lists; the table says how much\n"
            "  --breakdown only  the hand-written block's ops back to back, alone and alone after an L2 flush:\n"
            "                  the time lost between ops\n"
            "  --stream on|off|only  the product's forward of --blocks release blocks resident, then memory=stream\n"
            "                  without a cap and under 80, 48 and 24 GiB: time, overhead against resident, device\n"
            "                  peak, copy stalls, host pinned/pageable (default off: it holds the blocks on the device\n"
            "                  and then in host memory); --max-pinned-memory GIB: its pin budget (default half the host)\n"
            "  --fl2va on|off|only  one 1280x736 keyframe: the vision tower and the VAE encoder against eager\n"
            "                  torch (tools/bench/h3_fl2va_reference.py, same weights, rel-L2), and the seconds an\n"
            "                  FL2VA clip adds over T2VA (text encoder and DiT at both lengths); default on\n"
            "  --fp8 on|off|only  precision=fp8 against bf16 in the same run: the block's GEMMs at S 34710 (bf16,\n"
            "                  the fp8 linear, its quantisation and FP8 GEMM alone, rel-L2), and the forward at\n"
            "                  1280x736x124 with 1 and --blocks blocks in each (times, weight bytes, rel-L2 of\n"
            "                  the velocities); default off\n");
}

/* The names of h3_cuda_attention_variant, as --attention-variant takes them. */
static const struct {
    const char *name;
    h3_cuda_attention_variant variant;
} variants[] = {
    {"auto", H3_CUDA_VARIANT_AUTO},
    {"wgmma", H3_CUDA_VARIANT_WGMMA},
    {"wgmma-simple", H3_CUDA_VARIANT_WGMMA_SIMPLE},
    {"wgmma-fa3", H3_CUDA_VARIANT_WGMMA_FA3},
    {"wgmma-fa3-s2", H3_CUDA_VARIANT_WGMMA_FA3_S2},
    {"wgmma-fa3-nopp", H3_CUDA_VARIANT_WGMMA_FA3_NOPP},
    {"wgmma-fa3-lazy", H3_CUDA_VARIANT_WGMMA_FA3_LAZY},
    {"wgmma-fa3-n176", H3_CUDA_VARIANT_WGMMA_FA3_N176},
    {"wgmma-fa3-n192", H3_CUDA_VARIANT_WGMMA_FA3_N192},
    {"wgmma-d64", H3_CUDA_VARIANT_WGMMA_D64},
    {"wgmma-d64-n192", H3_CUDA_VARIANT_WGMMA_D64_N192},
    {"mma", H3_CUDA_VARIANT_MMA},
    {"generic", H3_CUDA_VARIANT_GENERIC},
};

/* 1 and *out set when name is a variant. */
static int parse_variant(const char *name, int *out) {
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (!strcasecmp(name, variants[i].name)) {
            *out = (int)variants[i].variant;
            return 1;
        }
    return 0;
}

/* on|off|only as 1, 0, 2; -1 for anything else. */
static int parse_section(const char *v) {
    return !strcmp(v, "off") ? 0 : !strcmp(v, "on") ? 1 : !strcmp(v, "only") ? 2 : -1;
}

static void set_defaults(bench_options *o) {
    memset(o, 0, sizeof *o);
    o->blocks = 50;
    o->reps = 5;
    o->forward_reps = 2;
    o->commit = getenv("H3_COMMIT") ? getenv("H3_COMMIT") : "unknown";
    o->perf_md = NULL;
    o->reference = "tools/bench/h3_bench_reference.py";
    o->python = "python3";
    o->dump_dir = "/tmp/h3-bench-dump";
    o->vsa = 1;
    o->vae = 1;
    o->vae_reps = 2;
    o->fl2va = 1;
    o->forward = 1;
    o->link_gbps = 360.0;
}

/* "2,4,8" into o->tp_project; 0 on anything else. */
static int parse_project(bench_options *o, const char *v) {
    char *end;
    o->n_tp_project = 0;
    for (const char *q = v; *q;) {
        long d = strtol(q, &end, 10);
        if (end == q || d < 2 || d > H3_COMM_MAX_RANKS || (*end && *end != ',') || o->n_tp_project == 8) return 0;
        o->tp_project[o->n_tp_project++] = (int)d;
        q = *end ? end + 1 : end;
    }
    return o->n_tp_project > 0;
}

/* One option a with its value v; 0 when either is not understood. */
static int parse_one(bench_options *o, const char *a, const char *v, const char **devices) {
    int n = 0;
    if (!strcmp(a, "--blocks")) o->blocks = atoi(v);
    else if (!strcmp(a, "--reps")) o->reps = atoi(v);
    else if (!strcmp(a, "--forward-reps")) o->forward_reps = atoi(v);
    else if (!strcmp(a, "--commit")) o->commit = v;
    else if (!strcmp(a, "--perf-md")) o->perf_md = strcmp(v, "-") ? v : NULL;
    else if (!strcmp(a, "--reference")) o->reference = v;
    else if (!strcmp(a, "--python")) o->python = v;
    else if (!strcmp(a, "--vsa-anchors")) o->vsa_anchors = v;
    else if (!strcmp(a, "--dump-dir")) o->dump_dir = v;
    else if (!strcmp(a, "--vsa") && (n = parse_section(v)) >= 0) o->vsa = n;
    else if (!strcmp(a, "--vae") && !strcmp(v, "audio")) o->vae = 3; /* the audio decoder alone */
    else if (!strcmp(a, "--vae") && (n = parse_section(v)) >= 0) o->vae = n;
    else if (!strcmp(a, "--vae-reps")) o->vae_reps = atoi(v);
    else if (!strcmp(a, "--fl2va") && (n = parse_section(v)) >= 0) o->fl2va = n;
    else if (!strcmp(a, "--fp8") && (n = parse_section(v)) >= 0) o->fp8 = n;
    else if (!strcmp(a, "--attention") && !strcmp(v, "only")) o->attn_only = 1;
    else if (!strcmp(a, "--breakdown") && !strcmp(v, "only")) o->breakdown_only = 1;
    else if (!strcmp(a, "--forward") && (n = parse_section(v)) >= 0) o->forward = n;
    else if (!strcmp(a, "--stream") && (n = parse_section(v)) >= 0) o->stream = n;
    else if (!strcmp(a, "--max-pinned-memory")) return (o->max_pinned_gib = atof(v)) > 0;
    else if (!strcmp(a, "--devices")) *devices = v;
    else if (!strcmp(a, "--tp-project")) return parse_project(o, v);
    else if (!strcmp(a, "--link-gbps")) return (o->link_gbps = atof(v)) > 0;
    else if (!strcmp(a, "--backend") && (!strcmp(v, "fa") || !strcmp(v, "vsa"))) o->fwd_vsa = !strcmp(v, "vsa");
    else if (!strcmp(a, "--attention-variant") && parse_variant(v, &o->attention_variant)) return 1;
    else if (!strcmp(a, "--vsa-lists") && (!strcmp(v, "random") || !strcmp(v, "smooth")))
        o->vsa_smooth = !strcmp(v, "smooth");
    else if (!strcmp(a, "--vsa-pipelined") && (!strcmp(v, "0") || !strcmp(v, "1") || !strcmp(v, "2")))
        o->vsa_pipelined = atoi(v);
    else return 0;
    return 1;
}

static int parse(int argc, char **argv, bench_options *o) {
    set_defaults(o);
    const char *devices = "0";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tp-sweep")) { /* a flag: no value */
            o->tp_sweep = 1;
            continue;
        }
        if (!v || !parse_one(o, a, v, &devices)) return 0;
        i++;
    }
    h3_status st;
    o->n_devices = h3_bench_parse_devices(devices, o->devices, H3_COMM_MAX_RANKS, &st);
    if (o->n_devices == 0 || o->devices[0] < 0) {
        fprintf(stderr, "h3-bench: --devices: %s\n", o->n_devices ? "GPU ordinals only (cpu:N is for the tests)" : st.message);
        return 0;
    }
    o->fwd_tp = o->tp_sweep || o->fwd_vsa || o->n_devices > 1 || o->devices[0] != 0 || o->n_tp_project;
    return o->blocks >= 1 && o->blocks <= 50 && o->reps >= 1 && o->forward_reps >= 1 && o->vae_reps >= 1 &&
           o->vae_reps <= 16;
}

/* Device 0's backend with the kernels the options choose; 0 on failure. */
static int create_backend(const bench_options *o) {
    char why[256];
    if (h3_cuda_device_count(why, sizeof why) == 0) {
        fprintf(stderr, "h3-bench: no GPU: %s\n", why);
        return 0;
    }
    h3_status st;
    if (h3_backend_cuda_create(0, &B, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: %s\n", st.message);
        return 0;
    }
    if (o->attention_variant) h3_backend_cuda_set_attention_variant(B, (h3_cuda_attention_variant)o->attention_variant);
    if (o->vsa_pipelined) h3_backend_cuda_set_vsa_pipelined(B, o->vsa_pipelined);
    return 1;
}

/* Every section but --attention only, in order. The exit status is 0: a section's failure shows in its
 * output, and the sections after it still run. */
static int run_all(const bench_options *o, const char *gpu) {
    ops_result *ops = ops_bench(o);
    if (o->forward && o->fwd_tp) forward_tp_bench(o); /* over tensor-parallel ranks */
    else if (o->forward) forward_bench(o, ops);      /* the product's forward next to the hand-written one */
    vsa_run *vsa = o->vsa ? vsa_bench(o) : NULL;
    ops_report(o, ops, gpu);
    if (vsa) vsa_report(o, vsa, gpu);
    if (o->vae) vae_bench(o);
    if (o->fl2va) fl2va_bench(o, gpu);
    if (o->fp8) fp8_bench(o);
    if (o->stream) stream_bench(o); /* last: it fills the device and then the host with the blocks */
    vsa_free(vsa);
    ops_free(ops);
    return 0;
}

/* One section alone (--fl2va only, --vae only, --attention only, --vsa only, --stream only, --forward only); -1
 * when none is alone. */
static int run_alone(const bench_options *o, const char *gpu) {
    if (o->fp8 == 2) { /* fp8 against bf16: the GEMMs and the forward, nothing else */
        fp8_bench(o);
        return 0;
    }
    if (o->fl2va == 2) { /* a keyframe's vision tower and VAE encode against eager torch, and the surcharge */
        fl2va_bench(o, gpu);
        return 0;
    }
    if (o->vae >= 2) { /* the VAE decoders (3: the audio one) against eager torch, nothing else */
        vae_bench(o);
        return 0;
    }
    if (o->breakdown_only) /* the block's ops back to back against alone, nothing else */
        return breakdown_bench(o) ? 0 : 1;
    if (o->attn_only) { /* the dense attention kernels and torch SDPA, nothing else */
        attention_bench(o);
        return 0;
    }
    if (o->vsa == 2) { /* VSA-H3 and our dense attention at its shapes, nothing else */
        vsa_run *vsa = vsa_bench(o);
        vsa_report(o, vsa, gpu);
        vsa_free(vsa);
        return 0;
    }
    if (o->stream == 2) /* memory=stream against resident, nothing else */
        return stream_bench(o) ? 0 : 1;
    if (o->forward == 2) /* h3_dit_forward (and the hand-written block), nothing else */
        return (o->fwd_tp ? forward_tp_bench(o) : forward_bench(o, NULL)) ? 0 : 1;
    return -1;
}

int main(int argc, char **argv) {
    bench_options o;
    if (!parse(argc, argv, &o)) {
        usage();
        return 2;
    }
    if (!create_backend(&o)) return 1;
    int forward_runs = o.forward == 2 || (o.forward && o.vae < 2 && o.fl2va != 2 && !o.attn_only && !o.breakdown_only && o.vsa != 2 &&
                                          o.stream != 2 && o.fp8 != 2);
    if (forward_runs && o.fwd_tp && !forward_tp_degree_ok(&o)) {
        h3_backend_destroy(B);
        return 2;
    }
    const char *gpu = h3_backend_cuda_device_name(B);
    printf("h3-bench: %s (sm_%d), %d blocks, commit %s\n", gpu, h3_backend_cuda_sm(B), o.blocks, o.commit);
    int rc = run_alone(&o, gpu);
    if (rc < 0) rc = run_all(&o, gpu);
    h3_backend_destroy(B);
    return rc;
}
