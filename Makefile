# SPDX-License-Identifier: GPL-2.0
#
# riser: an iSER initiator in Rust.
#
#   make            build riser.ko against KDIR (default: the kernel scripts/setup built)
#   make lint       rustfmt --check, clippy with the kernel's lints, W=1 build with -Werror
#   make bench      riser, ib_iser, nvme-rdma and iscsi_tcp on the fast kernel, one guest per
#                   RDMA device under QEMU's -icount, each module's instructions
#                   per I/O counted (Documentation/performance.md); FAST_KDIR
#   make insns      the bench's instruction-counting QEMU plugin and its mark
#   make demo       boot a guest and show riser at work: soft-RoCE, a LIO target,
#                   discovery, login, ext4 made, written and read back, logout
#                   (on the kernel scripts/setup built, or FAST_KDIR if given)
#   make check      lint, host unit tests of the proto layer, a time-boxed fuzz
#                   run, then every test inside guests on the debug kernel
#                   (KUnit, sysfs, sessions over rxe and siw, the negotiation
#                   matrix, CHAP, resets, two sessions, discovery of many
#                   targets, faults, a hostile target, leak scans), each
#                   against tests/manifest; ends "N passed, N failed, N retried"
#   make host-test  the proto layer's unit tests as a host crate (cargo test)
#   make fuzz       the proto layer's parsers under cargo-fuzz, 30 s a target
#   make evil       the hostile iSER target, an idle CM connection and a
#                   dropped login (tests/target/iser-evil.c, cm-idle.c,
#                   login-drop.c)
#   make inject     the test build of riser.ko with fault injection
#                   (out/fault-build/riser.ko, for tests/guest/inject.sh)
#   make linkdown   how fast riser and ib_iser notice a lost link (the
#                   carrier under rxe's netdev lost under fio), in one guest
#   make scale      16 sessions at once, riser against ib_iser in one guest:
#                   login and logout of all, kernel memory per session
#   make failover   how long I/O stops when one of two dm-multipath paths
#                   dies, riser against ib_iser, in one guest
#   make reference  the guest harness (LIO target, iscsid) driven by the C
#                   ib_iser over rxe and over siw: proves the harness, not riser
#   make install    (as root, after make) riser.ko into KDIR's kernel's
#                   updates/ directory, depmod, the modprobe.d rule that
#                   makes open-iscsi's automatic "modprobe ib_iser" load riser
#                   (and "modprobe -r ib_iser" unload it), and the
#                   initramfs-tools hook that puts riser.ko in an initramfs
#   make uninstall  undoes make install: iscsid loads ib_iser again
#   make dkms-install  (as root) riser under DKMS for the running kernel
#                   and every new one (scripts/dkms-riser), with the rule
#   make dkms-uninstall  dkms remove, the sources and the rule
#   make distro-check  riser built for Debian's own 7.3.4+deb13-amd64 kernel
#                   (scripts/distro-kernel prepares the tree) and used in a
#                   guest that boots that kernel's unmodified image
#   make clean
#
# KDIR may name any kernel tree built with CONFIG_RUST=y.

KDIR ?= $(shell $(CURDIR)/scripts/setup --print-kdir)
FAST_KDIR ?= $(shell $(CURDIR)/scripts/setup --flavour fast --print-kdir 2>/dev/null)
LLVM ?= -19
RUSTFMT ?= rustfmt
# A tree scripts/setup built says which toolchain built it (LLVM=-19 and the
# bindgen on PATH for the debug flavour, LLVM=-22 and a bindgen 0.72.1 of
# its own for the fast one), and riser.ko is built with the same.
-include $(KDIR)/riser-toolchain.mk
# A tree scripts/distro-kernel prepared for a distribution's kernel says
# which toolchain builds for it (LLVM off, its gcc and rustc release).
-include $(KDIR)/riser-distro.mk
# bindgen loads the newest libclang it finds unless LIBCLANG_PATH names one,
# and bindgen 0.71.1 does not work with libclang 22 (installed for the fast
# flavour): the libclang of the tree's LLVM, else (a distribution's tree, a
# tree without riser-toolchain.mk) LLVM 19's, which bindgen 0.71.1 works with.
LIBCLANG_PATH ?= /usr/lib/llvm$(if $(LLVM),$(LLVM),-19)/lib
export LIBCLANG_PATH
KMAKE_TOOLS = LLVM=$(LLVM) $(if $(BINDGEN),BINDGEN=$(BINDGEN)) $(KMAKE_DISTRO)
KMAKE = $(MAKE) -C $(KDIR) M=$(CURDIR) $(KMAKE_TOOLS)
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: all modules lint fmt check check-env clean host-test fuzz reference demo evil bench insns inject linkdown failover scale \
	install uninstall distro-build distro-check dkms-install dkms-uninstall dkms-sandbox

