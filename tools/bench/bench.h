/* bench.h - what every h3-bench section shares: the options, the backend,
 * random tensors, CUDA-event timing, the PyTorch reference scripts and the
 * optional PERFORMANCE.md rows; then the sections themselves, one file each.
 *
 * Every section runs on one CUDA backend (B, device 0) at the release's
 * shapes; main.c parses the options, creates B and calls the sections in
 * order. Random values come from one seed counter (next_seed), so a section
 * draws the same values whichever sections ran before it in the same order. */
#ifndef H3_BENCH_H
#define H3_BENCH_H

#include <json-glib/json-glib.h>
#include <stdint.h>

#include "backend/h3_backend.h"
#include "model/h3_dit.h"
#include "parallel/h3_comm.h"

/* The release's main block (docs/spec/h3-transformer.md §3.7). */
#define D 5376
#define NH 56
#define HD 128
#define INNER (NH * HD)
#define FFN 14336
#define ROT 96
#define TROWS 6  /* AdaLN table rows: 3 modalities × 2 timesteps */
#define S1 34710 /* 1280×736×124, L = 256 */
#define S2 37966 /* 1344×768×124 */
#define LINEAR_FLOP_PER_TOKEN 770703360.0

typedef struct bench_options {
    int blocks, reps, forward_reps;
    int vsa;           /* --vsa: 0 off, 1 on (default), 2 only */
    int vae, vae_reps; /* --vae: 0 off, 1 on (default), 2 only, 3 audio (only the audio decoder and its
                          profile); --vae-reps (default 2) */
    int fl2va;         /* --fl2va: 0 off, 1 on (default), 2 only: a keyframe's vision tower, VAE encode, surcharge */
    int attn_only;     /* --attention only: every dense attention kernel and torch SDPA, nothing else */
    int breakdown_only; /* --breakdown only: the block's ops in the block, alone and after an L2 flush */
    int forward;       /* --forward: 0 off, 1 on (default), 2 only: h3_dit_forward itself */
    int stream;        /* --stream: 0 off (default), 1 on, 2 only: memory=stream against resident (stream.c) */
    double max_pinned_gib; /* --max-pinned-memory GIB: stream.c's pin budget (0: h3's default, half the host) */
    int devices[H3_COMM_MAX_RANKS], n_devices; /* --devices LIST (default "0"): the forward's ranks */
    int tp_sweep;      /* --tp-sweep: the forward at every valid degree up to the device count */
    int tp_project[8], n_tp_project; /* --tp-project LIST: one rank's share of these TP degrees on the first
                                        device, collectives replaced by device copies (a projection) */
    double link_gbps;  /* --link-gbps: the all-reduce bus bandwidth the projection assumes (GB/s) */
    int fwd_vsa;       /* --backend fa|vsa: the forward's attention (vsa: VSA-H3, sparsity 0.9) */
    int fwd_tp;        /* not the default single-GPU forward: the tensor-parallel path (bench_tp_forward) */
    int attention_variant; /* --attention-variant: an h3_cuda_attention_variant; 0 AUTO, the backend's default */
    int vsa_pipelined;     /* --vsa-pipelined 0|1|2: the Hopper VSA kernel's consumer; 0, the default */
    int vsa_smooth;        /* --vsa-lists smooth: q and k with a video model's locality (vsa.c); random by default */
    int fp8;               /* --fp8: 0 off (default), 1 on, 2 only: fp8 against bf16 (fp8.c) */
    const char *commit, *reference, *python, *dump_dir;
    const char *perf_md; /* --perf-md FILE: where the run's rows go; NULL (the default): stdout only */
    const char *vsa_anchors; /* --vsa-anchors DIR: FastVideo's TK and Triton VSA kernels (../shared/anchors/vsa
                                copied into the checkout), timed in the same run at the VSA section's shapes */
} bench_options;

/* ---- the harness (bench.c) ------------------------------------------------------------------- */

extern h3_backend *B; /* every section's backend: CUDA device 0, created by main */

uint64_t next_seed(void);
/* Waits for the backend; on a failure prints it with `where` and exits 1. */
void bench_check(const char *where);
/* A failure is printed with `where` and cleared instead; 1 when there was none. */
int bench_ok(const char *where);

/* bf16 tensors, uniform in [-a, a] and in [lo, hi). */
h3_tensor rand2(int64_t rows, int64_t cols, float a);
h3_tensor rand1(int64_t n, float lo, float hi);

typedef void (*bench_fn)(void *ctx);
/* Median milliseconds of `reps` timed runs (at most 64) after `warmup`
 * untimed ones, CUDA events on the backend's stream. A timed run is `calls`
 * calls of fn and counts as one call. A failure is fatal (bench_check). */
