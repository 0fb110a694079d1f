/* test_precision.c - precision=fp8 through the engine on the tiny model
 * (CPU: the float32 emulation of the FP8 linears, backend/cpu/h3_cpu_fp8.c).
 *
 * Measured and printed: rel-L2 and PSNR of fp8's decoded frames and audio,
 * and rel-L2 of its latents, against the float32 run of the same request.
 * The bound is relative, not a number tuned to pass: fp8's difference must
 * stay well below (a quarter of) what the next seed changes in the same
 * outputs, i.e. quantising the linears must perturb the clip far less than
 * changing its content does. Also: fp8 twice gives the same bytes;
 * stats.precision names it; the memory plan counts fp8 weights at their
 * size (1 byte a value + a float32 scale a row) for exactly the linears the
 * loader quantises; the refusals (cuda-f32, a bad value) and the parser;
 * and fp8 with memory=stream (its codes and scales moved to the host and
 * copied back a block ahead) giving fp8 resident's bytes, on one rank and
 * on cpu:2. */
#include <glib.h>
#include <stdint.h>

#include "h3.h"
#include "backend/h3_fp8.h"
#include "model/h3_dit.h"
#include "h3_test.h"
#include "h3_test_capture.h"
#include "h3_test_golden.h"

typedef h3_test_capture capture;

static h3_engine *open_tiny_as(h3_precision p, h3_memory_mode memory, const char *devices, h3_status *st) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CPU;
    o.precision = p;
    o.memory = memory;
    o.devices = devices;
    h3_engine *e = NULL;
    return h3_engine_open(&o, &e, st) == H3_OK ? e : NULL;
}

static h3_engine *open_tiny(h3_precision p, h3_status *st) {
    return open_tiny_as(p, H3_MEMORY_RESIDENT, "auto", st);
}

static double psnr_u8(const uint8_t *a, const uint8_t *b, size_t n) {
    double se = 0;
    for (size_t i = 0; i < n; i++) se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return se > 0 ? 10 * log10(255.0 * 255.0 / (se / (double)n)) : INFINITY;
}

/* Audio PSNR against the reference's own peak. */
static double psnr_f32(const float *a, const float *ref, size_t n) {
    double se = 0, peak = 0;
    for (size_t i = 0; i < n; i++) {
        se += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        if (fabs(ref[i]) > peak) peak = fabs(ref[i]);
    }
    return se > 0 ? 10 * log10(peak * peak / (se / (double)n)) : INFINITY;
}

