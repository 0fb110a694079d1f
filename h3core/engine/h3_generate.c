/* h3_generate.c - one request through the engine: prepared once into a job
 * (its validation, its keyframes fitted and presented, its tokens), then
 * run: text states -> denoising loop -> decoded media on every rank. The
 * measuring twin (h3_memory_plan.c) runs the same job with nothing
 * computed; this file calls neither the twin nor the memory plan.
 *
 * Data flow of one request (see docs/ARCHITECTURE.md):
 *   prompt --tokenizer--> ids --text encoder (tap layer)--> text states
 *   seed --torch randn--> video noise [24,T,h,w] (patchified to rows), audio rows [2Na,32]
 *   for each step: DiT(rows, text, timesteps) -> velocities -> Euler step (fp32, host)
 *   audio rows -> audio VAE -> stereo samples (emitted first: it is cheap and lets
 *   a consumer interleave audio with the video frames that follow)
 *   video rows -> unpatchify -> video VAE window by window -> RGB frames */
#include "engine/h3_engine_impl.h"

#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_random.h"
#include "engine/h3_engine.h"
#include "model/h3_dit_layout.h"
#include "model/h3_video_vae_encoder.h"

#define H3_AUDIO_LATENTS_PER_SECOND 40
#define H3_DEFAULT_STEPS 49

/* ---- validation -------------------------------------------------------------- */

static h3_status_code validate_settings(const h3_engine *e, const h3_request *r, h3_plan *p, h3_status *status) {
    h3_status_code rc = h3_request_check(r, status);
    if (rc != H3_OK) return rc;
    int forwards = H3_DEFAULT_STEPS;
    rc = h3_fasth3_check_request(e, r, &forwards, status); /* attention mode, adapter, ladder, steps */
    if (rc != H3_OK) return rc;
    memset(p, 0, sizeof *p);
    p->width = r->width;
    p->height = r->height;
    p->num_frames = h3_align_frames(r->num_frames);
    p->fps = H3_FPS;
    p->latent_frames = (p->num_frames - 5) / 17 * 5 + 2;
    p->latent_height = r->height / 16;
    p->latent_width = r->width / 16;
    p->audio_latents = (int)lround((double)p->num_frames * H3_AUDIO_LATENTS_PER_SECOND / H3_FPS);
    p->audio_channels = 2;
    p->sample_rate = h3_audio_vae_sample_rate(e->audio_vae);
    p->audio_samples = (int64_t)p->audio_latents * h3_audio_vae_hop(e->audio_vae);
    p->steps = r->steps ? r->steps : forwards;
    return H3_OK;
}

/* ---- keyframes (FL2VA) ----------------------------------------------------------- */

static void keyframes_clear(h3_job_keyframes *k) {
    for (int i = 0; i < k->n; i++) h3_rgb_image_clear(&k->fitted[i]);
    h3_text_presentation_clear(&k->text);
    memset(k, 0, sizeof *k);
}

/* h3_engine_keyframe_preparations (engine/h3_engine.h): the keyframes
 * fitted and presented, counted once per request that has any. */
static gint keyframe_preparations;

int h3_engine_keyframe_preparations(void) { return g_atomic_int_get(&keyframe_preparations); }

static h3_status_code keyframes_prepare(const h3_engine *e, const h3_request *r, h3_job_keyframes *k,
                                        h3_status *status) {
    memset(k, 0, sizeof *k);
    const h3_image *in[2] = {r->first_image, r->last_image};
    if (!in[0] && !in[1]) return H3_OK;
    g_atomic_int_inc(&keyframe_preparations);
    if (!e->has_processor)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "keyframes need the Qwen3-VL image processor's config (processor/preprocessor_config.json), "
                       "and model '%s' has none",
                       e->model_dir);
    if (!h3_video_vae_has_encoder(e->video_vae))
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "keyframes need the video VAE's encoder, and the checkpoint in '%s' has no encoder weights",
                       e->vae_dir);
    h3_status_code rc = H3_OK;
    for (int i = 0; i < 2 && rc == H3_OK; i++) {
        if (!in[i]) continue;
        h3_rgb_image src = {in[i]->width, in[i]->height, in[i]->stride, (uint8_t *)in[i]->rgb};
        /* the first keyframe of the request is stretched, a follower covers the canvas */
        rc = h3_image_fit_keyframe(&src, r->width, r->height, k->n > 0, &k->fitted[k->n], status);
        if (rc != H3_OK) {
            h3_status_prefix(status, "%s image", i ? "last" : "first");
            break;
        }
        k->anchors[k->n++] = i ? H3_ANCHOR_LAST : H3_ANCHOR_FIRST;
    }
    if (rc == H3_OK)
        rc = h3_text_presentation_build(e->text_encoder, e->tokenizer, &e->processor, r->prompt, k->fitted, k->n,
                                        &k->text, status);
    if (rc != H3_OK) keyframes_clear(k);
    return rc;
}

/* ---- references (Ref2VA) ---------------------------------------------------------- */

static void references_clear(h3_job_references *rf) {
    for (int i = 0; i < rf->n_images; i++) h3_rgb_image_clear(&rf->images[i]);
    for (int j = 0; j < rf->n_audio; j++) free(rf->audio[j]);
    h3_text_presentation_clear(&rf->text);
    memset(rf, 0, sizeof *rf);
}

static h3_status_code reference_needs(const h3_engine *e, h3_status *status) {
    if (e->has_adapter)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "references run on the Ref2VA transformer, and a FastH3 adapter is fused into the T2VA one "
                       "only; open the engine without the adapter");
    if (!e->has_processor)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "references need the Qwen3-VL image processor's config (processor/preprocessor_config.json), "
                       "and model '%s' has none",
                       e->model_dir);
    if (!h3_video_vae_has_encoder(e->video_vae))
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "references need the video VAE's encoder, and the checkpoint in '%s' has no encoder weights",
                       e->vae_dir);
    if (!g_file_test(e->transformer_ref_dir, G_FILE_TEST_IS_DIR))
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "references need the Ref2VA transformer partition '%s', and model '%s' has none",
                       e->transformer_ref_dir, e->model_dir);
    return H3_OK;
}

