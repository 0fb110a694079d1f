/* fuzz_lora_keys: the key mapping of user LoRAs (h3_lora_open) against the
 * tiny model's transformer.
 *
 * Input: lines `name d0 [d1 [d2]] [f32|bf16|f16|i32] [nan]`, then
 * optionally SEP and the header's lora_adapter_metadata JSON. Each line
 * becomes a tensor of that shape (at most 2^16 values, small deterministic
 * values; `nan` puts a NaN in it) in a safetensors file written with
 * h3_st_write, so the fuzzer works on the names, shapes, dtypes and the
 * LoraConfig rather than on the reader (fuzz_safetensors has it). A LoRA
 * that opens is fused into the tiny DiT (loaded once, CPU) at 0.7 and taken
 * out again: the weights must come back to the base within float32
 * rounding (of base + delta), and every module's delta must be finite. */
#include "h3_fuzz.h"

#include <math.h>

#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "model/h3_dit.h"
#include "model/h3_lora.h"

#define MAX_TENSORS 64
#define MAX_VALUES (1 << 16)

static h3_backend *backend;
static h3_dit *dit;
static h3_dit_config cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    char *dir = g_build_filename(h3_fuzz_setting("H3_FUZZ_DATA", H3_FUZZ_DATA), "models/tiny-h3/transformer", NULL);
    h3_status st;
    if (h3_backend_cpu_create(1, &backend, &st) != H3_OK || h3_dit_load(backend, dir, &dit, &st) != H3_OK) {
        fprintf(stderr, "fuzz_lora_keys: %s\n", st.message);
        abort();
    }
    cfg = *h3_dit_get_config(dit);
    g_free(dir);
    return 0;
}

typedef struct spec {
    h3_st_write_tensor t[MAX_TENSORS];
    char *names[MAX_TENSORS];
    void *data[MAX_TENSORS];
    size_t n;
} spec;

static h3_st_dtype dtype_of(const char *s, int *known) {
    static const struct {
        const char *name;
        h3_st_dtype d;
    } names[] = {{"f32", H3_ST_F32}, {"bf16", H3_ST_BF16}, {"f16", H3_ST_F16}, {"i32", H3_ST_I32}};
    for (size_t i = 0; i < G_N_ELEMENTS(names); i++)
        if (strcmp(s, names[i].name) == 0) {
            *known = 1;
            return names[i].d;
        }
    *known = 0;
    return H3_ST_F32;
}

