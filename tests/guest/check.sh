#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The in-guest part of `make check`: load riser over a soft-RoCE device, keep
# its KUnit results, check the transport it registers, its parameter checks,
# its refusal to load beside ib_iser, and a clean unload; then a session
# with always_register=0 (unregistered single-segment buffers).

set -u
. "$RISER_TOP/tests/common/lib.sh"
KO=$RISER_TOP/riser.ko
T=/sys/class/iscsi_transport/iser

# The kernel log as it grows: the dmesg checks read it (lib.sh, _klog).
dmesg_live

# 37 checks in line, 3 for each of the 5 refused parameters, 3 beside ib_iser.
plan 72

check "soft-RoCE device rxe0 created" setup_rxe
check "riser's dependencies load" load_deps

dmesg_mark
check "insmod riser.ko" insmod "$KO"
collect_kunit
check "KUnit results collected for riser's suites" test -s "$RISER_OUT/kunit/riser_proto_iser"
check "transport 'iser' in sysfs" test -d "$T"
check "caps is 0x89 (RECOVERY_L0|MULTI_R2T|TEXT_NEGO)" \
	bash -c "[ \"\$(cat $T/caps)\" = 0x89 ]"
check "handle is a non-zero number" \
	bash -c "[[ \$(cat $T/handle) =~ ^[1-9][0-9]*\$ ]]"
