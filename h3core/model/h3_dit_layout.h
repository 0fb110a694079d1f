/* h3_dit_layout.h - the packed sequence the H3 transformer runs over.
 *
 * One request (T2VA or FL2VA) is one 1-D sequence of rows
 *
 *     [ text (L) | keyframe cond rows (K·Hp·Wp) | audio (2·Na) | target video (T·Hp·Wp) ]
 *
 * and a Ref2VA request (references, no keyframes) is
 *
 *     [ text (L) | reference blocks, in request order | target audio (2·Na) | target video ]
 *
 * where an image block is its latent frame's rows, an audio block its
 * 2·Na_ref rows (channel-major) and a video block its soundtrack's rows (if
 * any) right before its frames' rows, each visual reference on its own
 * latent grid (docs/ARCHITECTURE.md, "Ref2VA").
 *
 * with, per row, a modality tag (0 video, 1 text, 2 audio), a 3-axis RoPE
 * position (t, h, w) and the indices that place each modality's rows. The
 * positions are built in float64 exactly like the reference pipeline
 * (numpy linspace for the spatial axes, a sequential float64 cumsum of the
 * (5/3)·(1,4,4,4,4) spans for video time, numpy's pairwise sum for the "last"
 * keyframe anchor) because they are cast to float32 and fed to cos/sin at
 * angles of hundreds of radians: the last ulp of the float64 value can
 * decide the float32 one (docs/spec/h3-transformer.md §3.3).
 *
 * Everything here is host-side and allocation happens once per request.
 *
 *   h3_dit_layout_params p = {.text_token_tags = tags, .num_text = L,
 *       .num_latent_frames = T, .latent_height = 48, .latent_width = 84,
 *       .num_audio_latents = 207, .patch_h = 2, .patch_w = 2};
 *   h3_dit_layout *l;
 *   if (h3_dit_layout_build(&p, &l, &st) != H3_OK) ...;
 *   ... l->position_ids, l->token_tags, l->video_indices ...
 *   h3_dit_layout_free(l);
 */
#ifndef H3_DIT_LAYOUT_H
#define H3_DIT_LAYOUT_H

#include <stdint.h>

#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Modality tags: the checkpoint's contract (they select AdaLN table rows). */
#define H3_TAG_VIDEO 0
#define H3_TAG_TEXT 1
#define H3_TAG_AUDIO 2

#define H3_DIT_AUDIO_CHANNELS 2 /* stereo: channel-major row blocks */
#define H3_DIT_MAX_KEYFRAMES 4
#define H3_DIT_MAX_TIMESTEPS 4   /* distinct timesteps in one forward */
#define H3_DIT_CONDITION_TIMESTEP 0.999f /* keyframe rows are pinned here (docs/spec/h3-transformer.md §4.3) */

#define H3_DIT_MAX_REFERENCES 12         /* Ref2VA: at most 9 images, 3 videos, 3 audio, 12 in all */
#define H3_DIT_REFERENCE_AUDIO_TIMESTEP 1.0f /* Ref2VA reference audio rows are clean */

typedef enum h3_keyframe_anchor { H3_ANCHOR_FIRST = 0, H3_ANCHOR_LAST = 1 } h3_keyframe_anchor;

typedef enum h3_dit_reference_kind {
    H3_DIT_REFERENCE_IMAGE = 0,
    H3_DIT_REFERENCE_VIDEO = 1,
    H3_DIT_REFERENCE_AUDIO = 2
} h3_dit_reference_kind;

/* One Ref2VA reference as its latents shape it. */
typedef struct h3_dit_reference {
    h3_dit_reference_kind kind;
    int num_latent_frames; /* image 1; video its latent frames; audio 0 */
    int latent_height;     /* a visual reference's own latent grid (its condition latents' H, W) */
    int latent_width;
    int num_audio_latents; /* audio: its latents per channel; video: its soundtrack's (0: silent) */
} h3_dit_reference;

