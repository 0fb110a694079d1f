/* h3_engine_lora.c - user LoRAs on an open engine (h3.h:
 * h3_engine_set_loras): the `lora` items parsed by the schema's grammar
 * (h3_lora_spec_parse), each file opened once against the loaded
 * transformer (a file of the set in force is reused by its path), and the
 * set fused on every rank by h3_dit_set_loras, which changes the weights
 * by difference and keeps the previous set when it fails. A rank that fails
 * after others succeeded would leave the ranks disagreeing, so the others
 * are set back to the previous set: the whole engine keeps it.
 *
 * Between generations only: the engine's busy flag (h3_engine_run takes it
 * too) refuses a set while a generation runs, and a generation while a set
 * runs. The measuring twin is left as it is: a LoRA changes no shape. */
#include "engine/h3_engine_impl.h"
#include "model/h3_lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lora_job {
    h3_engine *e;
    const h3_lora_use *uses;
    int n;
} lora_job;

static h3_status_code set_rank(const h3_tp *tp, void *user, h3_status *status) {
    const lora_job *j = user;
    return h3_dit_set_loras(j->e->ranks[tp->rank].dit, j->uses, j->n, status);
}

static h3_status_code set_all(h3_engine *e, const h3_lora_use *uses, int n, h3_status *status) {
    lora_job j = {e, uses, n};
    if (e->team) return h3_tp_team_run(e->team, set_rank, &j, status);
    h3_tp single = H3_TP_SINGLE;
    return set_rank(&single, &j, status);
}

/* The set in force on rank 0 (every rank holds the same), with references. */
static int current_set(const h3_engine *e, h3_lora_use *out) {
    const h3_lora_use *uses = NULL;
    int n = h3_dit_get_loras(e->dit, &uses);
    for (int i = 0; i < n; i++) out[i] = (h3_lora_use){h3_lora_ref(uses[i].lora), uses[i].strength};
    return n;
}

/* The file at `path`: the one of the set in force with that path, or opened. */
static h3_status_code lora_for(h3_engine *e, const h3_lora_use *old, int n_old, const char *path, h3_lora **out,
                               h3_status *status) {
    for (int i = 0; i < n_old; i++)
        if (strcmp(h3_lora_path(old[i].lora), path) == 0) {
            *out = h3_lora_ref(old[i].lora);
            return H3_OK;
        }
    return h3_lora_open(path, h3_dit_get_config(e->dit), out, status); /* its messages name the file */
}

/* stats.loras: "PATH:STRENGTH, ..." of the set in force. */
static void describe(h3_engine *e, const h3_lora_use *uses, int n) {
    char text[sizeof e->stats.loras] = "";
    for (int i = 0; i < n; i++) {
        char item[sizeof text];
        snprintf(item, sizeof item, "%s%s:%g", i ? ", " : "", h3_lora_path(uses[i].lora), (double)uses[i].strength);
        if (strlen(text) + strlen(item) + 4 >= sizeof text) {
            g_strlcat(text, ", ...", sizeof text);
            break;
        }
        g_strlcat(text, item, sizeof text);
    }
    g_mutex_lock(&e->lock);
    g_strlcpy(e->stats.loras, text, sizeof e->stats.loras);
    g_mutex_unlock(&e->lock);
}

static void unref_all(h3_lora_use *uses, int n) {
    for (int i = 0; i < n; i++) h3_lora_unref(uses[i].lora);
}

#define MAX_ENGINE_LORAS 32

/* The set asked for is the set in force (the same paths and strengths, in
 * order): nothing to fuse, so a front end may call set_loras before every
 * clip at no cost. */
static int unchanged(const h3_lora_use *old, int n_old, const char *const *specs, int n) {
    if (n != n_old) return 0;
    int same = 1;
    for (int i = 0; same && i < n; i++) {
        char *path = NULL;
        float strength = 0;
        same = h3_lora_spec_parse(specs[i], &path, &strength, NULL) == H3_OK &&
               strcmp(path, h3_lora_path(old[i].lora)) == 0 && strength == old[i].strength;
        free(path);
    }
    return same;
}

/* The items checked as the options' row checks them (the grammar, a path
 * listed twice, precision=fp8), then opened and fused. */
static h3_status_code set_loras(h3_engine *e, const char *const *specs, h3_status *status) {
    h3_engine_options o = {0};
    o.loras = specs;
    o.precision = e->precision;
    const h3_param *row = h3_param_find(NULL, "lora");
    h3_status_code rc = row->check(NULL, &o, status);
    if (rc != H3_OK) return rc;
    int n = 0;
    while (specs && specs[n]) n++;
    if (n > MAX_ENGINE_LORAS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "lora: %d LoRAs, at most %d", n, MAX_ENGINE_LORAS);
    h3_lora_use old[MAX_ENGINE_LORAS], uses[MAX_ENGINE_LORAS];
    int n_old = current_set(e, old), n_new = 0;
    if (unchanged(old, n_old, specs, n)) {
        unref_all(old, n_old);
        return H3_OK;
    }
    for (; rc == H3_OK && n_new < n; n_new++) {
        char *path = NULL;
        float strength = 1.0f;
        rc = h3_lora_spec_parse(specs[n_new], &path, &strength, status);
        if (rc == H3_OK) rc = lora_for(e, old, n_old, path, &uses[n_new].lora, status);
        uses[n_new].strength = strength;
        free(path);
        if (rc != H3_OK) break;
    }
    if (rc == H3_OK) rc = set_all(e, uses, n, status);
    if (rc != H3_OK && e->n_ranks > 1) {
        /* the ranks that took the new set go back to the old (the others kept it) */
        h3_status ignored = {0};
        if (set_all(e, old, n_old, &ignored) != H3_OK)
            h3_engine_log(e, H3_LOG_ERROR, "lora: the ranks could not all go back to the previous LoRAs: %s",
                          ignored.message);
    }
    if (rc == H3_OK) {
        describe(e, uses, n);
        h3_engine_log(e, H3_LOG_INFO, "lora: %s", n ? e->stats.loras : "none");
    }
    unref_all(uses, n_new);
    unref_all(old, n_old);
    return rc;
}

h3_status_code h3_engine_set_loras(h3_engine *e, const char *const *specs, h3_status *status) {
    if (!e) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_engine_set_loras: no engine");
    if (!g_atomic_int_compare_and_exchange(&e->busy, 0, 1))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "lora: a generation is running on this engine; LoRAs change between clips");
    h3_status_code rc = set_loras(e, specs, status);
    g_atomic_int_set(&e->busy, 0);
    return rc;
}