# The guest scripts of `make check`, one guest each (SCRIPT:N: N vCPUs).
# tests/manifest lists each with the checks it plans: a guest added here or
# dropped goes there too, or make check fails.
# tests/run-guest runs one-vCPU guests three at a time, in the order given
# here: hostile-session.sh, the longest (1050 to 1760 s in make check), fills
# one lane and the others pack the other two so that the three end together
# (of every order of the nine, the one that ends first on average over the
# guest times of recent make check runs), then hostile.sh (the hostile target's modes that race a command's end
# against its sends or its task slot's reuse, early status, the held
# release, answers to commands not yet sent) and session.sh each alone on two vCPUs, so that riser's
# submission and completion paths run in parallel under KASAN and lockdep
# (a response on one CPU while the command's Data-Outs go out on the
# other); hostile-session.sh has the hostile target's other modes on one. A guest with two vCPUs waits
# for every guest before it: they come last. (inject.sh on two vCPUs
# alone made make check 43 minutes, against 35 planned; its held-up send
# completions show the same on one.)
GUEST_TESTS = tests/guest/hostile-session.sh tests/guest/faults.sh tests/guest/features.sh tests/guest/install.sh \
	tests/guest/inject.sh tests/guest/scale.sh tests/guest/matrix.sh tests/guest/mpath.sh \
	tests/guest/session-siw.sh tests/guest/check.sh tests/guest/hostile.sh:2 tests/guest/session.sh:2

# The hostile iSER target (userspace verbs), run inside the guest.
EVIL = out/iser-evil
# An idle RDMA CM connection to a portal (tests/target/cm-idle.c).
CM_IDLE = out/cm-idle
# A Login Request sent and its connection dropped (tests/target/login-drop.c).
LOGIN_DROP = out/login-drop
EVIL_CFLAGS = -O2 -g -Wall -Wextra -Werror

all: modules

modules:
	@test -n "$(KDIR)" || { echo "no kernel tree: run scripts/setup or set KDIR" >&2; exit 1; }
	$(KMAKE) modules
	$(if $(filter command line,$(origin RISER_FAULT_INJECTION)),,@! modinfo -F test_build riser.ko | grep -q . || \
		{ echo "riser.ko is a test build, though RISER_FAULT_INJECTION was not asked for" >&2; exit 1; })

# rustfmt follows the crate's `mod` declarations from the root.
fmt:
	$(RUSTFMT) --edition 2021 --config-path $(KDIR)/.rustfmt.toml rust/riser_main.rs

lint:
	@test -n "$(KDIR)" || { echo "no kernel tree: run scripts/setup or set KDIR" >&2; exit 1; }
	# design.md's table of the layers' `use crate::` edges against the code.
	scripts/check-layers
	$(RUSTFMT) --check --edition 2021 --config-path $(KDIR)/.rustfmt.toml rust/riser_main.rs
	$(KMAKE) clean
	$(KMAKE) W=1e CLIPPY=1 modules
	$(KMAKE) clean
	$(KMAKE) W=1e modules

