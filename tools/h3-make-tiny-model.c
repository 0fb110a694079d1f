/* h3-make-tiny-model - writes a tiny random MiniMax-H3 in the official
 * diffusers layout.
 *
 *   h3-make-tiny-model --output DIR [--seed N] [--profile golden|default] [--lora FILE]
 *
 * --lora FILE also writes a small LoRA for that model's transformer (PEFT
 * layout, rank 4, on every block's q/k/v and fc1 and on proj_out, factors
 * from the seed), to try `lora` and `--lora` on the tiny model.
 *
 * The output directory holds everything the engine (and diffusers) loads:
 * model_index.json, modular_model_index.json, golden_meta.json,
 * transformer/, transformer_ref/ (the Ref2VA partition: transformer/'s
 * config, its own weights), vae/, audio_vae/, text_encoder/, tokenizer/,
 * processor/, scheduler/, audio_scheduler/.
 *
 * Profiles:
 *   golden   the configs of tests/data/models/tiny-h3, value for value, so the
 *            safetensors have exactly its tensor names, shapes and dtypes;
 *   default  the same model with a 32 kHz audio VAE (hop 800, like the
 *            release), the model gst-h3 embeds and uses when none is given.
 *
 * How it works: the configs are written first, from the profile; then each
 * component's config.json is read back and one function per component walks
 * the architecture it describes (transformer blocks and refiner, the causal
 * CNN encoder, the DAC encoder, the Qwen3 text decoder and vision tower) and
 * emits every tensor with its name, shape and dtype; the two VAE decoders
 * are the lists their loaders read (h3_video_vae_decoder_tensors,
 * h3_audio_vae_decoder_tensors). So the files and their configs cannot
 * disagree, nor the files and the loaders.
 *
 * Values are deterministic in the seed (torch's CPU randn, h3_random.h),
 * one generator per component seeded with seed + 1/3/4/5/21 (transformer, vae,
 * audio_vae, text_encoder, transformer_ref; the pattern of the golden model's seeds), drawn
 * tensor by tensor in module order. Scales keep activations O(1) so the
 * random model gives finite, non-constant output: weights N(0, 1/fan_in),
 * biases 0.02·N, norm weights 1 and biases 0, weight-norm g = ‖v‖ (so w = v
 * at load), SnakeBeta log-alpha/log-beta 0, Snake alpha 1, layer scales 0.5;
 * the audio VAE's residual-branch output convs and conv_post get gain 0.1
 * so the waveform stays inside the [-1, 1] clamp.
 * Buffers are not random: the anti-aliasing filters are the Kaiser-sinc
 * taps computed the way torch computes them (bit-identical to the golden
 * model's), zero_k_bias is zero.
 *
 * The tokenizer (tokenizer/ and processor/) is the golden tiny tokenizer,
 * embedded into this program at build time.
 *
 * Exit status: 0 ok, 1 the model could not be written, 2 bad arguments. */
#include <errno.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utime.h>

#include "base/h3_json.h"
#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"
#include "model/h3_audio_vae.h"
#include "model/h3_dit.h"
#include "model/h3_video_vae.h"

/* Generated from tests/data/models/tiny-h3/tokenizer/ by h3-embed-files. */
int h3_tiny_tokenizer_file(int i, const char **name, const unsigned char **data, size_t *size);

#define PROGRAM "h3-make-tiny-model"
#define DIFFUSERS_VERSION "0.40.0.dev0"
#define TRANSFORMERS_VERSION "5.17.0"
#define DEFAULT_SEED 1234

/* ---- profiles ------------------------------------------------------------ */

/* Only the audio VAE differs between the profiles; everything else is the
 * golden tiny model's configuration, written out in the config functions. */
typedef struct audio_profile {
    int encoder_dim;
    int n_encoder_rates, encoder_rates[8];
    int decoder_dim;
    int n_decoder_rates, decoder_rates[8], decoder_kernel_sizes[8];
    int sampling_rate;
} audio_profile;

typedef struct profile {
    const char *name;
    audio_profile audio;
} profile;

static const profile profiles[] = {
    /* tests/data/models/tiny-h3: hop 40 at 1600 Hz. */
    {"golden", {4, 3, {2, 4, 5}, 32, 3, {5, 4, 2}, {9, 8, 4}, 1600}},
    /* 32 kHz like the release: rates multiply to 800 both ways. Kernels keep
     * the transposed convs exact (k - u even, k >= u: output length L·u);
     * decoder_dim 64 halves four times to 4 channels; the encoder mirrors
     * the release's [2,4,4,5,5], ending at latent_dim = 4·2^5 = 128. */
    {"default", {4, 5, {2, 4, 4, 5, 5}, 64, 4, {5, 5, 4, 8}, {9, 9, 8, 16}, 32000}},
};

static const double video_latents_mean[24] = {
    0.858090341091156,    -0.9606591463088989,  1.0661640167236328,  -0.5090325474739075, -0.2727581858634949,
    -1.3675414323806763,  -0.2553254961967468,  -0.26907554268836975, -0.5376840829849243, -0.0464097298681736,
    0.6657370328903198,   0.19690127670764923,  -0.5460608005523682, -0.4035342037677765, -0.23683024942874908,
    0.25928452610969543,  -0.30133944749832153, 0.211341992020607,   -1.1206848621368408, 0.3581933379173279,
    -0.04225143790245056, 0.2604829967021942,   0.22864092886447906, 0.7056031823158264};
static const double video_latents_std[24] = {
    1.2223774194717407, 1.2767263650894165, 1.6831774711608887, 1.7549455165863037, 1.5636216402053833,
    2.194143533706665,  0.9653137922286987, 1.0569885969161987, 0.841948926448822,  0.7729952931404114,
    1.8955937623977661, 0.946841835975647,  0.7996809482574463, 0.44988900423049927, 0.7197399735450745,
    0.6936293244361877, 2.961095094680786,  2.7694199085235596, 3.0496184825897217, 2.1088054180145264,
    3.276226282119751,  3.1627357006073,    2.2816812992095947, 2.6127843856811523};
static const double audio_latents_mean[32] = {
    -0.020211687488382354, 0.3876466479950502,   -0.04398279799186767, -0.28591514936373,
    0.08179686214561671,   -0.35782641352446604, 0.040623809960919084, -0.01552534501956604,
    -0.223362481667332,    0.1821006842509091,   0.2941778783780663,   -0.07901167601970885,
    -0.056815072777201,    -0.3699028221860095,  -0.31616315591624855, 0.5905951377425391,
    -0.052139568068853864, 0.013673160263486295, -0.03691647864630577, 0.09732660653298163,
    -0.3394662328788498,   -0.30685677538541667, -0.24504598907458763, -0.034698524462007344,
    0.02868032184767538,   -0.21217779266454084, -0.1678263169941987,  0.3221287889040614,
    -0.1223055851554907,   0.4356604928128464,   -0.0502599202236253,  0.3979258376211797};
static const double audio_latents_std[32] = {
    1.6895524230479284, 2.76263727217653,   1.7945344281264435, 1.6801681847309828, 1.6390226546605453,
    2.7788298348882177, 1.7659090095747236, 1.6199757612137327, 2.6336525640336896, 1.8539356672817833,
    2.5056497896915633, 1.811019237886178,  1.9579657790720237, 1.6685498243529284, 1.4922469314453364,
    3.298670198067373,  1.9491804496832168, 1.8720003270431442, 1.8334080103291832, 1.6488070416529093,
    1.6176957696319716, 1.9131449234774398, 1.5695245398428617, 1.6943659940415912, 1.8318420762504692,
    1.5540637421583379, 1.9344930328968526, 1.599198216109855,  1.718045989838149,  1.6307219190837705,
    1.8661226051202384, 1.5613768203168363};

/* Shared by the text encoder config and the processor configs. */
enum { VISION_PATCH = 16, VISION_TEMPORAL_PATCH = 2, VISION_MERGE = 2, IMAGE_MIN_PIXELS = 1024 };
enum { TEXT_ENCODER_LAYER = 50 }; /* hidden_states index H3 taps (the release's 50) */
static const double video_shift = 12.0, audio_shift = 3.0;

/* ---- JSON output ----------------------------------------------------------- */

/* Shortest text that reads back as the same double, in Python's repr style
 * (the style of the diffusers/transformers files): "12.0", "1e-05",
 * "0.858090341091156". */
static void append_double(GString *s, double v) {
    char buf[64];
    if (!isfinite(v)) {
        g_string_append(s, "null"); /* JSON has no inf/nan; configs never hold them */
        return;
    }
    char fmt[16];
    int digits = 1;
    for (;; digits++) { /* 17 significant digits always read back */
        snprintf(fmt, sizeof fmt, "%%.%de", digits - 1);
        g_ascii_formatd(buf, sizeof buf, fmt, v);
        if (digits == 17 || g_ascii_strtod(buf, NULL) == v) break;
    }
    int exponent = atoi(strchr(buf, 'e') + 1);
    if (exponent >= -4 && exponent < 16) {
        snprintf(fmt, sizeof fmt, "%%.%df", digits - 1 - exponent > 0 ? digits - 1 - exponent : 0);
        g_ascii_formatd(buf, sizeof buf, fmt, v);
        if (!strchr(buf, '.')) strcat(buf, ".0");
    } else { /* C writes "1e-05" like Python; only drop a "+" */
        char *plus = strchr(buf, '+');
        if (plus) memmove(plus, plus + 1, strlen(plus));
    }
    g_string_append(s, buf);
}

static void append_string(GString *s, const char *v) {
    g_string_append_c(s, '"');
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\') g_string_append_printf(s, "\\%c", *p);
        else if (*p < 0x20) g_string_append_printf(s, "\\u%04x", *p);
        else g_string_append_c(s, (char)*p);
    }
    g_string_append_c(s, '"');
}

/* Pretty-prints like Python's json.dump(indent=N): members in insertion
 * order, one element per line. */
