// SPDX-License-Identifier: GPL-2.0
/*
 * iser-evil: a small iSER target in userspace (libibverbs + librdmacm) that
 * logs an initiator in, serves one LUN from memory, and misbehaves on
 * purpose, once, in the way its mode names. It is riser's hostile target:
 * tests/guest/hostile.sh runs it against riser and checks that each bad
 * PDU ends in a logged connection failure and a recovery, never an oops, a
 * hang or a write reported done that was not.
 *
 *   iser-evil -a IP [-p PORT] [-m MODE[,MODE...]] [-k N | -l LBA] [-s SIZE_MB] [-v]
 *
 * It accepts one connection at a time, for ever (iscsid reconnects after a
 * failure). Each mode of the list fires once, in order, on its trigger: a
 * login request (login modes), or in the full-feature phase the N-th READ
 * (-k, default 1) or, with -l, the READ of block LBA that follows a READ
 * of block LBA - 8 (the initiator's retries of the READ that fired do not
 * fire again; inv-other holds that READ until the next one comes). With
 * every mode shown the target behaves. Each firing prints "evil: fired MODE" on stdout, which the test
 * waits for.
 *
 * Negotiation: ImmediateData=No and InitialR2T=Yes, so every WRITE's data is
 * pulled with RDMA READs from the initiator's write STag; READ data is
 * pushed with RDMA WRITEs to its read STag. Writes land in the memory disk
 * only when the RDMA READ completed, and the good status goes out after.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>

#define ISER_HDR 28
#define BHS 48
#define HDRS (ISER_HDR + BHS)
#define MAX_DSL 8192
#define RX_SIZE (HDRS + MAX_DSL)
#define TX_SIZE (HDRS + 3 * MAX_DSL)	/* room for the over-long sends */
#define NRX 128
#define NTX 128
#define NPEND 128
#define BLOCK 512

enum wr_kind { WR_RX = 1, WR_TX, WR_RDMA_READ, WR_RDMA_WRITE };
#define WRID(kind, idx) (((uint64_t)(kind) << 32) | (uint32_t)(idx))

enum mode {
	M_NONE, M_SHORT, M_DSL_LONG, M_OVERRUN, M_UNKNOWN_ITT, M_STALE_ITT,
	M_INV_OTHER, M_INV_BAD, M_BAD_VERSION, M_BAD_FLAGS, M_AHS, M_BAD_OPCODE,
	M_FLOOD_NOP, M_FLOOD_ASYNC, M_SILENT, M_SILENT_ALL, M_LOGIN_LONG,
	M_LOGIN_DSL, M_LOGIN_BAD, M_DROP, M_PING,
};

static const char *const mode_names[] = {
	[M_NONE] = "none", [M_SHORT] = "short", [M_DSL_LONG] = "dsl-long",
	[M_OVERRUN] = "overrun", [M_UNKNOWN_ITT] = "unknown-itt",
	[M_STALE_ITT] = "stale-itt", [M_INV_OTHER] = "inv-other",
	[M_INV_BAD] = "inv-bad", [M_BAD_VERSION] = "bad-version",
	[M_BAD_FLAGS] = "bad-flags", [M_AHS] = "ahs", [M_BAD_OPCODE] = "bad-opcode",
	[M_FLOOD_NOP] = "flood-nop", [M_FLOOD_ASYNC] = "flood-async",
	[M_SILENT] = "silent", [M_SILENT_ALL] = "silent-all",
	[M_LOGIN_LONG] = "login-long", [M_LOGIN_DSL] = "login-dsl",
	[M_LOGIN_BAD] = "login-bad", [M_DROP] = "drop", [M_PING] = "ping",
};

/* A command whose response waits: an RDMA READ in flight, or held back. */
struct pend {
	bool used;
	uint32_t itt;
	uint32_t stag;		/* the initiator's STag for its data */
	bool write;
	uint32_t len;
};

struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_comp_channel *ch;
	struct ibv_mr *rx_mr, *tx_mr, *disk_mr;
	uint8_t *rx, *tx;
	bool tx_busy[NTX];
	int tx_inflight;
	struct pend pend[NPEND];
	uint32_t statsn, exp_cmdsn;
	/* silent: SCSI commands go unanswered (until a TMF, unless silent_all:
	 * then TMFs too; NOP-Outs are always answered) */
	bool ffp, closing, silent, silent_all;
	bool dead;		/* the CM said the connection is gone: free it */
	int reads;
	uint32_t last_itt;	/* last answered command (for stale-itt) */
	bool have_last;
	bool inv_ok;		/* the initiator takes SEND_WITH_INV */
	bool disconnecting;
	bool has_held;		/* a READ held back by inv-other */
	uint32_t held_itt;
	uint32_t held_rstag;
	uint64_t held_rva;
	uint32_t held_len, held_lba;
	/* ping: NOP-In pings sent one at a time, each when the last is
	 * answered; pings_sent 0 when none is going on */
	int pings_sent;
};

