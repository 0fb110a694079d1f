/* test_text_encoder.c - the Qwen3-VL text conditioner against the tiny-h3
 * goldens (transformers, fp32 CPU), the real release's tensor names, and
 * the load/forward error paths. */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "backend/h3_backend.h"
#include "base/h3_config.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "model/h3_image.h"
#include "model/h3_text_encoder.h"
#include "model/h3_tokenizer.h"

#define TINY_DIR "models/tiny-h3/text_encoder"
#define GOLDEN "goldens/tiny-h3/text_encoder.safetensors"
#define PREFIX "model.language_model."

static h3_backend *be;
static h3_st_file *golden;
static char *tmpdir;

/* An I64 golden tensor as int32 (malloc'd); *n gets its length. */
static int32_t *golden_ids(const char *name, int *n) {
    const h3_st_tensor *t = h3_st_find(golden, name);
    if (!t || t->dtype != H3_ST_I64) return NULL;
    int32_t *ids = malloc((size_t)t->numel * sizeof *ids);
    const int64_t *src = t->data;
    for (int64_t i = 0; i < t->numel; i++) ids[i] = (int32_t)src[i];
    *n = (int)t->numel;
    return ids;
}

/* Runs the encoder and downloads [n, hidden] to a malloc'd float array. */
static float *encode(h3_text_encoder *te, const int32_t *ids, int n, h3_status *st) {
    int D = h3_text_encoder_hidden_size(te);
    size_t mark = h3_arena_mark(be);
    h3_tensor out = h3_new_2d(be, h3_backend_compute_dtype(be), n, D);
    float *host = malloc((size_t)n * D * sizeof *host);
    h3_status_code rc = h3_text_encoder_forward(te, ids, n, &out, st);
    if (rc == H3_OK) rc = h3_tensor_download_f32(be, &out, host, st);
    h3_arena_reset(be, mark);
    if (rc != H3_OK) {
        free(host);
        return NULL;
    }
    return host;
}

static int golden_tap(void) {
    h3_config *meta = NULL;
    h3_status st = {0};
    int64_t tap = -1;
    if (h3_config_load(h3_test_data("models/tiny-h3/golden_meta.json"), &meta, &st) == H3_OK)
        h3_config_int(meta, "text_encoder_layer", &tap, &st);
    CHECK(tap >= 0, "golden_meta text_encoder_layer: %s", st.message);
    h3_config_free(meta);
    return (int)tap;
}

/* hidden_states[tap] of t2va against hidden_states_all[tap]; prompt_embeds when tap is the golden's. */
static void check_tap(int tap, int is_golden_tap) {
    h3_status st = {0};
    h3_text_encoder *te = NULL;
    h3_status_code rc = h3_text_encoder_load(be, h3_test_data(TINY_DIR), tap, &te, &st);
    CHECK(rc == H3_OK, "load tap %d: %s", tap, st.message);
    if (rc != H3_OK) return;
    CHECK(h3_text_encoder_hidden_size(te) == 40, "hidden size %d", h3_text_encoder_hidden_size(te));
    int n = 0;
    int32_t *ids = golden_ids("t2va.input_ids", &n);
    float *got = ids ? encode(te, ids, n, &st) : NULL;
    CHECK(got != NULL, "forward tap %d: %s", tap, st.message);
    float *all = NULL, *emb = NULL;
    const h3_st_tensor *info;
    if (got && h3_st_read_f32(golden, "t2va.hidden_states_all", &all, &info, &st) == H3_OK) {
        size_t plane = (size_t)n * 40;
        double e = h3_test_rel_l2(got, all + (size_t)tap * plane, plane);
        printf("t2va hidden_states[%d] (%d tokens): rel L2 %.3g\n", tap, n, e);
        CHECK(e < 1e-4, "t2va hidden_states[%d] rel L2 %g", tap, e);
    }
    if (got && is_golden_tap && h3_st_read_f32(golden, "t2va.prompt_embeds", &emb, &info, &st) == H3_OK) {
        CHECK(info->shape[0] == n && info->shape[1] == 40, "prompt_embeds shape");
        double e = h3_test_rel_l2(got, emb, (size_t)n * 40);
        printf("t2va prompt_embeds (tap %d): rel L2 %.3g\n", tap, e);
        CHECK(e < 1e-4, "t2va prompt_embeds rel L2 %g", e);
    }
    free(all);
    free(emb);
    free(got);
    free(ids);
    h3_text_encoder_free(te);
}

