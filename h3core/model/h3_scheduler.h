/* h3_scheduler.h - MiniMax-H3's rectified-flow Euler sampler schedule.
 *
 * Reproduces diffusers' MiniMaxH3Scheduler bit for bit (float32 on the CPU;
 * docs/spec/h3-transformer.md §4.2-§4.4, docs/spec/fasth3-vsa.md §2):
 *
 *   base  = torch.linspace(1, 0, N, float32)
 *   sigma = s*base / (1 + (s-1)*base)        float32, s = 12 video, 3 audio
 *   sigma = unique_consecutive(sigma)
 *   t_i   = 1 - sigma_i, i < n-1             the DiT's timestep (t = 0: noise)
 *
 * N counts grid points including the terminal 0, so N points drive N-1
 * transformer forwards (the project's "steps" = N-1).
 *
 * Conventions: x_sigma = (1-sigma)*x0 + sigma*noise, and the DiT predicts
 * the data-ward velocity v = x0 - noise, so x0 = x + sigma*v. */
#ifndef H3_SCHEDULER_H
#define H3_SCHEDULER_H

#include <stddef.h>

#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define H3_VIDEO_SHIFT 12.0f
#define H3_AUDIO_SHIFT 3.0f
/* The range of a flow shift a model folder may state (scheduler_config.json
 * "shift", model_index.json's sigma_shift_scales, an adapter's flow_shift),
 * checked where it is read so the file is named: 12 and 3 for the release;
 * past float's range a shift would become inf. */
#define H3_SHIFT_MIN 1e-3
#define H3_SHIFT_MAX 1e3

/* keyframe / visual-reference condition rows are pinned at this clean time
 * (noise augmentation 0.999, float32 0.999000013). */
#define H3_CONDITION_TIMESTEP 0.999f

/* FastH3 (4-forward DMD2 student) five-point base ladders, before the shift:
 *   H3_FASTH3_LADDER_A = linspace(1, 0, 5) = {1, .75, .5, .25, 0}: FastVideo
 *       set_timesteps(5) and sglang; identical to h3_sigma_grid_make(5, s).
 *   H3_FASTH3_LADDER_B = dmd_denoising_steps {999, 749, 500, 250}/1000 + 0:
 *       the released FastH3 ladder (fastvideo_inference.json, vLLM-Omni's
 *       FASTH3_BASE_SCHEDULE, the Comfy LoRA card). Use B when the checkpoint
 *       or adapter release names [999,749,500,250], otherwise A
 *       (docs/spec/fasth3-vsa.md §2.2). */
#define H3_FASTH3_LADDER_POINTS 5
extern const float h3_fasth3_ladder_a[H3_FASTH3_LADDER_POINTS];
extern const float h3_fasth3_ladder_b[H3_FASTH3_LADDER_POINTS];

typedef struct h3_sigma_grid {
    int n;            /* sigma points, terminal 0 included */
    float *sigmas;    /* n values, strictly decreasing, sigmas[n-1] == 0 */
    float *timesteps; /* n-1 values, t_i = 1 - sigmas[i] in float32 */
} h3_sigma_grid;

/* The default grid: torch.linspace(1, 0, num_points) (torch's two-sided CPU
 * linspace, whose first half is 1 + step*i fused into one FMA, as the
 * torch build compiles it), shifted, consecutive duplicates collapsed.
 * num_points >= 2, shift > 0. */
h3_status_code h3_sigma_grid_make(int num_points, float shift, h3_sigma_grid *out,
                                  h3_status *status);

/* A custom base ladder (e.g. h3_fasth3_ladder_b): sigma = s*b/(1+(s-1)*b) in
 * float32, then used verbatim as diffusers' set_timesteps(sigmas=...) does:
 * no deduplication; the result must be strictly decreasing and end at 0. */
h3_status_code h3_sigma_grid_from_base(const float *base, int n, float shift,
                                       h3_sigma_grid *out, h3_status *status);

/* A ladder given as a release's dmd_denoising_steps (fastvideo_inference.json,
 * e.g. {999, 749, 500, 250}): base = step/1000 (rounded once to float32),
 * plus the terminal 0, then as h3_sigma_grid_from_base. Steps must lie in
 * [0, 1000]. */
h3_status_code h3_sigma_grid_from_dmd_steps(const int *steps, int n, float shift,
                                            h3_sigma_grid *out, h3_status *status);

/* A fully formed sigma schedule, verbatim (set_timesteps(sigmas=...)). */
h3_status_code h3_sigma_grid_from_sigmas(const float *sigmas, int n, h3_sigma_grid *out,
                                         h3_status *status);

void h3_sigma_grid_free(h3_sigma_grid *g);

/* One Euler (eta = 0) step in place over x[0..n), float32, every operation
 * rounded separately exactly as the reference's tensor ops:
 *   x0 = x + (1 - t)*v           sigma recovered from the timestep t
 *   r  = sigma_next / sigma      from the grid (sigma > 0)
 *   x  = r*x + (1 - r)*x0
 * On the last step sigma_next = 0 and x becomes x0. */
void h3_euler_step(float *x, const float *v, size_t n, float t, float sigma, float sigma_next);

/* Step i of a grid (0 <= i < g->n - 1): t = timesteps[i], sigmas[i], [i+1]. */
void h3_sigma_grid_step(const h3_sigma_grid *g, int i, float *x, const float *v, size_t n);

/* MiniMaxH3Scheduler.scale_noise: out = t*sample + (1 - t)*noise (float32;
 * FL2VA noises its keyframe latents to t = H3_CONDITION_TIMESTEP). out may
 * alias sample or noise. */
void h3_scale_noise(float *out, const float *sample, const float *noise, size_t n, float t);

/* The per-forward timestep plan (diffusers build_row_timesteps): the distinct
 * row timesteps, sorted ascending (the transformer's `timestep` tensor), and
 * for each row class its index into them (`timestep_indices` of that row).
 *   text rows        t_video
 *   video rows       t_video
 *   audio rows       t_audio
 *   condition rows   max(t_video, 0.999)   (FL2VA keyframes; index -1 if none)
 * T2VA's first step has one value {0}; later steps {t_video, t_audio}; FL2VA
 * adds 0.999. (Ref2VA reference-audio rows at 1.0 are not covered.) */
typedef struct h3_step_timesteps {
    int count;
    float values[4];
    int index_text, index_video, index_audio, index_cond;
} h3_step_timesteps;

void h3_step_timesteps_make(float t_video, float t_audio, int has_cond, h3_step_timesteps *out);

#ifdef __cplusplus
}
#endif
#endif
