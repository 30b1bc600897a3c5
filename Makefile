# efim: the two commands a fresh machine needs are `make serve` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: deps build test serve check-avx512 check-soak check-sanitize check-scaleout check-peer-infill clean
SOAK_SECONDS ?= 600

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

# Optional: 24 workers of valid and hostile traffic against `efim serve` (scripts/soak.py); its
# last line gives requests by class, 5xx, hangs, KV blocks left referenced and RSS.
check-soak: build
	/usr/bin/python3 scripts/soak.py $(BUILD)/bin/efim models/efim-tiny-q8_0.gguf --seconds $(SOAK_SECONDS)

# Optional: 3 replicas behind deploy/haproxy/haproxy.cfg, 12 users typing as llama.vim does,
# once with the recipe's affinity key and once round-robin, a replica killed halfway through
# each (scripts/scaleout.py, ~5 min). Last line: affinity reuse A, round-robin reuse B, failed F.
check-scaleout: build
	/usr/bin/python3 scripts/scaleout.py $(BUILD)/bin/efim models/efim-tiny-q8_0.gguf --check

# Optional: the typing workload against efim serve and llama.cpp's llama-server (built from the
# bundled source, ~10 min the first time) on the same GGUF (scripts/check_peer_infill.sh).
check-peer-infill: build
	./scripts/check_peer_infill.sh

# Optional: the unit and end-to-end tests built with ASan, UBSan and LSan.
check-sanitize: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEFIM_SANITIZE=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --output-on-failure -j $(JOBS) --timeout 3000

clean:
	rm -rf $(BUILD)
