/* h3_tp.c - tensor parallelism: sharded loading, the parallel linears, the
 * agreement between ranks, and the team of rank threads. See h3_tp.h for
 * the roles; the plan of the model's split is model/h3_tp_plan.c's. */
#include "parallel/h3_tp.h"

#include <glib.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef H3_HAVE_CUDA
#include "backend/cuda/h3_backend_cuda.h"
#endif

#define GIB (1024.0 * 1024.0 * 1024.0)

const char *h3_tp_role_name(h3_tp_role role) {
    switch (role) {
    case H3_TP_REPLICATED: return "replicated";
    case H3_TP_QKV: return "qkv (heads)";
    case H3_TP_HEADS: return "heads";
    case H3_TP_OUT: return "out (row-parallel)";
    case H3_TP_FFN_IN: return "ffn in (column-parallel)";
    case H3_TP_FFN_OUT: return "ffn out (row-parallel)";
    case H3_TP_GATHER: return "column-parallel + gather";
    }
    return "?";
}

int64_t h3_tp_local(const h3_tp *tp, int64_t n) { return tp->size > 1 ? n / tp->size : n; }

/* ---- sharded loading ----------------------------------------------------------------- */

/* Row roles: how many stacked parts the rows hold (each part is split). */
static int row_parts(h3_tp_role role) {
    switch (role) {
    case H3_TP_QKV: return 3;
    case H3_TP_FFN_IN: return 2;
    case H3_TP_HEADS:
    case H3_TP_GATHER: return 1;
    default: return 0;
    }
}

static h3_status_code split_error(const h3_st_tensor *src, h3_tp_role role, const char *what, int64_t n, int size,
                                  h3_status *status) {
    return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: tensor '%s' (%s): %lld %s do not split over %d ranks",
                   src->file_path ? src->file_path : "?", src->name ? src->name : "?", h3_tp_role_name(role),
                   (long long)n, what, size);
}

/* This rank's slice of a dummy tensor (load-format dummy): the same slice
 * as of a file's tensor, described by the offset and strides of its values
 * (h3_st_random) instead of copied, so the rank draws exactly its share of
 * the whole tensor's values on its device. */
static h3_status_code dummy_slice(h3_backend *b, const h3_tp *tp, const h3_st_tensor *src, h3_tp_role role,
                                  h3_weight_type type, h3_tensor *out, h3_status *status) {
    int size = tp->size, rank = tp->rank, parts = row_parts(role);
    h3_st_tensor view = *src;
    if (parts == 0) {
        if (src->ndim != 2) return split_error(src, role, "dims (want a matrix)", src->ndim, size, status);
        int64_t C = src->shape[1], Cl = C / size;
        if (C % size) return split_error(src, role, "columns", C, size, status);
        if (src->random.part_rows)
            return h3_fail(status, H3_ERR_INTERNAL, "tensor '%s': a column slice of stacked parts", src->name);
        view.random.row_stride = src->random.row_stride ? src->random.row_stride : C;
        view.random.offset += rank * Cl;
        view.shape[1] = Cl;
        view.numel = src->shape[0] * Cl;
        view.nbytes = (size_t)view.numel * h3_st_dtype_size(src->dtype);
    } else {
        int64_t R = src->ndim ? src->shape[0] : 0;
        if (R <= 0 || R % (parts * size))
            return split_error(src, role, parts > 1 ? "rows per part" : "rows", R / (parts ? parts : 1), size,
                               status);
        int64_t part_rows = R / parts, local = part_rows / size;
        if (src->random.part_rows)
            return h3_fail(status, H3_ERR_INTERNAL, "tensor '%s': a row slice of stacked parts", src->name);
        view = h3_st_rows(src, rank * local, local); /* part 0's share */
        if (parts > 1) {
            /* the shares of the other parts follow, part_rows rows apart */
            int64_t row_stride = view.random.row_stride;
            view.random.part_rows = local;
            view.random.part_stride = part_rows * row_stride;
            view.shape[0] = parts * local;
            view.numel = view.shape[0] * (src->numel / R);
            view.nbytes = (size_t)view.numel * h3_st_dtype_size(src->dtype);
        }
    }
    return h3_weight_load(b, &view, type, out, status);
}