/* An image reference resized to the model's reference_image_short_edge. */
static h3_status_code image_prepare(const h3_engine *e, const h3_image *im, int i, h3_job_references *rf,
                                    h3_status *status) {
    h3_rgb_image src = {im->width, im->height, im->stride, (uint8_t *)im->rgb};
    h3_rgb_image *dst = &rf->images[rf->n_images];
    h3_status_code rc = h3_image_fit_reference(&src, e->reference_image_short_edge, dst, status);
    if (rc != H3_OK) return h3_status_prefix(status, "reference %d (image)", i + 1);
    rf->n_images++;
    rf->shape[i] = (h3_dit_reference){.kind = H3_DIT_REFERENCE_IMAGE, .num_latent_frames = 1,
                                      .latent_height = dst->height / 16, .latent_width = dst->width / 16};
    return H3_OK;
}

/* An audio reference: at the VAE's rate, no longer than the clip, copied
 * planar; its latents are ceil(samples / hop) per channel. */
static h3_status_code audio_prepare(const h3_engine *e, const h3_plan *p, const h3_reference *ref, int i,
                                    h3_job_references *rf, h3_status *status) {
    if (ref->sample_rate != p->sample_rate)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "reference %d (audio): %d Hz; the model's audio runs at %d Hz: resample it first", i + 1,
                       ref->sample_rate, p->sample_rate);
    if (ref->num_samples > p->audio_samples)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "reference %d (audio): %lld samples, longer than the clip's %lld; trimming is not yet "
                       "supported, trim it to the clip",
                       i + 1, (long long)ref->num_samples, (long long)p->audio_samples);
    int64_t n = ref->num_samples, hop = h3_audio_vae_hop(e->audio_vae);
    float *planar = malloc((size_t)(2 * n) * sizeof *planar);
    if (!planar) return h3_fail(status, H3_ERR_NO_MEMORY, "reference %d (audio): no host memory", i + 1);
    for (int64_t k = 0; k < n; k++) {
        planar[k] = ref->samples[2 * k];
        planar[n + k] = ref->samples[2 * k + 1];
    }
    rf->audio[rf->n_audio] = planar;
    rf->audio_samples[rf->n_audio++] = n;
    rf->shape[i] = (h3_dit_reference){.kind = H3_DIT_REFERENCE_AUDIO, .num_audio_latents = (int)((n + hop - 1) / hop)};
    return H3_OK;
}

/* Each reference prepared in request order, then the presentation: per
 * image "<Picture i>: " + its vision block, per audio clip "<Audio j>: ",
 * then the prompt. */
static h3_status_code references_prepare(const h3_engine *e, const h3_request *r, const h3_plan *p,
                                         h3_job_references *rf, h3_status *status) {
    memset(rf, 0, sizeof *rf);
    if (r->num_references == 0) return H3_OK;
    h3_status_code rc = reference_needs(e, status);
    h3_text_reference_kind kinds[H3_MAX_REFERENCES];
    for (int i = 0; i < r->num_references && rc == H3_OK; i++) {
        const h3_reference *ref = &r->references[i]; /* images and audio: h3_request_check refused the rest */
        kinds[i] = ref->kind == H3_REFERENCE_AUDIO ? H3_TEXT_REFERENCE_AUDIO : H3_TEXT_REFERENCE_IMAGE;
        rc = ref->kind == H3_REFERENCE_AUDIO ? audio_prepare(e, p, ref, i, rf, status)
                                             : image_prepare(e, &ref->image, i, rf, status);
        if (rc == H3_OK) rf->n = i + 1;
    }
    if (rc == H3_OK)
        rc = h3_text_presentation_build_references(e->text_encoder, e->tokenizer, &e->processor, r->prompt, kinds,
                                                   rf->n, rf->images, &rf->text, status);
    if (rc != H3_OK) references_clear(rf);
    return rc;
}

/* The prompt's rows: the presentation's with keyframes, else its tokens
 * (tokenized here, once); refused past the text encoder's positions, in
 * tokens, before any costly stage (and as a setting: the prompt is at
 * fault). */
static h3_status_code job_text(const h3_engine *e, h3_job *j, h3_status *status) {
    size_t n = (size_t)(j->refs.n ? j->refs.text.n : j->kf.text.n);
    if (!j->kf.n && !j->refs.n) {
        h3_status_code rc = h3_tokenizer_encode(e->tokenizer, j->prompt, &j->ids, &j->n_ids, status);
        if (rc != H3_OK) return rc;
        n = j->n_ids;
    }
    int64_t limit = e->text_positions;
    if ((int64_t)n > limit)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "prompt: %zu tokens, more than the %lld this model's text encoder takes "
                       "(max_position_embeddings); shorten the prompt",
                       n, (long long)limit);
    h3_plan *p = &j->plan;
    p->text_tokens = (int)n;
    const h3_dit_config *c = h3_dit_get_config(e->dit);
    int64_t rows_per_frame = (int64_t)(p->latent_height / c->patch_h) * (p->latent_width / c->patch_w);
    p->sequence_length = (int64_t)n + 2 * p->audio_latents + ((int64_t)j->kf.n + p->latent_frames) * rows_per_frame;
    for (int i = 0; i < j->refs.n; i++) {
        const h3_dit_reference *ref = &j->refs.shape[i];
        p->sequence_length += ref->kind == H3_DIT_REFERENCE_AUDIO
                                  ? 2 * (int64_t)ref->num_audio_latents
                                  : (int64_t)(ref->latent_height / c->patch_h) * (ref->latent_width / c->patch_w);
    }
    return H3_OK;
}