# The proto layer's source, built for the host: its tests run under cargo,
# and tests/run-guest adds their counts to the total.
host-test:
	@mkdir -p out
	# Not incremental: the kernel's "make clean" for external modules deletes
	# every *.o below this tree, cargo's incremental files included.
	CARGO_INCREMENTAL=0 cargo test --manifest-path tests/host/Cargo.toml 2>&1 | tee out/host-test.log
	# The guest scripts' log helpers under pipefail, on the host.
	tests/host/guest-pipefail.sh >out/guest-pipefail.log 2>&1 || { cat out/guest-pipefail.log; exit 1; }

evil: $(EVIL) $(CM_IDLE) $(LOGIN_DROP)

# The test build with fault injection (rust/fault.rs, rust/params.c): the same
# sources built apart, in out/fault-build, with RISER_FAULT_INJECTION=1. A user's
# riser.ko (make) has no fault knobs.
inject:
	@test -n "$(KDIR)" || { echo "no kernel tree: run scripts/setup or set KDIR" >&2; exit 1; }
	@mkdir -p out/fault-build
	rsync -a --delete Kbuild include rust scripts out/fault-build/
	$(MAKE) -C $(KDIR) M=$(CURDIR)/out/fault-build $(KMAKE_TOOLS) RISER_FAULT_INJECTION=1 W=1e modules
	@modinfo -F test_build out/fault-build/riser.ko | grep -q . || \
		{ echo "out/fault-build/riser.ko has no test-build mark" >&2; exit 1; }

$(EVIL): tests/target/iser-evil.c
	@mkdir -p out
	$(CC) $(EVIL_CFLAGS) -o $@ $< -libverbs -lrdmacm

$(CM_IDLE): tests/target/cm-idle.c tests/target/cm-client.h
	@mkdir -p out
	$(CC) $(EVIL_CFLAGS) -o $@ $< -libverbs -lrdmacm

$(LOGIN_DROP): tests/target/login-drop.c tests/target/cm-client.h
	@mkdir -p out
	$(CC) $(EVIL_CFLAGS) -o $@ $< -libverbs -lrdmacm

# The proto layer fuzzed with cargo-fuzz, time-boxed (RISER_FUZZ_SECONDS per
# target, default 30); tests/run-guest adds its results to the total, so a
# crash fails make check after the guests have run too.
fuzz:
	@mkdir -p out
	tests/fuzz/run 2>&1 | tee out/fuzz.log

# make check runs the whole suite or nothing: RISER_* settings that would
# skip or trim checks (RISER_EVIL_MODES, RISER_FIO_BS, RISER_MATRIX,
# RISER_EXPECT_KUNIT, ...) are refused before anything runs (check-env, which
# also reads tests/manifest), and run-guest --check fails a guest that
# declares no plan, and compares the run with tests/manifest: every guest of
# GUEST_TESTS, every KUnit suite and fuzz target there, with its count.
check-env:
	@tests/run-guest --check --env-only

# The fuzz run (30 s a target, one core) goes beside the builds (one core
# each, one after the other, about two minutes), all targets but the last
# there and the last on the builds' core once they are done, so that both
# cores end about together; its result is counted by run-guest, so a crash
# fails make check after the guests have run too.
FUZZ_TARGETS = $(shell tests/fuzz/run --list)
FUZZ_LAST = $(lastword $(FUZZ_TARGETS))
check: check-env
	@mkdir -p out
	tests/fuzz/run $(filter-out $(FUZZ_LAST),$(FUZZ_TARGETS)) >out/fuzz.log 2>&1 & fuzz=$$!; \
	$(MAKE) --no-print-directory lint host-test $(EVIL) $(CM_IDLE) $(LOGIN_DROP) inject dkms-sandbox insns; rc=$$?; \
	tests/fuzz/run $(FUZZ_LAST) >out/fuzz-last.log 2>&1; \
	wait $$fuzz; cat out/fuzz-last.log >>out/fuzz.log; cat out/fuzz.log; \
	if [ $$rc -ne 0 ]; then \
		echo "make check: the lint, a build or the host tests failed (above): no guest ran"; \
		echo "0 passed, 1 failed, 0 retried"; \
	fi; \
	exit $$rc
	RISER_HOST_LOG=out/host-test.log RISER_FUZZ_LOG=out/fuzz.log \
	RISER_PIPEFAIL_LOG=out/guest-pipefail.log \
		tests/run-guest --check --kdir $(KDIR) $(GUEST_TESTS)

