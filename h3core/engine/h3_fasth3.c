/* h3_fasth3.c - the engine's FastH3 rules (docs/spec/fasth3-vsa.md §1, §2):
 * the adapter opened, checked against the model and bound to the
 * transformer before anything costly loads; the attention mode a request
 * asks for against the adapter; the sigma ladders and their forwards. */
#include "engine/h3_engine_impl.h"

#include <glib.h>
#include <json-glib/json-glib.h>

#include "base/h3_json.h"
#include "base/h3_safetensors.h"

/* The identity an adapter's base_model must name: the transformer entry's
 * pretrained_model_name_or_path in a diffusers model_index.json. The
 * native FL2VA/ partition records none; it is published only as the
 * release, MiniMaxAI/MiniMax-H3, and so is a diffusers folder whose index
 * files name none (or that has none). An index file that is there but
 * cannot be read (a FIFO, a directory, not JSON) is an error naming it,
 * never the release's name in its place. */
#define H3_MODEL_INDEX_MAX_BYTES (64u << 20)

static char *transformer_source(JsonParser *p) {
    JsonNode *root = json_parser_get_root(p);
    JsonObject *o = root && JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
    JsonNode *t = o ? json_object_get_member(o, "transformer") : NULL;
    JsonArray *a = t && JSON_NODE_HOLDS_ARRAY(t) ? json_node_get_array(t) : NULL;
    JsonNode *spec = a && json_array_get_length(a) > 2 ? json_array_get_element(a, 2) : NULL;
    JsonObject *so = spec && JSON_NODE_HOLDS_OBJECT(spec) ? json_node_get_object(spec) : NULL;
    JsonNode *name = so ? json_object_get_member(so, "pretrained_model_name_or_path") : NULL;
    if (name && JSON_NODE_HOLDS_VALUE(name) && json_node_get_value_type(name) == G_TYPE_STRING)
        return g_strdup(json_node_get_string(name));
    return NULL;
}

/* *id from one index file, NULL where it names none; a missing file is no error. */
static h3_status_code index_model_id(const char *path, char **id, h3_status *status) {
    JsonParser *p;
    h3_status_code rc = h3_json_read_file(path, H3_MODEL_INDEX_MAX_BYTES, &p, status);
    if (rc == H3_ERR_NOT_FOUND) return H3_OK;
    if (rc != H3_OK) return rc;
    *id = transformer_source(p);
    g_object_unref(p);
    return H3_OK;
}

static h3_status_code model_id(const h3_engine *e, char **id, h3_status *status) {
    static const char *const index_files[] = {"model_index.json", "modular_model_index.json"};
    *id = NULL;
    h3_status_code rc = H3_OK;
    for (size_t i = 0; rc == H3_OK && !*id && !e->native_layout && i < G_N_ELEMENTS(index_files); i++) {
        char *path = g_build_filename(e->model_dir, index_files[i], NULL);
        rc = index_model_id(path, id, status);
        g_free(path);
    }
    if (rc == H3_OK && !*id) *id = g_strdup("MiniMaxAI/MiniMax-H3");
    return rc;
}

/* Every key against the transformer's header before anything costly loads
 * (the ranks' loaders find the adapter bound and reuse the binding). */
static h3_status_code bind_adapter(h3_engine *e, h3_status *status) {
    h3_dit_config cfg;
    h3_checkpoint *ckpt = NULL;
    h3_dit_checkpoint_layout layout;
    h3_status_code rc = h3_dit_config_load(e->transformer_dir, &cfg, status);
    if (rc == H3_OK) rc = h3_checkpoint_open(e->transformer_dir, &ckpt, status);
    if (rc == H3_OK) rc = h3_dit_detect_layout(ckpt, &layout, status);
    if (rc == H3_OK) rc = h3_adapter_bind(e->adapter, ckpt, layout, &cfg, status);
    h3_checkpoint_close(ckpt);
    return rc;
}

h3_status_code h3_fasth3_open_adapter(h3_engine *e, const char *path, h3_status *status) {
    h3_status_code rc = h3_adapter_open(path, &e->adapter, status);
    if (rc != H3_OK) return rc;
    e->has_adapter = 1;
    e->adapter_path = g_strdup(h3_adapter_path(e->adapter));
    e->adapter_vsa = h3_adapter_has_vsa_gates(e->adapter);
    e->contract = *h3_adapter_get_contract(e->adapter);
    char *id;
    rc = model_id(e, &id, status);
    if (rc == H3_OK) rc = h3_adapter_check_base_model(e->adapter, id, e->model_dir, status);
    g_free(id);
    if (rc == H3_OK) rc = bind_adapter(e, status);
    if (rc == H3_OK)
        h3_engine_log(e, H3_LOG_INFO, "FastH3 adapter %s (%s, rank %d, %s)", e->adapter_path,
                   h3_adapter_finetuned_model(e->adapter), h3_adapter_rank(e->adapter),
                   e->adapter_vsa ? "VSA gates: backend=vsa" : "dense: backend=fa");
    return rc;
}

