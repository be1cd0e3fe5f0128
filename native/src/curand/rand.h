/* Internal interface of rgpu's cuRAND stand-in (libcurand.so.10, the host API).
 *
 * A generator is a description here (its type, stream and quasirandom dimensions: what cuRAND checks before it
 * generates) and a real generator on the server. Creating, destroying and the setters are round trips that
 * return cuRAND's own status; generating into device memory is one deferred RAND_GENERATE, like a kernel
 * launch, whose failure surfaces at the next synchronising call. Host generators (curandCreateGeneratorHost)
 * generate on the server and the results come back in the reply. NVIDIA's headers are needed only to
 * regenerate native/gen (python native/codegen/gen.py). */
#ifndef RGPU_RAND_H
#define RGPU_RAND_H

#include <stddef.h>
#include <stdint.h>

#include "curand_consts.h"
#include "remote.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"
#include "standin.h"

#define RAND_API __attribute__((visibility("default")))

/* RAND_GENERATE's kinds (src/rgpu/dispatch/rand.py has the same table). */
enum rand_kind {
    RAND_U32, RAND_U64, RAND_UNIFORM, RAND_UNIFORM_DOUBLE, RAND_NORMAL, RAND_NORMAL_DOUBLE, RAND_LOG_NORMAL,
    RAND_LOG_NORMAL_DOUBLE, RAND_POISSON
};
/* RAND_SET's settings. */
enum rand_setting { RAND_SEED = 1, RAND_OFFSET = 2, RAND_ORDERING = 3, RAND_DIMENSIONS = 4, RAND_SEEDS = 5 };

/* Host generators: the results of one call travel in one reply, so one call may produce at most this much. */
#define RGPU_RAND_HOST_MAX_BYTES (16u << 20)

int rgpu_rand_unsupported(int *logged, const char *name);

#endif
