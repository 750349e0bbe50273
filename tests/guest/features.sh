#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# What a session through riser does beyond plain I/O, over rxe against LIO:
# a null_blk LUN, TPG parameters seen in the negotiated session, the
# parameters and statistics iscsiadm shows, NOP-Out/NOP-In both ways, CHAP
# (refused without, refused with a wrong secret, accepted with the right one,
# and mutual), two sessions with I/O at once, LU and target reset under load,
# discovery of many targets (a SendTargets answer larger than one receive),
# teardown and unload.
set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
# A session whose connection fails under load gets 120 s, not 30, to come
# back before its I/O fails: two fio verifying at once on one vCPU under
# KASAN in TCG stalled a CI machine's guest long enough for a 5 s NOP-Out
# ping to time out and the reconnect to miss 30 s.
ISCSI_REPLACEMENT_TIMEOUT=${ISCSI_REPLACEMENT_TIMEOUT:-120}
KO=$RISER_TOP/riser.ko
CM_IDLE=${RISER_CM_IDLE:-$RISER_TOP/out/cm-idle}
LOGIN_DROP=${RISER_LOGIN_DROP:-$RISER_TOP/out/login-drop}
IP=192.168.77.1
A=iqn.2026-11.org.riser:nb
B=iqn.2026-11.org.riser:chap
C=iqn.2026-11.org.riser:dropped
# Targets with long names (212 bytes; iSCSI allows 223), so that the
# SendTargets answer needs several 8 KiB Text responses without making
# hundreds of targets (each costs LIO about 1.5 s to make and as much to
# remove on the KASAN kernel): 258 bytes a target, 36 of them and A and B
# come to about 9.5 KB.
MANY=36
LONG=$(printf 'x%.0s' $(seq 180))

sess_attr() { cat "/sys/class/iscsi_session/$(iscsi_session "$1")/$2"; }
conn_attr() {
	local s
	s=$(iscsi_session "$1")
	cat /sys/class/iscsi_session/"$s"/device/connection*/iscsi_connection/connection*/"$2"
}
sid_of() { sess_attr "$1" ../../../session*/iscsi_session/session*/sid 2>/dev/null ||
	iscsiadm -m session | awk -v t="$1" '$4 == t { gsub(/[][]/, "", $2); print $2 }'; }
