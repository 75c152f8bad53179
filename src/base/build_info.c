/* build_info.c: what built this binary. The commit comes from the build
 * (the Makefile's DG_COMMIT, written to build_commit.h); every measured
 * record names it, so records from different compilers are never mixed
 * silently. */
#include "dragon/base.h"

#include "build_commit.h"

const char *dg_build_commit(void) { return DG_BUILD_COMMIT; }