/* ping: how many NOP-Ins that ask for an answer (a valid TTT) it sends. */
#define PINGS 600
#define PING_TTT 0x50000000u

/* The misbehaviours to show, in order, one per trigger; mode is the next. */
#define MAX_MODES 32
static enum mode modes[MAX_MODES];
static int nmodes, next_mode;
static enum mode mode = M_NONE;
static int fire_at = 1;
static long long fire_lba = -1;
/*
 * With -l: a READ of block LBA - 8 arms the next mode, the READ of LBA fires
 * it. The initiator's retries of the READ that fired (on the connection
 * that comes after) must not fire the next mode.
 */
static bool primed;
static bool verbose;
static uint8_t *disk;
static size_t disk_size = 64u << 20;
static struct conn *cur;
static struct rdma_event_channel *ec;

static struct conn *conn_new(struct rdma_cm_event *ev);
static void logv(const char *fmt, ...);

/*
 * Handles the CM events that are there, without waiting. Called from the
 * main loop and while waiting for send buffers (a flood must notice that the
 * initiator went away). A connection the CM ends is marked dead; the main
 * loop frees it.
 */
static void cm_poll(void)
{
	struct rdma_cm_event *ev;

	while (rdma_get_cm_event(ec, &ev) == 0) {
		enum rdma_cm_event_type t = ev->event;
		struct rdma_cm_id *id = ev->id;

		logv("cm event %s\n", rdma_event_str(t));
		if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
			if (cur) {
				/* One connection at a time: the initiator retries. */
				rdma_ack_cm_event(ev);
				rdma_reject(id, NULL, 0);
				rdma_destroy_id(id);
				continue;
			}
			cur = conn_new(ev);
			rdma_ack_cm_event(ev);
			if (cur)
				printf("evil: connection accepted\n");
			fflush(stdout);
			continue;
		}
		rdma_ack_cm_event(ev);
		if (cur && id == cur->id && !cur->dead &&
		    (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL ||
		     t == RDMA_CM_EVENT_CONNECT_ERROR || t == RDMA_CM_EVENT_UNREACHABLE)) {
			printf("evil: connection closed (%s)\n", rdma_event_str(t));
			fflush(stdout);
			cur->dead = true;
			cur->closing = true;
		}
	}
}

static void logv(const char *fmt, ...)
{
	va_list ap;

	if (!verbose)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* The current mode fires: say so, and arm the next one. */
static void fire(void)
{
	printf("evil: fired %s\n", mode_names[mode]);
	fflush(stdout);
	next_mode++;
	mode = next_mode < nmodes ? modes[next_mode] : M_NONE;
}

static bool login_mode(enum mode m)
{
	return m == M_LOGIN_LONG || m == M_LOGIN_DSL || m == M_LOGIN_BAD;
}

static bool armed(enum mode m)
{
	return mode == m;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const uint8_t *p)
{
	return (uint64_t)be32(p) << 32 | be32(p + 4);
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static void put24(uint8_t *p, uint32_t v)
{
	p[0] = v >> 16;
	p[1] = v >> 8;
	p[2] = v;
}

static int post_rx(struct conn *c, int i)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(c->rx + (size_t)i * RX_SIZE),
		.length = RX_SIZE,
		.lkey = c->rx_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = WRID(WR_RX, i), .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return ibv_post_recv(c->id->qp, &wr, &bad);
}

static void handle_wc(struct conn *c, struct ibv_wc *wc);

/* Polls the CQ once, handling what completed; waits when asked to. */
static int poll_cq(struct conn *c, bool wait)
{
	struct ibv_wc wc[16];
	int n, i;

	int got = 0;

	while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
		got += n;
		for (i = 0; i < n; i++)
			handle_wc(c, &wc[i]);
	}
	if (n < 0)
		return -1;
	if (wait && !got)
		usleep(200);
	return 0;
}

/* A free send buffer, waiting for send completions if there is none. */
static int tx_get(struct conn *c)
{
	for (int tries = 0; tries < 50000; tries++) {
		for (int i = 0; i < NTX; i++)
			if (!c->tx_busy[i]) {
				c->tx_busy[i] = true;
				return i;
			}
		cm_poll();
		if (c->closing || poll_cq(c, true))
			return -1;
	}
	fprintf(stderr, "evil: no send buffer for 10 s: giving up on the connection\n");
	c->closing = true;
	return -1;
}

/*
 * Sends the PDU built in send buffer i: len bytes (iSER header included).
 * inv names an rkey to invalidate (SEND_WITH_INV) when non-zero.
 */
