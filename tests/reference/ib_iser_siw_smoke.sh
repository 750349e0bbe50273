#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# ib_iser_smoke.sh over soft-iWARP (siw0 on dummy1, LIO's TCP listener moved
# to a network namespace of its own so that it does not take siw's port).

RISER_RDMA=siw exec bash "$RISER_TOP/tests/reference/ib_iser_smoke.sh"