# riser against ib_iser and iscsi_tcp on the fast kernel flavour (built by
# setup on first use); FAST_KDIR names another tree. Tables in out/bench/.
bench:
	tools/bench/run $(if $(FAST_KDIR),--kdir $(FAST_KDIR))

# The bench's QEMU plugin, which counts each module's instructions, and the
# mark the guest executes around every workload (tools/bench/insns): built
# by make bench, and by make check so that a change that breaks them shows.
INSNS_CFLAGS = -O2 -Wall -Wextra -Werror
insns: out/insns/insns.so out/insns/riser-mark
out/insns/insns.so: tools/bench/insns/insns.c tools/bench/insns/plugin.h
	@mkdir -p out/insns
	$(CC) $(INSNS_CFLAGS) -fPIC -shared -fvisibility=hidden -o $@ $<
out/insns/riser-mark: tools/bench/insns/mark.c
	@mkdir -p out/insns
	$(CC) $(INSNS_CFLAGS) -static -o $@ $<

# The demo needs no speed: it runs on the kernel scripts/setup already built
# (KDIR, the debug flavour), or on FAST_KDIR when that is given on the
# command line or in the environment (make demo FAST_KDIR=...). It builds no
# kernel. riser.ko is rebuilt for the tree it runs on.
demo:
	@kdir="$(KDIR)"; \
	case "$(origin FAST_KDIR)" in command*|environment*) kdir="$(FAST_KDIR)" ;; esac; \
	test -n "$$kdir" || { echo "no kernel tree: run scripts/setup or set KDIR" >&2; exit 1; }; \
	$(MAKE) --no-print-directory KDIR="$$kdir" clean modules >/dev/null || exit 1; \
	RISER_EXPECT_KUNIT=0 tests/run-guest --kdir "$$kdir" --out out/demo tests/demo/demo.sh; \
	rc=$$?; cat out/demo/demo.log; exit $$rc

# How fast riser and ib_iser notice a dead link (Documentation/observability.md):
# one guest on the debug kernel, RISER_LINKDOWN_ROUNDS rounds each.
linkdown: modules
	RISER_EXPECT_KUNIT=0 tests/run-guest --kdir $(KDIR) tests/reference/linkdown.sh

# dm-multipath failover, riser against ib_iser (Documentation/testing.md):
# one guest on the debug kernel, RISER_MPATH_ROUNDS rounds each.
failover: modules
	RISER_EXPECT_KUNIT=0 RISER_MPATH_COMPARE=1 tests/run-guest --kdir $(KDIR) tests/guest/mpath.sh

# Many sessions at once, riser against ib_iser in one guest
# (tests/guest/scale.sh, Documentation/performance.md): the time of the
# login of all and of the logout of all, and the kernel memory a session
# holds, for each. riser runs first and last: the first round fills the
# RDMA device's CQ pool, which both later rounds find full (compare those).
scale: modules
	RISER_EXPECT_KUNIT=0 RISER_SCALE_INITIATORS="riser ib_iser riser" RISER_SCALE_FIO="8 4M" \
		tests/run-guest --kdir $(KDIR) --out out/scale tests/guest/scale.sh; \
	rc=$$?; cat out/scale/scale.txt 2>/dev/null; exit $$rc

reference: modules
	RISER_EXPECT_KUNIT=0 tests/run-guest --kdir $(KDIR) tests/reference/ib_iser_smoke.sh
	RISER_EXPECT_KUNIT=0 tests/run-guest --kdir $(KDIR) tests/reference/ib_iser_siw_smoke.sh
	RISER_EXPECT_KUNIT=0 tests/run-guest --kdir $(KDIR) tests/reference/ib_iser_extra.sh

