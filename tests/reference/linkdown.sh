#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# How fast each iSER initiator notices a lost link: the carrier under rxe0
# (dummy0) goes for 8 s under fio, and the time from that to the
# connection error libiscsi reports ("detected conn error", what iscsid
# acts on) is taken from the kernel log's timestamps. rxe reports the lost
# carrier as IB_EVENT_PORT_ERR. riser fails the connections through the
# port on that event; ib_iser only prints it and waits for a NOP-Out
# timeout or the QP's RC retries. Same guest, same target, same settings
# (open-iscsi's NOP-Out defaults, every 5 s with a 5 s timeout;
# replacement_timeout 30 s), RISER_LINKDOWN_ROUNDS rounds each (default 3),
# alternating.
#
#   make linkdown      (runs this in a guest on the debug kernel)
#
# Prints one "linkdown INITIATOR ROUND SECONDS" line per round ("none" when
# no connection error came) and a table; every round must recover (session
# logged in, fio verified with no error), and riser must report every loss.
#
# What rxe can and cannot show: target and initiator share one rxe device,
# and rxe hands every packet to its own receive path when the destination
# MAC is its own (rxe_loopback), whatever the carrier. So the link is lost
# as far as the port state goes, but packets still flow: ib_iser's NOP-Outs
# are answered and it never sees an error, where on a real port it would
# after its NOP-Out timeout (5-10 s with these settings). riser's figure
# is the one that carries over: the port event to libiscsi's error.
# Taking the netdev down instead (`ip link set dummy0 down`) deletes its
# routes, and rxe then fails every RDMA CM message sent during the outage
# and puts its GSI QP (QP1) into the error state for good; no connection
# can be made on rxe0 again (faults.sh says more). The carrier keeps the
# routes.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
KO=$RISER_TOP/riser.ko
IP=192.168.77.1
IQN=iqn.2026-11.org.riser:linkdown
ROUNDS=${RISER_LINKDOWN_ROUNDS:-3}

dmesg_live

session_up() { iscsi_logged_in "$IQN"; }
load() {
	if [ "$1" = riser ]; then insmod "$KO"; else modprobe ib_iser; fi
}
unload() {
	if [ "$1" = riser ]; then unload_riser; else rmmod ib_iser; fi
}
# round INITIATOR N: fio, carrier off 8 s, carrier on, recover; prints
# the seconds from the carrier going to libiscsi's connection error.
round() {
	local who=$1 n=$2 pid mark secs rc=0
	CONN_FAILURES_EXPECTED=1 fio_verify "$DEV" randwrite 16k 8 16M >"$RISER_OUT/fio-$who-$n.log" 2>&1 &
	pid=$!
	sleep 2
	kmsg_mark
	mark=$MARK
	ip link set dummy0 carrier off
	sleep 8
	ip link set dummy0 carrier on
	wait "$pid" || rc=1
	_wait_for 120 session_up || rc=1
	secs=$(secs_after_mark "$mark" "detected conn error")
	echo "linkdown $who $n ${secs:-none}" | tee -a "$RISER_OUT/linkdown.txt"
	[ $rc = 0 ] && { [ -n "$secs" ] || [ "$who" != riser ]; }
}

: >"$RISER_OUT/linkdown.txt"
plan $((8 + 6 * ROUNDS))
check "soft-RoCE device rxe0 created" setup_rxe "$IP"
check "riser's dependencies load" load_deps
check "LIO rd_mcp target" lio_rd_target "$IQN" "$IP" 64
check "iscsid started" iscsi_start
for ((r = 1; r <= ROUNDS; r++)); do
	for who in riser ib_iser; do
		check "$who: loaded" load $who
		check "$who: login (open-iscsi's NOP-Out defaults: every 5 s, 5 s timeout)" \
			iscsi_login "$IQN" "$IP"
		DEV=$(iscsi_dev "$IQN" 0 60 2>>"$RISER_OUT/guest.log") || DEV=
		check "$who round $r: carrier lost 8 s under fio, recovered, data verified" round $who $r
		iscsi_logout "$IQN" "$IP" >/dev/null 2>&1
		unload $who >/dev/null 2>&1
	done
done
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "rxe0 removed" bounded 60 rdma link delete rxe0
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "none" }'; }
{
	echo "| initiator | carrier lost to connection error, median of $ROUNDS (s) | rounds (s) |"
	echo "|---|---|---|"
	for who in riser ib_iser; do
		printf '| %s | %s | %s |\n' "$who" \
			"$(awk -v w=$who '$2 == w { print $4 }' "$RISER_OUT/linkdown.txt" | median)" \
			"$(awk -v w=$who '$2 == w { printf "%s ", $4 }' "$RISER_OUT/linkdown.txt")"
	done
} | tee "$RISER_OUT/linkdown-table.md"
check "riser reported the loss in every round" \
	bash -c "[ \$(grep -c '^linkdown riser [0-9]* [0-9.]*\$' '$RISER_OUT/linkdown.txt') = $ROUNDS ]"
save_dmesg