static double rel_l2_u8(const uint8_t *a, const uint8_t *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct diff {
    double latents, frames, frames_psnr, audio, audio_psnr;
} diff;

static diff compare(const capture *a, const capture *ref) {
    size_t nv = (size_t)ref->plan.num_frames * ref->plan.width * ref->plan.height * 3;
    size_t na = (size_t)(2 * ref->plan.audio_samples);
    diff d = {
        .latents = h3_test_rel_l2(a->latents, ref->latents, ref->n_latents),
        .frames = rel_l2_u8(a->video, ref->video, nv),
        .frames_psnr = psnr_u8(a->video, ref->video, nv),
        .audio = h3_test_rel_l2(a->audio, ref->audio, na),
        .audio_psnr = psnr_f32(a->audio, ref->audio, na),
    };
    return d;
}

static void print_diff(const char *what, const diff *d) {
    printf("%s: latents rel-L2 %.4f; frames rel-L2 %.4f, PSNR %.2f dB; audio rel-L2 %.4f, PSNR %.2f dB\n", what,
           d->latents, d->frames, d->frames_psnr, d->audio, d->audio_psnr);
}

static void test_end_to_end(void) {
    h3_status st = {0};
    h3_engine *f32 = open_tiny(H3_PRECISION_BF16, &st);
    CHECK(f32 != NULL, "open f32: %s", st.message);
    h3_engine *fp8 = open_tiny(H3_PRECISION_FP8, &st);
    CHECK(fp8 != NULL, "open fp8: %s", st.message);
    if (!f32 || !fp8) {
        h3_engine_close(f32);
        h3_engine_close(fp8);
        return;
    }
    h3_stats s8, s32;
    h3_engine_get_stats(fp8, &s8);
    h3_engine_get_stats(f32, &s32);
    printf("stats.precision: '%s' / '%s'\n", s8.precision, s32.precision);
    CHECK(strncmp(s8.precision, "fp8 (e4m3: ", 11) == 0 && strstr(s8.precision, "kept in f32"),
          "fp8 stats: '%s' (the tiny model's narrow linears are kept and said so)", s8.precision);
    CHECK(strcmp(s32.precision, "f32") == 0, "default stats on the CPU: '%s'", s32.precision);

    h3_request r = h3_test_golden_request("e2e_t2va_3steps");
    capture ref = {0}, q = {0}, q2 = {0}, other = {0};
    CHECK(h3_test_generate(f32, &r, &ref, NULL, &st) == H3_OK, "f32: %s", st.message);
    CHECK(h3_test_generate(fp8, &r, &q, NULL, &st) == H3_OK, "fp8: %s", st.message);
    CHECK(h3_test_generate(fp8, &r, &q2, NULL, &st) == H3_OK, "fp8 again: %s", st.message);
    h3_request r2 = r;
    r2.seed = r.seed + 1;
    CHECK(h3_test_generate(f32, &r2, &other, NULL, &st) == H3_OK, "f32 seed+1: %s", st.message);
    if (ref.latents && q.latents && q2.latents && other.latents) {
        size_t nv = (size_t)ref.plan.num_frames * ref.plan.width * ref.plan.height * 3;
        size_t na = (size_t)(2 * ref.plan.audio_samples);
        CHECK(memcmp(q.video, q2.video, nv) == 0 && memcmp(q.audio, q2.audio, na * sizeof(float)) == 0 &&
                  memcmp(q.latents, q2.latents, q.n_latents * sizeof(float)) == 0,
              "fp8 repeated: not the same bytes");
        diff d = compare(&q, &ref), seed = compare(&other, &ref);
        print_diff("fp8 (emulated) against float32", &d);
        print_diff("float32 seed+1 against float32 (the content scale)", &seed);
        CHECK(d.latents > 0 && d.frames > 0, "fp8 changed nothing: the linears were not quantised");
        CHECK(d.latents < 0.25 * seed.latents, "latents: fp8 %.4f against a seed's %.4f", d.latents, seed.latents);
        CHECK(d.frames < 0.25 * seed.frames, "frames: fp8 %.4f against a seed's %.4f", d.frames, seed.frames);
        CHECK(d.audio < 0.25 * seed.audio, "audio: fp8 %.4f against a seed's %.4f", d.audio, seed.audio);
        CHECK(d.frames_psnr > seed.frames_psnr + 10, "frames PSNR %.2f against a seed's %.2f dB", d.frames_psnr,
              seed.frames_psnr);
    }
    h3_test_capture_free(&ref);
    h3_test_capture_free(&q);
    h3_test_capture_free(&q2);
    h3_test_capture_free(&other);
    h3_engine_close(f32);
    h3_engine_close(fp8);
}

/* The bytes an fp8 copy of a float32 [rows, cols] saves on the CPU. */
static uint64_t saved_f32(int64_t rows, int64_t cols) {
    return (uint64_t)(rows * cols * 4) - h3_fp8_weight_bytes(rows, cols);
}

static void test_memory_plan(void) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CPU;
    h3_request r = h3_request_default();
    r.prompt = "a robot dancing";
    r.width = 64, r.height = 32, r.num_frames = 22, r.steps = 2;
    h3_memory_plan bf, f8;
    h3_status st = {0};
    CHECK(h3_memory_plan_make(&o, &r, &bf, &st) == H3_OK, "plan: %s", st.message);
    o.precision = H3_PRECISION_FP8;
    CHECK(h3_memory_plan_make(&o, &r, &f8, &st) == H3_OK, "fp8 plan: %s", st.message);
    const h3_memory_device *a = &bf.devices[0], *b = &f8.devices[0];
    /* tiny-h3's transformer: 2 blocks + 2 refiner blocks, each qkv [192,48],
     * out [48,64], fc1 [192,48], fc2 [48,96] in fp8; AdaLN [864,24] keeps f32
     * (24 in-features, not a multiple of 16) */
    uint64_t dit = 4 * (saved_f32(192, 48) + saved_f32(48, 64) + saved_f32(192, 48) + saved_f32(48, 96));
    /* its text encoder, 40 wide, keeps f32 throughout */
    printf("plan cpu bf16 / fp8: transformer %llu / %llu, text encoder %llu / %llu, total %llu / %llu\n",
           (unsigned long long)a->transformer, (unsigned long long)b->transformer,
           (unsigned long long)a->text_encoder, (unsigned long long)b->text_encoder, (unsigned long long)a->total,
           (unsigned long long)b->total);
    CHECK(a->transformer - b->transformer == dit, "transformer saves %llu, want %llu",
          (unsigned long long)(a->transformer - b->transformer), (unsigned long long)dit);
    CHECK(a->text_encoder == b->text_encoder, "tiny text encoder %llu -> %llu: its 40-wide linears are kept",
          (unsigned long long)a->text_encoder, (unsigned long long)b->text_encoder);
    CHECK(a->video_vae == b->video_vae && a->audio_vae == b->audio_vae, "the VAEs are not fp8");
    /* what a real fp8 engine holds is what its plan said */
    h3_engine *e = open_tiny(H3_PRECISION_FP8, &st);
    CHECK(e != NULL, "open: %s", st.message);
    if (e) {
        capture c = {0};
        CHECK(h3_test_generate(e, &r, &c, NULL, &st) == H3_OK, "generate: %s", st.message);
        h3_stats s;
        h3_engine_get_stats(e, &s);
        CHECK(s.peak_bytes == b->total, "fp8 engine peak %llu, plan %llu", (unsigned long long)s.peak_bytes,
              (unsigned long long)b->total);
        h3_test_capture_free(&c);
        h3_engine_close(e);
    }
    /* the CUDA plan (a measuring twin, no GPU needed; CUDA builds only) */
    o.compute = H3_COMPUTE_CUDA;
    h3_memory_plan cb, c8;
    o.precision = H3_PRECISION_BF16;
    h3_status_code rc = h3_memory_plan_make(&o, &r, &cb, &st);
    if (rc == H3_OK) {
        o.precision = H3_PRECISION_FP8;
        rc = h3_memory_plan_make(&o, &r, &c8, &st);
        CHECK(rc == H3_OK || rc == H3_ERR_UNSUPPORTED, "cuda fp8 plan: %s", st.message);
        if (rc == H3_OK) {
            uint64_t bf16_dit = 4 * (saved_f32(192, 48) + saved_f32(48, 64) + saved_f32(192, 48) + saved_f32(48, 96)) -
                                4 * (uint64_t)(192 * 48 + 48 * 64 + 192 * 48 + 48 * 96) * 2; /* 2 bytes instead of 4 */
            printf("plan cuda bf16 / fp8: transformer %llu / %llu\n", (unsigned long long)cb.devices[0].transformer,
                   (unsigned long long)c8.devices[0].transformer);
            CHECK(cb.devices[0].transformer - c8.devices[0].transformer == bf16_dit, "cuda transformer saves %llu, want %llu",
                  (unsigned long long)(cb.devices[0].transformer - c8.devices[0].transformer),
                  (unsigned long long)bf16_dit);
        } else {
            printf("cuda fp8 plan refused here: %s\n", st.message);
        }
    } else {
        printf("no CUDA plan in this build: %s\n", st.message);
    }
}

