/* test_tp_dit.c - the DiT forward over 1..8 CPU ranks: tiny-h3 (diffusers
 * and native layouts) at TP 1/2 against the golden and TP1, the FastH3 VSA
 * adapter with VSA-H3 attention at TP 1/2 against its golden, the "wide" test
 * model (56 heads) at TP 2/4/7/8 against TP1, every rank returning the same
 * bits; tiny-h3 refused at TP4; a fault mid-forward stops every rank and the
 * same group then computes the same result. */
#include "h3_test_tp.h"
#include "h3_test_golden.h"
#include "model/h3_adapter.h"
#include "model/h3_dit_layout.h"

static char *wide_dir; /* the wide test model, written by main */

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/* ---- the transformer at TP N ------------------------------------------------------------------------ */

typedef struct dit_inputs {
    h3_dit_layout *layout;
    float *text, *video, *audio, *ts;
    int32_t *row_index;
    int n_ts;
} dit_inputs;

typedef struct dit_job {
    const dit_inputs *in;
    h3_backend *b[MAX_RANKS];
    h3_dit *dit[MAX_RANKS];
    float *video[MAX_RANKS], *audio[MAX_RANKS];
} dit_job;

static h3_status_code dit_rank(const h3_tp *tp, void *user, h3_status *status) {
    dit_job *j = user;
    const dit_inputs *in = j->in;
    h3_backend *b = j->b[tp->rank];
    h3_dit *dit = j->dit[tp->rank];
    const h3_dit_config *c = h3_dit_get_config(dit);
    const h3_dit_layout *l = in->layout;
    int64_t vf = (int64_t)c->in_channels * c->patch_h * c->patch_w, af = c->audio_in_channels;
    size_t mark = h3_arena_mark(b);
    h3_tensor t = h3_new_2d(b, H3_F32, l->num_text, c->text_dim);
    h3_tensor v = h3_new_2d(b, H3_F32, l->num_video_rows, vf), a = h3_new_2d(b, H3_F32, l->num_audio_rows, af);
    h3_tensor vv = h3_new_2d(b, H3_F32, l->num_video_rows, vf), av = h3_new_2d(b, H3_F32, l->num_audio_rows, af);
    h3_status_code rc = h3_backend_check(b, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &t, in->text, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &v, in->video, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &a, in->audio, status);
    if (rc == H3_OK) rc = h3_dit_begin(dit, l, &t, status);
    if (rc == H3_OK) rc = h3_dit_forward(dit, &v, &a, in->ts, in->n_ts, in->row_index, &vv, &av, status);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &vv, j->video[tp->rank], status);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &av, j->audio[tp->rank], status);
    h3_dit_end(dit);
    h3_arena_reset(b, mark);
    return rc;
}

/* Loads the transformer of `dir` on n CPU ranks (with `adapter` fused and
 * VSA-H3 on when given) and runs one forward; the velocities of rank 0
 * (caller frees). Checks that every rank returned the same bits.
 * fault_call >= 0 injects a device fault there on rank n-1 first. */
