/* h3_scheduler.c - MiniMax-H3's sigma grids, Euler step and timestep plan.
 *
 * Bit-exactness with the reference depends on rounding every float32 tensor
 * op separately, so the compiler must not contract a*b+c into an FMA on its
 * own (GCC's gnu11 default does as soon as the target has FMA). The one FMA
 * the reference does have (torch's compiled linspace) is written as fmaf(). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "model/h3_scheduler.h"

#include <math.h>
#include <stdlib.h>

const float h3_fasth3_ladder_a[H3_FASTH3_LADDER_POINTS] = {1.0f, 0.75f, 0.5f, 0.25f, 0.0f};
const float h3_fasth3_ladder_b[H3_FASTH3_LADDER_POINTS] = {0.999f, 0.749f, 0.5f, 0.25f, 0.0f};

/* torch.linspace(1, 0, n, float32) on the CPU (RangeFactoriesKernel.cpp):
 * step = (end - start) / (n - 1) in float; the first half is start + step*i,
 * the second half end - step*(n-1-i), so both ends are exact. torch's x86
 * build contracts start + step*i into one FMA: the N = 50 goldens only
 * match with the fused form (the second half is the same either way, since
 * 0 - p is exact). */
static void linspace_1_to_0(float *out, int n) {
    const float start = 1.0f, end = 0.0f;
    const float step = (end - start) / (float)(n - 1);
    int halfway = n / 2;
    for (int i = 0; i < n; i++) {
        if (i < halfway)
            out[i] = fmaf(step, (float)i, start);
        else
            out[i] = end - step * (float)(n - 1 - i);
    }
}

/* s*b / (1 + (s-1)*b): four separately rounded float32 tensor ops. */
static float shift_sigma(float b, float shift) {
    float num = shift * b;
    float den = 1.0f + (shift - 1.0f) * b;
    return num / den;
}

static h3_status_code grid_alloc(h3_sigma_grid *out, int n, h3_status *status) {
    out->n = n;
    out->sigmas = malloc((size_t)n * sizeof(float));
    out->timesteps = malloc((size_t)(n > 1 ? n - 1 : 1) * sizeof(float));
    if (!out->sigmas || !out->timesteps) {
        h3_sigma_grid_free(out);
        return h3_fail(status, H3_ERR_NO_MEMORY, "sigma grid: cannot allocate %d points", n);
    }
    return H3_OK;
}

static void grid_fill_timesteps(h3_sigma_grid *g) {
    for (int i = 0; i < g->n - 1; i++) g->timesteps[i] = 1.0f - g->sigmas[i];
}

static h3_status_code check_shift(float shift, h3_status *status) {
    if (!(shift > 0.0f) || isinf(shift))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "sigma grid: shift must be positive and finite, got %g", (double)shift);
    return H3_OK;
}

h3_status_code h3_sigma_grid_make(int num_points, float shift, h3_sigma_grid *out,
                                  h3_status *status) {
    out->n = 0;
    out->sigmas = out->timesteps = NULL;
    if (num_points < 2)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "sigma grid: num_inference_steps (grid points incl. the terminal 0) "
                       "must be >= 2, got %d", num_points);
    h3_status_code rc = check_shift(shift, status);
    if (rc != H3_OK) return rc;
    rc = grid_alloc(out, num_points, status);
    if (rc != H3_OK) return rc;

    linspace_1_to_0(out->sigmas, num_points);
    int n = 0;
    for (int i = 0; i < num_points; i++) {
        float s = shift_sigma(out->sigmas[i], shift);
        /* unique_consecutive: the shift can map neighbours near 1 together */
        if (n == 0 || s != out->sigmas[n - 1]) out->sigmas[n++] = s;
    }
    out->n = n;
    grid_fill_timesteps(out);
    return H3_OK;
}

/* What set_timesteps(sigmas=...) requires of a verbatim schedule. */
static h3_status_code check_sigmas(const float *sigmas, int n, const char *what,
                                   h3_status *status) {
    for (int i = 1; i < n; i++) {
        if (!(sigmas[i] < sigmas[i - 1]))
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                           "%s: sigmas not strictly decreasing at index %d (%.9g after %.9g)",
                           what, i, (double)sigmas[i], (double)sigmas[i - 1]);
    }
    if (sigmas[n - 1] != 0.0f)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: sigmas must end at 0, end at %.9g",
                       what, (double)sigmas[n - 1]);
    return H3_OK;
}

h3_status_code h3_sigma_grid_from_sigmas(const float *sigmas, int n, h3_sigma_grid *out,
                                         h3_status *status) {
    out->n = 0;
    out->sigmas = out->timesteps = NULL;
    if (n < 2)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "sigma schedule: needs at least 2 values, got %d", n);
    h3_status_code rc = check_sigmas(sigmas, n, "sigma schedule", status);
    if (rc != H3_OK) return rc;
    rc = grid_alloc(out, n, status);
    if (rc != H3_OK) return rc;
    for (int i = 0; i < n; i++) out->sigmas[i] = sigmas[i];
    grid_fill_timesteps(out);
    return H3_OK;
}