/* Forwards of a FastH3 ladder: the release's dmd_denoising_steps or 4. */
static int fasth3_forwards(const h3_engine *e, h3_fasth3_ladder ladder) {
    if (ladder == H3_LADDER_RELEASE && e->contract.num_dmd_steps > 0) return e->contract.num_dmd_steps;
    return H3_FASTH3_LADDER_POINTS - 1;
}

/* The attention mode must match the adapter (docs/spec/fasth3-vsa.md §1.4: VSA gates only make
 * sense under VSA-H3, and dense attention is no substitute for a VSA
 * student); a FastH3 student runs exactly its ladder's forwards. Sets the
 * default number of forwards. */
h3_status_code h3_fasth3_check_request(const h3_engine *e, const h3_request *r, int *forwards,
                                       h3_status *status) {
    if (r->attention != H3_ATTENTION_DENSE && r->attention != H3_ATTENTION_VSA)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "unknown attention mode %d", (int)r->attention);
    if (r->ladder != H3_LADDER_RELEASE && r->ladder != H3_LADDER_A && r->ladder != H3_LADDER_B)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "unknown FastH3 ladder %d", (int)r->ladder);
    if (!e->has_adapter) {
        if (r->attention == H3_ATTENTION_VSA)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "backend=vsa runs VSA-H3 with the gates of a FastH3 VSA "
                           "adapter: set adapter-location to a vsa-datafree adapter, or use backend=fa");
        if (r->ladder != H3_LADDER_RELEASE)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "a FastH3 ladder needs a FastH3 adapter (adapter-location)");
        return H3_OK;
    }
    if (r->attention == H3_ATTENTION_DENSE && e->adapter_vsa)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "backend=fa: adapter '%s' is a FastH3 VSA adapter (its "
                       "to_gate_compress gates were trained under VSA-H3; dense attention is not a substitute): use "
                       "backend=vsa", e->adapter_path);
    if (r->attention == H3_ATTENTION_VSA && !e->adapter_vsa)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "backend=vsa: adapter '%s' is a dense FastH3 adapter (no "
                       "to_gate_compress gates): use backend=fa, or a vsa-datafree adapter", e->adapter_path);
    if (r->attention == H3_ATTENTION_VSA) {
        /* vsa-sparsity's range is the schema's, checked by h3_request_check
         * before this. No backend yet: h3_engine_preflight, before the load. */
        if (e->backend && !h3_backend_has_vsa_attention(e->backend))
            return h3_fail(status, H3_ERR_UNSUPPORTED, "backend=vsa: the %s backend has no VSA-H3 kernel yet",
                           h3_backend_name(e->backend));
    }
    *forwards = fasth3_forwards(e, r->ladder);
    if (r->steps != 0 && r->steps != *forwards)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "steps %d: the FastH3 student is distilled for exactly %d "
                       "forwards over its sigma ladder; use steps 0 or %d", r->steps, *forwards, *forwards);
    return H3_OK;
}

/* The sigma grids of a request: the base model's linspace grid of steps + 1
 * points, or a FastH3 ladder (ladder A is that grid at 5 points). Shifts
 * from the adapter's contract when it states them. */
h3_status_code h3_fasth3_sigma_grids(const h3_engine *e, const h3_request *r, int steps, h3_sigma_grid *video,
                                     h3_sigma_grid *audio, h3_status *status) {
    h3_status_code rc;
    if (!e->has_adapter || r->ladder == H3_LADDER_A) {
        rc = h3_sigma_grid_make(steps + 1, e->video_shift, video, status);
        if (rc == H3_OK) rc = h3_sigma_grid_make(steps + 1, e->audio_shift, audio, status);
        return rc;
    }
    float vs = e->contract.video_shift > 0 ? (float)e->contract.video_shift : e->video_shift;
    float as = e->contract.audio_shift > 0 ? (float)e->contract.audio_shift : e->audio_shift;
    if (r->ladder == H3_LADDER_RELEASE && e->contract.num_dmd_steps > 0) {
        rc = h3_sigma_grid_from_dmd_steps(e->contract.dmd_steps, e->contract.num_dmd_steps, vs, video, status);
        if (rc == H3_OK) rc = h3_sigma_grid_from_dmd_steps(e->contract.dmd_steps, e->contract.num_dmd_steps, as, audio, status);
        return rc;
    }
    rc = h3_sigma_grid_from_base(h3_fasth3_ladder_b, H3_FASTH3_LADDER_POINTS, vs, video, status);
    if (rc == H3_OK) rc = h3_sigma_grid_from_base(h3_fasth3_ladder_b, H3_FASTH3_LADDER_POINTS, as, audio, status);
    return rc;
}

/* Main-block attention of this request: VSA-H3 (64-token tiles) or dense. */
h3_status_code h3_fasth3_set_attention(h3_dit *dit, const h3_request *r, h3_status *status) {
    if (r->attention != H3_ATTENTION_VSA) return h3_dit_set_vsa(dit, NULL, status);
    h3_vsa_params p = h3_vsa_params_default();
    p.sparsity = r->vsa_sparsity;
    return h3_dit_set_vsa(dit, &p, status);
}
