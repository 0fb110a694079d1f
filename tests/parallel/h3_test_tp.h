/* h3_test_tp.h - what the tensor-parallel tests (tests/parallel/test_tp_*.c)
 * share: the degrees and tolerance, a seeded Gaussian, a team of CPU ranks,
 * and the "wide" test model (56 DiT heads, 56/8 text heads) for the degrees
 * tiny-h3's 2 heads cannot split into. Static inline, so each check counts
 * in the test program that includes it (h3_test.h's counters are per file). */
#ifndef H3_TEST_TP_H
#define H3_TEST_TP_H

#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "h3.h"
#include "base/h3_safetensors.h"
#include "model/h3_dit.h"
#include "model/h3_text_encoder.h"
#include "parallel/h3_comm.h"
#include "parallel/h3_tp.h"
#include "h3_test.h"

#define MAX_RANKS 8
#define TINY "models/tiny-h3"
/* Rounding between TP degrees: partial sums are added in another order. */
#define TP_TOLERANCE 1e-5

static const int degrees[] = {1, 2, 4, 7, 8};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline double uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static inline float gauss(void) { return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform())); }

/* A group of n CPU ranks with a team of threads. */
static inline h3_tp_team *make_team(int n) {
    h3_comm_group *g = NULL;
    h3_tp_team *t = NULL;
    h3_status st;
    CHECK(h3_comm_group_create_cpu(n, &g, &st) == H3_OK, "cpu group %d: %s", n, st.message);
    if (g) CHECK(h3_tp_team_create(g, &t, &st) == H3_OK, "team %d: %s", n, st.message);
    return t;
}

static inline h3_tp team_tp(h3_tp_team *t, int rank) {
    h3_tp tp = {rank, h3_tp_team_size(t), h3_comm_group_rank(h3_tp_team_group(t), rank)};
    return tp;
}

/* ---- the wide test model ------------------------------------------------------------------------- */

typedef struct tensor_list {
    h3_st_write_tensor t[512];
    float *data[512];
    int n;
} tensor_list;

static inline float init_value(const char *name, int ndim, const int64_t *shape, int64_t i) {
    if (ndim == 1 && strstr(name, "norm")) return 1.0f + 0.1f * gauss();
    if (ndim == 1) return (strstr(name, "adaln") ? 0.1f : 0.05f) * gauss();
    if (strstr(name, "embed_tokens")) return 0.5f * gauss();
    return gauss() / sqrtf((float)shape[1]);
}

static inline void add_tensor(const char *name, int ndim, const int64_t *shape, void *user) {
    tensor_list *l = user;
    if (l->n >= 512) return;
    h3_st_write_tensor *t = &l->t[l->n];
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    float *d = malloc((size_t)numel * sizeof *d);
    for (int64_t i = 0; i < numel; i++) d[i] = init_value(name, ndim, shape, i);
    t->name = g_strdup(name);
    t->dtype = H3_ST_F32;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = d;
    l->data[l->n++] = d;
}

static inline int write_list(tensor_list *l, const char *path) {
    h3_status st;
    h3_status_code rc = h3_st_write(path, l->t, (size_t)l->n, NULL, &st);
    CHECK(rc == H3_OK, "write %s: %s", path, st.message);
    for (int i = 0; i < l->n; i++) {
        g_free((char *)l->t[i].name);
        free(l->data[i]);
    }
    l->n = 0;
    return rc == H3_OK;
}

static inline int write_file(const char *dir, const char *name, const char *text) {
    char *p = g_build_filename(dir, name, NULL);
    int ok = g_file_set_contents(p, text, -1, NULL);
    CHECK(ok, "write %s", p);
    g_free(p);
    return ok;
}

/* A file is linked; a folder is made and its entries linked: a component
 * folder linked out of the model folder is refused (issue 31). */
static inline void link_tree(const char *from, const char *to) {
    if (!g_file_test(from, G_FILE_TEST_IS_DIR)) {
        char *abs = g_canonicalize_filename(from, NULL);
        CHECK(symlink(abs, to) == 0, "symlink %s", to);
        g_free(abs);
        return;
    }
    g_mkdir(to, 0755);
    GDir *d = g_dir_open(from, 0, NULL);
    for (const char *n; d && (n = g_dir_read_name(d));) {
        char *f = g_build_filename(from, n, NULL), *t = g_build_filename(to, n, NULL);
        link_tree(f, t);
        g_free(f);
        g_free(t);
    }
    if (d) g_dir_close(d);
}

static inline void link_from_tiny(const char *dir, const char *name) {
    char *from = g_build_filename(h3_test_data(TINY), name, NULL), *to = g_build_filename(dir, name, NULL);
    link_tree(from, to);
    g_free(from);
    g_free(to);
}

