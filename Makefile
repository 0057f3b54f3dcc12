# ignite: the entry point. CMake builds and CTest tests underneath.
#
#   make               build build/ignite alone (CUDA objects too when nvcc is found):
#                      what `run` needs, not the test programs
#   make build-all     build ignite and every test program
#   make test          build-all, fetch the model, make the test venv, run ctest
#   make test LABEL=unit   only one class of tests (unit model tokenizer cli emu cpu gpu fuzz)
#   make asan          the tests again in an ASan + UBSan build (build-asan/), all but the
#                      emulated CUDA ones (built with the sanitizers in every build, so run
#                      once, by make test); the model tests run shorter cases there
#   make check-fast    the edit-build-test loop (a few minutes): build-all, then the tests
#                      that need no model, no fuzzing and no long emulation (labels
#                      model, fuzz, gpu and long left out)
#   make run           run ignite on the default model
#   make fetch-model   download the test models into the cache (see scripts/fetch-model.sh)
#   make fuzz          a long fuzzing run of a parser (FUZZ_SECONDS=600, FUZZ_TARGET=gguf,
#                      safetensors, hf_json, grammar, schema, batch, tokenizer, klfile or kvfile)
#   make gpu-check     on a GPU machine: the GPU check (scripts/gpu-steps.txt) from the
#                      programs scripts/gpu-prebuild.sh built beforehand into .gpubin
#   make clean

BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
LABEL ?=
CTEST_ARGS ?= --output-on-failure -j$(JOBS) $(if $(LABEL),-L '$(LABEL)')
# CI sets CI=true: warnings become errors there.
ifeq ($(CI),true)
CMAKE_ARGS += -DIGNITE_WERROR=ON
endif

.PHONY: all build build-all test check-fast asan run fetch-model venv fuzz gpu-check clean

all: build

# configure quietly, but say whether the CUDA backend is built
define configure
	@mkdir -p $(1)
	@cmake -S . -B $(1) $(2) $(CMAKE_ARGS) >$(1)/configure.log 2>&1 || { cat $(1)/configure.log; exit 1; }
	@grep '^-- ignite:' $(1)/configure.log | sed 's/^-- //' || true
endef

build:
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Release)
	@cmake --build $(BUILD) -j$(JOBS) --target ignite

build-all:
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Release)
	@cmake --build $(BUILD) -j$(JOBS)

fetch-model:
	@scripts/fetch-model.sh all

venv:
	@scripts/venv.sh

test: build-all fetch-model venv
	cd $(BUILD) && ctest $(CTEST_ARGS)

check-fast: build-all venv
	cd $(BUILD) && ctest $(CTEST_ARGS) -LE 'model|fuzz|gpu|long'

asan: fetch-model venv
	$(call configure,$(ASAN_BUILD),-DCMAKE_BUILD_TYPE=RelWithDebInfo -DIGNITE_SANITIZE=ON -DIGNITE_CUDA=OFF -DIGNITE_EMU_TESTS=OFF)
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 ctest $(CTEST_ARGS)

run: build fetch-model
	$(BUILD)/ignite run --chat -p "$(or $(PROMPT),Explain in two sentences what a KV cache is.)" -n 64 --temp 0

# build first: fuzz.sh reads which sources a target needs from its objects
fuzz: build
	@IGNITE_BUILD_DIR=$(BUILD) scripts/fuzz.sh $(or $(FUZZ_SECONDS),600) $(or $(FUZZ_TARGET),gguf)

gpu-check:
	@scripts/gpu-check.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
