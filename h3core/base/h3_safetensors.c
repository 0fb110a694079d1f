/* h3_safetensors.c - strict safetensors reader (mmap) and sharded checkpoints.
 *
 * The format: 8 bytes little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...,
 *  "__metadata__": {"k": "v"}}, then the data section. Offsets are relative
 * to the data section. We refuse anything the format does not allow instead
 * of guessing, because a bad offset here becomes a wild read later:
 *  - a name twice in one object (the format: "Duplicate keys are
 *    disallowed"; json-glib would keep the last silently);
 *  - sizes that overflow (shape x dtype, through h3_size.h);
 *  - data_offsets that do not tile the data section: sorted by begin, each
 *    tensor starts where the one before ends, the first at 0, the last ends
 *    at the end of the file. That is the reference reader's rule (its
 *    InvalidOffset and MetadataIncompleteBuffer errors: the buffer is
 *    entirely indexed, no holes), and the only one under which no two
 *    tensors share a byte: a zero-size tensor is a point between two others,
 *    never inside one, and no byte of the file belongs to no tensor. */
#include "base/h3_safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <fcntl.h>
#include <json-glib/json-glib.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/h3_file.h"
#include "base/h3_json.h"
#include "base/h3_random.h"
#include "base/h3_size.h"

struct h3_st_file {
    char *path;
    void *map;
    size_t map_size;
    h3_st_tensor *tensors;
    size_t count;
    GHashTable *by_name;   /* name -> index+1 */
    GHashTable *metadata;  /* key -> value (owned strings) */
};

static const struct { const char *name; h3_st_dtype dtype; size_t size; } dtype_table[] = {
    {"F32", H3_ST_F32, 4}, {"F16", H3_ST_F16, 2}, {"BF16", H3_ST_BF16, 2},
    {"F64", H3_ST_F64, 8}, {"I64", H3_ST_I64, 8}, {"I32", H3_ST_I32, 4},
    {"I16", H3_ST_I16, 2}, {"I8", H3_ST_I8, 1}, {"U8", H3_ST_U8, 1},
    {"BOOL", H3_ST_BOOL, 1},
};

size_t h3_st_dtype_size(h3_st_dtype dtype) {
    for (size_t i = 0; i < G_N_ELEMENTS(dtype_table); i++)
        if (dtype_table[i].dtype == dtype) return dtype_table[i].size;
    return 0;
}

const char *h3_st_dtype_name(h3_st_dtype dtype) {
    for (size_t i = 0; i < G_N_ELEMENTS(dtype_table); i++)
        if (dtype_table[i].dtype == dtype) return dtype_table[i].name;
    return "?";
}

static int parse_dtype(const char *s, h3_st_dtype *out) {
    for (size_t i = 0; i < G_N_ELEMENTS(dtype_table); i++)
        if (strcmp(dtype_table[i].name, s) == 0) { *out = dtype_table[i].dtype; return 1; }
    return 0;
}

