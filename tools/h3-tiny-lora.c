/* h3-tiny-lora.c - h3-make-tiny-model --lora FILE: a small LoRA (PEFT
 * names, rank 4) for the tiny model's transformer, to try `lora` and
 * `--lora` on the tiny model (docs/ELEMENT.md, LoRAs). */
#include <glib.h>
#include <math.h>
#include <stdint.h>
#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"
#include "model/h3_dit.h"

h3_status_code h3_tiny_lora_write(const char *dir, const char *path, uint64_t seed, h3_status *status);

/* --lora: A [4, in] and B [out, 4] (PEFT names, alpha 4: scale 1) on the
 * transformer's modules, uniform in +-0.3 (B) and +-1/sqrt(in) (A). */
#define LORA_RANK 4

static void lora_pair(GArray *t, GPtrArray *keep, const char *module, int64_t in, int64_t out, uint64_t key) {
    float *A = g_new(float, LORA_RANK * in), *B = g_new(float, out * LORA_RANK);
    uint64_t base = (uint64_t)keep->len * 1000003u;
    for (int64_t i = 0; i < LORA_RANK * in; i++) A[i] = h3_counter_uniform(key, base + (uint64_t)i, -1, 1) / sqrtf((float)in);
    for (int64_t i = 0; i < out * LORA_RANK; i++)
        B[i] = h3_counter_uniform(key, base + 500000u + (uint64_t)i, -0.3f, 0.3f);
    char *na = g_strdup_printf("transformer.%s.lora_A.weight", module);
    char *nb = g_strdup_printf("transformer.%s.lora_B.weight", module);
    h3_st_write_tensor ta = {.name = na, .dtype = H3_ST_F32, .ndim = 2, .shape = {LORA_RANK, in}, .data = A};
    h3_st_write_tensor tb = {.name = nb, .dtype = H3_ST_F32, .ndim = 2, .shape = {out, LORA_RANK}, .data = B};
    g_array_append_val(t, ta);
    g_array_append_val(t, tb);
    g_ptr_array_add(keep, A);
    g_ptr_array_add(keep, B);
    g_ptr_array_add(keep, na);
    g_ptr_array_add(keep, nb);
}

h3_status_code h3_tiny_lora_write(const char *dir, const char *path, uint64_t seed, h3_status *status) {
    char *tdir = g_build_filename(dir, "transformer", NULL);
    h3_dit_config c;
    h3_status_code rc = h3_dit_config_load(tdir, &c, status);
    g_free(tdir);
    if (rc != H3_OK) return rc;
    GArray *t = g_array_new(FALSE, TRUE, sizeof(h3_st_write_tensor));
    GPtrArray *keep = g_ptr_array_new_with_free_func(g_free);
    uint64_t key = h3_counter_key(seed, "lora");
    int64_t D = c.hidden_size, inner = (int64_t)c.num_heads * c.head_dim;
    for (int b = 0; b < c.num_layers; b++) {
        const char *parts[] = {"attn.to_q", "attn.to_k", "attn.to_v"};
        for (int k = 0; k < 3; k++) {
            char *m = g_strdup_printf("transformer_blocks.%d.%s", b, parts[k]);
            lora_pair(t, keep, m, D, inner, key);
            g_free(m);
        }
        char *m = g_strdup_printf("transformer_blocks.%d.ff.net.0.proj", b);
        lora_pair(t, keep, m, D, 2 * (int64_t)c.ffn_dim, key);
        g_free(m);
    }
    lora_pair(t, keep, "proj_out", D, (int64_t)c.in_channels * c.patch_t * c.patch_h * c.patch_w, key);
    static const char *const meta[] = {"lora_adapter_metadata", "{\"transformer.r\": 4, \"transformer.lora_alpha\": 4}",
                                       NULL};
    rc = h3_st_write(path, (h3_st_write_tensor *)t->data, t->len, meta, status);
    g_array_free(t, TRUE);
    g_ptr_array_free(keep, TRUE);
    return rc;
}