static void append_node(GString *s, JsonNode *node, int indent, int depth) {
    switch (JSON_NODE_TYPE(node)) {
    case JSON_NODE_NULL: g_string_append(s, "null"); return;
    case JSON_NODE_VALUE: {
        GType t = json_node_get_value_type(node);
        if (t == G_TYPE_INT64) g_string_append_printf(s, "%" G_GINT64_FORMAT, json_node_get_int(node));
        else if (t == G_TYPE_DOUBLE) append_double(s, json_node_get_double(node));
        else if (t == G_TYPE_BOOLEAN) g_string_append(s, json_node_get_boolean(node) ? "true" : "false");
        else append_string(s, json_node_get_string(node));
        return;
    }
    case JSON_NODE_ARRAY: {
        JsonArray *a = json_node_get_array(node);
        guint n = json_array_get_length(a);
        if (!n) {
            g_string_append(s, "[]");
            return;
        }
        g_string_append_c(s, '[');
        for (guint i = 0; i < n; i++) {
            g_string_append_printf(s, "%s\n%*s", i ? "," : "", indent * (depth + 1), "");
            append_node(s, json_array_get_element(a, i), indent, depth + 1);
        }
        g_string_append_printf(s, "\n%*s]", indent * depth, "");
        return;
    }
    case JSON_NODE_OBJECT: {
        JsonObject *o = json_node_get_object(node);
        GList *members = json_object_get_members(o); /* insertion order */
        if (!members) {
            g_string_append(s, "{}");
            return;
        }
        g_string_append_c(s, '{');
        for (GList *l = members; l; l = l->next) {
            g_string_append_printf(s, "%s\n%*s", l == members ? "" : ",", indent * (depth + 1), "");
            append_string(s, l->data);
            g_string_append(s, ": ");
            append_node(s, json_object_get_member(o, l->data), indent, depth + 1);
        }
        g_list_free(members);
        g_string_append_printf(s, "\n%*s}", indent * depth, "");
        return;
    }
    }
}

/* Small JsonBuilder shorthands: a member with a value. */
static void m_int(JsonBuilder *b, const char *k, int64_t v) {
    json_builder_set_member_name(b, k);
    json_builder_add_int_value(b, v);
}
static void m_double(JsonBuilder *b, const char *k, double v) {
    json_builder_set_member_name(b, k);
    json_builder_add_double_value(b, v);
}
static void m_string(JsonBuilder *b, const char *k, const char *v) {
    json_builder_set_member_name(b, k);
    json_builder_add_string_value(b, v);
}
static void m_bool(JsonBuilder *b, const char *k, int v) {
    json_builder_set_member_name(b, k);
    json_builder_add_boolean_value(b, v);
}
static void m_null(JsonBuilder *b, const char *k) {
    json_builder_set_member_name(b, k);
    json_builder_add_null_value(b);
}
static void m_ints(JsonBuilder *b, const char *k, const int *v, int n) {
    json_builder_set_member_name(b, k);
    json_builder_begin_array(b);
    for (int i = 0; i < n; i++) json_builder_add_int_value(b, v[i]);
    json_builder_end_array(b);
}
static void m_doubles(JsonBuilder *b, const char *k, const double *v, int n) {
    json_builder_set_member_name(b, k);
    json_builder_begin_array(b);
    for (int i = 0; i < n; i++) json_builder_add_double_value(b, v[i]);
    json_builder_end_array(b);
}
static void m_begin_object(JsonBuilder *b, const char *k) {
    json_builder_set_member_name(b, k);
    json_builder_begin_object(b);
}

/* ---- files ------------------------------------------------------------------- */

/* Writes through a temporary file and a rename, so a reader never sees half
 * a file and the directory's mtime moves (ninja tracks the output dir). */
static h3_status_code write_file(const char *dir, const char *rel, const void *data, size_t size,
                                 h3_status *status) {
    char *path = g_build_filename(dir, rel, NULL);
    char *parent = g_path_get_dirname(path);
    GError *err = NULL;
    h3_status_code rc = H3_OK;
    if (g_mkdir_with_parents(parent, 0755) != 0)
        rc = h3_fail(status, H3_ERR_IO, "%s: %s", parent, g_strerror(errno));
    else if (!g_file_set_contents(path, data, (gssize)size, &err)) {
        rc = h3_fail(status, H3_ERR_IO, "%s", err->message);
        g_error_free(err);
    }
    g_free(parent);
    g_free(path);
    return rc;
}

/* Takes the builder's root object and writes it as pretty JSON. */
static h3_status_code write_json(const char *dir, const char *rel, JsonBuilder *b, int indent, h3_status *status) {
    JsonNode *root = json_builder_get_root(b);
    GString *s = g_string_new(NULL);
    append_node(s, root, indent, 0);
    g_string_append_c(s, '\n');
    h3_status_code rc = write_file(dir, rel, s->str, s->len, status);
    g_string_free(s, TRUE);
    json_node_unref(root);
    g_object_unref(b);
    return rc;
}

/* ---- configs ----------------------------------------------------------------- */

/* rel: transformer/config.json, or transformer_ref/config.json (the same). */
static h3_status_code write_transformer_config(const char *dir, const char *rel, h3_status *status) {
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    m_string(b, "_class_name", "MiniMaxH3Transformer3DModel");
    m_string(b, "_diffusers_version", DIFFUSERS_VERSION);
    m_int(b, "attention_head_dim", 32);
    m_int(b, "audio_in_channels", 32);
    m_int(b, "ffn_dim", 96);
    m_double(b, "final_norm_eps", 1e-5);
    m_int(b, "freq_dim", 16);
    m_int(b, "hidden_size", 48);
    m_int(b, "in_channels", 24);
    m_double(b, "norm_eps", 1e-5);
    m_int(b, "num_attention_heads", 2);
    m_int(b, "num_layers", 2);
    m_int(b, "num_refiner_layers", 2);
    m_ints(b, "patch_size", (const int[]){1, 2, 2}, 3);
    m_double(b, "qk_norm_eps", 1e-5);
    m_int(b, "rope_freq_dim", 4);
    m_double(b, "rope_theta", 10000.0);
    m_int(b, "text_dim", 40);
    m_int(b, "time_embed_dim", 24);
    m_int(b, "time_embed_hidden_dim", 48);
    json_builder_end_object(b);
    return write_json(dir, rel, b, 2, status);
}

static h3_status_code write_vae_config(const char *dir, h3_status *status) {
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    m_string(b, "_class_name", "AutoencoderKLMiniMaxH3");
    m_string(b, "_diffusers_version", DIFFUSERS_VERSION);
    m_ints(b, "block_out_channels", (const int[]){8, 16, 16, 32}, 4);
    m_int(b, "clip_length", 17);
    m_int(b, "decoder_attention_head_dim", 24);
    m_int(b, "decoder_ffn_mult", 4);
    m_double(b, "decoder_norm_eps", 1e-5);
    m_int(b, "decoder_num_attention_heads", 2);
    m_int(b, "decoder_num_layers", 2);
    m_int(b, "decoder_num_register_tokens", 4);
    m_double(b, "decoder_rope_dim_ratio", 0.75);
    m_double(b, "decoder_rope_theta", 100.0);
    m_int(b, "in_channels", 3);
    m_int(b, "latent_channels", 24);
    m_doubles(b, "latents_mean", video_latents_mean, 24);
    m_doubles(b, "latents_std", video_latents_std, 24);
    m_int(b, "layers_per_block", 1);
    m_double(b, "norm_eps", 1e-6);
    m_int(b, "norm_num_groups", 4);
    m_int(b, "out_channels", 3);
    m_ints(b, "spatial_downsample_factors", (const int[]){2, 2, 2, 2}, 4);
    m_string(b, "spatial_padding_mode", "reflect");
    m_ints(b, "temporal_downsample_factors", (const int[]){1, 2, 2, 1}, 4);
    m_int(b, "token_drop", 3);
    json_builder_end_object(b);
    return write_json(dir, "vae/config.json", b, 2, status);
}

static h3_status_code write_audio_vae_config(const char *dir, const audio_profile *a, h3_status *status) {
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    m_string(b, "_class_name", "AutoencoderKLMiniMaxH3Audio");
    m_string(b, "_diffusers_version", DIFFUSERS_VERSION);
    m_int(b, "decoder_dim", a->decoder_dim);
    m_ints(b, "decoder_kernel_sizes", a->decoder_kernel_sizes, a->n_decoder_rates);
    m_ints(b, "decoder_rates", a->decoder_rates, a->n_decoder_rates);
    m_int(b, "encoder_dim", a->encoder_dim);
    m_ints(b, "encoder_rates", a->encoder_rates, a->n_encoder_rates);
    m_int(b, "latent_channels", 32);
    m_int(b, "latent_dim", 128);
    m_doubles(b, "latents_mean", audio_latents_mean, 32);
    m_doubles(b, "latents_std", audio_latents_std, 32);
    m_int(b, "num_attention_heads", 2);
    json_builder_set_member_name(b, "resblock_dilation_sizes");
    json_builder_begin_array(b);
    for (int j = 0; j < 2; j++) {
        json_builder_begin_array(b);
        for (int d = 1; d <= 5; d += 2) json_builder_add_int_value(b, d);
        json_builder_end_array(b);
    }
    json_builder_end_array(b);
    m_ints(b, "resblock_kernel_sizes", (const int[]){3, 7}, 2);
    m_int(b, "sampling_rate", a->sampling_rate);
    json_builder_end_object(b);
    return write_json(dir, "audio_vae/config.json", b, 2, status);
}

