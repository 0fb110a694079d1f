/* test_bench_tp.c - h3-bench's forward over tensor-parallel ranks
 * (tools/bench/h3_bench_tp.c) on CPU ranks, the same code h3-bench runs on GPUs:
 * the device list, the refused degrees, and a random model of 56 small heads
 * at TP 1/2/4/7 (dense) and 2 (VSA-H3) whose velocities agree with TP1, so
 * h3_dit_create_random shards like the loader. */
#include <glib.h>
#include <math.h>
#include <stdint.h>

#include "h3_bench_tp.h"
#include "h3_test.h"

/* The shapes of the TP tests' "wide" model (tests/parallel/h3_test_tp.h): 56 heads, so every release degree splits. */
static h3_dit_config wide_config(void) {
    return (h3_dit_config){.num_layers = 2, .num_refiner_layers = 1, .hidden_size = 56, .num_heads = 56,
                           .head_dim = 8, .ffn_dim = 112, .in_channels = 24, .audio_in_channels = 32, .patch_t = 1,
                           .patch_h = 2, .patch_w = 2, .text_dim = 32, .freq_dim = 16, .time_embed_hidden_dim = 48,
                           .time_embed_dim = 28, .rope_freq_dim = 1, .rope_theta = 10000.0f, .norm_eps = 1e-5f,
                           .qk_norm_eps = 1e-5f, .final_norm_eps = 1e-5f};
}

static void test_devices(void) {
    int d[H3_COMM_MAX_RANKS];
    h3_status st;
    CHECK(h3_bench_parse_devices("0,1,2,3", d, H3_COMM_MAX_RANKS, &st) == 4 && d[0] == 0 && d[3] == 3, "0,1,2,3");
    CHECK(h3_bench_parse_devices("5", d, H3_COMM_MAX_RANKS, &st) == 1 && d[0] == 5, "5");
    CHECK(h3_bench_parse_devices("cpu:3", d, H3_COMM_MAX_RANKS, &st) == 3 && d[2] == -1, "cpu:3");
    const char *bad[] = {"", "0,", ",0", "0,,1", "a", "-1", "cpu:0", "cpu:", "0 1"};
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        int n = h3_bench_parse_devices(bad[i], d, H3_COMM_MAX_RANKS, &st);
        CHECK(n == 0 && st.code == H3_ERR_INVALID_ARGUMENT, "'%s' accepted (%d)", bad[i], n);
    }
    CHECK(h3_bench_parse_devices("1,0,1", d, H3_COMM_MAX_RANKS, &st) == 0 && strstr(st.message, "listed twice"),
          "1,0,1: %s", st.message);
}

static h3_bench_tp_params small_params(const h3_dit_config *cfg, const int32_t *tags) {
    /* 5 text rows, 7 latent frames of 4x4 latents, 6 audio latents */
    h3_bench_tp_params p = {.cfg = cfg, .blocks = cfg->num_layers, .model_seed = 7, .input_seed = 11,
                            .layout = {.text_token_tags = tags, .num_text = 5, .num_latent_frames = 7,
                                       .latent_height = 4, .latent_width = 4, .num_audio_latents = 6, .patch_t = 1,
                                       .patch_h = 2, .patch_w = 2},
                            .t_video = 0.3f, .t_audio = 0.6f, .reps = 3, .comm_reps = 2, .cpu_threads = 1};
    return p;
}