float h3_bf16_to_f32(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t h3_f32_to_bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float h3_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else { /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t h3_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffffu;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
    return (uint16_t)half;
}

/* By begin, then by end: a zero-size tensor sorts before one that starts
 * at the same offset, as the reference reader sorts (begin, end) pairs. */
static int cmp_by_offset(const void *a, const void *b) {
    const h3_st_tensor *x = *(const h3_st_tensor *const *)a, *y = *(const h3_st_tensor *const *)b;
    const char *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes ? 1 : 0;
}

static h3_status_code parse_tensor(h3_st_file *f, const char *name, JsonNode *node,
                                   const char *data, size_t data_size, h3_st_tensor *t,
                                   h3_status *status) {
    if (!JSON_NODE_HOLDS_OBJECT(node))
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", f->path, name);
    JsonObject *o = json_node_get_object(node);
    JsonNode *dt = json_object_get_member(o, "dtype");
    JsonNode *sh = json_object_get_member(o, "shape");
    JsonNode *off = json_object_get_member(o, "data_offsets");
    if (!dt || !sh || !off || !JSON_NODE_HOLDS_VALUE(dt) || json_node_get_value_type(dt) != G_TYPE_STRING ||
        !JSON_NODE_HOLDS_ARRAY(sh) || !JSON_NODE_HOLDS_ARRAY(off))
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s': needs string dtype, array shape and data_offsets", f->path, name);
    if (!parse_dtype(json_node_get_string(dt), &t->dtype))
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s': unsupported dtype '%s'", f->path, name, json_node_get_string(dt));
    JsonArray *sa = json_node_get_array(sh), *oa = json_node_get_array(off);
    guint nd = json_array_get_length(sa);
    if (nd > H3_ST_MAX_DIMS)
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s': %u dims (max %d)", f->path, name, nd, H3_ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (guint i = 0; i < nd; i++) {
        JsonNode *d = json_array_get_element(sa, i);
        if (!JSON_NODE_HOLDS_VALUE(d) || json_node_get_value_type(d) != G_TYPE_INT64 || json_node_get_int(d) < 0)
            return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s': shape[%u] is not a non-negative integer", f->path, name, i);
        t->shape[i] = json_node_get_int(d);
        h3_status_code rc = h3_size_mul_max(numel, (uint64_t)t->shape[i], INT64_MAX, &numel, status,
                                            "%s: tensor '%s': shape overflows at shape[%u]", f->path, name, i);
        if (rc != H3_OK) return rc;
    }
    t->numel = (int64_t)numel;
    if (json_array_get_length(oa) != 2)
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s': data_offsets must have 2 entries", f->path, name);
    int64_t be[2];
    for (guint i = 0; i < 2; i++) {
        JsonNode *d = json_array_get_element(oa, i);
        if (!JSON_NODE_HOLDS_VALUE(d) || json_node_get_value_type(d) != G_TYPE_INT64 || json_node_get_int(d) < 0)
            return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s': data_offsets[%u] is not a non-negative integer", f->path, name, i);
        be[i] = json_node_get_int(d);
    }
    if (be[0] > be[1] || (uint64_t)be[1] > data_size)
        return h3_fail(status, H3_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%lld, %lld] outside the %zu-byte data section (truncated file?)",
                       f->path, name, (long long)be[0], (long long)be[1], data_size);
    uint64_t bytes;
    h3_status_code rc = h3_size_mul_max(numel, h3_st_dtype_size(t->dtype), data_size, &bytes, status,
                                        "%s: tensor '%s': bytes of its shape (elements x %s size) beyond the "
                                        "data section", f->path, name, h3_st_dtype_name(t->dtype));
    if (rc != H3_OK) return rc;
    if (bytes != (uint64_t)(be[1] - be[0]))
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s': shape needs %llu bytes of %s but data_offsets span %lld",
                       f->path, name, (unsigned long long)bytes, h3_st_dtype_name(t->dtype),
                       (long long)(be[1] - be[0]));
    t->data = data + be[0];
    t->nbytes = (size_t)(be[1] - be[0]);
    t->name = name;
    t->file_path = f->path;
    return H3_OK;
}

/* The data offsets tile the data section (the rule at the top of this file). */
static h3_status_code check_tiling(h3_st_file *f, const char *data, size_t data_size, h3_status *status) {
    h3_st_tensor **order = malloc((f->count ? f->count : 1) * sizeof *order);
    if (!order) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", f->path);
    for (size_t k = 0; k < f->count; k++) order[k] = &f->tensors[k];
    qsort(order, f->count, sizeof *order, cmp_by_offset);
    h3_status_code rc = H3_OK;
    size_t end = 0; /* where the tensors so far end */
    for (size_t k = 0; k < f->count && rc == H3_OK; k++) {
        size_t begin = (size_t)((const char *)order[k]->data - data);
        if (begin < end)
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap (bytes %zu..%zu of the data section)",
                         f->path, order[k - 1]->name, order[k]->name, begin, end);
        else if (begin > end)
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: bytes %zu..%zu of the data section, before tensor '%s', belong "
                         "to no tensor (the format allows no gaps)", f->path, end, begin, order[k]->name);
        end = begin + order[k]->nbytes;
    }
    if (rc == H3_OK && end != data_size)
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: the tensors cover %zu of the %zu bytes after the header (the format "
                     "allows no trailing bytes)", f->path, end, data_size);
    free(order);
    return rc;
}