static h3_status_code write_text_encoder_configs(const char *dir, h3_status *status) {
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "architectures");
    json_builder_begin_array(b);
    json_builder_add_string_value(b, "Qwen3VLForConditionalGeneration");
    json_builder_end_array(b);
    m_string(b, "dtype", "bfloat16");
    m_int(b, "image_token_id", 1012);
    m_string(b, "model_type", "qwen3_vl");
    m_begin_object(b, "text_config");
    m_bool(b, "attention_bias", 0);
    m_double(b, "attention_dropout", 0.0);
    m_int(b, "bos_token_id", 1000);
    m_int(b, "eos_token_id", 1002);
    m_int(b, "head_dim", 16);
    m_string(b, "hidden_act", "silu");
    m_int(b, "hidden_size", 40);
    m_double(b, "initializer_range", 0.02);
    m_int(b, "intermediate_size", 80);
    m_int(b, "max_position_embeddings", 4096);
    m_string(b, "model_type", "qwen3_vl_text");
    m_int(b, "num_attention_heads", 4);
    m_int(b, "num_hidden_layers", 52);
    m_int(b, "num_key_value_heads", 2);
    m_null(b, "pad_token_id");
    m_double(b, "rms_norm_eps", 1e-6);
    m_begin_object(b, "rope_parameters");
    m_bool(b, "mrope_interleaved", 1);
    m_ints(b, "mrope_section", (const int[]){4, 2, 2}, 3);
    m_double(b, "rope_theta", 5000000.0);
    m_string(b, "rope_type", "default");
    json_builder_end_object(b);
    m_bool(b, "tie_word_embeddings", 0);
    m_bool(b, "use_cache", 1);
    m_int(b, "vocab_size", 1088);
    json_builder_end_object(b);
    m_bool(b, "tie_word_embeddings", 0);
    m_string(b, "transformers_version", TRANSFORMERS_VERSION);
    m_int(b, "video_token_id", 1013);
    m_begin_object(b, "vision_config");
    m_ints(b, "deepstack_visual_indexes", (const int[]){0, 1}, 2);
    m_int(b, "depth", 2);
    m_string(b, "hidden_act", "gelu_pytorch_tanh");
    m_int(b, "hidden_size", 32);
    m_int(b, "in_channels", 3);
    m_double(b, "initializer_range", 0.02);
    m_int(b, "intermediate_size", 64);
    m_string(b, "model_type", "qwen3_vl_vision");
    m_int(b, "num_heads", 2);
    m_int(b, "num_position_embeddings", 16);
    m_int(b, "out_hidden_size", 40);
    m_int(b, "patch_size", VISION_PATCH);
    m_begin_object(b, "rope_parameters");
    m_double(b, "rope_theta", 10000.0);
    m_string(b, "rope_type", "axial");
    json_builder_end_object(b);
    m_int(b, "spatial_merge_size", VISION_MERGE);
    m_int(b, "temporal_patch_size", VISION_TEMPORAL_PATCH);
    json_builder_end_object(b);
    m_int(b, "vision_end_token_id", 1010);
    m_int(b, "vision_start_token_id", 1009);
    json_builder_end_object(b);
    h3_status_code rc = write_json(dir, "text_encoder/config.json", b, 2, status);
    if (rc != H3_OK) return rc;

    b = json_builder_new();
    json_builder_begin_object(b);
    m_bool(b, "_from_model_config", 1);
    m_int(b, "bos_token_id", 1000);
    m_int(b, "eos_token_id", 1002);
    m_bool(b, "output_attentions", 0);
    m_bool(b, "output_hidden_states", 0);
    m_string(b, "transformers_version", TRANSFORMERS_VERSION);
    m_bool(b, "use_cache", 1);
    json_builder_end_object(b);
    return write_json(dir, "text_encoder/generation_config.json", b, 2, status);
}

static h3_status_code write_scheduler_config(const char *dir, const char *rel, double shift, h3_status *status) {
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    m_string(b, "_class_name", "MiniMaxH3Scheduler");
    m_string(b, "_diffusers_version", DIFFUSERS_VERSION);
    m_double(b, "shift", shift);
    json_builder_end_object(b);
    return write_json(dir, rel, b, 2, status);
}

/* processor/{preprocessor,video_preprocessor}_config.json: the Qwen3-VL
 * processors with the tiny model's small minimum size. */
static h3_status_code write_processor_config(const char *dir, int video, h3_status *status) {
    static const double half[3] = {0.5, 0.5, 0.5};
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    m_begin_object(b, "size");
    m_int(b, "longest_edge", video ? 25165824 : 16777216);
    m_int(b, "shortest_edge", IMAGE_MIN_PIXELS);
    json_builder_end_object(b);
    m_int(b, "patch_size", VISION_PATCH);
    m_int(b, "temporal_patch_size", VISION_TEMPORAL_PATCH);
    m_int(b, "merge_size", VISION_MERGE);
    m_doubles(b, "image_mean", half, 3);
    m_doubles(b, "image_std", half, 3);
    m_string(b, "processor_class", "Qwen3VLProcessor");
    if (video) m_string(b, "video_processor_type", "Qwen3VLVideoProcessor");
    else m_string(b, "image_processor_type", "Qwen2VLImageProcessorFast");
    json_builder_end_object(b);
    return write_json(dir, video ? "processor/video_preprocessor_config.json" : "processor/preprocessor_config.json",
                      b, 1, status);
}

/* model_index.json and modular_model_index.json (the same content, as in
 * the release), the modular one with the Ref2VA workflow's additions when
 * ref2va is set: transformer_ref and the tiny Ref2VA canvas configs (the
 * release's 768 / 768·1344 / 2048 made tiny, as the golden model has them). */
static h3_status_code write_model_index(const char *dir, const char *rel, int ref2va, h3_status *status) {
    static const char *const components[][3] = {
        {"text_encoder", "transformers", "Qwen3VLForConditionalGeneration"},
        {"tokenizer", "transformers", "Qwen2TokenizerFast"},
        {"processor", "transformers", "Qwen3VLProcessor"},
        {"vae", "diffusers", "AutoencoderKLMiniMaxH3"},
        {"audio_vae", "diffusers", "AutoencoderKLMiniMaxH3Audio"},
        {"transformer", "diffusers", "MiniMaxH3Transformer3DModel"},
        {"transformer_ref", "diffusers", "MiniMaxH3Transformer3DModel"},
        {"scheduler", "diffusers", "MiniMaxH3Scheduler"},
        {"audio_scheduler", "diffusers", "MiniMaxH3Scheduler"},
    };
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    m_string(b, "_class_name", "MiniMaxH3ModularPipeline");
    m_string(b, "_diffusers_version", DIFFUSERS_VERSION);
    m_string(b, "_blocks_class_name", "MiniMaxH3Blocks");
    for (size_t i = 0; i < G_N_ELEMENTS(components); i++) {
        if (!ref2va && !strcmp(components[i][0], "transformer_ref")) continue;
        json_builder_set_member_name(b, components[i][0]);
        json_builder_begin_array(b);
        json_builder_add_string_value(b, components[i][1]);
        json_builder_add_string_value(b, components[i][2]);
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "type_hint");
        json_builder_begin_array(b);
        json_builder_add_string_value(b, components[i][1]);
        json_builder_add_string_value(b, components[i][2]);
        json_builder_end_array(b);
        /* The name the golden model was saved under; diffusers reads the
         * subfolders relative to wherever the directory is loaded from. */
        m_string(b, "pretrained_model_name_or_path", "golden/tiny-h3");
        m_string(b, "subfolder", components[i][0]);
        m_null(b, "variant");
        m_null(b, "revision");
        json_builder_end_object(b);
        json_builder_end_array(b);
    }
    if (ref2va) {
        m_int(b, "canvas_short_edge", 32);
        m_int(b, "canvas_max_pixels", 2048);
        m_int(b, "reference_image_short_edge", 64);
    }
    json_builder_end_object(b);
    return write_json(dir, rel, b, 1, status);
}

static h3_status_code write_tokenizer(const char *dir, h3_status *status) {
    const char *name;
    const unsigned char *data;
    size_t size;
    int n = 0;
    for (int i = 0; h3_tiny_tokenizer_file(i, &name, &data, &size); i++, n++) {
        for (int k = 0; k < 2; k++) { /* tokenizer/ and processor/ carry the same files */
            char *rel = g_build_filename(k ? "processor" : "tokenizer", name, NULL);
            h3_status_code rc = write_file(dir, rel, data, size, status);
            g_free(rel);
            if (rc != H3_OK) return rc;
        }
    }
    return n ? H3_OK : h3_fail(status, H3_ERR_INTERNAL, "no tokenizer files were embedded at build time");
}

/* ---- reading a config back ------------------------------------------------- */

/* A parsed config.json with a sticky error: the architecture walkers read
 * many keys in a row and check once at the end. */
typedef struct config {
    JsonParser *parser;
    JsonObject *root;
    char *path;
    int failed;
    char error[512];
} config;

static h3_status_code config_open(config *c, const char *dir, const char *rel, h3_status *status) {
    memset(c, 0, sizeof *c);
    c->path = g_build_filename(dir, rel, NULL);
    h3_status_code rc = h3_json_read_file(c->path, 64u << 20, &c->parser, status);
    if (rc != H3_OK) return rc;
    JsonNode *root = json_parser_get_root(c->parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root))
        return h3_fail(status, H3_ERR_FORMAT, "%s: not a JSON object", c->path);
    c->root = json_node_get_object(root);
    return H3_OK;
}

static void config_close(config *c) {
    if (c->parser) g_object_unref(c->parser);
    g_free(c->path);
    memset(c, 0, sizeof *c);
}

static void config_error(config *c, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void config_error(config *c, const char *fmt, ...) {
    if (c->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    c->failed = 1;
}

/* The member at a dotted path ("text_config.hidden_size"), or NULL. */
static JsonNode *config_node(config *c, const char *key) {
    JsonObject *o = c->root;
    char **parts = g_strsplit(key, ".", -1);
    JsonNode *n = NULL;
    for (int i = 0; o && parts[i]; i++) {
        n = json_object_get_member(o, parts[i]);
        o = parts[i + 1] && n && JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
        if (parts[i + 1] && !o) n = NULL;
    }
    g_strfreev(parts);
    if (!n) config_error(c, "%s: no \"%s\"", c->path, key);
    return n;
}

static int node_is_int(JsonNode *n) {
    return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64;
}

/* A positive size (a width, a count, a kernel). */
static int64_t config_dim(config *c, const char *key) {
    JsonNode *n = config_node(c, key);
    if (!n) return 0;
    if (!node_is_int(n) || json_node_get_int(n) < 1 || json_node_get_int(n) > (1 << 24)) {
        config_error(c, "%s: \"%s\" must be an integer in 1..%d", c->path, key, 1 << 24);
        return 0;
    }
    return json_node_get_int(n);
}

static int config_bool(config *c, const char *key) {
    JsonNode *n = config_node(c, key);
    if (!n) return 0;
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_BOOLEAN) {
        config_error(c, "%s: \"%s\" must be true or false", c->path, key);
        return 0;
    }
    return json_node_get_boolean(n);
}

static const char *config_string(config *c, const char *key) {
    JsonNode *n = config_node(c, key);
    if (!n) return "";
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING) {
        config_error(c, "%s: \"%s\" must be a string", c->path, key);
        return "";
    }
    return json_node_get_string(n);
}