/* One line -> one tensor; 0 when the line describes none. */
static int parse_line(spec *s, const char *line) {
    char **tok = g_strsplit_set(line, " \t", 8);
    int64_t shape[3] = {0};
    int ndim = 0, nan = 0, ok = tok[0] && *tok[0] && s->n < MAX_TENSORS;
    h3_st_dtype dtype = H3_ST_F32;
    for (int i = 1; ok && tok[i]; i++) {
        int known;
        char *end;
        long long v = strtoll(tok[i], &end, 10);
        if (*tok[i] && !*end && ndim < 3 && v >= 0 && v <= 4096) shape[ndim++] = v;
        else if (strcmp(tok[i], "nan") == 0) nan = 1;
        else if ((dtype = dtype_of(tok[i], &known), !known)) ok = 0;
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    if (!ok || numel > MAX_VALUES) {
        g_strfreev(tok);
        return 0;
    }
    size_t es = h3_st_dtype_size(dtype);
    uint8_t *data = g_malloc0((size_t)numel * es + 8);
    for (int64_t i = 0; i < numel; i++) {
        float v = (float)((i * 37 + (int64_t)s->n * 11) % 17 - 8) / 64.0f;
        if (nan && i == 0) v = NAN;
        if (dtype == H3_ST_F32) memcpy(data + i * 4, &v, 4);
        else if (dtype == H3_ST_BF16) ((uint16_t *)data)[i] = h3_f32_to_bf16(v);
        else if (dtype == H3_ST_F16) ((uint16_t *)data)[i] = h3_f32_to_f16(v);
        else ((int32_t *)data)[i] = isfinite(v) ? (int32_t)(v * 64) : 0; /* an integer holds no NaN */
    }
    size_t k = s->n++;
    s->names[k] = g_strdup(tok[0]);
    s->data[k] = data;
    s->t[k] = (h3_st_write_tensor){.name = s->names[k], .dtype = dtype, .ndim = ndim, .data = data};
    memcpy(s->t[k].shape, shape, sizeof shape);
    g_strfreev(tok);
    return 1;
}

static void spec_free(spec *s) {
    for (size_t i = 0; i < s->n; i++) {
        g_free(s->names[i]);
        g_free(s->data[i]);
    }
}

/* The weights of every module the tiny model has, read back. */
static const char *const probes[] = {
    "transformer_blocks.0.attn.to_q", "transformer_blocks.1.attn.to_v", "transformer_blocks.0.attn.to_out.0",
    "transformer_blocks.1.ff.net.0.proj", "transformer_blocks.0.ff.net.2", "transformer_blocks.1.adaln_proj.linear",
    "token_refiner.refiner_blocks.0.attn.to_k", "token_refiner.refiner_blocks.1.ff.net.0.proj", "proj_in",
    "audio_proj_in", "context_embedder", "time_embedder.linear_1", "time_embedder.linear_2", "norm_out.linear",
    "proj_out", "audio_proj_out",
};

static void check_lora(h3_lora *l) {
    h3_status st;
    float *base[G_N_ELEMENTS(probes)] = {0};
    int64_t n[G_N_ELEMENTS(probes)] = {0};
    float dmax[G_N_ELEMENTS(probes)] = {0};
    for (size_t i = 0; i < G_N_ELEMENTS(probes); i++) {
        int64_t rows, cols;
        float *d = NULL;
        if (h3_lora_delta_f32(l, probes[i], &d, &rows, &cols, &st) != H3_OK) abort();
        for (int64_t j = 0; j < rows * cols; j++) {
            if (!isfinite(d[j])) abort(); /* factors were checked finite; alpha/rank bounded */
            dmax[i] = fmaxf(dmax[i], fabsf(d[j]));
        }
        free(d);
        if (h3_dit_lora_weight_f32(dit, probes[i], &base[i], &rows, &cols, &st) != H3_OK) abort();
        n[i] = rows * cols;
    }
    h3_lora_use use = {l, 0.7f};
    if (h3_dit_set_loras(dit, &use, 1, &st) == H3_OK) {
        if (h3_dit_set_loras(dit, NULL, 0, &st) != H3_OK) abort();
    } else {
        h3_fuzz_check_status(&st); /* a fused weight out of range: refused, nothing changed */
    }
    for (size_t i = 0; i < G_N_ELEMENTS(probes); i++) {
        int64_t rows, cols;
        float *now = NULL;
        if (h3_dit_lora_weight_f32(dit, probes[i], &now, &rows, &cols, &st) != H3_OK) abort();
        for (int64_t j = 0; j < n[i]; j++)
            if (!(fabsf(now[j] - base[i][j]) <= 1e-6f * (fabsf(base[i][j]) + dmax[i]) + 1e-30f)) abort(); /* f32 round trip */
        free(now);
        free(base[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3_fuzz_part parts[H3_FUZZ_MAX_PARTS];
    size_t np = h3_fuzz_split(data, size, parts, 2);
    char *text = g_strndup((const char *)parts[0].data, parts[0].size);
    char **lines = g_strsplit(text, "\n", MAX_TENSORS + 1);
    spec s = {0};
    for (int i = 0; lines[i]; i++) parse_line(&s, lines[i]);
    char *meta_json = np > 1 ? g_strndup((const char *)parts[1].data, parts[1].size) : NULL;
    const char *meta[] = {"lora_adapter_metadata", meta_json, NULL};
    char *path = h3_fuzz_path("lora.safetensors");
    h3_status st;
    if (h3_st_write(path, s.t, s.n, meta_json ? meta : NULL, &st) == H3_OK) {
        h3_lora *l = NULL;
        if (h3_lora_open(path, &cfg, &l, &st) == H3_OK) {
            volatile size_t sink = strlen(h3_lora_layout_name(h3_lora_get_layout(l))) +
                                   (size_t)h3_lora_module_count(l, H3_LORA_MAIN) +
                                   (size_t)h3_lora_module_count(l, H3_LORA_REF) + (size_t)h3_lora_dropped_count(l, NULL);
            (void)sink;
            if (h3_lora_module_count(l, H3_LORA_MAIN) > 0) check_lora(l);
            h3_lora_unref(l);
        } else {
            h3_fuzz_check_status(&st);
        }
    }
    h3_fuzz_remove("lora.safetensors");
    g_free(path);
    g_free(meta_json);
    spec_free(&s);
    g_strfreev(lines);
    g_free(text);
    return 0;
}
