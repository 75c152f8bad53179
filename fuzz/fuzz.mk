# fuzz.mk: libFuzzer targets, invoked by `make fuzz` from the top Makefile.
#
# Builds every fuzz/fuzz_NAME.c with clang -fsanitize=fuzzer,address,undefined
# against all library sources (src/*/*.c but src/cli/main.c) into
# build-fuzz/, then runs each target for FUZZ_SECONDS. A target's corpus is
# build-fuzz/corpus/fuzz_NAME, seeded (read-only) from tests/fuzz/NAME/ and
# tests/data/kernels/; crashing inputs are saved to tests/fuzz/NAME/, where
# the test suite replays them (the loaders' targets, fuzz_checkpoint,
# fuzz_safetensors, fuzz_token_shard, fuzz_hf_tokenizer, fuzz_db,
# fuzz_db_shard, fuzz_cost_model, fuzz_plan and fuzz_cuda_data, through their own code:
# tests/test_reliability.c includes them). FUZZ_BUILD moves the build and the corpora elsewhere.
#   make fuzz                          every target, FUZZ_SECONDS each
#   make fuzz FUZZ_TARGETS=fuzz_kernel_text FUZZ_SECONDS=600 FUZZ_JOBS=4
#   make fuzz BUILD=build-rel FUZZ_BUILD=build-rel-fuzz FUZZ_TARGETS=fuzz_db

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 30
FUZZ_JOBS    ?= 1
FUZZ_BUILD   ?= build-fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -g -O1 -D_GNU_SOURCE -DDG_ARENA_MALLOC -Iinclude -Isrc -MMD -MP $(FUZZ_SAN)
# the libraries the top Makefile links with (it passes LDLIBS)
FUZZ_LDLIBS  := $(or $(LDLIBS),$(shell sed -n 's/^LDLIBS *+*= *//p' Makefile))

FUZZ_LIB_SRC := $(filter-out src/cli/main.c,$(wildcard src/*/*.c))
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_BUILD)/%.o)
FUZZ_SRC     := $(wildcard fuzz/fuzz_*.c)
FUZZ_ALL     := $(FUZZ_SRC:fuzz/%.c=%)
FUZZ_TARGETS ?= $(FUZZ_ALL)
FUZZ_BINS    := $(FUZZ_ALL:%=$(FUZZ_BUILD)/%)

.PHONY: fuzz fuzz-build $(FUZZ_TARGETS:%=run-%)
fuzz: $(FUZZ_TARGETS:%=run-%)
fuzz-build: $(FUZZ_BINS)

# library objects carry the fuzzer's coverage instrumentation, not its main()
$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

# the build's commit (the top Makefile writes build_commit.h there)
FUZZ_GEN ?= build/gen
$(FUZZ_BUILD)/src/base/build_info.o: FUZZ_CFLAGS += -I$(FUZZ_GEN)

$(FUZZ_BUILD)/libdragon.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c $(FUZZ_BUILD)/libdragon.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_BUILD)/libdragon.a -o $@ $(FUZZ_LDLIBS)

# run-fuzz_NAME: corpus in build-fuzz/corpus/fuzz_NAME, seeds and crashers
# in tests/fuzz/NAME/
$(FUZZ_TARGETS:%=run-%): run-fuzz_%: $(FUZZ_BUILD)/fuzz_%
	@mkdir -p $(FUZZ_BUILD)/corpus/fuzz_$* tests/fuzz/$*
	./$< -max_total_time=$(FUZZ_SECONDS) -timeout=10 -max_len=4096 -print_final_stats=1 \
	  $(if $(filter-out 1,$(FUZZ_JOBS)),-jobs=$(FUZZ_JOBS) -workers=$(FUZZ_JOBS)) \
	  -artifact_prefix=tests/fuzz/$*/ \
	  $(FUZZ_BUILD)/corpus/fuzz_$* tests/fuzz/$* $(wildcard tests/data/kernels)

-include $(FUZZ_LIB_OBJ:.o=.d)
