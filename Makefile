# Makefile - the two entry points of the README, around CMake + ctest.
#   make train   install what is missing, build, train LeNet on Fashion-MNIST
#   make test    install what is missing, build, run the whole test suite
#                (also under ThreadSanitizer and AddressSanitizer first)
#   make bench   install what is missing (PyTorch too), run the benchmarks
#   make install PREFIX=DIR   build, install the library, headers, dptrain.pc,
#                the CMake package and the command under DIR (default /usr/local)
BUILD ?= build
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local
TRAIN_ARGS ?= --model lenet --epochs 10 --batch-size 256 --lr 0.2

.PHONY: all setup build train test bench install clean

all: build

setup:
	@scripts/setup.sh build

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

train: build
	$(BUILD)/dptrain train $(TRAIN_ARGS) --metrics $(BUILD)/metrics.jsonl --plot $(BUILD)/training.svg

test: build
	@scripts/setup.sh test
	scripts/sanitize.sh thread
	scripts/sanitize.sh address
	scripts/check_no_mpi.sh
	scripts/check_arm64.sh
	scripts/check_cuda_build.sh $(BUILD) --no-tests # its tests: in the ctest below
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	@scripts/setup.sh bench
	bench/epoch_vs_pytorch.sh $(BUILD)/dptrain 5 1
	bench/scaling.sh $(BUILD)/dptrain 3
	bench/ddp_vs_dptrain.sh $(BUILD)/dptrain 5
	$(BUILD)/allreduce_bench 2
	$(BUILD)/sync_bench 2 50
	if [ -x $(BUILD)/mpi_sync_bench ]; then mpirun --allow-run-as-root --oversubscribe -np 2 $(BUILD)/mpi_sync_bench 200; fi
	bench/book_runs.sh $(BUILD)/dptrain 0
	bench/layers_vs_pytorch.sh $(BUILD)/layer_bench 0.3 3
	bench/decode_vs_pil.sh $(BUILD) 2000 3

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD)
