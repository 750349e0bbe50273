#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# riser loaded with always_register=0 (ib_iser's option): single-segment
# buffers the target reaches (reads, here those of fio's verification) go
# to it under the PD's global rkey and the local DMA lkey, without a memory
# registration; larger ones are still registered. (A 4k write's data all
# goes as immediate data, from the local DMA lkey, with or without the
# option.) fio with crc32c verification over both, over rxe against LIO.
set -u
. "$RISER_TOP/tests/guest/lib.sh"
. "$RISER_TOP/tests/guest/target.sh"
KO=$RISER_TOP/riser.ko
IP=192.168.77.1
T=iqn.2026-11.org.riser:unreg

check "soft-RoCE device rxe0 created" setup_rxe $IP
check "riser's dependencies load" load_deps
check "insmod riser.ko always_register=0" insmod "$KO" always_register=0
check "the parameter reads N" test "$(cat /sys/module/riser/parameters/always_register)" = N
check "LIO rd_mcp target" lio_rd_target $T $IP 32
check "iscsid started" iscsi_start
check "login" iscsi_login $T $IP
DEV=$(iscsi_dev $T 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "block device ($DEV)" test -b "$DEV"
check "fio 4k random writes (one segment each), verified" fio_verify "$DEV" randwrite 4k 16 4M
check "fio 256k writes (several segments, registered), verified" fio_verify "$DEV" write 256k 16 4M
dmesg_mark
check "logout" iscsi_logout $T $IP
check "riser counted commands sent without registration" \
	dmesg_has "riser: connection to $IP:3260: [1-9][0-9]* commands sent with unregistered buffers"
check "rmmod riser" unload_riser
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "rxe0 removed" rdma link delete rxe0
save_dmesg
