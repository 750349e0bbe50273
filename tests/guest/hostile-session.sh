#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# riser against a hostile target, the session-level phases of
# tests/guest/hostile.sh: logins spoilt three ways, garbage in the target's
# CM accept, 512-byte PDUs with extreme burst lengths (the edge of the
# Data-Out pool), and always_register=0 with a target that invalidates the
# global rkey. make check runs it on one vCPU beside the other guests, and
# hostile.sh's full-feature modes on two.

HOSTILE_PART=session
. "$RISER_TOP/tests/guest/hostile.sh"