/* tiny-h3 with a transformer of 56 heads (D 56, FFN 112: splits over 1, 2,
 * 4, 7, 8) and a text conditioner of 56 query / 8 key-value heads (splits
 * over 1, 2, 4, 8; over 7 it runs on rank 0), random weights; the VAEs,
 * tokenizer and schedulers are tiny-h3's. */
static inline char *write_wide_model(void) {
    char *dir = g_dir_make_tmp("h3-tp-XXXXXX", NULL);
    if (!dir) return NULL;
    const char *links[] = {"vae", "audio_vae", "tokenizer", "scheduler", "audio_scheduler", "model_index.json"};
    for (size_t i = 0; i < G_N_ELEMENTS(links); i++) link_from_tiny(dir, links[i]);
    write_file(dir, "golden_meta.json", "{\"text_encoder_layer\": 3}\n");
    char *tdir = g_build_filename(dir, "transformer", NULL), *edir = g_build_filename(dir, "text_encoder", NULL);
    g_mkdir(tdir, 0755);
    g_mkdir(edir, 0755);
    write_file(tdir, "config.json",
               "{\"num_attention_heads\": 56, \"attention_head_dim\": 8, \"hidden_size\": 56, \"num_layers\": 2,"
               " \"num_refiner_layers\": 1, \"ffn_dim\": 112, \"in_channels\": 24, \"audio_in_channels\": 32,"
               " \"patch_size\": [1, 2, 2], \"text_dim\": 32, \"freq_dim\": 16, \"time_embed_hidden_dim\": 48,"
               " \"time_embed_dim\": 28, \"rope_freq_dim\": 1, \"rope_theta\": 10000.0, \"norm_eps\": 1e-05,"
               " \"qk_norm_eps\": 1e-05, \"final_norm_eps\": 1e-05}\n");
    write_file(edir, "config.json",
               "{\"model_type\": \"qwen3_vl\", \"text_config\": {\"attention_bias\": false, \"head_dim\": 16,"
               " \"hidden_act\": \"silu\", \"hidden_size\": 32, \"intermediate_size\": 112,"
               " \"max_position_embeddings\": 4096, \"num_attention_heads\": 56, \"num_hidden_layers\": 3,"
               " \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06, \"vocab_size\": 1088,"
               " \"rope_parameters\": {\"mrope_interleaved\": true, \"mrope_section\": [4, 2, 2],"
               " \"rope_theta\": 5000000.0, \"rope_type\": \"default\"}}}\n");
    tensor_list *l = calloc(1, sizeof *l);
    h3_dit_config dc;
    h3_text_encoder_config tc;
    h3_status st;
    int ok = h3_dit_config_load(tdir, &dc, &st) == H3_OK;
    CHECK(ok, "wide transformer config: %s", st.message);
    if (ok) {
        h3_dit_checkpoint_plan(&dc, H3_DIT_DIFFUSERS, add_tensor, l);
        char *p = g_build_filename(tdir, "diffusion_pytorch_model.safetensors", NULL);
        ok = write_list(l, p);
        g_free(p);
    }
    if (ok) ok = h3_text_encoder_config_load(edir, &tc, &st) == H3_OK;
    h3_text_encoder_tensor_info *info = NULL;
    int n = 0;
    if (ok) ok = h3_text_encoder_tensor_list(&tc, 3, &info, &n, &st) == H3_OK;
    CHECK(ok, "wide text encoder: %s", st.message);
    for (int i = 0; ok && i < n; i++) add_tensor(info[i].name, info[i].ndim, info[i].shape, l);
    if (ok) {
        char *p = g_build_filename(edir, "model.safetensors", NULL);
        ok = write_list(l, p);
        g_free(p);
    }
    free(info);
    free(l);
    g_free(tdir);
    g_free(edir);
    return dir;
}

static inline void remove_tree(const char *path) {
    if (g_file_test(path, G_FILE_TEST_IS_SYMLINK) || !g_file_test(path, G_FILE_TEST_IS_DIR)) {
        g_remove(path);
        return;
    }
    GDir *d = g_dir_open(path, 0, NULL);
    for (const char *n; d && (n = g_dir_read_name(d));) {
        char *p = g_build_filename(path, n, NULL);
        remove_tree(p);
        g_free(p);
    }
    if (d) g_dir_close(d);
    g_rmdir(path);
}

/* The wide model in a fresh temporary folder, for the program's run (NULL,
 * failing a check, when it cannot be written); wide_model_remove deletes it. */
static inline char *wide_model_open(void) {
    char *dir = write_wide_model();
    CHECK(dir != NULL, "wide model");
    return dir;
}

static inline void wide_model_remove(char *dir) {
    if (!dir) return;
    remove_tree(dir);
    g_free(dir);
}

#endif
