# Baton's front door. `make demo` and `make test` set everything up on a fresh Debian/Ubuntu.
BUILD ?= build
JOBS ?= 2
CONFIG ?= configs/gpt-tiny.yaml

.PHONY: all setup build test demo bench sanitize gpu-check gpu-bundle format clean

all: build

setup:
	@scripts/setup.sh $(BUILD)

build: setup
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# --overwrite: the demo again replaces its own earlier run in the config's output.dir.
demo: build
	$(BUILD)/baton run $(CONFIG) --overwrite

bench: build
	bench/run.sh $(BUILD)

# ASan+UBSan (build-asan: unit and process-starting integration tests) and TSan (build-tsan: the
# communicator, coordinator and in-process pipeline tests), CUDA off; scripts/sanitize.sh.
sanitize:
	JOBS=$(JOBS) scripts/sanitize.sh all

format:
	git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD)

# GPU session check (docs/cuda.md): builds build-gpu with CUDA, runs ctest -L gpu, compares a
# 2-stage GPU pipeline with the CPU, and benchmarks gpt2-124m. Fits 8 minutes on one H200.
gpu-check:
	scripts/gpu-check.sh build-gpu

# For a GPU machine that cannot build (the device tool's, docs/cuda.md): builds build-bundle
# (Release, sm_90; GPU_ARCH=80 or "80;90" for others) and packs .gpu-bundle/, under 48 MiB.
GPU_ARCH ?= 90
gpu-bundle: setup
	JOBS=$(JOBS) scripts/gpu-bundle.sh --arch "$(GPU_ARCH)" --build-dir build-bundle
