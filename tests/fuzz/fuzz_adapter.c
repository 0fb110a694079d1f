/* fuzz_adapter: a FastH3 adapter (fastvideo-lora-v2) against the tiny
 * model's transformer.
 *
 * Input: adapter_model.safetensors [SEP fastvideo_inference.json], written
 * as a variant directory. h3_adapter_open checks the metadata, the key
 * grammar, the pairs and counts and the contract json; an adapter that
 * opens is checked against the base model id, bound to the tiny model's
 * transformer in both layouts (tests/data/models/tiny-h3/transformer and
 * tiny-h3-native/FL2VA/transformer, opened once), and every base tensor is
 * fused and every block's VSA gate made, as h3_dit_load_with_adapter does. */
#include "h3_fuzz.h"
#include "h3_fuzz_nest.h" /* runs of [ and { (issue 31) */

#include "base/h3_safetensors.h"
#include "model/h3_adapter.h"
#include "model/h3_dit_plan.h"

typedef struct base_model {
    h3_checkpoint *ckpt;
    h3_dit_checkpoint_layout layout;
    h3_dit_config cfg;
} base_model;

static base_model bases[2];

static void open_base(base_model *b, const char *rel) {
    char *dir = g_build_filename(h3_fuzz_setting("H3_FUZZ_DATA", H3_FUZZ_DATA), rel, NULL);
    h3_status st;
    if (h3_checkpoint_open(dir, &b->ckpt, &st) != H3_OK || h3_dit_detect_layout(b->ckpt, &b->layout, &st) != H3_OK ||
        h3_dit_config_load(dir, &b->cfg, &st) != H3_OK) {
        fprintf(stderr, "fuzz_adapter: %s\n", st.message);
        abort();
    }
    g_free(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    open_base(&bases[0], "models/tiny-h3/transformer");
    open_base(&bases[1], "models/tiny-h3-native/FL2VA/transformer");
    return 0;
}

static void fuse_all(h3_adapter *a, const base_model *b) {
    h3_status st;
    if (h3_adapter_bind(a, b->ckpt, b->layout, &b->cfg, &st) != H3_OK) {
        h3_fuzz_check_status(&st);
        return;
    }
    for (size_t i = 0; i < h3_checkpoint_count(b->ckpt); i++) {
        const h3_st_tensor *t = h3_checkpoint_at(b->ckpt, i);
        h3_st_tensor fused;
        void *data = NULL;
        if (h3_adapter_fuse(a, t, &fused, &data, &st) != H3_OK) {
            h3_fuzz_check_status(&st);
            continue;
        }
        if (data) {
            if (fused.nbytes != t->nbytes || fused.dtype != t->dtype) abort(); /* a copy of the base's shape */
            h3_fuzz_touch(data, fused.nbytes);
            free(data);
        }
    }
    for (int block = 0; block < b->cfg.num_layers; block++) {
        h3_st_tensor gate;
        void *data = NULL;
        if (h3_adapter_gate(a, block, &gate, &data, &st) != H3_OK) {
            h3_fuzz_check_status(&st);
            continue;
        }
        if (data) {
            h3_fuzz_touch(data, gate.nbytes);
            free(data);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3_fuzz_remove("adapter");
    h3_fuzz_part parts[H3_FUZZ_MAX_PARTS];
    size_t n = h3_fuzz_split(data, size, parts, 2);
    g_free(h3_fuzz_write("adapter/" H3_ADAPTER_FILE, parts[0].data, parts[0].size));
    if (n > 1) g_free(h3_fuzz_write("adapter/" H3_ADAPTER_CONTRACT_FILE, parts[1].data, parts[1].size));
    char *dir = h3_fuzz_path("adapter");
    h3_status st;
    h3_adapter *a;
    if (h3_adapter_open(dir, &a, &st) == H3_OK) {
        volatile size_t sink = strlen(h3_adapter_path(a)) + strlen(h3_adapter_base_model(a)) +
                               strlen(h3_adapter_finetuned_model(a)) + (size_t)h3_adapter_rank(a) +
                               (size_t)h3_adapter_has_vsa_gates(a);
        const h3_adapter_contract *c = h3_adapter_get_contract(a);
        if (c->num_dmd_steps < 0 || c->num_dmd_steps > H3_ADAPTER_MAX_DMD_STEPS) abort();
        sink += strnlen(c->attention_backend, sizeof c->attention_backend);
        (void)sink;
        if (h3_adapter_check_base_model(a, "golden/tiny-h3", dir, &st) != H3_OK) h3_fuzz_check_status(&st);
        fuse_all(a, &bases[0]);
        fuse_all(a, &bases[1]);
        h3_adapter_free(a);
    } else {
        h3_fuzz_check_status(&st);
    }
    g_free(dir);
    return 0;
}