/* An array of positive sizes (allow_zero: of non-negative ones); returns
 * its length, at most max. */
static int config_dims(config *c, JsonNode *n, const char *key, int64_t *out, int max, int allow_zero) {
    if (!n) return 0;
    if (!JSON_NODE_HOLDS_ARRAY(n)) {
        config_error(c, "%s: \"%s\" must be an array", c->path, key);
        return 0;
    }
    JsonArray *a = json_node_get_array(n);
    int len = (int)json_array_get_length(a);
    if (len > max) {
        config_error(c, "%s: \"%s\" has %d entries, at most %d are supported", c->path, key, len, max);
        return 0;
    }
    for (int i = 0; i < len; i++) {
        JsonNode *e = json_array_get_element(a, i);
        if (!node_is_int(e) || json_node_get_int(e) < (allow_zero ? 0 : 1) || json_node_get_int(e) > (1 << 24)) {
            config_error(c, "%s: \"%s\"[%d] must be an integer in %d..%d", c->path, key, i, allow_zero ? 0 : 1,
                         1 << 24);
            return 0;
        }
        out[i] = json_node_get_int(e);
    }
    return len;
}

static int config_array(config *c, const char *key, int64_t *out, int max) {
    return config_dims(c, config_node(c, key), key, out, max, 0);
}

static h3_status_code config_check(config *c, h3_status *status) {
    return c->failed ? h3_fail(status, H3_ERR_FORMAT, "%s", c->error) : H3_OK;
}

/* ---- tensors ------------------------------------------------------------------ */

typedef struct tensor {
    char *name;
    h3_st_dtype dtype;
    int ndim;
    int64_t shape[H3_ST_MAX_DIMS];
    int64_t numel;
    float *data;
    int buffer; /* a registered buffer, not a parameter (not counted, not random) */
} tensor;

/* The tensors of one safetensors file, in module order, and the generator
 * their values are drawn from. */
typedef struct tensor_file {
    GArray *tensors;           /* of tensor */
    h3_torch_generator gen;
    h3_st_dtype dtype;         /* storage dtype of the parameters */
    const char *const *f32_prefixes; /* name prefixes kept in float32 (NULL-terminated) */
} tensor_file;

#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

static void tensor_file_init(tensor_file *f, uint64_t seed, h3_st_dtype dtype, const char *const *f32_prefixes) {
    f->tensors = g_array_new(FALSE, TRUE, sizeof(tensor));
    h3_torch_generator_seed(&f->gen, seed);
    f->dtype = dtype;
    f->f32_prefixes = f32_prefixes;
}

static void tensor_file_free(tensor_file *f) {
    for (guint i = 0; f->tensors && i < f->tensors->len; i++) {
        tensor *t = &g_array_index(f->tensors, tensor, i);
        g_free(t->name);
        g_free(t->data);
    }
    if (f->tensors) g_array_free(f->tensors, TRUE);
    memset(f, 0, sizeof *f);
}

/* Adds a zero-filled tensor and returns its values to fill. */
static float *add_tensor(tensor_file *f, const char *name, int buffer, int ndim, const int64_t *shape) {
    tensor t = {.name = g_strdup(name), .dtype = f->dtype, .ndim = ndim, .numel = 1, .buffer = buffer};
    for (int d = 0; d < ndim; d++) {
        t.shape[d] = shape[d];
        t.numel *= shape[d];
    }
    for (int i = 0; f->f32_prefixes && f->f32_prefixes[i]; i++)
        if (g_str_has_prefix(name, f->f32_prefixes[i])) t.dtype = H3_ST_F32;
    t.data = g_new0(float, t.numel ? t.numel : 1);
    g_array_append_val(f->tensors, t);
    return t.data;
}

static float *normal(tensor_file *f, const char *name, float mean, float std, int ndim, const int64_t *shape) {
    float *x = add_tensor(f, name, 0, ndim, shape);
    int64_t n = g_array_index(f->tensors, tensor, f->tensors->len - 1).numel;
    h3_torch_randn_f32(&f->gen, x, (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = mean + std * x[i];
    return x;
}

static void constant(tensor_file *f, const char *name, int buffer, float value, int ndim, const int64_t *shape) {
    float *x = add_tensor(f, name, buffer, ndim, shape);
    int64_t n = g_array_index(f->tensors, tensor, f->tensors->len - 1).numel;
    for (int64_t i = 0; i < n; i++) x[i] = value;
}

/* prefix.leaf; names here are built from short constants and indices, far
 * below the 256 bytes (a longer one would show up as a missing tensor). */
static const char *join(char *buf, size_t size, const char *prefix, const char *leaf) {
    int n = snprintf(buf, size, "%s.%s", prefix, leaf);
    if (n < 0 || (size_t)n >= size) buf[0] = 0;
    return buf;
}
#define NAME(prefix, leaf) join((char[256]){0}, 256, prefix, leaf)

static const float bias_std = 0.02f;
/* The last conv of a residual branch (AMP convs2, DAC residual units): with
 * unit gain every one of the many residual adds would double the variance
 * and the waveform would sit at the clamp. */
static const float residual_gain = 0.1f;

/* nn.Linear: weight [out, in] ~ N(0, 1/in), bias 0.02·N. */
static void linear(tensor_file *f, const char *prefix, int64_t out, int64_t in, int bias) {
    normal(f, NAME(prefix, "weight"), 0, 1.0f / sqrtf((float)in), DIMS(out, in));
    if (bias) normal(f, NAME(prefix, "bias"), 0, bias_std, DIMS(out));
}

/* LayerNorm / GroupNorm / RMSNorm: weight 1, bias 0. */
static void norm(tensor_file *f, const char *prefix, int64_t channels, int bias) {
    constant(f, NAME(prefix, "weight"), 0, 1.0f, DIMS(channels));
    if (bias) constant(f, NAME(prefix, "bias"), 0, 0.0f, DIMS(channels));
}

/* Conv3d with a cubic kernel k (weight [out, in, k, k, k]) and a bias. */
static void conv3d(tensor_file *f, const char *prefix, int64_t out, int64_t in, int64_t k) {
    normal(f, NAME(prefix, "weight"), 0, 1.0f / sqrtf((float)(in * k * k * k)), DIMS(out, in, k, k, k));
    normal(f, NAME(prefix, "bias"), 0, bias_std, DIMS(out));
}

/* Plain Conv1d, weight [out, in, k], bias. */
static void conv1d(tensor_file *f, const char *prefix, int64_t out, int64_t in, int64_t k) {
    normal(f, NAME(prefix, "weight"), 0, 1.0f / sqrtf((float)(in * k)), DIMS(out, in, k));
    normal(f, NAME(prefix, "bias"), 0, bias_std, DIMS(out));
}

/* weight_g of a weight-normed conv: ‖v‖ over every dim but 0, so that
 * w = g·v/‖v‖ = v at load time. */
static void weight_norm_g(tensor_file *f, const char *name, const float *v, int64_t rows, int64_t per_row) {
    float *g = add_tensor(f, name, 0, DIMS(rows, 1, 1));
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t i = 0; i < per_row; i++) s += (double)v[r * per_row + i] * v[r * per_row + i];
        g[r] = (float)sqrt(s);
    }
}

/* weight_norm(Conv1d): weight_v [out, in, k] ~ N(0, gain²/(in·k)), g [out,1,1]. */
static void wn_conv1d(tensor_file *f, const char *prefix, int64_t out, int64_t in, int64_t k, int bias, float gain) {
    const float *v = normal(f, NAME(prefix, "weight_v"), 0, gain / sqrtf((float)(in * k)), DIMS(out, in, k));
    weight_norm_g(f, NAME(prefix, "weight_g"), v, out, in * k);
    if (bias) normal(f, NAME(prefix, "bias"), 0, bias_std, DIMS(out));
}

/* BigVGAN's anti-aliasing low-pass (kaiser_sinc_filter1d(cutoff, half_width,
 * K)), computed in float32 in the order torch does it, so the taps are
 * bit-identical to the buffers of a constructed model (docs/spec/h3-vaes.md
 * §4.3): Kaiser window with calc_i0 (Cephes Chebyshev series), sinc, then a
 * division by the sum, which torch's vectorised reduction forms as four
 * interleaved partial sums added pairwise. */
static float chebyshev_i0e(float x) {
    static const double A[30] = {
        -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
        1.71539128555513303061E-15,  -1.16853328779934516808E-14, 7.67618549860493561688E-14,
        -4.85644678311192946090E-13, 2.95505266312963983461E-12,  -1.72682629144155570723E-11,
        9.67580903537323691224E-11,  -5.18979560163526290666E-10, 2.65982372468238665035E-9,
        -1.30002500998624804212E-8,  6.04699502254191894932E-8,   -2.67079385394061173391E-7,
        1.11738753912010371815E-6,   -4.41673835845875056359E-6,  1.64484480707288970893E-5,
        -5.75419501008210370398E-5,  1.88502885095841655729E-4,   -5.76375574538582365885E-4,
        1.63947561694133579842E-3,   -4.32430999505057594430E-3,  1.05464603945949983183E-2,
        -2.37374148058994688156E-2,  4.93052842396707084878E-2,   -9.49010970480476444210E-2,
        1.71620901522208775349E-1,   -3.04682672343198398683E-1,  6.76795274409476084995E-1};
    float b0 = (float)A[0], b1 = 0.0f, b2 = 0.0f;
    for (int i = 1; i < 30; i++) {
        b2 = b1;
        b1 = b0;
        b0 = x * b1 - b2 + (float)A[i];
    }
    return 0.5f * (b0 - b2);
}