p3_shows() {
	local out
	out=$(iscsiadm -m session -P 3) || return 1
	echo "$out"
	grep -q "Iface Transport: iser" <<<"$out" &&
		grep -q "Current Portal: $IP:3260,1" <<<"$out" &&
		grep -q "Persistent Portal: $IP:3260,1" <<<"$out" &&
		grep -q "iSCSI Session State: LOGGED_IN" <<<"$out" &&
		grep -q "FirstBurstLength: 65536" <<<"$out" &&
		grep -q "MaxBurstLength: 131072" <<<"$out" &&
		grep -q "ImmediateData: No" <<<"$out" &&
		grep -q "InitialR2T: Yes" <<<"$out" &&
		grep -Eq "Attached scsi disk sd[a-z]+[[:space:]]+State: running" <<<"$out"
}
stats_count_io() {
	local out
	out=$(iscsiadm -m session -r "$(sid_of "$A")" -s) || return 1
	echo "$out"
	# fio above wrote and read back 2 MiB (256 commands).
	awk '/txdata_octets:/ { tx = $2 } /rxdata_octets:/ { rx = $2 } /scsicmd_pdus:/ { c = $2 }
		/scsirsp_pdus:/ { r = $2 }
		END { exit !(tx >= 2097152 && rx >= 2097152 && c > 100 && r == c) }' <<<"$out"
}
# riser's own counters (the custom part of iscsi_stats, which iscsiadm
# prints as "name: value" after libiscsi's): all nine named; after the
# fio verify above, the login counted, registrations invalidated, and no
# completion error, RNR retry exhaustion or async flood.
riser_counters() {
	local out
	out=$(iscsiadm -m session -r "$(sid_of "$A")" -s) || return 1
	echo "$out"
	awk '
		{ sub(/^[[:space:]]+/, "") }
		$1 ~ /^(rnr_retry_exceeded|completions_flushed|completion_errors|send_queue_full|unregistered_cmds|async_msgs_refused|login_rounds|remote_invalidations|local_invalidations):$/ {
			n++; v[$1] = $2
		}
		END {
			exit !(n == 9 && v["login_rounds:"] >= 1 &&
				v["remote_invalidations:"] + v["local_invalidations:"] > 0 &&
				v["completion_errors:"] == 0 && v["rnr_retry_exceeded:"] == 0 &&
				v["async_msgs_refused:"] == 0)
		}' <<<"$out"
}
tmf_count() {
	iscsiadm -m session -r "$(sid_of "$1")" -s | awk '/tmfrsp_pdus:/ { print $2 }'
}
tmf_answered() { test "$(tmf_count "$1")" -gt 0; }
still_logged_in() { test "$(sess_attr "$1" state)" = LOGGED_IN; }
no_conn_failure() { dmesg_lacks "riser: connection .* failed|conn error|detected conn error"; }
many_targets() {
	local i t
	for ((i = 0; i < MANY; i++)); do
		t=$LIO/iscsi/iqn.2026-11.org.riser:many-$(printf %04d $i)-$LONG/tpgt_1
		mkdir -p "$t/np/$IP:3260" && echo 1 >"$t/np/$IP:3260/iser" &&
			echo 1 >"$t/enable" || return 1
	done
}
# discovery_lists_all: SendTargets with the initiator declaring 8 KiB per
# PDU, so the answer for all targets (about 9.5 KB) comes in several Text
# responses that iscsid continues; every target must be listed.
discovery_lists_all() {
	local out n d=(iscsiadm -m discoverydb -t st -p "$IP:3260" -I iser)
	"${d[@]}" -o new >/dev/null &&
		"${d[@]}" -o update -n discovery.sendtargets.iscsi.MaxRecvDataSegmentLength -v 8192 &&
		"${d[@]}" -o update -n discovery.sendtargets.timeo.login_timeout -v 60 &&
		out=$(st_discover "${d[@]:1}" --discover) || return 1
	n=$(grep -c " iqn.2026-11.org.riser:many-" <<<"$out")
	echo "discovery listed $n of $MANY many-* targets, $(wc -c <<<"$out") bytes"
	[ "$n" = "$MANY" ] && grep -q " $A\$" <<<"$out" && grep -q " $B\$" <<<"$out"
}
# text_in_several_pdus: riser logs how many Text responses a discovery
# connection received; more than one means the answer was continued.
text_in_several_pdus() {
	local n
	n=$(dmesg | grep -oE "riser: discovery of $IP:3260: [0-9]+ text responses" |
		tail -1 | awk '{ print $(NF - 2) }')
	echo "text responses: ${n:-none}"
	[ "${n:-0}" -ge 2 ]
}
under_load() {
	local dev=$1 cmd=$2 pid rc=0 expected=
	# A target reset, which LIO refuses, makes libiscsi drop the connection
	# and recover the session: connection failures are that check's point.
	[ "$cmd" = -t ] && expected=1
	CONN_FAILURES_EXPECTED=$expected fio_verify "$dev" randwrite 64k 16 12M &
	pid=$!
	sleep 3
	sg_reset "$cmd" "$dev" || rc=1
	sleep 1
	sg_reset "$cmd" "$dev" || rc=1
	wait $pid || rc=1
	return $rc
}
# stalled_first_login: B's login (a new session) queued behind an idle CM
# connection (tests/target/cm-idle.c), which LIO's login thread waits on
# until its login timer fires (15 s). With a login timeout of 5 s the first
# try times out; iscsid then stops the connection with STOP_CONN_TERM
# (open-iscsi's iscsi_login_eh, since 2.1.3) and tries again on a new one.
# That stop leaves libiscsi's session ended: every later Login PDU refused
# ("Login I/O error, failed to send a PDU"), the login lost after
# initial_login_retry_max timeouts, as with ib_iser (tried: ib_iser's
# login failed after 42 s, riser's with the fix taken out after 47 s).
# riser makes the session loggable again at the retry's bind (its line) and
# the login succeeds once LIO is free (20 s). The node's timeouts are put
# back after.
stalled_first_login() {
	local n=(iscsiadm -m node -T "$B" -p "$IP:3260" -I iser) out tmo retries idle rc t0=$SECONDS
	out=$("${n[@]}") || return 1
	tmo=$(sed -n 's/^node.conn\[0\].timeo.login_timeout = //p' <<<"$out")
	retries=$(sed -n 's/^node.session.initial_login_retry_max = //p' <<<"$out")
	echo "node: login_timeout $tmo, initial_login_retry_max $retries"
	[ -n "$tmo" ] && [ -n "$retries" ] &&
		"${n[@]}" -o update -n node.conn[0].timeo.login_timeout -v 5 &&
		"${n[@]}" -o update -n node.session.initial_login_retry_max -v 8 || return 1
	dmesg_mark
	"$CM_IDLE" "$IP" 3260 14 >/tmp/cm-idle.out 2>&1 &
	idle=$!
	_wait_for 20 grep -q "cm-idle: connected" /tmp/cm-idle.out || {
		cat /tmp/cm-idle.out
		return 1
	}
	bounded 150 "${n[@]}" --login
	rc=$?
	wait "$idle"
	cat /tmp/cm-idle.out
	echo "login status $rc after $((SECONDS - t0)) s"
	"${n[@]}" -o update -n node.conn[0].timeo.login_timeout -v "$tmo" &&
		"${n[@]}" -o update -n node.session.initial_login_retry_max -v "$retries" || return 1
	[ "$rc" = 0 ] &&
		dmesg_has "riser: session [0-9]+: iscsid tries its first login again after ending it"
}
# reinstated_after_dropped_login: C's next session (its ISID is iscsid's,
# 00023d and the session number) logs in after another connection sent a
# Login Request with that ISID and dropped before the answer
# (tests/target/login-drop.c), as when iscsid's login timer expires just
# after a first login's request left (a starved host: 16 s between connect
# and send, the disconnect 28 ms later). LIO completes that login with its
# connection gone, and the new login reinstates it. LIO's isert lost the
# disconnect of a connection still logging in: the connection was never
# released and the reinstatement waited for it for ever in the portal's
# login thread, every later login hung with it (tried on the kernel without
# scripts/kernel-patches/0002: this login failed after 17 s, every later one
# after it too). The sid of C's first session predicts the next one's
# (session numbers only grow): a login that got another number did not test
# the reinstatement and fails the check.
reinstated_after_dropped_login() {
	local ini sid next rc try t0
	ini=$(sed -n 's/^InitiatorName=//p' /etc/iscsi/initiatorname.iscsi)
	[ -n "$ini" ] && iscsi_login "$C" "$IP" || return 1
	# The disconnect can reach LIO after that login ended, with nothing
	# to test (no isert line): then once more, three times at most.
	for try in 1 2 3; do
		sid=$(sid_of "$C")
		iscsi_logout "$C" "$IP" && [ -n "$sid" ] || return 1
		next=$((sid + 1))
		dmesg_mark
		"$LOGIN_DROP" "$IP" 3260 "$ini" "$C" "$(printf '00023d%06x' "$next")" || return 1
		t0=$SECONDS
		iscsi_login "$C" "$IP"
		rc=$?
		echo "try $try: login status $rc after $((SECONDS - t0)) s, session $(sid_of "$C") (expected $next)"
		[ "$rc" = 0 ] && [ "$(sid_of "$C")" = "$next" ] || return 1
		if dmesg_has "isert: conn [^ ]+: disconnected during its login, ended"; then
			iscsi_logout "$C" "$IP"
			return
		fi
	done
	iscsi_logout "$C" "$IP"
	return 1
}
noop_node() {
	local n=(iscsiadm -m node -T "$A" -p "$IP:3260" -I iser -o update)
	_iscsi_node "$A" "$IP" iser &&
		"${n[@]}" -n node.conn[0].timeo.noop_out_interval -v 1 &&
		"${n[@]}" -n node.conn[0].timeo.noop_out_timeout -v 5
}

