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

/*
 * What both PDU events record: the same BHS fields, the two sequence
 * numbers named by direction (an initiator's PDU carries CmdSN and
 * ExpStatSN there, the target's StatSN and ExpCmdSN).
 */
#define RISER_PDU_FIELDS(sn1, sn2)		\
	__field(const void *, conn)		\
	__field(u8, opcode)			\
	__field(u32, itt)			\
	__field(u32, sn1)			\
	__field(u32, sn2)			\
	__field(u32, dlength)			\
	__field(u32, rkey)

#define RISER_PDU_ASSIGN(sn1, sn2)				\
	__entry->conn = conn;					\
	__entry->opcode = RISER_BHS_OPCODE(bhs);		\
	__entry->itt = RISER_BHS_ITT(bhs);			\
	__entry->sn1 = RISER_BHS_SN1(bhs);			\
	__entry->sn2 = RISER_BHS_SN2(bhs);			\
	__entry->dlength = RISER_BHS_DLENGTH(bhs);		\
	__entry->rkey = rkey;

#define RISER_PDU_PRINTK(sn1, sn2)						\
	TP_printk("conn=%p opcode=0x%02x itt=0x%08x " #sn1 "=%u " #sn2 "=%u "	\
		  "dlength=%u rkey=0x%08x", __entry->conn, __entry->opcode,	\
		  __entry->itt, __entry->sn1, __entry->sn2, __entry->dlength,	\
		  __entry->rkey)

/* rkey: the STag the target was given with the PDU, 0 for none. */
TRACE_EVENT(riser_pdu_send,
	TP_PROTO(const void *conn, const u8 *bhs, u32 rkey),
	TP_ARGS(conn, bhs, rkey),
	TP_STRUCT__entry(RISER_PDU_FIELDS(cmdsn, expstatsn)),
	TP_fast_assign(RISER_PDU_ASSIGN(cmdsn, expstatsn)),
	RISER_PDU_PRINTK(cmdsn, expstatsn)
);

/* rkey: the STag the target invalidated with the PDU, 0 for none. */
TRACE_EVENT(riser_pdu_recv,
	TP_PROTO(const void *conn, const u8 *bhs, u32 rkey),
	TP_ARGS(conn, bhs, rkey),
	TP_STRUCT__entry(RISER_PDU_FIELDS(statsn, expcmdsn)),
	TP_fast_assign(RISER_PDU_ASSIGN(statsn, expcmdsn)),
	RISER_PDU_PRINTK(statsn, expcmdsn)
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
