/* fuzz_safetensors: the input is one .safetensors file.
 *
 * h3_st_open validates the header (length, JSON, dtypes, shapes against
 * byte ranges, ranges inside the file and not overlapping); every tensor
 * it then hands out is looked up by name, its byte range touched and, for
 * a float dtype, converted. The same file is opened again as a one-file
 * checkpoint (h3_checkpoint_open). */
#include "h3_fuzz.h"
#include "h3_fuzz_nest.h" /* runs of [ and { (issue 31) */

#include "base/h3_safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    return 0;
}

static void walk_tensor(const h3_st_tensor *t) {
    volatile size_t len = strlen(t->name) + strlen(t->file_path);
    (void)len;
    if (t->ndim < 0 || t->ndim > H3_ST_MAX_DIMS) abort();
    /* What the loaders rely on: numel is the shape's product and the byte
     * range holds exactly numel elements. */
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
    if (numel != t->numel || (uint64_t)t->nbytes != (uint64_t)t->numel * h3_st_dtype_size(t->dtype)) abort();
    h3_fuzz_touch(t->data, t->nbytes);
    if (t->dtype == H3_ST_F32 || t->dtype == H3_ST_F16 || t->dtype == H3_ST_BF16 || t->dtype == H3_ST_F64) {
        size_t n = t->numel < 4096 ? (size_t)t->numel : 4096;
        float *buf = malloc((n ? n : 1) * sizeof *buf);
        h3_status st;
        if (h3_st_to_f32(t, buf, n, &st) != H3_OK) h3_fuzz_check_status(&st);
        free(buf);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *path = h3_fuzz_write("t.safetensors", data, size);
    h3_status st;
    h3_st_file *f;
    if (h3_st_open(path, &f, &st) == H3_OK) {
        for (size_t i = 0; i < h3_st_count(f); i++) {
            const h3_st_tensor *t = h3_st_at(f, i);
            walk_tensor(t);
            const h3_st_tensor *u = h3_st_find(f, t->name);
            if (!u) abort(); /* every tensor handed out is found by its name */
            walk_tensor(u);
        }
        if (h3_st_at(f, h3_st_count(f))) abort();
        const char *keys[] = {"format", "base_model", "rank", "total_size", ""};
        for (size_t k = 0; k < G_N_ELEMENTS(keys); k++) {
            const char *v = h3_st_metadata(f, keys[k]);
            if (v) h3_fuzz_touch(v, strlen(v) + 1);
        }
        /* The whole first float tensor, as the loaders read it. */
        for (size_t i = 0; i < h3_st_count(f); i++) {
            const h3_st_tensor *t = h3_st_at(f, i);
            if (t->dtype != H3_ST_F32 && t->dtype != H3_ST_BF16 && t->dtype != H3_ST_F16 && t->dtype != H3_ST_F64)
                continue;
            if (t->numel > (1 << 20)) break;
            float *v;
            if (h3_st_read_f32(f, t->name, &v, NULL, &st) == H3_OK) free(v);
            else h3_fuzz_check_status(&st);
            break;
        }
        h3_st_close(f);
    } else {
        h3_fuzz_check_status(&st);
    }

    h3_checkpoint *c;
    if (h3_checkpoint_open(path, &c, &st) == H3_OK) {
        for (size_t i = 0; i < h3_checkpoint_count(c); i++) {
            const h3_st_tensor *t = h3_checkpoint_at(c, i), *g;
            if (h3_checkpoint_get(c, t->name, t->ndim, t->shape, &g, &st) != H3_OK) h3_fuzz_check_status(&st);
            int64_t wrong[H3_ST_MAX_DIMS + 1] = {0};
            if (h3_checkpoint_get(c, t->name, t->ndim + 1 <= H3_ST_MAX_DIMS ? t->ndim + 1 : t->ndim, wrong, &g,
                                  &st) != H3_OK)
                h3_fuzz_check_status(&st);
        }
        h3_checkpoint_close(c);
    } else {
        h3_fuzz_check_status(&st);
    }
    g_free(path);
    return 0;
}
