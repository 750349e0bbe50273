#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# riser on a distribution's own kernel (`make distro-check`): the guest boots
# Debian's unmodified vmlinuz with its own modules, and riser.ko (built for
# it by `scripts/setup --distro`) is loaded into it, then used as a user
# would: discovery, login, fio with crc32c verification, ext4, logout,
# rmmod. Only what that kernel has: no KUnit, no kmemleak, no siw.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
KO=${RISER_DISTRO_KO:-$RISER_TOP/riser.ko}
IP=192.168.77.1
IQN=iqn.2026-11.org.riser:distro
MNT=/tmp/riser-mnt

# The module was built for this very kernel: its vermagic is the running
# release.
built_for_this_kernel() {
	local v
	v=$(modinfo -F vermagic "$KO") || return 1
	echo "uname -r: $(uname -r); riser.ko vermagic: $v"
	[ "${v%% *}" = "$(uname -r)" ]
}
# The C helpers, the kernel's (atomics, RCU, ...) and riser's
# (rust/helpers.c), are inlined into riser's Rust code: none is called in
# vmlinux, none is a function of riser.ko's own. scripts/setup installs the
# clang and llvm-link of rustc's LLVM, with which Kbuild builds riser's
# crate as LLVM bitcode linked with theirs on a gcc-built kernel.
helpers_inlined() {
	local u t h
	u=$(nm -u "$KO" | grep -E ' rust_helper_') && { echo "called in vmlinux: $u"; return 1; }
	h=$(grep -oE '^__riser_helper [^(]*\briser_[a-z0-9_]+\(' "$RISER_TOP/rust/helpers.c" |
		grep -oE 'riser_[a-z0-9_]+' | sort -u)
	[ -n "$h" ] || return 1
	t=$(nm "$KO" | awk '$2 == "T" { print $3 }' | sort | comm -12 - <(echo "$h"))
	[ -z "$t" ] || { echo "riser.ko's own: $t"; return 1; }
}
# ext4 made on the LUN, a file written, read back cold and compared.
fs_roundtrip() {
	mkfs.ext4 -q -F "$DEV" || return 1
	mkdir -p "$MNT" && mount "$DEV" "$MNT" || return 1
	dd if=/dev/urandom of=/tmp/a.bin bs=1M count=4 status=none &&
		cp /tmp/a.bin "$MNT/a.bin" && sync || { umount "$MNT"; return 1; }
	umount "$MNT" && echo 3 >/proc/sys/vm/drop_caches && mount "$DEV" "$MNT" || return 1
	local rc=0
	cmp /tmp/a.bin "$MNT/a.bin" || rc=1
	umount "$MNT" && return $rc
}
# riser's PDU tracepoints, whose static branches riser's Rust tests through
# this kernel's jump labels (rust/trace.rs): on for one 4k READ, they show
# its SCSI Command sent and a SCSI Response received.
TR=/sys/kernel/tracing
pdu_events() {
	[ -d $TR/events ] || mount -t tracefs nodev $TR || return 1
	echo >$TR/trace && echo 1 >$TR/events/riser/riser_pdu_send/enable &&
		echo 1 >$TR/events/riser/riser_pdu_recv/enable || return 1
	dd if="$DEV" of=/dev/null bs=4k count=1 skip=3 iflag=direct
	local rc=$?
	echo 0 >$TR/events/riser/riser_pdu_send/enable
	echo 0 >$TR/events/riser/riser_pdu_recv/enable
	[ $rc = 0 ] || return 1
	grep riser_pdu $TR/trace | tail -4
	grep -q 'riser_pdu_send:.* opcode=0x01 ' $TR/trace &&
		grep -q 'riser_pdu_recv:.* opcode=0x21 ' $TR/trace
}
# No kernel line of riser's says it failed a connection.
no_conn_failure() {
	! dmesg | grep -E "$CONN_TROUBLE"
}

dmesg_live

plan 20

check "riser.ko was built for the running kernel" built_for_this_kernel
check "riser.ko calls none of the kernel's Rust helpers or its own C ones (inlined)" helpers_inlined
check "soft-RoCE device rxe0 created" setup_rxe "$IP"
check "riser's dependencies load (the kernel's own modules)" load_deps
# Modules here, built in in the test kernels; no udev loads sd_mod when the
# LUN appears.
check "sd_mod and ext4 load" modprobe -a sd_mod ext4
check "insmod riser.ko" insmod "$KO"
check "transport iser registered" test -d /sys/class/iscsi_transport/iser
check "LIO rd_mcp target with an iSER portal" lio_rd_target "$IQN" "$IP" 32 rxe
check "iscsid started" iscsi_start
check "discovery over iser finds $IQN" iscsi_discover_lists "$IP" "$IQN"
check "login over iser" iscsi_login "$IQN" "$IP" iser
DEV=$(iscsi_dev "$IQN" 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "block device of LUN 0 appears ($DEV)" test -b "$DEV"
check "the SCSI host is iscsi_iser" iscsi_host_is_iscsi_iser "$IQN"
check "riser's PDU tracepoints fire (static branches on jump labels)" pdu_events
check "fio randwrite 4k QD32 verify crc32c" fio_verify "$DEV" randwrite 4k 32 4M
check "fio write 512k QD4 verify crc32c" fio_verify "$DEV" write 512k 4 8M
check "ext4: write, drop caches, read back, compare" fs_roundtrip
check "no connection failure" no_conn_failure
check "logout" iscsi_logout "$IQN" "$IP"
check "rmmod riser" unload_riser
iscsi_stop >/dev/null 2>&1
lio_teardown >/dev/null 2>&1
save_dmesg
