# imgctl: the two commands of the README, and the usual targets.
.PHONY: setup build image test lint

setup:
	bash scripts/setup.sh

build: setup
	cargo build --release

# Set up, then build the default image (PyTorch 2.7 / CUDA 12.4 profile) under
# build's default tag, imgctl/cu124:latest.
image: build
	./target/release/imgctl build --cuda 12.4

# Set up, then run the whole test suite (CI runs exactly this).
test: setup
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cargo build --no-default-features
	cargo test
	bash scripts/fuzz-ci.sh
	bash scripts/engine-tests.sh 28

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