static int tx_post(struct conn *c, int i, size_t len, uint32_t inv, bool with_inv)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(c->tx + (size_t)i * TX_SIZE),
		.length = (uint32_t)len,
		.lkey = c->tx_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = WRID(WR_TX, i),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = with_inv ? IBV_WR_SEND_WITH_INV : IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad;
	int ret;

	if (with_inv && !c->inv_ok)
		wr.opcode = IBV_WR_SEND;
	if (with_inv)
		wr.invalidate_rkey = inv;
	ret = ibv_post_send(c->id->qp, &wr, &bad);
	if (ret) {
		c->tx_busy[i] = false;
		fprintf(stderr, "evil: post send: %s\n", strerror(ret));
		return -1;
	}
	c->tx_inflight++;
	return 0;
}

/* The iSER header of a target's PDU: iSCSI control, no STags. */
static uint8_t *pdu_start(struct conn *c, int i)
{
	uint8_t *p = c->tx + (size_t)i * TX_SIZE;

	memset(p, 0, HDRS);
	p[0] = 0x10;
	return p;
}

static void set_sn(struct conn *c, uint8_t *bhs, bool advance)
{
	put32(bhs + 24, advance ? c->statsn++ : c->statsn);
	put32(bhs + 28, c->exp_cmdsn);
	put32(bhs + 32, c->exp_cmdsn + 31);
}

/* Sends a SCSI Response for itt, with sense data for CHECK CONDITION. */
static int send_rsp(struct conn *c, uint32_t itt, uint8_t status, uint8_t key,
		    uint8_t asc, uint32_t resid, bool with_inv, uint32_t inv)
{
	int i = tx_get(c);
	uint8_t *p, *bhs;
	size_t dlen = 0;

	if (i < 0)
		return -1;
	p = pdu_start(c, i);
	bhs = p + ISER_HDR;
	bhs[0] = 0x21;
	bhs[1] = 0x80;
	bhs[3] = status;
	put32(bhs + 16, itt);
	set_sn(c, bhs, true);
	if (resid) {
		bhs[1] |= 0x02;	/* underflow */
		put32(bhs + 44, resid);
	}
	if (status == 0x02) {
		uint8_t *d = p + HDRS;

		memset(d, 0, 20);
		d[1] = 18;	/* sense length */
		d[2] = 0x70;
		d[4] = key;
		d[9] = 10;
		d[14] = asc;
		dlen = 20;
		put24(bhs + 5, dlen);
	}
	c->last_itt = itt;
	c->have_last = true;
	return tx_post(c, i, HDRS + dlen, inv, with_inv);
}

/* A bare target PDU with opcode op (NOP-In, Async, ...), F bit set. */
static int send_simple(struct conn *c, uint8_t op, uint32_t itt, uint32_t ttt,
		       bool advance, const uint8_t *data, size_t dlen)
{
	int i = tx_get(c);
	uint8_t *p, *bhs;

	if (i < 0)
		return -1;
	p = pdu_start(c, i);
	bhs = p + ISER_HDR;
	bhs[0] = op;
	bhs[1] = 0x80;
	put32(bhs + 16, itt);
	put32(bhs + 20, ttt);
	set_sn(c, bhs, advance);
	if (dlen) {
		memcpy(p + HDRS, data, dlen);
		put24(bhs + 5, dlen);
	}
	return tx_post(c, i, HDRS + ((dlen + 3) & ~3u), 0, false);
}

static int rdma_op(struct conn *c, bool write, uint32_t rstag, uint64_t rva,
		   uint64_t off, uint32_t len, int pend)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(disk + off),
		.length = len,
		.lkey = c->disk_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = write ? WRID(WR_RDMA_WRITE, 0) : WRID(WR_RDMA_READ, pend),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
		.send_flags = write ? 0 : IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = rva, .rkey = rstag },
	};
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(c->id->qp, &wr, &bad);

	if (ret)
		fprintf(stderr, "evil: post rdma: %s\n", strerror(ret));
	return ret ? -1 : 0;
}

static void put_text(uint8_t *d, size_t *len, const char *key, const char *val)
{
	*len += (size_t)sprintf((char *)d + *len, "%s=%s", key, val) + 1;
}

