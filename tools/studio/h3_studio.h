/* h3_studio.h - what the files of h3-studio share.
 *
 * h3-studio is one process serving a page and a JSON API shaped like the
 * peers' /v1/videos over one shared engine: the jobs (h3_studio_jobs.c)
 * run one at a time through one h3videosrc pipeline kept across jobs (so
 * the model loads once, on the first), each into an MP4 in the data
 * folder; the API (h3_studio_api.c) turns requests into jobs through the
 * request schema and jobs into JSON; h3-studio.c is the server (routes,
 * limits, the page). */
#ifndef H3_STUDIO_H
#define H3_STUDIO_H

#include <glib.h>
#include <json-glib/json-glib.h>

#include "h3.h"

G_BEGIN_DECLS

/* The served model's name in the API ("model" of a video). */
#define H3_STUDIO_MODEL "minimax-h3"

typedef enum
{
  H3_JOB_QUEUED,
  H3_JOB_IN_PROGRESS,
  H3_JOB_COMPLETED,
  H3_JOB_FAILED
} H3JobStatus;

/* What a job generates: the request's content rows (h3_params with
 * H3_PARAM_CONTENT), the prompt owned, and an optional keyframe upload. */
typedef struct
{
  h3_request request;           /* prompt owned; images unset */
  GBytes *keyframe;             /* PNG or JPEG bytes, or NULL */
} H3JobSpec;

typedef struct
{
  gchar *id;                    /* "video_<16 hex>" */
  H3JobSpec spec;
  H3JobStatus status;
  gint progress;                /* 0..100 */
  gint64 created_at, completed_at;      /* unix seconds; completed 0: not yet */
  guint64 seq;                  /* submission order (created_at has a second's grain) */
  gchar *error_code, *error_message;    /* failed: why */
  gchar *path;                  /* the MP4 (completed), the studio's own name */
  guint64 bytes;                /* its size */
  gboolean cancel;              /* asked to stop */
  gint refs;
} H3Job;

typedef struct
{
  const gchar *data_dir;        /* where the MP4s and uploads go */
  const gchar *model_dir;       /* NULL: the embedded tiny model */
  const gchar *extra;           /* more h3videosrc properties ("compute=cpu"), or NULL */
  guint max_queue;              /* queued jobs at most (429 past it) */
  guint64 max_storage;          /* bytes of MP4s kept at most (507 past it) */
} H3StudioConfig;

typedef struct _H3Studio H3Studio;

/* ---- h3_studio_jobs.c ---------------------------------------------------- */

H3Studio *h3_studio_new (const H3StudioConfig * config, GError ** error);
void h3_studio_free (H3Studio * studio);
/* Queues a job for spec (taken over on success): the job with a ref, or
 * NULL with *http_status (429: the queue is full; 507: the storage quota
 * is used up) and *why set. */
H3Job *h3_studio_submit (H3Studio * studio, H3JobSpec * spec,
    guint * http_status, gchar ** why);
/* The job with a ref, or NULL. */
H3Job *h3_studio_lookup (H3Studio * studio, const gchar * id);
/* Every job with a ref, newest first. */
GPtrArray *h3_studio_list (H3Studio * studio);
/* Stops a queued or running job (it ends failed, code "cancelled"). */
void h3_studio_cancel (H3Studio * studio, H3Job * job);
/* Cancels, forgets the job and deletes its files. */
void h3_studio_delete (H3Studio * studio, H3Job * job);
/* A consistent copy of a job's changing fields, under the store's lock. */
void h3_studio_snapshot (H3Studio * studio, const H3Job * job, H3Job * copy);
void h3_job_unref (H3Job * job);
void h3_job_spec_clear (H3JobSpec * spec);

/* ---- h3_studio_api.c ----------------------------------------------------- */

/* A create request, JSON or form fields (name -> text), into spec; FALSE
 * with *param (the field at fault, or NULL) and *why. */
gboolean h3_studio_spec_from_json (JsonNode * root, H3JobSpec * spec,
    gchar ** param, gchar ** why);
gboolean h3_studio_spec_from_fields (GHashTable * fields, H3JobSpec * spec,
    gchar ** param, gchar ** why);
/* The API's video object of a job snapshot. */
JsonNode *h3_studio_job_json (const H3Job * job);
/* {"error": {"message", "type", "param", "code"}} */
gchar *h3_studio_error_json (const gchar * message, const gchar * type,
    const gchar * param, const gchar * code);

G_END_DECLS
#endif /* H3_STUDIO_H */