h3_status_code h3_tp_weight_load(h3_backend *b, const h3_tp *tp, const h3_st_tensor *src, h3_tp_role role,
                                 h3_weight_type type, h3_tensor *out, h3_status *status) {
    if (role == H3_TP_REPLICATED || tp->size == 1) return h3_weight_load(b, src, type, out, status);
    if (h3_st_is_dummy(src)) return dummy_slice(b, tp, src, role, type, out, status);
    int size = tp->size, rank = tp->rank;
    size_t es = h3_st_dtype_size(src->dtype);
    h3_st_tensor view = *src;
    char *buf = NULL;
    int parts = row_parts(role);
    if (parts == 0) {
        /* Row-parallel: keep the input columns of this rank. */
        if (src->ndim != 2) return split_error(src, role, "dims (want a matrix)", src->ndim, size, status);
        int64_t R = src->shape[0], C = src->shape[1], Cl = C / size;
        if (C % size) return split_error(src, role, "columns", C, size, status);
        buf = malloc((size_t)(R * Cl) * es + 1);
        if (!buf) return h3_fail(status, H3_ERR_NO_MEMORY, "tensor '%s': out of host memory", src->name);
        for (int64_t r = 0; r < R && h3_backend_holds_data(b); r++) /* a measuring backend: the shape alone */
            memcpy(buf + (size_t)(r * Cl) * es, (const char *)src->data + (size_t)(r * C + rank * Cl) * es,
                   (size_t)Cl * es);
        view.shape[1] = Cl;
        view.data = buf;
    } else {
        /* Column-parallel: keep this rank's rows of each stacked part. */
        int64_t R = src->ndim ? src->shape[0] : 0;
        if (R <= 0 || R % (parts * size))
            return split_error(src, role, parts > 1 ? "rows per part" : "rows", R / (parts ? parts : 1), size,
                               status);
        int64_t part_rows = R / parts, local = part_rows / size;
        size_t row_bytes = src->nbytes / (size_t)R;
        if (parts == 1) {
            view.data = (const char *)src->data + (size_t)(rank * local) * row_bytes; /* a view: no copy */
        } else {
            buf = malloc((size_t)(parts * local) * row_bytes + 1);
            if (!buf) return h3_fail(status, H3_ERR_NO_MEMORY, "tensor '%s': out of host memory", src->name);
            for (int p = 0; p < parts && h3_backend_holds_data(b); p++)
                memcpy(buf + (size_t)(p * local) * row_bytes,
                       (const char *)src->data + (size_t)(p * part_rows + rank * local) * row_bytes,
                       (size_t)local * row_bytes);
            view.data = buf;
        }
        view.shape[0] = parts * local;
    }
    view.numel = 1;
    for (int i = 0; i < view.ndim; i++) view.numel *= view.shape[i];
    view.nbytes = (size_t)view.numel * es;
    h3_status_code rc = h3_weight_load(b, &view, type, out, status);
    free(buf);
    return rc;
}

/* ---- collectives for model code ------------------------------------------------------ */

static void sticky(h3_backend *b, h3_status_code rc, const h3_status *st) {
    if (rc != H3_OK) h3_backend_set_error(b, rc, "%s", st->message);
}

void h3_tp_all_reduce(const h3_tp *tp, h3_backend *b, h3_tensor *t) {
    if (!tp->comm) return;
    h3_status st;
    sticky(b, h3_comm_all_reduce_sum(tp->comm, b, t, &st), &st);
}

void h3_tp_all_gather(const h3_tp *tp, h3_backend *b, h3_tensor *t) {
    if (!tp->comm) return;
    h3_status st;
    sticky(b, h3_comm_all_gather(tp->comm, b, t, &st), &st);
}

void h3_tp_broadcast(const h3_tp *tp, h3_backend *b, h3_tensor *t, int root) {
    if (!tp->comm) return;
    h3_status st;
    sticky(b, h3_comm_broadcast(tp->comm, b, t, root, &st), &st);
}

