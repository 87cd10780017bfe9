# Shortcuts over scripts/ (the README's two commands do not need make).
BUILD ?= build
export BUILD_DIR := $(BUILD)

.PHONY: setup build test unit e2e gpu demo clean
setup: ; bash scripts/setup.sh
build: ; bash scripts/build.sh
test: ; bash scripts/run-tests.sh
demo: ; bash scripts/run-demo.sh
unit: build ; cd $(BUILD) && ctest --output-on-failure -L unit
e2e: build ; cd $(BUILD) && ctest --output-on-failure -L e2e
gpu: build ; cd $(BUILD) && ctest --output-on-failure -L gpu
clean: ; rm -rf $(BUILD)
