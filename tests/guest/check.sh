#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The in-guest part of `make check`: load riser over a soft-RoCE device, keep
# its KUnit results, check the transport it registers, its parameter checks,
# its refusal to load beside ib_iser, and a clean unload; then a session
# with always_register=0 (unregistered single-segment buffers).

set -u
. "$RISER_TOP/tests/guest/lib.sh"
KO=$RISER_TOP/riser.ko
T=/sys/class/iscsi_transport/iser

# 37 checks in line, 3 for each of the 5 refused parameters, 3 beside ib_iser.
plan 55

check "soft-RoCE device rxe0 created" setup_rxe
check "riser's dependencies load" load_deps

dmesg_mark
check "insmod riser.ko" insmod "$KO"
collect_kunit
check "KUnit results collected for riser's suites" \
	bash -c "ls $RISER_OUT/kunit | grep -q riser_proto_iser"
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
check "and logged with the bounds" dmesg_has 'module parameter max_sectors=0 is out of range 8..=32768'
expect_fail "writing debug_level=9 is refused" bash -c "echo 9 > $P/debug_level"
expect_fail "writing a non-number is refused" bash -c "echo lots > $P/max_sectors"
check "refused writes left the values alone" bash -c "
	[ \$(cat $P/max_sectors) = 1024 ] && [ \$(cat $P/debug_level) = 0 ]"
check "writing max_sectors=2048 and debug_level=2 at run time" bash -c "
	echo 2048 > $P/max_sectors && echo 2 > $P/debug_level &&
	[ \$(cat $P/max_sectors) = 2048 ] && [ \$(cat $P/debug_level) = 2 ]"
check "rmmod riser" rmmod riser
check "transport gone after unload" test ! -e "$T"

for bad in max_sectors=0 max_sectors=32769 max_lun=0 debug_level=-1 debug_level=5; do
	dmesg_mark
	expect_fail "insmod refuses $bad" insmod "$KO" "$bad"
	check "refusal of $bad is logged with the bounds" dmesg_has "module parameter ${bad%%=*}=.* is out of range"
	check "no transport left after refused $bad" test ! -e "$T"
done

check "insmod with in-range parameters" insmod "$KO" max_sectors=8 max_lun=1 debug_level=4 always_register=0
check "and unload again" rmmod riser

# The C ib_iser holds the name: riser must refuse to load and say why.
if modprobe ib_iser; then
	dmesg_mark
	expect_fail "insmod refused while ib_iser holds 'iser'" insmod "$KO"
	check "refusal names ib_iser" dmesg_has 'name is taken, most.*ib_iser'
	check "ib_iser unloads" rmmod ib_iser
else
	echo "not ok - modprobe ib_iser (needed for the name-clash check)" >>"$TAP"
fi

check "riser loads after ib_iser is gone" insmod "$KO"
check "rmmod riser again" rmmod riser

# riser loaded with always_register=0 (ib_iser's option): single-segment
# buffers the target reaches (reads, here those of fio's verification) go
# to it under the PD's global rkey and the local DMA lkey, without a memory
# registration; larger ones are still registered. (A 4k write's data all
# goes as immediate data, from the local DMA lkey, with or without the
# option.) fio with crc32c verification over both, against LIO. (Here
# rather than in a guest of its own: a boot costs about 100 s.)
. "$RISER_TOP/tests/guest/target.sh"
U=iqn.2026-11.org.riser:unreg
IP=192.168.77.1
check "insmod riser.ko always_register=0" insmod "$KO" always_register=0
check "the parameter reads N" test "$(cat $P/always_register)" = N
check "LIO rd_mcp target" lio_rd_target $U $IP 32
check "iscsid started" iscsi_start
check "login" iscsi_login $U $IP
DEV=$(iscsi_dev $U 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "block device ($DEV)" test -b "$DEV"
check "fio 4k random writes (one segment each), verified" fio_verify "$DEV" randwrite 4k 16 2M
check "fio 256k writes (several segments, registered), verified" fio_verify "$DEV" write 256k 16 4M
dmesg_mark
check "logout" iscsi_logout $U $IP
check "riser counted commands sent without registration" \
	dmesg_has "riser: connection to $IP:3260: [1-9][0-9]* commands sent with unregistered buffers"
check "final rmmod riser" unload_riser
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "rxe0 removed" rdma link delete rxe0
save_dmesg