void h3_job_free(h3_job *j) {
    if (!j) return;
    keyframes_clear(&j->kf);
    references_clear(&j->refs);
    free(j->ids);
    g_free(j->prompt);
    free(j);
}

h3_status_code h3_job_make(const h3_engine *e, const h3_request *r, h3_job **out, h3_status *status) {
    *out = NULL;
    if (!r) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "no request");
    h3_job *j = calloc(1, sizeof *j);
    if (!j) return h3_fail(status, H3_ERR_NO_MEMORY, "out of memory");
    j->engine = e;
    h3_status_code rc = validate_settings(e, r, &j->plan, status);
    if (rc == H3_OK) {
        j->prompt = g_strdup(r->prompt);
        j->request = *r;
        j->request.prompt = j->prompt;
        /* the job holds the images fitted onto the canvas (kf), not the caller's */
        j->request.first_image = j->request.last_image = NULL;
        j->request.references = NULL; /* likewise the references, normalized (refs) */
        j->request.num_references = 0;
        rc = keyframes_prepare(e, r, &j->kf, status);
    }
    if (rc == H3_OK) rc = references_prepare(e, r, &j->plan, &j->refs, status);
    if (rc == H3_OK) rc = job_text(e, j, status);
    if (rc != H3_OK) {
        h3_job_free(j);
        return rc;
    }
    j->text_release = e->force_text_release;
    *out = j;
    return H3_OK;
}

const h3_plan *h3_job_plan(const h3_job *job) { return job ? &job->plan : NULL; }

/* ---- generation ---------------------------------------------------------------- */

/* One rank's generation. Every rank runs the whole request on its own
 * components (tokens, noise and Euler steps are deterministic host work, so
 * every rank holds the same latents); rank 0 alone has the callbacks and
 * decodes the audio. */
typedef struct generation {
    h3_engine *e;
    h3_engine_rank *r;
    h3_tp tp;                 /* this rank in the group (H3_TP_SINGLE with one rank) */
    const h3_callbacks *cb;   /* NULL on ranks other than 0 */
    h3_plan plan;
    const int32_t *ids;       /* the prompt's tokens (the job's; T2VA) */
    size_t n_ids;
    h3_dit_layout *layout;
    int dit_begun;
    float *video_rows, *audio_rows, *video_velocity, *audio_velocity;
    int32_t *row_timestep_index;
    h3_sigma_grid video_grid, audio_grid;
    size_t arena_mark;
    int fault_fired;          /* the test hook's fault was armed on this rank (h3_engine_inject_fault) */
    const h3_job *job;
    const h3_request *request; /* the job's checked copy */
    const h3_job_keyframes *kf; /* the job's keyframes (kf->n == 0: T2VA) */
    const h3_job_references *refs; /* the job's references (refs->n == 0: none) */
    const h3_text_presentation *presentation; /* keyframes' or references'; NULL: T2VA */
    h3_dit *dit;              /* the transformer this request runs on: transformer/ or transformer_ref/ */
    int text_release;         /* free the text encoder's weights after encoding */
    const int32_t *text_tags; /* the text rows' tags; NULL: every row a text token */
    float *condition;         /* [n, C, 1, h, w]: the keyframes' condition latents */
    int64_t condition_values; /* offset of the target rows in video_rows (the keyframes' rows first) */
    float *audio_condition;   /* Ref2VA: the audio references' normalized rows, in request order */
    int64_t audio_condition_values; /* their values: the offset of the target rows in audio_rows */
    double times[5];          /* start, text, denoise, audio, video done */
} generation;

static void progress(generation *g, h3_phase phase, int done, int total) {
    if (g->cb && g->cb->progress) g->cb->progress(g->cb->opaque, phase, done, total);
}

/* True when the engine or the caller asked to stop; a caller's flag is
 * copied into the engine's so the VAEs, which poll the engine flag between
 * tiles and blocks, see it too. */
static int cancel_requested(generation *g) {
    if (g->cb && g->cb->cancel_flag && *g->cb->cancel_flag) g_atomic_int_set(&g->e->cancel, 1);
    return g_atomic_int_get(&g->e->cancel);
}

static h3_status_code check_cancel(generation *g, h3_status *status) {
    if (cancel_requested(g)) return h3_fail(status, H3_ERR_CANCELLED, "generation cancelled");
    return H3_OK;
}

/* ---- non-finite values -----------------------------------------------------------
 * Every stage's output is counted before the next stage takes it, so a NaN
 * or Inf (a damaged weight the load check could not see, an overflow) ends
 * the request as H3_ERR_NONFINITE naming the stage, never as black frames
 * or silent samples. Device tensors are counted where they live
 * (h3_tensor_count_nonfinite); the latents and samples are on the host.
 * The host loops stay out of line (noinline): a function inlined into
 * generate_rank would be instrumented as part of it in the fuzz build, and
 * tests/fuzz/coverage-ignore.txt can then not leave its element loop out. */

__attribute__((noinline)) static int64_t count_nonfinite_host(const float *x, size_t n) {
    int64_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    return bad;
}

static h3_status_code check_text_states(h3_backend *b, const h3_tensor *t, int layer, h3_status *status) {
    int64_t bad = 0;
    h3_status_code rc = h3_tensor_count_nonfinite(b, t, &bad, status);
    if (rc == H3_OK && bad > 0)
        rc = h3_fail(status, H3_ERR_NONFINITE,
                     "text encoder: its output (hidden_states[%d]) holds %lld NaN or Inf values of %lld; the "
                     "text encoder's weights are damaged or overflow",
                     layer, (long long)bad, (long long)h3_tensor_numel(t));
    return rc;
}

