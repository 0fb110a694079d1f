/* test_config_ranges.c - every component's config loader against values out
 * of range (issue 14): each is copied from a tiny or the official config into
 * a temp folder with one value changed, and must give an H3_ERR_FORMAT naming
 * the file, the key and the value, never a wrapped int, a signed overflow
 * (UBSan in the sanitizer job), "out of memory" or a silent success. The
 * ranges themselves are in docs/RELIABILITY.md, "Ranges and files". */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdint.h>
#include <unistd.h>

#include "base/h3_config.h"
#include "base/h3_safetensors.h"
#include "model/h3_audio_vae.h"
#include "model/h3_dit_plan.h"
#include "model/h3_text_encoder.h"
#include "model/h3_video_vae.h"
#include "h3_test.h"

static char *tmpdir;

/* The node at a dotted key of root, created as an int member when absent. */
static JsonObject *parent_of(JsonObject *root, const char *key, const char **leaf) {
    char **parts = g_strsplit(key, ".", -1);
    JsonObject *o = root;
    int i = 0;
    for (; parts[i + 1] && o; i++) {
        JsonNode *n = json_object_get_member(o, parts[i]);
        o = n && JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
    }
    *leaf = key + (strlen(key) - strlen(parts[i]));
    g_strfreev(parts);
    return o;
}

/* Copies `from` (a config.json) to dir/config.json with `key` set to the
 * JSON text `value` (a number, an array). dir is created. */
static void write_edited(const char *from, const char *dir, const char *key, const char *value) {
    g_mkdir_with_parents(dir, 0700);
    JsonParser *p = json_parser_new();
    CHECK(json_parser_load_from_file(p, from, NULL), "parse %s", from);
    JsonObject *root = json_node_get_object(json_parser_get_root(p));
    if (key) {
        const char *leaf;
        JsonObject *o = parent_of(root, key, &leaf);
        JsonParser *vp = json_parser_new();
        CHECK(o && json_parser_load_from_data(vp, value, -1, NULL), "%s: key %s / value %s", from, key, value);
        if (o) json_object_set_member(o, leaf, json_node_copy(json_parser_get_root(vp)));
        g_object_unref(vp);
    }
    JsonGenerator *g = json_generator_new();
    json_generator_set_root(g, json_parser_get_root(p));
    char *out = g_build_filename(dir, "config.json", NULL);
    CHECK(json_generator_to_file(g, out, NULL), "write %s", out);
    g_free(out);
    g_object_unref(g);
    g_object_unref(p);
}

static void expect_range_error(const char *label, h3_status_code rc, const h3_status *st, const char *key,
                               const char *value) {
    CHECK(rc == H3_ERR_FORMAT, "%s: expected a format error, got %d (%s)", label, rc, st->message);
    CHECK(strstr(st->message, key) != NULL, "%s: message '%s' lacks the key '%s'", label, st->message, key);
    CHECK(strstr(st->message, value) != NULL, "%s: message '%s' lacks the value '%s'", label, st->message, value);
    CHECK(strstr(st->message, "config.json") != NULL, "%s: message '%s' names no file", label, st->message);
    CHECK(strstr(st->message, "out of memory") == NULL, "%s: '%s'", label, st->message);
}

/* ---- DiT ---------------------------------------------------------------------- */

static h3_status_code dit_with(const char *key, const char *value, h3_status *st) {
    char *dir = g_build_filename(tmpdir, "dit", NULL);
    write_edited(h3_test_data("models/tiny-h3/transformer/config.json"), dir, key, value);
    h3_dit_config cfg;
    h3_status_code rc = h3_dit_config_load(dir, &cfg, st);
    g_free(dir);
    return rc;
}

