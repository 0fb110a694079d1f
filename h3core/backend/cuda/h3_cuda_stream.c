/* h3_cuda_stream.c - the CUDA side of weight streaming (h3_weight_stream.h):
 * host memory for streamed weights (page-locked or pageable), and a copy
 * stream of its own with two events per ring slot:
 *
 *   copy stream:    wait(released[s]) -> H2D copies -> record(copied[s])
 *   compute stream: wait(copied[s])   -> the block's ops -> record(released[s])
 *
 * so the copy of block i+1 runs on the copy engine while block i computes,
 * and a slot is never overwritten while a kernel may still read it. The
 * copy stream is non-blocking, like the compute stream, so neither waits
 * on the legacy default stream. Each acquire is bracketed by two timing
 * events on the compute stream; the time between them is how long compute
 * stood waiting for a copy, summed when the slot comes round again (the
 * overlap the GPU tests and h3-bench report). */
#include "backend/cuda/h3_backend_cuda_impl.h"

#include <stdlib.h>

#define STALL_MIN_MS 0.1f

typedef struct cuda_stream {
    cudaStream_t copy;
    int n_slots;
    cudaEvent_t copied[8], released[8]; /* no timing: the ring's order */
    cudaEvent_t wait_begin[8], wait_end[8]; /* timing: the acquire's stall */
    int pending[8];                       /* wait_begin/end recorded, not yet read */
    double stall_ms;
    uint64_t stalls;
} cuda_stream;

void *h3_cuda_host_alloc(h3_backend *b, size_t bytes, int pinned) {
    (void)b;
    if (!pinned) return malloc(bytes ? bytes : 1);
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError(); /* a refusal is the caller's fallback (pageable), not the next launch's error */
        return NULL;
    }
    return p;
}

void h3_cuda_host_free(h3_backend *b, void *p, int pinned) {
    (void)b;
    if (pinned) cudaFreeHost(p);
    else free(p);
}

void h3_cuda_stream_destroy(h3_backend *b, void *state) {
    cuda_stream *s = state;
    (void)b;
    if (!s) return;
    if (s->copy) cudaStreamSynchronize(s->copy);
    for (int i = 0; i < s->n_slots; i++) {
        cudaEvent_t *ev[4] = {&s->copied[i], &s->released[i], &s->wait_begin[i], &s->wait_end[i]};
        for (int k = 0; k < 4; k++)
            if (*ev[k]) cudaEventDestroy(*ev[k]);
    }
    if (s->copy) cudaStreamDestroy(s->copy);
    free(s);
}

void *h3_cuda_stream_create(h3_backend *b, int n_slots) {
    cuda_impl *c = impl_of(b);
    cuda_stream *s = calloc(1, sizeof *s);
    if (!s || n_slots > 8) {
        free(s);
        return NULL;
    }
    s->n_slots = n_slots;
    int okay = ok(b, cudaSetDevice(c->device), "weight stream: set device") &&
               ok(b, cudaStreamCreateWithFlags(&s->copy, cudaStreamNonBlocking), "weight stream: create");
    for (int i = 0; i < n_slots && okay; i++)
        okay = ok(b, cudaEventCreateWithFlags(&s->copied[i], cudaEventDisableTiming), "weight stream: event") &&
               ok(b, cudaEventCreateWithFlags(&s->released[i], cudaEventDisableTiming), "weight stream: event") &&
               ok(b, cudaEventCreate(&s->wait_begin[i]), "weight stream: event") &&
               ok(b, cudaEventCreate(&s->wait_end[i]), "weight stream: event") &&
               /* a slot never used is free: its release has happened */
               ok(b, cudaEventRecord(s->released[i], c->stream), "weight stream: event");
    if (!okay) {
        h3_cuda_stream_destroy(b, s);
        return NULL;
    }
    return s;
}

int h3_cuda_stream_copy_begin(h3_backend *b, void *state, int slot) {
    cuda_stream *s = state;
    return ok(b, cudaStreamWaitEvent(s->copy, s->released[slot], 0), "weight stream: wait for release") ? 0 : 1;
}

/* Pinned sources go by DMA while the host returns at once; a pageable one
 * is staged by the driver (the host thread copies, correct but slower). */
int h3_cuda_stream_copy(h3_backend *b, void *state, void *dst, const void *src, size_t bytes) {
    cuda_stream *s = state;
    return ok(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->copy), "weight stream: copy") ? 0 : 1;
}

int h3_cuda_stream_copy_end(h3_backend *b, void *state, int slot) {
    cuda_stream *s = state;
    return ok(b, cudaEventRecord(s->copied[slot], s->copy), "weight stream: copy done") ? 0 : 1;
}

/* The slot's previous stall, read once its events are behind us (two
 * blocks ago: they have run by the time the slot comes round). */
static void read_stall(h3_backend *b, cuda_stream *s, int slot) {
    if (!s->pending[slot]) return;
    float ms = 0.0f;
    if (ok(b, cudaEventSynchronize(s->wait_end[slot]), "weight stream: stall") &&
        ok(b, cudaEventElapsedTime(&ms, s->wait_begin[slot], s->wait_end[slot]), "weight stream: stall")) {
        s->stall_ms += ms;
        s->stalls += ms > STALL_MIN_MS;
    }
    s->pending[slot] = 0;
}

int h3_cuda_stream_acquire(h3_backend *b, void *state, int slot) {
    cuda_impl *c = impl_of(b);
    cuda_stream *s = state;
    read_stall(b, s, slot);
    int okay = ok(b, cudaEventRecord(s->wait_begin[slot], c->stream), "weight stream: acquire") &&
               ok(b, cudaStreamWaitEvent(c->stream, s->copied[slot], 0), "weight stream: acquire") &&
               ok(b, cudaEventRecord(s->wait_end[slot], c->stream), "weight stream: acquire");
    s->pending[slot] = okay;
    return okay ? 0 : 1;
}

int h3_cuda_stream_release(h3_backend *b, void *state, int slot) {
    cuda_stream *s = state;
    return ok(b, cudaEventRecord(s->released[slot], impl_of(b)->stream), "weight stream: release") ? 0 : 1;
}

void h3_cuda_stream_stalls(h3_backend *b, void *state, double *ms, uint64_t *count) {
    cuda_stream *s = state;
    for (int i = 0; i < s->n_slots; i++) read_stall(b, s, i);
    *ms = s->stall_ms;
    *count = s->stalls;
}