/* Login: answer each stage; the operational stage takes the initiator's keys. */
static void do_login(struct conn *c, uint8_t *bhs, uint8_t *data, uint32_t dlen)
{
	int i = tx_get(c);
	uint8_t *p, *r, *d;
	uint8_t csg = (bhs[1] >> 2) & 3, nsg = bhs[1] & 3;
	bool transit = bhs[1] & 0x80;
	size_t len = 0, off = 0;

	if (i < 0)
		return;
	p = pdu_start(c, i);
	r = p + ISER_HDR;
	d = p + HDRS;
	r[0] = 0x23;
	r[1] = (transit ? 0x80 : 0) | (csg << 2) | (transit ? nsg : 0);
	memcpy(r + 8, bhs + 8, 6);	/* ISID */
	put32(r + 16, be32(bhs + 16));
	c->exp_cmdsn = be32(bhs + 24);
	if (c->statsn == 0)
		c->statsn = 1;
	if (transit && nsg == 3)
		r[15] = 1;	/* TSIH */
	while (off < dlen) {
		char *kv = (char *)data + off;
		size_t n = strnlen(kv, dlen - off);
		char *eq = memchr(kv, '=', n);

		off += n + 1;
		if (!eq || n == 0)
			continue;
		*eq = 0;
		logv("login key %s=%s\n", kv, eq + 1);
		if (!strcmp(kv, "InitiatorName") || !strcmp(kv, "InitiatorAlias") ||
		    !strcmp(kv, "TargetName") || !strcmp(kv, "SessionType") ||
		    !strcmp(kv, "MaxRecvDataSegmentLength") ||
		    !strcmp(kv, "InitiatorRecvDataSegmentLength") ||
		    !strcmp(kv, "TargetRecvDataSegmentLength"))
			continue;
		if (!strcmp(kv, "AuthMethod"))
			put_text(d, &len, kv, "None");
		else if (!strcmp(kv, "ImmediateData"))
			put_text(d, &len, kv, "No");
		else if (!strcmp(kv, "InitialR2T"))
			put_text(d, &len, kv, "Yes");
		else
			put_text(d, &len, kv, eq + 1);
	}
	if (csg == 0)
		put_text(d, &len, "TargetPortalGroupTag", "1");
	if (csg == 1)
		put_text(d, &len, "TargetRecvDataSegmentLength", "8192");
	put24(r + 5, len);
	set_sn(c, r, true);
	if (armed(M_LOGIN_LONG)) {
		/* A login response far longer than any receive buffer. */
		fire();
		memset(d + len, 'x', 2 * MAX_DSL);
		tx_post(c, i, HDRS + len + 2 * MAX_DSL, 0, false);
		return;
	} else if (armed(M_LOGIN_DSL)) {
		/* The header claims more data than the send carries. */
		fire();
		put24(r + 5, len + 4000);
	} else if (armed(M_LOGIN_BAD)) {
		/* A non-login opcode during login. */
		fire();
		r[0] = 0x21;
	}
	if (transit && nsg == 3)
		c->ffp = true;
	tx_post(c, i, HDRS + ((len + 3) & ~3u), 0, false);
}

static int pend_new(struct conn *c)
{
	for (int i = 0; i < NPEND; i++)
		if (!c->pend[i].used) {
			memset(&c->pend[i], 0, sizeof(c->pend[i]));
			c->pend[i].used = true;
			return i;
		}
	return -1;
}

/* ping: the next NOP-In ping (ITT reserved, TTT valid, StatSN not
 * advanced); the initiator must answer each with a NOP-Out echoing it. */
static void ping_next(struct conn *c)
{
	send_simple(c, 0x20, 0xffffffff, PING_TTT + c->pings_sent, false, NULL, 0);
	c->pings_sent++;
}

/* A NOP-Out with the reserved ITT: the answer to a ping. */
static void ping_answered(struct conn *c, uint32_t ttt)
{
	if (!c->pings_sent)
		return;
	if (ttt != PING_TTT + c->pings_sent - 1) {
		printf("evil: ping answer with TTT 0x%08x, expected 0x%08x\n", ttt,
		       PING_TTT + c->pings_sent - 1);
		fflush(stdout);
		c->pings_sent = 0;
		return;
	}
	if (c->pings_sent < PINGS) {
		ping_next(c);
		return;
	}
	printf("evil: pings answered %d\n", c->pings_sent);
	fflush(stdout);
	c->pings_sent = 0;
}