static h3_status_code parse_header(h3_st_file *f, h3_status *status) {
    const unsigned char *p = f->map;
    if (f->map_size < 8)
        return h3_fail(status, H3_ERR_FORMAT, "%s: %zu bytes, too short for a safetensors header", f->path, f->map_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | p[i];
    if (n < 2 || n > f->map_size - 8 || n > 100u * 1024 * 1024)
        return h3_fail(status, H3_ERR_FORMAT, "%s: header length %llu does not fit the %zu-byte file", f->path,
                       (unsigned long long)n, f->map_size);
    const char *json = (const char *)p + 8;
    const char *data = json + n;
    size_t data_size = f->map_size - 8 - (size_t)n;

    JsonParser *parser = json_parser_new();
    GError *err = NULL;
    char *dup = NULL;
    h3_status_code rc = H3_OK;
    if (!h3_json_load(parser, json, (gssize)n, &dup, &err)) {
        if (err) rc = h3_fail(status, H3_ERR_FORMAT, "%s: header is not valid JSON: %s", f->path, err->message);
        else rc = h3_fail(status, H3_ERR_FORMAT, "%s: header names '%s' twice (the format forbids duplicate keys)",
                          f->path, dup);
        if (err) g_error_free(err);
        g_free(dup);
        goto out;
    }
    JsonNode *root = json_parser_get_root(parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: header is not a JSON object", f->path);
        goto out;
    }
    JsonObject *obj = json_node_get_object(root);
    GList *members = json_object_get_members(obj);
    f->count = 0;
    for (GList *l = members; l; l = l->next)
        if (strcmp(l->data, "__metadata__") != 0) f->count++;
    f->tensors = calloc(f->count ? f->count : 1, sizeof *f->tensors);
    if (!f->tensors) {
        g_list_free(members);
        rc = h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory for %zu tensor entries", f->path, f->count);
        goto out;
    }
    size_t i = 0;
    for (GList *l = members; l && rc == H3_OK; l = l->next) {
        const char *name = l->data;
        JsonNode *node = json_object_get_member(obj, name);
        if (strcmp(name, "__metadata__") == 0) {
            if (!JSON_NODE_HOLDS_OBJECT(node)) {
                rc = h3_fail(status, H3_ERR_FORMAT, "%s: __metadata__ is not an object", f->path);
                break;
            }
            JsonObject *m = json_node_get_object(node);
            GList *keys = json_object_get_members(m);
            for (GList *k = keys; k; k = k->next) {
                JsonNode *v = json_object_get_member(m, k->data);
                if (JSON_NODE_HOLDS_VALUE(v) && json_node_get_value_type(v) == G_TYPE_STRING)
                    g_hash_table_insert(f->metadata, g_strdup(k->data), g_strdup(json_node_get_string(v)));
            }
            g_list_free(keys);
            continue;
        }
        h3_st_tensor *t = &f->tensors[i];
        char *owned = g_strdup(name);
        rc = parse_tensor(f, owned, node, data, data_size, t, status);
        g_hash_table_insert(f->by_name, owned, GSIZE_TO_POINTER(i + 1));
        i++;
    }
    g_list_free(members);
    if (rc != H3_OK) goto out;

    rc = check_tiling(f, data, data_size, status);
out:
    g_object_unref(parser);
    return rc;
}

h3_status_code h3_st_open(const char *path, h3_st_file **out, h3_status *status) {
    *out = NULL;
    int fd;
    uint64_t size;
    h3_status_code rc = h3_file_open(path, &fd, &size, status);
    if (rc != H3_OK) return rc;
    if (size > SIZE_MAX) {
        close(fd);
        return h3_fail(status, H3_ERR_FORMAT, "%s: %llu bytes do not fit this machine's address space", path,
                       (unsigned long long)size);
    }
    h3_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    f->path = g_strdup(path);
    f->map_size = (size_t)size;
    f->by_name = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    f->metadata = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    if (f->map_size > 0) {
        f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            close(fd);
            h3_fail(status, H3_ERR_IO, "%s: mmap: %s", path, strerror(errno));
            h3_st_close(f);
            return H3_ERR_IO;
        }
    }
    close(fd);
    rc = parse_header(f, status);
    if (rc != H3_OK) {
        h3_st_close(f);
        return rc;
    }
    *out = f;
    return H3_OK;
}