double time_ms(const char *what, bench_fn fn, void *ctx, int warmup, int reps, int calls);
/* The same, but a failure gives NAN (bench_ok). */
double time_ms_or_nan(const char *what, bench_fn fn, void *ctx, int warmup, int reps, int calls);

double median(double *t, int n);       /* sorts t; the mean of the middle pair for even n */
double upper_median(double *t, int n); /* sorts t; t[n / 2], the upper one of the pair */
double now_ms(void);             /* monotonic wall clock */
double tflops(double flop, double ms);
/* ||a - ref|| / ||ref|| over n floats (NAN when ref is all zeros). */
double rel_l2(const float *a, const float *ref, size_t n);

/* Runs a PyTorch reference command; its lines that start with `tag` carry
 * one JSON object (returned, or NULL), the rest is echoed as it comes. */
JsonNode *run_python_json(const char *cmd, const char *tag);
/* The whole of cmd's stdout parsed as one JSON document (its stderr passes
 * through); NULL when it fails or prints no JSON. */
JsonNode *run_python_json_document(const char *cmd);
/* A number at a dotted path of a reference's JSON; NAN when absent. */
double ref_num(JsonNode *root, const char *path);
/* `name` in the folder of --reference (the scripts lie side by side). */
void reference_script(const bench_options *o, const char *name, char *path, size_t size);

/* The release's transformer config (from the test data when present, else built in). */
void release_dit_config(h3_dit_config *c);

/* --perf-md: "YYYY-MM-DD HH:MM" in UTC, a table row's first cell. */
void perf_date(char *buf, size_t size);
/* Appends `row` to the file; 0 on failure. */
int perf_append(const char *path, const char *row);
/* Inserts `row` before the line holding `marker`; 0 when the file or the marker is missing. */
int perf_insert_before(const char *path, const char *marker, const char *row);

/* ---- the sections, one file each ------------------------------------------------------------------ */

/* ops.c: the block's GEMMs, its elementwise ops, attention (three kernels), one
 * hand-written block and a forward of --blocks of them at both lengths; then
 * (ops_report) the PyTorch reference on the same shapes and weights, the table
 * and the PERFORMANCE.md row. */
typedef struct ops_result ops_result;
ops_result *ops_bench(const bench_options *o);
void ops_report(const bench_options *o, const ops_result *r, const char *gpu);
double ops_block_ms(const ops_result *r);   /* one block at S1 */
double ops_forward_ms(const ops_result *r); /* --blocks blocks at S1 */
void ops_free(ops_result *r);

/* attention.c: --attention only, every dense attention kernel and torch SDPA. */
void attention_bench(const bench_options *o);

/* forward.c: the product's forward on one GPU; hand: the ops section's result, or NULL. */
int forward_bench(const bench_options *o, const ops_result *hand);

/* forward_tp.c: the product's forward over tensor-parallel ranks (--devices, --tp-sweep, --backend vsa). */
int forward_tp_degree_ok(const bench_options *o); /* refuses a degree the model does not split over */
int forward_tp_bench(const bench_options *o);

/* breakdown.c: the hand-written block's ops in the block, alone and alone after an L2 flush (--breakdown only). */
int breakdown_bench(const bench_options *o);

/* stream.c: the product's forward resident and memory=stream (no cap, 80, 48, 24 GiB): time, overhead,
 * device peak, copy stalls, host pinned/pageable. */
int stream_bench(const bench_options *o);

/* vsa.c: VSA-H3 against our dense attention at the spec's shapes. */
typedef struct vsa_run vsa_run;
vsa_run *vsa_bench(const bench_options *o);
void vsa_report(const bench_options *o, const vsa_run *run, const char *gpu);
void vsa_free(vsa_run *run);

/* vae.c: the VAE decoders against eager torch; vae_profile.c: the video decoder's ViT block op by op;
 * audio_profile.c: the audio decoder op by op at n_latents (the bench's 207). */
void vae_bench(const bench_options *o);
void vae_profile_block(int tiles);
void audio_vae_profile(int n_latents);

/* fl2va.c: the vision tower and VAE encoder of one 1280×736 keyframe against eager torch
 * (h3_fl2va_reference.py), and the seconds an FL2VA clip adds over T2VA; with --perf-md its row goes
 * before the file's "<!-- fl2va-runs -->" line (the table appended first when there is none). */
void fl2va_bench(const bench_options *o, const char *gpu);

/* fp8.c: precision=fp8 against bf16: the block's GEMMs at S1 (the linear, its quantisation and FP8 GEMM
 * alone), and the product's forward at 1 and --blocks blocks in both, with rel-L2 of the velocities. */
void fp8_bench(const bench_options *o);

#endif
