/* gsth3videosrc-engine.c - the engines of h3videosrc, shared across
 * elements and pipelines of a process.
 *
 * A model takes seconds to minutes to load and gigabytes to keep, so every
 * element whose model settings are the same (gst_h3_settings_engine_key:
 * model directory, adapter, compute, devices, load format, dummy adapter)
 * uses one engine, as NNStreamer's shared-tensor-filter-key does. An entry
 * is reference counted: each element holds one reference from its first
 * run until it is freed (or its model settings change), and the engine is
 * closed with the last one. engine-cache=false gives an element an entry of
 * its own, outside the table.
 *
 *   lookup     the entry for a key, made (and to be loaded by the caller)
 *              when there is none;
 *   load       the one loader opens the engine, then wakes the others;
 *   wait       the others wait for that load, cancellably;
 *   begin/end  one generation at a time per engine (h3_engine_generate is
 *              not re-entrant): the others wait for their turn, cancellably;
 *              a waiter is told whom it waits for (the loader's or the
 *              generating element's name), so it can say so on the bus;
 *   cancel     h3_engine_cancel only when the caller is the one generating,
 *              so that stopping one pipeline never stops another.
 *
 * Every wait polls the caller's cancel flag (the same flag the engine polls
 * through h3_callbacks.cancel_flag); gst_h3_engine_wake makes the waiters
 * look at it again. One mutex and one condition serve the whole table: the
 * waits are rare and short next to a generation. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gsth3videosrc-private.h"
#include "gsth3videosrc-engine.h"

struct _GstH3Engine
{
  gchar *key;
  gint refcount;                /* cache_lock */
  gboolean in_table;            /* cache_lock */
  gboolean loading;             /* cache_lock: the loader is in h3_engine_open */
  gboolean failed;              /* cache_lock: the load failed, see load_status */
  h3_status load_status;
  h3_engine *engine;            /* set once, by the loader */
  gpointer owner;               /* cache_lock: whose generation runs, or NULL */
  gchar *holder;                /* cache_lock: the name of the loader, then of the owner */
  gchar *time_shape;            /* cache_lock: the shape of the last timed generation */
  gdouble time_seconds;         /*   and how long it took (live latency estimates) */
  /* Where the engine's log lines go: the element loading or generating
   * (alive while it does, since its dispose joins its worker), or none. */
  GstObject *log_object;        /* atomic */
};

static GMutex cache_lock;
static GCond cache_cond;
static GHashTable *cache_table; /* key -> GstH3Engine, not owned */

static gboolean
cancelled (const volatile gint * flag)
{
  return flag && g_atomic_int_get (flag);
}

GstH3Engine *
gst_h3_engine_lookup (const gchar * key, gboolean shared, gboolean * must_load)
{
  GstH3Engine *e = NULL;

  g_mutex_lock (&cache_lock);
  if (shared && cache_table)
    e = g_hash_table_lookup (cache_table, key);
  if (e) {
    e->refcount++;
    *must_load = FALSE;
  } else {
    e = g_new0 (GstH3Engine, 1);
    e->key = g_strdup (key);
    e->refcount = 1;
    e->loading = TRUE;
    if (shared) {
      if (!cache_table)
        cache_table = g_hash_table_new (g_str_hash, g_str_equal);
      g_hash_table_insert (cache_table, e->key, e);
      e->in_table = TRUE;
    }
    *must_load = TRUE;
  }
  g_mutex_unlock (&cache_lock);
  return e;
}

/* Removes an entry from the table, so that the next lookup makes a new
 * one. cache_lock held. */
static void
table_remove (GstH3Engine * e)
{
  if (e->in_table && g_hash_table_lookup (cache_table, e->key) == e)
    g_hash_table_remove (cache_table, e->key);
  e->in_table = FALSE;
}

static void
engine_log (void *opaque, h3_log_level level, const char *message)
{
  GstH3Engine *e = opaque;
  GstObject *obj = g_atomic_pointer_get (&e->log_object);

  switch (level) {
    case H3_LOG_ERROR:
      GST_ERROR_OBJECT (obj, "h3core: %s", message);
      break;
    case H3_LOG_WARNING:
      GST_WARNING_OBJECT (obj, "h3core: %s", message);
      break;
    case H3_LOG_INFO:
      GST_INFO_OBJECT (obj, "h3core: %s", message);
      break;
    default:
      GST_DEBUG_OBJECT (obj, "h3core: %s", message);
      break;
  }
}

gboolean
gst_h3_engine_load (GstH3Engine * e, GstObject * loader,
    h3_engine_options * opt, h3_status * st)
{
  h3_engine *engine = NULL;
  h3_status_code rc;

  opt->log = engine_log;
  opt->log_opaque = e;
  g_atomic_pointer_set (&e->log_object, loader);
  g_mutex_lock (&cache_lock);
  g_free (e->holder);
  e->holder = gst_object_get_name (loader);
  g_mutex_unlock (&cache_lock);
  memset (st, 0, sizeof *st);
  rc = h3_engine_open (opt, &engine, st);
  g_atomic_pointer_set (&e->log_object, NULL);

  g_mutex_lock (&cache_lock);
  e->loading = FALSE;
  if (rc == H3_OK) {
    e->engine = engine;
  } else {
    e->failed = TRUE;
    e->load_status = *st;
    /* Whoever asks next loads again (the files may have been fixed). */
    table_remove (e);
  }
  g_cond_broadcast (&cache_cond);
  g_mutex_unlock (&cache_lock);
  return rc == H3_OK;
}

