/* h3_weight_stream.c - host-resident weights and the ring of device slots
 * they are streamed into (h3_weight_stream.h), for every backend: the
 * backends give host memory, a copy stream and its events through their op
 * table (h3_backend_impl.h); a backend without them (CPU, measuring) gets
 * malloc'd host memory and synchronous copies of the same bytes. */
#include "backend/h3_weight_stream.h"

#include "backend/h3_backend_impl.h"

#include <glib.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOT_ALIGN ((size_t)256)
#define MAX_SLOTS 8

/* ---- host memory ---------------------------------------------------------------------- */

/* Process-wide, as page-locked memory is: the ranks of an engine (and the
 * engines of a process) share one budget. */
static atomic_uint_fast64_t pinned_total, pin_budget;

void h3_weight_set_pin_budget(uint64_t bytes) { atomic_store(&pin_budget, bytes); }

uint64_t h3_weight_pin_budget(void) {
    uint64_t set = atomic_load(&pin_budget);
    if (set) return set;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : 0;
}

/* Takes `bytes` of the pin budget; 0 when it would pass it. A measuring
 * backend pins nothing, so it counts against its own tally alone. */
static int pin_take(h3_backend *b, uint64_t bytes) {
    uint64_t budget = h3_weight_pin_budget();
    if (b->ops->no_data) return b->mem_host_pinned + bytes <= budget;
    uint64_t cur = atomic_load(&pinned_total);
    do {
        if (cur + bytes > budget) return 0;
    } while (!atomic_compare_exchange_weak(&pinned_total, &cur, cur + bytes));
    return 1;
}

static void pin_give(h3_backend *b, uint64_t bytes) {
    if (!b->ops->no_data) atomic_fetch_sub(&pinned_total, bytes);
}

void h3_weight_host_bytes_get(const h3_backend *b, h3_weight_host_bytes *out) {
    out->pinned = b->mem_host_pinned;
    out->pageable = b->mem_host_pageable;
}

/* Host memory for a weight: pinned when the backend pins and the budget
 * allows (a refusal by the driver falls back to pageable memory, which is
 * slower, not wrong), else pageable. A measuring backend gets an address
 * without bytes. */
static void *host_take(h3_backend *b, size_t bytes, int *pinned) {
    *pinned = b->ops->pins_host && pin_take(b, bytes);
    if (b->ops->no_data) return b->ops->alloc(b, bytes); /* not in the device tally: not a weight */
    if (h3_backend_alloc_refused(b)) {
        if (*pinned) pin_give(b, bytes);
        return NULL;
    }
    void *p = NULL;
    if (*pinned) {
        p = b->ops->host_alloc(b, bytes, 1);
        if (!p) {
            pin_give(b, bytes);
            *pinned = 0;
        }
    }
    if (!p) p = b->ops->host_alloc ? b->ops->host_alloc(b, bytes, 0) : malloc(bytes);
    return p;
}

static void host_give(h3_backend *b, void *p, size_t bytes, int pinned) {
    if (pinned) pin_give(b, bytes);
    if (b->ops->no_data) return;
    if (b->ops->host_free) b->ops->host_free(b, p, pinned);
    else free(p);
}

/* The table keeps each allocation's size and kind: bytes·2 + pinned. */
static void host_forget(h3_backend *b, void *p, uintptr_t entry) {
    size_t bytes = entry >> 1;
    int pinned = (int)(entry & 1);
    uint64_t *counter = pinned ? &b->mem_host_pinned : &b->mem_host_pageable;
    *counter = *counter > bytes ? *counter - bytes : 0;
    host_give(b, p, bytes, pinned);
}

void h3_weight_host_free(h3_backend *b, void *p) {
    gpointer entry;
    if (!b->host_weights || !g_hash_table_lookup_extended(b->host_weights, p, NULL, &entry)) return;
    g_hash_table_remove(b->host_weights, p);
    host_forget(b, p, (uintptr_t)entry);
}

void h3_weight_host_free_all(h3_backend *b) {
    if (!b->host_weights) return;
    GHashTableIter it;
    gpointer p, entry;
    g_hash_table_iter_init(&it, b->host_weights);
    while (g_hash_table_iter_next(&it, &p, &entry)) host_forget(b, p, (uintptr_t)entry);
    g_hash_table_destroy(b->host_weights);
    b->host_weights = NULL;
}

