#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# tests/guest/session.sh over soft-iWARP (siw) instead of soft-RoCE.
export RISER_RDMA=siw
# The block-size sweep runs over rxe in session.sh; over siw, one small and
# one large size (random at QD 32, sequential at QD 1) prove the device.
export RISER_FIO_BS=${RISER_FIO_BS:-4k 1m}
. "$RISER_TOP/tests/guest/session.sh"
