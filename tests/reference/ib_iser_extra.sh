#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The rest of target.sh, driven by the C ib_iser over rxe: a null_blk LUN,
# TPG parameters seen in the negotiated session, CHAP (refused without, with
# a wrong secret, accepted with the right one), two targets logged in at
# once, LIO torn down under a live session. No riser here.
set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
IP=192.168.77.1
A=iqn.2026-11.org.riser:nb
B=iqn.2026-11.org.riser:chap
rw_ok() {
	local dev=$1
	dd if=/dev/urandom of=/tmp/p bs=1M count=4 &&
	dd if=/tmp/p of="$dev" bs=64k oflag=direct &&
	dd if="$dev" of=/tmp/b bs=1M count=4 iflag=direct && cmp /tmp/p /tmp/b
}
sess_attr() { cat "/sys/class/iscsi_session/$(iscsi_session "$1")/$2"; }
conn_attr() { local s; s=$(iscsi_session "$1"); cat /sys/class/iscsi_session/$s/device/connection*/iscsi_connection/connection*/"$2"; }

check "rxe" setup_rxe $IP
check "nullblk target" lio_nullblk_target $A $IP 32
check "rd target with chap" lio_rd_target $B $IP 16
check "ImmediateData=No" lio_set_param $A ImmediateData No
check "InitialR2T=Yes" lio_set_param $A InitialR2T Yes
check "FirstBurstLength=65536" lio_set_param $A FirstBurstLength 65536
check "MaxBurstLength=131072" lio_set_param $A MaxBurstLength 131072
check "MaxRecvDataSegmentLength=32768" lio_set_param $A MaxRecvDataSegmentLength 32768
expect_fail "bogus param value refused" lio_set_param $A ImmediateData Maybe
check "lio_chap" lio_chap $B alice secretsecret12
check "iscsid" iscsi_start
check "discover both" bash -c "true"
out=$(iscsi_discover $IP 2>&1); echo "$out" >>"$RISER_OUT/guest.log"
check "discovery lists A" grep -q " $A\$" <<<"$out"
check "discovery lists B" grep -q " $B\$" <<<"$out"
check "login A" iscsi_login $A $IP
DA=$(iscsi_dev $A 2>>"$RISER_OUT/guest.log")
check "A dev $DA" test -b "$DA"
check "A is 32 MiB" test "$(blockdev --getsize64 $DA)" = $((32<<20))
check "A rw" rw_ok "$DA"
check "A negotiated ImmediateData=No (0)" test "$(sess_attr $A immediate_data)" = 0
check "A negotiated InitialR2T=Yes (1)" test "$(sess_attr $A initial_r2t)" = 1
check "A negotiated FirstBurstLength=65536" test "$(sess_attr $A first_burst_len)" = 65536
check "A negotiated MaxBurstLength=131072" test "$(sess_attr $A max_burst_len)" = 131072
echo "A max_xmit_dlength=$(conn_attr $A max_xmit_dlength) max_recv=$(conn_attr $A max_recv_dlength)" >>"$RISER_OUT/guest.log"
expect_fail "login B without CHAP fails" iscsi_login $B $IP
check "no B session" bash -c "! ls /sys/class/iscsi_session/*/targetname >/dev/null 2>&1 || ! grep -qx $B /sys/class/iscsi_session/*/targetname"
ISCSI_IFACE=iser
check "CHAP wrong pass in node" iscsi_chap $B $IP alice wrongpassword1
expect_fail "login B with wrong CHAP fails" iscsi_login $B $IP
check "CHAP right pass in node" iscsi_chap $B $IP alice secretsecret12
check "login B with CHAP" iscsi_login $B $IP
DB=$(iscsi_dev $B 2>>"$RISER_OUT/guest.log")
check "B dev $DB" test -b "$DB"
check "B rw" rw_ok "$DB"
check "A and B both there" test "$(ls -d /sys/class/iscsi_session/session* | wc -l)" = 2
# teardown with sessions still logged in: LIO drops them
check "logout A" iscsi_logout $A $IP
check "teardown with B still logged in" lio_teardown
check "configfs clean" bash -c "[ ! -e /sys/kernel/config/target/iscsi ] && [ -z \"\$(ls /sys/kernel/config/target/core | grep -v alua)\" ]"
check "logout B (session dead)" bash -c "iscsiadm -m node -T $B -p $IP:3260 -u; true"
check "iscsid stop" iscsi_stop
check "no B session left" bash -c "! ls /sys/class/iscsi_session/ | grep -q session"
check "rmmod ib_iser" bounded 120 rmmod ib_iser
check "rxe0 removed" bounded 60 rdma link delete rxe0
save_dmesg
