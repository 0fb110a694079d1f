/* h3-bench-load - how fast weights go from a safetensors file to the GPU.
 *
 * Writes a checkpoint of block-sized bf16 tensors (the shapes of one H3 DiT
 * block's q/k/v/out/fc1/fc2, repeated up to --gb gigabytes) and times, with
 * the file in the page cache, h3_st_open + h3_weight_load of every tensor
 * through the CUDA backend's three upload modes (H3_CUDA_UPLOAD: pageable,
 * the default; pinned, our staging ring; register, the file's pages locked in
 * place), each checked byte for byte on a few tensors, and
 *   - the reference in the same run: PyTorch reading the same file (mmap,
 *     torch.frombuffer, .to("cuda") per tensor, synchronised), and the raw
 *     pinned cudaMemcpy bandwidth of this machine as the ceiling.
 * Reading from a cold disk is slower on any loader; this measures what the
 * loader itself adds.
 *
 * usage: h3-bench-load [--gb N (default 4)] [--dir DIR (default /tmp)] [--python PY|none]
 */
#include <cuda_runtime_api.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/h3_backend.h"
#include "backend/cuda/h3_backend_cuda.h"
#include "base/h3_safetensors.h"

#define D 5376
#define QKV 7168
#define FF 14336

typedef struct shape {
    const char *name;
    int64_t rows, cols;
} shape;

static const shape block[] = {{"to_q", QKV, D},   {"to_k", QKV, D},       {"to_v", QKV, D},
                              {"to_out", D, QKV}, {"fc1", 2 * FF, D},     {"fc2", D, FF}};
#define BLOCK_TENSORS (sizeof block / sizeof block[0])

static double now(void) { return (double)g_get_monotonic_time() / 1e6; }

/* Writes the checkpoint; returns the bytes of tensor data or 0. */
static size_t write_checkpoint(const char *path, double gb) {
    size_t per_block = 0;
    for (size_t i = 0; i < BLOCK_TENSORS; i++) per_block += (size_t)block[i].rows * block[i].cols * 2;
    int blocks = (int)(gb * 1e9 / (double)per_block + 0.5);
    if (blocks < 1) blocks = 1;
    size_t n = (size_t)blocks * BLOCK_TENSORS, biggest = (size_t)2 * FF * D * 2;
    uint16_t *data = malloc(biggest);
    h3_st_write_tensor *t = calloc(n, sizeof *t);
    char (*names)[64] = calloc(n, 64);
    if (!data || !t || !names) return 0;
    uint32_t x = 12345;
    for (size_t i = 0; i < biggest / 2; i++) {
        x = x * 1664525u + 1013904223u;
        data[i] = (uint16_t)(0x3c00 | (x >> 25)); /* bf16 in [0.0078, 0.0156): finite, non-zero */
    }
    for (size_t i = 0; i < n; i++) {
        const shape *s = &block[i % BLOCK_TENSORS];
        snprintf(names[i], 64, "blocks.%zu.%s.weight", i / BLOCK_TENSORS, s->name);
        t[i] = (h3_st_write_tensor){.name = names[i], .dtype = H3_ST_BF16, .ndim = 2, .shape = {s->rows, s->cols},
                                    .data = data};
    }
    h3_status st = {0};
    size_t bytes = (size_t)blocks * per_block;
    if (h3_st_write(path, t, n, NULL, &st) != H3_OK) {
        fprintf(stderr, "h3-bench-load: %s\n", st.message);
        bytes = 0;
    }
    free(data);
    free(t);
    free(names);
    return bytes;
}

/* Downloads tensor i and compares it with the file; 1 when equal. */
static int same_bytes(h3_backend *b, const h3_st_tensor *src, const h3_tensor *w) {
    void *got = malloc(src->nbytes);
    h3_status st = {0};
    int same = got && h3_tensor_download_bytes(b, w, got, src->nbytes, &st) == H3_OK &&
               memcmp(got, src->data, src->nbytes) == 0;
    free(got);
    return same;
}

/* Loads every tensor of the file on a fresh CUDA backend whose uploads use
 * `mode`; seconds, or -1 (also when a checked tensor differs). */
static double load_all(const char *path, const char *mode) {
    g_setenv("H3_CUDA_UPLOAD", mode, TRUE);
    h3_backend *b = NULL;
    h3_st_file *f = NULL;
    h3_status st = {0};
    if (h3_backend_cuda_create(0, &b, &st) != H3_OK) {
        fprintf(stderr, "h3-bench-load: %s\n", st.message);
        return -1;
    }
    size_t n = 0;
    h3_tensor *w = NULL;
    double t0 = now();
    h3_status_code rc = h3_st_open(path, &f, &st);
    if (rc == H3_OK) {
        n = h3_st_count(f);
        w = calloc(n, sizeof *w);
        for (size_t i = 0; i < n && rc == H3_OK; i++) rc = h3_weight_load(b, h3_st_at(f, i), H3_WEIGHT_DEFAULT, &w[i], &st);
    }
    if (rc == H3_OK && h3_backend_synchronize(b, &st) != H3_OK) rc = st.code;
    double t = now() - t0;
    if (rc != H3_OK) fprintf(stderr, "h3-bench-load: %s\n", st.message);
    size_t check[3] = {0, n / 2, n - 1};
    for (int i = 0; i < 3 && rc == H3_OK; i++)
        if (!same_bytes(b, h3_st_at(f, check[i]), &w[check[i]])) {
            fprintf(stderr, "h3-bench-load: %s: tensor %zu differs from the file\n", mode, check[i]);
            rc = H3_ERR_INTERNAL;
        }
    for (size_t i = 0; w && i < n; i++) h3_weight_free(b, &w[i]);
    free(w);
    if (f) h3_st_close(f);
    h3_backend_destroy(b);
    return rc == H3_OK ? t : -1;
}