/* torch's calc_i0 for |x| <= 8 (the only range a Kaiser beta < 8 needs). */
static float bessel_i0(float x) {
    x = fabsf(x);
    return expf(x) * chebyshev_i0e(x / 2.0f - 2.0f);
}

static void kaiser_sinc_filter(float cutoff, float half_width, int K, float *out) {
    int half = K / 2;
    double delta_f = 4.0 * half_width;
    double A = 2.285 * (half - 1) * G_PI * delta_f + 7.95;
    double beta = A > 50.0 ? 0.1102 * (A - 8.7) : A >= 21.0 ? 0.5842 * pow(A - 21.0, 0.4) + 0.07886 * (A - 21.0) : 0.0;
    float alpha = (float)((K - 1) / 2.0), fbeta = (float)beta;
    for (int n = 0; n < K; n++) {
        float r = ((float)n - alpha) / alpha;
        float window = bessel_i0(fbeta * sqrtf(fabsf(1.0f - r * r))) / bessel_i0(fbeta);
        float time = K % 2 == 0 ? (float)(n - half) + 0.5f : (float)(n - half);
        float x = 2.0f * cutoff * time, product = (float)G_PI * x;
        float sinc = x == 0.0f ? 1.0f : sinf(product) / product;
        out[n] = 2.0f * cutoff * window * sinc;
    }
    float partial[4] = {0, 0, 0, 0};
    for (int n = 0; n < K; n++) partial[n % 4] += out[n];
    float sum = (partial[0] + partial[1]) + (partial[2] + partial[3]);
    for (int n = 0; n < K; n++) out[n] /= sum;
}

enum { AA_TAPS = 12 }; /* up/down ratio 2: kernel 6·2//2·2 = 12, cutoff 0.5/2, half width 0.6/2 */

/* ---- the decoders, as the loaders list them ---------------------------------------- */

/* Product of the dims after the first: a weight's fan-in. */
static int64_t fan_in(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 1; d < ndim; d++) n *= shape[d];
    return n;
}

/* One tensor of the video decoder (h3_video_vae_decoder_tensors): weights
 * N(0, 1/fan_in), biases 0.02·N, norm weights 1 and biases 0, layer scales
 * 0.5, register tokens N(0, 1). */
static h3_status_code draw_video_tensor(void *opaque, const h3_video_vae_tensor *t, h3_status *status) {
    tensor_file *f = opaque;
    switch (t->role) {
    case H3_VIDEO_VAE_WEIGHT:
        normal(f, t->name, 0, 1.0f / sqrtf((float)fan_in(t->ndim, t->shape)), t->ndim, t->shape);
        return H3_OK;
    case H3_VIDEO_VAE_BIAS: normal(f, t->name, 0, bias_std, t->ndim, t->shape); return H3_OK;
    case H3_VIDEO_VAE_NORM_WEIGHT: constant(f, t->name, 0, 1.0f, t->ndim, t->shape); return H3_OK;
    case H3_VIDEO_VAE_NORM_BIAS: constant(f, t->name, 0, 0.0f, t->ndim, t->shape); return H3_OK;
    case H3_VIDEO_VAE_LAYER_SCALE: constant(f, t->name, 0, 0.5f, t->ndim, t->shape); return H3_OK;
    case H3_VIDEO_VAE_REGISTERS: normal(f, t->name, 0, 1, t->ndim, t->shape); return H3_OK;
    default: return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: the fused native q/k/v is not written here", t->name);
    }
}

/* weight_v of the audio decoder's weight-normed convs: unit gain, or 0.1 for
 * the convs that end a residual branch and for conv_post; a transposed conv's
 * output sample sums in·k/stride taps, hence the variance stride/(in·k). */
static float weight_v_std(const h3_audio_vae_tensor *t) {
    if (t->module == H3_AUDIO_VAE_UPSAMPLE) return sqrtf((float)t->stride / (float)(t->shape[0] * t->shape[2]));
    float gain = t->module == H3_AUDIO_VAE_AMP_CONV2 ? residual_gain : t->module == H3_AUDIO_VAE_CONV_POST ? 0.1f : 1.0f;
    return gain / sqrtf((float)fan_in(t->ndim, t->shape));
}

/* One tensor of the audio decoder (h3_audio_vae_decoder_tensors): weight_g
 * = ‖v‖ of the weight_v just drawn, SnakeBeta log-alpha/log-beta 0, the
 * Kaiser-sinc filters computed. */
static h3_status_code draw_audio_tensor(void *opaque, const h3_audio_vae_tensor *t, h3_status *status) {
    tensor_file *f = opaque;
    switch (t->role) {
    case H3_AUDIO_VAE_CONV_WEIGHT:
        normal(f, t->name, 0, 1.0f / sqrtf((float)fan_in(t->ndim, t->shape)), t->ndim, t->shape);
        return H3_OK;
    case H3_AUDIO_VAE_WN_V: normal(f, t->name, 0, weight_v_std(t), t->ndim, t->shape); return H3_OK;
    case H3_AUDIO_VAE_WN_G: {
        const tensor *v = f->tensors->len ? &g_array_index(f->tensors, tensor, f->tensors->len - 1) : NULL;
        if (!v || !g_str_has_suffix(v->name, "weight_v") || v->shape[0] != t->shape[0])
            return h3_fail(status, H3_ERR_INTERNAL, "%s does not follow its weight_v", t->name);
        weight_norm_g(f, t->name, v->data, v->shape[0], v->numel / v->shape[0]);
        return H3_OK;
    }
    case H3_AUDIO_VAE_BIAS: normal(f, t->name, 0, bias_std, t->ndim, t->shape); return H3_OK;
    case H3_AUDIO_VAE_SNAKE_ALPHA:
    case H3_AUDIO_VAE_SNAKE_BETA: constant(f, t->name, 0, 0.0f, t->ndim, t->shape); return H3_OK;
    default: { /* the two low-pass buffers */
        if (t->ndim != 3 || t->shape[2] != AA_TAPS)
            return h3_fail(status, H3_ERR_INTERNAL, "%s: a filter of %d taps expected", t->name, AA_TAPS);
        float taps[AA_TAPS];
        kaiser_sinc_filter(0.25f, 0.3f, AA_TAPS, taps);
        memcpy(add_tensor(f, t->name, 1, t->ndim, t->shape), taps, sizeof taps);
        return H3_OK;
    }
    }
}

/* ---- the architecture walkers ------------------------------------------------- */

/* MiniMaxH3Transformer3DModel (docs/spec/h3-transformer.md §2.3). */
static h3_status_code enumerate_transformer(config *c, tensor_file *f, h3_status *status) {
    int64_t D = config_dim(c, "hidden_size"), heads = config_dim(c, "num_attention_heads");
    int64_t head_dim = config_dim(c, "attention_head_dim"), ffn = config_dim(c, "ffn_dim");
    int64_t in_ch = config_dim(c, "in_channels"), audio_ch = config_dim(c, "audio_in_channels");
    int64_t text_dim = config_dim(c, "text_dim"), freq_dim = config_dim(c, "freq_dim");
    int64_t t_hidden = config_dim(c, "time_embed_hidden_dim"), t_dim = config_dim(c, "time_embed_dim");
    int64_t layers = config_dim(c, "num_layers"), refiners = config_dim(c, "num_refiner_layers");
    int64_t patch[3] = {0, 0, 0};
    if (config_array(c, "patch_size", patch, 3) != 3) config_error(c, "%s: \"patch_size\" needs 3 entries", c->path);
    h3_status_code rc = config_check(c, status);
    if (rc != H3_OK) return rc;
    int64_t inner = heads * head_dim, patch_features = in_ch * patch[0] * patch[1] * patch[2];

    linear(f, "proj_in", D, patch_features, 1);
    linear(f, "audio_proj_in", D, audio_ch, 1);
    linear(f, "context_embedder", D, text_dim, 1);
    linear(f, "time_embedder.linear_1", t_hidden, freq_dim, 1);
    linear(f, "time_embedder.linear_2", t_dim, t_hidden, 1);
    for (int64_t i = 0; i < refiners + layers; i++) {
        char p[128], q[160];
        if (i < refiners) snprintf(p, sizeof p, "token_refiner.refiner_blocks.%" G_GINT64_FORMAT, i);
        else snprintf(p, sizeof p, "transformer_blocks.%" G_GINT64_FORMAT, i - refiners);
        norm(f, NAME(p, "norm1"), D, 0);
        snprintf(q, sizeof q, "%s.attn", p);
        linear(f, NAME(q, "to_q"), inner, D, 0);
        linear(f, NAME(q, "to_k"), inner, D, 0);
        linear(f, NAME(q, "to_v"), inner, D, 0);
        norm(f, NAME(q, "norm_q"), head_dim, 0);
        norm(f, NAME(q, "norm_k"), head_dim, 0);
        linear(f, NAME(q, "to_out.0"), D, inner, 0);
        norm(f, NAME(p, "norm2"), D, 0);
        linear(f, NAME(p, "ff.net.0.proj"), 2 * ffn, D, 0); /* [value; gate] */
        linear(f, NAME(p, "ff.net.2"), D, ffn, 0);
        /* 3 modalities × (shift, scale, gate) × (msa, mlp) */
        if (i >= refiners) linear(f, NAME(p, "adaln_proj.linear"), 3 * 6 * D, t_dim, 1);
        if (i == refiners - 1) norm(f, "token_refiner.final_norm", D, 0);
    }
    norm(f, "norm_out.norm", D, 0);
    linear(f, "norm_out.linear", 2 * D, t_dim, 1);
    linear(f, "proj_out", patch_features, D, 1);
    linear(f, "audio_proj_out", audio_ch, D, 1);
    return H3_OK;
}

/* AutoencoderKLMiniMaxH3: the causal CNN encoder, then post_quant_conv and
 * the ViT decoder as h3_video_vae lists them (docs/spec/h3-vaes.md §3.4,
 * §3.5, §3.11). */
