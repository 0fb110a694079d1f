/* fuzz_checkpoint: a sharded checkpoint directory.
 *
 * Input: part 0 is model.safetensors.index.json; every further part is a
 * shard, "name\n" followed by its bytes (a part without a valid name is
 * dropped). h3_checkpoint_open reads the directory as the loaders do (the
 * index first); every tensor it maps is then fetched with and without its
 * shape, its bytes touched, and the DiT's layout detection runs over it. */
#include "h3_fuzz.h"
#include "h3_fuzz_nest.h" /* runs of [ and { (issue 31) */

#include "base/h3_safetensors.h"
#include "model/h3_dit_plan.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3_fuzz_remove("ckpt");
    h3_fuzz_part parts[H3_FUZZ_MAX_PARTS];
    size_t n = h3_fuzz_split(data, size, parts, 9);
    g_free(h3_fuzz_write("ckpt/model.safetensors.index.json", parts[0].data, parts[0].size));
    for (size_t i = 1; i < n; i++) {
        char name[128], rel[160];
        h3_fuzz_part body;
        if (!h3_fuzz_named(&parts[i], name, &body) || strcmp(name, "model.safetensors.index.json") == 0) continue;
        snprintf(rel, sizeof rel, "ckpt/%s", name);
        g_free(h3_fuzz_write(rel, body.data, body.size));
    }
    char *dir = h3_fuzz_path("ckpt");
    h3_status st;
    h3_checkpoint *c;
    if (h3_checkpoint_open(dir, &c, &st) == H3_OK) {
        for (size_t i = 0; i < h3_checkpoint_count(c); i++) {
            const h3_st_tensor *t = h3_checkpoint_at(c, i), *g;
            h3_fuzz_touch(t->data, t->nbytes);
            if (h3_checkpoint_find(c, t->name) == NULL) abort();
            if (h3_checkpoint_get(c, t->name, t->ndim, t->shape, &g, &st) != H3_OK) h3_fuzz_check_status(&st);
            if (h3_checkpoint_get(c, t->name, 0, NULL, &g, &st) != H3_OK) h3_fuzz_check_status(&st);
        }
        if (h3_checkpoint_get(c, "no.such.tensor", 0, NULL, &(const h3_st_tensor *){NULL}, &st) == H3_OK) abort();
        h3_fuzz_check_status(&st);
        h3_dit_checkpoint_layout layout;
        if (h3_dit_detect_layout(c, &layout, &st) != H3_OK) h3_fuzz_check_status(&st);
        h3_checkpoint_close(c);
    } else {
        h3_fuzz_check_status(&st);
    }
    g_free(dir);
    return 0;
}