static h3_status_code check_latents(const generation *g, int step, size_t nv, size_t na, h3_status *status) {
    int64_t bv = count_nonfinite_host(g->video_rows, nv), ba = count_nonfinite_host(g->audio_rows, na);
    if (bv == 0 && ba == 0) return H3_OK;
    return h3_fail(status, H3_ERR_NONFINITE,
                   "denoising step %d/%d: the latents hold NaN or Inf values (%lld of %zu video, %lld of %zu "
                   "audio); the transformer's weights (or the adapter's) are damaged or overflow",
                   step + 1, g->plan.steps, (long long)bv, nv, (long long)ba, na);
}

/* The contract of audio_samples: finite and within [-1, 1], whatever the
 * backend's clamp did. */
__attribute__((noinline)) static size_t count_outside_unit(const float *x, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !(x[i] >= -1.0f && x[i] <= 1.0f);
    return bad;
}

static h3_status_code check_samples(const float *x, size_t n, h3_status *status) {
    size_t bad = count_outside_unit(x, n);
    if (bad == 0) return H3_OK;
    return h3_fail(status, H3_ERR_NONFINITE, "audio decode: %zu of %zu samples are NaN, Inf or outside [-1, 1]", bad,
                   n);
}

static h3_status_code encode_text(generation *g, const h3_job *job, h3_tensor *text_states, h3_status *status) {
    h3_engine *e = g->e;
    h3_backend *b = g->r->backend;
    progress(g, H3_PHASE_TEXT, 0, 1);
    h3_status_code rc = H3_OK;
    if (g->presentation) { /* FL2VA / Ref2VA: the presentation with its vision blocks */
        g->n_ids = (size_t)g->presentation->n;
        g->text_tags = g->presentation->tags;
    } else { /* tokenized when the job was made */
        g->ids = job->ids;
        g->n_ids = job->n_ids;
    }
    if (g->n_ids == 0) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "prompt produced no tokens");
    *text_states = h3_new_2d(b, h3_backend_compute_dtype(b), (int64_t)g->n_ids, e->text_hidden);
    rc = h3_backend_check(b, status);
    if (rc == H3_OK && g->r->text_encoder)
        rc = g->presentation ? h3_text_encoder_encode(g->r->text_encoder, g->presentation, text_states, status)
                      : h3_text_encoder_forward(g->r->text_encoder, g->ids, (int)g->n_ids, text_states, status);
    if (rc == H3_OK && e->plan.text_size < g->tp.size) {
        /* The conditioner ran on rank 0 alone (its heads do not split). */
        h3_tp_broadcast(&g->tp, b, text_states, 0);
        rc = h3_backend_check(b, status);
    }
    if (rc == H3_OK) rc = check_text_states(b, text_states, e->text_layer, status);
    if (rc == H3_OK) progress(g, H3_PHASE_TEXT, 1, 1);
    return rc;
}

/* The text encoder's weights for this request: still resident, or loaded
 * again after the previous request freed them. A request that frees them
 * afterwards first gives back the arena and scratch the last one grew, so
 * the weights load beside the other weights alone, as at open. */
static h3_status_code text_encoder_ready(generation *g, h3_status *status) {
    h3_engine *e = g->e;
    if (g->text_release) {
        h3_backend_trim(g->r->backend);
        h3_backend_memory_mark(g->r->backend); /* this generation's peak starts from what is left */
    }
    if (h3_text_encoder_has_weights(g->r->text_encoder) || h3_tp_text(&e->plan, &g->tp).size == 0) return H3_OK;
    double t0 = h3_engine_now();
    h3_status_code rc = h3_engine_text_encoder_load(e, &g->tp, status);
    if (rc != H3_OK) return h3_status_prefix(status, "loading the text encoder again");
    if (g->tp.rank == 0)
        h3_engine_log(e, H3_LOG_INFO, "text encoder loaded again in %.2f s (the previous request freed it)",
                      h3_engine_now() - t0);
    return H3_OK;
}

/* After the text stage of a request that does not fit with the text
 * encoder resident (the job's memory plan, h3_memory_check_request): its
 * weights make room for the denoising. Every rank of its group frees its
 * own share. */
static void text_encoder_done(generation *g) {
    if (!g->text_release || !h3_text_encoder_has_weights(g->r->text_encoder)) return;
    h3_engine_text_encoder_free(g->e, &g->tp);
}

/* The condition images of the request, in packed order: FL2VA's keyframes
 * on the canvas, or Ref2VA's image references each on its own latent grid
 * (C·h·w latents, one latent frame). */
static int condition_count(const generation *g) { return g->kf->n ? g->kf->n : g->refs->n_images; }

static const h3_rgb_image *condition_image(const generation *g, int i) {
    return g->kf->n ? &g->kf->fitted[i] : &g->refs->images[i];
}

static size_t condition_values(const generation *g, int i) {
    const h3_rgb_image *im = condition_image(g, i);
    return (size_t)h3_dit_get_config(g->e->dit)->in_channels * (im->height / 16) * (im->width / 16);
}

/* Each condition image through the video VAE's encoder into its latents
 * [C, 1, h, w] (the posterior drawn from its own generator seeded 42, as
 * the pipeline does). Every rank encodes (the VAE splits its tiles over the
 * ranks), so every rank holds them. */