void h3_tp_linear_row_parallel(const h3_tp *tp, h3_backend *b, h3_tensor *y, const h3_tensor *x,
                               const h3_tensor *w, const h3_tensor *bias) {
    if (tp->size == 1) {
        h3_op_linear(b, y, x, w, bias);
        h3_tp_all_reduce(tp, b, y); /* exercises the communicator; moves nothing */
        return;
    }
    const h3_tensor *once = tp->rank == 0 ? bias : NULL;
    if (y->dtype == H3_F32) {
        h3_op_linear(b, y, x, w, once);
        h3_tp_all_reduce(tp, b, y);
        return;
    }
    /* The partial sums travel in float32, as one GEMM would have kept them. */
    size_t mark = h3_arena_mark(b);
    h3_tensor partial = h3_new(b, H3_F32, y->ndim, y->shape);
    h3_op_linear(b, &partial, x, w, once);
    h3_tp_all_reduce(tp, b, &partial);
    h3_op_copy(b, y, &partial);
    h3_arena_reset(b, mark);
}

void h3_tp_linear_column_gather(const h3_tp *tp, h3_backend *b, h3_tensor *y, const h3_tensor *x,
                                const h3_tensor *w, const h3_tensor *bias) {
    if (tp->size == 1) {
        h3_op_linear(b, y, x, w, bias);
        return;
    }
    int size = tp->size;
    int64_t M = h3_tensor_rows(x), local = w->shape[0], N = h3_tensor_cols(y);
    if (local * size != N || h3_tensor_rows(y) != M) {
        h3_backend_set_error(b, H3_ERR_INTERNAL,
                             "column-parallel linear: %d ranks x %lld rows of w do not make y's %lld columns", size,
                             (long long)local, (long long)N);
        return;
    }
    size_t mark = h3_arena_mark(b);
    /* Rank r computes rows [r·M, (r+1)·M) of a [size·M, N/size] buffer; after
     * the gather, row m of y is the rows m, M + m, ... of it side by side. */
    h3_tensor parts = h3_new_2d(b, y->dtype, size * M, local);
    h3_tensor mine = h3_tensor_rows_view(&parts, tp->rank * M, M);
    h3_op_linear(b, &mine, x, w, bias);
    h3_tp_all_gather(tp, b, &parts);
    int32_t *host = malloc((size_t)(M * size) * sizeof *host + 1);
    h3_tensor idx = h3_new_1d(b, H3_I32, M * size);
    h3_status st;
    if (!host) {
        h3_backend_set_error(b, H3_ERR_NO_MEMORY, "column-parallel linear: out of host memory");
    } else if (h3_backend_check(b, &st) == H3_OK) {
        for (int64_t m = 0; m < M; m++)
            for (int r = 0; r < size; r++) host[m * size + r] = (int32_t)(r * M + m);
        sticky(b, h3_tensor_upload_i32(b, &idx, host, &st), &st);
        h3_tensor y_rows = h3_tensor_2d(y, M * size, local);
        h3_op_gather_rows(b, &y_rows, &parts, &idx);
    }
    free(host);
    h3_arena_reset(b, mark);
}

/* ---- agreement ----------------------------------------------------------------------- */

/* MemAvailable and MemTotal from /proc/meminfo, else sysconf. */
static void host_memory(uint64_t *free_bytes, uint64_t *total_bytes) {
    char *text = NULL;
    *free_bytes = *total_bytes = 0;
    if (g_file_get_contents("/proc/meminfo", &text, NULL, NULL)) {
        const char *a = strstr(text, "MemAvailable:"), *t = strstr(text, "MemTotal:");
        if (a) *free_bytes = (uint64_t)g_ascii_strtoull(a + 13, NULL, 10) * 1024;
        if (t) *total_bytes = (uint64_t)g_ascii_strtoull(t + 9, NULL, 10) * 1024;
        g_free(text);
    }
    long page = sysconf(_SC_PAGESIZE);
    if (!*total_bytes && page > 0) *total_bytes = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)page;
    if (!*free_bytes && page > 0) *free_bytes = (uint64_t)sysconf(_SC_AVPHYS_PAGES) * (uint64_t)page;
}

static uint32_t cuda_kernels(int sm) {
    uint32_t k = 0;
    if (sm >= 80) k |= H3_TP_KERNEL_MMA;
    if (sm == 90) k |= H3_TP_KERNEL_WGMMA; /* sm_90a code runs on sm_90 only */
    /* H3_TP_KERNEL_VSA: set once the VSA-H3 kernels are part of the build. */
    return k;
}