h3_status_code h3_sigma_grid_from_base(const float *base, int n, float shift,
                                       h3_sigma_grid *out, h3_status *status) {
    out->n = 0;
    out->sigmas = out->timesteps = NULL;
    h3_status_code rc = check_shift(shift, status);
    if (rc != H3_OK) return rc;
    if (n < 2)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "sigma ladder: needs at least 2 base points, got %d", n);
    for (int i = 0; i < n; i++) {
        if (!(base[i] >= 0.0f && base[i] <= 1.0f))
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                           "sigma ladder: base point %d = %g is outside [0, 1]", i, (double)base[i]);
    }
    rc = grid_alloc(out, n, status);
    if (rc != H3_OK) return rc;
    for (int i = 0; i < n; i++) out->sigmas[i] = shift_sigma(base[i], shift);
    rc = check_sigmas(out->sigmas, n, "sigma ladder", status);
    if (rc != H3_OK) {
        h3_sigma_grid_free(out);
        return rc;
    }
    grid_fill_timesteps(out);
    return H3_OK;
}

h3_status_code h3_sigma_grid_from_dmd_steps(const int *steps, int n, float shift,
                                            h3_sigma_grid *out, h3_status *status) {
    out->n = 0;
    out->sigmas = out->timesteps = NULL;
    if (n < 1 || n > 1024)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "dmd_denoising_steps: needs 1..1024 entries, got %d", n);
    float *base = malloc((size_t)(n + 1) * sizeof(float));
    if (!base) return h3_fail(status, H3_ERR_NO_MEMORY, "dmd_denoising_steps: out of memory");
    for (int i = 0; i < n; i++) {
        if (steps[i] < 0 || steps[i] > 1000) {
            free(base);
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                           "dmd_denoising_steps[%d] = %d is outside [0, 1000]", i, steps[i]);
        }
        base[i] = (float)((double)steps[i] / 1000.0);
    }
    base[n] = 0.0f;
    h3_status_code rc = h3_sigma_grid_from_base(base, n + 1, shift, out, status);
    free(base);
    return rc;
}

void h3_sigma_grid_free(h3_sigma_grid *g) {
    if (!g) return;
    free(g->sigmas);
    free(g->timesteps);
    g->sigmas = g->timesteps = NULL;
    g->n = 0;
}

void h3_euler_step(float *x, const float *v, size_t n, float t, float sigma, float sigma_next) {
    const float sigma_t = 1.0f - t;
    const float ratio = sigma_next / sigma;
    const float keep = 1.0f - ratio;
    for (size_t i = 0; i < n; i++) {
        float x0 = x[i] + sigma_t * v[i];
        x[i] = ratio * x[i] + keep * x0;
    }
}

void h3_sigma_grid_step(const h3_sigma_grid *g, int i, float *x, const float *v, size_t n) {
    h3_euler_step(x, v, n, g->timesteps[i], g->sigmas[i], g->sigmas[i + 1]);
}

void h3_scale_noise(float *out, const float *sample, const float *noise, size_t n, float t) {
    const float one_minus_t = 1.0f - t;
    for (size_t i = 0; i < n; i++) out[i] = t * sample[i] + one_minus_t * noise[i];
}

/* Index of value in the plan, adding it (sorted) when new. */
static void plan_add(h3_step_timesteps *p, float value) {
    for (int i = 0; i < p->count; i++)
        if (p->values[i] == value) return;
    int pos = p->count;
    while (pos > 0 && p->values[pos - 1] > value) {
        p->values[pos] = p->values[pos - 1];
        pos--;
    }
    p->values[pos] = value;
    p->count++;
}

static int plan_index(const h3_step_timesteps *p, float value) {
    for (int i = 0; i < p->count; i++)
        if (p->values[i] == value) return i;
    return -1;
}

void h3_step_timesteps_make(float t_video, float t_audio, int has_cond, h3_step_timesteps *out) {
    /* max(float(t_video), 0.999) in the reference: no float lies between
     * 0.999 (double) and 0.999f, so this float max is the same value. */
    float t_cond = t_video > H3_CONDITION_TIMESTEP ? t_video : H3_CONDITION_TIMESTEP;
    out->count = 0;
    for (int i = 0; i < 4; i++) out->values[i] = 0.0f;
    plan_add(out, t_video); /* text and video rows */
    plan_add(out, t_audio);
    if (has_cond) plan_add(out, t_cond);
    out->index_text = plan_index(out, t_video);
    out->index_video = out->index_text;
    out->index_audio = plan_index(out, t_audio);
    out->index_cond = has_cond ? plan_index(out, t_cond) : -1;
}