static int run_dit_adapter(const char *dir, int n, const dit_inputs *in, float **video, float **audio,
                           long fault_call, const char *adapter, int vsa) {
    h3_tp_team *t = make_team(n);
    if (!t) return 0;
    dit_job j;
    memset(&j, 0, sizeof j);
    j.in = in;
    h3_status st;
    int ok = 1;
    h3_adapter *a = NULL;
    if (adapter) {
        ok = h3_adapter_open(adapter, &a, &st) == H3_OK;
        CHECK(ok, "adapter %s: %s", adapter, st.message);
    }
    for (int r = 0; r < n && ok; r++) {
        h3_tp tp = team_tp(t, r);
        ok = h3_backend_cpu_create(1, &j.b[r], &st) == H3_OK &&
             h3_dit_load_with_adapter(j.b[r], dir, &tp, a, &j.dit[r], &st) == H3_OK;
        if (ok && vsa) {
            h3_vsa_params vp = h3_vsa_params_default();
            ok = h3_dit_set_vsa(j.dit[r], &vp, &st) == H3_OK;
        }
        CHECK(ok, "dit tp%d rank %d load: %s", n, r, st.message);
    }
    h3_adapter_free(a);
    const h3_dit_config *c = ok ? h3_dit_get_config(j.dit[0]) : NULL;
    size_t nv = c ? (size_t)(in->layout->num_video_rows * c->in_channels * c->patch_h * c->patch_w) : 0;
    size_t na = c ? (size_t)(in->layout->num_audio_rows * c->audio_in_channels) : 0;
    for (int r = 0; r < n && ok; r++) {
        j.video[r] = calloc(nv, sizeof(float));
        j.audio[r] = calloc(na, sizeof(float));
    }
    if (ok && fault_call >= 0) {
        h3_comm_group_inject_fault(h3_tp_team_group(t), n - 1, fault_call);
        gint64 t0 = g_get_monotonic_time();
        h3_status_code rc = h3_tp_team_run(t, dit_rank, &j, &st);
        char want[96];
        snprintf(want, sizeof want, "injected fault on rank %d", n - 1);
        CHECK(rc == H3_ERR_DEVICE && strstr(st.message, want), "dit tp%d fault: rc %d %s", n, rc, st.message);
        printf("dit tp%d: fault at collective #%ld of rank %d stopped every rank in %.3f s: %s\n", n, fault_call,
               n - 1, (double)(g_get_monotonic_time() - t0) / 1e6, st.message);
        h3_comm_group_inject_fault(h3_tp_team_group(t), -1, 0);
        for (int r = 0; r < n; r++) h3_backend_clear_error(j.b[r]);
    }
    if (ok) {
        ok = h3_tp_team_run(t, dit_rank, &j, &st) == H3_OK;
        CHECK(ok, "dit tp%d forward: %s", n, st.message);
    }
    for (int r = 1; r < n && ok; r++)
        CHECK(memcmp(j.video[r], j.video[0], nv * sizeof(float)) == 0 &&
                  memcmp(j.audio[r], j.audio[0], na * sizeof(float)) == 0,
              "dit tp%d: rank %d returned other velocities than rank 0", n, r);
    *video = ok ? j.video[0] : NULL;
    *audio = ok ? j.audio[0] : NULL;
    for (int r = 0; r < n; r++) {
        if (!ok || r > 0) free(j.video[r]), free(j.audio[r]);
        h3_dit_free(j.dit[r]);
        h3_backend_destroy(j.b[r]);
    }
    h3_tp_team_destroy(t);
    return ok;
}

static int run_dit(const char *dir, int n, const dit_inputs *in, float **video, float **audio, long fault_call) {
    return run_dit_adapter(dir, n, in, video, audio, fault_call, NULL, 0);
}

static dit_inputs golden_dit_inputs(h3_st_file *f, int T, int H_lat, int W_lat, int Na) {
    dit_inputs in;
    memset(&in, 0, sizeof in);
    int64_t L = 0, S = 0, nt = 0;
    int32_t *tags = golden_i32(f, "token_tags", &S), *text_idx = golden_i32(f, "text_indices", &L);
    int32_t *text_tags = malloc((size_t)(L + 1) * sizeof *text_tags);
    for (int64_t i = 0; tags && text_idx && i < L; i++) text_tags[i] = tags[text_idx[i]];
    h3_dit_layout_params p = {.text_token_tags = text_tags, .num_text = (int)L, .num_latent_frames = T,
                              .latent_height = H_lat, .latent_width = W_lat, .num_audio_latents = Na,
                              .patch_t = 1, .patch_h = 2, .patch_w = 2};
    h3_status st;
    CHECK(h3_dit_layout_build(&p, &in.layout, &st) == H3_OK, "layout: %s", st.message);
    in.text = golden_f32(f, "encoder_hidden_states", NULL);
    in.video = golden_f32(f, "hidden_states", NULL);
    in.audio = golden_f32(f, "audio_hidden_states", NULL);
    in.ts = golden_f32(f, "timestep", &nt);
    in.n_ts = (int)nt;
    in.row_index = golden_i32(f, "timestep_indices", NULL);
    CHECK(in.layout && in.layout->seq_len == S, "golden layout: %lld rows", (long long)S);
    free(tags);
    free(text_idx);
    free(text_tags);
    return in;
}