dmesg_live

# Why LIO refuses a login that CHAP does not pass (iscsi_target_nego.c):
# no CHAP offered, or a response that does not match the secret. iscsiadm
# must then exit with ISCSI_ERR_LOGIN_AUTH_FAILED (24), within 60 s
# (expect_login_refused, target.sh).
LIO_NO_AUTH='Initiator sent AuthMethod=None but Target is enforcing iSCSI Authentication|has not been successfully authenticated'
LIO_AUTH_FAILED='Security negotiation failed'

plan 61

check "soft-RoCE device rxe0 created" setup_rxe $IP
check "riser's dependencies load" load_deps
check "insmod riser.ko" insmod "$KO"
check "null_blk target A" lio_nullblk_target $A $IP 64
check "rd_mcp target B" lio_rd_target $B $IP 32
check "$MANY more targets on the portal" many_targets
check "iscsid started" iscsi_start
check "discovery lists all $((MANY + 2)) targets (SendTargets > one buffer)" discovery_lists_all
check "the SendTargets answer came in several Text responses" text_in_several_pdus
check "A: ImmediateData=No" lio_set_param $A ImmediateData No
check "A: InitialR2T=Yes" lio_set_param $A InitialR2T Yes
check "A: FirstBurstLength=65536" lio_set_param $A FirstBurstLength 65536
check "A: MaxBurstLength=131072" lio_set_param $A MaxBurstLength 131072
# (LIO sends no NOP-In of its own over iSER: iscsi_post_login_start_timers
# in iscsi_target_login.c never starts the timer for an iSER connection,
# and starting it later would crash isert's NOP-In send. Answers to a
# target's pings are checked by hostile.sh's ping mode: 600 of them.)
# LIO gives a WRITE's data 3 s to arrive (its RDMA READ, over iSER) and
# then drops the connection (ERL 0). Under KASAN in TCG, with two fio
# verifying on one vCPU, a CI machine's guest stalled longer than that
# (the initiator's own 5 s NOP-Out pings timed out too): A, which has no
# immediate data, lost its connection after every reconnect.
check "A: target waits 30 s for write data" lio_acl_attrib $A dataout_timeout 30
check "B: CHAP required" lio_chap $B alice secretsecret12
check "A: initiator sends NOP-Out every second" noop_node
check "login A" iscsi_login $A $IP
DA=$(iscsi_dev $A 0 60 2>>"$RISER_OUT/guest.log") || DA=
check "A: the connection pings after 1 s without a PDU (recv_tmo 1)" \
	test "$(conn_attr $A recv_tmo)" = 1
