#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The test harness checked against the C reference initiator: LIO with an
# iSER portal over soft-RoCE (or soft-iWARP with RISER_RDMA=siw), ib_iser
# through open-iscsi, 4 MiB of random data written and read back, then a
# clean teardown. No riser here; RISER_EXPECT_KUNIT=0 on the host.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"

RDMA=${RISER_RDMA:-rxe}
if [ "$RDMA" = siw ]; then
	IP=192.168.78.1
	IQN=iqn.2026-11.org.riser:smoke-siw
else
	IP=192.168.77.1
	IQN=iqn.2026-11.org.riser:smoke
fi
PAT=/tmp/pattern.bin
BACK=/tmp/readback.bin

write_pattern() { dd if="$PAT" of="$DEV" bs=1M count=4 oflag=direct conv=fsync; }
read_back() { dd if="$DEV" of="$BACK" bs=1M count=4 iflag=direct; }
no_session_left() { ! iscsi_session "$IQN"; }

# The kernel log, refreshed while the script runs, for when the guest hangs.
dmesg_live

dmesg_mark
check "RDMA device ($RDMA) created" setup_rdma "$RDMA" "$IP"
check "LIO rd_mcp target with an iSER portal ($RDMA)" lio_rd_target "$IQN" "$IP" 64 "$RDMA"
check "the portal has iSER on" test "$(lio_portal_iser "$IQN" "$IP")" = 1
check "ImmediateData settable on the TPG" lio_set_param "$IQN" ImmediateData Yes
check "iscsid started" iscsi_start
check "discovery over iser finds $IQN" iscsi_discover_lists "$IP" "$IQN"
check "ib_iser was loaded by iscsiadm" test -d /sys/module/ib_iser
check "login over iser" iscsi_login "$IQN" "$IP" iser
check "the session's transport is iser" iscsi_session_is_iser "$IP" "$IQN"
check "the SCSI host is iscsi_iser" iscsi_host_is_iscsi_iser "$IQN"
DEV=$(iscsi_dev "$IQN" 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "block device of LUN 0 appears ($DEV)" test -b "$DEV"
check "device is 64 MiB" test "$(blockdev --getsize64 "$DEV" 2>/dev/null)" = $((64 << 20))
check "4 MiB of random data made" dd if=/dev/urandom of="$PAT" bs=1M count=4
check "write 4 MiB, O_DIRECT" write_pattern
check "read 4 MiB back, O_DIRECT" read_back
check "data read back equals data written" cmp "$PAT" "$BACK"
check "logout" iscsi_logout "$IQN" "$IP"
check "no session left" no_session_left
check "iscsid stopped" iscsi_stop
check "LIO torn down and its modules unloaded" lio_teardown
check "rmmod ib_iser" bounded 120 rmmod ib_iser
check "RDMA device ($RDMA) removed" rdma_delete "$RDMA"
save_dmesg