/* The misbehaviours that replace the response to a READ. */
static void evil_read(struct conn *c, uint32_t itt, uint32_t rstag)
{
	enum mode m = mode;
	int i;
	uint8_t *p, *bhs;

	fire();
	switch (m) {
	case M_SHORT:
		i = tx_get(c);
		if (i < 0)
			return;
		p = pdu_start(c, i);
		p[ISER_HDR] = 0x21;
		tx_post(c, i, 20, 0, false);
		break;
	case M_DSL_LONG:
		i = tx_get(c);
		if (i < 0)
			return;
		p = pdu_start(c, i);
		bhs = p + ISER_HDR;
		bhs[0] = 0x21;
		bhs[1] = 0x80;
		put24(bhs + 5, 4000);
		put32(bhs + 16, itt);
		set_sn(c, bhs, true);
		tx_post(c, i, HDRS + 16, 0, false);
		break;
	case M_OVERRUN:
		i = tx_get(c);
		if (i < 0)
			return;
		p = pdu_start(c, i);
		bhs = p + ISER_HDR;
		bhs[0] = 0x21;
		bhs[1] = 0x80;
		put24(bhs + 5, 2 * MAX_DSL);
		put32(bhs + 16, itt);
		set_sn(c, bhs, true);
		memset(p + HDRS, 'o', 2 * MAX_DSL);
		tx_post(c, i, HDRS + 2 * MAX_DSL, 0, false);
		break;
	case M_UNKNOWN_ITT:
		send_rsp(c, 0x00ff7777, 0, 0, 0, 0, false, 0);
		break;
	case M_STALE_ITT:
		/* The real response, then the same one again. */
		send_rsp(c, itt, 0, 0, 0, 0, false, 0);
		send_rsp(c, itt, 0, 0, 0, 0, false, 0);
		break;
	case M_INV_BAD:
		c->inv_ok = true;
		send_rsp(c, itt, 0, 0, 0, 0, true, rstag ^ 0x5a);
		break;
	case M_BAD_VERSION:
	case M_BAD_FLAGS:
	case M_AHS:
	case M_BAD_OPCODE:
		i = tx_get(c);
		if (i < 0)
			return;
		p = pdu_start(c, i);
		bhs = p + ISER_HDR;
		bhs[0] = 0x21;
		bhs[1] = 0x80;
		put32(bhs + 16, itt);
		set_sn(c, bhs, true);
		if (m == M_BAD_VERSION)
			p[0] = 0x20;	/* iSER Hello Reply, not iSCSI control */
		else if (m == M_BAD_FLAGS)
			p[0] = 0x18;	/* a target advertising a write STag */
		else if (m == M_AHS)
			bhs[4] = 4;	/* an AHS that is not there */
		else
			bhs[0] = 0x1f;	/* an opcode no target sends */
		tx_post(c, i, HDRS, 0, false);
		break;
	case M_FLOOD_NOP:
		for (int n = 0; n < 3000 && !c->closing; n++)
			send_simple(c, 0x20, 0xffffffff, 0xffffffff, false, NULL, 0);
		/* Flooding is legal: the READ still gets its response. */
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		break;
	case M_PING:
		/* The READ's response, then pings, one answered at a time. */
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		c->pings_sent = 0;
		ping_next(c);
		break;
	case M_FLOOD_ASYNC: {
		/* AsyncEvent 255: vendor specific; iscsid logs it. */
		for (int n = 0; n < 1000 && !c->closing; n++) {
			i = tx_get(c);
			if (i < 0)
				return;
			p = pdu_start(c, i);
			bhs = p + ISER_HDR;
			bhs[0] = 0x32;
			bhs[1] = 0x80;
			put32(bhs + 16, 0xffffffff);
			put32(bhs + 20, 0xffffffff);
			set_sn(c, bhs, true);
			bhs[36] = 255;
			tx_post(c, i, HDRS, 0, false);
		}
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		break;
	}
	default:
		break;
	}
}