/* The release's clip at 1280x736x124 with load-format dummy, planned on the
 * CPU twin (float32) and, in CUDA builds, the CUDA twin (bf16): the
 * transformer's saving is exactly its linears' (from the official config),
 * the text encoder's a whole number of its layers'. Printed for the record. */
static void test_release_plan(void) {
    h3_dit_config c;
    h3_status st = {0};
    if (h3_dit_config_load(h3_test_data("official/transformer"), &c, &st) != H3_OK) {
        CHECK(0, "official config: %s", st.message);
        return;
    }
    int64_t D = c.hidden_size, inner = (int64_t)c.num_heads * c.head_dim, F = c.ffn_dim, Te = c.time_embed_dim;
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("official");
    o.load_format = H3_LOAD_DUMMY;
    h3_request r = h3_request_default();
    r.prompt = "a robot dancing";
    r.width = 1280, r.height = 736, r.num_frames = 124;
    h3_compute computes[2] = {H3_COMPUTE_CPU, H3_COMPUTE_CUDA};
    for (int i = 0; i < 2; i++) {
        h3_memory_plan bf, f8;
        o.compute = computes[i];
        o.precision = H3_PRECISION_BF16;
        if (h3_memory_plan_make(&o, &r, &bf, &st) != H3_OK) {
            CHECK(i == 1, "release plan: %s", st.message); /* no CUDA plan in a CPU build */
            continue;
        }
        o.precision = H3_PRECISION_FP8;
        CHECK(h3_memory_plan_make(&o, &r, &f8, &st) == H3_OK, "release fp8 plan: %s", st.message);
        uint64_t es = i == 0 ? 4 : 2; /* float32 on the CPU, bf16 on CUDA */
#define SAVED(n, k) ((uint64_t)((n) * (k)) * es - h3_fp8_weight_bytes((n), (k)))
        uint64_t block = SAVED(3 * inner, D) + SAVED(D, inner) + SAVED(2 * F, D) + SAVED(D, F);
        uint64_t dit = (uint64_t)(c.num_layers + c.num_refiner_layers) * block +
                       (uint64_t)c.num_layers * SAVED(18 * D, Te); /* AdaLN in the main blocks */
#undef SAVED
        const h3_memory_device *a = &bf.devices[0], *b = &f8.devices[0];
        printf("release plan (%s) %s -> fp8: text encoder %.2f -> %.2f GiB, transformer %.2f -> %.2f GiB, "
               "total %.2f -> %.2f GiB\n", i == 0 ? "cpu" : "cuda", i == 0 ? "f32" : "bf16", a->text_encoder / 1073741824.0,
               b->text_encoder / 1073741824.0, a->transformer / 1073741824.0, b->transformer / 1073741824.0,
               a->total / 1073741824.0, b->total / 1073741824.0);
        CHECK(a->transformer - b->transformer == dit, "%s: transformer saves %llu, want %llu",
              i == 0 ? "cpu" : "cuda", (unsigned long long)(a->transformer - b->transformer),
              (unsigned long long)dit);
        CHECK(b->text_encoder < a->text_encoder && b->total < a->total, "%s: the text encoder and total shrink",
              i == 0 ? "cpu" : "cuda");
    }
}

