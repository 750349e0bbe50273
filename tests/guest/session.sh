#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# A session through riser, as a user runs it: LIO with an iSER portal over
# soft-RoCE (or soft-iWARP with RISER_RDMA=siw), riser.ko loaded, discovery
# and login with iscsiadm -I iser, ext4 made, written, read back cold and
# compared, fio with crc32c verification, logout and rmmod.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
KO=$RISER_TOP/riser.ko

RDMA=${RISER_RDMA:-rxe}
if [ "$RDMA" = siw ]; then
	IP=192.168.78.1 IP6=fd00:78::1 NDEV=${SIW_NETDEV:-dummy1}
	IPV6_GID=fd00:0078:0000:0000:0000:0000:0000:0001
	IQN=iqn.2026-11.org.riser:session-siw
else
	IP=192.168.77.1 IP6=fd00:77::1 NDEV=dummy0
	IPV6_GID=fd00:0077:0000:0000:0000:0000:0000:0001
	IQN=iqn.2026-11.org.riser:session
fi
# A second target, reached over IPv6 on the same RDMA device while the IPv4
# session is up; iscsiadm takes the portal in brackets; sysfs, rxe's GID
# table and libiscsi print the address in full (IPV6_GID).
IQN6=$IQN-ipv6
P6="[$IP6]"
MNT=/tmp/riser-mnt