check "A: and waits 5 s for the answer (ping_tmo 5)" test "$(conn_attr $A ping_tmo)" = 5
check "A: block device ($DA)" test -b "$DA"
check "A: 64 MiB" test "$(blockdev --getsize64 "$DA")" = $((64 << 20))
check "A: negotiated ImmediateData=No" test "$(sess_attr $A immediate_data)" = 0
check "A: negotiated InitialR2T=Yes" test "$(sess_attr $A initial_r2t)" = 1
check "A: negotiated FirstBurstLength=65536" test "$(sess_attr $A first_burst_len)" = 65536
check "A: negotiated MaxBurstLength=131072" test "$(sess_attr $A max_burst_len)" = 131072
check "A: fio verify" fio_verify "$DA" randwrite 16k 16 2M
check "iscsiadm -m session -P 3 shows portal, parameters, disk" p3_shows
check "iscsiadm -s counts octets and PDUs (get_stats)" stats_count_io
check "iscsiadm -s shows riser's own counters (logins, invalidations, no errors)" riser_counters
dmesg_mark
sleep 12
check "A: idle 12 s, NOP-Out pings every 1 s answered: still logged in" still_logged_in $A
check "A: no connection failure while idle" no_conn_failure
check "A: I/O after the NOP exchange" fio_verify "$DA" randwrite 4k 4 1M
expect_login_refused "B: login without CHAP refused (iscsiadm: authorization failure; LIO: no CHAP)" \
	"$LIO_NO_AUTH" $B $IP
