# Little Dragon: a plain Makefile.
#   make             build ./dragon
#   make test        the fast CPU tier (what CI runs)
#   make test-asan   the same under ASan+UBSan (build-asan/)
#   make test-gpu    the gpu_ tests (on a machine with a GPU; skipped elsewhere)
#   make bench       bench/ programs (build/bench_runtime: NVRTC + GPU throughput;
#                    build/train_bench: the CUDA model's training throughput,
#                    build/sample_bench: its KV-cache generation throughput,
#                    build/attention_bench: the attention kernels alone)
#   make fuzz        libFuzzer targets under ASan+UBSan (clang), FUZZ_SECONDS each
# CI=1 turns warnings into errors. BUILD=dir keeps object files apart.

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wno-missing-field-initializers
CFLAGS  += -std=c11 -g $(OPT) -D_GNU_SOURCE -Iinclude -Isrc -MMD -MP $(WARN)
LDLIBS  += -lm -ldl -lpthread -ljansson -lxgboost -lzstd
ifneq ($(CI),)
CFLAGS  += -Werror
endif
ifeq ($(SANITIZE),1)
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
CFLAGS  += $(SANFLAGS) -DDG_ARENA_MALLOC
LDFLAGS += $(SANFLAGS)
endif

LIB_SRC  := $(filter-out src/cli/main.c,$(wildcard src/*/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o) $(BUILD)/tests/main.o $(BUILD)/tests/sched_support.o \
            $(BUILD)/tests/nn_cuda_support.o
BIN      := $(BUILD)/dragon

.PHONY: all test test-asan test-gpu bench fuzz clean
all: $(BIN)
ifeq ($(BUILD),build)
all: dragon
dragon: $(BIN)
	cp $(BIN) dragon
endif

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The commit that built this binary, which every measured record names
# (src/base/build_info.c): git's short hash, "+dirty" when tracked files
# differ from it; where the tree has no git (a copy on another machine), pass
# DG_COMMIT=<hash> to make. The header is rewritten only when it changes.
DG_COMMIT ?= $(or $(shell git rev-parse --short=12 HEAD 2>/dev/null),unknown)$(if $(shell git status --porcelain --untracked-files=no 2>/dev/null),+dirty)
$(BUILD)/gen/build_commit.h: FORCE
	@mkdir -p $(dir $@)
	@echo '#define DG_BUILD_COMMIT "$(DG_COMMIT)"' > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/src/base/build_info.o: $(BUILD)/gen/build_commit.h
$(BUILD)/src/base/build_info.o: CFLAGS += -I$(BUILD)/gen
.PHONY: FORCE
FORCE:

$(BUILD)/libdragon.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BUILD)/src/cli/main.o $(BUILD)/libdragon.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The test table is generated from the DG_TEST(name) lines of tests/test_*.c.
$(BUILD)/tests/test_list.h: $(TEST_SRC)
	@mkdir -p $(dir $@)
	@grep -ho '^DG_TEST([a-z0-9_]*)' $(TEST_SRC) | sed 's/^DG_TEST(\(.*\))/X(\1)/' > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/tests/main.o: $(BUILD)/tests/test_list.h
$(BUILD)/tests/main.o: CFLAGS += -I$(BUILD)/tests

$(BUILD)/dragon_tests: $(TEST_OBJ) $(BUILD)/libdragon.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

test: $(BUILD)/dragon_tests $(BIN)
	DRAGON_BIN=$(BIN) DRAGON_CFLAGS="$(if $(SANFLAGS),$(SANFLAGS),)" ./$(BUILD)/dragon_tests $(T)

test-asan:
	$(MAKE) SANITIZE=1 BUILD=build-asan OPT=-O1 test

# The gpu_ tests run for real where rt_cuda_available finds a GPU and are
# counted as skipped, with the reason, elsewhere.
test-gpu: $(BUILD)/dragon_tests $(BIN)
	DRAGON_BIN=$(BIN) ./$(BUILD)/dragon_tests gpu_

BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/%)
bench: $(BENCH_BIN)
$(BUILD)/bench_%: $(BUILD)/bench/bench_%.o $(BUILD)/libdragon.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# bench/train_bench: the CUDA model's training throughput and the two-GPU
# check (says so and exits 1 in a build without CUDA).
TRAIN_BENCH := $(BUILD)/train_bench
$(TRAIN_BENCH): $(BUILD)/bench/train_bench.o $(BUILD)/libdragon.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# bench/sample_bench: KV-cache generation throughput of the CUDA model
# (says so and exits 1 in a build without CUDA).
$(BUILD)/sample_bench: $(BUILD)/bench/sample_bench.o $(BUILD)/libdragon.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# bench/attention_bench: the CUDA attention kernels alone at the training
# shapes (says so and exits 1 in a build without CUDA).
$(BUILD)/attention_bench: $(BUILD)/bench/attention_bench.o $(BUILD)/libdragon.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The CUDA model (src/nn_cuda/*.cu), only where nvcc is found: compiled for
# sm_90 (one file for sm_90a) into $(BUILD)/libdragon_cuda.a and linked
# into dragon, the tests and the benches with the static CUDA runtime (so
# dragon starts without a driver; the driver is loaded when a GPU path
# runs) and cuBLASLt; NCCL is loaded at run time. The C side sees
# DG_HAVE_CUDA.
NVCC ?= nvcc
ifneq ($(shell command -v $(NVCC) 2>/dev/null),)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v $(NVCC))))
NVFLAGS ?= -arch=sm_90 -O3 --use_fast_math -std=c++17 -Xcompiler -fPIC
NVFLAGS += -g -Iinclude -Isrc -MMD -MP -Xcompiler -Wall,-Wextra,-Wshadow
ifneq ($(CI),)
NVFLAGS += -Werror all-warnings
endif
CU_SRC   := $(wildcard src/nn_cuda/*.cu)
CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/%.o)
CUDA_LIB := $(BUILD)/libdragon_cuda.a
CFLAGS   += -DDG_HAVE_CUDA
CUDA_LDLIBS := $(CUDA_LIB) $(BUILD)/libdragon.a -L$(CUDA_HOME)/lib64 \
               -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart_static -lrt -lstdc++ -lm -ldl -lpthread
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
# The warpgroup (wgmma) attention kernels exist only for sm_90a, whatever
# -arch the rest is built for; the model runs them where the device is
# compute capability 9.0.
$(BUILD)/src/nn_cuda/attention_wgmma.o: src/nn_cuda/attention_wgmma.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -arch=%,$(NVFLAGS)) -gencode arch=compute_90a,code=sm_90a -c $< -o $@
$(CUDA_LIB): $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BIN) $(BUILD)/dragon_tests $(BENCH_BIN): $(CUDA_LIB)
$(BIN) $(BUILD)/dragon_tests $(BENCH_BIN): LDLIBS += $(CUDA_LDLIBS)
test test-gpu: $(TRAIN_BENCH)
-include $(CU_OBJ:.o=.d)
endif

FUZZ_SECONDS ?= 30
fuzz: $(BUILD)/gen/build_commit.h
	$(MAKE) -C . -f fuzz/fuzz.mk FUZZ_SECONDS=$(FUZZ_SECONDS) LDLIBS="$(LDLIBS)" \
	  FUZZ_GEN=$(BUILD)/gen

clean:
	rm -rf build build-asan build-fuzz dragon

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/src/cli/main.d $(BENCH_SRC:%.c=$(BUILD)/%.d)