# Where make install puts things: the release of the kernel in KDIR (for the
# running kernel, KDIR=/lib/modules/$(uname -r)/build), under INSTALL_MOD_PATH
# (empty: /), and the modprobe.d and initramfs-tools hooks directories
# under DESTDIR.
KRELEASE = $(shell cat $(KDIR)/include/config/kernel.release 2>/dev/null)
MODPROBE_D ?= /etc/modprobe.d
INITRAMFS_HOOKS ?= /etc/initramfs-tools/hooks

# Not built here: make install runs as root, often from a tree built by a
# user (and the guest test runs it on a read-only tree).
install:
	@test -n "$(KRELEASE)" || { echo "no kernel release in KDIR=$(KDIR)" >&2; exit 1; }
	@test -f riser.ko || { echo "riser.ko is not built: run make (with the same KDIR) first" >&2; exit 1; }
	$(KMAKE) INSTALL_MOD_DIR=updates modules_install
	install -D -m 0644 scripts/modprobe-riser.conf $(DESTDIR)$(MODPROBE_D)/riser.conf
	install -D -m 0755 scripts/initramfs-riser-hook $(DESTDIR)$(INITRAMFS_HOOKS)/riser

uninstall:
	@test -n "$(KRELEASE)" || { echo "no kernel release in KDIR=$(KDIR)" >&2; exit 1; }
	rm -f $(INSTALL_MOD_PATH)/lib/modules/$(KRELEASE)/updates/riser.ko*
	rm -f $(DESTDIR)$(MODPROBE_D)/riser.conf $(DESTDIR)$(INITRAMFS_HOOKS)/riser
	depmod $(if $(INSTALL_MOD_PATH),-b $(INSTALL_MOD_PATH)) $(KRELEASE)

dkms-install:
	scripts/dkms-riser install

dkms-uninstall:
	scripts/dkms-riser uninstall

# DKMS builds riser on the host in trees of its own under out/dkms, for the
# test kernel; tests/guest/install.sh installs that build with dkms.
dkms-sandbox:
	@test -n "$(KRELEASE)" || { echo "no kernel release in KDIR=$(KDIR)" >&2; exit 1; }
	scripts/dkms-riser sandbox out/dkms $(KDIR) $(KRELEASE) >out/dkms.log 2>&1 || \
		{ tail -n 30 out/dkms.log; exit 1; }

# riser built apart (out/distro-build) against the distribution's tree, which
# scripts/distro-kernel prepared (make distro-check, tools/bench/run --distro).
# Sources only: what a build of the tree itself left in rust/ stays out (its
# .cmd files name the other kernel tree's generated files, which Kbuild would
# make again with the distribution's flags, into that tree; and its bindings,
# newer than their headers, would pass for this build's).
distro-build:
	@mkdir -p out/distro-build
	rsync -a --delete --exclude '*.o' --exclude '*.ko' --exclude '.*.cmd' --exclude '*.bc' \
		--exclude bindings_generated.rs Kbuild Makefile include rust scripts out/distro-build/
	kdir=$$(scripts/distro-kernel --print-kdir) && \
		$(MAKE) -C out/distro-build --no-print-directory KDIR="$$kdir" modules

# Then tests/guest/distro.sh in a guest booting its vmlinuz.
distro-check:
	scripts/distro-kernel
	$(MAKE) --no-print-directory distro-build
	RISER_EXPECT_KUNIT=0 RISER_DISTRO_KO=$(CURDIR)/out/distro-build/riser.ko \
		tests/run-guest --kdir "$$(scripts/distro-kernel --vmlinuz)" tests/guest/distro.sh

# The kernel's clean leaves the LLVM bitcode of a build for a tree with
# CONFIG_RUST_INLINE_HELPERS or built with gcc (rust/riser_main.bc and
# .m.bc, linked with the helpers' into riser_main.o; Kbuild).
clean:
	@test -z "$(KDIR)" || $(KMAKE) clean
	rm -rf rust/bindings_generated.rs rust/*.bc tests/host/target tests/fuzz/target