check "B: CHAP secret (wrong) in the node record" iscsi_chap $B $IP alice wrongpassword1
expect_login_refused "B: login with a wrong CHAP secret refused (iscsiadm: authorization failure; LIO: security negotiation failed)" \
	"$LIO_AUTH_FAILED" $B $IP
check "B: CHAP secret (right) in the node record" iscsi_chap $B $IP alice secretsecret12
# After refused logins, iscsid's next login to the same target can stall
# until its login timeout (seen with the C ib_iser too, see testing.md):
# login_retry (target.sh) tries again on that stall, and only on it.
check "B: login with CHAP" login_retry $B $IP
DB=$(iscsi_dev $B 0 60 2>>"$RISER_OUT/guest.log") || DB=
check "B: block device ($DB)" test -b "$DB"
check "two sessions at once" test "$(ls -d /sys/class/iscsi_session/session* | wc -l)" = 2
# Each connection has a protection domain of its own (ib_iser shares one
# per device), so an rkey riser gives one target is of no use through
# another target's QP on the same device: two sessions on rxe0, at least
# two of riser's PDs (an earlier connection's may still be being freed).
own_pds() {
	local n
	n=$(rdma resource show pd 2>&1 | tee -a "$RISER_OUT/guest.log" | grep -c 'comm \[riser\]')
	echo "riser's PDs: $n"
	[ "$n" -ge 2 ]
}
check "a PD per connection: two sessions on rxe0, two of riser's PDs" own_pds
two_at_once() {
	local p rc=0
	fio_verify "$DA" randwrite 8k 16 2M &
	p=$!
	fio_verify "$DB" write 128k 8 2M || rc=1
	wait $p || rc=1
	return $rc
}
check "fio verify on A and B at once" two_at_once
check "B: logout" iscsi_logout $B $IP
check "B: mutual CHAP on the target" lio_chap $B alice secretsecret12 tgtuser tgtsecret1234
check "B: mutual CHAP in the node record" iscsi_chap $B $IP alice secretsecret12 tgtuser tgtsecret1234
# Tried again on LIO's login stall only. (Its one failure, 2026-11-24:
# iscsid's "Login I/O error, failed to send a PDU", was riser refusing a
# login PDU, fixed since; that is no reason to try again.)
check "B: login with mutual CHAP" login_retry $B $IP
check "B: logout again" iscsi_logout $B $IP
check "B: a first login that timed out behind a stalled LIO login is tried again and logs in" \
	stalled_first_login
check "B: logout after it" iscsi_logout $B $IP
check "rd_mcp target C" lio_rd_target $C $IP 8
check "C: a login LIO holds with the next session's ISID, dropped before its answer, is reinstated" \
	reinstated_after_dropped_login
dmesg_mark
check "A: LU reset (sg_reset -d) twice under fio load, data verified" under_load "$DA" -d
check "A: LU resets answered by the target (TMF responses counted)" tmf_answered $A
# LIO refuses TARGET WARM RESET from initiators without that right: libiscsi
# then drops and recovers the session, under load, through riser.
check "A: target reset (sg_reset -t) twice under fio load, session recovered, data verified" \
	under_load "$DA" -t
check "A: still logged in after the resets" still_logged_in $A
check "A: fio verify after the resets" fio_verify "$DA" randwrite 4k 16 1M
check "A: logout" iscsi_logout $A $IP
check "no session left" test -z "$(ls /sys/class/iscsi_session/)"
check "rmmod riser" unload_riser
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "rxe0 removed" bounded 60 rdma link delete rxe0
save_dmesg