/* A SCSI command: a tiny disk. Returns after the response is posted. */
static void do_scsi(struct conn *c, uint8_t *iser, uint8_t *bhs)
{
	uint32_t itt = be32(bhs + 16), edtl = be32(bhs + 20);
	uint8_t *cdb = bhs + 32;
	uint8_t flags = iser[0];
	uint32_t wstag = be32(iser + 4), rstag = be32(iser + 16);
	uint64_t wva = be64(iser + 8), rva = be64(iser + 20);
	uint64_t lba = 0;
	uint32_t blocks = 0;
	uint8_t buf[64];
	bool immediate = bhs[0] & 0x40;

	if (!immediate)
		c->exp_cmdsn = be32(bhs + 24) + 1;
	if (c->silent)
		return;
	switch (cdb[0]) {
	case 0x28: case 0x2a:	/* READ(10), WRITE(10) */
		lba = be32(cdb + 2);
		blocks = (uint32_t)cdb[7] << 8 | cdb[8];
		break;
	case 0x88: case 0x8a:	/* READ(16), WRITE(16) */
		lba = be64(cdb + 2);
		blocks = be32(cdb + 10);
		break;
	}
	switch (cdb[0]) {
	case 0x00:	/* TEST UNIT READY */
	case 0x35:	/* SYNCHRONIZE CACHE */
	case 0x91:
		send_rsp(c, itt, 0, 0, 0, 0, false, 0);
		return;
	case 0x12: {	/* INQUIRY */
		uint32_t n;

		if (cdb[1] & 1) {
			send_rsp(c, itt, 0x02, 0x05, 0x24, 0, false, 0);
			return;
		}
		memset(buf, 0, sizeof(buf));
		buf[2] = 6;
		buf[3] = 2;
		buf[4] = 31;
		memcpy(buf + 8, "RISER   ", 8);
		memcpy(buf + 16, "iser-evil       ", 16);
		memcpy(buf + 32, "0001", 4);
		n = edtl < 36 ? edtl : 36;
		memcpy(disk + disk_size, buf, n);
		if (!(flags & 0x04) || rdma_op(c, true, rstag, rva, disk_size, n, 0))
			return;
		send_rsp(c, itt, 0, 0, 0, edtl - n, false, 0);
		return;
	}
	case 0xa0: {	/* REPORT LUNS: LUN 0 */
		uint32_t n = edtl < 16 ? edtl : 16;

		memset(buf, 0, 16);
		buf[3] = 8;
		memcpy(disk + disk_size, buf, n);
		if (!(flags & 0x04) || rdma_op(c, true, rstag, rva, disk_size, n, 0))
			return;
		send_rsp(c, itt, 0, 0, 0, edtl - n, false, 0);
		return;
	}
	case 0x25: case 0x9e: {	/* READ CAPACITY (10), (16) */
		uint64_t last = disk_size / BLOCK - 1;
		uint32_t n;

		if (cdb[0] == 0x9e && (cdb[1] & 0x1f) != 0x10)
			break;
		memset(buf, 0, 32);
		if (cdb[0] == 0x25) {
			put32(buf, (uint32_t)last);
			put32(buf + 4, BLOCK);
			n = 8;
		} else {
			put32(buf, (uint32_t)(last >> 32));
			put32(buf + 4, (uint32_t)last);
			put32(buf + 8, BLOCK);
			n = 32;
		}
		if (n > edtl)
			n = edtl;
		memcpy(disk + disk_size, buf, n);
		if (!(flags & 0x04) || rdma_op(c, true, rstag, rva, disk_size, n, 0))
			return;
		send_rsp(c, itt, 0, 0, 0, edtl - n, false, 0);
		return;
	}
	case 0x28: case 0x88: {
		uint64_t off = lba * BLOCK;
		uint32_t len = blocks * BLOCK;

		if (off + len > disk_size || len != edtl || !(flags & 0x04)) {
			send_rsp(c, itt, 0x02, 0x05, 0x21, 0, false, 0);
			return;
		}
		c->reads++;
		if (fire_lba >= 0 && (long long)lba == fire_lba - 8)
			primed = true;
		if (mode != M_NONE && !login_mode(mode) &&
		    (fire_lba >= 0 ? (primed && (long long)lba == fire_lba) || c->has_held :
				     c->reads >= fire_at)) {
			primed = false;
			if (mode == M_SILENT || mode == M_SILENT_ALL) {
				c->silent = true;
				c->silent_all = mode == M_SILENT_ALL;
				fire();
				return;
			}
			if (mode == M_DROP) {
				fire();
				rdma_disconnect(c->id);
				return;
			}
			if (mode == M_INV_OTHER) {
				/*
				 * Hold this READ; answer it when the next one
				 * comes, invalidating the next one's STag.
				 */
				if (!c->has_held) {
					c->has_held = true;
					c->held_itt = itt;
					c->held_rstag = rstag;
					c->held_rva = rva;
					c->held_len = len;
					c->held_lba = (uint32_t)lba;
					c->reads--;
					return;
				}
				c->has_held = false;
				if (!rdma_op(c, true, c->held_rstag, c->held_rva,
					     (uint64_t)c->held_lba * BLOCK, c->held_len, 0)) {
					fire();
					c->inv_ok = true;
					send_rsp(c, c->held_itt, 0, 0, 0, 0, true, rstag);
				}
				/* and this one normally */
			} else {
				if (rdma_op(c, true, rstag, rva, off, len, 0))
					return;
				evil_read(c, itt, rstag);
				return;
			}
		}
		if (len && rdma_op(c, true, rstag, rva, off, len, 0))
			return;
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		return;
	}
	case 0x2a: case 0x8a: {
		uint64_t off = lba * BLOCK;
		uint32_t len = blocks * BLOCK;
		int pi;

		if (off + len > disk_size || len != edtl || !(flags & 0x08)) {
			send_rsp(c, itt, 0x02, 0x05, 0x21, 0, false, 0);
			return;
		}
		pi = pend_new(c);
		if (pi < 0) {
			send_rsp(c, itt, 0x08, 0, 0, 0, false, 0);	/* BUSY */
			return;
		}
		c->pend[pi].itt = itt;
		c->pend[pi].stag = wstag;
		c->pend[pi].write = true;
		c->pend[pi].len = len;
		if (rdma_op(c, false, wstag, wva, off, len, pi))
			c->pend[pi].used = false;
		return;
	}
	default:
		break;
	}
	/* INVALID COMMAND OPERATION CODE */
	send_rsp(c, itt, 0x02, 0x05, 0x20, 0, false, 0);
}

