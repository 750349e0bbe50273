#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# riser against a hostile target, the part of tests/guest/hostile.sh that
# needs no second vCPU: the full-feature modes that fail or keep the
# connection on one PDU (bad PDUs, floods, pings, Async Messages, bad
# invalidations), then the session-level phases: logins spoilt three ways,
# garbage in the target's CM accept, 512-byte PDUs with extreme burst
# lengths (the edge of the Data-Out pool), and always_register=0 with a
# target that invalidates the global rkey. make check runs it on one vCPU
# beside the other guests, and hostile.sh's racing modes, early status and
# held release on two.

HOSTILE_PART=session
. "$RISER_TOP/tests/guest/hostile.sh"