fs_roundtrip() {
	mkfs.ext4 -q -F "$DEV" || return 1
	mkdir -p "$MNT" && mount "$DEV" "$MNT" || return 1
	dd if=/dev/urandom of=/tmp/a.bin bs=1M count=8 status=none &&
		cp /tmp/a.bin "$MNT/a.bin" &&
		seq 1 20000 >"$MNT/b.txt" && sync || return 1
	umount "$MNT" && echo 3 >/proc/sys/vm/drop_caches && mount "$DEV" "$MNT" || return 1
	local ok=0
	cmp /tmp/a.bin "$MNT/a.bin" && seq 1 20000 | cmp - "$MNT/b.txt" || ok=1
	umount "$MNT" && return $ok
}
# fio_sized RW BS QD: fio_verify on the session's disk, over 256 commands
# for 512-byte and 4 KiB blocks, 2 MiB for 64k and 512k, 4 MiB above (the
# guest is emulated, with KASAN, lockdep and kmemleak on, where a 4k
# command costs about 30 ms, and rxe copies and checksums every byte in
# software).
fio_sized() {
	local size
	case $2 in
	512) size=128k ;;
	4k) size=1M ;;
	64k | 512k) size=2M ;;
	*) size=4M ;;
	esac
	fio_verify "$DEV" "$1" "$2" "$3" "$size"
}
# No iSCSI session (to $IQN or any other: a discovery's included) and no
# endpoint is left; otherwise says what is.
# ipv6_addr: the IPv6 address on the RDMA device's netdev (no duplicate
# address detection: a tentative address cannot be bound). Over rxe, the
# device's GID table gains it (RoCE GIDs follow the netdev's addresses) and
# ib_core reports a GID change, which must fail no connection: the IPv4
# session's source address is still there (riser logs how many connections
# an async event failed).
ipv6_addr() {
	local mark end g lines
	kmsg_mark
	mark=$MARK
	ip -6 addr add "$IP6/64" dev "$NDEV" nodad || return 1
	[ "$RDMA" = siw ] && return 0
	end=$((SECONDS + 30))
	until lines=$(kernel_after_mark "$mark" | grep -E "riser: device rxe0: GidChange\(1\)"); do
		((SECONDS < end)) || { echo "no GID change reported by rxe0" >&2; return 1; }
		nap 0.5
	done
	echo "$lines"
	for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
		[ "$(<"$g")" = "$IPV6_GID" ] && break
	done 2>/dev/null
	[ "$(<"$g")" = "$IPV6_GID" ] || { echo "no GID $IPV6_GID on rxe0" >&2; return 1; }
	! grep -vq ": 0 connection(s) failed" <<<"$lines"
}
# ipv6_session_shown: `iscsiadm -m session` lists an iser session to $IQN6
# at its IPv6 portal, `-P 3` shows the connection's current portal
# (the address riser's get_ep_param gives, which libiscsi prints in full)
# and the attached disk, and sysfs has the address and port.
ipv6_session_shown() {
	local s out c
	out=$(iscsiadm -m session) && echo "$out" || return 1
	# Each grep reads to the end (no -q): none closes its pipe early.
	grep "^iser: " <<<"$out" | grep -F " $IQN6 " | grep "fd00:" >/dev/null || return 1
	out=$(iscsiadm -m session -P 3) && echo "$out" || return 1
	grep -qF "Current Portal: [$IPV6_GID]:$LIO_PORT,1" <<<"$out" &&
		grep -qF "Persistent Portal: $P6:$LIO_PORT,1" <<<"$out" &&
		grep -q "Iface Transport: iser" <<<"$out" &&
		grep -q "Attached scsi disk ${DEV6#/dev/}" <<<"$out" || return 1
	s=$(iscsi_session "$IQN6") || return 1
	for c in /sys/class/iscsi_session/"$s"/device/connection*/iscsi_connection/*; do
		[ "$(<"$c/address")" = "$IPV6_GID" ] && [ "$(<"$c/port")" = "$LIO_PORT" ] && return 0
	done
	echo "no connection of $s at $IPV6_GID:$LIO_PORT" >&2
	return 1
}
no_session_left() {
	! iscsi_session "$IQN" &&
		[ -z "$(ls /sys/class/iscsi_session 2>/dev/null)" ] &&
		[ -z "$(ls /sys/class/iscsi_endpoint 2>/dev/null)" ] && return 0
	iscsi_state
	return 1
}

dmesg_live

# Block sizes of the fio runs (session-siw.sh runs fewer: the sizes are the
# same code on either device). Each size runs random at QD 32 (many commands
# and registrations in flight) and sequential at QD 1 (one at a time); the
# other two pairings add run time on the KASAN kernel, not paths.
FIO_BS=${RISER_FIO_BS:-512 4k 64k 512k 1m 4m}
_bs=($FIO_BS)
# The kernel log as it grows: the dmesg checks read it (lib.sh, _klog).
dmesg_live

# 21 checks, and two for each block size, and the IPv6 portal's 10.
plan $((31 + 2 * ${#_bs[@]}))

check "RDMA device ($RDMA) created" setup_rdma "$RDMA" "$IP"
check "riser's dependencies load" load_deps
dmesg_mark
check "insmod riser.ko" insmod "$KO"
check "kmemleak cleared" kmemleak_clear
check "LIO rd_mcp target with an iSER portal ($RDMA)" lio_rd_target "$IQN" "$IP" 64 "$RDMA"
check "iscsid started" iscsi_start
check "discovery over iser finds $IQN" iscsi_discover_lists "$IP" "$IQN"
check "ib_iser was not loaded" test ! -d /sys/module/ib_iser
check "login over iser" iscsi_login "$IQN" "$IP" iser
check "the session's transport is iser" iscsi_session_is_iser "$IP" "$IQN"
check "the SCSI host is iscsi_iser" iscsi_host_is_iscsi_iser "$IQN"
DEV=$(iscsi_dev "$IQN" 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "block device of LUN 0 appears ($DEV)" test -b "$DEV"
check "device is 64 MiB" test "$(blockdev --getsize64 "$DEV" 2>/dev/null)" = $((64 << 20))
check "ext4: write, sync, drop caches, read back, compare (no connection failure)" conn_clean fs_roundtrip
for bs in $FIO_BS; do
	check "fio randwrite bs=$bs QD32 verify crc32c" fio_sized randwrite "$bs" 32
	check "fio write bs=$bs QD1 verify crc32c" fio_sized write "$bs" 1
done
check "IPv6 address $IP6 on $NDEV ($RDMA): no connection failed by it" conn_clean ipv6_addr
check "LIO rd_mcp target with an iSER portal at $P6:$LIO_PORT ($RDMA)" \
	lio_rd_target "$IQN6" "$IP6" 16 "$RDMA"
check "discovery over iser at $P6:$LIO_PORT finds $IQN6" iscsi_discover_lists "$P6" "$IQN6"
check "login over iser to $P6:$LIO_PORT" iscsi_login "$IQN6" "$P6" iser
DEV6=$(iscsi_dev "$IQN6" 0 60 2>>"$RISER_OUT/guest.log") || DEV6=
check "block device of the IPv6 session's LUN 0 appears ($DEV6)" test -b "$DEV6"
check "iscsiadm -m session (-P 3) and sysfs show the IPv6 portal" ipv6_session_shown
check "fio randwrite bs=4k QD32 verify crc32c over IPv6" fio_verify "$DEV6" randwrite 4k 32 1M
check "fio write bs=512k QD1 verify crc32c over IPv6" fio_verify "$DEV6" write 512k 1 2M
check "logout of the IPv6 session" iscsi_logout "$IQN6" "$P6"
check "the IPv4 session is still logged in" iscsi_logged_in "$IQN"
check "logout" iscsi_logout "$IQN" "$IP"
iscsi_state >>"$RISER_OUT/guest.log" 2>&1
check "no session or endpoint left" no_session_left
check "kmemleak: nothing riser allocated is leaked after logout" \
	no_leak_from_riser "$RISER_OUT/kmemleak-logout.txt"
# What rmmod leaks, the end-of-guest scan (save_dmesg) finds: it fails the
# guest on any object suspected, after the teardown below.
check "rmmod riser" unload_riser
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "RDMA device ($RDMA) removed" rdma_delete "$RDMA"
save_dmesg