/* fl2va: the rows before the first image token are pure text at positions
 * 0..k-1, and causal attention keeps them independent of what follows. */
static void check_fl2va_text_prefix(int tap) {
    h3_status st = {0};
    h3_text_encoder *te = NULL;
    if (h3_text_encoder_load(be, h3_test_data(TINY_DIR), tap, &te, &st) != H3_OK) {
        CHECK(0, "load: %s", st.message);
        return;
    }
    int n = 0, nt = 0;
    int32_t *ids = golden_ids("fl2va.input_ids", &n);
    int32_t *types = golden_ids("fl2va.mm_token_type_ids", &nt);
    int k = 0;
    while (ids && types && k < nt && types[k] == 0) k++;
    CHECK(k > 0 && k < n, "fl2va text prefix has %d rows of %d", k, n);
    float *got = k > 0 ? encode(te, ids, k, &st) : NULL;
    float *emb = NULL;
    const h3_st_tensor *info;
    if (got && h3_st_read_f32(golden, "fl2va.prompt_embeds", &emb, &info, &st) == H3_OK) {
        double e = h3_test_rel_l2(got, emb, (size_t)k * 40);
        printf("fl2va prompt_embeds rows 0..%d (text prefix): rel L2 %.3g\n", k - 1, e);
        CHECK(e < 1e-4, "fl2va prefix rel L2 %g", e);
    } else {
        CHECK(0, "fl2va prefix: %s", st.message);
    }
    free(emb);
    free(got);
    free(ids);
    free(types);
    h3_text_encoder_free(te);
}

/* ---- FL2VA: the presentation with a keyframe and its hidden state ------------------- */

#define TINY_TOKENIZER "models/tiny-h3/tokenizer"
#define TINY_PROCESSOR "models/tiny-h3/processor"

/* The golden keyframe (already on the 64x32 canvas) as an image. */
static int golden_keyframe(h3_rgb_image *img) {
    const h3_st_tensor *t = h3_st_find(golden, "fl2va.keyframe_uint8");
    if (!t || t->dtype != H3_ST_U8 || t->ndim != 3) return 0;
    *img = (h3_rgb_image){(int)t->shape[1], (int)t->shape[0], (size_t)t->shape[1] * 3, (uint8_t *)t->data};
    return 1;
}

/* How many of n int32 values differ from the golden I64 tensor `name` (which
 * must have n values); -1 when it is missing. */
static int diff_ids(const char *name, const int32_t *got, int n) {
    int m = 0;
    int32_t *want = golden_ids(name, &m);
    if (!want || m != n) {
        free(want);
        return -1;
    }
    int d = 0;
    for (int i = 0; i < n; i++) d += got[i] != want[i];
    free(want);
    return d;
}

static int build_fl2va(h3_text_encoder *te, const h3_tokenizer *tok, h3_text_presentation *p, h3_status *st) {
    h3_image_processor_config proc;
    h3_rgb_image kf;
    if (!golden_keyframe(&kf)) return 0;
    if (h3_image_processor_config_load(h3_test_data(TINY_PROCESSOR), &proc, st) != H3_OK) return 0;
    return h3_text_presentation_build(te, tok, &proc, "a robot dancing", &kf, 1, p, st) == H3_OK;
}

/* input_ids, mm_token_type_ids, tags and M-RoPE positions of the golden. */
static void check_fl2va_presentation(const h3_text_presentation *p) {
    CHECK(p->n == 21 && p->n_images == 1, "fl2va presentation: %d rows, %d images", p->n, p->n_images);
    CHECK(p->grid_thw[0][0] == 1 && p->grid_thw[0][1] == 2 && p->grid_thw[0][2] == 4, "grid");
    CHECK(diff_ids("fl2va.input_ids", p->ids, p->n) == 0, "input_ids differ");
    CHECK(diff_ids("fl2va.mm_token_type_ids", p->mm_types, p->n) == 0, "mm_token_type_ids differ");
    CHECK(diff_ids("fl2va.text_token_tags", p->tags, p->n) == 0, "text_token_tags differ");
    CHECK(diff_ids("fl2va.rope_position_ids", p->positions, 3 * p->n) == 0, "M-RoPE positions differ");
    printf("fl2va presentation:");
    for (int i = 0; i < p->n; i++) printf(" %d/%d@(%d,%d,%d)", p->ids[i], p->tags[i], p->positions[i],
                                          p->positions[p->n + i], p->positions[2 * p->n + i]);
    printf("\n");
}