void h3_st_close(h3_st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_size);
    if (f->by_name) g_hash_table_destroy(f->by_name); /* frees the names */
    if (f->metadata) g_hash_table_destroy(f->metadata);
    free(f->tensors);
    g_free(f->path);
    free(f);
}

size_t h3_st_count(const h3_st_file *f) { return f->count; }
const h3_st_tensor *h3_st_at(const h3_st_file *f, size_t i) { return i < f->count ? &f->tensors[i] : NULL; }
const char *h3_st_path(const h3_st_file *f) { return f->path; }

const h3_st_tensor *h3_st_find(const h3_st_file *f, const char *name) {
    gpointer v = g_hash_table_lookup(f->by_name, name);
    return v ? &f->tensors[GPOINTER_TO_SIZE(v) - 1] : NULL;
}

const char *h3_st_metadata(const h3_st_file *f, const char *key) {
    return g_hash_table_lookup(f->metadata, key);
}

h3_st_tensor h3_st_rows(const h3_st_tensor *t, int64_t first, int64_t count) {
    h3_st_tensor v = *t;
    int64_t rows = t->ndim ? t->shape[0] : 1, cols = rows ? t->numel / rows : 0;
    size_t row_bytes = rows ? t->nbytes / (size_t)rows : 0;
    if (t->ndim) v.shape[0] = count;
    v.numel = count * cols;
    v.nbytes = (size_t)count * row_bytes;
    if (t->data) {
        v.data = (const char *)t->data + (size_t)first * row_bytes;
    } else {
        /* Row 0 of the view is row `first` of the tensor. Within one part
         * the view is a single part; from a part boundary on it keeps the
         * parts (what a shard of stacked parts needs); a range that starts
         * inside one part and runs into the next is not a view anyone takes. */
        int64_t row_stride = t->random.row_stride ? t->random.row_stride : cols;
        int64_t part_rows = t->random.part_rows ? t->random.part_rows : rows;
        int64_t part = part_rows ? first / part_rows : 0, in_part = part_rows ? first % part_rows : 0;
        v.random.offset += part * t->random.part_stride + in_part * row_stride;
        v.random.row_stride = row_stride;
        if (in_part != 0 || count <= part_rows) v.random.part_rows = 0, v.random.part_stride = 0;
    }
    return v;
}

h3_status_code h3_st_to_f32(const h3_st_tensor *t, float *dst, size_t n, h3_status *status) {
    if (!t->data)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "%s: tensor '%s' is a dummy tensor (load-format dummy): its values are drawn on the backend, "
                       "there are none on the host", t->file_path, t->name);
    if (n > (size_t)t->numel)
        return h3_fail(status, H3_ERR_INTERNAL, "%s: tensor '%s': asked for %zu of %lld elements", t->file_path,
                       t->name, n, (long long)t->numel);
    switch (t->dtype) {
    case H3_ST_F32: memcpy(dst, t->data, n * 4); break;
    /* Element-wise memcpy: a header length that is not a multiple of 8
     * leaves the data section unaligned, which the format allows. */
    case H3_ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, (const char *)t->data + 2 * i, 2);
            dst[i] = h3_bf16_to_f32(v);
        }
        break;
    case H3_ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, (const char *)t->data + 2 * i, 2);
            dst[i] = h3_f16_to_f32(v);
        }
        break;
    case H3_ST_F64:
        for (size_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, (const char *)t->data + 8 * i, 8);
            dst[i] = (float)v;
        }
        break;
    default:
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s': dtype %s is not a float type", t->file_path,
                       t->name, h3_st_dtype_name(t->dtype));
    }
    return H3_OK;
}