static void free_inputs(dit_inputs *in) {
    h3_dit_layout_free(in->layout);
    free(in->text);
    free(in->video);
    free(in->audio);
    free(in->ts);
    free(in->row_index);
}

static void test_dit_tiny(void) {
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/transformer_t2va.safetensors"), &f, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    dit_inputs in = golden_dit_inputs(f, 37, 4, 6, 207); /* transformer_t2va: 64x96, 124 frames */
    int64_t nv = 0, na = 0;
    float *gv = golden_f32(f, "sample", &nv), *ga = golden_f32(f, "audio_sample", &na);
    const char *dirs[] = {TINY "/transformer", "models/tiny-h3-native/FL2VA/transformer"};
    float *v1 = NULL, *a1 = NULL;
    for (int d = 0; d < 2 && in.layout && gv && ga; d++)
        for (int n = 1; n <= 2; n++) {
            float *v = NULL, *a = NULL;
            if (!run_dit(h3_test_data(dirs[d]), n, &in, &v, &a, -1)) continue;
            double ev = h3_test_rel_l2(v, gv, (size_t)nv), ea = h3_test_rel_l2(a, ga, (size_t)na);
            printf("tiny dit (%s) tp%d vs golden: video rel L2 %.3e, audio %.3e\n", d ? "native" : "diffusers", n, ev,
                   ea);
            CHECK(ev <= 1e-4 && ea <= 1e-4, "tiny dit tp%d vs golden: %.3e %.3e", n, ev, ea);
            if (d == 0 && n == 1) {
                v1 = v;
                a1 = a;
                continue;
            }
            if (v1) {
                double dv = h3_test_rel_l2(v, v1, (size_t)nv), da = h3_test_rel_l2(a, a1, (size_t)na);
                printf("tiny dit (%s) tp%d vs tp1: video rel L2 %.3e, audio %.3e\n", d ? "native" : "diffusers", n, dv,
                       da);
                CHECK(dv <= TP_TOLERANCE && da <= TP_TOLERANCE, "tiny dit tp%d vs tp1: %.3e %.3e", n, dv, da);
            }
            free(v);
            free(a);
        }
    /* 2 heads do not split over 4 ranks: a clear load error. */
    h3_backend *b;
    h3_dit *dit = NULL;
    h3_backend_cpu_create(1, &b, &st);
    h3_tp tp4 = {0, 4, NULL};
    CHECK(h3_dit_load_tp(b, h3_test_data(TINY "/transformer"), &tp4, &dit, &st) == H3_ERR_INVALID_ARGUMENT &&
              strstr(st.message, "2 attention heads") && dit == NULL,
          "tiny dit tp4: %s", st.message);
    h3_backend_destroy(b);
    free(v1);
    free(a1);
    free(gv);
    free(ga);
    free_inputs(&in);
    h3_st_close(f);
}

/* The FastH3 VSA adapter (its to_gate_compress split by heads like q) and
 * VSA-H3 attention on each rank's heads, against the golden at TP 1 and 2. */
static void test_dit_vsa(void) {
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/vsa_forward_t64.safetensors"), &f, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    dit_inputs in = golden_dit_inputs(f, 37, 6, 10, 207); /* 96x160, 124 frames */
    int64_t nv = 0, na = 0;
    float *gv = golden_f32(f, "sample", &nv), *ga = golden_f32(f, "audio_sample", &na);
    for (int n = 1; n <= 2 && in.layout && gv && ga; n++) {
        float *v = NULL, *a = NULL;
        if (!run_dit_adapter(h3_test_data(TINY "/transformer"), n, &in, &v, &a, -1,
                             h3_test_data("adapters/tiny-h3/vsa-datafree"), 1))
            continue;
        double ev = h3_test_rel_l2(v, gv, (size_t)nv), ea = h3_test_rel_l2(a, ga, (size_t)na);
        printf("tiny dit + VSA adapter, VSA-H3 attention, tp%d vs golden: video rel L2 %.3e, audio %.3e\n", n, ev, ea);
        CHECK(ev <= 1e-4 && ea <= 1e-4, "vsa tp%d vs golden: %.3e %.3e", n, ev, ea);
        free(v);
        free(a);
    }
    free(gv);
    free(ga);
    free_inputs(&in);
    h3_st_close(f);
}