static void test_dit(void) {
    h3_status st = {0};
    CHECK(dit_with(NULL, NULL, &st) == H3_OK, "tiny dit config as is: %s", st.message);
    /* Passed the int32 check and died as "out of memory" at the block array. */
    expect_range_error("dit num_layers", dit_with("num_layers", "2147483647", &st), &st, "\"num_layers\"",
                       "2147483647");
    expect_range_error("dit hidden_size", dit_with("hidden_size", "4294967296", &st), &st, "\"hidden_size\"",
                       "4294967296");
    expect_range_error("dit heads", dit_with("num_attention_heads", "65536", &st), &st, "\"num_attention_heads\"",
                       "65536");
    expect_range_error("dit ffn", dit_with("ffn_dim", "-5", &st), &st, "\"ffn_dim\"", "-5");
    expect_range_error("dit patch", dit_with("patch_size", "[1, 2, 4294967298]", &st), &st, "\"patch_size[2]\"",
                       "4294967298");
    /* 1e300 became inf as a float. */
    expect_range_error("dit rope_theta", dit_with("rope_theta", "1e300", &st), &st, "\"rope_theta\"", "1e+300");
    expect_range_error("dit eps", dit_with("norm_eps", "1e60", &st), &st, "\"norm_eps\"", "1e+60");
}

/* ---- text encoder ------------------------------------------------------------- */

static h3_status_code te_with(const char *key, const char *value, h3_status *st) {
    char *dir = g_build_filename(tmpdir, "te", NULL);
    write_edited(h3_test_data("models/tiny-h3/text_encoder/config.json"), dir, key, value);
    h3_text_encoder_config cfg;
    h3_status_code rc = h3_text_encoder_config_load(dir, &cfg, st);
    g_free(dir);
    return rc;
}

static void test_text_encoder(void) {
    h3_status st = {0};
    CHECK(te_with(NULL, NULL, &st) == H3_OK, "tiny text encoder config as is: %s", st.message);
    /* 2^30 passed: heads x head_dim x hidden then overflowed int64. */
    expect_range_error("te heads", te_with("text_config.num_attention_heads", "1073741824", &st), &st,
                       "num_attention_heads", "1073741824");
    expect_range_error("te vocab", te_with("text_config.vocab_size", "1073741824", &st), &st, "vocab_size",
                       "1073741824");
    expect_range_error("te layers", te_with("text_config.num_hidden_layers", "100000", &st), &st,
                       "num_hidden_layers", "100000");
    expect_range_error("te rope_theta", te_with("text_config.rope_parameters.rope_theta", "1e300", &st), &st,
                       "rope_theta", "1e+300");
}

/* ---- audio VAE ---------------------------------------------------------------- */

static h3_status_code audio_with(const char *key, const char *value, const char *key2, const char *value2,
                                 h3_status *st) {
    char *dir = g_build_filename(tmpdir, "audio", NULL);
    write_edited(h3_test_data("models/tiny-h3/audio_vae/config.json"), dir, key, value);
    if (key2) {
        char *mid = g_build_filename(dir, "config.json", NULL), *copy = g_build_filename(tmpdir, "audio.json", NULL);
        g_rename(mid, copy);
        write_edited(copy, dir, key2, value2);
        g_unlink(copy);
        g_free(copy);
        g_free(mid);
    }
    h3_audio_vae_config cfg;
    h3_status_code rc = h3_audio_vae_config_load(dir, &cfg, st);
    g_free(dir);
    return rc;
}

static void test_audio_vae(void) {
    h3_status st = {0};
    CHECK(audio_with(NULL, NULL, NULL, NULL, &st) == H3_OK, "tiny audio VAE config as is: %s", st.message);
    /* Four rates of 65536 (each in range) multiplied past int64 in int64_t
     * hop *= r: a signed overflow. */
    const char *rates = "[65536, 65536, 65536, 65536, 65536]";
    expect_range_error("audio decoder rates", audio_with("decoder_rates", rates, "decoder_kernel_sizes", rates, &st),
                       &st, "decoder_rates", "65536");
    /* The encoder's product too (64 entries allowed). */
    expect_range_error("audio encoder rates",
                       audio_with("encoder_rates", "[65536, 65536, 65536, 65536, 65536, 65536]", NULL, NULL, &st), &st,
                       "encoder_rates", "65536");
    expect_range_error("audio sampling rate", audio_with("sampling_rate", "4294967296", NULL, NULL, &st), &st,
                       "\"sampling_rate\"", "4294967296");
    expect_range_error("audio one rate", audio_with("decoder_rates", "[5, 4, 4294967298]", NULL, NULL, &st), &st,
                       "\"decoder_rates[2]\"", "4294967298");
}

/* ---- video VAE ---------------------------------------------------------------- */