h3_status_code h3_weight_to_host(h3_backend *b, h3_tensor *t, h3_status *status) {
    if (!t->data || t->on_host) return H3_OK;
    size_t bytes = h3_tensor_storage_bytes(t); /* an fp8 weight: its codes and their scales */
    if (!bytes) return H3_OK;
    if (!b->host_weights) b->host_weights = g_hash_table_new(g_direct_hash, g_direct_equal);
    int pinned;
    void *host = host_take(b, bytes, &pinned);
    if (!host)
        return h3_fail(status, H3_ERR_NO_MEMORY, "%s: no host memory for a streamed weight of %zu bytes (%s)",
                       b->ops->name, bytes, h3_dtype_name(t->dtype));
    if (!b->ops->no_data && b->ops->download(b, host, t->data, bytes) != 0) {
        host_give(b, host, bytes, pinned);
        if (!h3_backend_failed(b))
            h3_backend_fail(b, H3_ERR_DEVICE, "%s: download of a streamed weight failed", b->ops->name);
        return h3_backend_check(b, status);
    }
    g_hash_table_insert(b->host_weights, host, (gpointer)(((uintptr_t)bytes << 1) | (uintptr_t)pinned));
    *(pinned ? &b->mem_host_pinned : &b->mem_host_pageable) += bytes;
    h3_tensor moved = h3_tensor_at(t, host); /* an fp8 weight's scale pointer moves along */
    h3_tensor device = *t;
    h3_weight_free(b, &device); /* the device copy leaves the tally */
    *t = moved;
    t->on_host = 1;
    return H3_OK;
}

/* ---- the ring ------------------------------------------------------------------------- */

struct h3_weight_ring {
    h3_backend *b;
    int n_slots;
    size_t slot_bytes;
    void *slot[MAX_SLOTS];
    size_t loaded[MAX_SLOTS]; /* bytes the slot's last load laid out, checked at acquire */
    void *stream;             /* the backend's copy stream and events; NULL: synchronous copies */
    h3_weight_ring_stats stats;
};

static size_t aligned(size_t n) { return (n + SLOT_ALIGN - 1) & ~(SLOT_ALIGN - 1); }

size_t h3_weight_ring_group_bytes(const h3_tensor *const *tensors, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (tensors[i]->data) total += aligned(h3_tensor_storage_bytes(tensors[i]));
    return total;
}

h3_status_code h3_weight_ring_create(h3_backend *b, int n_slots, size_t slot_bytes, h3_weight_ring **out,
                                     h3_status *status) {
    *out = NULL;
    if (n_slots < 1 || n_slots > MAX_SLOTS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "weight ring: %d slots (1..%d)", n_slots, MAX_SLOTS);
    h3_weight_ring *r = calloc(1, sizeof *r);
    if (!r) return h3_fail(status, H3_ERR_NO_MEMORY, "weight ring: out of memory");
    r->b = b;
    r->n_slots = n_slots;
    r->slot_bytes = aligned(slot_bytes ? slot_bytes : 1);
    for (int i = 0; i < n_slots; i++) {
        r->slot[i] = h3_backend_persistent_alloc(b, r->slot_bytes, "a weight-stream slot");
        if (!r->slot[i]) {
            h3_weight_ring_destroy(r);
            h3_backend_check(b, status);
            return h3_status_prefix(status, "weight ring: slot %d of %d (%.2f GiB each)", i + 1, n_slots,
                                    (double)r->slot_bytes / 1073741824.0);
        }
    }
    if (!b->ops->no_data && b->ops->stream_create) {
        r->stream = b->ops->stream_create(b, n_slots);
        if (!r->stream) {
            h3_weight_ring_destroy(r);
            if (!h3_backend_failed(b))
                h3_backend_fail(b, H3_ERR_DEVICE, "%s: cannot create the weight-copy stream", b->ops->name);
            return h3_backend_check(b, status);
        }
    }
    *out = r;
    return H3_OK;
}

void h3_weight_ring_destroy(h3_weight_ring *r) {
    if (!r) return;
    if (r->stream) r->b->ops->stream_destroy(r->b, r->stream); /* waits for its copies */
    for (int i = 0; i < r->n_slots; i++) h3_backend_persistent_free(r->b, r->slot[i]);
    free(r);
}

