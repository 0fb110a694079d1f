/* bench.c - h3-bench's harness (see bench.h). */
#include "bench.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/h3_backend_cuda.h"

h3_backend *B;
static uint64_t seed = 1;

uint64_t next_seed(void) { return seed++; }

void bench_check(const char *where) {
    h3_status st;
    if (h3_backend_synchronize(B, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: %s: %s\n", where, st.message);
        exit(1);
    }
}

int bench_ok(const char *where) {
    h3_status st;
    if (h3_backend_synchronize(B, &st) == H3_OK) return 1;
    fprintf(stderr, "h3-bench: %s: %s\n", where, st.message);
    h3_backend_clear_error(B);
    return 0;
}

h3_tensor rand2(int64_t rows, int64_t cols, float a) {
    h3_tensor t = h3_new_2d(B, H3_BF16, rows, cols);
    h3_backend_cuda_fill_uniform(B, &t, next_seed(), -a, a);
    return t;
}

h3_tensor rand1(int64_t n, float lo, float hi) {
    h3_tensor t = h3_new_1d(B, H3_BF16, n);
    h3_backend_cuda_fill_uniform(B, &t, next_seed(), lo, hi);
    return t;
}

/* ---- timing ------------------------------------------------------------------------------------ */

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

double upper_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* The timed runs into t[0..reps); 0 when the backend failed (check decides how to report it). */
static int timed_runs(const char *what, bench_fn fn, void *ctx, int warmup, int reps, int calls, double *t,
                      int (*check)(const char *)) {
    char where[256];
    cudaStream_t s = (cudaStream_t)h3_backend_cuda_stream(B);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < warmup; i++) fn(ctx);
    snprintf(where, sizeof where, "%s warm-up", what);
    int ok = check(where);
    for (int i = 0; ok && i < reps; i++) {
        cudaEventRecord(e0, s);
        for (int k = 0; k < calls; k++) fn(ctx);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        t[i] = ms / calls;
    }
    snprintf(where, sizeof where, "%s timing", what);
    ok = ok && check(where);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ok;
}

static int check_fatal(const char *where) {
    bench_check(where);
    return 1;
}

double time_ms(const char *what, bench_fn fn, void *ctx, int warmup, int reps, int calls) {
    double t[64];
    if (reps > 64) reps = 64;
    timed_runs(what, fn, ctx, warmup, reps, calls, t, check_fatal);
    return upper_median(t, reps);
}

double time_ms_or_nan(const char *what, bench_fn fn, void *ctx, int warmup, int reps, int calls) {
    double t[64];
    if (reps > 64) reps = 64;
    if (!timed_runs(what, fn, ctx, warmup, reps, calls, t, bench_ok)) return NAN;
    return upper_median(t, reps);
}

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double tflops(double flop, double ms) { return flop / ms / 1e9; }

double rel_l2(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : NAN;
}

/* ---- the PyTorch references ------------------------------------------------------------------------ */

JsonNode *run_python_json(const char *cmd, const char *tag) {
    printf("reference: %s\n", cmd);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    char *line = NULL;
    size_t cap = 0, n = strlen(tag);
    JsonNode *res = NULL;
    while (getline(&line, &cap, p) > 0) {
        if (!strncmp(line, tag, n)) {
            JsonParser *parser = json_parser_new();
            if (json_parser_load_from_data(parser, line + n, -1, NULL)) res = json_node_copy(json_parser_get_root(parser));
            g_object_unref(parser);
        } else {
            printf("  [torch] %s", line);
            fflush(stdout);
        }
    }
    free(line);
    int rc = pclose(p);
    if (rc != 0) printf("reference exited with status %d\n", rc);
    return res;
}

JsonNode *run_python_json_document(const char *cmd) {
    printf("anchor: %s\n", cmd);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    GString *out = g_string_new(NULL);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) g_string_append_len(out, buf, (gssize)n);
    int rc = pclose(p);
    JsonNode *res = NULL;
    JsonParser *parser = json_parser_new();
    if (rc == 0 && json_parser_load_from_data(parser, out->str, (gssize)out->len, NULL))
        res = json_node_copy(json_parser_get_root(parser));
    else
        printf("anchor exited with status %d%s\n", rc, rc == 0 ? " but printed no JSON" : "");
    g_object_unref(parser);
    g_string_free(out, TRUE);
    return res;
}

double ref_num(JsonNode *root, const char *path) {
    if (!root) return NAN;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    JsonNode *n = root;
    for (char *tok = strtok(buf, "."); tok; tok = strtok(NULL, ".")) {
        if (!n || !JSON_NODE_HOLDS_OBJECT(n)) return NAN;
        JsonObject *obj = json_node_get_object(n);
        if (!json_object_has_member(obj, tok)) return NAN;
        n = json_object_get_member(obj, tok);
    }
    return n && JSON_NODE_HOLDS_VALUE(n) ? json_node_get_double(n) : NAN;
}

void reference_script(const bench_options *o, const char *name, char *path, size_t size) {
    const char *slash = strrchr(o->reference, '/');
    int dir = slash ? (int)(slash - o->reference) : 0;
    snprintf(path, size, "%.*s%s%s", dir, o->reference, slash ? "/" : "", name);
}

void release_dit_config(h3_dit_config *c) {
    char dir[4096];
    const char *data = getenv("H3_TEST_DATA");
    snprintf(dir, sizeof dir, "%s/official/transformer", data ? data : "tests/data");
    h3_status st;
    if (h3_dit_config_load(dir, c, &st) == H3_OK) return;
    printf("forward: %s; using the release's values built into h3-bench\n", st.message);
    *c = (h3_dit_config){.num_layers = 50, .num_refiner_layers = 2, .hidden_size = D, .num_heads = NH,
                         .head_dim = HD, .ffn_dim = FFN, .in_channels = 24, .audio_in_channels = 32, .patch_t = 1,
                         .patch_h = 2, .patch_w = 2, .text_dim = 5120, .freq_dim = 256,
                         .time_embed_hidden_dim = 5376, .time_embed_dim = 2688, .rope_freq_dim = 16,
                         .rope_theta = 10000.0f, .norm_eps = 1e-5f, .qk_norm_eps = 1e-5f, .final_norm_eps = 1e-5f};
}

/* ---- --perf-md ------------------------------------------------------------------------------------------ */

void perf_date(char *buf, size_t size) {
    time_t now = time(NULL);
    strftime(buf, size, "%Y-%m-%d %H:%M", gmtime(&now));
}

int perf_append(const char *path, const char *row) {
    FILE *f = fopen(path, "a");
    if (!f) return 0;
    int ok = fputs(row, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The whole file, NUL-terminated; NULL when it cannot be read. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL, buf[65536];
    size_t len = 0, cap = 0, got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (len + got + 1 > cap) {
            cap = 2 * (len + got + 1);
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                return NULL;
            }
            text = t;
        }
        memcpy(text + len, buf, got);
        len += got;
    }
    fclose(f);
    if (text) text[len] = 0;
    return text;
}

int perf_insert_before(const char *path, const char *marker, const char *row) {
    char *text = read_text(path);
    char *at = text ? strstr(text, marker) : NULL;
    if (!at) {
        free(text);
        return 0;
    }
    while (at > text && at[-1] != '\n') at--;
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(text, 1, (size_t)(at - text), f) == (size_t)(at - text) && fputs(row, f) >= 0 &&
             fwrite(at, 1, strlen(at), f) == strlen(at);
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    return ok;
}