static float *encode_presentation(h3_text_encoder *te, const h3_text_presentation *p, h3_status *st) {
    int D = h3_text_encoder_hidden_size(te);
    size_t mark = h3_arena_mark(be);
    h3_tensor out = h3_new_2d(be, h3_backend_compute_dtype(be), p->n, D);
    float *host = malloc((size_t)p->n * D * sizeof *host);
    h3_status_code rc = h3_text_encoder_encode(te, p, &out, st);
    if (rc == H3_OK) rc = h3_tensor_download_f32(be, &out, host, st);
    h3_arena_reset(be, mark);
    if (rc != H3_OK) {
        free(host);
        return NULL;
    }
    return host;
}

/* hidden_states[tap] of the fl2va case: the vision tower, the image rows and
 * the DeepStack adds, against transformers. Taps 1..3 check where DeepStack
 * enters (after layers 0 and 1 for the tiny model). */
static void check_fl2va_tap(const h3_tokenizer *tok, int tap, const char *golden_name, int plane_index) {
    h3_status st = {0};
    h3_text_encoder *te = NULL;
    if (h3_text_encoder_load(be, h3_test_data(TINY_DIR), tap, &te, &st) != H3_OK) {
        CHECK(0, "load tap %d: %s", tap, st.message);
        return;
    }
    CHECK(h3_text_encoder_has_vision(te), "the tiny text encoder has a vision tower");
    h3_text_presentation p;
    int ok = build_fl2va(te, tok, &p, &st);
    CHECK(ok, "fl2va presentation: %s", st.message);
    if (ok && tap == golden_tap()) check_fl2va_presentation(&p);
    float *got = ok ? encode_presentation(te, &p, &st) : NULL;
    CHECK(got != NULL, "fl2va encode tap %d: %s", tap, st.message);
    float *want = NULL;
    const h3_st_tensor *info;
    if (got && h3_st_read_f32(golden, golden_name, &want, &info, &st) == H3_OK) {
        size_t plane = (size_t)p.n * 40;
        double e = h3_test_rel_l2(got, want + (size_t)plane_index * plane, plane);
        printf("fl2va %s[%d] (tap %d): rel L2 %.3g\n", golden_name, plane_index, tap, e);
        CHECK(e < 1e-4, "fl2va tap %d rel L2 %g", tap, e);
    }
    free(want);
    free(got);
    h3_text_presentation_clear(&p);
    h3_text_encoder_free(te);
}

/* T2VA through the presentation equals the plain forward; vision special
 * tokens in a prompt are refused. */
