# imgctl: the README's commands, and the usual targets. Each set-up target
# installs only what its command needs (scripts/setup.sh TARGET; add
# `--dry-run` there to see the plan without changing anything).
.PHONY: setup build front install install-full image dist test lint

# The test world (what `make test` needs).
setup:
	bash scripts/setup.sh test

# The full build (imgctl with libtorch: train-demo, sample, verify on this host).
build:
	bash scripts/setup.sh full
	cargo build --release

# The front end: imgctl without libtorch (starts in milliseconds); torch
# commands go to imgctl-torch beside it, or run inside the image.
front:
	bash scripts/setup.sh front
	cargo build --release --no-default-features --target-dir target/front

# Install the front end alone: it needs a Rust toolchain and nothing else.
PREFIX ?= /usr/local
install: front
	install -D -m 755 target/front/release/imgctl $(DESTDIR)$(PREFIX)/bin/imgctl

# Install the pair: the front end as imgctl, the full build as imgctl-torch.
install-full: front build
	install -D -m 755 target/front/release/imgctl $(DESTDIR)$(PREFIX)/bin/imgctl
	install -D -m 755 target/release/imgctl $(DESTDIR)$(PREFIX)/bin/imgctl-torch

# The full build plus a Docker engine (only when none answers), then the
# default image (PyTorch 2.7 / CUDA 12.4 profile) under build's default tag,
# imgctl/cu124:latest.
image:
	bash scripts/setup.sh image
	cargo build --release
	./target/release/imgctl build --cuda 12.4

# The release tarballs in dist/ (scripts/dist.sh).
dist:
	bash scripts/setup.sh dist
	bash scripts/dist.sh

# Set up, then run the whole test suite (CI runs exactly this).
test: setup
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cargo build --no-default-features
	cp target/debug/imgctl target/imgctl-front
	cargo test --no-run
	bash scripts/dist.sh --profile dev --arch "x86_64 aarch64" --out target/dist-test
	cargo test
	# The 64-node fleet runs (#54), alone: each takes both cores for ~40 s.
	cargo test --test it -- --ignored --exact --test-threads 1 \
		fleet::scale::sixty_four_ranks_under_torchrun_give_one_verdict_each_through_the_tree \
		slurm::scale::sixty_four_nodes_under_srun_give_one_verdict_each_grouped_by_switch
	bash scripts/ci-last.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