void h3_tp_probe_rank(h3_backend *b, int rank, int device, const int *devices, int n, uint64_t need_bytes,
                      const char *start_error, h3_tp_probe *out) {
    memset(out, 0, sizeof *out);
    out->rank = rank;
    out->device = device;
    out->need_bytes = need_bytes;
    if (start_error || !b) {
        snprintf(out->error, sizeof out->error, "%s", start_error ? start_error : "no backend");
        return;
    }
    if (device < 0) {
        host_memory(&out->free_bytes, &out->total_bytes);
        out->kernels = H3_TP_KERNEL_CPU;
        out->peers = n >= 32 ? 0xffffffffu : (1u << n) - 1; /* one address space */
        snprintf(out->name, sizeof out->name, "cpu");
        return;
    }
    h3_status st;
    if (h3_comm_cuda_device_info(device, devices, n, &out->sm, &out->free_bytes, &out->total_bytes, &out->peers,
                                 out->name, sizeof out->name, &st) != H3_OK) {
        /* No NCCL in this build: what the backend itself knows; memory unknown. */
        out->free_bytes = out->total_bytes = 0;
        out->peers = 1u << rank;
#ifdef H3_HAVE_CUDA
        if (strcmp(h3_backend_name(b), "cuda") == 0) {
            out->sm = h3_backend_cuda_sm(b);
            snprintf(out->name, sizeof out->name, "%s", h3_backend_cuda_device_name(b));
        }
#endif
    }
    out->kernels = cuda_kernels(out->sm);
}

static const char *kernel_name(uint32_t bit) {
    switch (bit) {
    case H3_TP_KERNEL_CPU: return "cpu reference";
    case H3_TP_KERNEL_MMA: return "mma.sync attention";
    case H3_TP_KERNEL_WGMMA: return "wgmma attention";
    case H3_TP_KERNEL_VSA: return "VSA-H3 kernels";
    }
    return "?";
}