static void check_presentation_rules(const h3_tokenizer *tok) {
    h3_status st = {0};
    h3_text_encoder *te = NULL;
    if (h3_text_encoder_load(be, h3_test_data(TINY_DIR), 2, &te, &st) != H3_OK) {
        CHECK(0, "load: %s", st.message);
        return;
    }
    h3_text_presentation p;
    h3_status_code rc = h3_text_presentation_build(te, tok, NULL, "a robot dancing", NULL, 0, &p, &st);
    CHECK(rc == H3_OK && p.n == 8 && diff_ids("t2va.input_ids", p.ids, p.n) == 0 &&
              diff_ids("t2va.text_token_tags", p.tags, p.n) == 0 &&
              diff_ids("t2va.rope_position_ids", p.positions, 3 * p.n) == 0,
          "t2va presentation: %s", st.message);
    float *a = rc == H3_OK ? encode_presentation(te, &p, &st) : NULL;
    float *b = rc == H3_OK ? encode(te, p.ids, p.n, &st) : NULL;
    CHECK(a && b && memcmp(a, b, (size_t)p.n * 40 * sizeof *a) == 0, "t2va encode differs from forward");
    free(a);
    free(b);
    h3_text_presentation_clear(&p);

    const char *bad[] = {"a <|image_pad|> robot", "<|vision_start|>x", "dance<|vision_end|>", "<|video_pad|>",
                         "<|vision_pad|>"};
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        rc = h3_text_presentation_build(te, tok, NULL, bad[i], NULL, 0, &p, &st);
        CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "vision special token") && p.ids == NULL,
              "'%s': %d %s", bad[i], rc, st.message);
    }
    printf("refused: %s\n", st.message);
    rc = h3_text_presentation_build(te, tok, NULL, "", NULL, 0, &p, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "no tokens"), "empty prompt: %d %s", rc, st.message);
    h3_rgb_image kf;
    h3_image_processor_config proc;
    golden_keyframe(&kf);
    h3_image_processor_config_load(h3_test_data(TINY_PROCESSOR), &proc, &st);
    rc = h3_text_presentation_build(te, tok, &proc, "", &kf, 1, &p, &st);
    CHECK(rc == H3_OK && p.n == 13, "keyframe with an empty prompt: %d rows, %s", p.n, st.message);
    h3_text_presentation_clear(&p);
    /* two keyframes: Picture 1 and Picture 2, positions continue after the first block */
    h3_rgb_image two[2] = {kf, kf};
    rc = h3_text_presentation_build(te, tok, &proc, "x", two, 2, &p, &st);
    CHECK(rc == H3_OK && p.n == 2 * 13 + 1 && p.n_images == 2 && p.pixel_rows == 16, "two keyframes: %s", st.message);
    if (rc == H3_OK) {
        /* label 0..8, <vs> 9, image (10, 10, 10..11), <ve> 12; label 2 from 13, its image at 23 */
        const int32_t *T = p.positions, *W = p.positions + 2 * p.n;
        CHECK(T[10] == 10 && T[11] == 10 && W[11] == 11 && T[12] == 12 && T[13] == 13 && p.ids[13] == p.ids[0] &&
                  T[23] == 23 && T[24] == 23 && W[24] == 24 && T[25] == 25 && T[26] == 26 && p.tags[23] == 0 &&
                  p.tags[26] == 1,
              "two keyframes positions");
        float *got = encode_presentation(te, &p, &st);
        CHECK(got != NULL, "two keyframes encode: %s", st.message);
        free(got);
    }
    h3_text_presentation_clear(&p);
    h3_text_encoder_free(te);
}

/* ---- the real release: config values and tensor names ------------------------------ */

static void check_real_config(const h3_text_encoder_config *c) {
    CHECK(c->vocab_size == 151936 && c->hidden_size == 5120 && c->intermediate_size == 25600,
          "real dims %lld %lld %lld", (long long)c->vocab_size, (long long)c->hidden_size,
          (long long)c->intermediate_size);
    CHECK(c->num_layers == 64 && c->num_heads == 64 && c->num_kv_heads == 8 && c->head_dim == 128,
          "real heads %lld %lld %lld %lld", (long long)c->num_layers, (long long)c->num_heads,
          (long long)c->num_kv_heads, (long long)c->head_dim);
    CHECK(c->rope_theta == 5e6 && c->rms_norm_eps == 1e-6 && c->max_positions == 262144, "real rope/eps %g %g",
          c->rope_theta, c->rms_norm_eps);
    CHECK(c->mrope_section[0] == 24 && c->mrope_section[1] == 20 && c->mrope_section[2] == 20,
          "real mrope_section [%d,%d,%d]", c->mrope_section[0], c->mrope_section[1], c->mrope_section[2]);
}

/* The shape docs/spec/h3-conditioner.md §3.1 gives for a real tensor name. */
static int real_shape(const char *name, int64_t *s0, int64_t *s1) {
    static const struct { const char *suffix; int64_t s0, s1; } table[] = {
        {"embed_tokens.weight", 151936, 5120},  {"input_layernorm.weight", 5120, 0},
        {"self_attn.q_proj.weight", 8192, 5120}, {"self_attn.k_proj.weight", 1024, 5120},
        {"self_attn.v_proj.weight", 1024, 5120}, {"self_attn.o_proj.weight", 5120, 8192},
        {"self_attn.q_norm.weight", 128, 0},     {"self_attn.k_norm.weight", 128, 0},
        {"post_attention_layernorm.weight", 5120, 0}, {"mlp.gate_proj.weight", 25600, 5120},
        {"mlp.up_proj.weight", 25600, 5120},     {"mlp.down_proj.weight", 5120, 25600},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(table); i++)
        if (g_str_has_suffix(name, table[i].suffix)) {
            *s0 = table[i].s0;
            *s1 = table[i].s1;
            return 1;
        }
    return 0;
}

