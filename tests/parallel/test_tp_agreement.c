/* test_tp_agreement.c - the agreement of a tensor-parallel group's ranks:
 * one decision from the same probes (kernels, peer access, memory), the
 * fallbacks recorded with the rank that caused them, failures naming the
 * rank at fault; CPU ranks sharing the host add up their needs. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "h3.h"
#include "parallel/h3_tp.h"
#include "h3_test.h"

static h3_tp_probe gpu_probe(int rank, int sm, double free_gib, double need_gib) {
    h3_tp_probe p;
    memset(&p, 0, sizeof p);
    p.rank = rank;
    p.device = rank;
    p.sm = sm;
    p.kernels = (sm >= 80 ? H3_TP_KERNEL_MMA : 0) | (sm == 90 ? H3_TP_KERNEL_WGMMA : 0);
    p.peers = 0xf;
    p.free_bytes = (uint64_t)(free_gib * (1 << 30));
    p.total_bytes = (uint64_t)(141.0 * (1 << 30));
    p.need_bytes = (uint64_t)(need_gib * (1 << 30));
    snprintf(p.name, sizeof p.name, "H200");
    return p;
}

static void test_agreement(void) {
    h3_tp_probe p[4];
    h3_tp_decision d;
    h3_status st;
    for (int r = 0; r < 4; r++) p[r] = gpu_probe(r, 90, 130, 40);
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_OK && d.fallback[0] == 0 && d.peer_route &&
              (d.kernels & H3_TP_KERNEL_WGMMA),
          "four H200: %s / %s", st.message, d.fallback);
    /* One slower GPU: every rank drops to the kernel all have, recorded. */
    p[2] = gpu_probe(2, 80, 70, 40);
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_OK && !(d.kernels & H3_TP_KERNEL_WGMMA) && (d.kernels & H3_TP_KERNEL_MMA) &&
              strstr(d.fallback, "rank 2") && strstr(d.fallback, "wgmma"),
          "mixed sm: %s", d.fallback);
    printf("agreement, mixed GPUs: %s\n", d.fallback);
    /* No peer access between two ranks: recorded, NCCL routes through the host. */
    p[2] = gpu_probe(2, 90, 130, 40);
    p[3].peers = 0xb;
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_OK && !d.peer_route &&
              strstr(d.fallback, "rank 3 cannot access rank 2's memory directly"),
          "peers: %s", d.fallback);
    printf("agreement, no peer access: %s\n", d.fallback);
    p[3].peers = 0xf;
    /* One full GPU: an error naming it, the same on every rank. */
    p[1] = gpu_probe(1, 90, 30, 40);
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_ERR_NO_MEMORY && strstr(st.message, "rank 1 (cuda:1, H200)"),
          "memory: %s", st.message);
    printf("agreement, one full GPU: %s\n", st.message);
    p[1] = gpu_probe(1, 90, 130, 40);
    /* A rank that could not start. */
    snprintf(p[3].error, sizeof p[3].error, "cudaSetDevice: invalid device ordinal");
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_ERR_DEVICE && strstr(st.message, "rank 3") &&
              strstr(st.message, "invalid device ordinal"),
          "start: %s", st.message);
    /* CPU ranks share the host: their needs add up. */
    h3_tp_probe c[4];
    for (int r = 0; r < 4; r++) {
        memset(&c[r], 0, sizeof c[r]);
        c[r].rank = r;
        c[r].device = -1;
        c[r].kernels = H3_TP_KERNEL_CPU;
        c[r].peers = 0xf;
        c[r].free_bytes = 8ull << 30;
        c[r].total_bytes = 16ull << 30;
        c[r].need_bytes = 2ull << 30;
    }
    h3_status_clear(&st);
    CHECK(h3_tp_agree(c, 4, &d, &st) == H3_ERR_NO_MEMORY && strstr(st.message, "host memory"), "cpu sum: %s",
          st.message);
    printf("agreement, four CPU ranks of 2 GiB in 8 GiB: %s\n", st.message);
    for (int r = 0; r < 4; r++) c[r].need_bytes = 1ull << 30;
    CHECK(h3_tp_agree(c, 4, &d, &st) == H3_OK && d.fallback[0] == 0, "cpu fits: %s", st.message);
}

int main(void) {
    test_agreement();
    return h3_test_finish("test_tp_agreement");
}
