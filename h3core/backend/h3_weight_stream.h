/* h3_weight_stream.h - weights that live in host memory and are streamed
 * into a small ring of device slots ahead of the compute that reads them
 * (memory=stream, h3.h).
 *
 * A model loads a weight as usual (h3_weight_load: file bytes, a fused
 * adapter tensor or a dummy drawn on the device) and then moves it to the
 * host with h3_weight_to_host: the device copy is freed, the same bytes are
 * kept in host memory (pinned while the process-wide pin budget lasts, else
 * pageable). Such a tensor keeps its shape and dtype but may not be given to
 * an op: every op refuses it with a sticky error naming the op and the
 * argument. Before compute, a group of host weights (a DiT block, a text
 * encoder layer) is copied into a ring slot:
 *
 *   h3_weight_ring_load(ring, slot, host, n, &st);     // queued on the copy stream
 *   ...compute on the other slot...
 *   h3_weight_ring_acquire(ring, slot, views, n, &st); // compute waits for the copy
 *   ...ops read views[i] (device tensors in the slot)...
 *   h3_weight_ring_release(ring, slot);                // the next load of slot waits for this
 *
 * The copy of a slot waits until compute has released the slot's previous
 * contents; compute waits until the copy of the slot it reads is done. On
 * CUDA these are events between the compute stream and a copy stream of its
 * own, so block i+1's weights move while block i computes; on the CPU and
 * the measuring backends the copy is a plain synchronous upload of the same
 * bytes (bit-identical results). The copy moves bytes, whatever they hold, so
 * any weight dtype (an FP8 weight and its scale tensor too) streams alike.
 *
 * Memory: a host-resident weight leaves the device tally (h3_backend_memory)
 * and is counted in h3_weight_host_bytes; the slots are persistent device
 * allocations, counted as weights. */
#ifndef H3_WEIGHT_STREAM_H
#define H3_WEIGHT_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "backend/h3_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The host memory streamed weights hold (this backend's). */
typedef struct h3_weight_host_bytes {
    uint64_t pinned;   /* page-locked: copied by DMA at full speed */
    uint64_t pageable; /* past the pin budget (or a backend without pinned memory) */
} h3_weight_host_bytes;
void h3_weight_host_bytes_get(const h3_backend *b, h3_weight_host_bytes *out);

/* How many bytes of host memory the process may page-lock for streamed
 * weights, over all backends (0: the default, half of the physical memory:
 * the host copies of the release, 66 GB of DiT and 50 GB of text encoder,
 * would take nearly all of a 128 GiB machine). Weights past it stay
 * pageable: correct, copied slower. */
void h3_weight_set_pin_budget(uint64_t bytes);
uint64_t h3_weight_pin_budget(void);

/* Moves the loaded weight *t to host memory (same bytes; the device copy is
 * freed). t->on_host is set; h3_weight_free frees it. A tensor without data
 * or already on the host is left as it is. */
h3_status_code h3_weight_to_host(h3_backend *b, h3_tensor *t, h3_status *status);

/* ---- the ring ------------------------------------------------------------------- */
typedef struct h3_weight_ring h3_weight_ring;

/* n_slots (>= 1) device slots of slot_bytes each (h3_weight_ring_group_bytes
 * of the largest group). */
h3_status_code h3_weight_ring_create(h3_backend *b, int n_slots, size_t slot_bytes, h3_weight_ring **out,
                                     h3_status *status);
void h3_weight_ring_destroy(h3_weight_ring *r);
int h3_weight_ring_slots(const h3_weight_ring *r);
/* The slot bytes a group of n tensors takes (each 256-byte aligned); tensors
 * without data take none. */
size_t h3_weight_ring_group_bytes(const h3_tensor *const *tensors, int n);

/* Queues the copy of the host-resident tensors host[0..n) into `slot`, one
 * after the other; it starts once compute has released the slot. The host
 * tensors must stay alive and unchanged until the slot is acquired. Tensors
 * without data are skipped; a device-resident one is refused. */
h3_status_code h3_weight_ring_load(h3_weight_ring *r, int slot, const h3_tensor *const *host, int n,
                                   h3_status *status);
/* Compute waits for slot's copy; views[i] (a copy of host[i] of the load)
 * becomes the device tensor in the slot. n and the shapes must be the
 * load's. */
h3_status_code h3_weight_ring_acquire(h3_weight_ring *r, int slot, h3_tensor *const *views, int n,
                                      h3_status *status);
/* Compute is done with slot (once the ops queued so far have run). */
void h3_weight_ring_release(h3_weight_ring *r, int slot);

/* What the ring did since its creation. */
typedef struct h3_weight_ring_stats {
    uint64_t loads;       /* groups copied */
    uint64_t bytes;       /* bytes copied */
    double stall_ms;      /* CUDA: time compute stood waiting for a copy (GPU clock); 0 elsewhere */
    uint64_t stalls;      /* acquires where compute waited more than 0.1 ms */
} h3_weight_ring_stats;
void h3_weight_ring_stats_get(h3_weight_ring *r, h3_weight_ring_stats *out);

#ifdef __cplusplus
}
#endif
#endif