static void append(char *dst, size_t size, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void append(char *dst, size_t size, const char *fmt, ...) {
    size_t at = strlen(dst);
    if (at + 3 >= size) return;
    if (at) at += (size_t)snprintf(dst + at, size - at, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst + at, size - at, fmt, ap);
    va_end(ap);
}

static void where(const h3_tp_probe *p, char *buf, size_t size) {
    if (p->device < 0) snprintf(buf, size, "host memory");
    else snprintf(buf, size, "cuda:%d%s%s", p->device, p->name[0] ? ", " : "", p->name);
}

/* Every device's memory against what the plan puts on it (CPU ranks share
 * the host), keeping max(512 MiB, 5%) spare as the reference implementation. */
static h3_status_code check_memory(const h3_tp_probe *p, int n, h3_tp_decision *d, h3_status *status) {
    for (int i = 0; i < n; i++) {
        int first = 1;
        for (int j = 0; j < i; j++) first &= p[j].device != p[i].device;
        if (!first) continue;
        uint64_t need = 0, free_bytes = p[i].free_bytes, total = p[i].total_bytes;
        int ranks = 0;
        for (int j = i; j < n; j++)
            if (p[j].device == p[i].device) {
                need += p[j].need_bytes;
                ranks++;
                if (p[j].free_bytes < free_bytes) free_bytes = p[j].free_bytes;
            }
        char w[96];
        where(&p[i], w, sizeof w);
        if (free_bytes == 0) {
            append(d->fallback, sizeof d->fallback, "free memory of %s unknown: not checked against the plan", w);
            continue;
        }
        uint64_t spare = total / 20 > (512ull << 20) ? total / 20 : (512ull << 20);
        if (need + spare > free_bytes)
            return h3_fail(status, H3_ERR_NO_MEMORY,
                           "rank %d (%s): the plan puts %.2f GiB of weights on %s%s, %.2f GiB are free and %.2f GiB "
                           "are kept spare; %s",
                           p[i].rank, w, (double)need / GIB, ranks > 1 ? "the ranks sharing " : "", ranks > 1 ? w : "it",
                           (double)free_bytes / GIB, (double)spare / GIB,
                           p[i].device < 0 ? "free host memory" : "spread the model over more GPUs or free this one");
    }
    return H3_OK;
}

h3_status_code h3_tp_agree(const h3_tp_probe *p, int n, h3_tp_decision *d, h3_status *status) {
    memset(d, 0, sizeof *d);
    char w[96];
    for (int i = 0; i < n; i++)
        if (p[i].error[0]) {
            where(&p[i], w, sizeof w);
            return h3_fail(status, H3_ERR_DEVICE, "rank %d (%s) could not start: %s", p[i].rank, w, p[i].error);
        }
    h3_status_code rc = check_memory(p, n, d, status);
    if (rc != H3_OK) return rc;
    uint32_t all = ~0u, any = 0;
    for (int i = 0; i < n; i++) {
        all &= p[i].kernels;
        any |= p[i].kernels;
    }
    d->kernels = n ? all : 0;
    for (uint32_t bit = 1; bit && bit <= any; bit <<= 1) {
        if (!(any & bit) || (all & bit)) continue;
        for (int i = 0; i < n; i++)
            if (!(p[i].kernels & bit)) {
                where(&p[i], w, sizeof w);
                append(d->fallback, sizeof d->fallback,
                       "rank %d (%s, sm%d) lacks the %s: no rank uses them, so all ranks compute alike", p[i].rank,
                       w, p[i].sm, kernel_name(bit));
                break;
            }
    }
    d->peer_route = 1;
    for (int i = 0; i < n && d->peer_route; i++)
        for (int j = 0; j < n; j++)
            if (j < 32 && !(p[i].peers & (1u << j))) {
                d->peer_route = 0;
                append(d->fallback, sizeof d->fallback,
                       "rank %d cannot access rank %d's memory directly: collectives take NCCL's route through the "
                       "host",
                       p[i].rank, j);
                break;
            }
    return H3_OK;
}

/* The attention kernel every rank has, so that each head is computed by the
 * same code whichever rank holds it. */
static void apply_decision(h3_backend *b, const h3_tp_decision *d) {
#ifdef H3_HAVE_CUDA
    if (!b || strcmp(h3_backend_name(b), "cuda") != 0) return;
    if (d->kernels & H3_TP_KERNEL_WGMMA) return; /* the default choice */
    h3_backend_cuda_set_attention_path(
        b, (d->kernels & H3_TP_KERNEL_MMA) ? H3_CUDA_ATTENTION_MMA : H3_CUDA_ATTENTION_GENERIC);
#else
    (void)b;
    (void)d;
#endif
}

h3_status_code h3_tp_handshake(const h3_tp *tp, h3_backend *b, const h3_tp_probe *mine, h3_tp_decision *d,
                               h3_status *status) {
    h3_status_code rc;
    if (!tp->comm) {
        rc = h3_tp_agree(mine, 1, d, status);
    } else {
        h3_tp_probe *all = calloc((size_t)tp->size, sizeof *all);
        if (!all) {
            h3_fail(status, H3_ERR_NO_MEMORY, "tp handshake: out of memory");
            h3_comm_abort(tp->comm, status);
            return H3_ERR_NO_MEMORY;
        }
        rc = h3_comm_exchange(tp->comm, mine, all, sizeof *all, status);
        if (rc == H3_OK) rc = h3_tp_agree(all, tp->size, d, status);
        free(all);
    }
    if (rc == H3_OK) apply_decision(b, d);
    return rc;
}

/* ---- the team ------------------------------------------------------------------------- */

struct h3_tp_team {
    h3_comm_group *group;
    int size;
    h3_tp *tps;
    GThread **threads;
    pthread_mutex_t lock;
    pthread_cond_t start, done;
    uint64_t job;
    int running, quit;
    h3_tp_rank_fn fn;
    void *user;
    int broken;
    h3_status broken_status;
};

typedef struct worker_arg {
    h3_tp_team *team;
    int rank;
} worker_arg;

static gpointer worker(gpointer data) {
    worker_arg *a = data;
    h3_tp_team *t = a->team;
    int rank = a->rank;
    free(a);
    uint64_t seen = 0;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (t->job == seen && !t->quit) pthread_cond_wait(&t->start, &t->lock);
        if (t->quit) break;
        seen = t->job;
        h3_tp_rank_fn fn = t->fn;
        void *user = t->user;
        pthread_mutex_unlock(&t->lock);
        h3_status st;
        h3_status_clear(&st);
        h3_status_code rc = fn(&t->tps[rank], user, &st);
        if (rc != H3_OK) {
            if (st.code == H3_OK) h3_fail(&st, rc, "rank %d failed", rank);
            h3_comm_abort(t->tps[rank].comm, &st);
        }
        pthread_mutex_lock(&t->lock);
        if (--t->running == 0) pthread_cond_signal(&t->done);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

h3_status_code h3_tp_team_create(h3_comm_group *group, h3_tp_team **out, h3_status *status) {
    *out = NULL;
    h3_tp_team *t = calloc(1, sizeof *t);
    int size = h3_comm_group_size(group);
    if (t) {
        t->tps = calloc((size_t)size, sizeof *t->tps);
        t->threads = calloc((size_t)size, sizeof *t->threads);
    }
    if (!t || !t->tps || !t->threads) {
        if (t) free(t->tps), free(t->threads);
        free(t);
        h3_comm_group_destroy(group);
        return h3_fail(status, H3_ERR_NO_MEMORY, "tp team: out of memory");
    }
    t->group = group;
    t->size = size;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->start, NULL);
    pthread_cond_init(&t->done, NULL);
    for (int r = 0; r < size; r++) {
        t->tps[r] = (h3_tp){r, size, h3_comm_group_rank(group, r)};
        worker_arg *a = malloc(sizeof *a);
        char name[32];
        snprintf(name, sizeof name, "h3-rank%d", r);
        GError *err = NULL;
        if (a) {
            a->team = t;
            a->rank = r;
            t->threads[r] = g_thread_try_new(name, worker, a, &err);
        }
        if (!a || !t->threads[r]) {
            free(a);
            h3_fail(status, H3_ERR_NO_MEMORY, "tp team: cannot start the thread of rank %d: %s", r,
                    err ? err->message : "out of memory");
            if (err) g_error_free(err);
            h3_tp_team_destroy(t);
            return H3_ERR_NO_MEMORY;
        }
    }
    *out = t;
    return H3_OK;
}

void h3_tp_team_destroy(h3_tp_team *t) {
    if (!t) return;
    pthread_mutex_lock(&t->lock);
    t->quit = 1;
    pthread_cond_broadcast(&t->start);
    pthread_mutex_unlock(&t->lock);
    for (int r = 0; r < t->size; r++)
        if (t->threads[r]) g_thread_join(t->threads[r]);
    h3_comm_group_destroy(t->group);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->start);
    pthread_cond_destroy(&t->done);
    free(t->tps);
    free(t->threads);
    free(t);
}