static void test_dit_wide(void) {
    char *dir = g_build_filename(wide_dir, "transformer", NULL);
    /* T2VA layout: 5 text rows, 7 latent frames of 4x4 latents, 6 audio latents */
    int32_t tags[5] = {1, 1, 1, 1, 1};
    h3_dit_layout_params p = {.text_token_tags = tags, .num_text = 5, .num_latent_frames = 7, .latent_height = 4,
                              .latent_width = 4, .num_audio_latents = 6, .patch_t = 1, .patch_h = 2, .patch_w = 2};
    dit_inputs in;
    memset(&in, 0, sizeof in);
    h3_status st;
    if (h3_dit_layout_build(&p, &in.layout, &st) != H3_OK) {
        CHECK(0, "wide layout: %s", st.message);
        g_free(dir);
        return;
    }
    const h3_dit_layout *l = in.layout;
    size_t nt = (size_t)l->num_text * 32, nv = (size_t)l->num_video_rows * 96, na = (size_t)l->num_audio_rows * 32;
    in.text = malloc(nt * sizeof(float));
    in.video = malloc(nv * sizeof(float));
    in.audio = malloc(na * sizeof(float));
    for (size_t i = 0; i < nt; i++) in.text[i] = gauss();
    for (size_t i = 0; i < nv; i++) in.video[i] = gauss();
    for (size_t i = 0; i < na; i++) in.audio[i] = gauss();
    in.ts = malloc(H3_DIT_MAX_TIMESTEPS * sizeof(float));
    in.row_index = malloc((size_t)l->seq_len * sizeof(int32_t));
    CHECK(h3_dit_layout_timesteps(l, 0.3f, 0.6f, in.ts, &in.n_ts, in.row_index, &st) == H3_OK, "timesteps: %s",
          st.message);
    float *v1 = NULL, *a1 = NULL;
    run_dit(dir, 1, &in, &v1, &a1, -1);
    for (size_t k = 1; k < G_N_ELEMENTS(degrees) && v1; k++) {
        int n = degrees[k];
        float *v = NULL, *a = NULL;
        if (!run_dit(dir, n, &in, &v, &a, -1)) continue;
        double dv = h3_test_rel_l2(v, v1, nv), da = h3_test_rel_l2(a, a1, na);
        printf("wide dit (56 heads) tp%d vs tp1: video rel L2 %.3e (max |d| %.2e), audio %.3e\n", n, dv,
               max_abs_diff(v, v1, nv), da);
        CHECK(dv <= TP_TOLERANCE && da <= TP_TOLERANCE, "wide dit tp%d vs tp1: %.3e %.3e", n, dv, da);
        free(v);
        free(a);
    }
    /* A device fault in the middle of a forward on the last of 4 ranks: its
     * collective #5 (refiner #0-1, AdaLN gathers #2-3, then the FFN
     * all-reduce of the first block); then the same group recovers and
     * computes the same result. */
    float *v = NULL, *a = NULL;
    if (run_dit(dir, 4, &in, &v, &a, 5) && v1) {
        double dv = h3_test_rel_l2(v, v1, nv);
        CHECK(dv <= TP_TOLERANCE, "wide dit tp4 after a fault: %.3e", dv);
    }
    free(v);
    free(a);
    free(v1);
    free(a1);
    free_inputs(&in);
    g_free(dir);
}

int main(void) {
    wide_dir = wide_model_open();
    test_dit_tiny();
    test_dit_vsa();
    if (wide_dir) test_dit_wide();
    wide_model_remove(wide_dir);
    return h3_test_finish("test_tp_dit");
}
