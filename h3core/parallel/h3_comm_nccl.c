/* h3_comm_nccl.c - the communicator of CUDA ranks: one NCCL communicator per
 * GPU, all made at once by ncclCommInitAll (one process, one host thread
 * per GPU). Collectives are enqueued on the rank backend's own stream, so
 * they are ordered with its kernels and nothing here synchronizes.
 *
 * h3_comm.c has already made every rank agree on the call before NCCL sees
 * it, so a host-side failure never leaves a collective issued by some ranks
 * only. A device failure (or a rank that stops answering) is different: a
 * peer may sit in an NCCL kernel waiting for it, so the group aborts every
 * communicator (ncclCommAbort releases such kernels) and rebuilds them on
 * reset. Built only with the CUDA backend and -Dnccl (H3_HAVE_NCCL). */
#include "parallel/h3_comm_impl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/h3_backend_cuda.h"

typedef struct nccl_impl {
    int size;
    int *devices;
    ncclComm_t *comms; /* NULL entries after an abort */
} nccl_impl;

static nccl_impl *impl_of(h3_comm_group *g) { return g->impl; }

/* nccl_check has refused any other dtype before the data moves. */
static ncclDataType_t nccl_type(h3_dtype dt) {
    switch (dt) {
    case H3_BF16: return ncclBfloat16;
    case H3_F16: return ncclFloat16;
    case H3_I32: return ncclInt32;
    default: return ncclFloat32;
    }
}

static h3_status_code nccl_fail(h3_comm *c, ncclResult_t r, const char *what, h3_status *status) {
    nccl_impl *n = impl_of(c->group);
    const char *last = n->comms[c->rank] ? ncclGetLastError(n->comms[c->rank]) : NULL;
    return h3_fail(status, H3_ERR_DEVICE, "nccl %s on rank %d (cuda:%d): %s%s%s", what, c->rank,
                   n->devices[c->rank], ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

static h3_status_code nccl_check(h3_comm *c, h3_backend *b, h3_comm_call kind, const h3_tensor *t,
                                 h3_status *status) {
    nccl_impl *n = impl_of(c->group);
    int known = t->dtype == H3_F32 || t->dtype == H3_BF16 || t->dtype == H3_F16 || t->dtype == H3_I32;
    if (!b || strcmp(h3_backend_name(b), "cuda") != 0)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "nccl communicator: rank %d has no CUDA backend", c->rank);
    if (!n->comms[c->rank])
        return h3_fail(status, H3_ERR_DEVICE, "nccl communicator of rank %d was aborted; reset the group", c->rank);
    if (!known || (kind == H3_CALL_ALL_REDUCE && t->dtype == H3_I32))
        return h3_fail(status, H3_ERR_UNSUPPORTED, "nccl %s of a %s tensor", kind == H3_CALL_ALL_REDUCE ? "all-reduce" : "collective",
                       h3_dtype_name(t->dtype));
    if (kind == H3_CALL_ALL_GATHER && (t->ndim < 1 || t->shape[0] % c->group->size != 0))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "all-gather: the first dim (%lld) must hold %d equal chunks, one per rank",
                       (long long)(t->ndim ? t->shape[0] : 0), c->group->size);
    return H3_OK;
}

static h3_status_code nccl_all_reduce_sum(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    ncclDataType_t type = nccl_type(t->dtype);
    ncclResult_t r = ncclAllReduce(t->data, t->data, (size_t)h3_tensor_numel(t), type, ncclSum,
                                   impl_of(c->group)->comms[c->rank], (cudaStream_t)h3_backend_cuda_stream(b));
    return r == ncclSuccess ? H3_OK : nccl_fail(c, r, "all-reduce", status);
}

static h3_status_code nccl_all_gather(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    ncclDataType_t type = nccl_type(t->dtype);
    size_t count = (size_t)h3_tensor_numel(t) / (size_t)c->group->size;
    /* In place: the send buffer is this rank's chunk of the receive buffer. */
    const char *send = (const char *)t->data + count * h3_dtype_size(t->dtype) * (size_t)c->rank;
    ncclResult_t r = ncclAllGather(send, t->data, count, type, impl_of(c->group)->comms[c->rank],
                                   (cudaStream_t)h3_backend_cuda_stream(b));
    return r == ncclSuccess ? H3_OK : nccl_fail(c, r, "all-gather", status);
}

static h3_status_code nccl_broadcast(h3_comm *c, h3_backend *b, h3_tensor *t, int root, h3_status *status) {
    ncclDataType_t type = nccl_type(t->dtype);
    ncclResult_t r = ncclBroadcast(t->data, t->data, (size_t)h3_tensor_numel(t), type, root,
                                   impl_of(c->group)->comms[c->rank], (cudaStream_t)h3_backend_cuda_stream(b));
    return r == ncclSuccess ? H3_OK : nccl_fail(c, r, "broadcast", status);
}

