/* test_cuda_ops.h - what test_cuda_ops.c (the harness, every op at small
 * and full sizes, main) and test_cuda_ops_vsa.c (VSA-H3's op) share: the
 * two backends, tensors on both, and the comparison. One executable. */
#ifndef TEST_CUDA_OPS_H
#define TEST_CUDA_OPS_H
#ifdef H3_HAVE_CUDA

#include <stdint.h>

#include "backend/h3_backend.h"
#include "backend/cuda/h3_backend_cuda_bench.h"
#include "h3_test.h"

/* The H3 sizes the full-size checks run at: S rows, model width D, H heads of HD. */
#define FULL_S 34710
#define FULL_D 5376
#define FULL_H 56
#define FULL_HD 128

/* One tensor on both backends: c on the CPU (always f32), g on the GPU. */
typedef struct pair {
    h3_tensor c, g;
} pair;

extern h3_backend *cpu, *gpu;
/* What the "auto" cases run: AUTO and the simple VSA consumer, the backend's
 * defaults, unless --attention / --vsa-consumer chose others. */
extern h3_cuda_attention_variant default_path;
extern int default_pipelined;
extern uint64_t seed_counter;

/* relative L2 bound of a dtype: 1e-2 bf16, 2e-3 f16, 1e-4 f32 */
double tolerance(h3_dtype dt);
/* Both backends without error (a failed check names `what`). */
int backends_ok(const char *what);
/* A tensor's values as float32 (malloc'd), or NULL. */
float *download(h3_backend *b, const h3_tensor *t);
/* Random input in [lo, hi), drawn on the device in dt. */
pair input(h3_dtype dt, int ndim, const int64_t *shape, float lo, float hi);
pair input2(h3_dtype dt, int64_t rows, int64_t cols, float lo, float hi);
pair input1(h3_dtype dt, int64_t n, float lo, float hi);
/* Output, NaN on both sides until an op writes it. */
pair output2(h3_dtype dt, int64_t rows, int64_t cols);
pair ints(const int32_t *v, int64_t n);
uint32_t rnd(void);
/* S random indices below T. */
pair selector(int64_t S, int T);
/* Downloads both sides of `out` and checks them. */
void compare(const char *name, const pair *out, double tol);
/* Both arenas back to these marks. */
void reset(size_t mc, size_t mg);
const char *dn(h3_dtype dt);

/* test_cuda_ops_vsa.c: the small VSA-H3 cases, then the reference shape. */
void test_vsa_small(void);
void full_vsa_all(void);
/* That file's CHECK tallies (h3_test.h counts per file). */
void test_cuda_ops_vsa_tally(int *passed, int *failed);

#endif
#endif