typedef struct h3_dit_layout_params {
    /* Tag of every text row: 1 for text tokens, 0 for the Qwen vision tokens
     * of a keyframe presentation. All rows go through the text refiner. */
    const int32_t *text_token_tags;
    int num_text;            /* L */
    int num_latent_frames;   /* T = 5n + 2 */
    int latent_height;       /* H_lat = height / 16 */
    int latent_width;        /* W_lat = width / 16 */
    int num_audio_latents;   /* Na per stereo channel */
    int patch_t, patch_h, patch_w; /* (1, 2, 2); 0 means the default */
    int num_keyframes;       /* 0 = T2VA */
    h3_keyframe_anchor anchors[H3_DIT_MAX_KEYFRAMES]; /* packed order */
    int num_references;      /* Ref2VA (0: none; excludes keyframes) */
    h3_dit_reference references[H3_DIT_MAX_REFERENCES]; /* request order */
} h3_dit_layout_params;

typedef struct h3_dit_layout {
    h3_dit_layout_params params; /* a copy; text_token_tags points into this struct's own array */
    int64_t seq_len;             /* S */
    int64_t num_text;            /* L */
    int64_t rows_per_frame;      /* Hp·Wp */
    int64_t num_condition_rows;  /* K·Hp·Wp (Ref2VA: the references' video rows), the first rows of video_indices */
    int64_t num_condition_audio_rows; /* Ref2VA: the references' audio rows, the first rows of audio_indices */
    int64_t num_audio_rows;      /* reference audio rows + 2·Na */
    int64_t num_video_rows;      /* condition + target video rows */
    int64_t condition_start, audio_start, video_start; /* row offsets of the blocks (target audio, target video) */
    double *position_ids;        /* [S, 3] (t, h, w), float64 */
    int32_t *token_tags;         /* [S] */
    int32_t *video_indices;      /* [num_video_rows]: condition rows first, then target rows */
    int32_t *audio_indices;      /* [num_audio_rows]: channel 0 latents, then channel 1 */
    int32_t *text_indices;       /* [L] */
    double *height_grid;         /* [Hp] spatial RoPE axes of one latent frame */
    double *width_grid;          /* [Wp] */
} h3_dit_layout;

h3_status_code h3_dit_layout_build(const h3_dit_layout_params *params, h3_dit_layout **out, h3_status *status);
void h3_dit_layout_free(h3_dit_layout *layout);

/* Rotary time spanned by n latent frames, summed the way numpy.sum does
 * (pairwise), as the reference does for the "last" keyframe anchor. */
double h3_dit_temporal_span_pairwise(int num_latent_frames);

/* Per-row timesteps of one denoising step (docs/spec/h3-transformer.md §4.3): text and target
 * video rows at t_video, audio rows at t_audio, keyframe rows and Ref2VA
 * reference video rows at max(t_video, 0.999), Ref2VA reference audio rows
 * at 1.0. Returns the distinct values sorted ascending
 * (timesteps[], *n_timesteps <= H3_DIT_MAX_TIMESTEPS) and each row's index
 * into them (row_index[S]), i.e. torch.unique(..., return_inverse=True). */
h3_status_code h3_dit_layout_timesteps(const h3_dit_layout *layout, float t_video, float t_audio,
                                       float timesteps[H3_DIT_MAX_TIMESTEPS], int *n_timesteps,
                                       int32_t *row_index, h3_status *status);

/* Video latents z[C, T, H, W] (one batch item, row-major) <-> rows
 * [T·(H/ph)·(W/pw), C·ph·pw], frame-major then row-major; feature
 * f = c·ph·pw + py·pw + px holds z[c, t, ph·i + py, pw·j + px]. */
h3_status_code h3_dit_patchify_video(const float *latents, int channels, int frames, int height, int width,
                                     int patch_h, int patch_w, float *rows, h3_status *status);
h3_status_code h3_dit_unpatchify_video(const float *rows, int channels, int frames, int height, int width,
                                       int patch_h, int patch_w, float *latents, h3_status *status);

/* Audio latents a[2, C, Na] <-> channel-major rows [2·Na, C]: row ch·Na + n,
 * feature c holds a[ch, c, n]. */
void h3_dit_pack_audio(const float *latents, int channels, int num_latents, float *rows);
void h3_dit_unpack_audio(const float *rows, int channels, int num_latents, float *latents);

#ifdef __cplusplus
}
#endif
#endif
