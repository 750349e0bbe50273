#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# A session through riser, as a user runs it: LIO with an iSER portal over
# soft-RoCE (or soft-iWARP with RISER_RDMA=siw), riser.ko loaded, discovery
# and login with iscsiadm -I iser, ext4 made, written, read back cold and
# compared, fio with crc32c verification, logout and rmmod.

set -u
. "$RISER_TOP/tests/guest/lib.sh"
. "$RISER_TOP/tests/guest/target.sh"
KO=$RISER_TOP/riser.ko

RDMA=${RISER_RDMA:-rxe}
if [ "$RDMA" = siw ]; then
	IP=192.168.78.1
	IQN=iqn.2026-11.org.riser:session-siw
else
	IP=192.168.77.1
	IQN=iqn.2026-11.org.riser:session
fi
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
# 22 checks, and two for each block size.
plan $((22 + 2 * ${#_bs[@]}))

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
check "logout" iscsi_logout "$IQN" "$IP"
iscsi_state >>"$RISER_OUT/guest.log" 2>&1
check "no session or endpoint left" no_session_left
check "kmemleak: nothing riser allocated is leaked after logout" \
	no_leak_from_riser "$RISER_OUT/kmemleak-logout.txt"
LEAKS=$(grep -c "^unreferenced object" "$RISER_OUT/kmemleak-logout.txt")
check "rmmod riser" unload_riser
check "kmemleak: no new leak after rmmod ($LEAKS before)" \
	test "$(kmemleak_report "$RISER_OUT/kmemleak-rmmod.txt")" = "$LEAKS"
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "RDMA device ($RDMA) removed" rdma_delete "$RDMA"
save_dmesg