int h3_weight_ring_slots(const h3_weight_ring *r) { return r->n_slots; }

static h3_status_code check_slot(const h3_weight_ring *r, int slot, h3_status *status) {
    if (slot < 0 || slot >= r->n_slots)
        return h3_fail(status, H3_ERR_INTERNAL, "weight ring: slot %d of %d", slot, r->n_slots);
    return h3_backend_check(r->b, status);
}

static int copy_into(h3_weight_ring *r, void *dst, const void *src, size_t bytes) {
    h3_backend *b = r->b;
    if (r->stream) return b->ops->stream_copy(b, r->stream, dst, src, bytes);
    return b->ops->upload(b, dst, src, bytes); /* CPU: memcpy; measuring: nothing */
}

h3_status_code h3_weight_ring_load(h3_weight_ring *r, int slot, const h3_tensor *const *host, int n,
                                   h3_status *status) {
    h3_status_code rc = check_slot(r, slot, status);
    if (rc != H3_OK) return rc;
    h3_backend *b = r->b;
    size_t need = h3_weight_ring_group_bytes(host, n);
    if (need > r->slot_bytes)
        return h3_fail(status, H3_ERR_INTERNAL, "weight ring: a group of %zu bytes in slots of %zu", need,
                       r->slot_bytes);
    for (int i = 0; i < n; i++)
        if (host[i]->data && !host[i]->on_host)
            return h3_fail(status, H3_ERR_INTERNAL, "weight ring: tensor %d of the group is not host-resident", i);
    int failed = r->stream && b->ops->stream_copy_begin(b, r->stream, slot) != 0;
    size_t off = 0;
    for (int i = 0; i < n && !failed; i++) {
        if (!host[i]->data) continue;
        size_t bytes = h3_tensor_storage_bytes(host[i]);
        failed = copy_into(r, (char *)r->slot[slot] + off, host[i]->data, bytes) != 0;
        off += aligned(bytes);
    }
    if (!failed && r->stream) failed = b->ops->stream_copy_end(b, r->stream, slot) != 0;
    if (failed) {
        if (!h3_backend_failed(b))
            h3_backend_fail(b, H3_ERR_DEVICE, "%s: weight-stream copy into slot %d failed", b->ops->name, slot);
        return h3_backend_check(b, status);
    }
    r->loaded[slot] = need;
    r->stats.loads++;
    r->stats.bytes += need;
    return H3_OK;
}

h3_status_code h3_weight_ring_acquire(h3_weight_ring *r, int slot, h3_tensor *const *views, int n,
                                      h3_status *status) {
    h3_status_code rc = check_slot(r, slot, status);
    if (rc != H3_OK) return rc;
    size_t need = h3_weight_ring_group_bytes((const h3_tensor *const *)views, n);
    if (need != r->loaded[slot])
        return h3_fail(status, H3_ERR_INTERNAL, "weight ring: slot %d holds %zu bytes, the group asks for %zu", slot,
                       r->loaded[slot], need);
    if (r->stream && r->b->ops->stream_acquire(r->b, r->stream, slot) != 0) {
        if (!h3_backend_failed(r->b))
            h3_backend_fail(r->b, H3_ERR_DEVICE, "%s: waiting for slot %d failed", r->b->ops->name, slot);
        return h3_backend_check(r->b, status);
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!views[i]->data) continue;
        *views[i] = h3_tensor_at(views[i], (char *)r->slot[slot] + off); /* fp8: its scales too */
        views[i]->on_host = 0;
        off += aligned(h3_tensor_storage_bytes(views[i]));
    }
    return H3_OK;
}

void h3_weight_ring_release(h3_weight_ring *r, int slot) {
    if (slot < 0 || slot >= r->n_slots || !r->stream) return;
    if (r->b->ops->stream_release(r->b, r->stream, slot) != 0 && !h3_backend_failed(r->b))
        h3_backend_fail(r->b, H3_ERR_DEVICE, "%s: releasing weight slot %d failed", r->b->ops->name, slot);
}

void h3_weight_ring_stats_get(h3_weight_ring *r, h3_weight_ring_stats *out) {
    *out = r->stats;
    if (r->stream && r->b->ops->stream_stalls) r->b->ops->stream_stalls(r->b, r->stream, &out->stall_ms, &out->stalls);
}
