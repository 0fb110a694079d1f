/* h3_audio_vae_impl.h - what the audio VAE's decoder (h3_audio_vae.c) and
 * encoder (h3_audio_vae_encoder.c) share; private to model/. */
#ifndef H3_AUDIO_VAE_IMPL_H
#define H3_AUDIO_VAE_IMPL_H

#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"

/* Weight norm folded on the host: out = g · v / ‖v‖ per slice of dim 0 (the
 * norm in double, the product in float32 as torch's _weight_norm), a
 * float32 weight of v's shape. A dummy pair is drawn at the folded law; on a
 * measuring backend only the place is taken. */
h3_status_code h3_audio_vae_fold_weight_norm(h3_backend *b, const h3_st_tensor *v, const h3_st_tensor *g,
                                            h3_tensor *out, h3_status *status);

#endif