static void check_real_names_at(const h3_text_encoder_config *cfg, JsonObject *map, int tap) {
    h3_text_encoder_tensor_info *list = NULL;
    int n = 0;
    h3_status st = {0};
    CHECK(h3_text_encoder_tensor_list(cfg, tap, &list, &n, &st) == H3_OK, "tensor list: %s", st.message);
    CHECK(n == 1 + 11 * tap, "tap %d: %d tensors, want %d", tap, n, 1 + 11 * tap);
    int missing = 0, bad_shard = 0, bad_shape = 0, beyond = 0;
    GRegex *shard_re = g_regex_new("^model-000(0[1-9]|1[0-4])-of-00014\\.safetensors$", 0, 0, NULL);
    for (int i = 0; i < n; i++) {
        const char *name = list[i].name;
        if (!json_object_has_member(map, name)) {
            if (missing++ < 3) fprintf(stderr, "not in the real index: %s\n", name);
            continue;
        }
        const char *shard = json_object_get_string_member(map, name);
        if (!shard || !g_regex_match(shard_re, shard, 0, NULL)) bad_shard++;
        int64_t s0 = 0, s1 = 0;
        int known = real_shape(name, &s0, &s1);
        if (!known || list[i].shape[0] != s0 || (s1 ? list[i].ndim != 2 || list[i].shape[1] != s1 : list[i].ndim != 1)) {
            if (bad_shape++ < 3) fprintf(stderr, "shape of %s differs from spec 3.1\n", name);
        }
        int layer = -1;
        if (sscanf(name, PREFIX "layers.%d.", &layer) == 1 && layer >= tap) beyond++;
        if (!g_str_has_prefix(name, PREFIX)) beyond++;
    }
    g_regex_unref(shard_re);
    CHECK(missing == 0, "tap %d: %d loader names missing from the real index", tap, missing);
    CHECK(bad_shard == 0, "tap %d: %d names map to an unexpected shard", tap, bad_shard);
    CHECK(bad_shape == 0, "tap %d: %d shapes differ from the real model's", tap, bad_shape);
    CHECK(beyond == 0, "tap %d: %d names beyond the tap (or outside the language model)", tap, beyond);
    free(list);
}

static void test_real_names(void) {
    h3_text_encoder_config cfg;
    h3_status st = {0};
    const char *dir = h3_test_data("official/text_encoder");
    h3_status_code rc = h3_text_encoder_config_load(dir, &cfg, &st);
    CHECK(rc == H3_OK, "real config: %s", st.message);
    if (rc != H3_OK) return;
    check_real_config(&cfg);

    JsonParser *p = json_parser_new();
    GError *err = NULL;
    char *index = g_build_filename(dir, "model.safetensors.index.json", NULL);
    int ok = json_parser_load_from_file(p, index, &err);
    CHECK(ok, "index: %s", err ? err->message : "?");
    if (ok) {
        JsonObject *map = json_object_get_object_member(json_node_get_object(json_parser_get_root(p)), "weight_map");
        CHECK(map != NULL, "index has no weight_map");
        if (map) {
            check_real_names_at(&cfg, map, 50); /* what H3 loads */
            check_real_names_at(&cfg, map, (int)cfg.num_layers);
            /* the index does hold what we deliberately skip */
            CHECK(json_object_has_member(map, PREFIX "norm.weight") && json_object_has_member(map, "lm_head.weight") &&
                      json_object_has_member(map, PREFIX "layers.63.mlp.down_proj.weight"),
                  "index lacks norm/lm_head/layer 63");
        }
    }
    if (err) g_error_free(err);
    g_free(index);
    g_object_unref(p);
}

/* ---- errors ------------------------------------------------------------------------ */

/* A safetensors file built from named tensors (data NULL = zeros). */
typedef struct { const char *name; const char *dtype; int ndim; int64_t shape[2]; const void *data; size_t nbytes; } entry;