int h3_tp_team_size(const h3_tp_team *t) { return t->size; }
h3_comm_group *h3_tp_team_group(h3_tp_team *t) { return t->group; }

h3_status_code h3_tp_team_run(h3_tp_team *t, h3_tp_rank_fn fn, void *user, h3_status *status) {
    /* A broken group still runs work without collectives (freeing the
     * ranks); any collective fails fast and the failure says why. */
    pthread_mutex_lock(&t->lock);
    t->fn = fn;
    t->user = user;
    t->running = t->size;
    t->job++;
    pthread_cond_broadcast(&t->start);
    while (t->running > 0) pthread_cond_wait(&t->done, &t->lock);
    pthread_mutex_unlock(&t->lock);

    int rank = -1;
    h3_status failure;
    if (!h3_comm_group_failure(t->group, &rank, &failure)) return H3_OK;
    h3_status_code rc = failure.code;
    /* "rank k: ..." unless the message names its rank already (the agreement's do). */
    if (rank >= 0 && rc != H3_ERR_CANCELLED && strncmp(failure.message, "rank ", 5) != 0)
        h3_fail(status, rc, "rank %d: %s", rank, failure.message);
    else h3_fail(status, rc, "%s", failure.message);
    if (t->broken)
        h3_status_prefix(status, "the tensor-parallel group could not be rebuilt after an earlier failure (%.120s); "
                                 "close and reopen the engine",
                         t->broken_status.message);
    h3_status rs;
    if (!t->broken && h3_comm_group_reset(t->group, &rs) != H3_OK) {
        t->broken = 1;
        t->broken_status = rs;
    }
    return rc;
}
