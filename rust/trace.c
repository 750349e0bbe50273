// SPDX-License-Identifier: GPL-2.0
/*
 * riser's tracepoints, created here (include/riser_trace.h defines them)
 * and called from Rust (rust/trace.rs) through these functions. When a
 * tracepoint is off, its call is a static branch past the body.
 */
#include <rdma/ib_verbs.h>

#include "riser_helpers.h"

#define CREATE_TRACE_POINTS
#include "riser_trace.h"

void riser_trace_pdu_send(const void *conn, const u8 *bhs, u32 rkey)
{
	trace_riser_pdu_send(conn, bhs, rkey);
}

void riser_trace_pdu_recv(const void *conn, const u8 *bhs, u32 invalidated)
{
	trace_riser_pdu_recv(conn, bhs, invalidated);
}

void riser_trace_wc_error(const void *conn, bool recv, u32 tag, u32 status)
{
	trace_riser_wc_error(conn, recv, tag, status);
}

void riser_trace_conn_state(const void *conn, u8 from, u8 to)
{
	trace_riser_conn_state(conn, from, to);
}