static void do_pdu(struct conn *c, uint8_t *p, uint32_t len)
{
	uint8_t *bhs = p + ISER_HDR;
	uint8_t op = bhs[0] & 0x3f;
	uint32_t dlen;

	if (len < HDRS) {
		fprintf(stderr, "evil: short PDU from the initiator (%u bytes)\n", len);
		return;
	}
	dlen = (uint32_t)bhs[5] << 16 | (uint32_t)bhs[6] << 8 | bhs[7];
	if (dlen > len - HDRS)
		dlen = len - HDRS;
	logv("pdu op 0x%02x itt 0x%08x dlen %u\n", op, be32(bhs + 16), dlen);
	switch (op) {
	case 0x03:	/* Login */
		do_login(c, bhs, p + HDRS, dlen);
		break;
	case 0x01:
		do_scsi(c, p, bhs);
		break;
	case 0x00:	/* NOP-Out */
		if (!(bhs[0] & 0x40))
			c->exp_cmdsn = be32(bhs + 24) + 1;
		if (be32(bhs + 16) != 0xffffffff)
			send_simple(c, 0x20, be32(bhs + 16), 0xffffffff, true, p + HDRS, dlen);
		else
			ping_answered(c, be32(bhs + 20));
		break;
	case 0x02: {	/* Task management: done (a held command is dropped) */
		uint8_t fn = bhs[1] & 0x7f;
		uint8_t *r;
		int i;

		/*
		 * silent-all: an ABORT TASK is refused (Function Rejected), so
		 * the initiator escalates to a LU reset, which is never answered.
		 */
		printf("evil: TMF function %u%s\n", fn,
		       !c->silent_all ? "" : fn == 1 ? " rejected" : " ignored");
		fflush(stdout);
		if (c->silent_all && fn != 1)
			break;
		if (!c->silent_all)
			c->silent = false;
		i = tx_get(c);
		if (i < 0)
			break;
		r = pdu_start(c, i) + ISER_HDR;
		r[0] = 0x22;
		r[1] = 0x80;
		r[2] = c->silent_all ? 5 : 0;
		put32(r + 16, be32(bhs + 16));
		set_sn(c, r, true);
		tx_post(c, i, HDRS, 0, false);
		break;
	}
	case 0x04:	/* Text: nothing to say */
		if (!(bhs[0] & 0x40))
			c->exp_cmdsn = be32(bhs + 24) + 1;
		send_simple(c, 0x24, be32(bhs + 16), 0xffffffff, true, NULL, 0);
		break;
	case 0x06:	/* Logout */
		if (!(bhs[0] & 0x40))
			c->exp_cmdsn = be32(bhs + 24) + 1;
		send_simple(c, 0x26, be32(bhs + 16), 0, true, NULL, 0);
		break;
	default:
		fprintf(stderr, "evil: opcode 0x%02x ignored\n", op);
		break;
	}
}

static void handle_wc(struct conn *c, struct ibv_wc *wc)
{
	uint32_t kind = wc->wr_id >> 32, idx = (uint32_t)wc->wr_id;

	if (kind == WR_TX) {
		c->tx_busy[idx] = false;
		c->tx_inflight--;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			fprintf(stderr, "evil: completion %u:%u failed: %s\n", kind, idx,
				ibv_wc_status_str(wc->status));
		c->closing = true;
		return;
	}
	switch (kind) {
	case WR_RX:
		do_pdu(c, c->rx + (size_t)idx * RX_SIZE, wc->byte_len);
		if (!c->closing && post_rx(c, (int)idx))
			c->closing = true;
		break;
	case WR_RDMA_READ: {
		struct pend *pe = &c->pend[idx];

		/* The data is in the disk now: only then report it written. */
		pe->used = false;
		send_rsp(c, pe->itt, 0, 0, 0, 0, true, pe->stag);
		break;
	}
	default:
		break;
	}
}

static void conn_free(struct conn *c)
{
	if (!c)
		return;
	if (c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->ch)
		ibv_destroy_comp_channel(c->ch);
	if (c->rx_mr)
		ibv_dereg_mr(c->rx_mr);
	if (c->tx_mr)
		ibv_dereg_mr(c->tx_mr);
	if (c->disk_mr)
		ibv_dereg_mr(c->disk_mr);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	free(c->rx);
	free(c->tx);
	rdma_destroy_id(c->id);
	free(c);
}

static struct conn *conn_new(struct rdma_cm_event *ev)
{
	struct conn *c = calloc(1, sizeof(*c));
	struct rdma_cm_id *id = ev->id;
	struct ibv_qp_init_attr qa = { 0 };
	struct rdma_conn_param cp = { 0 };
	uint8_t hello[4] = { 0x80, 0, 0, 0 };	/* ZBVA not supported */
	const struct rdma_conn_param *req = &ev->param.conn;
	struct ibv_device_attr da;