h3_status_code h3_st_read_f32(const h3_st_file *f, const char *name, float **out, const h3_st_tensor **info,
                              h3_status *status) {
    *out = NULL;
    const h3_st_tensor *t = h3_st_find(f, name);
    if (!t) return h3_fail(status, H3_ERR_NOT_FOUND, "%s: no tensor '%s'", f->path, name);
    float *buf = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (!buf) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: tensor '%s': out of memory", f->path, name);
    h3_status_code rc = h3_st_to_f32(t, buf, (size_t)t->numel, status);
    if (rc != H3_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    if (info) *info = t;
    return H3_OK;
}

/* ---------------------------------------------------------------------- */
/* Checkpoints: a single file or shards from an index json.                */

struct h3_checkpoint {
    char *path;
    h3_st_file **files;
    size_t nfiles;
    GHashTable *lookup; /* name -> const h3_st_tensor* */
    GPtrArray *order;   /* tensors in file order, for iteration */
    /* A dummy checkpoint: no files; the tensors (their names and any
     * constant bytes) are its own. */
    GPtrArray *owned;
    uint64_t seed;
};

static h3_status_code checkpoint_add_file(h3_checkpoint *c, const char *path, h3_status *status) {
    h3_st_file *f;
    h3_status_code rc = h3_st_open(path, &f, status);
    if (rc != H3_OK) return rc;
    h3_st_file **files = realloc(c->files, (c->nfiles + 1) * sizeof *c->files);
    if (!files) {
        h3_st_close(f);
        return h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory for the shard list", path);
    }
    c->files = files;
    c->files[c->nfiles++] = f;
    return H3_OK;
}

/* An index names every tensor once: the release's largest is well under 1 MiB. */
#define H3_INDEX_MAX_BYTES (64u << 20)

static h3_status_code open_index(h3_checkpoint *c, const char *index_path, h3_status *status) {
    JsonParser *parser;
    h3_status_code rc = h3_json_read_file(index_path, H3_INDEX_MAX_BYTES, &parser, status);
    if (rc != H3_OK) return rc;
    char *dir = g_path_get_dirname(index_path);
    GHashTable *shards = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    JsonNode *root = json_parser_get_root(parser);
    JsonObject *wm = NULL;
    if (root && JSON_NODE_HOLDS_OBJECT(root)) {
        JsonNode *n = json_object_get_member(json_node_get_object(root), "weight_map");
        if (n && JSON_NODE_HOLDS_OBJECT(n)) wm = json_node_get_object(n);
    }
    if (!wm) {
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
        goto out;
    }
    GList *names = json_object_get_members(wm);
    for (GList *l = names; l && rc == H3_OK; l = l->next) {
        JsonNode *v = json_object_get_member(wm, l->data);
        const char *shard = (JSON_NODE_HOLDS_VALUE(v) && json_node_get_value_type(v) == G_TYPE_STRING)
                                ? json_node_get_string(v) : NULL;
        if (!shard || !*shard || strchr(shard, '/') || strcmp(shard, "..") == 0) {
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' maps to an invalid shard name", index_path,
                         (const char *)l->data);
            break;
        }
        gpointer fi = g_hash_table_lookup(shards, shard);
        if (!fi) {
            char *p = g_build_filename(dir, shard, NULL);
            rc = checkpoint_add_file(c, p, status);
            g_free(p);
            if (rc != H3_OK) {
                h3_status_prefix(status, "%s names shard '%s'", index_path, shard);
                break;
            }
            fi = GSIZE_TO_POINTER(c->nfiles);
            g_hash_table_insert(shards, g_strdup(shard), fi);
        }
        h3_st_file *f = c->files[GPOINTER_TO_SIZE(fi) - 1];
        const h3_st_tensor *t = h3_st_find(f, l->data);
        if (!t) {
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' is mapped to %s, which does not contain it",
                         index_path, (const char *)l->data, h3_st_path(f));
            break;
        }
        g_hash_table_insert(c->lookup, (gpointer)t->name, (gpointer)t);
        g_ptr_array_add(c->order, (gpointer)t);
    }
    g_list_free(names);
