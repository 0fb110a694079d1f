/* test_safetensors.c - the strict safetensors reader and sharded checkpoints:
 * real files parse; every malformed variant is a clear error, never a crash. */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/h3_config.h"
#include "base/h3_file.h"
#include "base/h3_safetensors.h"
#include "base/h3_size.h"
#include "h3_test.h"

static char *tmpdir;

/* Writes a safetensors file from a header string and n data bytes. */
static char *write_st(const char *name, const char *header, size_t data_bytes, int64_t len_override) {
    char *path = g_build_filename(tmpdir, name, NULL);
    FILE *f = fopen(path, "wb");
    uint64_t n = len_override >= 0 ? (uint64_t)len_override : strlen(header);
    for (int i = 0; i < 8; i++) fputc((int)((n >> (8 * i)) & 0xff), f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_bytes; i++) fputc((int)(i & 0xff), f);
    fclose(f);
    return path;
}

static void expect_error(const char *label, const char *header, size_t data, int64_t len_override,
                         const char *must_contain) {
    char *p = write_st("bad.safetensors", header, data, len_override);
    h3_st_file *f = NULL;
    h3_status st = {0};
    h3_status_code rc = h3_st_open(p, &f, &st);
    CHECK(rc == H3_ERR_FORMAT && f == NULL, "%s: expected a format error, got %d (%s)", label, rc, st.message);
    CHECK(strstr(st.message, must_contain) != NULL, "%s: message '%s' lacks '%s'", label, st.message, must_contain);
    CHECK(strstr(st.message, p) != NULL, "%s: message '%s' does not name the file", label, st.message);
    h3_st_close(f);
    g_unlink(p);
    g_free(p);
}

static void test_good_file(void) {
    char *p = write_st("good.safetensors",
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
                       "\"__metadata__\":{\"format\":\"pt\"}}",
                       22, -1);
    h3_st_file *f;
    h3_status st = {0};
    CHECK(h3_st_open(p, &f, &st) == H3_OK, "open: %s", st.message);
    if (!f) return;
    CHECK(h3_st_count(f) == 2, "count %zu", h3_st_count(f));
    const h3_st_tensor *a = h3_st_find(f, "a"), *b = h3_st_find(f, "b");
    CHECK(a && a->numel == 4 && a->nbytes == 16 && a->dtype == H3_ST_F32, "tensor a");
    CHECK(b && b->numel == 3 && b->ndim == 1 && b->shape[0] == 3, "tensor b");
    CHECK(h3_st_metadata(f, "format") && strcmp(h3_st_metadata(f, "format"), "pt") == 0, "metadata");
    CHECK(h3_st_find(f, "missing") == NULL, "missing tensor found");
    h3_st_close(f);
    g_unlink(p);
    g_free(p);
}

