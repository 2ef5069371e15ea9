# imgctl: the two commands of the README, and the usual targets.
.PHONY: setup build front install image test lint

setup:
	bash scripts/setup.sh

build: setup
	cargo build --release

# The front end: imgctl without libtorch (starts in milliseconds), which hands
# train-demo, sample and verify of this host to imgctl-torch beside it.
front: setup
	cargo build --release --no-default-features --target-dir target/front

# Install the pair: the front end as imgctl, the full build as imgctl-torch.
PREFIX ?= /usr/local
install: build front
	install -D -m 755 target/front/release/imgctl $(DESTDIR)$(PREFIX)/bin/imgctl
	install -D -m 755 target/release/imgctl $(DESTDIR)$(PREFIX)/bin/imgctl-torch

# Set up, then build the default image (PyTorch 2.7 / CUDA 12.4 profile) under
# build's default tag, imgctl/cu124:latest.
image: build
	./target/release/imgctl build --cuda 12.4

# Set up, then run the whole test suite (CI runs exactly this).
test: setup
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cargo build --no-default-features
	cp target/debug/imgctl target/imgctl-front
	cargo test
	bash scripts/ci-last.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
