# SPDX-License-Identifier: GPL-2.0
#
# riser: an iSER initiator in Rust.
#
#   make            build riser.ko against KDIR (default: the kernel scripts/setup built)
#   make lint       rustfmt --check, clippy with the kernel's lints, W=1 build with -Werror
#   make check      lint, then run every test inside a guest (KUnit, sysfs, unload)
#   make clean
#
# KDIR may name any kernel tree built with CONFIG_RUST=y.

KDIR ?= $(shell $(CURDIR)/scripts/setup --print-kdir)
LLVM ?= -19
RUSTFMT ?= rustfmt
KMAKE = $(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM)

.PHONY: all modules lint fmt check clean

all: modules

modules:
	@test -n "$(KDIR)" || { echo "no kernel tree: run scripts/setup or set KDIR" >&2; exit 1; }
	$(KMAKE) modules

# rustfmt follows the crate's `mod` declarations from the root.
fmt:
	$(RUSTFMT) --edition 2021 --config-path $(KDIR)/.rustfmt.toml rust/riser_main.rs

lint:
	@test -n "$(KDIR)" || { echo "no kernel tree: run scripts/setup or set KDIR" >&2; exit 1; }
	$(RUSTFMT) --check --edition 2021 --config-path $(KDIR)/.rustfmt.toml rust/riser_main.rs
	$(KMAKE) clean
	$(KMAKE) W=1e CLIPPY=1 modules
	$(KMAKE) clean
	$(KMAKE) W=1e modules

check: lint
	tests/run-guest --kdir $(KDIR)

clean:
	@test -z "$(KDIR)" || $(KMAKE) clean
	rm -f rust/bindings_generated.rs