static void nccl_abort_device(h3_comm_group *g) {
    nccl_impl *n = impl_of(g);
    for (int r = 0; r < n->size; r++)
        if (n->comms[r]) {
            ncclCommAbort(n->comms[r]);
            n->comms[r] = NULL;
        }
}

static h3_status_code init_all(nccl_impl *n, h3_status *status) {
    ncclResult_t r = ncclCommInitAll(n->comms, n->size, n->devices);
    if (r != ncclSuccess) {
        for (int i = 0; i < n->size; i++) n->comms[i] = NULL;
        return h3_fail(status, H3_ERR_DEVICE, "ncclCommInitAll over %d GPUs: %s", n->size, ncclGetErrorString(r));
    }
    return H3_OK;
}

static h3_status_code nccl_reset(h3_comm_group *g, h3_status *status) {
    nccl_impl *n = impl_of(g);
    nccl_abort_device(g);
    return init_all(n, status);
}

static void nccl_destroy(h3_comm_group *g) {
    nccl_impl *n = impl_of(g);
    if (!n) return;
    for (int r = 0; r < n->size; r++)
        if (n->comms[r]) ncclCommDestroy(n->comms[r]);
    free(n->comms);
    free(n->devices);
    free(n);
}

static const h3_comm_ops nccl_ops = {
    .name = "nccl",
    .check = nccl_check,
    .all_reduce_sum = nccl_all_reduce_sum,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .abort_device = nccl_abort_device,
    .reset = nccl_reset,
    .destroy = nccl_destroy,
};

int h3_comm_have_nccl(void) { return 1; }

h3_status_code h3_comm_group_create_nccl(int size, const int *devices, h3_comm_group **out, h3_status *status) {
    *out = NULL;
    if (size < 1 || size > H3_COMM_MAX_RANKS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "nccl communicator: %d ranks (1..%d)", size,
                       H3_COMM_MAX_RANKS);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    for (int i = 0; i < size; i++) {
        if (devices[i] < 0 || devices[i] >= count)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "devices: cuda:%d does not exist (%d CUDA device%s)",
                           devices[i], count, count == 1 ? "" : "s");
        for (int j = 0; j < i; j++)
            if (devices[j] == devices[i])
                return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                               "devices: cuda:%d is listed twice (one rank per GPU)", devices[i]);
    }
    nccl_impl *n = calloc(1, sizeof *n);
    if (n) {
        n->size = size;
        n->devices = malloc((size_t)size * sizeof *n->devices);
        n->comms = calloc((size_t)size, sizeof *n->comms);
    }
    if (!n || !n->devices || !n->comms) {
        if (n) free(n->devices), free(n->comms);
        free(n);
        return h3_fail(status, H3_ERR_NO_MEMORY, "nccl communicator: out of memory");
    }
    memcpy(n->devices, devices, (size_t)size * sizeof *devices);
    h3_status_code rc = init_all(n, status);
    if (rc == H3_OK) {
        *out = h3_comm_group_new(size, &nccl_ops, n);
        if (!*out) rc = h3_fail(status, H3_ERR_NO_MEMORY, "nccl communicator: out of memory");
    }
    if (rc != H3_OK) {
        h3_comm_group tmp = {.impl = n};
        nccl_destroy(&tmp);
    }
    return rc;
}

h3_status_code h3_comm_cuda_device_info(int device, const int *devices, int n, int *sm, uint64_t *free_bytes,
                                        uint64_t *total_bytes, uint32_t *peer_mask, char *name, size_t name_size,
                                        h3_status *status) {
    struct cudaDeviceProp prop;
    size_t fr = 0, tot = 0;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
    if (e == cudaSuccess) e = cudaMemGetInfo(&fr, &tot);
    if (e != cudaSuccess)
        return h3_fail(status, H3_ERR_DEVICE, "cuda:%d: %s", device, cudaGetErrorString(e));
    *sm = prop.major * 10 + prop.minor;
    *free_bytes = fr;
    *total_bytes = tot;
    if (name && name_size) snprintf(name, name_size, "%s", prop.name);
    uint32_t mask = 0;
    for (int j = 0; j < n && j < 32; j++) {
        int can = devices[j] == device;
        if (!can && cudaDeviceCanAccessPeer(&can, device, devices[j]) != cudaSuccess) can = 0;
        if (can) mask |= 1u << j;
    }
    *peer_mask = mask;
    return H3_OK;
}