static h3_status_code encode_keyframes(generation *g, h3_status *status) {
    int n = condition_count(g);
    if (!n) return H3_OK;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += condition_values(g, i);
    g->condition = malloc(total * sizeof(float));
    if (!g->condition) return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for the condition latents");
    h3_status_code rc = H3_OK;
    size_t at = 0;
    for (int i = 0; i < n && rc == H3_OK; i++) {
        const h3_rgb_image *im = condition_image(g, i);
        rc = h3_video_vae_encode_keyframe(g->r->video_vae, im->data, im->width, im->height, im->stride, NULL,
                                          g->condition + at, status);
        at += condition_values(g, i);
        if (rc != H3_OK && g->kf->n)
            h3_status_prefix(status, "encoding the %s keyframe", g->kf->anchors[i] ? "last" : "first");
        else if (rc != H3_OK)
            h3_status_prefix(status, "encoding image reference %d", i + 1);
    }
    return rc;
}

/* Ref2VA: each audio reference through the audio VAE's encoder (its
 * posterior mean), normalized into its channel-major rows [2·Na_ref, C_a]. */
static h3_status_code encode_audio_references(generation *g, h3_status *status) {
    const h3_job_references *rf = g->refs;
    if (!rf->n_audio) return H3_OK;
    h3_status_code rc = h3_engine_audio_encoder_load(g->e, &g->tp, status);
    if (rc != H3_OK) return rc;
    h3_audio_vae_encoder *enc = g->r->audio_encoder;
    const h3_audio_vae_config *cfg = h3_audio_vae_encoder_config(enc);
    int C = h3_dit_get_config(g->e->dit)->audio_in_channels;
    int64_t total = 0;
    for (int j = 0; j < rf->n_audio; j++) total += 2 * h3_audio_vae_encoded_length(enc, rf->audio_samples[j]) * C;
    g->audio_condition = malloc((size_t)total * sizeof(float));
    if (!g->audio_condition) return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for the audio references");
    g->audio_condition_values = total;
    int64_t at = 0;
    for (int j = 0; j < rf->n_audio && rc == H3_OK; j++) {
        int64_t na = h3_audio_vae_encoded_length(enc, rf->audio_samples[j]);
        float *mean = malloc((size_t)(2 * na * C) * sizeof *mean);
        rc = mean ? h3_audio_vae_encode(enc, rf->audio[j], 2, rf->audio_samples[j], mean, &g->e->cancel, status)
                  : h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for an audio reference's latents");
        if (rc == H3_OK) h3_audio_vae_normalize_rows(cfg, mean, 2, na, g->audio_condition + at);
        else if (rc != H3_ERR_CANCELLED) h3_status_prefix(status, "encoding audio reference %d", j + 1);
        free(mean);
        at += 2 * na * C;
    }
    if (rc == H3_OK && count_nonfinite_host(g->audio_condition, (size_t)total) > 0)
        rc = h3_fail(status, H3_ERR_NONFINITE,
                     "audio references: the audio VAE's encoder gave NaN or Inf latents; its weights are damaged");
    return rc;
}

/* Initial noise exactly as diffusers draws it: one generator seeded with the
 * request seed; first, for each condition image (keyframe or visual
 * reference), its condition noise ε [1, C, 1, h, w], which takes its
 * latents to the pinned t = 0.999 (0.999·z + 0.001·ε, float32); then video
 * [1, C, T, h, w], then audio rows [2·Na, C_a]. The condition rows lead
 * video_rows, as they lead the packed sequence's video rows. */
static h3_status_code draw_noise(generation *g, uint64_t seed, h3_status *status) {
    const h3_dit_config *c = h3_dit_get_config(g->e->dit);
    const h3_plan *p = &g->plan;
    size_t per_frame = (size_t)c->in_channels * p->latent_height * p->latent_width;
    size_t n_cond = 0, n_video = per_frame * p->latent_frames, largest = n_video;
    for (int i = 0; i < condition_count(g); i++) {
        size_t v = condition_values(g, i);
        n_cond += v;
        if (v > largest) largest = v;
    }
    size_t n_audio = (size_t)2 * p->audio_latents * c->audio_in_channels, n_acond = (size_t)g->audio_condition_values;
    float *z = malloc(largest * sizeof(float));
    g->video_rows = malloc((n_cond + n_video) * sizeof(float));
    g->video_velocity = malloc((n_cond + n_video) * sizeof(float));
    g->audio_rows = malloc((n_acond + n_audio) * sizeof(float));
    g->audio_velocity = malloc((n_acond + n_audio) * sizeof(float));
    if (!z || !g->video_rows || !g->video_velocity || !g->audio_rows || !g->audio_velocity) {
        free(z);
        return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for %zu latent values", n_cond + n_video + n_audio);
    }
    g->condition_values = (int64_t)n_cond;
    h3_torch_generator gen;
    h3_torch_generator_seed(&gen, seed);
    h3_status_code rc = H3_OK;
    size_t at = 0;
    for (int i = 0; i < condition_count(g) && rc == H3_OK; i++) {
        const h3_rgb_image *im = condition_image(g, i);
        size_t nv = condition_values(g, i);
        const float *zc = g->condition + at;
        h3_torch_randn_f32(&gen, z, nv);
        for (size_t j = 0; j < nv; j++)
            z[j] = H3_DIT_CONDITION_TIMESTEP * zc[j] + (1.0f - H3_DIT_CONDITION_TIMESTEP) * z[j];
        rc = h3_dit_patchify_video(z, c->in_channels, 1, im->height / 16, im->width / 16, c->patch_h, c->patch_w,
                                   g->video_rows + at, status);
        at += nv;
    }
    if (rc == H3_OK) {
        h3_torch_randn_f32(&gen, z, n_video);
        /* the audio references' rows lead the audio rows, clean; only the target's are drawn */
        if (n_acond) memcpy(g->audio_rows, g->audio_condition, n_acond * sizeof(float));
        h3_torch_randn_f32(&gen, g->audio_rows + n_acond, n_audio);
        rc = h3_dit_patchify_video(z, c->in_channels, p->latent_frames, p->latent_height, p->latent_width,
                                   c->patch_h, c->patch_w, g->video_rows + n_cond, status);
    }
    free(z);
    return rc;
}