static void write_safetensors(const char *path, const entry *e, int n) {
    GString *h = g_string_new("{");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        g_string_append_printf(h, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", e[i].name, e[i].dtype);
        for (int d = 0; d < e[i].ndim; d++) g_string_append_printf(h, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
        g_string_append_printf(h, "],\"data_offsets\":[%zu,%zu]}", off, off + e[i].nbytes);
        off += e[i].nbytes;
    }
    g_string_append(h, "}");
    while (h->len % 8) g_string_append_c(h, ' ');
    FILE *f = fopen(path, "wb");
    uint64_t len = h->len;
    for (int i = 0; i < 8; i++) fputc((int)((len >> (8 * i)) & 0xff), f);
    fwrite(h->str, 1, h->len, f);
    for (int i = 0; i < n; i++) {
        if (e[i].data) {
            fwrite(e[i].data, 1, e[i].nbytes, f);
        } else {
            for (size_t j = 0; j < e[i].nbytes; j++) fputc(0, f);
        }
    }
    fclose(f);
    g_string_free(h, TRUE);
}

/* A copy of the tiny encoder's config and the tensors of layer 0 in dir,
 * with `broken` given shape [s0, s1] (or left out when s0 < 0). */
static void make_broken_copy(const char *dir, const char *broken, int64_t s0, int64_t s1) {
    h3_status st = {0};
    h3_checkpoint *ck = NULL;
    g_mkdir_with_parents(dir, 0700);
    char *cfg = NULL;
    gsize len = 0;
    char *src_cfg = g_build_filename(h3_test_data(TINY_DIR), "config.json", NULL);
    char *dst_cfg = g_build_filename(dir, "config.json", NULL);
    g_file_get_contents(src_cfg, &cfg, &len, NULL);
    g_file_set_contents(dst_cfg, cfg, (gssize)len, NULL);
    h3_checkpoint_open(h3_test_data(TINY_DIR), &ck, &st);
    entry e[16];
    int n = 0;
    char names[12][96];
    for (int r = -1; r < 11 && ck; r++) {
        static const char *const suffix[11] = {
            "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
            "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
            "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
        char *name = names[r + 1];
        if (r < 0) snprintf(name, 96, PREFIX "embed_tokens.weight");
        else snprintf(name, 96, PREFIX "layers.0.%s", suffix[r]);
        const h3_st_tensor *t = h3_checkpoint_find(ck, name);
        if (!t) continue;
        entry x = {name, "BF16", t->ndim, {t->shape[0], t->ndim > 1 ? t->shape[1] : 0}, t->data, t->nbytes};
        if (strcmp(name, broken) == 0) {
            if (s0 < 0) continue;
            x.shape[0] = s0;
            x.shape[1] = s1;
            x.ndim = s1 ? 2 : 1;
            x.data = NULL;
            x.nbytes = (size_t)(s0 * (s1 ? s1 : 1)) * 2;
        }
        e[n++] = x;
    }
    char *st_path = g_build_filename(dir, "model.safetensors", NULL);
    write_safetensors(st_path, e, n);
    h3_checkpoint_close(ck);
    g_free(st_path);
    g_free(cfg);
    g_free(src_cfg);
    g_free(dst_cfg);
}

static void remove_copy(const char *dir) {
    char *a = g_build_filename(dir, "config.json", NULL), *b = g_build_filename(dir, "model.safetensors", NULL);
    g_unlink(a);
    g_unlink(b);
    g_rmdir(dir);
    g_free(a);
    g_free(b);
}

static void test_load_errors(void) {
    h3_status st = {0};
    h3_text_encoder *te = NULL;
    char *missing = g_build_filename(tmpdir, "no-such-dir", NULL);
    h3_status_code rc = h3_text_encoder_load(be, missing, 1, &te, &st);
    CHECK(rc == H3_ERR_NOT_FOUND && te == NULL, "missing dir: %d %s", rc, st.message);
    CHECK(strstr(st.message, missing) != NULL, "missing dir message '%s' does not name it", st.message);
    g_free(missing);

    rc = h3_text_encoder_load(be, h3_test_data(TINY_DIR), 53, &te, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && te == NULL, "tap 53 of 52: %d %s", rc, st.message);
    CHECK(strstr(st.message, "53") && strstr(st.message, "52"), "tap message '%s'", st.message);
    rc = h3_text_encoder_load(be, h3_test_data(TINY_DIR), -1, &te, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && te == NULL, "tap -1: %d %s", rc, st.message);
    /* tap == num_hidden_layers is valid (all layers, still no final norm) */
    rc = h3_text_encoder_load(be, h3_test_data(TINY_DIR), 52, &te, &st);
    CHECK(rc == H3_OK && te, "tap 52: %s", st.message);
    h3_text_encoder_free(te);
    te = NULL;

    char *dir = g_build_filename(tmpdir, "broken", NULL);
    const char *k_proj = PREFIX "layers.0.self_attn.k_proj.weight";
    make_broken_copy(dir, k_proj, 33, 40);
    rc = h3_text_encoder_load(be, dir, 1, &te, &st);
    CHECK(rc == H3_ERR_FORMAT && te == NULL, "wrong shape: %d %s", rc, st.message);
    CHECK(strstr(st.message, k_proj) && strstr(st.message, "[33,40]") && strstr(st.message, "[32,40]"),
          "wrong shape message '%s'", st.message);
    printf("wrong shape: %s\n", st.message);
    /* the same copy at tap 0 never reads layer 0, so it loads */
    rc = h3_text_encoder_load(be, dir, 0, &te, &st);
    CHECK(rc == H3_OK && te, "tap 0 of the broken copy: %s", st.message);
    if (te) {
        /* the copy holds no model.visual.*: text only, keyframes refused */
        h3_tokenizer *tok = NULL;
        h3_image_processor_config proc;
        h3_rgb_image kf;
        h3_text_presentation p;
        CHECK(!h3_text_encoder_has_vision(te), "a checkpoint without model.visual.* has no vision tower");
        h3_tokenizer_load(h3_test_data(TINY_TOKENIZER), &tok, &st);
        h3_image_processor_config_load(h3_test_data(TINY_PROCESSOR), &proc, &st);
        golden_keyframe(&kf);
        rc = h3_text_presentation_build(te, tok, &proc, "a robot", &kf, 1, &p, &st);
        CHECK(rc == H3_ERR_UNSUPPORTED && strstr(st.message, "vision tower"), "keyframe without a tower: %d %s", rc,
              st.message);
        h3_tokenizer_free(tok);
    }
    h3_text_encoder_free(te);
    te = NULL;
    remove_copy(dir);

    const char *q_norm = PREFIX "layers.0.self_attn.q_norm.weight";
    make_broken_copy(dir, q_norm, -1, 0);
    rc = h3_text_encoder_load(be, dir, 1, &te, &st);
    CHECK(rc == H3_ERR_NOT_FOUND && te == NULL && strstr(st.message, q_norm), "missing tensor: %d %s", rc, st.message);
    remove_copy(dir);

    const char *norm = PREFIX "layers.0.input_layernorm.weight";
    make_broken_copy(dir, norm, 41, 0);
    rc = h3_text_encoder_load(be, dir, 1, &te, &st);
    CHECK(rc == H3_ERR_FORMAT && te == NULL && strstr(st.message, norm), "wrong norm size: %d %s", rc, st.message);
    remove_copy(dir);
    g_free(dir);
}

/* Config variants parsed from memory-written files: where rope lives, and bad values. */
static h3_status_code load_config_text(const char *text, h3_text_encoder_config *cfg, h3_status *st) {
    char *dir = g_build_filename(tmpdir, "cfg", NULL);
    char *path = g_build_filename(dir, "config.json", NULL);
    g_mkdir_with_parents(dir, 0700);
    g_file_set_contents(path, text, -1, NULL);
    h3_status_code rc = h3_text_encoder_config_load(dir, cfg, st);
    g_unlink(path);
    g_rmdir(dir);
    g_free(path);
    g_free(dir);
    return rc;
}

#define TEXT_CFG(rope) \
    "{\"text_config\":{\"vocab_size\":100,\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":2," \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,\"rms_norm_eps\":1e-6,"            \
    "\"max_position_embeddings\":64" rope "}}"

static void test_config_variants(void) {
    h3_text_encoder_config c;
    h3_status st = {0};
    h3_status_code rc = load_config_text(
        TEXT_CFG(",\"rope_theta\":1000,\"rope_scaling\":{\"mrope_section\":[4,2,2],\"mrope_interleaved\":true}"), &c, &st);
    CHECK(rc == H3_OK && c.rope_theta == 1000 && c.mrope_section[0] == 4, "v4 rope: %s", st.message);
    rc = load_config_text(TEXT_CFG(",\"rope_parameters\":{\"rope_theta\":7e5,\"mrope_section\":[2,3,3]}"), &c, &st);
    CHECK(rc == H3_OK && c.rope_theta == 7e5 && c.mrope_section[1] == 3, "v5 rope: %s", st.message);
    rc = load_config_text(TEXT_CFG(",\"rope_parameters\":{\"rope_theta\":7e5,\"mrope_section\":[4,2,3]}"), &c, &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "mrope_section"), "bad section sum: %d %s", rc, st.message);
    rc = load_config_text(
        TEXT_CFG(",\"rope_parameters\":{\"rope_theta\":7e5,\"mrope_section\":[4,2,2],\"mrope_interleaved\":false}"),
        &c, &st);
    CHECK(rc == H3_ERR_UNSUPPORTED && strstr(st.message, "mrope_interleaved"), "non-interleaved: %d %s", rc,
          st.message);
    rc = load_config_text(TEXT_CFG(",\"rope_parameters\":{\"mrope_section\":[4,2,2]}"), &c, &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "rope_theta"), "no theta: %d %s", rc, st.message);
    rc = load_config_text(TEXT_CFG(""), &c, &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "mrope_section"), "no rope: %d %s", rc, st.message);
    rc = load_config_text("{\"text_config\":{\"hidden_size\":32}}", &c, &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "text_config.vocab_size"), "missing key: %d %s", rc, st.message);
}