out:
    g_hash_table_destroy(shards);
    g_free(dir);
    g_object_unref(parser);
    return rc;
}

static h3_status_code find_in_dir(const char *dir, char **out, h3_status *status) {
    GError *err = NULL;
    GDir *d = g_dir_open(dir, 0, &err);
    if (!d) {
        h3_status_code rc = h3_fail(status, H3_ERR_NOT_FOUND, "%s: %s", dir, err->message);
        g_error_free(err);
        return rc;
    }
    char *index = NULL, *single = NULL;
    int nsingle = 0;
    const char *name;
    while ((name = g_dir_read_name(d))) {
        if (g_str_has_suffix(name, ".safetensors.index.json")) {
            if (!index || strcmp(name, index) < 0) { g_free(index); index = g_strdup(name); }
        } else if (g_str_has_suffix(name, ".safetensors")) {
            nsingle++;
            if (!single || strcmp(name, single) < 0) { g_free(single); single = g_strdup(name); }
        }
    }
    g_dir_close(d);
    h3_status_code rc = H3_OK;
    if (index) *out = g_build_filename(dir, index, NULL);
    else if (nsingle == 1) *out = g_build_filename(dir, single, NULL);
    else if (nsingle > 1)
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: %d .safetensors files but no *.safetensors.index.json", dir, nsingle);
    else rc = h3_fail(status, H3_ERR_NOT_FOUND, "%s: no .safetensors file", dir);
    g_free(index);
    g_free(single);
    return rc;
}

h3_status_code h3_checkpoint_open(const char *path, h3_checkpoint **out, h3_status *status) {
    *out = NULL;
    char *file = NULL;
    h3_status_code rc;
    if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
        rc = find_in_dir(path, &file, status);
        if (rc != H3_OK) return rc;
    } else if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
        return h3_fail(status, H3_ERR_NOT_FOUND, "%s: no such file or directory", path);
    } else {
        file = g_strdup(path);
    }
    h3_checkpoint *c = calloc(1, sizeof *c);
    if (!c) {
        g_free(file);
        return h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    c->path = file;
    c->lookup = g_hash_table_new(g_str_hash, g_str_equal);
    c->order = g_ptr_array_new();
    if (g_str_has_suffix(file, ".json")) {
        rc = open_index(c, file, status);
    } else {
        rc = checkpoint_add_file(c, file, status);
        if (rc == H3_OK)
            for (size_t i = 0; i < h3_st_count(c->files[0]); i++) {
                const h3_st_tensor *t = h3_st_at(c->files[0], i);
                g_hash_table_insert(c->lookup, (gpointer)t->name, (gpointer)t);
                g_ptr_array_add(c->order, (gpointer)t);
            }
    }
    if (rc != H3_OK) {
        h3_checkpoint_close(c);
        return rc;
    }
    *out = c;
    return H3_OK;
}

void h3_checkpoint_close(h3_checkpoint *c) {
    if (!c) return;
    g_hash_table_destroy(c->lookup);
    g_ptr_array_free(c->order, TRUE);
    for (size_t i = 0; i < c->nfiles; i++) h3_st_close(c->files[i]);
    if (c->owned) g_ptr_array_free(c->owned, TRUE);
    free(c->files);
    g_free(c->path);
    free(c);
}

const h3_st_tensor *h3_checkpoint_find(const h3_checkpoint *c, const char *name) {
    return g_hash_table_lookup(c->lookup, name);
}