check "iscsi_transport registration logged" dmesg_has 'iscsi: registered transport \(iser\)'
check "modinfo lists ib_iser's five parameters" bash -c "
	p=\$(modinfo -p $KO | cut -d: -f1 | sort | tr '\\n' ' ')
	[ \"\$p\" = 'always_register debug_level max_lun max_sectors pi_enable ' ]"
P=/sys/module/riser/parameters
check "parameters in sysfs with ib_iser's defaults" bash -c "
	[ \$(cat $P/max_sectors) = 1024 ] && [ \$(cat $P/max_lun) = 512 ] &&
	[ \$(cat $P/debug_level) = 0 ] && [ \$(cat $P/always_register) = Y ] &&
	[ \$(cat $P/pi_enable) = N ]"
check "parameter modes as ib_iser's (max_sectors, debug_level writable)" bash -c "
	[ \$(stat -c %a $P/max_sectors) = 644 ] && [ \$(stat -c %a $P/debug_level) = 644 ] &&
	[ \$(stat -c %a $P/max_lun) = 444 ] && [ \$(stat -c %a $P/always_register) = 444 ] &&
	[ \$(stat -c %a $P/pi_enable) = 444 ]"
dmesg_mark
expect_fail "writing max_sectors=0 at run time is refused" bash -c "echo 0 > $P/max_sectors"
check "and logged with the bounds (ib_iser's: above 0)" dmesg_has 'module parameter max_sectors=0 is out of range 1..=4294967295'
check "writing debug_level=9 is taken, as ib_iser takes it" bash -c "
	echo 9 > $P/debug_level && [ \$(cat $P/debug_level) = 9 ] && echo 0 > $P/debug_level"
expect_fail "writing a non-number is refused" bash -c "echo lots > $P/max_sectors"
check "refused writes left the values alone" bash -c "
	[ \$(cat $P/max_sectors) = 1024 ] && [ \$(cat $P/debug_level) = 0 ]"
check "writing max_sectors=2048 and debug_level=2 at run time" bash -c "
	echo 2048 > $P/max_sectors && echo 2 > $P/debug_level &&
	[ \$(cat $P/max_sectors) = 2048 ] && [ \$(cat $P/debug_level) = 2 ]"
check "rmmod riser" bounded 120 rmmod riser
check "transport gone after unload" test ! -e "$T"

# What ib_iser refuses too: a max_sectors or max_lun of 0 or beyond an
# unsigned int, a debug_level beyond an int.
for bad in max_sectors=0 max_sectors=-1 max_lun=0 max_lun=4294967296 debug_level=2147483648; do
	dmesg_mark
	expect_fail "insmod refuses $bad" insmod "$KO" "$bad"
	check "refusal of $bad is logged with the bounds" dmesg_has "module parameter ${bad%%=*}=.* is out of range"
	check "no transport left after refused $bad" test ! -e "$T"
done

# What ib_iser takes, riser takes (a modprobe.d line written for ib_iser
# loads riser), and says at load what it cannot honour.
dmesg_mark
check "insmod with values ib_iser takes" insmod "$KO" max_sectors=4 max_lun=100000 debug_level=-3 \
	always_register=0 pi_enable=1
load_warnings() {
	dmesg_has 'riser: max_sectors=4 is outside the 8\.\.=32768 sectors riser sizes a session for: sessions use 8' &&
		dmesg_has 'riser: pi_enable=Y: riser does not offload T10-PI'
}
check "riser said at load what it does not honour (max_sectors=4, pi_enable=Y)" load_warnings
check "and unload again" bounded 120 rmmod riser

# The C ib_iser holds the name: riser must refuse to load and say why.
if modprobe ib_iser; then
	dmesg_mark
	expect_fail "insmod refused while ib_iser holds 'iser'" insmod "$KO"
	check "refusal names ib_iser" dmesg_has 'name is taken, most.*ib_iser'
	check "ib_iser unloads" bounded 120 rmmod ib_iser
else
	result fail "modprobe ib_iser (needed for the name-clash check)"
fi

check "riser loads after ib_iser is gone" insmod "$KO"
check "rmmod riser again" bounded 120 rmmod riser

# riser loaded with always_register=0 (ib_iser's option): single-segment
# buffers the target reaches (reads, here those of fio's verification) go
# to it under the PD's global rkey and the local DMA lkey, without a memory
# registration; larger ones are still registered. (A 4k write's data all
# goes as immediate data, from the local DMA lkey, with or without the
# option.) fio with crc32c verification over both, against LIO. (Here
# rather than in a guest of its own: a boot costs about 100 s.)
. "$RISER_TOP/tests/common/target.sh"
U=iqn.2026-11.org.riser:unreg
IP=192.168.77.1
check "insmod riser.ko always_register=0" insmod "$KO" always_register=0
check "the parameter reads N" test "$(cat $P/always_register)" = N
check "LIO rd_mcp target" lio_rd_target $U $IP 32

# Booting from iSER: open-iscsi's iscsistart, what an initramfs runs, logs
# in with no iscsid (iBFT carries no transport: iser is a -P parameter);
# the LUN takes a filesystem and mounts; iscsid, started as a booted system
# starts it, takes the session over (from sysfs, with no node record) and
# logs it out. iscsid adopts a session it did not make by reconnecting it
# (riser sees the boot connection torn down and a new login); a logout
# asked before that ends is refused with "target likely not connected"
# (iscsiadm's ISCSI_ERR_SESSION_NOT_CONNECTED, 32), so it is asked again
# until it is taken (60 s at most), each time a retry (iscsid-adopting;
# any other status is a retry tests/manifest does not allow).
# iscsistart tries a failed login again by itself (initial_login_retry_max
# 30 by default); at debug level 2 it logs each ("re-opening session"),
# reported as a retry as iscsi_login reports iscsid's (target.sh).
boot_login() {
	local log=$RISER_OUT/iscsistart.log rc
	bounded "$ISCSI_TIMEOUT" iscsistart -i "$RISER_INITIATOR" -t $U -g 1 -a $IP -p 3260 \
		-P iface.transport_name=iser -d 2 >"$log" 2>&1
	rc=$?
	cat "$log"
	ISCSID_OLD=" " _iscsid_retried "iscsistart's login to $U at $IP (status $rc)" "$log" 0
	return $rc
}
boot_mount() {
	local dev rc
	dev=$(iscsi_dev $U 0 60) || return 1
	mkdir -p /tmp/riser-boot && mkfs.ext4 -q -F "$dev" && mount "$dev" /tmp/riser-boot || return 1
	echo "riser boots" >/tmp/riser-boot/f && sync && umount /tmp/riser-boot &&
		mount -o ro "$dev" /tmp/riser-boot && [ "$(cat /tmp/riser-boot/f)" = "riser boots" ]
	rc=$?
	umount /tmp/riser-boot 2>/dev/null
	return $rc
}
boot_logout() {
	local s i rc why
	s=$(iscsi_session $U) || return 1
	for ((i = 1; i <= 30; i++)); do
		_iscsid_mark
		bounded "$ISCSI_TIMEOUT" iscsiadm -m session -r "${s#session}" -u && return 0
		rc=$?
		[ "$i" -lt 30 ] || break
		why=boot-logout-failed
		# iscsid refuses while it reopens the session to take it over: 32
		# while it reconnects, and 9 (ISCSI_ERR_INTERNAL) with "in invalid
		# state for logout" while that reopen waits for its transport
		# connection (open-iscsi's session_logout_task).
		if [ "$rc" = 32 ] || { [ "$rc" = 9 ] && iscsid_refused_logout; }; then
			why=iscsid-adopting
		fi
		retried "$why" "logout of the boot session ($s), try $i: status $rc (32, or 9 with iscsid's 'invalid state for logout': iscsid is still reconnecting it to take it over)"
		nap 2
	done
	return 1
}
# iscsid logged, since its last mark, that it refused a logout in the
# middle of a reopen.
iscsid_refused_logout() {
	local lines=()
	[ -f "$ISCSID_LOG" ] || return 1
	mapfile -t -s "$ISCSID_AT" lines <"$ISCSID_LOG"
	[[ "${lines[*]}" == *"in invalid state for logout"* ]]
}
no_boot_session() { ! iscsi_session $U; }
boot_is_iser() { iscsi_session_is_iser $IP $U && iscsi_host_is_iscsi_iser $U; }
check "iscsistart logs in through riser with no iscsid (an initramfs's login)" boot_login
check "the boot session is iser, on an iscsi_iser host" boot_is_iser
check "the boot LUN takes a filesystem, mounts and keeps a file" boot_mount
check "iscsid started" iscsi_start
check "iscsid takes the boot session over and logs it out" boot_logout
check "no boot session left" no_boot_session
check "login" iscsi_login $U $IP
DEV=$(iscsi_dev $U 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "block device ($DEV)" test -b "$DEV"
check "fio 4k random writes (one segment each), verified" fio_verify "$DEV" randwrite 4k 16 2M
check "fio 256k writes (several segments, registered), verified" fio_verify "$DEV" write 256k 16 4M
dmesg_mark
check "logout" iscsi_logout $U $IP
check "riser counted commands sent without registration" \
	dmesg_has "riser: connection to $IP:3260: [1-9][0-9]* commands sent with unregistered buffers"

# The largest commands: max_sectors=65536, which ib_iser takes (it caps it
# at the device's reach), riser too (it caps it at 32768, 16 MiB, then at
# the device's reach), where
# one registration maps them. rxe's map 512 pages, so riser lowers the
# session's max_sectors to what one maps (4088 or 4096 sectors, with or
# without the misalignment page), and says so, as ib_iser does; the queue's
# max_hw_sectors_kb follows, and the block layer splits 16 MiB I/O into
# commands of up to that size. Under TCG, rxe moves about 1 MB/s: 16 MiB in
# flight keep the target busy past open-iscsi's 5 s ping timeout (16 or 32
# MiB in flight failed the connection on ping timeouts, 2026-11-25, as the
# target's NOP-In waited behind its RDMA READs; 2 MiB in flight pass with
# riser and ib_iser alike). So the disk's queue depth is 2 for this fio,
# which the block layer feeds from the 16 MiB I/O.
big_limits() {
	local n kb
	n=$(dmesg | sed -n 's/.*riser: max_sectors was reduced from 65536 to \([0-9]*\).*/\1/p' | tail -1)
	kb=$(cat "/sys/block/${DEV#/dev/}/queue/max_hw_sectors_kb")
	echo "max_sectors $n, max_hw_sectors_kb $kb"
	[ -n "$n" ] && [ "$n" -ge 4088 ] && [ "$n" -lt 32768 ] && [ "$kb" = $((n / 2)) ]
}
# The mean size of the writes the disk saw: above the default 512 KiB.
big_requests() {
	local s
	s=($(cat "/sys/block/${DEV#/dev/}/stat"))
	echo "writes ${s[4]}, sectors ${s[6]}"
	[ "${s[4]}" -gt 0 ] && [ $((s[6] / s[4])) -gt 1024 ]
}
# riser's tracepoints (trace system "riser"), on through this login, one
# 4k READ and one 4k WRITE: the connection's way up, the Login Requests,
# a SCSI Command with a read STag answered by a SCSI Response of its ITT,
# and one carrying its 4k as immediate data with no STag.
TR=/sys/kernel/tracing
trace_on() {
	[ -d $TR/events ] || mount -t tracefs nodev $TR || return 1
	[ -d $TR/events/riser ] || return 1
	echo >$TR/trace && echo 1 >$TR/events/riser/enable
}
trace_io() {
	dd if="$DEV" of=/dev/null bs=4k count=1 skip=7 iflag=direct &&
		dd if=/dev/urandom of="$DEV" bs=4k count=1 seek=9 oflag=direct
}
trace_shows() {
	echo 0 >$TR/events/riser/enable
	grep riser_ $TR/trace | tail -40
	awk '
		function f(name,   i) {
			for (i = 1; i <= NF; i++)
				if (index($i, name "=") == 1) return substr($i, length(name) + 2)
			return ""
		}
		/riser_conn_state:/ && / connecting -> up/ { up = 1 }
		/riser_pdu_send:/ && f("opcode") == "0x03" { login = 1 }
		/riser_pdu_send:/ && f("opcode") == "0x01" && f("dlength") == "0" &&
			f("rkey") != "0x00000000" { read[f("itt")] = 1 }
		/riser_pdu_send:/ && f("opcode") == "0x01" && f("dlength") == "4096" &&
			f("rkey") == "0x00000000" { write = 1 }
		/riser_pdu_recv:/ && f("opcode") == "0x21" && (f("itt") in read) { answered = 1 }
		END {
			printf "up %d login %d read-answered %d write-immediate %d\n", up, login, answered, write
			exit !(up && login && answered && write)
		}' $TR/trace
}
check "rmmod riser (always_register=0)" unload_riser
dmesg_mark
check "insmod riser.ko max_sectors=65536 pi_enable=1 (ib_iser takes both)" insmod "$KO" \
	max_sectors=65536 pi_enable=1
check "riser's tracepoints on (tracefs)" trace_on
check "login (max_sectors=65536)" iscsi_login $U $IP
check "pi_enable=Y said at the session: it runs without T10-PI" \
	dmesg_has "riser: pi_enable=Y: the session to $IP:3260 runs without T10-PI"
DEV=$(iscsi_dev $U 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "one 4k READ and one 4k WRITE" trace_io
check "the trace shows the way up, the login, the READ's STag and response, the WRITE's immediate data" \
	trace_shows
check "max_sectors lowered to one registration's reach, logged, in the queue" big_limits
# One 16 MiB write (cut at max_sectors into about eight commands) and its
# verification: a second one went the same way.
big_fio() {
	echo 2 >"/sys/block/${DEV#/dev/}/device/queue_depth" && fio_verify "$DEV" write 16m 1 16M
}
check "fio 16m writes, verified" big_fio
check "commands above 512 KiB reached the disk" big_requests
check "logout (max_sectors=65536)" iscsi_logout $U $IP
check "final rmmod riser" unload_riser
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "rxe0 removed" bounded 60 rdma link delete rxe0
save_dmesg
