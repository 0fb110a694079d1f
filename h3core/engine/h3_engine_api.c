/* h3_engine_api.c - the public calls that join the open (h3_engine.c), the
 * job (h3_generate.c) and the memory plan (h3_memory_plan.c). The memory
 * plan opens measuring engines and runs jobs on them, so it sits above
 * both; these calls sit above it, and nothing in engine/ calls them:
 *
 *   h3_engine_open      begin, the memory plan's check at open, load
 *   h3_engine_prepare   the job made once, then run on the twin
 *   h3_engine_validate  the job made (no twin), its plan, freed
 *   h3_engine_generate  prepare, run, free */
#include "engine/h3_engine_impl.h"

h3_status_code h3_engine_open(const h3_engine_options *o, h3_engine **out, h3_status *status) {
    *out = NULL;
    h3_engine *e = NULL;
    h3_status_code rc = h3_engine_begin(o, NULL, &e, status);
    if (rc != H3_OK) return rc;
    rc = h3_memory_check_open(e, o, status); /* before anything loads: it decides memory=auto */
    if (rc == H3_OK) rc = h3_engine_load(e, o, status);
    if (rc == H3_OK && o->loras && o->loras[0]) rc = h3_engine_set_loras(e, o->loras, status);
    if (rc != H3_OK) {
        h3_engine_close(e);
        return rc;
    }
    *out = e;
    return H3_OK;
}

h3_status_code h3_engine_prepare(h3_engine *e, const h3_request *r, h3_job **out, h3_status *status) {
    if (!out) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_engine_prepare: no job to fill");
    *out = NULL;
    if (!e) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_engine_prepare: no engine");
    g_atomic_int_set(&e->cancel, 0); /* a generation starts here */
    h3_job *job = NULL;
    h3_status_code rc = h3_job_make(e, r, &job, status);
    if (rc == H3_OK) rc = h3_memory_check_request(e, job, status); /* what does not fit fails here */
    if (rc != H3_OK) {
        h3_job_free(job);
        return rc;
    }
    *out = job;
    return H3_OK;
}

h3_status_code h3_engine_validate(h3_engine *e, const h3_request *r, h3_plan *p, h3_status *status) {
    h3_job *job = NULL;
    h3_status_code rc = h3_job_make(e, r, &job, status);
    if (rc == H3_OK) *p = job->plan;
    h3_job_free(job);
    return rc;
}

h3_status_code h3_engine_generate(h3_engine *e, const h3_request *r, const h3_callbacks *cb, h3_status *status) {
    h3_job *job = NULL;
    h3_status_code rc = h3_engine_prepare(e, r, &job, status);
    if (rc == H3_OK) rc = h3_engine_run(e, job, cb, status);
    h3_job_free(job);
    return rc;
}
