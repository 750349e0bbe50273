/* SPDX-License-Identifier: GPL-2.0 */
/*
 * riser's tracepoints (trace system "riser"): PDUs sent and received,
 * completion errors and connection state changes. Defined here, created in
 * rust/trace.c, called from Rust through the riser_trace_* functions there.
 *
 *   echo 1 > /sys/kernel/tracing/events/riser/enable
 *   trace-cmd record -e riser; perf record -e 'riser:*'
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM riser

#if !defined(_RISER_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _RISER_TRACE_H

#include <linux/tracepoint.h>
#include <linux/unaligned.h>

/* The fields of a PDU's BHS (RFC 7143) both directions show. */
#define RISER_BHS_OPCODE(b)	((b)[0] & 0x3f)
#define RISER_BHS_DLENGTH(b)	get_unaligned_be24(&(b)[5])
#define RISER_BHS_ITT(b)	get_unaligned_be32(&(b)[16])
/* CmdSN and ExpStatSN (initiator PDUs), StatSN and ExpCmdSN (target's). */
#define RISER_BHS_SN1(b)	get_unaligned_be32(&(b)[24])
#define RISER_BHS_SN2(b)	get_unaligned_be32(&(b)[28])

TRACE_EVENT(riser_pdu_send,
	TP_PROTO(const void *conn, const u8 *bhs, u32 rkey),
	TP_ARGS(conn, bhs, rkey),
	TP_STRUCT__entry(
		__field(const void *, conn)
		__field(u8, opcode)
		__field(u32, itt)
		__field(u32, cmdsn)
		__field(u32, expstatsn)
		__field(u32, dlength)
		__field(u32, rkey)
	),
	TP_fast_assign(
		__entry->conn = conn;
		__entry->opcode = RISER_BHS_OPCODE(bhs);
		__entry->itt = RISER_BHS_ITT(bhs);
		__entry->cmdsn = RISER_BHS_SN1(bhs);
		__entry->expstatsn = RISER_BHS_SN2(bhs);
		__entry->dlength = RISER_BHS_DLENGTH(bhs);
		__entry->rkey = rkey;
	),
	TP_printk("conn=%p opcode=0x%02x itt=0x%08x cmdsn=%u expstatsn=%u dlength=%u rkey=0x%08x",
		  __entry->conn, __entry->opcode, __entry->itt, __entry->cmdsn,
		  __entry->expstatsn, __entry->dlength, __entry->rkey)
);

TRACE_EVENT(riser_pdu_recv,
	TP_PROTO(const void *conn, const u8 *bhs, u32 invalidated),
	TP_ARGS(conn, bhs, invalidated),
	TP_STRUCT__entry(
		__field(const void *, conn)
		__field(u8, opcode)
		__field(u32, itt)
		__field(u32, statsn)
		__field(u32, expcmdsn)
		__field(u32, dlength)
		__field(u32, rkey)
	),
	TP_fast_assign(
		__entry->conn = conn;
		__entry->opcode = RISER_BHS_OPCODE(bhs);
		__entry->itt = RISER_BHS_ITT(bhs);
		__entry->statsn = RISER_BHS_SN1(bhs);
		__entry->expcmdsn = RISER_BHS_SN2(bhs);
		__entry->dlength = RISER_BHS_DLENGTH(bhs);
		__entry->rkey = invalidated;
	),
	TP_printk("conn=%p opcode=0x%02x itt=0x%08x statsn=%u expcmdsn=%u dlength=%u rkey=0x%08x",
		  __entry->conn, __entry->opcode, __entry->itt, __entry->statsn,
		  __entry->expcmdsn, __entry->dlength, __entry->rkey)
);

TRACE_EVENT(riser_wc_error,
	TP_PROTO(const void *conn, bool recv, u32 tag, u32 status),
	TP_ARGS(conn, recv, tag, status),
	TP_STRUCT__entry(
		__field(const void *, conn)
		__field(bool, recv)
		__field(u32, tag)
		__field(u32, status)
	),
	TP_fast_assign(
		__entry->conn = conn;
		__entry->recv = recv;
		__entry->tag = tag;
		__entry->status = status;
	),
	TP_printk("conn=%p %s tag=%u status=%u (%s)", __entry->conn,
		  __entry->recv ? "recv" : "send", __entry->tag, __entry->status,
		  ib_wc_status_msg(__entry->status))
);

TRACE_EVENT(riser_conn_state,
	TP_PROTO(const void *conn, u8 from, u8 to),
	TP_ARGS(conn, from, to),
	TP_STRUCT__entry(
		__field(const void *, conn)
		__field(u8, from)
		__field(u8, to)
	),
	TP_fast_assign(
		__entry->conn = conn;
		__entry->from = from;
		__entry->to = to;
	),
	TP_printk("conn=%p %s -> %s", __entry->conn,
		  __print_symbolic(__entry->from, { 0, "resolving" }, { 1, "connecting" },
				   { 2, "up" }, { 3, "failed" }, { 4, "terminating" }),
		  __print_symbolic(__entry->to, { 0, "resolving" }, { 1, "connecting" },
				   { 2, "up" }, { 3, "failed" }, { 4, "terminating" }))
);

#endif /* _RISER_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE riser_trace
#include <trace/define_trace.h>