h3_status_code h3_checkpoint_get(const h3_checkpoint *c, const char *name, int ndim, const int64_t *shape,
                                 const h3_st_tensor **out, h3_status *status) {
    const h3_st_tensor *t = h3_checkpoint_find(c, name);
    *out = NULL;
    if (!t) return h3_fail(status, H3_ERR_NOT_FOUND, "%s: missing tensor '%s'", c->path, name);
    if (shape) {
        int ok = t->ndim == ndim;
        for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
        if (!ok) {
            char want[128] = "", got[128] = "";
            size_t wl = 0, gl = 0;
            for (int i = 0; i < ndim; i++)
                wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s%lld", i ? "," : "", (long long)shape[i]);
            for (int i = 0; i < t->ndim; i++)
                gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%lld", i ? "," : "", (long long)t->shape[i]);
            return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' has shape [%s], expected [%s]", t->file_path,
                           name, got, want);
        }
    }
    *out = t;
    return H3_OK;
}

size_t h3_checkpoint_count(const h3_checkpoint *c) { return c->order->len; }
const h3_st_tensor *h3_checkpoint_at(const h3_checkpoint *c, size_t i) {
    return i < c->order->len ? g_ptr_array_index(c->order, i) : NULL;
}
const char *h3_checkpoint_path(const h3_checkpoint *c) { return c->path; }

uint64_t h3_checkpoint_nbytes(const h3_checkpoint *c) {
    uint64_t total = 0;
    for (size_t i = 0; i < c->order->len; i++) total += ((const h3_st_tensor *)g_ptr_array_index(c->order, i))->nbytes;
    return total;
}

/* ---- dummy checkpoints ------------------------------------------------------------- */

static void free_owned(gpointer p) {
    h3_st_tensor *t = p;
    g_free((char *)t->name);
    g_free((void *)t->data);
    g_free(t);
}

h3_status_code h3_checkpoint_dummy_new(const char *label, uint64_t seed, h3_checkpoint **out, h3_status *status) {
    h3_checkpoint *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", label);
    c->path = g_strdup(label);
    c->lookup = g_hash_table_new(g_str_hash, g_str_equal);
    c->order = g_ptr_array_new();
    c->owned = g_ptr_array_new_with_free_func(free_owned);
    c->seed = seed;
    *out = c;
    return H3_OK;
}

static h3_status_code dummy_tensor(h3_checkpoint *c, const char *name, h3_st_dtype dtype, int ndim,
                                   const int64_t *shape, h3_st_tensor **out, h3_status *status) {
    *out = NULL;
    if (!c->owned) return h3_fail(status, H3_ERR_INTERNAL, "%s: not a dummy checkpoint", c->path);
    if (g_hash_table_contains(c->lookup, name))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: tensor '%s' twice", c->path, name);
    if (ndim < 0 || ndim > H3_ST_MAX_DIMS || h3_st_dtype_size(dtype) == 0)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: tensor '%s': %d dims of dtype %d", c->path, name, ndim,
                       (int)dtype);
    h3_st_tensor *t = g_new0(h3_st_tensor, 1);
    t->name = g_strdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    uint64_t numel = 1, bytes = 0;
    h3_status_code rc = H3_OK;
    for (int i = 0; i < ndim && rc == H3_OK; i++) {
        if (shape[i] < 0) rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: tensor '%s': shape[%d] is %lld", c->path,
                                       name, i, (long long)shape[i]);
        else rc = h3_size_mul_max(numel, (uint64_t)shape[i], INT64_MAX, &numel, status, "%s: tensor '%s': shape",
                                  c->path, name);
        t->shape[i] = shape[i];
    }
    /* A dummy tensor's bytes are sized like a file's: they must fit size_t. */
    if (rc == H3_OK)
        rc = h3_size_mul_max(numel, h3_st_dtype_size(dtype), SIZE_MAX, &bytes, status, "%s: tensor '%s': bytes",
                             c->path, name);
    if (rc != H3_OK) { /* the shapes come from a config: an overflow there is the config's (FORMAT) */
        free_owned(t);
        return rc;
    }
    t->numel = (int64_t)numel;
    t->nbytes = (size_t)bytes;
    t->file_path = c->path;
    g_ptr_array_add(c->owned, t);
    g_hash_table_insert(c->lookup, (gpointer)t->name, t);
    g_ptr_array_add(c->order, t);
    *out = t;
    return H3_OK;
}