static h3_status_code enumerate_vae(config *c, tensor_file *f, h3_status *status) {
    int64_t channels[16], spatial[16], temporal[16];
    int levels = config_array(c, "block_out_channels", channels, 16);
    int ns = config_array(c, "spatial_downsample_factors", spatial, 16);
    int nt = config_array(c, "temporal_downsample_factors", temporal, 16);
    int64_t in_ch = config_dim(c, "in_channels");
    int64_t latent = config_dim(c, "latent_channels"), per_block = config_dim(c, "layers_per_block");
    if (!c->failed && (levels < 1 || ns != levels || nt != levels))
        config_error(c, "%s: block_out_channels, spatial_downsample_factors and temporal_downsample_factors "
                        "need the same (non-zero) length", c->path);
    h3_status_code rc = config_check(c, status);
    if (rc != H3_OK) return rc;

    conv3d(f, "encoder.conv_in", channels[0], in_ch, 3);
    for (int l = 0; l < levels; l++) {
        char p[128];
        for (int64_t j = 0; j < per_block; j++) {
            int64_t cin = j == 0 ? channels[l > 0 ? l - 1 : 0] : channels[l], cout = channels[l];
            snprintf(p, sizeof p, "encoder.down_blocks.%d.resnets.%" G_GINT64_FORMAT, l, j);
            norm(f, NAME(p, "norm1"), cin, 1);
            conv3d(f, NAME(p, "conv1"), cout, cin, 3);
            norm(f, NAME(p, "norm2"), cout, 1);
            conv3d(f, NAME(p, "conv2"), cout, cout, 3);
            if (cin != cout) conv3d(f, NAME(p, "conv_shortcut"), cout, cin, 1);
        }
        if (spatial[l] > 1 || temporal[l] > 1) { /* levels that do not downsample have no conv */
            snprintf(p, sizeof p, "encoder.down_blocks.%d.downsamplers.0.conv", l);
            conv3d(f, p, channels[l], channels[l], 3);
        }
    }
    norm(f, "encoder.norm_out", channels[levels - 1], 1);
    conv3d(f, "encoder.conv_out", 2 * latent, channels[levels - 1], 3); /* mean and logvar */
    conv3d(f, "quant_conv", 2 * latent, 2 * latent, 1);
    char *dir = g_path_get_dirname(c->path);
    rc = h3_video_vae_decoder_tensors(dir, draw_video_tensor, f, status);
    g_free(dir);
    return rc;
}

/* AutoencoderKLMiniMaxH3Audio: DAC encoder + pre_block, then the BigVGAN
 * decoder as h3_audio_vae lists it (docs/spec/h3-vaes.md §4.3-§4.6). */
static h3_status_code enumerate_audio_vae(config *c, tensor_file *f, h3_status *status) {
    /* the decoder's geometry (and the hops of both sides), checked as the loader checks it */
    h3_audio_vae_config dec;
    char *dir = g_path_get_dirname(c->path);
    h3_status_code rc = h3_audio_vae_config_load(dir, &dec, status);
    g_free(dir);
    if (rc != H3_OK) return rc;
    int64_t enc_rates[16];
    int n_enc = config_array(c, "encoder_rates", enc_rates, 16);
    int64_t enc_dim = config_dim(c, "encoder_dim");
    int64_t Ld = config_dim(c, "latent_dim"), Lc = config_dim(c, "latent_channels");
    int64_t heads = config_dim(c, "num_attention_heads");
    if (!c->failed && Ld % heads != 0)
        config_error(c, "%s: latent_dim %" G_GINT64_FORMAT " is not a multiple of num_attention_heads", c->path, Ld);
    rc = config_check(c, status);
    if (rc != H3_OK) return rc;

    /* Encoder: conv, n_enc EncoderBlocks (3 residual units, Snake, strided
     * conv doubling the width), Snake, conv to latent_dim. */
    char p[160], q[192];
    wn_conv1d(f, "encoder.block.0", enc_dim, 1, 7, 1, 1.0f);
    int64_t C = enc_dim;
    for (int b = 1; b <= n_enc; b++, C *= 2) {
        for (int r = 0; r < 3; r++) {
            snprintf(p, sizeof p, "encoder.block.%d.block.%d.block", b, r);
            snprintf(q, sizeof q, "%s.0.alpha", p);
            constant(f, q, 0, 1.0f, DIMS(1, C, 1));
            snprintf(q, sizeof q, "%s.1", p);
            wn_conv1d(f, q, C, C, 7, 1, 1.0f);
            snprintf(q, sizeof q, "%s.2.alpha", p);
            constant(f, q, 0, 1.0f, DIMS(1, C, 1));
            snprintf(q, sizeof q, "%s.3", p);
            wn_conv1d(f, q, C, C, 1, 1, residual_gain);
        }
        snprintf(p, sizeof p, "encoder.block.%d.block.3.alpha", b);
        constant(f, p, 0, 1.0f, DIMS(1, C, 1));
        snprintf(p, sizeof p, "encoder.block.%d.block.4", b);
        wn_conv1d(f, p, 2 * C, C, 2 * enc_rates[b - 1], 1, 1.0f);
    }
    snprintf(p, sizeof p, "encoder.block.%d.alpha", n_enc + 1);
    constant(f, p, 0, 1.0f, DIMS(1, C, 1));
    snprintf(p, sizeof p, "encoder.block.%d", n_enc + 2);
    wn_conv1d(f, p, Ld, C, 3, 1, 1.0f);

    /* pre_block: causal attention with head-averaging to latent_channels. */
    norm(f, "pre_block.norm1", Ld, 1);
    linear(f, "pre_block.attn.qkv", 3 * Ld, Ld, 0);
    normal(f, "pre_block.attn.q_bias", 0, bias_std, DIMS(Ld));
    normal(f, "pre_block.attn.v_bias", 0, bias_std, DIMS(Ld));
    constant(f, "pre_block.attn.zero_k_bias", 1, 0.0f, DIMS(Ld));
    linear(f, "pre_block.attn.proj", Lc, Lc, 1);
    norm(f, "pre_block.norm3", Ld, 1);
    linear(f, "pre_block.proj", Lc, Ld, 1);
    norm(f, "pre_block.norm2", Lc, 1);
    norm(f, "pre_block.mlp.norm", Lc, 1);
    linear(f, "pre_block.mlp.w0", 2 * Lc, Lc, 1);
    linear(f, "pre_block.mlp.w1", 2 * Lc, Lc, 1);
    linear(f, "pre_block.mlp.w2", Lc, 2 * Lc, 1);
    conv1d(f, "mean_proj", Lc, Lc, 1);
    conv1d(f, "logs_proj", Lc, Lc, 1);

    return h3_audio_vae_decoder_tensors(&dec, draw_audio_tensor, f, status);
}

/* Qwen3VLForConditionalGeneration: the text decoder (docs/spec/h3-conditioner.md
 * §3.1) and the vision tower (§5.3). */
static h3_status_code enumerate_text_encoder(config *c, tensor_file *f, h3_status *status) {
    int64_t V = config_dim(c, "text_config.vocab_size"), H = config_dim(c, "text_config.hidden_size");
    int64_t I = config_dim(c, "text_config.intermediate_size"), layers = config_dim(c, "text_config.num_hidden_layers");
    int64_t heads = config_dim(c, "text_config.num_attention_heads");
    int64_t kv_heads = config_dim(c, "text_config.num_key_value_heads"), hd = config_dim(c, "text_config.head_dim");
    int attn_bias = config_bool(c, "text_config.attention_bias");
    int tied = config_bool(c, "tie_word_embeddings");
    int64_t vh = config_dim(c, "vision_config.hidden_size"), vi = config_dim(c, "vision_config.intermediate_size");
    int64_t depth = config_dim(c, "vision_config.depth"), v_in = config_dim(c, "vision_config.in_channels");
    int64_t patch = config_dim(c, "vision_config.patch_size");
    int64_t tpatch = config_dim(c, "vision_config.temporal_patch_size");
    int64_t merge = config_dim(c, "vision_config.spatial_merge_size");
    int64_t n_pos = config_dim(c, "vision_config.num_position_embeddings");
    int64_t v_out = config_dim(c, "vision_config.out_hidden_size");
    int64_t deepstack[16];
    int n_deep = config_dims(c, config_node(c, "vision_config.deepstack_visual_indexes"),
                             "vision_config.deepstack_visual_indexes", deepstack, 16, 1);
    const char *dtype = config_string(c, "dtype");
    h3_status_code rc = config_check(c, status);
    if (rc != H3_OK) return rc;
    if (!strcmp(dtype, "float32")) f->dtype = H3_ST_F32;
    else if (!strcmp(dtype, "bfloat16")) f->dtype = H3_ST_BF16;
    else return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: dtype \"%s\" (float32 or bfloat16)", c->path, dtype);

    if (!tied) linear(f, "lm_head", V, H, 0);
    normal(f, "model.language_model.embed_tokens.weight", 0, 1, DIMS(V, H));
    for (int64_t l = 0; l < layers; l++) {
        char p[128], q[160];
        snprintf(p, sizeof p, "model.language_model.layers.%" G_GINT64_FORMAT, l);
        norm(f, NAME(p, "input_layernorm"), H, 0);
        snprintf(q, sizeof q, "%s.self_attn", p);
        linear(f, NAME(q, "q_proj"), heads * hd, H, attn_bias);
        linear(f, NAME(q, "k_proj"), kv_heads * hd, H, attn_bias);
        linear(f, NAME(q, "v_proj"), kv_heads * hd, H, attn_bias);
        linear(f, NAME(q, "o_proj"), H, heads * hd, attn_bias);
        norm(f, NAME(q, "q_norm"), hd, 0);
        norm(f, NAME(q, "k_norm"), hd, 0);
        norm(f, NAME(p, "post_attention_layernorm"), H, 0);
        linear(f, NAME(p, "mlp.gate_proj"), I, H, 0);
        linear(f, NAME(p, "mlp.up_proj"), I, H, 0);
        linear(f, NAME(p, "mlp.down_proj"), H, I, 0);
    }
    norm(f, "model.language_model.norm", H, 0);

    int64_t merged = vh * merge * merge; /* one 2×2 window of patches */
    normal(f, "model.visual.patch_embed.proj.weight", 0, 1.0f / sqrtf((float)(v_in * tpatch * patch * patch)),
           DIMS(vh, v_in, tpatch, patch, patch));
    normal(f, "model.visual.patch_embed.proj.bias", 0, bias_std, DIMS(vh));
    normal(f, "model.visual.pos_embed.weight", 0, 0.02f, DIMS(n_pos, vh));
    for (int64_t d = 0; d < depth; d++) {
        char p[128];
        snprintf(p, sizeof p, "model.visual.blocks.%" G_GINT64_FORMAT, d);
        norm(f, NAME(p, "norm1"), vh, 1);
        linear(f, NAME(p, "attn.qkv"), 3 * vh, vh, 1);
        linear(f, NAME(p, "attn.proj"), vh, vh, 1);
        norm(f, NAME(p, "norm2"), vh, 1);
        linear(f, NAME(p, "mlp.linear_fc1"), vi, vh, 1);
        linear(f, NAME(p, "mlp.linear_fc2"), vh, vi, 1);
    }
    norm(f, "model.visual.merger.norm", vh, 1); /* the main merger norms patches, the deepstack ones windows */
    linear(f, "model.visual.merger.linear_fc1", merged, merged, 1);
    linear(f, "model.visual.merger.linear_fc2", v_out, merged, 1);
    for (int k = 0; k < n_deep; k++) {
        char p[128];
        snprintf(p, sizeof p, "model.visual.deepstack_merger_list.%d", k);
        norm(f, NAME(p, "norm"), merged, 1);
        linear(f, NAME(p, "linear_fc1"), merged, merged, 1);
        linear(f, NAME(p, "linear_fc2"), v_out, merged, 1);
    }
    return H3_OK;
}