static h3_status_code video_with(const char *key, const char *value, h3_status *st) {
    char *dir = g_build_filename(tmpdir, "video", NULL);
    write_edited(h3_test_data("models/tiny-h3/vae/config.json"), dir, key, value);
    h3_checkpoint *ck = NULL;
    h3_status_code rc = h3_video_vae_dummy_checkpoint(dir, 1, &ck, st);
    h3_checkpoint_close(ck);
    g_free(dir);
    return rc;
}

/* The native layout: video_vae/config.json names source/ with the decoder's own config. */
static h3_status_code native_video_with(const char *key, const char *value, h3_status *st) {
    char *dir = g_build_filename(tmpdir, "native_video", NULL), *src = g_build_filename(dir, "source", NULL);
    write_edited(h3_test_data("official/FL2VA/video_vae/config.json"), dir, key, value);
    write_edited(h3_test_data("official/FL2VA/video_vae/source/config.json"), src, NULL, NULL);
    h3_checkpoint *ck = NULL;
    h3_status_code rc = h3_video_vae_dummy_checkpoint(dir, 1, &ck, st);
    h3_checkpoint_close(ck);
    g_free(src);
    g_free(dir);
    return rc;
}

static void test_video_vae(void) {
    h3_status st = {0};
    CHECK(video_with(NULL, NULL, &st) == H3_OK, "tiny video VAE config as is: %s", st.message);
    /* floor(head_dim x 1e300) became an int: undefined behaviour. */
    expect_range_error("video rope ratio", video_with("decoder_rope_dim_ratio", "1e300", &st), &st,
                       "decoder_rope_dim_ratio", "1e+300");
    expect_range_error("video heads", video_with("decoder_num_attention_heads", "4294967297", &st), &st,
                       "decoder_num_attention_heads", "4294967297");
    expect_range_error("video layers", video_with("decoder_num_layers", "2147483647", &st), &st,
                       "decoder_num_layers", "2147483647");

    CHECK(native_video_with(NULL, NULL, &st) == H3_OK, "official native video VAE config as is: %s", st.message);
    /* source_path escaped the model folder. */
    h3_status_code rc = native_video_with("source_path", "\"../../..\"", &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "source_path") && strstr(st.message, "outside"),
          "source_path ../../..: %d %s", rc, st.message);
    rc = native_video_with("source_path", "\"/etc\"", &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "source_path"), "absolute source_path: %d %s", rc, st.message);
    rc = native_video_with("source_safetensors_path", "\"../../../etc/passwd\"", &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "source_safetensors_path"), "source_safetensors_path ..: %d %s",
          rc, st.message);
    /* A decoder config outside the VAE folder, which the old loader read. */
    char *outside = g_build_filename(tmpdir, "outside", NULL);
    write_edited(h3_test_data("official/FL2VA/video_vae/source/config.json"), outside, NULL, NULL);
    rc = native_video_with("source_path", "\"../outside\"", &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "source_path") && strstr(st.message, "outside the model folder"),
          "source_path ../outside: %d %s", rc, st.message);
    /* A symlink inside the folder that leads out of it. */
    char *link = g_build_filename(tmpdir, "native_video", "out", NULL);
    CHECK(symlink(outside, link) == 0, "symlink %s", link);
    g_free(outside);
    rc = native_video_with("source_path", "\"out\"", &st);
    CHECK(rc == H3_ERR_FORMAT && strstr(st.message, "outside"), "source_path through a symlink: %d %s", rc,
          st.message);
    g_unlink(link);
    g_free(link);
}

static void remove_tree(const char *path) {
    GDir *d = g_file_test(path, G_FILE_TEST_IS_SYMLINK) ? NULL : g_dir_open(path, 0, NULL);
    if (d) {
        const char *n;
        while ((n = g_dir_read_name(d))) {
            char *p = g_build_filename(path, n, NULL);
            remove_tree(p);
            g_free(p);
        }
        g_dir_close(d);
        g_rmdir(path);
    } else {
        g_unlink(path);
    }
}

int main(void) {
    tmpdir = g_dir_make_tmp("h3cfg-XXXXXX", NULL);
    test_dit();
    test_text_encoder();
    test_audio_vae();
    test_video_vae();
    remove_tree(tmpdir);
    g_free(tmpdir);
    return h3_test_finish("test_config_ranges");
}