h3_status_code h3_checkpoint_dummy_add(h3_checkpoint *c, const char *name, h3_st_dtype dtype, int ndim,
                                       const int64_t *shape, float lo, float hi, h3_status *status) {
    if (!(lo <= hi) || !isfinite(lo) || !isfinite(hi))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: tensor '%s': range [%g, %g)", c->path, name, (double)lo,
                       (double)hi);
    if (dtype != H3_ST_F32 && dtype != H3_ST_BF16 && dtype != H3_ST_F16)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: tensor '%s': a dummy tensor is F32, BF16 or F16, not %s",
                       c->path, name, h3_st_dtype_name(dtype));
    h3_st_tensor *t;
    h3_status_code rc = dummy_tensor(c, name, dtype, ndim, shape, &t, status);
    if (rc != H3_OK) return rc;
    t->random.key = h3_counter_key(c->seed, name);
    t->random.lo = lo;
    t->random.hi = hi;
    return H3_OK;
}

h3_status_code h3_checkpoint_dummy_add_data(h3_checkpoint *c, const char *name, h3_st_dtype dtype, int ndim,
                                            const int64_t *shape, const void *data, h3_status *status) {
    h3_st_tensor *t;
    h3_status_code rc = dummy_tensor(c, name, dtype, ndim, shape, &t, status);
    if (rc != H3_OK) return rc;
    t->data = g_memdup2(data, t->nbytes ? t->nbytes : 1);
    return H3_OK;
}

/* ---------------------------------------------------------------------- */
/* Writer.                                                                 */

static void json_append_string(GString *out, const char *s) {
    g_string_append_c(out, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') g_string_append_printf(out, "\\%c", *p);
        else if (*p < 0x20) g_string_append_printf(out, "\\u%04x", *p);
        else g_string_append_c(out, (char)*p);
    }
    g_string_append_c(out, '"');
}

h3_status_code h3_st_write(const char *path, const h3_st_write_tensor *tensors, size_t count,
                           const char *const *metadata_kv, h3_status *status) {
    GString *h = g_string_new("{");
    size_t offset = 0;
    int first = 1;
    if (metadata_kv && metadata_kv[0]) {
        g_string_append(h, "\"__metadata__\":{");
        for (size_t i = 0; metadata_kv[i] && metadata_kv[i + 1]; i += 2) {
            if (i) g_string_append_c(h, ',');
            json_append_string(h, metadata_kv[i]);
            g_string_append_c(h, ':');
            json_append_string(h, metadata_kv[i + 1]);
        }
        g_string_append_c(h, '}');
        first = 0;
    }
    for (size_t i = 0; i < count; i++) {
        const h3_st_write_tensor *t = &tensors[i];
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
        size_t bytes = n * h3_st_dtype_size(t->dtype);
        if (!first) g_string_append_c(h, ',');
        first = 0;
        json_append_string(h, t->name);
        g_string_append_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", h3_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) g_string_append_printf(h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        g_string_append_printf(h, "],\"data_offsets\":[%zu,%zu]}", offset, offset + bytes);
        offset += bytes;
    }
    g_string_append_c(h, '}');
    while ((h->len + 8) % 8) g_string_append_c(h, ' '); /* data section 8-byte aligned */
    FILE *f = fopen(path, "wb");
    if (!f) {
        g_string_free(h, TRUE);
        return h3_fail(status, H3_ERR_IO, "%s: %s", path, strerror(errno));
    }
    uint64_t n = h->len;
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(h->str, 1, h->len, f) == h->len;
    for (size_t i = 0; ok && i < count; i++) {
        size_t nel = 1;
        for (int d = 0; d < tensors[i].ndim; d++) nel *= (size_t)tensors[i].shape[d];
        size_t bytes = nel * h3_st_dtype_size(tensors[i].dtype);
        ok = bytes == 0 || fwrite(tensors[i].data, 1, bytes, f) == bytes;
    }
    g_string_free(h, TRUE);
    if (fclose(f) != 0) ok = 0;
    if (!ok) return h3_fail(status, H3_ERR_IO, "%s: write failed", path);
    return H3_OK;
}
