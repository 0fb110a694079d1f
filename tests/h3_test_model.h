/* h3_test_model.h - damaged copies of the tiny model for the tests of the
 * failure paths (test_nonfinite, test_faults): a model folder copied to a
 * temporary directory, one tensor's values overwritten in place, the copy
 * removed again. Header-only, like h3_test.h. */
#ifndef H3_TEST_MODEL_H
#define H3_TEST_MODEL_H

#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/h3_safetensors.h"
#include "h3_test.h"

static inline void h3_test_remove_tree(const char *path) {
    GDir *d = g_file_test(path, G_FILE_TEST_IS_SYMLINK) ? NULL : g_dir_open(path, 0, NULL);
    if (d) {
        for (const char *name; (name = g_dir_read_name(d));) {
            char *p = g_build_filename(path, name, NULL);
            h3_test_remove_tree(p);
            g_free(p);
        }
        g_dir_close(d);
    }
    g_remove(path);
}

static inline int h3_test_copy_tree(const char *from, const char *to) {
    if (g_mkdir_with_parents(to, 0700) != 0) return 0;
    GDir *d = g_dir_open(from, 0, NULL);
    if (!d) return 0;
    int ok = 1;
    for (const char *name; ok && (name = g_dir_read_name(d));) {
        char *src = g_build_filename(from, name, NULL), *dst = g_build_filename(to, name, NULL);
        if (g_file_test(src, G_FILE_TEST_IS_DIR)) {
            ok = h3_test_copy_tree(src, dst);
        } else {
            gchar *bytes = NULL;
            gsize n = 0;
            ok = g_file_get_contents(src, &bytes, &n, NULL) && g_file_set_contents(dst, bytes, (gssize)n, NULL);
            g_free(bytes);
        }
        g_free(src);
        g_free(dst);
    }
    g_dir_close(d);
    return ok;
}

/* A copy of tests/data/<rel> in a new temporary directory (g_free it and
 * h3_test_remove_tree it), NULL on failure. */
static inline char *h3_test_copy_data(const char *rel) {
    char *tmp = g_dir_make_tmp("h3_test_model_XXXXXX", NULL);
    if (!tmp) return NULL;
    if (!h3_test_copy_tree(h3_test_data(rel), tmp)) {
        h3_test_remove_tree(tmp);
        g_free(tmp);
        return NULL;
    }
    return tmp;
}

/* The first tensor of the safetensors file at path whose name contains
 * `part` (any tensor when NULL), g_free'd by the caller. */
static inline char *h3_test_tensor_named(const char *path, const char *part) {
    h3_st_file *f = NULL;
    if (h3_st_open(path, &f, NULL) != H3_OK) return NULL;
    char *name = NULL;
    for (size_t i = 0; i < h3_st_count(f) && !name; i++) {
        const h3_st_tensor *t = h3_st_at(f, i);
        if ((!part || strstr(t->name, part)) && t->numel > 0) name = g_strdup(t->name);
    }
    h3_st_close(f);
    return name;
}

/* One float value in the encoding of a safetensors dtype. */
static inline size_t h3_test_encode(const char *dtype, float v, unsigned char out[4]) {
    if (!strcmp(dtype, "F32")) {
        memcpy(out, &v, 4);
        return 4;
    }
    uint16_t h = !strcmp(dtype, "BF16") ? h3_f32_to_bf16(v) : h3_f32_to_f16(v);
    memcpy(out, &h, 2);
    return 2;
}

/* Sets the first `count` values of tensor `name` in the safetensors file at
 * path to v, in place (its header read as JSON for the tensor's byte
 * range). Returns 1 on success. */
static inline int h3_test_poison(const char *path, const char *name, float v, int64_t count) {
    FILE *f = fopen(path, "r+b");
    if (!f) return 0;
    unsigned char len8[8];
    int ok = fread(len8, 1, 8, f) == 8;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    char *header = ok && hlen < (1u << 26) ? g_malloc(hlen + 1) : NULL;
    ok = header && fread(header, 1, hlen, f) == hlen;
    JsonParser *p = json_parser_new();
    JsonObject *t = NULL;
    if (ok) {
        header[hlen] = 0;
        ok = json_parser_load_from_data(p, header, (gssize)hlen, NULL);
    }
    if (ok) {
        JsonObject *root = json_node_get_object(json_parser_get_root(p));
        t = json_object_has_member(root, name) ? json_object_get_object_member(root, name) : NULL;
        ok = t != NULL;
    }
    if (ok) {
        const char *dtype = json_object_get_string_member(t, "dtype");
        JsonArray *range = json_object_get_array_member(t, "data_offsets");
        int64_t begin = json_array_get_int_element(range, 0), end = json_array_get_int_element(range, 1);
        unsigned char bytes[4];
        size_t es = h3_test_encode(dtype, v, bytes);
        ok = fseek(f, (long)(8 + hlen + (uint64_t)begin), SEEK_SET) == 0;
        for (int64_t i = 0; ok && i < count && begin + (i + 1) * (int64_t)es <= end; i++)
            ok = fwrite(bytes, 1, es, f) == es;
    }
    g_object_unref(p);
    g_free(header);
    return fclose(f) == 0 && ok;
}

/* h3_test_poison on <dir>/<file>, the tensor found by h3_test_tensor_named;
 * its name is returned (g_free), NULL when it failed. */
static inline char *h3_test_poison_part(const char *dir, const char *file, const char *part, float v,
                                        int64_t count) {
    char *path = g_build_filename(dir, file, NULL);
    char *name = h3_test_tensor_named(path, part);
    if (name && !h3_test_poison(path, name, v, count)) {
        g_free(name);
        name = NULL;
    }
    g_free(path);
    return name;
}

#endif