static h3_status_code denoise(generation *g, const h3_tensor *text_states, h3_status *status) {
    h3_engine *e = g->e;
    h3_backend *b = g->r->backend;
    h3_dit *dit = g->dit;
    const h3_dit_config *c = h3_dit_get_config(dit);
    const h3_plan *p = &g->plan;
    int steps = p->steps;
    h3_status_code rc = h3_fasth3_sigma_grids(e, g->request, steps, &g->video_grid, &g->audio_grid, status); /* FastH3 ladders */
    if (rc == H3_OK && (g->video_grid.n != steps + 1 || g->audio_grid.n != steps + 1))
        rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "steps %d: the sigma grid collapsed to %d points", steps,
                     g->video_grid.n);
    if (rc != H3_OK) return rc;
    h3_dit_layout_params lp;
    memset(&lp, 0, sizeof lp);
    /* T2VA: every text row is a text token (tag 1); FL2VA's Qwen vision
     * tokens carry the video tag (the presentation's tags). */
    int32_t *tags = malloc(g->n_ids * sizeof(int32_t));
    if (!tags) return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory");
    for (size_t i = 0; i < g->n_ids; i++) tags[i] = g->text_tags ? g->text_tags[i] : 1;
    lp.text_token_tags = tags;
    lp.num_keyframes = g->kf->n;
    for (int i = 0; i < g->kf->n; i++) lp.anchors[i] = g->kf->anchors[i];
    lp.num_references = g->refs->n;
    for (int i = 0; i < g->refs->n; i++) lp.references[i] = g->refs->shape[i];
    lp.num_text = (int)g->n_ids;
    lp.num_latent_frames = p->latent_frames;
    lp.latent_height = p->latent_height;
    lp.latent_width = p->latent_width;
    lp.num_audio_latents = p->audio_latents;
    lp.patch_t = c->patch_t;
    lp.patch_h = c->patch_h;
    lp.patch_w = c->patch_w;
    rc = h3_dit_layout_build(&lp, &g->layout, status);
    free(tags);
    if (rc != H3_OK) return rc;
    rc = h3_fasth3_set_attention(dit, g->request, status); /* FastH3: VSA-H3 or dense */
    if (rc == H3_OK) rc = h3_dit_begin(dit, g->layout, text_states, status);
    if (rc != H3_OK) return rc;
    g->dit_begun = 1;

    int64_t nv = g->layout->num_video_rows, na = g->layout->num_audio_rows;
    int fv = c->in_channels * c->patch_h * c->patch_w, fa = c->audio_in_channels;
    h3_tensor xv = h3_new_2d(b, H3_F32, nv, fv), xa = h3_new_2d(b, H3_F32, na, fa);
    h3_tensor vv = h3_new_2d(b, H3_F32, nv, fv), va = h3_new_2d(b, H3_F32, na, fa);
    g->row_timestep_index = malloc((size_t)g->layout->seq_len * sizeof(int32_t));
    if (!g->row_timestep_index) return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory");
    if ((rc = h3_backend_check(b, status)) != H3_OK) return rc;

    progress(g, H3_PHASE_DENOISE, 0, steps);
    double t0 = h3_engine_now();
    for (int i = 0; i < steps; i++) {
        if ((rc = check_cancel(g, status)) != H3_OK) return rc;
        if (g->tp.rank == e->fault_rank && i == e->fault_step) {
            g->fault_fired = 1;
            if (e->fault_ops > 0) h3_backend_inject_fault(b, e->fault_ops); /* lands inside the forward */
            else h3_backend_set_error(b, H3_ERR_DEVICE, "injected fault on rank %d at step %d", g->tp.rank, i);
        }
        float ts[H3_DIT_MAX_TIMESTEPS];
        int n_ts = 0;
        rc = h3_dit_layout_timesteps(g->layout, g->video_grid.timesteps[i], g->audio_grid.timesteps[i], ts, &n_ts,
                                     g->row_timestep_index, status);
        if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &xv, g->video_rows, status);
        if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &xa, g->audio_rows, status);
        if (rc == H3_OK)
            rc = h3_dit_forward(dit, &xv, &xa, ts, n_ts, g->row_timestep_index, &vv, &va, status);
        if (rc == H3_OK) rc = h3_tensor_download_f32(b, &vv, g->video_velocity, status);
        if (rc == H3_OK) rc = h3_tensor_download_f32(b, &va, g->audio_velocity, status);
        if (rc != H3_OK) return h3_status_prefix(status, "denoising step %d/%d", i + 1, steps);
        /* the keyframes' rows stay at t = 0.999; their velocity is discarded */
        int64_t cv = g->condition_values;
        h3_sigma_grid_step(&g->video_grid, i, g->video_rows + cv, g->video_velocity + cv, (size_t)(nv * fv - cv));
        int64_t ca = g->audio_condition_values; /* the audio references' rows stay clean */
        h3_sigma_grid_step(&g->audio_grid, i, g->audio_rows + ca, g->audio_velocity + ca, (size_t)(na * fa - ca));
        if ((rc = check_latents(g, i, (size_t)(nv * fv), (size_t)(na * fa), status)) != H3_OK) return rc;
        progress(g, H3_PHASE_DENOISE, i + 1, steps);
    }
    double dt = h3_engine_now() - t0;
    if (g->tp.rank == 0) {
        g_mutex_lock(&e->lock);
        e->stats.denoise = dt;
        e->stats.steps = steps;
        e->stats.per_step = steps ? dt / steps : 0;
        g_mutex_unlock(&e->lock);
    }
    h3_dit_end(dit);
    g->dit_begun = 0;
    return H3_OK;
}