	if (!c)
		return NULL;
	c->id = id;
	c->pd = ibv_alloc_pd(id->verbs);
	c->ch = ibv_create_comp_channel(id->verbs);
	if (!c->pd || !c->ch)
		goto fail;
	c->cq = ibv_create_cq(id->verbs, NRX + 2 * NTX + NPEND, NULL, c->ch, 0);
	c->rx = calloc(NRX, RX_SIZE);
	c->tx = calloc(NTX, TX_SIZE);
	if (!c->cq || !c->rx || !c->tx)
		goto fail;
	c->rx_mr = ibv_reg_mr(c->pd, c->rx, (size_t)NRX * RX_SIZE, IBV_ACCESS_LOCAL_WRITE);
	c->tx_mr = ibv_reg_mr(c->pd, c->tx, (size_t)NTX * TX_SIZE, 0);
	c->disk_mr = ibv_reg_mr(c->pd, disk, disk_size + 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!c->rx_mr || !c->tx_mr || !c->disk_mr)
		goto fail;
	qa.send_cq = c->cq;
	qa.recv_cq = c->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 2 * NTX + NPEND;
	qa.cap.max_recv_wr = NRX;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, c->pd, &qa))
		goto fail;
	fcntl(c->ch->fd, F_SETFL, fcntl(c->ch->fd, F_GETFL) | O_NONBLOCK);
	for (int i = 0; i < NRX; i++)
		if (post_rx(c, i))
			goto fail;
	if (req->private_data_len >= 4) {
		uint8_t f = ((const uint8_t *)req->private_data)[0];

		logv("initiator CM header: %02x\n", f);
		c->inv_ok = !(f & 0x40);
	}
	if (ibv_query_device(id->verbs, &da))
		goto fail;
	cp.private_data = hello;
	cp.private_data_len = sizeof(hello);
	cp.responder_resources = req->initiator_depth;
	cp.initiator_depth = req->responder_resources < da.max_qp_init_rd_atom ?
			     req->responder_resources : da.max_qp_init_rd_atom;
	cp.rnr_retry_count = 6;
	if (rdma_accept(id, &cp))
		goto fail;
	return c;
fail:
	fprintf(stderr, "evil: cannot set up a connection: %s\n", strerror(errno));
	rdma_reject(id, NULL, 0);
	conn_free(c);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: iser-evil -a IP [-p PORT] [-m MODE[,MODE...]] [-k N | -l LBA] [-s MB] [-v]\nmodes:");
	for (size_t i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
		fprintf(stderr, " %s", mode_names[i]);
	fprintf(stderr, "\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(3260) };
	struct rdma_cm_id *listen_id;
	const char *addr = NULL;
	int opt;

	while ((opt = getopt(argc, argv, "a:p:m:k:l:s:v")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 'p': sin.sin_port = htons((uint16_t)atoi(optarg)); break;
		case 'k': fire_at = atoi(optarg); break;
		case 'l': fire_lba = atoll(optarg); break;
		case 's': disk_size = (size_t)atoi(optarg) << 20; break;
		case 'v': verbose = true; break;
		case 'm': {
			char *save = NULL;

			for (char *t = strtok_r(optarg, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
				size_t i;

				for (i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
					if (!strcmp(t, mode_names[i]))
						break;
				if (i == sizeof(mode_names) / sizeof(mode_names[0]) || nmodes == MAX_MODES)
					usage();
				modes[nmodes++] = (enum mode)i;
			}
			mode = nmodes ? modes[0] : M_NONE;
			break;
		}
		default: usage();
		}
	}
	if (!addr || inet_pton(AF_INET, addr, &sin.sin_addr) != 1 || disk_size < (1u << 20))
		usage();
	signal(SIGPIPE, SIG_IGN);
	/* The disk, and a page of scratch after it for INQUIRY and friends. */
	disk = calloc(1, disk_size + 4096);
	ec = rdma_create_event_channel();
	if (!disk || !ec || rdma_create_id(ec, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&sin) || rdma_listen(listen_id, 4)) {
		fprintf(stderr, "evil: cannot listen on %s:%u: %s\n", addr,
			ntohs(sin.sin_port), strerror(errno));
		return 1;
	}
	fcntl(ec->fd, F_SETFL, fcntl(ec->fd, F_GETFL) | O_NONBLOCK);
	printf("evil: listening on %s:%u, first mode %s of %d\n", addr, ntohs(sin.sin_port),
	       mode_names[mode], nmodes);
	fflush(stdout);
	for (;;) {
		struct pollfd fds[2] = { { .fd = ec->fd, .events = POLLIN } };
		int nfds = 1;

		if (cur) {
			fds[1].fd = cur->ch->fd;
			fds[1].events = POLLIN;
			nfds = 2;
			if (ibv_req_notify_cq(cur->cq, 0))
				cur->closing = true;
			if (poll_cq(cur, false))
				cur->closing = true;
		}
		if (cur && cur->closing && !cur->disconnecting) {
			cur->disconnecting = true;
			rdma_disconnect(cur->id);
		}
		if (poll(fds, nfds, 1000) < 0 && errno != EINTR)
			return 1;
		if (cur && (fds[1].revents & POLLIN)) {
			struct ibv_cq *cq;
			void *ctx;

			if (!ibv_get_cq_event(cur->ch, &cq, &ctx))
				ibv_ack_cq_events(cq, 1);
		}
		cm_poll();
		if (cur && cur->dead) {
			conn_free(cur);
			cur = NULL;
		}
	}
}
