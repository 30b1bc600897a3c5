# efim: the two commands a fresh machine needs are `make serve` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: deps build test serve check-avx512 clean

deps:
	./scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

serve: build
	./scripts/serve.sh

# Optional: the native AVX-512 kernels on an emulated AVX-512 CPU (scripts/check_avx512.sh).
check-avx512: deps
	./scripts/check_avx512.sh

clean:
	rm -rf $(BUILD)