static void test_forward(void) {
    h3_dit_config cfg = wide_config();
    int32_t tags[5] = {1, 1, 1, 1, 1};
    int cpu[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    size_t nv = 7 * 2 * 2 * 96; /* video rows x features */
    float *v1 = calloc(nv, sizeof *v1), *v = calloc(nv, sizeof *v);
    h3_status st;
    h3_bench_tp_result r;
    for (int vsa = 0; vsa <= 1; vsa++) {
        const int degrees[] = {1, 2, 4, 7};
        for (size_t k = 0; k < G_N_ELEMENTS(degrees); k++) {
            int n = degrees[k];
            if (vsa && n > 2) break;
            h3_bench_tp_params p = small_params(&cfg, tags);
            p.vsa = vsa;
            p.vsa_sparsity = 0.5f;
            p.video_out = n == 1 ? v1 : v;
            h3_status_code rc = h3_bench_tp_forward(&p, cpu, n, &r, &st);
            CHECK(rc == H3_OK, "tp%d vsa %d: %s", n, vsa, st.message);
            if (rc != H3_OK) continue;
            CHECK(r.size == n && r.S == 5 + 7 * 2 * 2 + 12 && r.n_t == 2 && !strcmp(r.comm, "cpu") &&
                      r.fwd_ms > 0 && r.fwd_min_ms <= r.fwd_ms && r.fwd_ms <= r.fwd_max_ms && r.nonfinite == 0,
                  "tp%d: S %lld, %d timesteps, %s, %.3f ms, %zu non-finite", n, (long long)r.S, r.n_t, r.comm,
                  r.fwd_ms, r.nonfinite);
            CHECK(n == 1 ? r.comm_ms == 0 : r.comm_ms > 0 && r.comm_bytes == (uint64_t)r.S * 56 * 4,
                  "tp%d: all-reduces %.3f ms, %llu bytes", n, r.comm_ms, (unsigned long long)r.comm_bytes);
            double norm = 0;
            for (size_t i = 0; i < nv; i++) norm += (double)p.video_out[i] * p.video_out[i];
            CHECK(norm > 0, "tp%d: zero velocities", n);
            double e = n == 1 ? 0 : h3_test_rel_l2(v, v1, nv);
            printf("bench forward %s tp%d (cpu): %.2f ms (all-reduces %.2f ms), velocities vs tp1 rel L2 %.2e\n",
                   vsa ? "vsa" : "fa", n, r.fwd_ms, r.comm_ms, e);
            CHECK(e <= 1e-5, "%s tp%d vs tp1: rel L2 %.3e", vsa ? "vsa" : "fa", n, e);
        }
    }
    /* 3 does not divide 56 heads: refused before any rank starts, the valid degrees named. */
    h3_bench_tp_params p = small_params(&cfg, tags);
    CHECK(h3_bench_tp_forward(&p, cpu, 3, &r, &st) == H3_ERR_INVALID_ARGUMENT &&
              strstr(st.message, "1, 2, 4, 7 or 8"),
          "tp3: %s", st.message);
    p.blocks = 3;
    CHECK(h3_bench_tp_forward(&p, cpu, 1, &r, &st) == H3_ERR_INVALID_ARGUMENT, "3 of 2 blocks: %s", st.message);
    free(v1);
    free(v);
}

/* A projection of TP n (rank 0 alone, collectives as copies) carries exactly
 * the collectives of rank 0 of a real group of n, and its velocities stay
 * finite; its time is one rank's. */
static void test_projection(void) {
    h3_dit_config cfg = wide_config();
    int32_t tags[5] = {1, 1, 1, 1, 1};
    int cpu[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    h3_status st;
    const int degrees[] = {2, 4, 7};
    for (size_t k = 0; k < G_N_ELEMENTS(degrees); k++) {
        int n = degrees[k];
        h3_bench_tp_result real, proj;
        h3_bench_tp_params p = small_params(&cfg, tags);
        h3_status_code rc = h3_bench_tp_forward(&p, cpu, n, &real, &st);
        CHECK(rc == H3_OK, "tp%d: %s", n, st.message);
        p.project = 1;
        h3_status_code rp = h3_bench_tp_forward(&p, cpu, n, &proj, &st);
        CHECK(rp == H3_OK, "projected tp%d: %s", n, st.message);
        if (rc != H3_OK || rp != H3_OK) continue;
        const h3_comm_traffic *a = &real.fwd_traffic, *b = &proj.fwd_traffic;
        printf("projection tp%d (cpu): %.2f ms for rank 0 alone (group %.2f ms); per forward %llu all-reduces, "
               "%.3f MB; %llu all-gathers, %.3f MB\n", n, proj.fwd_ms, real.fwd_ms,
               (unsigned long long)b->all_reduce_calls, b->all_reduce_bytes / 1e6,
               (unsigned long long)b->all_gather_calls, b->all_gather_bytes / 1e6);
        CHECK(!strcmp(proj.comm, "projection") && proj.size == n && proj.nonfinite == 0 && proj.fwd_ms > 0,
              "projected tp%d: %s, %zu non-finite", n, proj.comm, proj.nonfinite);
        /* 2 row-parallel sums per block (main + refiner), [S, hidden] f32 */
        CHECK(a->all_reduce_calls >= 2u * (uint64_t)cfg.num_layers &&
                  a->all_reduce_bytes == a->all_reduce_calls * (uint64_t)real.S * 56 * 4,
              "tp%d: %llu all-reduces of %llu bytes", n, (unsigned long long)a->all_reduce_calls,
              (unsigned long long)a->all_reduce_bytes);
        CHECK(memcmp(a, b, sizeof *a) == 0,
              "tp%d: the projection carries %llu/%llu/%llu calls, the group %llu/%llu/%llu", n,
              (unsigned long long)b->all_reduce_calls, (unsigned long long)b->all_gather_calls,
              (unsigned long long)b->broadcast_calls, (unsigned long long)a->all_reduce_calls,
              (unsigned long long)a->all_gather_calls, (unsigned long long)a->broadcast_calls);
    }
    /* the degree is checked as for a real group */
    h3_bench_tp_result r;
    h3_bench_tp_params p = small_params(&cfg, tags);
    p.project = 1;
    CHECK(h3_bench_tp_forward(&p, cpu, 3, &r, &st) == H3_ERR_INVALID_ARGUMENT, "projected tp3: %s", st.message);
}

int main(void) {
    test_devices();
    test_forward();
    test_projection();
    return h3_test_finish("test_bench_tp");
}