static void test_refusals(void) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CUDA_F32;
    o.precision = H3_PRECISION_FP8;
    h3_engine *e = NULL;
    h3_status st = {0};
    CHECK(h3_engine_open(&o, &e, &st) == H3_ERR_UNSUPPORTED && strstr(st.message, "cuda-f32") &&
              strstr(st.message, "precision=bf16"),
          "fp8 with cuda-f32: %s", st.message);
    o.compute = H3_COMPUTE_CPU;
    o.precision = (h3_precision)7;
    CHECK(h3_engine_open(&o, &e, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "precision 7"),
          "precision 7: %s", st.message);
    h3_precision p = H3_PRECISION_BF16;
    CHECK(h3_precision_parse("fp8", &p, &st) == H3_OK && p == H3_PRECISION_FP8, "parse fp8");
    CHECK(h3_precision_parse("bf16", &p, &st) == H3_OK && p == H3_PRECISION_BF16, "parse bf16");
    CHECK(h3_precision_parse("int8", &p, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "'int8'"),
          "parse int8: %s", st.message);
    CHECK(strcmp(h3_precision_name(H3_PRECISION_FP8), "fp8") == 0 && h3_precision_name((h3_precision)9) == NULL,
          "names");
}

static void test_stream(const char *devices) {
    h3_status st = {0};
    h3_engine *res = open_tiny_as(H3_PRECISION_FP8, H3_MEMORY_RESIDENT, devices, &st);
    CHECK(res != NULL, "open fp8 resident (%s): %s", devices, st.message);
    h3_engine *str = open_tiny_as(H3_PRECISION_FP8, H3_MEMORY_STREAM, devices, &st);
    CHECK(str != NULL, "open fp8 stream (%s): %s", devices, st.message);
    h3_request r = h3_request_default();
    r.prompt = "a robot dancing";
    r.width = 64, r.height = 32, r.num_frames = 22, r.steps = 2;
    capture a = {0}, b = {0};
    if (res && str) {
        CHECK(h3_test_generate(res, &r, &a, NULL, &st) == H3_OK, "resident: %s", st.message);
        CHECK(h3_test_generate(str, &r, &b, NULL, &st) == H3_OK, "stream: %s", st.message);
        h3_stats s;
        h3_engine_get_stats(str, &s);
        CHECK(strcmp(s.memory, "stream") == 0 && strncmp(s.precision, "fp8", 3) == 0, "stream stats: %s, %s",
              s.memory, s.precision);
    }
    if (a.latents && b.latents) {
        size_t nv = (size_t)a.plan.num_frames * a.plan.width * a.plan.height * 3;
        CHECK(memcmp(a.latents, b.latents, a.n_latents * sizeof(float)) == 0 && memcmp(a.video, b.video, nv) == 0 &&
                  memcmp(a.audio, b.audio, (size_t)(2 * a.plan.audio_samples) * sizeof(float)) == 0,
              "fp8 streamed (%s) differs from fp8 resident", devices);
        printf("fp8 with memory=stream (%s): the resident bytes\n", devices);
    }
    h3_test_capture_free(&a);
    h3_test_capture_free(&b);
    h3_engine_close(res);
    h3_engine_close(str);
}

int main(void) {
    test_refusals();
    test_stream("auto");
    test_stream("cpu:2");
    test_memory_plan();
    test_release_plan();
    test_end_to_end();
    return h3_test_finish("test_precision");
}