static void test_forward_errors(void) {
    h3_status st = {0};
    h3_text_encoder *te = NULL;
    if (h3_text_encoder_load(be, h3_test_data(TINY_DIR), 2, &te, &st) != H3_OK) {
        CHECK(0, "load: %s", st.message);
        return;
    }
    int32_t ids[3] = {5, 1088, 7};
    size_t mark = h3_arena_mark(be);
    h3_tensor out = h3_new_2d(be, h3_backend_compute_dtype(be), 3, 40);
    h3_status_code rc = h3_text_encoder_forward(te, ids, 3, &out, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "1088"), "id out of range: %d %s", rc, st.message);
    ids[1] = 6;
    rc = h3_text_encoder_forward(te, ids, 0, &out, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT, "zero tokens: %d %s", rc, st.message);
    rc = h3_text_encoder_forward(te, ids, 2, &out, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "output"), "wrong output rows: %d %s", rc, st.message);
    rc = h3_text_encoder_forward(te, ids, 3, &out, &st);
    CHECK(rc == H3_OK, "valid forward after errors: %s", st.message);
    h3_arena_reset(be, mark);
    h3_text_encoder_free(te);
}

int main(void) {
    h3_status st = {0};
    tmpdir = g_dir_make_tmp("h3te-XXXXXX", NULL);
    if (h3_backend_cpu_create(2, &be, &st) != H3_OK || h3_st_open(h3_test_data(GOLDEN), &golden, &st) != H3_OK) {
        fprintf(stderr, "setup: %s\n", st.message);
        return 1;
    }
    int tap = golden_tap();
    if (tap >= 0) {
        check_tap(tap, 1);
        check_fl2va_text_prefix(tap);
    }
    h3_tokenizer *tok = NULL;
    if (h3_tokenizer_load(h3_test_data(TINY_TOKENIZER), &tok, &st) != H3_OK) {
        fprintf(stderr, "tokenizer: %s\n", st.message);
        return 1;
    }
    if (tap >= 0) check_fl2va_tap(tok, tap, "fl2va.prompt_embeds", 0);
    for (int t = 1; t <= 3; t++) check_fl2va_tap(tok, t, "fl2va.hidden_states_all", t);
    check_presentation_rules(tok);
    h3_tokenizer_free(tok);
    check_tap(0, 0);  /* embeddings */
    check_tap(1, 0);
    check_tap(51, 0); /* last pre-norm hidden state stored in the golden */
    test_real_names();
    test_config_variants();
    test_load_errors();
    test_forward_errors();
    h3_st_close(golden);
    h3_backend_destroy(be);
    g_rmdir(tmpdir);
    g_free(tmpdir);
    return h3_test_finish("test_text_encoder");
}