/* planar [2, n] (left, then right) to interleaved [n, 2]; out of line as
 * the checks above are. */
__attribute__((noinline)) static void interleave_stereo(const float *planar, int64_t n, float *inter) {
    for (int64_t i = 0; i < n; i++) {
        inter[2 * i] = planar[i];
        inter[2 * i + 1] = planar[n + i];
    }
}

/* Audio rows are channel-major [2·Na, 32]; the VAE takes [2, 32, Na]. */
static h3_status_code decode_audio(generation *g, h3_status *status) {
    h3_engine *e = g->e;
    int Na = g->plan.audio_latents, C = h3_dit_get_config(e->dit)->audio_in_channels;
    int64_t n = g->plan.audio_samples;
    float *lat = malloc((size_t)2 * C * Na * sizeof(float));
    float *planar = malloc((size_t)2 * n * sizeof(float));
    float *inter = malloc((size_t)2 * n * sizeof(float));
    h3_status_code rc = H3_OK;
    if (!lat || !planar || !inter) rc = h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for %lld samples", (long long)n);
    if (rc == H3_OK) {
        progress(g, H3_PHASE_DECODE_AUDIO, 0, 1);
        h3_dit_unpack_audio(g->audio_rows + g->audio_condition_values, C, Na, lat);
        rc = h3_audio_vae_decode(g->r->audio_vae, lat, Na, planar, &e->cancel, status);
        if (rc != H3_OK && rc != H3_ERR_CANCELLED) h3_status_prefix(status, "audio decode");
    }
    if (rc == H3_OK) rc = check_samples(planar, (size_t)(2 * n), status);
    if (rc == H3_OK) {
        interleave_stereo(planar, n, inter);
        progress(g, H3_PHASE_DECODE_AUDIO, 1, 1);
        if (g->cb && g->cb->audio_samples && g->cb->audio_samples(g->cb->opaque, 0, n, inter) != 0)
            rc = h3_fail(status, H3_ERR_CANCELLED, "cancelled by the audio consumer");
    }
    free(lat);
    free(planar);
    free(inter);
    return rc;
}

typedef struct video_emit {
    generation *g;
    int windows_done, windows_total; /* done: windows finished, so the failing one is done + 1 */
} video_emit;

static int emit_frames(void *opaque, int first, int count, const uint8_t *rgb) {
    video_emit *v = opaque;
    generation *g = v->g;
    if (g->cb && g->cb->video_frames && g->cb->video_frames(g->cb->opaque, first, count, rgb) != 0) return 1;
    return cancel_requested(g);
}

static void video_window_progress(void *opaque, int done, int total) {
    video_emit *v = opaque;
    v->windows_done = done;
    progress(v->g, H3_PHASE_DECODE_VIDEO, done, total);
}

static h3_status_code decode_video(generation *g, h3_status *status) {
    h3_engine *e = g->e;
    const h3_dit_config *c = h3_dit_get_config(e->dit);
    const h3_plan *p = &g->plan;
    size_t n = (size_t)c->in_channels * p->latent_frames * p->latent_height * p->latent_width;
    float *z = malloc(n * sizeof(float));
    if (!z) return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for the video latents");
    h3_status_code rc = h3_dit_unpatchify_video(g->video_rows + g->condition_values, c->in_channels,
                                                p->latent_frames, p->latent_height, p->latent_width, c->patch_h,
                                                c->patch_w, z, status);
    if (rc != H3_OK) {
        free(z);
        return rc;
    }
    video_emit v = {g, 0, h3_video_vae_num_windows(p->latent_frames)};
    h3_video_vae *vae = g->r->video_vae;
    progress(g, H3_PHASE_DECODE_VIDEO, 0, v.windows_total);
    h3_video_vae_set_progress(vae, video_window_progress, &v);
    rc = h3_video_vae_decode(vae, z, p->latent_frames, p->latent_height, p->latent_width, emit_frames, &v, &e->cancel,
                             status);
    h3_video_vae_set_progress(vae, NULL, NULL);
    free(z);
    /* A NaN window is refused before its frames are emitted (the RGB
     * conversion reports it): say which window. */
    if (rc != H3_OK && rc != H3_ERR_CANCELLED)
        h3_status_prefix(status, "video decode, window %d of %d", v.windows_done + 1, v.windows_total);
    return rc;
}

/* Hands the denoised latents to an optional observer (tools, tests). */
static h3_status_code report_latents(generation *g, h3_status *status) {
    if (!g->cb || !g->cb->latents) return H3_OK;
    const h3_dit_config *c = h3_dit_get_config(g->e->dit);
    const h3_plan *p = &g->plan;
    size_t nv = (size_t)c->in_channels * p->latent_frames * p->latent_height * p->latent_width;
    size_t na = (size_t)2 * c->audio_in_channels * p->audio_latents;
    float *z = malloc(nv * sizeof(float)), *a = malloc(na * sizeof(float));
    h3_status_code rc = (!z || !a) ? h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for the latents") : H3_OK;
    if (rc == H3_OK)
        rc = h3_dit_unpatchify_video(g->video_rows + g->condition_values, c->in_channels, p->latent_frames,
                                     p->latent_height, p->latent_width, c->patch_h, c->patch_w, z, status);
    if (rc == H3_OK) {
        h3_dit_unpack_audio(g->audio_rows + g->audio_condition_values, c->audio_in_channels, p->audio_latents, a);
        g->cb->latents(g->cb->opaque, z, c->in_channels, p->latent_frames, p->latent_height, p->latent_width, a,
                       c->audio_in_channels, p->audio_latents);
    }
    free(z);
    free(a);
    return rc;
}