/* Tells on_wait (once, without the table's lock: it posts messages) whom
 * the caller waits for. Called with cache_lock held; returns with it held. */
static void
notify_wait (GstH3Engine * e, GstH3WaitFunc on_wait, gpointer data)
{
  gchar *holder;

  if (!on_wait)
    return;
  holder = g_strdup (e->holder ? e->holder : "another element");
  g_mutex_unlock (&cache_lock);
  on_wait (data, holder);
  g_free (holder);
  g_mutex_lock (&cache_lock);
}

gboolean
gst_h3_engine_wait_loaded (GstH3Engine * e, const volatile gint * cancel,
    GstH3WaitFunc on_wait, gpointer data, h3_status * st)
{
  gboolean ok;

  g_mutex_lock (&cache_lock);
  if (e->loading && !cancelled (cancel))
    notify_wait (e, on_wait, data);
  while (e->loading && !cancelled (cancel))
    g_cond_wait (&cache_cond, &cache_lock);
  if (e->loading) {
    h3_fail (st, H3_ERR_CANCELLED, "stopped while waiting for the model");
    ok = FALSE;
  } else if (e->failed) {
    *st = e->load_status;
    ok = FALSE;
  } else {
    ok = TRUE;
  }
  g_mutex_unlock (&cache_lock);
  return ok;
}

gboolean
gst_h3_engine_begin (GstH3Engine * e, GstObject * owner,
    const volatile gint * cancel, GstH3WaitFunc on_wait, gpointer data)
{
  gboolean ok, waited = FALSE;

  g_mutex_lock (&cache_lock);
  while (e->owner && !cancelled (cancel)) {
    if (!waited) {
      GST_INFO_OBJECT (owner, "the shared engine is generating for %"
          GST_PTR_FORMAT ": waiting for its turn", e->owner);
      waited = TRUE;
      notify_wait (e, on_wait, data);
      continue;                 /* the lock was released: look again */
    }
    g_cond_wait (&cache_cond, &cache_lock);
  }
  ok = !cancelled (cancel);
  if (ok) {
    e->owner = owner;
    g_free (e->holder);
    e->holder = gst_object_get_name (owner);
    g_atomic_pointer_set (&e->log_object, owner);
  }
  g_mutex_unlock (&cache_lock);
  return ok;
}

void
gst_h3_engine_end (GstH3Engine * e, GstObject * owner)
{
  g_mutex_lock (&cache_lock);
  if (e->owner == owner) {
    e->owner = NULL;
    g_atomic_pointer_set (&e->log_object, NULL);
  }
  g_cond_broadcast (&cache_cond);
  g_mutex_unlock (&cache_lock);
}

void
gst_h3_engine_cancel (GstH3Engine * e, GstObject * owner)
{
  g_mutex_lock (&cache_lock);
  if (e->owner == owner && e->engine)
    h3_engine_cancel (e->engine);
  g_mutex_unlock (&cache_lock);
}

void
gst_h3_engine_wake (void)
{
  g_mutex_lock (&cache_lock);
  g_cond_broadcast (&cache_cond);
  g_mutex_unlock (&cache_lock);
}

/* How long the last generation of a shape (gst_h3_settings_shape) took on
 * the engine, for the live latency estimates of every element sharing it. */
void
gst_h3_engine_note_time (GstH3Engine * e, const gchar * shape,
    gdouble seconds)
{
  g_mutex_lock (&cache_lock);
  g_free (e->time_shape);
  e->time_shape = g_strdup (shape);
  e->time_seconds = seconds;
  g_mutex_unlock (&cache_lock);
}

/* The time noted for shape on the shared engine of key, or -1. */
gdouble
gst_h3_engine_time_for (const gchar * key, const gchar * shape)
{
  GstH3Engine *e;
  gdouble seconds = -1.0;

  g_mutex_lock (&cache_lock);
  e = cache_table ? g_hash_table_lookup (cache_table, key) : NULL;
  if (e && g_strcmp0 (e->time_shape, shape) == 0)
    seconds = e->time_seconds;
  g_mutex_unlock (&cache_lock);
  return seconds;
}

h3_engine *
gst_h3_engine_get (GstH3Engine * e)
{
  return e->engine;
}

const gchar *
gst_h3_engine_key (GstH3Engine * e)
{
  return e->key;
}

gboolean
gst_h3_engine_is_shared (GstH3Engine * e)
{
  gboolean shared;

  g_mutex_lock (&cache_lock);
  shared = e->in_table;
  g_mutex_unlock (&cache_lock);
  return shared;
}

void
gst_h3_engine_unref (GstH3Engine * e)
{
  gboolean last;

  if (!e)
    return;
  g_mutex_lock (&cache_lock);
  last = --e->refcount == 0;
  if (last)
    table_remove (e);
  g_mutex_unlock (&cache_lock);
  if (!last)
    return;
  /* Nobody else can reach it now: a loader holds a reference, so the load
   * is over; nobody generates. */
  if (e->engine) {
    GST_DEBUG ("closing the engine %s", e->key);
    h3_engine_close (e->engine);
  }
  g_free (e->holder);
  g_free (e->time_shape);
  g_free (e->key);
  g_free (e);
}