/* cudaMemcpy from one pinned buffer, 1 GiB in 32 MiB copies: the ceiling. */
static double pinned_gbps(void) {
    size_t chunk = (size_t)32 << 20, total = (size_t)1 << 30;
    void *h = NULL, *d = NULL;
    if (cudaHostAlloc(&h, chunk, cudaHostAllocDefault) != cudaSuccess || cudaMalloc(&d, total) != cudaSuccess) return -1;
    memset(h, 1, chunk);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (size_t off = 0; off < total; off += chunk) cudaMemcpyAsync((char *)d + off, h, chunk, cudaMemcpyHostToDevice, 0);
        cudaDeviceSynchronize();
        double gbps = (double)total / (now() - t0) / 1e9;
        best = gbps > best ? gbps : best;
    }
    cudaFreeHost(h);
    cudaFree(d);
    return best;
}

static double torch_seconds(const char *python, const char *path) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s - '%s' <<'EOF'\n"
             "import json, mmap, struct, sys, time, torch\n"
             "f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n"
             "torch.cuda.init(); torch.empty(1, device='cuda'); torch.cuda.synchronize()\n"
             "t0 = time.time(); n = struct.unpack('<Q', m[:8])[0]; h = json.loads(m[8:8 + n]); base = 8 + n\n"
             "out = []\n"
             "for k, v in h.items():\n"
             "    if k == '__metadata__': continue\n"
             "    b, e = v['data_offsets']\n"
             "    out.append(torch.frombuffer(m, dtype=torch.bfloat16, count=(e - b) // 2, offset=base + b)"
             ".view(v['shape']).to('cuda'))\n"
             "torch.cuda.synchronize(); print(time.time() - t0)\n"
             "EOF",
             python, path);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    double t = -1;
    if (fscanf(p, "%lf", &t) != 1) t = -1;
    pclose(p);
    return t;
}

int main(int argc, char **argv) {
    double gb = 4;
    const char *dir = "/tmp", *python = "python3";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--gb")) gb = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--python")) python = argv[i + 1];
        else {
            fprintf(stderr, "usage: h3-bench-load [--gb N] [--dir DIR] [--python PY|none]\n");
            return 2;
        }
    }
    char why[256];
    if (h3_cuda_device_count(why, sizeof why) == 0) {
        fprintf(stderr, "h3-bench-load: no GPU: %s\n", why);
        return 1;
    }
    char *path = g_build_filename(dir, "h3-bench-load.safetensors", NULL);
    /* Progress on stderr as each phase starts, results on stdout as each is
     * measured: a run cut short by a time limit still says how far it got. */
    fprintf(stderr, "h3-bench-load: writing %.1f GB to %s...\n", gb, path);
    double t0 = now();
    size_t bytes = write_checkpoint(path, gb);
    if (!bytes) return 1;
    double gbytes = (double)bytes / 1e9;
    printf("h3-bench-load: %.2f GB of bf16 weights (%zu-tensor blocks) written in %.1f s, file in the page cache\n",
           gbytes, BLOCK_TENSORS, now() - t0);
    fflush(stdout);
    fprintf(stderr, "h3-bench-load: warm-up load (CUDA context, page cache)...\n");
    load_all(path, "pageable");
    double pageable = load_all(path, "pageable");
    printf("  h3core, pageable (default)  : %6.2f s  %6.1f GB/s\n", pageable, gbytes / pageable);
    fflush(stdout);
    double staged = load_all(path, "pinned");
    printf("  h3core, pinned staging ring : %6.2f s  %6.1f GB/s  (%.2fx the default)\n", staged, gbytes / staged,
           pageable / staged);
    fflush(stdout);
    double reg = load_all(path, "register");
    printf("  h3core, registered pages    : %6.2f s  %6.1f GB/s  (%.2fx the default)\n", reg, gbytes / reg,
           pageable / reg);
    fflush(stdout);
    if (strcmp(python, "none")) fprintf(stderr, "h3-bench-load: the PyTorch reference (%s)...\n", python);
    double torch = strcmp(python, "none") ? torch_seconds(python, path) : -1;
    if (torch > 0)
        printf("  PyTorch mmap + .to('cuda')  : %6.2f s  %6.1f GB/s  (default %.2fx faster than torch)\n", torch,
               gbytes / torch, torch / pageable);
    double ceiling = pinned_gbps();
    printf("  pinned cudaMemcpy ceiling   :           %6.1f GB/s  (default at %.0f%%)\n", ceiling,
           100.0 * gbytes / pageable / ceiling);
    g_unlink(path);
    g_free(path);
    return pageable > 0 && staged > 0 && reg > 0 ? 0 : 1;
}