/* ---- writing safetensors ------------------------------------------------------- */

/* safetensors' own order: larger dtypes first, then by name. Every tensor
 * then starts at a multiple of its element size. */
static gint tensor_order(gconstpointer a, gconstpointer b) {
    const tensor *x = *(const tensor *const *)a, *y = *(const tensor *const *)b;
    size_t sx = h3_st_dtype_size(x->dtype), sy = h3_st_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

static h3_status_code write_safetensors(const char *dir, const char *rel, const tensor_file *f, h3_status *status) {
    guint n = f->tensors->len;
    GPtrArray *order = g_ptr_array_new();
    for (guint i = 0; i < n; i++) g_ptr_array_add(order, &g_array_index(f->tensors, tensor, i));
    g_ptr_array_sort(order, tensor_order);
    h3_st_write_tensor *w = g_new0(h3_st_write_tensor, n);
    void **converted = g_new0(void *, n);
    for (guint i = 0; i < n; i++) {
        const tensor *t = g_ptr_array_index(order, i);
        w[i].name = t->name;
        w[i].dtype = t->dtype;
        w[i].ndim = t->ndim;
        memcpy(w[i].shape, t->shape, sizeof t->shape);
        w[i].data = t->data;
        if (t->dtype == H3_ST_BF16) {
            uint16_t *h = g_new(uint16_t, t->numel ? t->numel : 1);
            for (int64_t k = 0; k < t->numel; k++) h[k] = h3_f32_to_bf16(t->data[k]);
            w[i].data = converted[i] = h;
        }
    }
    static const char *const metadata[] = {"format", "pt", NULL};
    char *path = g_build_filename(dir, rel, NULL);
    char *parent = g_path_get_dirname(path);
    char *tmp = g_strconcat(path, ".tmp", NULL);
    h3_status_code rc = H3_OK;
    if (g_mkdir_with_parents(parent, 0755) != 0) rc = h3_fail(status, H3_ERR_IO, "%s: %s", parent, g_strerror(errno));
    if (rc == H3_OK) rc = h3_st_write(tmp, w, n, metadata, status);
    if (rc == H3_OK && g_rename(tmp, path) != 0)
        rc = h3_fail(status, H3_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, g_strerror(errno));
    if (rc != H3_OK) g_remove(tmp);
    for (guint i = 0; i < n; i++) g_free(converted[i]);
    g_free(converted);
    g_free(w);
    g_ptr_array_free(order, TRUE);
    g_free(tmp);
    g_free(parent);
    g_free(path);
    return rc;
}

static int64_t parameter_count(const tensor_file *f) {
    int64_t n = 0;
    for (guint i = 0; i < f->tensors->len; i++) {
        const tensor *t = &g_array_index(f->tensors, tensor, i);
        if (!t->buffer) n += t->numel;
    }
    return n;
}

/* ---- components ------------------------------------------------------------------ */

typedef h3_status_code (*enumerate_fn)(config *c, tensor_file *f, h3_status *status);

typedef struct component {
    const char *name;       /* subfolder */
    const char *weights;    /* safetensors file name */
    int seed_offset;        /* the golden model's seeds are base + 1/3/4/5, and 21 for transformer_ref */
    h3_st_dtype dtype;
    const char *const *f32_prefixes;
    enumerate_fn enumerate;
} component;

/* The transformer's float32 islands (docs/spec/h3-transformer.md §2.2). */
static const char *const transformer_f32[] = {"proj_in.", "audio_proj_in.", "time_embedder.", "proj_out.",
                                              "audio_proj_out.", NULL};

enum { TRANSFORMER, VAE, AUDIO_VAE, TEXT_ENCODER, TRANSFORMER_REF }; /* indices into components[] */
static const component components[] = {
    {"transformer", "diffusion_pytorch_model.safetensors", 1, H3_ST_BF16, transformer_f32, enumerate_transformer},
    {"vae", "diffusion_pytorch_model.safetensors", 3, H3_ST_F32, NULL, enumerate_vae},
    {"audio_vae", "diffusion_pytorch_model.safetensors", 4, H3_ST_F32, NULL, enumerate_audio_vae},
    {"text_encoder", "model.safetensors", 5, H3_ST_BF16, NULL, enumerate_text_encoder},
    /* the Ref2VA partition, seeded as the golden's (1021 = 1000 + 21) */
    {"transformer_ref", "diffusion_pytorch_model.safetensors", 21, H3_ST_BF16, transformer_f32, enumerate_transformer},
};
#define N_COMPONENTS G_N_ELEMENTS(components)
/* golden_meta.json describes the T2VA/FL2VA components, the first four (the
 * golden model records transformer_ref in a file of its own). */
#define N_META_COMPONENTS 4

/* Reads the component's config back, walks it, writes its safetensors. */
static h3_status_code make_weights(const char *dir, const component *comp, uint64_t seed, int64_t *params,
                                   h3_status *status) {
    char *rel = g_build_filename(comp->name, "config.json", NULL);
    config c;
    tensor_file f;
    tensor_file_init(&f, seed + (uint64_t)comp->seed_offset, comp->dtype, comp->f32_prefixes);
    h3_status_code rc = config_open(&c, dir, rel, status);
    if (rc == H3_OK) rc = comp->enumerate(&c, &f, status);
    if (rc == H3_OK) {
        char *weights = g_build_filename(comp->name, comp->weights, NULL);
        rc = write_safetensors(dir, weights, &f, status);
        g_free(weights);
    }
    *params = rc == H3_OK ? parameter_count(&f) : 0;
    tensor_file_free(&f);
    config_close(&c);
    g_free(rel);
    return rc;
}

/* ---- golden_meta.json ---------------------------------------------------------- */

/* Adds the members of a config object under key, minus the private ones
 * ("_class_name", "_diffusers_version"). */
static void add_config_copy(JsonBuilder *b, const char *key, JsonObject *src) {
    m_begin_object(b, key);
    GList *members = json_object_get_members(src);
    for (GList *l = members; l; l = l->next) {
        const char *name = l->data;
        if (name[0] == '_') continue;
        json_builder_set_member_name(b, name);
        json_builder_add_value(b, json_node_copy(json_object_get_member(src, name)));
    }
    g_list_free(members);
    json_builder_end_object(b);
}

/* Copies the listed members of src (dotted paths; the last part names the
 * member) under key. */
static void add_config_pick(JsonBuilder *b, const char *key, config *src, const char *const *paths) {
    m_begin_object(b, key);
    for (int i = 0; paths[i]; i++) {
        JsonNode *n = config_node(src, paths[i]);
        if (!n) continue;
        const char *dot = strrchr(paths[i], '.');
        json_builder_set_member_name(b, dot ? dot + 1 : paths[i]);
        json_builder_add_value(b, json_node_copy(n));
    }
    json_builder_end_object(b);
}

/* The golden model's golden_meta.json, for this model: seeds, parameter
 * counts, file checksums, the conditioner tap and a summary of the configs. */
static h3_status_code write_golden_meta(const char *dir, const profile *prof, uint64_t seed,
                                        const int64_t *params, h3_status *status) {
    config cfg[N_META_COMPONENTS];
    memset(cfg, 0, sizeof cfg);
    h3_status_code rc = H3_OK;
    for (size_t i = 0; i < N_META_COMPONENTS && rc == H3_OK; i++) {
        char *rel = g_build_filename(components[i].name, "config.json", NULL);
        rc = config_open(&cfg[i], dir, rel, status);
        g_free(rel);
    }
    config *text = &cfg[TEXT_ENCODER];
    int64_t text_layers = rc == H3_OK ? config_dim(text, "text_config.num_hidden_layers") : 0;
    if (rc == H3_OK && (rc = config_check(text, status)) == H3_OK && text_layers < TEXT_ENCODER_LAYER)
        rc = h3_fail(status, H3_ERR_INTERNAL, "the text encoder has %" G_GINT64_FORMAT " layers, the tap is %d",
                     text_layers, TEXT_ENCODER_LAYER);
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    m_string(b, "name", "tiny-h3");
    m_string(b, "profile", prof->name);
    m_bool(b, "public", 1);
    m_begin_object(b, "seeds");
    for (size_t i = 0; i < N_META_COMPONENTS; i++)
        m_int(b, components[i].name, (int64_t)(seed + (uint64_t)components[i].seed_offset));
    json_builder_end_object(b);
    m_begin_object(b, "param_counts");
    for (size_t i = 0; i < N_META_COMPONENTS; i++) m_int(b, components[i].name, params[i]);
    json_builder_end_object(b);
    m_begin_object(b, "files_sha256");
    for (size_t i = 0; i < N_META_COMPONENTS && rc == H3_OK; i++) {
        char *rel = g_build_filename(components[i].name, components[i].weights, NULL);
        char *path = g_build_filename(dir, rel, NULL);
        gchar *data = NULL;
        gsize len = 0;
        GError *err = NULL;
        if (g_file_get_contents(path, &data, &len, &err)) {
            char *sum = g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)data, len);
            m_string(b, rel, sum);
            g_free(sum);
        } else {
            rc = h3_fail(status, H3_ERR_IO, "%s", err->message);
            g_error_free(err);
        }
        g_free(data);
        g_free(path);
        g_free(rel);
    }
    json_builder_end_object(b);
    m_int(b, "text_encoder_layer", TEXT_ENCODER_LAYER);
    m_string(b, "text_encoder_layer_note",
             "hidden_states index the conditioner is tapped at (0 = embeddings, k = output of decoder layer k-1, "
             "before the final norm). The released model and diffusers use 50; a value other than 50 needs the "
             "MiniMaxH3ModularPipeline.text_encoder_layer property overridden.");
    if (rc == H3_OK) {
        static const char *const text_keys[] = {
            "text_config.vocab_size", "text_config.hidden_size", "text_config.intermediate_size",
            "text_config.num_hidden_layers", "text_config.num_attention_heads", "text_config.num_key_value_heads",
            "text_config.head_dim", "text_config.rms_norm_eps", "text_config.rope_parameters.rope_theta",
            "text_config.rope_parameters.mrope_section", "text_config.max_position_embeddings", NULL};
        static const char *const vision_keys[] = {
            "vision_config.depth", "vision_config.hidden_size", "vision_config.intermediate_size",
            "vision_config.num_heads", "vision_config.patch_size", "vision_config.temporal_patch_size",
            "vision_config.spatial_merge_size", "vision_config.num_position_embeddings",
            "vision_config.deepstack_visual_indexes", NULL};
        m_begin_object(b, "configs");
        add_config_copy(b, "transformer", cfg[TRANSFORMER].root);
        add_config_pick(b, "text", text, text_keys);
        add_config_pick(b, "vision", text, vision_keys);
        add_config_copy(b, "vae", cfg[VAE].root);
        add_config_copy(b, "audio_vae", cfg[AUDIO_VAE].root);
        m_doubles(b, "shifts", (const double[]){video_shift, audio_shift}, 2);
        m_int(b, "image_min_pixels", IMAGE_MIN_PIXELS);
        json_builder_end_object(b);
        rc = config_check(text, status);
    }
    m_begin_object(b, "dtype_policy");
    m_string(b, "transformer", "fp32: proj_in.*, audio_proj_in.*, time_embedder.*, proj_out.*, audio_proj_out.*; bf16 otherwise");
    m_string(b, "text_encoder", "bf16");
    m_string(b, "vae", "fp32");
    m_string(b, "audio_vae", "fp32");
    m_string(b, "reference_compute", "all goldens are computed in float32 on CPU from the stored (rounded) values");
    json_builder_end_object(b);
    m_begin_object(b, "tokenizer");
    m_int(b, "num_merges", 744);
    m_int(b, "base_vocab", 1000);
    m_string(b, "added_ids", "1000 + (qwen_id - 151643) for the 26 Qwen added tokens, 1026..1032 for the 7 H3 extras");
    m_int(b, "image_pad", 1012);
    m_int(b, "video_pad", 1013);
    m_int(b, "vision_start", 1009);
    m_int(b, "vision_end", 1010);
    json_builder_end_object(b);
    m_string(b, "randomization",
             "Written by h3-make-tiny-model: one torch CPU generator per component seeded with seeds[component], "
             "torch.randn drawn tensor by tensor in module order.\n"
             "    Linear / Conv weights: N(0, 1/fan_in); biases 0.02 N; embeddings N(0, 1), pos_embed 0.02 N\n"
             "    ConvTranspose (weight_norm v): N(0, stride / (C_in * kernel))\n"
             "    weight_norm: g = ||v|| over all dims but 0, so w = v; gain 0.1 on residual-branch output convs "
             "(AMP convs2, DAC residual block.3) and on conv_post\n"
             "    norm weights (RMSNorm / LayerNorm / GroupNorm) 1, norm biases 0\n"
             "    video-VAE layer scales scale1/scale2 0.5, register tokens N(0, 1), attention q/v biases 0.02 N\n"
             "    audio Snake alpha 1, SnakeBeta alpha/beta (log space) 0; buffers: Kaiser-sinc filters, zero_k_bias 0");
    json_builder_end_object(b);
    if (rc == H3_OK) rc = write_json(dir, "golden_meta.json", b, 1, status);
    else g_object_unref(b);
    for (size_t i = 0; i < N_META_COMPONENTS; i++) config_close(&cfg[i]);
    return rc;
}

