/* h3_test_lora.h - LoRA files for the tests (tests/model/test_lora.c,
 * tests/engine/test_lora_engine.c): seeded factors on the tiny model's
 * modules, written in every layout h3_lora reads. Header-only (static). */
#ifndef H3_TEST_LORA_H
#define H3_TEST_LORA_H

#include <glib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "model/h3_dit.h"

#define RANK 4
#define ALPHA 8.0f       /* scale 2 */
#define PROJ_OUT_ALPHA 2.0f /* scale 0.5: the per-module override */

/* ---- the factors ---------------------------------------------------------------------- */

/* One diffusers module of the LoRA: A [r, in], B [out, r] (diffusers row order). */
typedef struct factor {
    const char *module;   /* diffusers name */
    const char *original; /* the original checkpoint's name (NULL: q/k/v, written fused) */
    int64_t in, out;
    float alpha;
    float *A, *B;
} factor;

#define N_FACTORS 11

static inline void fill(float *v, int64_t n, uint64_t seed, float range) {
    uint64_t key = h3_counter_key(seed, "lora");
    for (int64_t i = 0; i < n; i++) v[i] = h3_counter_uniform(key, (uint64_t)i, -range, range);
}

static inline void make_factors(factor *f, const h3_dit_config *cfg, uint64_t seed) {
    int64_t D = cfg->hidden_size, inner = (int64_t)cfg->num_heads * cfg->head_dim, F = cfg->ffn_dim;
    int64_t vf = (int64_t)cfg->in_channels * 4;
    const factor spec[N_FACTORS] = {
        {"transformer_blocks.0.attn.to_q", NULL, D, inner, ALPHA},
        {"transformer_blocks.0.attn.to_k", NULL, D, inner, ALPHA},
        {"transformer_blocks.0.attn.to_v", NULL, D, inner, ALPHA},
        {"transformer_blocks.1.attn.to_out.0", "blocks.1.attn.out_proj", inner, D, ALPHA},
        {"transformer_blocks.0.ff.net.0.proj", "blocks.0.mlp.fc1", D, 2 * F, ALPHA},
        {"transformer_blocks.1.ff.net.2", "blocks.1.mlp.fc2", F, D, ALPHA},
        {"transformer_blocks.0.adaln_proj.linear", "blocks.0.adaln_proj.linear", cfg->time_embed_dim, 18 * D, ALPHA},
        {"token_refiner.refiner_blocks.0.ff.net.2", "token_refiner.blocks.0.mlp.fc2", F, D, ALPHA},
        {"context_embedder", "condition_proj", cfg->text_dim, D, ALPHA},
        {"proj_out", "final_layer.video_out", D, vf, PROJ_OUT_ALPHA},
        {"time_embedder.linear_1", "time_embedder.proj_in", cfg->freq_dim, cfg->time_embed_hidden_dim, ALPHA},
    };
    for (int i = 0; i < N_FACTORS; i++) {
        f[i] = spec[i];
        f[i].A = malloc((size_t)(RANK * f[i].in) * sizeof(float));
        f[i].B = malloc((size_t)(f[i].out * RANK) * sizeof(float));
        fill(f[i].A, RANK * f[i].in, seed * 100 + (i < 3 ? 0 : (uint64_t)i), 0.3f);
        fill(f[i].B, f[i].out * RANK, seed * 100 + 50 + (uint64_t)i, 0.3f);
    }
}

static inline void free_factors(factor *f) {
    for (int i = 0; i < N_FACTORS; i++) {
        free(f[i].A);
        free(f[i].B);
    }
}

/* ---- writing a LoRA in a layout ------------------------------------------------------------------ */

typedef enum layout { L_PEFT = 0, L_ORIGINAL, L_ORIGINAL_BARE, L_KOHYA, L_DIFFSYNTH, N_LAYOUTS } layout;
G_GNUC_UNUSED static const char *const layout_names[] = {"peft", "original", "original-bare", "kohya", "diffsynth"};

typedef struct writer {
    h3_st_write_tensor t[64];
    char names[64][160];
    void *owned[64];
    size_t n;
} writer;

static inline void put(writer *w, const char *name, int64_t d0, int64_t d1, const float *data, int copy) {
    h3_st_write_tensor *t = &w->t[w->n];
    g_strlcpy(w->names[w->n], name, sizeof w->names[0]);
    size_t bytes = (size_t)(d0 * (d1 ? d1 : 1)) * sizeof(float);
    w->owned[w->n] = copy ? g_memdup2(data, bytes) : NULL;
    *t = (h3_st_write_tensor){.name = w->names[w->n], .dtype = H3_ST_F32, .ndim = d1 ? 2 : 1, .shape = {d0, d1},
                              .data = copy ? w->owned[w->n] : data};
    w->n++;
}

