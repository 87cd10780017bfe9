# The two README commands and their building blocks. Everything builds in build/ with CMake + Ninja.
BUILD ?= build
CMAKE_FLAGS ?= -DGPUCKPT_WERROR=ON
JOBS ?= $(shell nproc)

.PHONY: setup build test unit e2e demo clean

setup:
	bash scripts/setup.sh

build:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# README command 2: every test (unit, e2e; gpu tests report skipped without a GPU).
test: setup build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -j 1

unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit

e2e: build
	cd $(BUILD) && ctest --output-on-failure -L e2e

# README command 1: set up this machine and checkpoint/restore a running container through gpuckpt.
demo: setup build
	bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