static void generation_clear(generation *g) {
    if (g->dit_begun) h3_dit_end(g->dit);
    h3_dit_layout_free(g->layout);
    h3_sigma_grid_free(&g->video_grid);
    h3_sigma_grid_free(&g->audio_grid);
    free(g->video_rows);
    free(g->audio_rows);
    free(g->video_velocity);
    free(g->audio_velocity);
    free(g->row_timestep_index);
    free(g->condition);
    free(g->audio_condition);
    h3_arena_reset(g->r->backend, g->arena_mark);
    h3_backend_inject_fault(g->r->backend, 0); /* an injected fault the run never reached stays in it */
    /* A failed op leaves a sticky error in the backend; clear it so the
     * engine can serve the next request. */
    h3_status sticky;
    if (h3_backend_check(g->r->backend, &sticky) != H3_OK) h3_backend_clear_error(g->r->backend);
}

/* The whole job on one rank; with a team, on every rank at once. */
static h3_status_code generate_rank(const h3_tp *tp, void *user, h3_status *status) {
    generation *g = (generation *)user + tp->rank;
    const h3_request *r = g->request;
    const h3_job *job = g->job;
    g->tp = *tp;
    g->arena_mark = h3_arena_mark(g->r->backend);
    g->times[0] = h3_engine_now();
    h3_tensor text_states;
    h3_status_code rc = text_encoder_ready(g, status);
    if (rc == H3_OK) rc = encode_text(g, job, &text_states, status);
    if (rc == H3_OK) text_encoder_done(g);
    g->times[1] = h3_engine_now();
    if (rc == H3_OK) rc = check_cancel(g, status);
    if (rc == H3_OK) rc = encode_keyframes(g, status);
    if (rc == H3_OK) rc = encode_audio_references(g, status);
    if (rc == H3_OK && g->refs->n) rc = h3_engine_transformer_ref_load(g->e, tp, status); /* once, kept */
    g->dit = g->refs->n ? g->r->dit_ref : g->r->dit;
    if (rc == H3_OK) rc = draw_noise(g, r->seed, status);
    if (rc == H3_OK) rc = denoise(g, &text_states, status);
    g->times[2] = h3_engine_now();
    if (rc == H3_OK) rc = report_latents(g, status);
    if (rc == H3_OK) rc = check_cancel(g, status);
    if (rc == H3_OK && tp->rank == 0) rc = decode_audio(g, status); /* the audio VAE lives on rank 0 */
    g->times[3] = h3_engine_now();
    if (rc == H3_OK) rc = check_cancel(g, status);
    if (rc == H3_OK) rc = decode_video(g, status);
    g->times[4] = h3_engine_now();
    generation_clear(g);
    return rc;
}

/* ---- the peak of a generation ------------------------------------------------------------- */

static void peaks_begin(h3_engine *e) {
    for (int r = 0; r < e->n_ranks; r++) h3_backend_memory_mark(e->ranks[r].backend);
}

/* stats.peak_bytes: rank 0's backend tally at its highest during the
 * generation (weights + arena + its own buffers, as asked of the
 * allocator; the CUDA context and the driver's rounding are not in it). */
static void peaks_end(h3_engine *e) {
    h3_backend_memory m;
    h3_backend_memory_get(e->ranks[0].backend, &m);
    g_mutex_lock(&e->lock);
    e->generated = 1;
    e->stats.peak_bytes = m.peak;
    g_mutex_unlock(&e->lock);
}

h3_status_code h3_job_run(h3_engine *e, const h3_job *job, const h3_callbacks *cb, int text_release,
                          h3_status *status) {
    generation *gens = calloc((size_t)e->n_ranks, sizeof *gens);
    if (!gens) return h3_fail(status, H3_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < e->n_ranks; i++) {
        gens[i].e = e;
        gens[i].r = &e->ranks[i];
        gens[i].cb = i == 0 ? cb : NULL;
        gens[i].plan = job->plan;
        gens[i].job = job;
        gens[i].request = &job->request;
        gens[i].kf = &job->kf;
        gens[i].refs = &job->refs;
        gens[i].presentation = job->kf.n ? &job->kf.text : job->refs.n ? &job->refs.text : NULL;
        gens[i].text_release = text_release;
    }
    h3_status_code rc;
    peaks_begin(e);
    if (e->team) {
        rc = h3_tp_team_run(e->team, generate_rank, gens, status);
    } else {
        h3_tp single = H3_TP_SINGLE;
        rc = generate_rank(&single, gens, status);
    }
    peaks_end(e);
    e->text_released_last = text_release;
    /* The test hook is one shot: the request it failed disarms it, so the
     * next one shows that the engine recovered. */
    for (int i = 0; i < e->n_ranks; i++)
        if (gens[i].fault_fired) e->fault_rank = -1;
    const double *t = gens[0].times;
    g_mutex_lock(&e->lock);
    e->stats.text_encoder_released = text_release;
    e->stats.text = t[1] - t[0];
    e->stats.decode_audio = t[3] - t[2];
    e->stats.decode_video = t[4] - t[3];
    e->stats.total = t[4] - t[0];
    g_mutex_unlock(&e->lock);
    if (rc == H3_OK) progress(&gens[0], H3_PHASE_DONE, 1, 1);
    free(gens);
    return rc;
}

h3_status_code h3_engine_run(h3_engine *e, const h3_job *job, const h3_callbacks *cb, h3_status *status) {
    if (!e || !job) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_engine_run: no %s", e ? "job" : "engine");
    if (job->engine != e)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "h3_engine_run: the job was prepared by another engine (h3_engine_prepare)");
    if (!g_atomic_int_compare_and_exchange(&e->busy, 0, 1))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "h3_engine_run: the engine is busy (another generation, or a LoRA change)");
    h3_status_code rc = h3_job_run(e, job, cb, job->text_release, status);
    g_atomic_int_set(&e->busy, 0);
    return rc;
}