static inline void put_pair(writer *w, layout lay, const char *module, int64_t in, int64_t out, const float *A, const float *B,
                     float alpha) {
    char name[200];
    int down_up = lay == L_ORIGINAL_BARE || lay == L_KOHYA;
    const char *a = down_up ? "lora_down.weight" : "lora_A.weight", *b = down_up ? "lora_up.weight" : "lora_B.weight";
    const char *prefix = lay == L_PEFT ? "transformer." : lay == L_ORIGINAL ? "diffusion_model." : lay == L_KOHYA ? "lora_unet_" : "";
    char *mod = g_strdup(module);
    if (lay == L_KOHYA)
        for (char *p = mod; *p; p++)
            if (*p == '.') *p = '_';
    snprintf(name, sizeof name, "%s%s.%s", prefix, mod, a);
    put(w, name, RANK, in, A, 1);
    float *Bs = g_memdup2(B, (size_t)(out * RANK) * sizeof(float));
    if (lay == L_DIFFSYNTH) /* no alpha in this layout: the scale is folded into B */
        for (int64_t i = 0; i < out * RANK; i++) Bs[i] *= alpha / RANK;
    snprintf(name, sizeof name, "%s%s.%s", prefix, mod, b);
    put(w, name, out, RANK, Bs, 1);
    g_free(Bs);
    if (lay == L_ORIGINAL || lay == L_ORIGINAL_BARE || lay == L_KOHYA) {
        snprintf(name, sizeof name, "%s%s.alpha", prefix, mod);
        h3_st_write_tensor *t = &w->t[w->n];
        g_strlcpy(w->names[w->n], name, sizeof w->names[0]);
        w->owned[w->n] = g_memdup2(&alpha, sizeof alpha);
        *t = (h3_st_write_tensor){.name = w->names[w->n], .dtype = H3_ST_F32, .ndim = 0, .data = w->owned[w->n]};
        w->n++;
    }
    g_free(mod);
}

/* The factors in one layout: q/k/v fused into qkv_proj (per-head
 * interleaved rows, as the original checkpoint's weight) and fc1's halves
 * swapped where the layout uses the original names. */
static inline void add_factors(writer *w, const h3_dit_config *cfg, layout lay, const factor *f) {
    int original = lay == L_ORIGINAL || lay == L_ORIGINAL_BARE;
    for (int i = 0; i < N_FACTORS; i++) {
        if (original && i < 3) {
            if (i > 0) continue;
            int64_t inner = f[0].out;
            float *B = malloc((size_t)(3 * inner * RANK) * sizeof *B);
            /* the original per-head interleaved rows: h·3dh + p·dh + i is row h·dh + i of part p */
            int64_t dh = cfg->head_dim;
            for (int64_t h = 0; h < inner / dh; h++)
                for (int p = 0; p < 3; p++)
                    memcpy(B + (h * 3 * dh + p * dh) * RANK, f[p].B + h * dh * RANK, (size_t)(dh * RANK) * sizeof *B);
            put_pair(w, lay, "blocks.0.attn.qkv_proj", f[0].in, 3 * inner, f[0].A, B, f[0].alpha);
            free(B);
        } else if (original && strstr(f[i].module, "ff.net.0.proj")) {
            int64_t half = f[i].out / 2;
            float *B = malloc((size_t)(f[i].out * RANK) * sizeof *B);
            memcpy(B, f[i].B + half * RANK, (size_t)(half * RANK) * sizeof *B); /* gate */
            memcpy(B + half * RANK, f[i].B, (size_t)(half * RANK) * sizeof *B); /* value */
            put_pair(w, lay, f[i].original, f[i].in, f[i].out, f[i].A, B, f[i].alpha);
            free(B);
        } else {
            put_pair(w, lay, original ? f[i].original : f[i].module, f[i].in, f[i].out, f[i].A, f[i].B, f[i].alpha);
        }
    }
}

G_GNUC_UNUSED static const char *peft_meta[] = {"lora_adapter_metadata",
                                  "{\"transformer.r\": 4, \"transformer.lora_alpha\": 8, "
                                  "\"transformer.alpha_pattern\": {\"proj_out\": 2}}",
                                  NULL};

static inline char *write_writer(writer *w, const char *dir, const char *file, const char *const *meta) {
    char *path = g_build_filename(dir, file, NULL);
    h3_status st = {0};
    CHECK(h3_st_write(path, w->t, w->n, meta, &st) == H3_OK, "write %s: %s", file, st.message);
    for (size_t i = 0; i < w->n; i++) g_free(w->owned[i]);
    w->n = 0;
    return path;
}

static inline char *write_lora(const char *dir, const h3_dit_config *cfg, layout lay, const factor *f, const char *file) {
    writer w = {0};
    add_factors(&w, cfg, lay, f);
    return write_writer(&w, dir, file, lay == L_PEFT ? peft_meta : NULL);
}

#endif
