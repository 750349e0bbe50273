#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# tests/guest/session.sh over soft-iWARP (siw) instead of soft-RoCE.
export RISER_RDMA=siw
. "$RISER_TOP/tests/guest/session.sh"