/* ---- main ----------------------------------------------------------------------- */

static h3_status_code make_model(const char *dir, const profile *prof, uint64_t seed, h3_status *status) {
    if (g_mkdir_with_parents(dir, 0755) != 0)
        return h3_fail(status, H3_ERR_IO, "%s: %s", dir, g_strerror(errno));
    h3_status_code rc = write_transformer_config(dir, "transformer/config.json", status);
    if (rc == H3_OK) rc = write_transformer_config(dir, "transformer_ref/config.json", status);
    if (rc == H3_OK) rc = write_vae_config(dir, status);
    if (rc == H3_OK) rc = write_audio_vae_config(dir, &prof->audio, status);
    if (rc == H3_OK) rc = write_text_encoder_configs(dir, status);
    if (rc == H3_OK) rc = write_scheduler_config(dir, "scheduler/scheduler_config.json", video_shift, status);
    if (rc == H3_OK) rc = write_scheduler_config(dir, "audio_scheduler/scheduler_config.json", audio_shift, status);
    if (rc == H3_OK) rc = write_processor_config(dir, 0, status);
    if (rc == H3_OK) rc = write_processor_config(dir, 1, status);
    if (rc == H3_OK) rc = write_tokenizer(dir, status);
    if (rc == H3_OK) rc = write_model_index(dir, "model_index.json", 0, status);
    if (rc == H3_OK) rc = write_model_index(dir, "modular_model_index.json", 1, status);
    int64_t params[N_COMPONENTS] = {0};
    for (size_t i = 0; i < N_COMPONENTS && rc == H3_OK; i++)
        rc = make_weights(dir, &components[i], seed, &params[i], status);
    if (rc == H3_OK) rc = write_golden_meta(dir, prof, seed, params, status);
    /* Renames inside subfolders do not touch DIR itself; the build tracks it. */
    if (rc == H3_OK && g_utime(dir, NULL) != 0) rc = h3_fail(status, H3_ERR_IO, "%s: %s", dir, g_strerror(errno));
    return rc;
}

static void usage(FILE *f) {
    fprintf(f, "usage: " PROGRAM " --output DIR [--seed N] [--profile golden|default] [--lora FILE]\n"
               "writes a tiny random MiniMax-H3 in the diffusers layout into DIR\n"
               "  --output DIR      output directory (created; files in it are overwritten)\n"
               "  --seed N          0..2^32-1, default %d (the model gst-h3 embeds)\n"
               "  --profile NAME    golden: the configs of tests/data/models/tiny-h3;\n"
               "                    default: the same with a 32 kHz audio VAE (hop 800)\n"
               "  --lora FILE       also write a small LoRA (PEFT, rank 4) for the model's transformer\n",
            DEFAULT_SEED);
}

static int bad_argument(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
static int bad_argument(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROGRAM ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see --help)\n");
    va_end(ap);
    return 2;
}

/* tools/h3-tiny-lora.c: the --lora file. */
h3_status_code h3_tiny_lora_write(const char *dir, const char *path, uint64_t seed, h3_status *status);

int main(int argc, char **argv) {
    const char *output = NULL, *profile_name = "default", *lora = NULL;
    uint64_t seed = DEFAULT_SEED;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        const char *options[] = {"--output", "--seed", "--profile", "--lora"};
        int which = -1;
        for (int k = 0; k < 4 && which < 0; k++) {
            size_t len = strlen(options[k]);
            if (!strcmp(a, options[k])) {
                if (i + 1 >= argc) return bad_argument("%s needs a value", a);
                which = k, v = argv[++i];
            } else if (!strncmp(a, options[k], len) && a[len] == '=') {
                which = k, v = a + len + 1;
            }
        }
        if (which < 0) return bad_argument("unknown argument '%s'", a);
        if (which == 0) {
            if (!*v) return bad_argument("--output needs a directory");
            output = v;
        } else if (which == 1) {
            guint64 n;
            if (!g_ascii_string_to_unsigned(v, 10, 0, G_MAXUINT32, &n, NULL))
                return bad_argument("--seed '%s' is not an integer in 0..%u", v, G_MAXUINT32);
            seed = n;
        } else if (which == 3) {
            if (!*v) return bad_argument("--lora needs a file name");
            lora = v;
        } else {
            profile_name = v;
        }
    }
    if (!output) return bad_argument("--output DIR is required");
    const profile *prof = NULL;
    for (size_t k = 0; k < G_N_ELEMENTS(profiles); k++)
        if (!strcmp(profiles[k].name, profile_name)) prof = &profiles[k];
    if (!prof) return bad_argument("unknown --profile '%s' (golden or default)", profile_name);

    h3_status st = {0};
    if (make_model(output, prof, seed, &st) != H3_OK || (lora && h3_tiny_lora_write(output, lora, seed, &st) != H3_OK)) {
        fprintf(stderr, PROGRAM ": %s\n", st.message);
        return 1;
    }
    return 0;
}
