#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The negotiation matrix, set on the target (LIO's TPG parameters), data
# verified in every cell: ImmediateData Yes/No x InitialR2T Yes/No x
# (FirstBurstLength, MaxBurstLength) from 4 KiB to 256 KiB, seven cells
# that cover every pair of settings (all 13 with RISER_MATRIX=full). Each cell logs
# in anew, checks that the session negotiated the cell's values, runs fio
# with crc32c verification over block sizes from 512 bytes to 1 MiB (so
# commands are smaller than, equal to and larger than the bursts), and logs
# out. Over rxe (RISER_RDMA=siw for soft-iWARP).
set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
KO=$RISER_TOP/riser.ko
RDMA=${RISER_RDMA:-rxe}
if [ "$RDMA" = siw ]; then IP=192.168.78.1; else IP=192.168.77.1; fi
T=iqn.2026-11.org.riser:matrix

sess_attr() { cat "/sys/class/iscsi_session/$(iscsi_session "$T")/$1"; }
fio_mix() {
	fio_verify "$1" randwrite 4k 8 4M --bssplit=512/10:4k/25:16k/15:64k/20:256k/15:1m/15
}
yn() { [ "$1" = Yes ] && echo 1 || echo 0; }
cell() {
	local imm=$1 r2t=$2 fb=$3 mb=$4 dev
	lio_set_param $T ImmediateData "$imm" && lio_set_param $T InitialR2T "$r2t" &&
		lio_set_param $T MaxBurstLength "$mb" && lio_set_param $T FirstBurstLength "$fb" ||
		return 1
	iscsi_login $T $IP || return 1
	local rc=0
	dev=$(iscsi_dev $T 0 60) &&
		[ "$(sess_attr immediate_data)" = "$(yn "$imm")" ] &&
		[ "$(sess_attr initial_r2t)" = "$(yn "$r2t")" ] &&
		[ "$(sess_attr first_burst_len)" = "$fb" ] &&
		[ "$(sess_attr max_burst_len)" = "$mb" ] &&
		fio_mix "$dev" || rc=1
	iscsi_logout $T $IP || rc=1
	return $rc
}

dmesg_live

# The cells: every pair of ImmediateData and InitialR2T, each with a first
# burst smaller than the commands' data (4k) and one that holds most of it
# (64k and 256k), and a first burst below the largest burst (4k/256k,
# 64k/128k). RISER_MATRIX=full runs all 13 cells (each costs about 30 s in
# the KASAN guest: a login, a verified fio mix, a logout).
if [ -n "${RISER_MATRIX_CELLS:-}" ]; then
	# By hand: the cells to run, e.g. "No:No:4096:4096 No:No:4096:4096".
	CELLS=$RISER_MATRIX_CELLS
elif [ "${RISER_MATRIX:-}" = full ]; then
	CELLS=
	for imm in Yes No; do
		for r2t in Yes No; do
			for b in 4096:4096 4096:262144 65536:131072 262144:262144; do
				# No immediate data and InitialR2T: nothing is sent
				# unsolicited, so FirstBurstLength has no effect;
				# one pair of lengths covers that cell.
				if [ $imm = No ] && [ $r2t = Yes ] && [ "$b" != 262144:262144 ]; then
					continue
				fi
				CELLS+=" $imm:$r2t:$b"
			done
		done
	done
else
	CELLS="Yes:Yes:4096:4096 Yes:Yes:262144:262144 Yes:No:4096:262144 Yes:No:65536:131072
		No:No:4096:4096 No:No:65536:131072 No:Yes:262144:262144"
fi
_cells=($CELLS)
# 10 checks, and one a cell.
plan $((10 + ${#_cells[@]}))
check "RDMA device ($RDMA) created" setup_rdma "$RDMA" "$IP"
check "riser's dependencies load" load_deps
check "insmod riser.ko" insmod "$KO"
check "LIO rd_mcp target ($RDMA)" lio_rd_target $T $IP 32 "$RDMA"
# LIO starts a 3 s Data-Out timer when a WRITE with unsolicited Data-Outs
# arrives and, over iSER, stops it only once its RDMA READ of the rest of
# the data has completed; at ERL 0 it then drops the connection. A KASAN
# guest under TCG moves about 1 MB/s: with InitialR2T=No, a 4 KiB first
# burst and several 1 MiB writes queued, about one cell in ten timed out,
# with riser at 056e316 as with 28c9eba (rxe counted no retransmission).
check "LIO waits 30 s for write data" lio_acl_attrib $T dataout_timeout 30
check "iscsid started" iscsi_start
for c in $CELLS; do
	IFS=: read -r imm r2t fb mb <<<"$c"
	check "ImmediateData=$imm InitialR2T=$r2t FirstBurst=$fb MaxBurst=$mb: negotiated, fio verified, no connection failure" \
		conn_clean cell "$imm" "$r2t" "$fb" "$mb"
done
check "rmmod riser" unload_riser
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "RDMA device ($RDMA) removed" rdma_delete "$RDMA"
save_dmesg