static void test_bad_files(void) {
    expect_error("bad json", "{\"a\":", 0, -1, "JSON");
    expect_error("not object", "[1,2]  ", 0, -1, "not a JSON object");
    expect_error("header too long", "{}", 0, 1000, "header length");
    expect_error("bad dtype", "{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1, "dtype");
    expect_error("size mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, -1, "'a'");
    expect_error("truncated", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, -1, "truncated");
    expect_error("overlap",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                 12, -1, "overlap");
    expect_error("negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, -1, "shape");
    expect_error("offsets reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, -1, "data_offsets");
    expect_error("missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, -1, "'a'");

    char *p = g_build_filename(tmpdir, "short.safetensors", NULL);
    g_file_set_contents(p, "abc", 3, NULL);
    h3_st_file *f = NULL;
    h3_status st = {0};
    CHECK(h3_st_open(p, &f, &st) == H3_ERR_FORMAT, "3-byte file: %s", st.message);
    g_unlink(p);
    g_free(p);
    CHECK(h3_st_open("/nonexistent/x.safetensors", &f, &st) == H3_ERR_NOT_FOUND, "missing file: %s", st.message);
}

/* Issue 14: what the header check let through before. */
/* Issue 31: a 200 KB header of 100,000 levels (far under the 100 MB header
 * limit) overflowed json-glib's recursion, SIGSEGV before any error. */
static void test_deep_header(void) {
    GString *h = g_string_new("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                              "\"__metadata__\":{\"x\":");
    for (int i = 0; i < 100000; i++) g_string_append_c(h, '[');
    for (int i = 0; i < 100000; i++) g_string_append_c(h, ']');
    g_string_append(h, "}}");
    expect_error("100,000-deep header", h->str, 4, -1, "256 levels");
    g_string_free(h, TRUE);
}

static void test_header_hardening(void) {
    /* A name twice: json-glib kept the last one silently. */
    expect_error("duplicate name",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 8, -1, "'a' twice");
    expect_error("duplicate key inside an entry",
                 "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, -1,
                 "'dtype' twice");
    /* A zero-size tensor inside another's range passed the overlap check. */
    expect_error("zero-size tensor inside another",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                 8, -1, "overlap");
    expect_error("gap between tensors",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                 12, -1, "belong to no tensor");
    expect_error("first tensor not at 0", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                 -1, "belong to no tensor");
    expect_error("trailing bytes", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, -1,
                 "trailing");
    expect_error("shape product overflows",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, -1,
                 "overflows");
    expect_error("shape bytes overflow",
                 "{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8, -1,
                 "'a'");
    /* Zero-size tensors between two others, at the start and at the end are fine. */
    char *p = write_st("zeros.safetensors",
                       "{\"z0\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"z1\":{\"dtype\":\"BF16\",\"shape\":[3,0],\"data_offsets\":[4,4]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                       "\"z2\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}",
                       8, -1);
    h3_st_file *f = NULL;
    h3_status st = {0};
    CHECK(h3_st_open(p, &f, &st) == H3_OK && h3_st_count(f) == 5, "zero-size tensors at the seams: %s", st.message);
    h3_st_close(f);
    g_unlink(p);
    g_free(p);
}

/* A dummy tensor's bytes wrapped size_t (2^62 F32 elements: 0 bytes). */
static void test_dummy_sizes(void) {
    h3_checkpoint *c = NULL;
    h3_status st = {0};
    CHECK(h3_checkpoint_dummy_new("dummy", 1, &c, &st) == H3_OK, "dummy: %s", st.message);
    if (!c) return;
    int64_t huge[2] = {(int64_t)1 << 62, 1};
    CHECK(h3_checkpoint_dummy_add(c, "w", H3_ST_F32, 2, huge, 0, 1, &st) != H3_OK && strstr(st.message, "'w'") &&
              strstr(st.message, "bytes"),
          "2^62 F32 elements: %s", st.message);
    CHECK(h3_checkpoint_find(c, "w") == NULL, "refused tensor listed");
    int64_t ok[2] = {3, 4};
    CHECK(h3_checkpoint_dummy_add(c, "w", H3_ST_BF16, 2, ok, 0, 1, &st) == H3_OK &&
              h3_checkpoint_find(c, "w")->nbytes == 24,
          "3x4 BF16: %s", st.message);
    h3_checkpoint_close(c);
}

/* A FIFO in place of a weights or config file: open() without O_NONBLOCK
 * blocked forever (no writer). Now it is refused at once; the alarm turns a
 * regression into a failure instead of a test that hangs until its timeout. */
static void test_not_regular(void) {
    char *fifo = g_build_filename(tmpdir, "fifo.safetensors", NULL);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    alarm(20);
    h3_st_file *f = NULL;
    h3_status st = {0};
    CHECK(h3_st_open(fifo, &f, &st) == H3_ERR_IO && strstr(st.message, "not a regular file") &&
              strstr(st.message, "FIFO"),
          "FIFO as weights: %s", st.message);
    h3_config *c = NULL;
    CHECK(h3_config_load(fifo, &c, &st) == H3_ERR_IO && strstr(st.message, fifo), "FIFO as config: %s", st.message);
    char *dir = g_build_filename(tmpdir, "fifo-ckpt", NULL);
    g_mkdir(dir, 0700);
    char *in_dir = g_build_filename(dir, "model.safetensors", NULL);
    CHECK(mkfifo(in_dir, 0600) == 0, "mkfifo %s", in_dir);
    h3_checkpoint *ck = NULL;
    CHECK(h3_checkpoint_open(dir, &ck, &st) == H3_ERR_IO && strstr(st.message, "not a regular file"),
          "FIFO in a checkpoint folder: %s", st.message);
    CHECK(h3_st_open(tmpdir, &f, &st) == H3_ERR_IO && strstr(st.message, "directory"), "directory: %s", st.message);
    alarm(0);
    g_unlink(in_dir);
    g_rmdir(dir);
    g_unlink(fifo);
    g_free(in_dir);
    g_free(dir);
    g_free(fifo);
}

static void test_config_duplicates(void) {
    h3_config *c = NULL;
    h3_status st = {0};
    CHECK(h3_config_parse("{\"num_layers\": 2, \"num_layers\": 50}", "dup.json", &c, &st) == H3_ERR_FORMAT &&
              strstr(st.message, "num_layers") && strstr(st.message, "twice"),
          "config key twice: %s", st.message);
    CHECK(h3_config_parse("{\"a\": {\"b\": 1, \"b\": 2}}", "dup.json", &c, &st) == H3_ERR_FORMAT &&
              strstr(st.message, "\"b\""),
          "nested key twice: %s", st.message);
    CHECK(h3_config_parse("{\"a\": {\"b\": 1}, \"c\": {\"b\": 2}}", "ok.json", &c, &st) == H3_OK,
          "one name in two objects: %s", st.message);
    h3_config_free(c);
}

static void test_size_helpers(void) {
    uint64_t r = 0;
    h3_status st = {0};
    CHECK(h3_size_mul(1u << 20, 1u << 20, &r, &st, "x") == H3_OK && r == (1ull << 40), "mul");
    CHECK(h3_size_mul(UINT64_MAX / 2, 3, &r, &st, "%s: \"%s\"", "cfg.json", "rates") == H3_ERR_FORMAT &&
              strstr(st.message, "cfg.json: \"rates\"") && strstr(st.message, "overflows"),
          "mul overflow: %s", st.message);
    CHECK(h3_size_add(UINT64_MAX, 1, &r, &st, "sum") == H3_ERR_FORMAT && strstr(st.message, "overflows"),
          "add overflow: %s", st.message);
    CHECK(h3_size_mul_max(1000, 1000, 999999, &r, &st, "hop") == H3_ERR_FORMAT && strstr(st.message, "exceeds 999999"),
          "mul past max: %s", st.message);
    CHECK(h3_size_mul_max(1000, 1000, 1000000, &r, &st, "hop") == H3_OK && r == 1000000, "mul at max");
    CHECK(h3_config_check_range("cfg.json", "k", 4294967297LL, 0, 64, &st) == H3_ERR_FORMAT &&
              strstr(st.message, "cfg.json") && strstr(st.message, "\"k\"") && strstr(st.message, "4294967297") &&
              strstr(st.message, "[0, 64]"),
          "range message: %s", st.message);
}

static void test_path_inside(void) {
    char *root = g_build_filename(tmpdir, "root", NULL), *sub = g_build_filename(root, "sub", NULL);
    g_mkdir(root, 0700);
    g_mkdir(sub, 0700);
    char *link = g_build_filename(root, "escape", NULL);
    CHECK(symlink("/", link) == 0, "symlink");
    h3_status st = {0};
    CHECK(h3_path_check_inside(root, sub, "cfg", &st) == H3_OK, "sub folder: %s", st.message);
    char *up = g_build_filename(sub, "..", "..", NULL);
    CHECK(h3_path_check_inside(root, up, "cfg \"source_path\"", &st) == H3_ERR_FORMAT &&
              strstr(st.message, "outside the model folder") && strstr(st.message, "source_path"),
          "../..: %s", st.message);
    CHECK(h3_path_check_inside(root, link, "cfg", &st) == H3_ERR_FORMAT, "symlink out: %s", st.message);
    CHECK(h3_path_check_file_name(root, "sub/x.safetensors", "cfg", &st) == H3_OK, "file in sub: %s", st.message);
    CHECK(h3_path_check_file_name(root, "../x.safetensors", "cfg", &st) == H3_ERR_FORMAT, "file ..: %s", st.message);
    CHECK(h3_path_check_file_name(root, "/etc/passwd", "cfg", &st) == H3_ERR_FORMAT, "absolute file: %s", st.message);
    CHECK(h3_path_check_file_name(root, "escape/etc/passwd", "cfg", &st) == H3_ERR_FORMAT, "file through a link: %s",
          st.message);
    g_unlink(link);
    g_rmdir(sub);
    g_rmdir(root);
    g_free(up);
    g_free(link);
    g_free(sub);
    g_free(root);
}

static void test_real_checkpoints(void) {
    h3_checkpoint *c;
    h3_status st = {0};
    /* single-file diffusers transformer */
    CHECK(h3_checkpoint_open(h3_test_data("models/tiny-h3/transformer"), &c, &st) == H3_OK, "tiny transformer: %s",
          st.message);
    if (c) {
        const h3_st_tensor *t;
        int64_t shape[2] = {48, 96};
        CHECK(h3_checkpoint_get(c, "proj_in.weight", 2, shape, &t, &st) == H3_OK, "proj_in: %s", st.message);
        int64_t wrong[2] = {96, 48};
        CHECK(h3_checkpoint_get(c, "proj_in.weight", 2, wrong, &t, &st) == H3_ERR_FORMAT &&
                  strstr(st.message, "proj_in.weight"),
              "shape mismatch message: %s", st.message);
        CHECK(h3_checkpoint_get(c, "nope.weight", 0, NULL, &t, &st) == H3_ERR_NOT_FOUND && strstr(st.message, "nope"),
              "missing tensor message: %s", st.message);
        h3_checkpoint_close(c);
    }
    /* sharded native layout with an index */
    CHECK(h3_checkpoint_open(h3_test_data("models/tiny-h3-native/FL2VA/transformer"), &c, &st) == H3_OK,
          "native shards: %s", st.message);
    if (c) {
        CHECK(h3_checkpoint_count(c) > 10, "native count %zu", h3_checkpoint_count(c));
        CHECK(h3_checkpoint_find(c, "blocks.0.attn.qkv_proj.weight") != NULL, "qkv_proj present");
        h3_checkpoint_close(c);
    }
}

static void test_bad_index(void) {
    char *dir = g_build_filename(tmpdir, "idx", NULL);
    g_mkdir(dir, 0700);
    char *shard = g_build_filename(dir, "s1.safetensors", NULL);
    char *tmp = write_st("s1.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1);
    g_rename(tmp, shard);
    char *index = g_build_filename(dir, "model.safetensors.index.json", NULL);
    h3_checkpoint *c = NULL;
    h3_status st = {0};

    g_file_set_contents(index, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\"}}", -1, NULL);
    CHECK(h3_checkpoint_open(dir, &c, &st) == H3_ERR_FORMAT && strstr(st.message, "'b'"), "index names absent tensor: %s",
          st.message);
    g_file_set_contents(index, "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}", -1, NULL);
    CHECK(h3_checkpoint_open(dir, &c, &st) == H3_ERR_FORMAT, "path traversal refused: %s", st.message);
    g_file_set_contents(index, "{\"weight_map\":{\"a\":\"s2.safetensors\"}}", -1, NULL);
    CHECK(h3_checkpoint_open(dir, &c, &st) == H3_ERR_NOT_FOUND && strstr(st.message, "s2.safetensors"),
          "missing shard: %s", st.message);
    g_file_set_contents(index, "{\"nothing\":1}", -1, NULL);
    CHECK(h3_checkpoint_open(dir, &c, &st) == H3_ERR_FORMAT && strstr(st.message, "weight_map"), "no weight_map: %s",
          st.message);
    g_file_set_contents(index, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s2.safetensors\"}}", -1, NULL);
    CHECK(h3_checkpoint_open(dir, &c, &st) == H3_ERR_FORMAT && strstr(st.message, "\"a\" appears twice"),
          "index names a tensor twice: %s", st.message);
    g_file_set_contents(index, "{\"weight_map\":{\"a\":\"s1.safetensors\"}}", -1, NULL);
    CHECK(h3_checkpoint_open(dir, &c, &st) == H3_OK, "good index: %s", st.message);
    h3_checkpoint_close(c);
    g_unlink(index);
    g_unlink(shard);
    g_rmdir(dir);
    g_free(index);
    g_free(shard);
    g_free(tmp);
    g_free(dir);
}

static void test_conversions(void) {
    CHECK(h3_bf16_to_f32(0x3f80) == 1.0f, "bf16 1.0");
    CHECK(h3_f32_to_bf16(1.0f) == 0x3f80, "f32->bf16 1.0");
    CHECK(h3_f32_to_bf16(1.00390625f) == 0x3f80, "ties to even down");
    CHECK(h3_f32_to_bf16(1.01171875f) == 0x3f82, "ties to even up");
    CHECK(h3_f16_to_f32(0x3c00) == 1.0f, "f16 1.0");
    CHECK(h3_f16_to_f32(0x0001) == 5.9604644775390625e-08f, "f16 subnormal");
    CHECK(h3_f32_to_f16(65504.0f) == 0x7bff, "f16 max");
    CHECK(h3_f32_to_f16(1e6f) == 0x7c00, "f16 overflow to inf");
    for (uint32_t h = 0; h < 0x7c00; h += 7) {
        if (h3_f32_to_f16(h3_f16_to_f32((uint16_t)h)) != h) { CHECK(0, "f16 round trip %u", h); break; }
    }
}

int main(void) {
    tmpdir = g_dir_make_tmp("h3st-XXXXXX", NULL);
    test_good_file();
    test_bad_files();
    test_real_checkpoints();
    test_bad_index();
    test_header_hardening();
    test_deep_header();
    test_not_regular();
    test_dummy_sizes();
    test_config_duplicates();
    test_size_helpers();
    test_path_inside();
    test_conversions();
    g_rmdir(tmpdir);
    g_free(tmpdir);
    return h3_test_finish("test_safetensors");
}
