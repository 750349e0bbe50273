// SPDX-License-Identifier: GPL-2.0
/*
 * iser-evil: a small iSER target in userspace (libibverbs + librdmacm) that
 * logs an initiator in, serves one LUN from memory, and misbehaves on
 * purpose, once, in the way its mode names. It is riser's hostile target:
 * tests/guest/hostile.sh runs it against riser and checks that each bad
 * PDU ends in a logged connection failure and a recovery, never an oops, a
 * hang or a write reported done that was not.
 *
 *   iser-evil -a IP [-p PORT] [-m MODE[,MODE...]] [-k N | -l LBA] [-s SIZE_MB]
 *             [-u MRDSL] [-r NRX] [-v]
 *   iser-evil -P LBA:BLOCKS     prints the stamp pattern of those blocks
 *
 * It accepts one connection at a time, for ever (iscsid reconnects after a
 * failure). Each mode of the list fires once, in order, on its trigger: a
 * login request (login modes), or in the full-feature phase the N-th READ
 * (-k, default 1) or, with -l, the READ of block LBA that follows a READ
 * of block LBA - 8 (the initiator's retries of the READ that fired do not
 * fire again; inv-other holds that READ until the next one comes); for
 * late-read and early-status (-l only) the WRITE at block LBA that follows
 * such a READ; for logout-ping the first NOP-Out ping (a real ITT) after
 * that READ. With every mode shown the target behaves. Each firing prints
 * "evil: fired MODE" on stdout, which the test waits for.
 *
 * late-write, late-read and late-abort use a command's STag LATE_MS (500 ms)
 * after the command ended (answered by plain SEND, or aborted): an RDMA WRITE with a
 * READ's rkey, an RDMA READ with a WRITE's; the target prints whether the
 * initiator refused it ("evil: late write refused (status N: ...)") or let
 * it through ("evil: late write completed"), which no initiator may.
 * tmf-spoof, tmf-dup and itt-junk end the trigger READ with an answer that
 * is not its own, and try its rkey the same way LATE_MS after it. tmf-spoof
 * and tmf-dup leave the READ unanswered until its ABORT TASK, as late-abort
 * does; tmf-spoof holds the initiator's NOP-Out pings meanwhile and answers
 * the ABORT TASK with the last held ping's ITT (libiscsi takes a TMF
 * Response for any live management task), tmf-dup answers it twice.
 * itt-junk answers the READ (data, then status by plain SEND) with its ITT
 * and junk in the bits libiscsi ignores (ITT_JUNK).
 *
 * Negotiation: ImmediateData=No and InitialR2T=Yes, so every WRITE's data is
 * pulled with RDMA READs from the initiator's write STag; READ data is
 * pushed with RDMA WRITEs to its read STag. Writes land in the memory disk
 * only when the RDMA READ completed, and the good status goes out after.
 * With -u MRDSL: InitialR2T=No, ImmediateData=Yes, first and largest burst
 * 256 KiB, and the target declares MaxRecvDataSegmentLength=MRDSL, so a
 * WRITE's first burst comes as immediate data and unsolicited Data-Outs of
 * MRDSL bytes, the rest by RDMA READ. early-status answers a WRITE with
 * CHECK CONDITION when its command arrives and checks every Data-Out that
 * still comes for it against the stamp pattern (-P) that the test wrote:
 * "evil: foreign data in Data-Out ..." would be other memory of the host.
 *
 * Modes of their own phases: cm-rsvd, cm-short and cm-long spoil the iSER
 * CM header in the accept of the next connection (cm_garbage); cm-noinv
 * says in it that the target will not send with invalidate (the I bit),
 * answers READs by plain SEND as it said, but the trigger READ (block LBA
 * of -l, no priming) by SEND_WITH_INV of its STag. With -u,
 * burst-max and burst-min fire at the next login's operational stage: from
 * then on FirstBurstLength and MaxBurstLength are answered with at most
 * 2^24 - 1 or 512 ("evil: login: KEY offered N, answered M"). inv-global
 * answers the trigger READ by SEND_WITH_INV of its own STag even when the
 * initiator's CM header refused Send with Invalidate, and says whether
 * that STag is the priming READ's (always_register=0: the global rkey).
 * -r NRX: receive buffers per connection (a first burst of 2^24 - 1 bytes
 * comes as thousands of Data-Outs at once).
 *
 * Modes that answer the trigger READ and then add a PDU: logout-unprompted
 * (a Logout Response with the READ's ITT), async-logout, async-dropconn,
 * async-dropall, async-negotiate (Async Message 1 to 4; 2 and 3 announce
 * Time2Wait 2 s or 20 s and hang up 200 ms later), nop-data (a ping, TTT valid,
 * with 200 bytes), big-nop (a NOP-In with 8 KiB), ff-login (a final Login
 * Response). big-sense and big-rsp answer it with CHECK CONDITION (UNIT
 * ATTENTION, 252 bytes of sense) in a 254-byte or 8 KiB segment and say
 * when the READ comes again. inv-nonresp invalidates the READ's rkey with
 * a NOP-In; inv-nomr holds the READ until a TEST UNIT READY comes and
 * invalidates it with that response. stale-held holds the READ, hangs up,
 * and sends its response on a later connection when a command comes for
 * the same libiscsi task slot with another session age.
 *
 * early-rsp, early-rsp-reconnect, stale-key and posting-rsp answer a
 * command before it arrives: the target learns the order in which libiscsi hands out its task
 * slots (a FIFO) from the ITTs it sees and sends GOOD status for the ITT it
 * predicts next, 1 s after the trigger READ's answer (early-rsp; stale-key
 * with SEND_WITH_INV of the STag that slot's last command gave), or 1 s
 * after the next login once it hung up on the trigger READ
 * (early-rsp-reconnect), then says whether the command came with that ITT
 * ("evil: early-rsp: command itt ... came after its answer: predicted
 * right") and serves it as any other; posting-rsp answers as early-rsp and
 * then, instead of serving the READ, writes to its STag LATE_MS after it
 * came (a late write: "evil: late write refused ..." is the initiator's
 * right answer). SIGUSR2 arms the mode that fired last again, its state
 * cleared ("evil: re-armed MODE"): the test plays an early answer again
 * when the target's guess missed.
 *
 * silent-redo is silent-all (every TMF refused, so the initiator ends in a
 * session reset) whose trigger READ, sent again on the next connection, is
 * held REDO_HOLD_S seconds before it is served: "evil: silent-redo:
 * retried READ itt ... held" when it comes, "... served after N ms" when
 * its data and response go. A command the initiator completed meanwhile
 * (a stale task's completion landing on the retried command) reads
 * whatever its buffer held.
 *
 * Layout of this file. A well-behaved core: the CM and verbs (one
 * connection at a time, its buffers, the send and RDMA helpers), the login,
 * and the full-feature phase serving a memory disk. Then the
 * misbehaviours: one table, modes_table[], names each mode with the phase
 * it spoils (where it acts), its trigger (what fires it) and its hooks,
 * which the core calls at that trigger: at the CM accept (TR_ACCEPT), a
 * login (TR_LOGIN, TR_LOGIN_OP), the trigger READ (TR_READ: .read takes
 * the READ over, or .reply replaces its answer after its data went), the
 * trigger WRITE (TR_WRITE), the NOP-Out ping after the trigger READ
 * (TR_READ_PING). What a mode leaves behind once fired (a held command, a
 * timer, a watch for a retry) is its own state, a struct beside its hooks,
 * which its aftermath hooks (struct aftermath, in the order of afters[])
 * act on at the core's later points: every SCSI command, READ, WRITE,
 * Data-Out, NOP-Out, TMF, Logout, timer, connection start and end.
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
#include <time.h>
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

enum wr_kind { WR_RX = 1, WR_TX, WR_RDMA_READ, WR_RDMA_WRITE, WR_LATE };
#define WRID(kind, idx) (((uint64_t)(kind) << 32) | (uint32_t)(idx))

/* ================================================================== */
/* The core: a well-behaved target                                     */
/* ================================================================== */

struct conn;
struct pend;

/*
 * A WRITE whose response waits for its data: unsolicited Data-Outs still to
 * come, or an RDMA READ of the rest in flight.
 */
struct pend {
	bool used;
	uint32_t itt;
	uint32_t stag;		/* the initiator's write STag (0: none) */
	uint64_t va;		/* its address for the solicited part */
	bool write;
	uint32_t len;		/* the whole transfer */
	uint64_t off;		/* where it goes on the disk */
	uint32_t unsol_left;	/* unsolicited bytes not yet received */
	uint32_t rdma_len;	/* bytes pulled with the RDMA READ */
	bool rdma_busy;		/* that RDMA READ is in flight */
	/* a mode's answer once the data is in (late-read), NULL: GOOD */
	void (*done)(struct conn *c, struct pend *pe);
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
	bool closing;
	bool dead;		/* the CM said the connection is gone: free it */
	bool disconnecting;
	int reads;
	bool inv_ok;		/* the initiator takes SEND_WITH_INV */
	uint32_t first_burst;	/* -u: the FirstBurstLength answered (0: none yet) */
	uint32_t prime_rstag;	/* the priming READ's STag (-l) */
};

/*
 * A SCSI command as the core parsed it, handed to the hooks. A WRITE hook
 * may set done: the answer once the WRITE's data is in.
 */
struct cmd {
	const uint8_t *bhs;
	uint32_t itt;		/* as on the wire (big-endian read) */
	uint32_t raw;		/* the ITT in the initiator's byte order */
	const uint8_t *cdb;
	uint8_t flags;		/* the iSER header's */
	uint32_t edtl;
	uint32_t rstag, wstag;
	uint64_t rva, wva;
	uint64_t lba;
	uint64_t off;		/* lba * BLOCK */
	uint32_t len;		/* the blocks' bytes */
	const uint8_t *data;	/* WRITE: the immediate data */
	uint32_t imm, unsol;	/* its bytes; the first burst's */
	void (*done)(struct conn *c, struct pend *pe);
};

/* The misbehaviours to show, in order, one per trigger; mode is the next. */
#define MAX_MODES 64
struct misbehaviour;
static const struct misbehaviour *modes[MAX_MODES];
static int nmodes, next_mode;
static const struct misbehaviour *mode;	/* modes_table[0], "none", when all fired */
static int fire_at = 1;
static long long fire_lba = -1;
/*
 * With -l: a READ of block LBA - 8 arms the next mode, the READ of LBA fires
 * it. The initiator's retries of the READ that fired (on the connection
 * that comes after) must not fire the next mode.
 */
static bool primed;
/*
 * -u N: negotiate InitialR2T=No and ImmediateData=Yes, declare
 * MaxRecvDataSegmentLength=N, first and largest burst FIRST_BURST: a WRITE
 * comes as immediate data and unsolicited Data-Outs of N bytes. 0: off.
 */
static uint32_t unsol_mrdsl;
#define FIRST_BURST 262144u
/*
 * The largest FirstBurstLength and MaxBurstLength the target answers:
 * FIRST_BURST, or what a burst mode set (burst-max, burst-min). Each
 * connection keeps the FirstBurstLength its login settled on.
 */
static uint32_t burst_cap = FIRST_BURST;
/* Receive buffers a connection posts (-r; 128 by default). */
static int nrx = NRX;
/*
 * Scratch memory after the disk, in its MR: a page for INQUIRY and
 * friends, then room for what a late RDMA READ brings.
 */
#define SCRATCH_LATE 4096u
#define LATE_MAX (1u << 20)
#define SCRATCH (SCRATCH_LATE + LATE_MAX)
static bool verbose;
static uint8_t *disk;
static size_t disk_size = 64u << 20;
static struct conn *cur;
static struct rdma_event_channel *ec;
/* SIGUSR1: print the commands the target waits on (state_dump). */
static volatile sig_atomic_t dump_wanted;
/* SIGUSR2: arm the mode that fired last again (rearm). */
static volatile sig_atomic_t rearm_wanted;

static void logv(const char *fmt, ...)
{
	va_list ap;

	if (!verbose)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* A line in the kernel log, so that the test times it on the kernel's clock. */
static void kmsg(const char *line)
{
	FILE *k = fopen("/dev/kmsg", "w");

	if (!k)
		return;
	fprintf(k, "%s\n", line);
	fclose(k);
}

/* Seconds since boot (CLOCK_MONOTONIC), to compare with dmesg's stamps. */
static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void ts_after(struct timespec *t, long ms)
{
	clock_gettime(CLOCK_MONOTONIC, t);
	t->tv_sec += ms / 1000;
	t->tv_nsec += (ms % 1000) * 1000000L;
	if (t->tv_nsec >= 1000000000L) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000L;
	}
}

/* Milliseconds until t (0 when it is past). */
static long ms_until(const struct timespec *t)
{
	struct timespec now;
	long ms;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (t->tv_sec - now.tv_sec) * 1000 + (t->tv_nsec - now.tv_nsec) / 1000000;
	return ms < 0 ? 0 : ms;
}

/* For a timer hook: -1 when nothing is set (on false), else ms_until(due):
 * 0 when it is due. */
static long due_in(bool on, const struct timespec *due)
{
	return on ? ms_until(due) : -1;
}

/*
 * The stamp pattern (-P): each 512-byte block of the disk at block LBA is
 * "evil %010llu\n" (16 bytes, LBA in decimal) 32 times. hostile.sh writes
 * it for early-status, so that the target can tell the command's own bytes
 * from anything else in its Data-Outs.
 */
static uint8_t stamp_byte(uint64_t pos)
{
	char s[32];

	snprintf(s, sizeof(s), "evil %010llu\n", (unsigned long long)(pos / BLOCK % 10000000000ull));
	return (uint8_t)s[pos % 16];
}

/* The first byte of data (at disk offset pos) that is not the stamp, or -1. */
static long stamp_mismatch(const uint8_t *data, uint64_t pos, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		if (data[i] != stamp_byte(pos + i))
			return i;
	return -1;
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

static void cm_poll(void);
static void handle_wc(struct conn *c, struct ibv_wc *wc);

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

/*
 * A NOP-In with ITT 0xffffffff and TTT ttt carrying dlen bytes ('n'), by
 * SEND_WITH_INV of rkey inv when with_inv.
 */
static int send_nopin(struct conn *c, uint32_t ttt, uint32_t dlen, uint32_t inv, bool with_inv)
{
	int i = tx_get(c);
	uint8_t *p, *bhs;

	if (i < 0)
		return -1;
	p = pdu_start(c, i);
	bhs = p + ISER_HDR;
	bhs[0] = 0x20;
	bhs[1] = 0x80;
	put32(bhs + 16, 0xffffffff);
	put32(bhs + 20, ttt);
	set_sn(c, bhs, false);
	memset(p + HDRS, 'n', dlen);
	put24(bhs + 5, dlen);
	return tx_post(c, i, HDRS + ((dlen + 3) & ~3u), inv, with_inv);
}

/* An Async Message: AsyncEvent event, Parameter1..3. */
static int send_async(struct conn *c, uint8_t event, uint16_t p1, uint16_t p2, uint16_t p3)
{
	int i = tx_get(c);
	uint8_t *p, *bhs;

	if (i < 0)
		return -1;
	p = pdu_start(c, i);
	bhs = p + ISER_HDR;
	bhs[0] = 0x32;
	bhs[1] = 0x80;
	put32(bhs + 16, 0xffffffff);
	put32(bhs + 20, 0xffffffff);
	set_sn(c, bhs, true);
	bhs[36] = event;
	bhs[38] = p1 >> 8;
	bhs[39] = p1 & 0xff;
	bhs[40] = p2 >> 8;
	bhs[41] = p2 & 0xff;
	bhs[42] = p3 >> 8;
	bhs[43] = p3 & 0xff;
	return tx_post(c, i, HDRS, 0, false);
}

/* A TMF Response for itt: response 0 (function complete), 5 (rejected). */
static int send_tmf_rsp(struct conn *c, uint32_t itt, uint8_t response)
{
	int i = tx_get(c);
	uint8_t *r;

	if (i < 0)
		return -1;
	r = pdu_start(c, i) + ISER_HDR;
	r[0] = 0x22;
	r[1] = 0x80;
	r[2] = response;
	put32(r + 16, itt);
	set_sn(c, r, true);
	return tx_post(c, i, HDRS, 0, false);
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

/* A READ's data pushed to its read STag, from disk offset off. */
static int push_data(struct conn *c, const struct cmd *k, uint64_t off)
{
	return rdma_op(c, true, k->rstag, k->rva, off, k->len, 0);
}

/* The READ's own GOOD status, invalidating its STag. */
static void rsp_good(struct conn *c, const struct cmd *k)
{
	send_rsp(c, k->itt, 0, 0, 0, 0, k->rstag != 0, k->rstag);
}

/* The current mode fires: say so, and arm the next one. */
static void fire(void);

/* ================================================================== */
/* The misbehaviours                                                   */
/* ================================================================== */

/* Where a mode acts (what it spoils). */
enum phase {
	PH_NONE,
	PH_CM,		/* the CM accept (its iSER CM header) */
	PH_LOGIN,	/* the login phase's answers and negotiation */
	PH_SCSI,	/* the answer to a SCSI command */
	PH_RDMA,	/* RDMA with a STag after its command ended */
	PH_NOP,		/* NOP-In and NOP-Out */
	PH_ASYNC,	/* Async Messages, Logout Responses, hang-ups */
	PH_TMF,		/* task management */
	PH_CONN,	/* the connection: dropped, or a later one */
};

/* What fires a mode (see the file's head). */
enum trigger {
	TR_NONE,	/* never */
	TR_ACCEPT,	/* the next connection's accept: .accept */
	TR_LOGIN,	/* the next Login Response: .login, with it built */
	TR_LOGIN_OP,	/* the next operational login stage (-u): .login, first */
	TR_READ,	/* the trigger READ: .read, or .reply after its data */
	TR_WRITE,	/* the WRITE at the trigger block (-l): .write */
	TR_READ_PING,	/* the trigger READ arms (.read), the next ping fires (.ping) */
};

/* A Login Response built in send buffer i, for the login hooks. */
struct login_ans {
	int i;
	uint8_t *r, *d;		/* its BHS, its data segment */
	size_t len;		/* the data segment's length */
	size_t post;		/* the bytes to send (iSER header included) */
};

/* A TMF as the core answers it; the aftermath hooks may change the answer. */
struct tmf {
	uint8_t fn;
	uint32_t itt, ref_itt;	/* its own, the Referenced Task Tag */
	uint32_t rsp_itt;	/* the ITT its response carries */
	uint8_t response;	/* 0: function complete, 5: rejected */
	bool ignore;		/* no answer at all */
	bool twice;		/* answered again, with the next StatSN */
	int held;		/* an ABORT TASK of a command a mode held: its
				 * variant (.arg); -1: none */
	const char *note;	/* after "evil: TMF function N" */
};

/*
 * What a mode leaves behind once fired, and the core's later points where
 * that acts. A hook that returns true has dealt with the PDU: the core does
 * no more with it. Modes of one family share theirs.
 */
struct aftermath {
	/* what goes with a connection: zeroed when a new one starts */
	void *state;
	size_t state_size;
	void (*conn_end)(struct conn *c);	/* the connection is about to be freed */
	bool (*conn_request)(struct conn *c);	/* another asks in: drop this one? */
	bool (*command)(struct conn *c, const struct cmd *k);	/* any SCSI command */
	bool (*read)(struct conn *c, const struct cmd *k);	/* any READ, when valid */
	void (*replaced)(const struct cmd *k);	/* a READ's answer a .reply replaced */
	bool (*write)(struct conn *c, const struct cmd *k);	/* any WRITE, when valid */
	bool (*dataout)(struct conn *c, const uint8_t *bhs, const uint8_t *data, uint32_t dlen);
	bool (*ping)(struct conn *c, uint32_t itt);	/* a NOP-Out ping (real ITT) */
	void (*ffp_start)(struct conn *c);	/* the final Login Response went */
	/* a NOP-Out with the reserved ITT: the answer to a NOP-In ping */
	bool (*nop_answer)(struct conn *c, uint32_t ttt, const uint8_t *data, uint32_t dlen);
	void (*tmf)(struct conn *c, struct tmf *t);	/* before it is answered */
	void (*tmf_answered)(struct conn *c, const struct tmf *t);
	void (*logout)(void);		/* a Logout Request */
	long (*timer)(struct conn *c);	/* runs what is due; ms to the next, or -1 */
	void (*dump)(void);		/* SIGUSR1: a word on the state line */
};

#define CONN_STATE(x) .state = &(x), .state_size = sizeof(x)

struct misbehaviour {
	const char *name;
	enum phase phase;
	enum trigger trigger;
	void (*accept)(const struct misbehaviour *m, struct conn *c, struct rdma_conn_param *cp);
	void (*login)(const struct misbehaviour *m, struct conn *c, struct login_ans *a);
	/* takes the trigger READ over; false: serve it as well */
	bool (*read)(const struct misbehaviour *m, struct conn *c, const struct cmd *k);
	/* the trigger READ's data went, the mode fired: its answer */
	void (*reply)(const struct misbehaviour *m, struct conn *c, const struct cmd *k);
	/* the trigger WRITE; false: serve it as well (k->done: its answer) */
	bool (*write)(const struct misbehaviour *m, struct conn *c, struct cmd *k);
	/* TR_READ_PING: a NOP-Out ping; true: answered by the mode */
	bool (*ping)(const struct misbehaviour *m, struct conn *c, uint32_t itt);
	/* a READ was held: the next READ calls .read too, trigger or not */
	bool (*waiting)(void);
	int arg;		/* a variant, for hooks that several modes share */
	const struct aftermath *after[2];
};

/* ------------------------------------------------------------------ */
/* Late RDMA: a command's STag tried LATE_MS after its end (late-write,  */
/* late-read, late-abort, tmf-spoof, tmf-dup, itt-junk).                */

/*
 * How long after a command's end its old STag is tried: long enough that an
 * initiator starved of CPU (a guest under TCG on a loaded host took over
 * 50 ms to handle a response) has handled the end, so that a STag still
 * valid then is its bug and not its slowness; short enough that the task
 * slot's MR is not registered 256 times meanwhile (rkeys wrap at 256).
 */
#define LATE_MS 500

/* An RDMA access with a command's old STag, made LATE_MS after its end. */
static struct late_state {
	bool on;
	bool posted;		/* posted, its completion not seen yet */
	bool write;		/* RDMA WRITE (a READ's rkey) or RDMA READ */
	uint32_t rkey;
	uint64_t va;
	uint32_t len;
	uint64_t src;		/* late write: disk offset of the bytes sent */
	struct timespec due;
} late;

/*
 * LATE_MS from now, use a STag the initiator gave for a command that has
 * ended since (an RDMA WRITE of the bytes at disk offset src, or an RDMA
 * READ into scratch memory).
 */
static void late_arm(bool write, uint32_t rkey, uint64_t va, uint32_t len, uint64_t src)
{
	late = (struct late_state){
		.on = true, .write = write, .rkey = rkey, .va = va,
		.len = len < LATE_MAX ? len : LATE_MAX, .src = src,
	};
	ts_after(&late.due, LATE_MS);
	printf("evil: late %s armed: rkey 0x%08x va 0x%llx, %u bytes, in %d ms\n",
	       write ? "write" : "read", rkey, (unsigned long long)va, late.len, LATE_MS);
	fflush(stdout);
}

static void late_post(struct conn *c)
{
	struct late_state *l = &late;
	struct ibv_sge sge = {
		.addr = (uintptr_t)(disk + (l->write ? l->src : disk_size + SCRATCH_LATE)),
		.length = l->len,
		.lkey = c->disk_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = WRID(WR_LATE, l->write),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = l->write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = l->va, .rkey = l->rkey },
	};
	struct ibv_send_wr *bad;
	int ret;

	l->on = false;
	if (c->closing) {
		printf("evil: late %s not tried: the connection is closing\n",
		       l->write ? "write" : "read");
		fflush(stdout);
		return;
	}
	if (!l->write)
		memset(disk + disk_size + SCRATCH_LATE, 0, l->len);
	ret = ibv_post_send(c->id->qp, &wr, &bad);
	if (ret) {
		printf("evil: late %s not posted: %s\n", l->write ? "write" : "read", strerror(ret));
		fflush(stdout);
	} else {
		l->posted = true;
	}
}

/* The completion of a late access: did the initiator refuse it? */
static void late_done(struct conn *c, struct ibv_wc *wc, bool write)
{
	const char *what = write ? "write" : "read";

	late.posted = false;
	if (wc->status == IBV_WC_SUCCESS) {
		printf("evil: late %s completed", what);
		if (!write)
			printf(" (the bytes read are %s the command wrote)",
			       memcmp(disk + disk_size + SCRATCH_LATE, disk + late.src,
				      late.len) ? "not what" : "what");
		printf("\n");
	} else if (wc->status == IBV_WC_WR_FLUSH_ERR) {
		printf("evil: late %s not tried: the QP was in error already\n", what);
	} else {
		printf("evil: late %s refused (status %d: %s)\n", what, wc->status,
		       ibv_wc_status_str(wc->status));
	}
	fflush(stdout);
	if (wc->status != IBV_WC_SUCCESS)
		c->closing = true;	/* the QP is in error: drop the connection */
}

/*
 * A connection about to be freed: report what became of a late access.
 * Its completion may already be in the CQ when the disconnect is seen
 * (the initiator's QP refused the access and the initiator then closed
 * the connection): without this, the access was tried but never reported
 * (seen 2026-11-25 in late-abort: rxe logged the refusal, status 10, 70
 * ms before the disconnect). Only late completions are handled: the rest
 * belongs to a connection that is gone.
 */
static void late_drain(struct conn *c)
{
	struct ibv_wc wc[16];
	int n, waited = 0;

	/*
	 * A late access posted just before the connection closed completes
	 * (or is flushed) soon after: wait for its verdict, 2 s at most, so
	 * that every armed access ends in one line.
	 */
	do {
		while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0)
			for (int i = 0; i < n; i++)
				if ((uint32_t)(wc[i].wr_id >> 32) == WR_LATE)
					late_done(c, &wc[i], (uint32_t)wc[i].wr_id);
		if (!late.posted)
			break;
		usleep(10000);
	} while (++waited < 200);
	if (late.posted) {
		/*
		 * Posted, and neither acknowledged nor refused in 2 s: the
		 * initiator's QP, in error, drops it (an RC responder that
		 * took it would have acknowledged it at once); this QP only
		 * retries. Said as such, then flushed.
		 */
		late.posted = false;
		printf("evil: late %s not acknowledged in 2 s: the initiator's QP did not take it\n",
		       late.write ? "write" : "read");
		fflush(stdout);
	}
	if (late.on) {
		late.on = false;
		printf("evil: late %s not tried: the connection closed first\n",
		       late.write ? "write" : "read");
		fflush(stdout);
	}
}

static long late_timer(struct conn *c)
{
	long ms;

	ms = due_in(late.on, &late.due);
	if (ms)
		return ms;
	late_post(c);
	return -1;
}

static const struct aftermath late_after = {
	CONN_STATE(late),
	.conn_end = late_drain,
	.timer = late_timer,
};

/* late-write: the data, a plain SEND (no invalidation), then later the
 * same data again with the READ's rkey. */
static bool late_write_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	if (push_data(c, k, k->off))
		return true;
	fire();
	send_rsp(c, k->itt, 0, 0, 0, 0, false, 0);
	late_arm(true, k->rstag, k->rva, k->len, k->off);
	return true;
}

/* late-read: the WRITE answered by plain SEND, and its write STag
 * RDMA-READ again LATE_MS later. */
static void late_read_done(struct conn *c, struct pend *pe)
{
	send_rsp(c, pe->itt, 0, 0, 0, 0, false, 0);
	late_arm(false, pe->stag, pe->va, pe->rdma_len, pe->off + pe->len - pe->rdma_len);
}

static bool late_read_write(const struct misbehaviour *m, struct conn *c, struct cmd *k)
{
	(void)c;
	if (k->len > k->unsol) {
		fire();
		k->done = late_read_done;
	} else {
		printf("evil: %s: the trigger WRITE has no data to pull: not fired\n", m->name);
		fflush(stdout);
	}
	return false;
}

/*
 * itt-junk: bits ORed into the READ's ITT in the initiator's byte order
 * (as stale-held's raw). libiscsi builds an ITT as index | age << 28 (build_itt)
 * in host order and puts it in the header unconverted (no cpu_to_be32);
 * of what comes back it reads only the index (get_itt: ISCSI_ITT_MASK,
 * bits 0-12) and the age (ISCSI_AGE_SHIFT, bits 28-31). Bits 13-23 lie in
 * the part it ignores (13-27): libiscsi would take the response for the
 * READ's. ORed into the big-endian value be32() reads instead, they would
 * set bits 8-12 of the index on a little-endian host (another task).
 */
#define ITT_JUNK 0x00ffe000u

/* itt-junk: the data, then the status by plain SEND with ITT_JUNK in the
 * ITT, then later the same data again with the READ's rkey. */
static bool itt_junk_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	uint32_t raw = k->raw | ITT_JUNK;
	uint8_t w[4];

	(void)m;
	if (push_data(c, k, k->off))
		return true;
	fire();
	memcpy(w, &raw, sizeof(w));
	printf("evil: itt-junk: READ itt 0x%08x answered as 0x%08x\n", k->itt, be32(w));
	fflush(stdout);
	send_rsp(c, be32(w), 0, 0, 0, 0, false, 0);
	late_arm(true, k->rstag, k->rva, k->len, k->off);
	return true;
}

/* ------------------------------------------------------------------ */
/* Hang-ups announced beforehand (async-dropconn, async-dropall,        */
/* logout-ping): the connection closes at due.                          */

static struct hangup_state {
	bool on;
	struct timespec due;
} hangup;

static void hangup_in(long ms)
{
	hangup.on = true;
	ts_after(&hangup.due, ms);
}

static long hangup_timer(struct conn *c)
{
	long ms;

	ms = due_in(hangup.on, &hangup.due);
	if (ms)
		return ms;
	hangup.on = false;
	c->closing = true;
	printf("evil: disconnecting as announced at %.3f\n", now_s());
	fflush(stdout);
	return -1;
}

static const struct aftermath hangup_after = {
	CONN_STATE(hangup),
	.timer = hangup_timer,
};

/* ------------------------------------------------------------------ */
/* early-status: a WRITE answered before its Data-Outs came.           */

#define NEARLY 8
static struct early_state {
	struct {
		bool used;
		uint32_t itt;
		uint64_t off;	/* the disk offset the WRITE named */
	} e[NEARLY];
} early;

/*
 * CHECK CONDITION at once; its Data-Outs, still to come, are looked at
 * when they arrive.
 */
static bool early_write(const struct misbehaviour *m, struct conn *c, struct cmd *k)
{
	long bad = stamp_mismatch(k->data, k->off, k->imm);
	int e;

	(void)m;
	fire();
	send_rsp(c, k->itt, 0x02, 0x05, 0x21, 0, false, 0);
	for (e = 0; e < NEARLY && early.e[e].used; e++)
		;
	if (e == NEARLY)
		e = 0;
	early.e[e].used = true;
	early.e[e].itt = k->itt;
	early.e[e].off = k->off;
	printf("evil: early-status: WRITE itt 0x%08x answered, %u bytes, %u immediate, %u unsolicited\n",
	       k->itt, k->len, k->imm, k->unsol);
	if (bad >= 0)
		printf("evil: foreign data in the immediate data itt=0x%08x offset=%ld\n", k->itt, bad);
	fflush(stdout);
	return true;
}

/* A new command with that ITT: the old one is over. */
static bool early_command(struct conn *c, const struct cmd *k)
{
	(void)c;
	for (int e = 0; e < NEARLY; e++)
		if (early.e[e].used && early.e[e].itt == k->itt)
			early.e[e].used = false;
	return false;
}

/* A Data-Out for a WRITE already answered: its bytes must still be its own. */
static bool early_dataout(struct conn *c, const uint8_t *bhs, const uint8_t *data, uint32_t dlen)
{
	uint32_t itt = be32(bhs + 16), boff = be32(bhs + 40);

	(void)c;
	for (int i = 0; i < NEARLY; i++) {
		long bad;

		if (!early.e[i].used || early.e[i].itt != itt)
			continue;
		bad = stamp_mismatch(data, early.e[i].off + boff, dlen);
		printf("evil: Data-Out after status itt=0x%08x offset=%u len=%u%s\n", itt, boff,
		       dlen, bhs[1] & 0x80 ? " final" : "");
		if (bad >= 0) {
			printf("evil: foreign data in Data-Out itt=0x%08x offset=%u at byte %ld:",
			       itt, boff, bad);
			for (long b = bad; b < bad + 16 && b < (long)dlen; b++)
				printf(" %02x", data[b]);
			printf("\n");
		}
		fflush(stdout);
		return true;
	}
	return false;
}

static const struct aftermath early_after = {
	CONN_STATE(early),
	.command = early_command,
	.dataout = early_dataout,
};

/* ------------------------------------------------------------------ */
/* silent, silent-all, silent-redo: SCSI commands go unanswered (until  */
/* a TMF, unless all: then TMFs too; NOP-Outs are always answered).     */

enum { SILENT_SOME, SILENT_ALL, SILENT_REDO };

static struct silent_state {
	bool on;
	bool all;	/* ABORT TASK refused, any other TMF ignored */
} silent;

/*
 * silent-redo: the trigger READ went unanswered; its retry on a later
 * connection is held REDO_HOLD_S seconds.
 */
#define REDO_HOLD_S 5
static struct redo_state {
	bool armed;
	uint64_t lba;
	struct {	/* the retried READ, held on this connection */
		bool on;
		struct timespec due;
		double t0;
		uint32_t itt, rstag, len;
		uint64_t rva, off;
	} held;
} redo;

static bool silent_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)c;
	silent.on = true;
	silent.all = m->arg != SILENT_SOME;
	if (m->arg == SILENT_REDO) {
		redo.armed = true;
		redo.lba = k->lba;
	}
	fire();
	return true;
}

/*
 * A new connection while the one gone silent is still up: the initiator
 * gave up on it without a disconnect. A target reinstates the session: the
 * old connection goes, the new one is taken.
 */
static bool silent_conn_request(struct conn *c)
{
	(void)c;
	if (!silent.all)
		return false;
	printf("evil: connection request while the silent connection is up: dropping it at %.3f\n",
	       now_s());
	fflush(stdout);
	return true;
}

static bool silent_command(struct conn *c, const struct cmd *k)
{
	(void)c;
	(void)k;
	return silent.on;
}

/*
 * silent-all: an ABORT TASK is refused (Function Rejected), so the
 * initiator escalates to a LU reset, which is never answered. silent: a
 * TMF ends the silence.
 */
static void silent_tmf(struct conn *c, struct tmf *t)
{
	(void)c;
	if (!silent.all) {
		silent.on = false;
		return;
	}
	t->note = t->fn == 1 ? " rejected" : " ignored";
	t->ignore = t->fn != 1;
	t->response = 5;
}

static void silent_dump(void)
{
	if (silent.on)
		printf(", silent");
}

static const struct aftermath silent_after = {
	CONN_STATE(silent),
	.conn_request = silent_conn_request,
	.command = silent_command,
	.tmf = silent_tmf,
	.dump = silent_dump,
};

/* silent-redo: the retried trigger READ, held. */
static bool redo_read(struct conn *c, const struct cmd *k)
{
	(void)c;
	if (!redo.armed || silent.on || k->lba != redo.lba || redo.held.on)
		return false;
	redo.armed = false;
	redo.held.on = true;
	redo.held.itt = k->itt;
	redo.held.rstag = k->rstag;
	redo.held.rva = k->rva;
	redo.held.len = k->len;
	redo.held.off = k->off;
	redo.held.t0 = now_s();
	ts_after(&redo.held.due, REDO_HOLD_S * 1000L);
	printf("evil: silent-redo: retried READ itt 0x%08x held %d s\n", k->itt, REDO_HOLD_S);
	fflush(stdout);
	return true;
}

/* silent-redo: the held retry of the trigger READ, served when due. */
static long redo_timer(struct conn *c)
{
	long ms, held;

	ms = due_in(redo.held.on, &redo.held.due);
	if (ms)
		return ms;
	held = (long)((now_s() - redo.held.t0) * 1000);
	redo.held.on = false;
	if (rdma_op(c, true, redo.held.rstag, redo.held.rva, redo.held.off, redo.held.len, 0) ||
	    send_rsp(c, redo.held.itt, 0, 0, 0, 0, redo.held.rstag != 0, redo.held.rstag)) {
		printf("evil: silent-redo: retried READ itt 0x%08x: cannot serve it\n",
		       redo.held.itt);
	} else {
		printf("evil: silent-redo: retried READ itt 0x%08x served after %ld ms\n",
		       redo.held.itt, held);
	}
	fflush(stdout);
	return -1;
}

static const struct aftermath redo_after = {
	CONN_STATE(redo.held),
	.read = redo_read,
	.timer = redo_timer,
};

/* ------------------------------------------------------------------ */
/* stale-held: the trigger READ is held back and the connection         */
/* dropped; on a later connection, its response goes out when a SCSI    */
/* command comes whose ITT names the same libiscsi task slot (ITT &     */
/* 0x1fff) with another session age (bits 28-31). libiscsi's ITTs are   */
/* in the initiator's byte order, which is this host's (the target runs */
/* beside it).                                                          */

#define ITT_SLOT(raw) ((raw) & 0x1fffu)
#define ITT_AGE(raw) (((raw) >> 28) & 0xfu)

static struct stale_held_state {
	bool on;
	uint32_t itt;	/* as on the wire (big-endian read) */
	uint32_t raw;	/* in the initiator's byte order */
} stale;

/* No answer; hang up, and answer it on a later connection. */
static bool stale_held_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	stale.on = true;
	stale.itt = k->itt;
	stale.raw = k->raw;
	c->closing = true;
	printf("evil: stale-held: READ itt 0x%08x (slot 0x%x, age %u) held, hanging up\n",
	       k->itt, ITT_SLOT(stale.raw), ITT_AGE(stale.raw));
	fflush(stdout);
	return true;
}

/* The held READ's response, before this command's (held: still armed). */
static bool stale_held_command(struct conn *c, const struct cmd *k)
{
	if (!stale.on || ITT_SLOT(k->raw) != ITT_SLOT(stale.raw) ||
	    ITT_AGE(k->raw) == ITT_AGE(stale.raw))
		return false;
	stale.on = false;
	fire();
	printf("evil: stale-held: response for held itt 0x%08x sent at command itt 0x%08x (slot 0x%x, age %u, then %u)\n",
	       stale.itt, k->itt, ITT_SLOT(k->raw), ITT_AGE(stale.raw), ITT_AGE(k->raw));
	fflush(stdout);
	send_rsp(c, stale.itt, 0, 0, 0, 0, false, 0);
	return false;
}

static const struct aftermath stale_held_after = {
	.command = stale_held_command,
};

/* ------------------------------------------------------------------ */
/* early-rsp, early-rsp-reconnect: a GOOD SCSI Response for the command  */
/* the initiator will send next, sent EARLY_MS (1 s) after the command   */
/* before it, before the next can have arrived. libiscsi hands its task slots out from a FIFO (taken at */
/* the head, given back at the tail), so while commands go one at a time */
/* the slots come round in one order, which the target learns from the  */
/* ITTs it sees (slot_next); the age is the session's (bits 28-31),      */
/* one more after a reconnect. A target that guesses right, answering    */
/* while the initiator holds the command between libiscsi's allocation   */
/* and its post (riser's test build holds it: fault_hold_command),       */
/* would end the command before it was sent: the READ reported done      */
/* without its data, and the data RDMA-written later into memory the     */
/* command no longer owns. early-rsp answers mid-session, on the trigger */
/* READ's heels; early-rsp-reconnect hangs up on the trigger READ and    */
/* answers its retry, EARLY_MS after the next login.                     */

#define EARLY_MS 1000
#define NSLOTS 8192

/* The slot seen after each slot, last time round (-1: none yet). */
static int16_t slot_next[NSLOTS];
static int last_slot = -1;

static struct early_rsp_state {
	bool armed;		/* answer when the next connection enters full feature */
	bool on;		/* an answer is due at due */
	bool sent;		/* answered: the command is awaited */
	struct timespec due;
	uint32_t raw;		/* the predicted ITT, initiator's order */
	uint32_t itt;		/* the same on the wire */
	uint32_t inv;		/* stale-key: the rkey the answer invalidates (0: none) */
	bool late_write;	/* posting-rsp: the answered READ's STag written late */
} early_rsp;

/*
 * stale-key: the STag each task slot's last command gave on this
 * connection (the initiator's MR of that slot, with the key it had then).
 */
static struct slot_keys_state {
	uint32_t stag[NSLOTS];
} slot_keys;

/* A task slot in use: the successor of the one before. */
static void slot_seen(uint32_t raw)
{
	int s = (int)ITT_SLOT(raw);

	if (last_slot >= 0)
		slot_next[last_slot] = (int16_t)s;
	last_slot = s;
}

/* The ITT the task slot after raw's will carry, at age. */
static void early_predict(uint32_t raw, unsigned int age)
{
	int s = (int)ITT_SLOT(raw);
	int n = slot_next[s] >= 0 ? slot_next[s] : (s + 1) % NSLOTS;
	uint8_t w[4];

	early_rsp.raw = (raw & ~0xf0001fffu) | (uint32_t)n | (age & 0xfu) << 28;
	memcpy(w, &early_rsp.raw, sizeof(w));
	early_rsp.itt = be32(w);
	printf("evil: %s: after slot 0x%x the next command will be itt 0x%08x (slot 0x%x, age %u)%s\n",
	       mode->name, s, early_rsp.itt, n, age & 0xfu,
	       slot_next[s] >= 0 ? "" : " (guessed: slot not seen round yet)");
	fflush(stdout);
}

static void early_due(void)
{
	early_rsp.on = true;
	ts_after(&early_rsp.due, EARLY_MS);
}

/* early-rsp: the trigger READ served, then the next command answered. */
static bool early_rsp_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	if (push_data(c, k, k->off))
		return true;
	rsp_good(c, k);
	early_predict(k->raw, ITT_AGE(k->raw));
	early_due();
	fire();
	return true;
}

/*
 * posting-rsp: as early-rsp, against an initiator that holds the command
 * after its slot word, before its post (riser's fault_hold_posting): the
 * answer arrives while the command's registration is not yet on the send
 * queue. When the answered READ comes, it is not served: its read STag is
 * written LATE_MS later (a late write), which the initiator must refuse:
 * the command ended with the answer, and its key with it.
 */
static bool posting_rsp_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	early_rsp.late_write = true;
	return early_rsp_read(m, c, k);
}

/* early-rsp-reconnect: the trigger READ, unanswered; hang up. */
static bool early_rsp_hangup_read(const struct misbehaviour *m, struct conn *c,
				  const struct cmd *k)
{
	(void)m;
	early_predict(k->raw, ITT_AGE(k->raw) + 1);
	early_rsp.armed = true;
	c->closing = true;
	printf("evil: early-rsp-reconnect: READ itt 0x%08x held, hanging up\n", k->itt);
	fflush(stdout);
	fire();
	return true;
}

static void early_rsp_ffp(struct conn *c)
{
	(void)c;
	if (!early_rsp.armed)
		return;
	early_rsp.armed = false;
	early_due();
}

/*
 * stale-key: as early-rsp, on a slot whose last command gave a key on this
 * connection, and the answer invalidates that key (SEND_WITH_INV): the
 * key the slot's MR held before, not the one its next command will give.
 */
static bool stale_key_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	if (push_data(c, k, k->off))
		return true;
	rsp_good(c, k);
	early_predict(k->raw, ITT_AGE(k->raw));
	early_rsp.inv = slot_keys.stag[ITT_SLOT(early_rsp.raw)];
	printf("evil: stale-key: the answer invalidates 0x%08x, the slot's last STag%s\n",
	       early_rsp.inv, early_rsp.inv ? "" : " (none seen: plain SEND)");
	fflush(stdout);
	early_due();
	fire();
	return true;
}

/*
 * The answer when due. Until then the main loop spins (0 ms): the
 * initiator holds the command busy, with preemption off, on one of its
 * CPUs, and a target asleep may be woken on that CPU and stay there until
 * the hold ends (seen: 5 s late).
 */
static long early_rsp_timer(struct conn *c)
{
	long ms = due_in(early_rsp.on, &early_rsp.due);
	uint32_t inv = early_rsp.inv;

	if (ms)
		return ms < 0 ? -1 : 0;
	early_rsp.on = false;
	early_rsp.sent = true;
	early_rsp.inv = 0;
	printf("evil: early-rsp: GOOD status sent for itt 0x%08x before its command came, at %.3f%s\n",
	       early_rsp.itt, now_s(), inv ? ", invalidating the slot's last STag" : "");
	fflush(stdout);
	send_rsp(c, early_rsp.itt, 0, 0, 0, 0, inv != 0, inv);
	return -1;
}

/* Every SCSI command: the order of the slots; the answered one arriving. */
static bool early_rsp_command(struct conn *c, const struct cmd *k)
{
	(void)c;
	slot_seen(k->raw);
	slot_keys.stag[ITT_SLOT(k->raw)] = k->rstag ? k->rstag : k->wstag;
	if (!early_rsp.sent)
		return false;
	early_rsp.sent = false;
	if (k->itt == early_rsp.itt)
		printf("evil: early-rsp: command itt 0x%08x came after its answer: predicted right\n",
		       k->itt);
	else
		printf("evil: early-rsp: command itt 0x%08x came, not the predicted 0x%08x\n",
		       k->itt, early_rsp.itt);
	fflush(stdout);
	if (early_rsp.late_write && k->itt == early_rsp.itt && k->rstag) {
		early_rsp.late_write = false;
		late_arm(true, k->rstag, k->rva, k->len, k->off);
		return true;
	}
	/* Served as any other: its data goes to the STag it brings. */
	return false;
}

static bool early_rsp_ping(struct conn *c, uint32_t itt)
{
	uint8_t w[4];
	uint32_t raw;

	(void)c;
	put32(w, itt);
	memcpy(&raw, w, sizeof(raw));
	slot_seen(raw);
	return false;
}

static const struct aftermath early_rsp_after = {
	CONN_STATE(slot_keys),
	.command = early_rsp_command,
	.ping = early_rsp_ping,
	.ffp_start = early_rsp_ffp,
	.timer = early_rsp_timer,
};

/* ------------------------------------------------------------------ */
/* inv-other, inv-nomr: a READ held back.                               */

struct held_read {
	uint32_t itt;
	uint32_t rstag;
	uint64_t rva;
	uint32_t len, lba;
};

static void hold_read(struct held_read *h, const struct cmd *k)
{
	h->itt = k->itt;
	h->rstag = k->rstag;
	h->rva = k->rva;
	h->len = k->len;
	h->lba = (uint32_t)k->lba;
}

static int push_held(struct conn *c, const struct held_read *h)
{
	return rdma_op(c, true, h->rstag, h->rva, (uint64_t)h->lba * BLOCK, h->len, 0);
}

/*
 * inv-other: hold the trigger READ; answer it when the next READ comes,
 * invalidating the next one's STag (which is then served normally).
 */
static struct inv_other_state {
	bool on;
	struct held_read r;
} inv_other;

static bool inv_other_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	if (!inv_other.on) {
		inv_other.on = true;
		hold_read(&inv_other.r, k);
		c->reads--;
		return true;
	}
	inv_other.on = false;
	if (!push_held(c, &inv_other.r)) {
		fire();
		c->inv_ok = true;
		send_rsp(c, inv_other.r.itt, 0, 0, 0, 0, true, k->rstag);
	}
	return false;
}

static bool inv_other_waiting(void)
{
	return inv_other.on;
}

static const struct aftermath inv_other_after = {
	CONN_STATE(inv_other),
};

/* inv-nomr: the trigger READ held until a TEST UNIT READY comes. */
static struct inv_nomr_state {
	bool on;
	struct held_read r;
} inv_nomr;

static bool inv_nomr_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	(void)c;
	inv_nomr.on = true;
	hold_read(&inv_nomr.r, k);
	printf("evil: inv-nomr: READ itt 0x%08x held until a TEST UNIT READY\n", k->itt);
	fflush(stdout);
	return true;
}

/*
 * The held READ's data, then the TEST UNIT READY's response (it has no
 * data, no STag) invalidating the READ's rkey, then the READ's by plain
 * SEND. (Held: inv-nomr is still the mode armed.)
 */
static bool inv_nomr_command(struct conn *c, const struct cmd *k)
{
	if (k->cdb[0] != 0x00 || !inv_nomr.on)
		return false;
	inv_nomr.on = false;
	if (push_held(c, &inv_nomr.r))
		return true;
	fire();
	printf("evil: inv-nomr: TEST UNIT READY itt 0x%08x answered invalidating rkey 0x%08x of READ itt 0x%08x\n",
	       k->itt, inv_nomr.r.rstag, inv_nomr.r.itt);
	fflush(stdout);
	c->inv_ok = true;
	send_rsp(c, k->itt, 0, 0, 0, 0, true, inv_nomr.r.rstag);
	send_rsp(c, inv_nomr.r.itt, 0, 0, 0, 0, false, 0);
	return true;
}

static const struct aftermath inv_nomr_after = {
	CONN_STATE(inv_nomr),
	.command = inv_nomr_command,
};

/* ------------------------------------------------------------------ */
/* late-abort, tmf-spoof, tmf-dup: the trigger READ left unanswered,    */
/* until its ABORT TASK; then its rkey tried LATE_MS later.             */

enum { ABORT_LATE, ABORT_SPOOF, ABORT_DUP };

static struct tmf_wait_state {
	bool on;
	const struct misbehaviour *m;	/* the mode that left the READ */
	uint32_t itt, rstag, len;
	uint64_t rva, off;
	/* tmf-spoof: the last NOP-Out ping left unanswered meanwhile */
	bool ping_held;
	uint32_t ping_itt;
} tmf_wait;

/* No answer, no data: wait for its ABORT TASK. */
static bool tmf_wait_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)c;
	tmf_wait.m = m;
	fire();
	tmf_wait.on = true;
	tmf_wait.itt = k->itt;
	tmf_wait.rstag = k->rstag;
	tmf_wait.rva = k->rva;
	tmf_wait.len = k->len;
	tmf_wait.off = k->off;
	tmf_wait.ping_held = false;
	printf("evil: %s: READ itt 0x%08x left unanswered\n", m->name, k->itt);
	fflush(stdout);
	return true;
}

/* tmf-spoof: a ping unanswered; its ITT answers the ABORT TASK. */
static bool tmf_wait_ping(struct conn *c, uint32_t itt)
{
	(void)c;
	if (!tmf_wait.on || tmf_wait.m->arg != ABORT_SPOOF)
		return false;
	tmf_wait.ping_held = true;
	tmf_wait.ping_itt = itt;
	printf("evil: tmf-spoof: ping itt 0x%08x held\n", itt);
	fflush(stdout);
	return true;
}

/*
 * The ABORT TASK of the READ held: tmf-spoof's answer names the held
 * ping, tmf-dup's goes twice.
 */
static void tmf_wait_tmf(struct conn *c, struct tmf *t)
{
	(void)c;
	if (t->fn != 1 || !tmf_wait.on || t->ref_itt != tmf_wait.itt)
		return;
	t->held = tmf_wait.m->arg;
	if (t->held == ABORT_SPOOF && tmf_wait.ping_held)
		t->rsp_itt = tmf_wait.ping_itt;
	t->twice = t->held == ABORT_DUP;
}

/* The aborted READ's rkey, LATE_MS from now. */
static void tmf_wait_answered(struct conn *c, const struct tmf *t)
{
	int kind = t->held;

	(void)c;
	if (kind < 0)
		return;
	tmf_wait.on = false;
	if (kind == ABORT_SPOOF && tmf_wait.ping_held)
		printf("evil: tmf-spoof: ABORT TASK itt 0x%08x answered with the ping's itt 0x%08x\n",
		       t->itt, t->rsp_itt);
	else if (kind == ABORT_SPOOF)
		printf("evil: tmf-spoof: no ping held: ABORT TASK itt 0x%08x answered with its own itt, not spoofed\n",
		       t->itt);
	else if (kind == ABORT_DUP)
		printf("evil: tmf-dup: ABORT TASK itt 0x%08x answered twice\n", t->itt);
	else
		printf("evil: late-abort: ABORT TASK for itt 0x%08x answered\n", tmf_wait.itt);
	tmf_wait.ping_held = false;
	late_arm(true, tmf_wait.rstag, tmf_wait.rva, tmf_wait.len, tmf_wait.off);
}

static const struct aftermath tmf_wait_after = {
	CONN_STATE(tmf_wait),
	.ping = tmf_wait_ping,
	.tmf = tmf_wait_tmf,
	.tmf_answered = tmf_wait_answered,
};

/* ------------------------------------------------------------------ */
/* big-sense, big-rsp: CHECK CONDITION (UNIT ATTENTION) with 252 bytes  */
/* of sense; the SCSI layer must send the READ of block lba again.      */

static struct retry_state {
	bool armed;
	uint64_t lba;	/* the last READ whose answer a mode replaced */
} retry;

static void retry_replaced(const struct cmd *k)
{
	retry.lba = k->lba;
}

/*
 * CHECK CONDITION, UNIT ATTENTION (POWER ON, RESET, OR BUS DEVICE RESET
 * OCCURRED: the SCSI layer retries the command) in a data segment of dlen
 * bytes: SenseLength 252, the largest sense SPC allows (fixed format,
 * additional length 244), then response data ('r') up to dlen. The READ's
 * rkey is invalidated with it when rstag is non-zero.
 */
static int send_rsp_ua(struct conn *c, uint32_t itt, uint32_t rstag, uint32_t dlen)
{
	int i = tx_get(c);
	uint8_t *p, *bhs, *d;

	if (i < 0)
		return -1;
	p = pdu_start(c, i);
	bhs = p + ISER_HDR;
	bhs[0] = 0x21;
	bhs[1] = 0x80;
	bhs[3] = 0x02;
	put32(bhs + 16, itt);
	set_sn(c, bhs, true);
	d = p + HDRS;
	memset(d, 'r', dlen);
	d[0] = 0;
	d[1] = 252;
	memset(d + 2, 0, 252);
	d[2] = 0x70;
	d[4] = 0x06;	/* UNIT ATTENTION */
	d[9] = 244;
	d[14] = 0x29;
	for (int k = 20; k < 254; k++)
		d[k] = (uint8_t)k;	/* sense-key specific and vendor bytes */
	put24(bhs + 5, dlen);
	return tx_post(c, i, HDRS + ((dlen + 3) & ~3u), rstag, rstag != 0);
}

/*
 * The segment is 254 bytes (big-sense) or 8 KiB (big-rsp, the rest
 * response data), the MaxRecvDataSegmentLength riser declares (.arg).
 */
static void big_sense_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	retry.armed = true;
	send_rsp_ua(c, k->itt, k->rstag, (uint32_t)m->arg);
}

static bool retry_read(struct conn *c, const struct cmd *k)
{
	(void)c;
	if (retry.armed && k->lba == retry.lba) {
		retry.armed = false;
		printf("evil: retried READ of block %llu, itt 0x%08x: served\n",
		       (unsigned long long)k->lba, k->itt);
		fflush(stdout);
	}
	return false;
}

static const struct aftermath retry_after = {
	.read = retry_read,
	.replaced = retry_replaced,
};

/* ------------------------------------------------------------------ */
/* wrong-data, lost-write: a broken target, to show by hand that        */
/* hostile.sh's checks can fail. wrong-data: the trigger READ gets the  */
/* next block's data, status GOOD; lost-write: the READ is served, and  */
/* the next WRITE of block LOST_LBA is answered GOOD unread.            */

#define LOST_LBA 4096
static struct lost_write_state {
	bool armed;
} lost;

static bool wrong_data_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	bool wrong = m->arg;

	if (push_data(c, k, k->off + (wrong ? 4096 : 0)))
		return true;
	fire();
	lost.armed = !wrong;
	rsp_good(c, k);
	return true;
}

static bool lost_write(struct conn *c, const struct cmd *k)
{
	if (!lost.armed || k->lba != LOST_LBA)
		return false;
	lost.armed = false;
	printf("evil: lost-write: WRITE itt 0x%08x answered GOOD, its data not read\n", k->itt);
	fflush(stdout);
	send_rsp(c, k->itt, 0, 0, 0, 0, false, 0);
	return true;
}

/* bad-status: a broken target too. The trigger READ gets its data and
 * then CHECK CONDITION, MEDIUM ERROR (unrecovered read error), which the
 * SCSI layer does not retry: the READ fails. */
static void bad_status_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	send_rsp(c, k->itt, 0x02, 0x03, 0x11, 0, false, 0);
}

static const struct aftermath lost_write_after = {
	.write = lost_write,
};

/* ------------------------------------------------------------------ */
/* ping: the READ's response, then NOP-In pings (ITT reserved, TTT      */
/* valid, StatSN not advanced), one at a time, each when the last is    */
/* answered; the initiator must answer each with a NOP-Out echoing it.  */

#define PINGS 600
#define PING_TTT 0x50000000u
static struct ping_state {
	int sent;	/* 0: none going on */
} ping;

static void ping_next(struct conn *c)
{
	send_simple(c, 0x20, 0xffffffff, PING_TTT + ping.sent, false, NULL, 0);
	ping.sent++;
}

static void ping_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	rsp_good(c, k);
	ping.sent = 0;
	ping_next(c);
}

/* A NOP-Out with the reserved ITT: the answer to a ping. */
static bool ping_answered(struct conn *c, uint32_t ttt, const uint8_t *data, uint32_t dlen)
{
	(void)data;
	(void)dlen;
	if (!ping.sent)
		return false;
	if (ttt != PING_TTT + ping.sent - 1) {
		printf("evil: ping answer with TTT 0x%08x, expected 0x%08x\n", ttt,
		       PING_TTT + ping.sent - 1);
		fflush(stdout);
		ping.sent = 0;
	} else if (ping.sent < PINGS) {
		ping_next(c);
	} else {
		printf("evil: pings answered %d\n", ping.sent);
		fflush(stdout);
		ping.sent = 0;
	}
	return true;
}

static const struct aftermath ping_after = {
	CONN_STATE(ping),
	.nop_answer = ping_answered,
};

/* ------------------------------------------------------------------ */
/* nop-data: the READ's response, then a ping (valid TTT) with 200      */
/* bytes; big-nop: a NOP-In (no ping) with 8 KiB.                       */

#define NOP_DATA_TTT 0x4e000001u

static void nop_data_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	rsp_good(c, k);
	send_nopin(c, NOP_DATA_TTT, 200, 0, false);
}

/* Its answer: says whether the ping's data came back. */
static bool nop_data_answered(struct conn *c, uint32_t ttt, const uint8_t *data, uint32_t dlen)
{
	(void)c;
	if (ttt != NOP_DATA_TTT)
		return false;
	printf("evil: nop-data: ping answered, TTT 0x%08x echoed, %u bytes of data%s\n",
	       NOP_DATA_TTT, dlen,
	       dlen == 200 && data[0] == 'n' && data[199] == 'n' ? " (the ping's)" : "");
	fflush(stdout);
	return true;
}

static const struct aftermath nop_data_after = {
	.nop_answer = nop_data_answered,
};

static void big_nop_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	rsp_good(c, k);
	send_nopin(c, 0xffffffff, MAX_DSL, 0, false);
}

/* ------------------------------------------------------------------ */
/* logout-ping: armed by its trigger READ (served normally), fired by   */
/* the next NOP-Out ping: a Logout Response with the ping's ITT, and a  */
/* hang-up 100 ms later.                                                */

static struct logout_ping_state {
	bool armed;
} logout_ping;

static bool logout_ping_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	(void)c;
	(void)k;
	logout_ping.armed = true;
	printf("evil: logout-ping armed at %.3f: the next NOP-Out ping gets a Logout Response\n",
	       now_s());
	fflush(stdout);
	return false;
}

static bool logout_ping_ping(const struct misbehaviour *m, struct conn *c, uint32_t itt)
{
	(void)m;
	if (!logout_ping.armed)
		return false;
	logout_ping.armed = false;
	fire();
	/* In the kernel log first: the test times riser's answer from it. */
	kmsg("evil: logout-ping: Logout Response sent");
	send_simple(c, 0x26, itt, 0, true, NULL, 0);
	hangup_in(100);
	printf("evil: Logout Response sent for NOP-Out itt 0x%08x at %.3f\n", itt, now_s());
	fflush(stdout);
	return true;
}

/* ------------------------------------------------------------------ */
/* burst-max, burst-min (-u only): from the next operational login      */
/* stage on, FirstBurstLength and MaxBurstLength are answered with at   */
/* most 2^24 - 1 (the most RFC 7143 allows) or 512 (the least). A burst */
/* mode fires on the first login, and then only on the first login      */
/* after a Logout Request: the reconnection of a failed connection      */
/* keeps the session's bursts.                                          */

#define BURST_MAX 16777215u
#define BURST_MIN 512u
static struct burst_state {
	bool ready;
	bool seen;	/* a burst mode fired on this connection */
} burst = { .ready = true };

static void burst_login(const struct misbehaviour *m, struct conn *c, struct login_ans *a)
{
	(void)c;
	(void)a;
	if (burst.seen || !burst.ready)
		return;
	burst.seen = true;
	burst.ready = false;
	burst_cap = (uint32_t)m->arg;
	fire();
}

static void burst_logout(void)
{
	burst.ready = true;
}

static const struct aftermath burst_after = {
	CONN_STATE(burst.seen),
	.logout = burst_logout,
};

/* ------------------------------------------------------------------ */
/* cm-rsvd, cm-short, cm-long: the iSER CM header in the accept (REP)   */
/* spoilt. cm-rsvd: every reserved bit set (flags byte and the three    */
/* reserved bytes), beside Z; cm-short: two bytes, a header cut short   */
/* (the CM pads it with zeros); cm-long: the most private data a REP    */
/* carries, 196 bytes (the CM refuses more, on the target's side), a    */
/* valid header and 192 bytes of garbage. cm-noinv: a valid header     */
/* with Z and I, the target saying it will not send with invalidate;   */
/* it then does, for the trigger READ (noinv_read).                     */

enum { CM_RSVD, CM_SHORT, CM_LONG, CM_NOINV };
#define CM_REP_MAX 196

/*
 * cm-noinv's connection: the one whose accept said "no Send with
 * Invalidate". Its READs are answered by plain SEND (as the target said),
 * but for the trigger READ (block LBA of -l), answered by SEND_WITH_INV
 * of its STag all the same.
 */
static struct conn *noinv_conn;

static bool noinv_read(struct conn *c, const struct cmd *k)
{
	if (c != noinv_conn || fire_lba < 0 || (long long)k->lba != fire_lba || !k->rstag)
		return false;
	if (push_data(c, k, k->off))
		return true;
	c->inv_ok = true;
	send_rsp(c, k->itt, 0, 0, 0, 0, true, k->rstag);
	c->inv_ok = false;
	printf("evil: cm-noinv: READ itt 0x%08x answered by SEND_WITH_INV of its STag 0x%08x, though the accept refused Send with Invalidate\n",
	       k->itt, k->rstag);
	fflush(stdout);
	return true;
}

static void noinv_conn_end(struct conn *c)
{
	if (c == noinv_conn)
		noinv_conn = NULL;
}

static const struct aftermath noinv_after = {
	.conn_end = noinv_conn_end,
	.read = noinv_read,
};

static void cm_garbage(const struct misbehaviour *m, struct conn *c, struct rdma_conn_param *cp)
{
	static uint8_t g[CM_REP_MAX];

	memset(g, 0, sizeof(g));
	if (m->arg == CM_RSVD) {
		g[0] = 0xbf;	/* Z, not I, every reserved bit */
		memset(g + 1, 0xff, 3);
		cp->private_data_len = 4;
	} else if (m->arg == CM_NOINV) {
		/* Z and I: "I will not send with invalidate". It will, once. */
		g[0] = 0xc0;
		cp->private_data_len = 4;
		c->inv_ok = false;
		noinv_conn = c;
	} else if (m->arg == CM_SHORT) {
		g[0] = 0x80;
		g[1] = 0x5a;
		cp->private_data_len = 2;
	} else {
		g[0] = 0x80;
		for (int i = 4; i < CM_REP_MAX; i++)
			g[i] = (uint8_t)(0xa5 ^ i);
		cp->private_data_len = CM_REP_MAX;
	}
	cp->private_data = g;
	fire();
	printf("evil: %s: accept carries %u bytes of private data: %02x %02x %02x %02x ...\n",
	       m->name, cp->private_data_len, g[0], g[1], g[2], g[3]);
	fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* login-long, login-dsl, login-bad: the next Login Response spoilt.    */

/* login-long: a login response far longer than any receive buffer. */
static void login_long(const struct misbehaviour *m, struct conn *c, struct login_ans *a)
{
	(void)m;
	(void)c;
	fire();
	memset(a->d + a->len, 'x', 2 * MAX_DSL);
	a->post = HDRS + a->len + 2 * MAX_DSL;
}

/* login-dsl: the header claims more data than the send carries. */
static void login_dsl(const struct misbehaviour *m, struct conn *c, struct login_ans *a)
{
	(void)m;
	(void)c;
	fire();
	put24(a->r + 5, a->len + 4000);
}

/* login-bad: a non-login opcode during login. */
static void login_bad(const struct misbehaviour *m, struct conn *c, struct login_ans *a)
{
	(void)m;
	(void)c;
	fire();
	a->r[0] = 0x21;
}

/* ------------------------------------------------------------------ */
/* The modes that take the trigger READ over or replace its answer.     */

static bool drop_read(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	(void)k;
	fire();
	rdma_disconnect(c->id);
	return true;
}

/* A send buffer with the iSER header set, its BHS in *bhs; -1: none. */
static int pdu_new(struct conn *c, uint8_t **p, uint8_t **bhs)
{
	int i = tx_get(c);

	if (i < 0)
		return -1;
	*p = pdu_start(c, i);
	*bhs = *p + ISER_HDR;
	return i;
}

/* short: a 20-byte SEND (less than the iSER header and BHS). */
static void short_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	uint8_t *p, *bhs;
	int i = pdu_new(c, &p, &bhs);

	(void)m;
	(void)k;
	if (i < 0)
		return;
	bhs[0] = 0x21;
	tx_post(c, i, 20, 0, false);
}

/*
 * dsl-long: a SCSI Response whose DataSegmentLength says 4000 bytes, 16
 * sent; overrun: one of 16 KiB, into the initiator's 8 KiB receive.
 */
static void dsl_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	bool overrun = m->arg;
	uint8_t *p, *bhs;
	int i = pdu_new(c, &p, &bhs);

	if (i < 0)
		return;
	bhs[0] = 0x21;
	bhs[1] = 0x80;
	put24(bhs + 5, overrun ? 2 * MAX_DSL : 4000);
	put32(bhs + 16, k->itt);
	set_sn(c, bhs, true);
	if (!overrun) {
		tx_post(c, i, HDRS + 16, 0, false);
		return;
	}
	memset(p + HDRS, 'o', 2 * MAX_DSL);
	tx_post(c, i, HDRS + 2 * MAX_DSL, 0, false);
}

static void unknown_itt_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	(void)k;
	send_rsp(c, 0x00ff7777, 0, 0, 0, 0, false, 0);
}

/*
 * data-in, r2t: the PDUs iSER replaces with RDMA: a Data-In carrying the
 * READ's status (F and S bits), or an R2T asking for 4 KiB.
 */
static void iscsi_only_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	uint8_t *p, *bhs;
	int i = pdu_new(c, &p, &bhs);

	if (i < 0)
		return;
	put32(bhs + 16, k->itt);
	if (!m->arg) {
		bhs[0] = 0x25;
		bhs[1] = 0x81;
		put32(bhs + 20, 0xffffffff);
		set_sn(c, bhs, true);
	} else {
		bhs[0] = 0x31;
		bhs[1] = 0x80;
		put32(bhs + 20, 0x31000000);	/* TTT */
		set_sn(c, bhs, false);
		put32(bhs + 44, 4096);		/* Desired Data Transfer Length */
	}
	tx_post(c, i, HDRS, 0, false);
}

/*
 * reject: a Reject (protocol error) of the READ's command, its header in
 * the data segment; the READ stays unanswered.
 */
static void reject_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	uint8_t *p, *bhs;
	int i = pdu_new(c, &p, &bhs);

	(void)m;
	if (i < 0)
		return;
	bhs[0] = 0x3f;
	bhs[1] = 0x80;
	bhs[2] = 0x04;
	put24(bhs + 5, BHS);
	put32(bhs + 16, 0xffffffff);
	set_sn(c, bhs, true);
	memset(p + HDRS, 0, BHS);
	p[HDRS] = 0x01;
	p[HDRS + 1] = 0xc0;
	put32(p + HDRS + 16, k->itt);
	tx_post(c, i, HDRS + BHS, 0, false);
}

/* stale-itt: the real response, then the same one again. */
static void stale_itt_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	send_rsp(c, k->itt, 0, 0, 0, 0, false, 0);
	send_rsp(c, k->itt, 0, 0, 0, 0, false, 0);
}

/* inv-bad: SEND_WITH_INV naming an rkey that does not exist. */
static void inv_bad_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	c->inv_ok = true;
	send_rsp(c, k->itt, 0, 0, 0, 0, true, k->rstag ^ 0x5a);
}

/*
 * inv-global: the READ's response by SEND_WITH_INV of the STag it was
 * given, whatever the initiator's CM header said. With always_register=0 a
 * one-segment READ's STag is the PD's global rkey: the same for the
 * priming READ, which the target says.
 */
static void inv_global_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	printf("evil: inv-global: READ itt 0x%08x STag 0x%08x, the priming READ's 0x%08x: %s; initiator's CM header %s Send with Invalidate\n",
	       k->itt, k->rstag, c->prime_rstag,
	       k->rstag == c->prime_rstag ? "same key" : "another key",
	       c->inv_ok ? "takes" : "refuses");
	fflush(stdout);
	c->inv_ok = true;
	send_rsp(c, k->itt, 0, 0, 0, 0, true, k->rstag);
}

/* bad-version, bad-flags, ahs, bad-opcode: a SCSI Response with a bad header. */
enum { BAD_VERSION, BAD_FLAGS, BAD_AHS, BAD_OPCODE };

static void bad_header_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	uint8_t *p, *bhs;
	int i = pdu_new(c, &p, &bhs);

	if (i < 0)
		return;
	bhs[0] = 0x21;
	bhs[1] = 0x80;
	put32(bhs + 16, k->itt);
	set_sn(c, bhs, true);
	if (m->arg == BAD_VERSION)
		p[0] = 0x20;	/* iSER Hello Reply, not iSCSI control */
	else if (m->arg == BAD_FLAGS)
		p[0] = 0x18;	/* a target advertising a write STag */
	else if (m->arg == BAD_AHS)
		bhs[4] = 4;	/* an AHS that is not there */
	else
		bhs[0] = 0x1f;	/* an opcode no target sends */
	tx_post(c, i, HDRS, 0, false);
}

/* flood-nop: 3000 NOP-Ins; flooding is legal: the READ still gets its response. */
static void flood_nop_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	for (int n = 0; n < 3000 && !c->closing; n++)
		send_simple(c, 0x20, 0xffffffff, 0xffffffff, false, NULL, 0);
	rsp_good(c, k);
}

/* flood-async: 1000 Async Messages, AsyncEvent 255: vendor specific; iscsid logs it. */
static void flood_async_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	for (int n = 0; n < 1000 && !c->closing; n++) {
		uint8_t *p, *bhs;
		int i = pdu_new(c, &p, &bhs);

		if (i < 0)
			return;
		bhs[0] = 0x32;
		bhs[1] = 0x80;
		put32(bhs + 16, 0xffffffff);
		put32(bhs + 20, 0xffffffff);
		set_sn(c, bhs, true);
		bhs[36] = 255;
		tx_post(c, i, HDRS, 0, false);
	}
	rsp_good(c, k);
}

/* logout-unprompted: the READ's response, then a Logout Response naming its ITT. */
static void logout_unprompted_reply(const struct misbehaviour *m, struct conn *c,
				    const struct cmd *k)
{
	(void)m;
	rsp_good(c, k);
	send_simple(c, 0x26, k->itt, 0, true, NULL, 0);
}

/*
 * The READ's response, then an Async Message (.arg: AsyncEvent):
 * async-logout, 1: a request to log out within 2 s (Parameter3), whose
 * Logout Request gets its answer; async-dropconn, 2: "dropping connection
 * 0" with Time2Wait 2 s, async-dropall, 3: all connections, 20 s (longer
 * than a reconnect takes under TCG, so that the wait shows), both with
 * Time2Retain 30 s and the hang-up 200 ms later; async-negotiate, 4: a
 * request to renegotiate parameters (a Text exchange) within 2 s.
 */
static void async_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	rsp_good(c, k);
	switch (m->arg) {
	case 1:
	case 4:
		send_async(c, (uint8_t)m->arg, 0, 0, 2);
		break;
	case 2:
	case 3:
		send_async(c, (uint8_t)m->arg, 0, m->arg == 2 ? 2 : 20, 30);
		hangup_in(200);
		break;
	}
}

/* inv-nonresp: a NOP-In that invalidates the READ's rkey, then the READ's
 * response by plain SEND. */
static void inv_nonresp_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	(void)m;
	c->inv_ok = true;
	send_nopin(c, 0xffffffff, 0, k->rstag, true);
	send_rsp(c, k->itt, 0, 0, 0, 0, false, 0);
}

/* ff-login: the READ's response, then a Login Response (final, into the
 * full-feature phase) naming its ITT. */
static void ff_login_reply(const struct misbehaviour *m, struct conn *c, const struct cmd *k)
{
	uint8_t *p, *bhs;
	int i;

	(void)m;
	rsp_good(c, k);
	i = pdu_new(c, &p, &bhs);
	if (i < 0)
		return;
	bhs[0] = 0x23;
	bhs[1] = 0x80 | (1 << 2) | 3;
	bhs[15] = 1;	/* TSIH */
	put32(bhs + 16, k->itt);
	set_sn(c, bhs, true);
	tx_post(c, i, HDRS, 0, false);
}

/* ------------------------------------------------------------------ */
/* The table. Its order is the usage's; modes_table[0] is "none".       */

#define READ_REPLY(n, ph, hook, a) \
	{ .name = n, .phase = ph, .trigger = TR_READ, .reply = hook, .arg = a }

static const struct misbehaviour modes_table[] = {
	{ .name = "none", .phase = PH_NONE, .trigger = TR_NONE },
	READ_REPLY("short", PH_SCSI, short_reply, 0),
	READ_REPLY("dsl-long", PH_SCSI, dsl_reply, 0),
	READ_REPLY("overrun", PH_SCSI, dsl_reply, 1),
	READ_REPLY("unknown-itt", PH_SCSI, unknown_itt_reply, 0),
	READ_REPLY("stale-itt", PH_SCSI, stale_itt_reply, 0),
	{ .name = "inv-other", .phase = PH_SCSI, .trigger = TR_READ,
	  .read = inv_other_read, .waiting = inv_other_waiting, .after = { &inv_other_after } },
	READ_REPLY("inv-bad", PH_SCSI, inv_bad_reply, 0),
	READ_REPLY("bad-version", PH_SCSI, bad_header_reply, BAD_VERSION),
	READ_REPLY("bad-flags", PH_SCSI, bad_header_reply, BAD_FLAGS),
	READ_REPLY("ahs", PH_SCSI, bad_header_reply, BAD_AHS),
	READ_REPLY("bad-opcode", PH_SCSI, bad_header_reply, BAD_OPCODE),
	READ_REPLY("flood-nop", PH_NOP, flood_nop_reply, 0),
	READ_REPLY("flood-async", PH_ASYNC, flood_async_reply, 0),
	{ .name = "silent", .phase = PH_SCSI, .trigger = TR_READ,
	  .read = silent_read, .arg = SILENT_SOME, .after = { &silent_after } },
	{ .name = "silent-all", .phase = PH_TMF, .trigger = TR_READ,
	  .read = silent_read, .arg = SILENT_ALL, .after = { &silent_after } },
	{ .name = "login-long", .phase = PH_LOGIN, .trigger = TR_LOGIN, .login = login_long },
	{ .name = "login-dsl", .phase = PH_LOGIN, .trigger = TR_LOGIN, .login = login_dsl },
	{ .name = "login-bad", .phase = PH_LOGIN, .trigger = TR_LOGIN, .login = login_bad },
	{ .name = "drop", .phase = PH_CONN, .trigger = TR_READ, .read = drop_read },
	{ .name = "ping", .phase = PH_NOP, .trigger = TR_READ, .reply = ping_reply,
	  .after = { &ping_after } },
	{ .name = "late-write", .phase = PH_RDMA, .trigger = TR_READ, .read = late_write_read,
	  .after = { &late_after } },
	{ .name = "late-read", .phase = PH_RDMA, .trigger = TR_WRITE, .write = late_read_write,
	  .after = { &late_after } },
	{ .name = "late-abort", .phase = PH_TMF, .trigger = TR_READ, .read = tmf_wait_read,
	  .arg = ABORT_LATE, .after = { &tmf_wait_after, &late_after } },
	{ .name = "early-status", .phase = PH_SCSI, .trigger = TR_WRITE, .write = early_write,
	  .after = { &early_after } },
	{ .name = "logout-ping", .phase = PH_NOP, .trigger = TR_READ_PING,
	  .read = logout_ping_read, .ping = logout_ping_ping, .after = { &hangup_after } },
	READ_REPLY("data-in", PH_SCSI, iscsi_only_reply, 0),
	READ_REPLY("r2t", PH_SCSI, iscsi_only_reply, 1),
	READ_REPLY("reject", PH_SCSI, reject_reply, 0),
	/* A broken target, to show by hand that hostile.sh's checks can fail. */
	{ .name = "wrong-data", .phase = PH_SCSI, .trigger = TR_READ, .read = wrong_data_read,
	  .arg = 1, .after = { &lost_write_after } },
	{ .name = "lost-write", .phase = PH_SCSI, .trigger = TR_READ, .read = wrong_data_read,
	  .arg = 0, .after = { &lost_write_after } },
	READ_REPLY("bad-status", PH_SCSI, bad_status_reply, 0),
	/* Each in a phase of its own (hostile.sh). */
	{ .name = "cm-rsvd", .phase = PH_CM, .trigger = TR_ACCEPT, .accept = cm_garbage,
	  .arg = CM_RSVD },
	{ .name = "cm-short", .phase = PH_CM, .trigger = TR_ACCEPT, .accept = cm_garbage,
	  .arg = CM_SHORT },
	{ .name = "cm-long", .phase = PH_CM, .trigger = TR_ACCEPT, .accept = cm_garbage,
	  .arg = CM_LONG },
	{ .name = "cm-noinv", .phase = PH_CM, .trigger = TR_ACCEPT, .accept = cm_garbage,
	  .arg = CM_NOINV, .after = { &noinv_after } },
	{ .name = "burst-max", .phase = PH_LOGIN, .trigger = TR_LOGIN_OP, .login = burst_login,
	  .arg = BURST_MAX, .after = { &burst_after } },
	{ .name = "burst-min", .phase = PH_LOGIN, .trigger = TR_LOGIN_OP, .login = burst_login,
	  .arg = BURST_MIN, .after = { &burst_after } },
	READ_REPLY("inv-global", PH_SCSI, inv_global_reply, 0),
	READ_REPLY("logout-unprompted", PH_ASYNC, logout_unprompted_reply, 0),
	READ_REPLY("async-logout", PH_ASYNC, async_reply, 1),
	{ .name = "async-dropconn", .phase = PH_ASYNC, .trigger = TR_READ, .reply = async_reply,
	  .arg = 2, .after = { &hangup_after } },
	{ .name = "async-dropall", .phase = PH_ASYNC, .trigger = TR_READ, .reply = async_reply,
	  .arg = 3, .after = { &hangup_after } },
	READ_REPLY("async-negotiate", PH_ASYNC, async_reply, 4),
	{ .name = "nop-data", .phase = PH_NOP, .trigger = TR_READ, .reply = nop_data_reply,
	  .after = { &nop_data_after } },
	READ_REPLY("big-nop", PH_NOP, big_nop_reply, 0),
	{ .name = "big-sense", .phase = PH_SCSI, .trigger = TR_READ, .reply = big_sense_reply,
	  .arg = 254, .after = { &retry_after } },
	{ .name = "big-rsp", .phase = PH_SCSI, .trigger = TR_READ, .reply = big_sense_reply,
	  .arg = MAX_DSL, .after = { &retry_after } },
	READ_REPLY("inv-nonresp", PH_NOP, inv_nonresp_reply, 0),
	{ .name = "inv-nomr", .phase = PH_SCSI, .trigger = TR_READ, .read = inv_nomr_read,
	  .after = { &inv_nomr_after } },
	{ .name = "stale-held", .phase = PH_CONN, .trigger = TR_READ, .read = stale_held_read,
	  .after = { &stale_held_after } },
	READ_REPLY("ff-login", PH_LOGIN, ff_login_reply, 0),
	{ .name = "tmf-spoof", .phase = PH_TMF, .trigger = TR_READ, .read = tmf_wait_read,
	  .arg = ABORT_SPOOF, .after = { &tmf_wait_after, &late_after } },
	{ .name = "tmf-dup", .phase = PH_TMF, .trigger = TR_READ, .read = tmf_wait_read,
	  .arg = ABORT_DUP, .after = { &tmf_wait_after, &late_after } },
	{ .name = "itt-junk", .phase = PH_SCSI, .trigger = TR_READ, .read = itt_junk_read,
	  .after = { &late_after } },
	{ .name = "silent-redo", .phase = PH_TMF, .trigger = TR_READ, .read = silent_read,
	  .arg = SILENT_REDO, .after = { &silent_after, &redo_after } },
	{ .name = "early-rsp", .phase = PH_SCSI, .trigger = TR_READ, .read = early_rsp_read,
	  .after = { &early_rsp_after } },
	{ .name = "early-rsp-reconnect", .phase = PH_CONN, .trigger = TR_READ,
	  .read = early_rsp_hangup_read, .after = { &early_rsp_after } },
	{ .name = "stale-key", .phase = PH_SCSI, .trigger = TR_READ, .read = stale_key_read,
	  .after = { &early_rsp_after } },
	{ .name = "posting-rsp", .phase = PH_SCSI, .trigger = TR_READ, .read = posting_rsp_read,
	  .after = { &early_rsp_after, &late_after } },
};
#define NMODES_TABLE (sizeof(modes_table) / sizeof(modes_table[0]))

/*
 * The aftermaths, in the order the core consults them at each point: at a
 * SCSI command early-rsp's (which sees every one), early-status's, stale-held's, the silence, inv-nomr's; at a
 * READ silent-redo's before big-sense's; at a NOP-Out answer nop-data's
 * before the pings'; the timers late RDMA, silent-redo, hang-up. Every
 * aftermath of the table must be here (main checks).
 */
static const struct aftermath *const afters[] = {
	&early_rsp_after, &noinv_after, &early_after, &late_after, &stale_held_after, &silent_after, &inv_nomr_after,
	&redo_after, &retry_after, &lost_write_after, &inv_other_after, &nop_data_after,
	&ping_after, &tmf_wait_after, &hangup_after, &burst_after,
};
#define NAFTERS (sizeof(afters) / sizeof(afters[0]))

/* Calls hook of every aftermath that has one; stops at the first true. */
#define AFTER_ANY(hook, ...) ({							\
	bool done_ = false;							\
	for (size_t a_ = 0; a_ < NAFTERS && !done_; a_++)			\
		if (afters[a_]->hook)						\
			done_ = afters[a_]->hook(__VA_ARGS__);			\
	done_;									\
})
#define AFTER_ALL(hook, ...) do {						\
	for (size_t a_ = 0; a_ < NAFTERS; a_++)					\
		if (afters[a_]->hook)						\
			afters[a_]->hook(__VA_ARGS__);				\
} while (0)

/* ================================================================== */
/* The core's protocol, calling the current mode's and the aftermaths' */
/* hooks                                                               */
/* ================================================================== */

static void fire(void)
{
	printf("evil: fired %s\n", mode->name);
	fflush(stdout);
	next_mode++;
	mode = next_mode < nmodes ? modes[next_mode] : &modes_table[0];
}

static struct conn *conn_new(struct rdma_cm_event *ev);

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

/* The connection ends: what the modes left on it says so, then it goes. */
static void conn_end(struct conn *c)
{
	AFTER_ALL(conn_end, c);
	conn_free(c);
}

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
			/* A mode may give the current connection up (silent-all). */
			if (cur && !cur->dead && AFTER_ANY(conn_request, cur)) {
				rdma_disconnect(cur->id);
				conn_end(cur);
				cur = NULL;
			}
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
				printf("evil: connection accepted at %.3f\n", now_s());
			fflush(stdout);
			continue;
		}
		rdma_ack_cm_event(ev);
		if (cur && id == cur->id && !cur->dead &&
		    (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL ||
		     t == RDMA_CM_EVENT_CONNECT_ERROR || t == RDMA_CM_EVENT_UNREACHABLE)) {
			printf("evil: connection closed (%s) at %.3f\n", rdma_event_str(t), now_s());
			fflush(stdout);
			cur->dead = true;
			cur->closing = true;
		}
	}
}

static void put_text(uint8_t *d, size_t *len, const char *key, const char *val)
{
	*len += (size_t)sprintf((char *)d + *len, "%s=%s", key, val) + 1;
}

/* The answer to one login key, appended to the response's data. */
static void login_key(struct conn *c, uint8_t *d, size_t *len, const char *kv, const char *val)
{
	if (!strcmp(kv, "InitiatorName") || !strcmp(kv, "InitiatorAlias") ||
	    !strcmp(kv, "TargetName") || !strcmp(kv, "SessionType") ||
	    !strcmp(kv, "MaxRecvDataSegmentLength") ||
	    !strcmp(kv, "InitiatorRecvDataSegmentLength") ||
	    !strcmp(kv, "TargetRecvDataSegmentLength"))
		return;
	if (!strcmp(kv, "AuthMethod")) {
		put_text(d, len, kv, "None");
	} else if (!strcmp(kv, "ImmediateData")) {
		put_text(d, len, kv, unsol_mrdsl ? val : "No");
	} else if (!strcmp(kv, "InitialR2T")) {
		put_text(d, len, kv, unsol_mrdsl ? val : "Yes");
	} else if (unsol_mrdsl && (!strcmp(kv, "FirstBurstLength") ||
				   !strcmp(kv, "MaxBurstLength"))) {
		char v[16];
		unsigned long n = strtoul(val, NULL, 0);

		n = n < burst_cap ? n : burst_cap;
		snprintf(v, sizeof(v), "%lu", n);
		put_text(d, len, kv, v);
		if (!strcmp(kv, "FirstBurstLength"))
			c->first_burst = (uint32_t)n;
		printf("evil: login: %s offered %s, answered %lu\n", kv, val, n);
		fflush(stdout);
	} else {
		put_text(d, len, kv, val);
	}
}

/* The keys of a login stage csg answered, and the target's own. */
static size_t login_keys(struct conn *c, uint8_t *d, uint8_t csg, uint8_t *data, uint32_t dlen)
{
	size_t len = 0, off = 0;

	while (off < dlen) {
		char *kv = (char *)data + off;
		size_t n = strnlen(kv, dlen - off);
		char *eq = memchr(kv, '=', n);

		off += n + 1;
		if (!eq || n == 0)
			continue;
		*eq = 0;
		logv("login key %s=%s\n", kv, eq + 1);
		login_key(c, d, &len, kv, eq + 1);
	}
	if (csg == 0)
		put_text(d, &len, "TargetPortalGroupTag", "1");
	if (csg == 1 && unsol_mrdsl) {
		char v[16];

		snprintf(v, sizeof(v), "%u", unsol_mrdsl);
		put_text(d, &len, "MaxRecvDataSegmentLength", v);
		put_text(d, &len, "TargetRecvDataSegmentLength", v);
	} else if (csg == 1) {
		put_text(d, &len, "TargetRecvDataSegmentLength", "8192");
	}
	return len;
}

/* Login: answer each stage; the operational stage takes the initiator's keys. */
static void do_login(struct conn *c, uint8_t *bhs, uint8_t *data, uint32_t dlen)
{
	struct login_ans a = { .i = tx_get(c) };
	uint8_t *p;
	uint8_t csg = (bhs[1] >> 2) & 3, nsg = bhs[1] & 3;
	bool transit = bhs[1] & 0x80;

	if (a.i < 0)
		return;
	if (csg == 1 && unsol_mrdsl && mode->trigger == TR_LOGIN_OP)
		mode->login(mode, c, &a);
	p = pdu_start(c, a.i);
	a.r = p + ISER_HDR;
	a.d = p + HDRS;
	a.r[0] = 0x23;
	a.r[1] = (transit ? 0x80 : 0) | (csg << 2) | (transit ? nsg : 0);
	memcpy(a.r + 8, bhs + 8, 6);	/* ISID */
	put32(a.r + 16, be32(bhs + 16));
	c->exp_cmdsn = be32(bhs + 24);
	if (c->statsn == 0)
		c->statsn = 1;
	if (transit && nsg == 3)
		a.r[15] = 1;	/* TSIH */
	a.len = login_keys(c, a.d, csg, data, dlen);
	put24(a.r + 5, a.len);
	set_sn(c, a.r, true);
	a.post = HDRS + ((a.len + 3) & ~3u);
	if (mode->trigger == TR_LOGIN)
		mode->login(mode, c, &a);
	if (tx_post(c, a.i, a.post, 0, false) == 0 && transit && nsg == 3)
		AFTER_ALL(ffp_start, c);
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

/* A WRITE's data is all in the disk: answer it (a mode's way, if it set one). */
static void write_done(struct conn *c, struct pend *pe)
{
	pe->used = false;
	if (pe->done) {
		pe->done(c, pe);
		return;
	}
	send_rsp(c, pe->itt, 0, 0, 0, 0, pe->stag != 0, pe->stag);
}

/*
 * A Data-Out: unsolicited data of a WRITE that waits for it, or one a mode
 * takes (early-status: for a WRITE already answered).
 */
static void do_dataout(struct conn *c, uint8_t *bhs, const uint8_t *data, uint32_t dlen)
{
	uint32_t itt = be32(bhs + 16), boff = be32(bhs + 40);

	if (AFTER_ANY(dataout, c, bhs, data, dlen))
		return;
	for (int i = 0; i < NPEND; i++) {
		struct pend *pe = &c->pend[i];

		if (!pe->used || !pe->write || pe->itt != itt)
			continue;
		if ((uint64_t)boff + dlen > pe->len - pe->rdma_len || dlen > pe->unsol_left) {
			printf("evil: Data-Out itt=0x%08x offset=%u len=%u outside the first burst\n",
			       itt, boff, dlen);
			fflush(stdout);
			c->closing = true;
			return;
		}
		memcpy(disk + pe->off + boff, data, dlen);
		pe->unsol_left -= dlen;
		if (!pe->unsol_left && !pe->rdma_busy)
			write_done(c, pe);
		return;
	}
	printf("evil: Data-Out for an unknown itt=0x%08x offset=%u\n", itt, boff);
	fflush(stdout);
}

/* A command's small answer (INQUIRY and friends): n bytes of buf, pushed. */
static void answer_data(struct conn *c, const struct cmd *k, const uint8_t *buf, uint32_t n)
{
	memcpy(disk + disk_size, buf, n);
	if (!(k->flags & 0x04) || rdma_op(c, true, k->rstag, k->rva, disk_size, n, 0))
		return;
	send_rsp(c, k->itt, 0, 0, 0, k->edtl - n, false, 0);
}

static void scsi_inquiry(struct conn *c, const struct cmd *k)
{
	uint8_t buf[64];

	if (k->cdb[1] & 1) {
		send_rsp(c, k->itt, 0x02, 0x05, 0x24, 0, false, 0);
		return;
	}
	memset(buf, 0, sizeof(buf));
	buf[2] = 6;
	buf[3] = 2;
	buf[4] = 31;
	memcpy(buf + 8, "RISER   ", 8);
	memcpy(buf + 16, "iser-evil       ", 16);
	memcpy(buf + 32, "0001", 4);
	answer_data(c, k, buf, k->edtl < 36 ? k->edtl : 36);
}

/* READ CAPACITY (10), (16); false: not a command it knows. */
static bool scsi_capacity(struct conn *c, const struct cmd *k)
{
	uint64_t last = disk_size / BLOCK - 1;
	uint8_t buf[32] = { 0 };
	uint32_t n;

	if (k->cdb[0] == 0x9e && (k->cdb[1] & 0x1f) != 0x10)
		return false;
	if (k->cdb[0] == 0x25) {
		put32(buf, (uint32_t)last);
		put32(buf + 4, BLOCK);
		n = 8;
	} else {
		put32(buf, (uint32_t)(last >> 32));
		put32(buf + 4, (uint32_t)last);
		put32(buf + 8, BLOCK);
		n = 32;
	}
	answer_data(c, k, buf, n > k->edtl ? k->edtl : n);
	return true;
}

/*
 * The trigger READ (-k: the N-th and each after; -l: block LBA after the
 * priming READ, or any while a mode waits for one): the current mode's.
 * Returns whether the READ is dealt with.
 */
static bool read_trigger(struct conn *c, const struct cmd *k)
{
	const struct misbehaviour *m = mode;
	bool trig = fire_lba >= 0 ? primed && (long long)k->lba == fire_lba : c->reads >= fire_at;

	if (m->trigger != TR_READ && m->trigger != TR_READ_PING)
		return false;
	if (!trig && !(m->waiting && m->waiting()))
		return false;
	primed = false;
	if (m->read)
		return m->read(m, c, k);
	/* Its data, then the mode's answer in place of the READ's. */
	if (push_data(c, k, k->off))
		return true;
	AFTER_ALL(replaced, k);
	fire();
	m->reply(m, c, k);
	return true;
}

static void scsi_read(struct conn *c, const struct cmd *k)
{
	if (k->off + k->len > disk_size || k->len != k->edtl || !(k->flags & 0x04)) {
		send_rsp(c, k->itt, 0x02, 0x05, 0x21, 0, false, 0);
		return;
	}
	c->reads++;
	if (AFTER_ANY(read, c, k))
		return;
	if (fire_lba >= 0 && (long long)k->lba == fire_lba - 8) {
		primed = true;
		c->prime_rstag = k->rstag;
	}
	if (read_trigger(c, k))
		return;
	if (k->len && push_data(c, k, k->off))
		return;
	rsp_good(c, k);
}

/* The WRITE at the trigger block (-l), after the priming READ. */
static bool write_trigger(struct conn *c, struct cmd *k)
{
	if (mode->trigger != TR_WRITE || fire_lba < 0 || !primed ||
	    (long long)k->lba != fire_lba)
		return false;
	primed = false;
	return mode->write(mode, c, k);
}

static void scsi_write(struct conn *c, struct cmd *k)
{
	/* InitialR2T=No: the first burst comes unasked. */
	uint32_t fb = c->first_burst ? c->first_burst : FIRST_BURST;
	uint32_t len = k->len, imm = k->imm, unsol = unsol_mrdsl ? (len < fb ? len : fb) : 0;
	bool wsv = k->flags & 0x08;
	struct pend *pe;
	int pi;

	if (k->off + len > disk_size || len != k->edtl || imm > len ||
	    (imm && !unsol_mrdsl) || (unsol < imm) || (len > unsol && !wsv)) {
		printf("evil: WRITE itt 0x%08x refused: %u bytes, %u immediate, write STag %s\n",
		       k->itt, len, imm, wsv ? "valid" : "none");
		fflush(stdout);
		send_rsp(c, k->itt, 0x02, 0x05, 0x21, 0, false, 0);
		return;
	}
	k->unsol = unsol;
	if (AFTER_ANY(write, c, k) || write_trigger(c, k))
		return;
	pi = pend_new(c);
	if (pi < 0) {
		send_rsp(c, k->itt, 0x08, 0, 0, 0, false, 0);	/* BUSY */
		return;
	}
	pe = &c->pend[pi];
	pe->itt = k->itt;
	pe->stag = wsv ? k->wstag : 0;
	pe->va = k->wva;
	pe->write = true;
	pe->len = len;
	pe->off = k->off;
	pe->unsol_left = unsol - imm;
	pe->rdma_len = len - unsol;
	pe->done = k->done;
	memcpy(disk + k->off, k->data, imm);
	if (len > unsol) {
		pe->rdma_busy = true;
		if (rdma_op(c, false, k->wstag, k->wva, k->off + unsol, len - unsol, pi)) {
			pe->used = false;
			return;
		}
	}
	if (!pe->unsol_left && !pe->rdma_busy)
		write_done(c, pe);
}

/* A SCSI command: a tiny disk. Returns after the response is posted. */
static void do_scsi(struct conn *c, uint8_t *iser, uint8_t *bhs, const uint8_t *data,
		    uint32_t imm)
{
	struct cmd k = {
		.bhs = bhs, .itt = be32(bhs + 16), .cdb = bhs + 32, .flags = iser[0],
		.edtl = be32(bhs + 20), .wstag = be32(iser + 4), .wva = be64(iser + 8),
		.rstag = be32(iser + 16), .rva = be64(iser + 20), .data = data, .imm = imm,
	};
	uint32_t blocks = 0;

	memcpy(&k.raw, bhs + 16, sizeof(k.raw));
	if (!(bhs[0] & 0x40))
		c->exp_cmdsn = be32(bhs + 24) + 1;
	switch (k.cdb[0]) {
	case 0x28: case 0x2a:	/* READ(10), WRITE(10) */
		k.lba = be32(k.cdb + 2);
		blocks = (uint32_t)k.cdb[7] << 8 | k.cdb[8];
		break;
	case 0x88: case 0x8a:	/* READ(16), WRITE(16) */
		k.lba = be64(k.cdb + 2);
		blocks = be32(k.cdb + 10);
		break;
	}
	k.off = k.lba * BLOCK;
	k.len = blocks * BLOCK;
	/* What the modes left: a held answer, a silence, a held READ. */
	if (AFTER_ANY(command, c, &k))
		return;
	switch (k.cdb[0]) {
	case 0x00:	/* TEST UNIT READY */
	case 0x35:	/* SYNCHRONIZE CACHE */
	case 0x91:
		send_rsp(c, k.itt, 0, 0, 0, 0, false, 0);
		return;
	case 0x12:	/* INQUIRY */
		scsi_inquiry(c, &k);
		return;
	case 0xa0: {	/* REPORT LUNS: LUN 0 */
		uint8_t buf[16] = { 0 };

		buf[3] = 8;
		answer_data(c, &k, buf, k.edtl < 16 ? k.edtl : 16);
		return;
	}
	case 0x25: case 0x9e:	/* READ CAPACITY (10), (16) */
		if (scsi_capacity(c, &k))
			return;
		break;
	case 0x28: case 0x88:
		scsi_read(c, &k);
		return;
	case 0x2a: case 0x8a:
		scsi_write(c, &k);
		return;
	}
	/* INVALID COMMAND OPERATION CODE */
	send_rsp(c, k.itt, 0x02, 0x05, 0x20, 0, false, 0);
}

/*
 * A NOP-Out: a ping from the initiator (a real ITT), answered unless a mode
 * takes it; or the answer to a NOP-In ping of the target's (reserved ITT).
 */
static void do_nop(struct conn *c, uint8_t *bhs, const uint8_t *data, uint32_t dlen)
{
	uint32_t itt = be32(bhs + 16);

	if (!(bhs[0] & 0x40))
		c->exp_cmdsn = be32(bhs + 24) + 1;
	if (itt == 0xffffffff) {
		AFTER_ANY(nop_answer, c, be32(bhs + 20), data, dlen);
		return;
	}
	if (mode->trigger == TR_READ_PING && mode->ping(mode, c, itt))
		return;
	if (AFTER_ANY(ping, c, itt))
		return;
	send_simple(c, 0x20, itt, 0xffffffff, true, data, dlen);
}

/* Task management: done (a held command is dropped), unless a mode says otherwise. */
static void do_tmf(struct conn *c, uint8_t *bhs)
{
	struct tmf t = {
		.fn = bhs[1] & 0x7f, .itt = be32(bhs + 16), .ref_itt = be32(bhs + 20),
		.rsp_itt = be32(bhs + 16), .held = -1, .note = "",
	};

	AFTER_ALL(tmf, c, &t);
	printf("evil: TMF function %u%s\n", t.fn, t.note);
	fflush(stdout);
	if (t.ignore)
		return;
	if (send_tmf_rsp(c, t.rsp_itt, t.response))
		return;
	if (t.twice && send_tmf_rsp(c, t.itt, 0))
		return;
	AFTER_ALL(tmf_answered, c, &t);
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
		do_scsi(c, p, bhs, p + HDRS, dlen);
		break;
	case 0x05:	/* SCSI Data-Out */
		do_dataout(c, bhs, p + HDRS, dlen);
		break;
	case 0x00:	/* NOP-Out */
		do_nop(c, bhs, p + HDRS, dlen);
		break;
	case 0x02:	/* Task management */
		do_tmf(c, bhs);
		break;
	case 0x04:	/* Text: nothing to say */
		if (!(bhs[0] & 0x40))
			c->exp_cmdsn = be32(bhs + 24) + 1;
		send_simple(c, 0x24, be32(bhs + 16), 0xffffffff, true, NULL, 0);
		break;
	case 0x06:	/* Logout */
		AFTER_ALL(logout);
		if (!(bhs[0] & 0x40))
			c->exp_cmdsn = be32(bhs + 24) + 1;
		printf("evil: Logout Request itt 0x%08x reason %u answered at %.3f\n", be32(bhs + 16),
		       bhs[1] & 0x7f, now_s());
		fflush(stdout);
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
	if (kind == WR_LATE) {
		late_done(c, wc, idx);
		return;
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
		pe->rdma_busy = false;
		if (!pe->unsol_left)
			write_done(c, pe);
		break;
	}
	default:
		break;
	}
}

/* A connection requested: set it up and accept it (a CM mode spoils the accept). */
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
	/* The modes' state of the last connection goes with it. */
	for (size_t a_ = 0; a_ < NAFTERS; a_++)
		if (afters[a_]->state)
			memset(afters[a_]->state, 0, afters[a_]->state_size);
	c->id = id;
	c->pd = ibv_alloc_pd(id->verbs);
	c->ch = ibv_create_comp_channel(id->verbs);
	if (!c->pd || !c->ch)
		goto fail;
	c->cq = ibv_create_cq(id->verbs, nrx + 2 * NTX + NPEND, NULL, c->ch, 0);
	c->rx = calloc((size_t)nrx, RX_SIZE);
	c->tx = calloc(NTX, TX_SIZE);
	if (!c->cq || !c->rx || !c->tx)
		goto fail;
	c->rx_mr = ibv_reg_mr(c->pd, c->rx, (size_t)nrx * RX_SIZE, IBV_ACCESS_LOCAL_WRITE);
	c->tx_mr = ibv_reg_mr(c->pd, c->tx, (size_t)NTX * TX_SIZE, 0);
	c->disk_mr = ibv_reg_mr(c->pd, disk, disk_size + SCRATCH, IBV_ACCESS_LOCAL_WRITE);
	if (!c->rx_mr || !c->tx_mr || !c->disk_mr)
		goto fail;
	qa.send_cq = c->cq;
	qa.recv_cq = c->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 2 * NTX + NPEND;
	qa.cap.max_recv_wr = (uint32_t)nrx;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, c->pd, &qa))
		goto fail;
	fcntl(c->ch->fd, F_SETFL, fcntl(c->ch->fd, F_GETFL) | O_NONBLOCK);
	for (int i = 0; i < nrx; i++)
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
	if (mode->trigger == TR_ACCEPT)
		mode->accept(mode, c, &cp);
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

static void on_usr1(int sig)
{
	(void)sig;
	dump_wanted = 1;
}

static void on_usr2(int sig)
{
	(void)sig;
	rearm_wanted = 1;
}

/*
 * The mode that fired last, armed again, with the early answers' state
 * cleared (the only modes the test plays again: a guess that missed).
 */
static void rearm(void)
{
	if (next_mode == 0)
		return;
	next_mode--;
	mode = modes[next_mode];
	memset(&early_rsp, 0, sizeof(early_rsp));
	printf("evil: re-armed %s\n", mode->name);
	fflush(stdout);
}

/* What the current connection waits for: WRITEs missing data, sends in flight. */
static void state_dump(struct conn *c)
{
	int n = 0;

	printf("evil: state at %.3f: %s", now_s(), c ? "" : "no connection\n");
	if (!c) {
		fflush(stdout);
		return;
	}
	printf("%d sends in flight, exp_cmdsn %u, statsn %u", c->tx_inflight, c->exp_cmdsn,
	       c->statsn);
	AFTER_ALL(dump);
	printf("\n");
	for (int i = 0; i < NPEND; i++) {
		struct pend *pe = &c->pend[i];

		if (!pe->used)
			continue;
		n++;
		printf("evil: state: WRITE itt 0x%08x, %u bytes, %u unsolicited bytes not come%s\n",
		       pe->itt, pe->len, pe->unsol_left, pe->rdma_busy ? ", RDMA READ in flight" : "");
	}
	printf("evil: state: %d WRITEs waiting\n", n);
	fflush(stdout);
}

static void usage(void)
{
	fprintf(stderr, "usage: iser-evil -a IP [-p PORT] [-m MODE[,MODE...]] [-k N | -l LBA] [-s MB] [-u MRDSL] [-r NRX] [-v]\n"
		"       iser-evil -P LBA:BLOCKS   (prints the stamp pattern of those blocks)\nmodes:");
	for (size_t i = 0; i < NMODES_TABLE; i++)
		fprintf(stderr, " %s", modes_table[i].name);
	fprintf(stderr, "\n");
	exit(2);
}

/* -m MODE[,MODE...]: the modes to show, in order. */
static void parse_modes(char *list)
{
	char *save = NULL;

	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t i;

		for (i = 0; i < NMODES_TABLE; i++)
			if (!strcmp(t, modes_table[i].name))
				break;
		if (i == NMODES_TABLE || nmodes == MAX_MODES)
			usage();
		modes[nmodes++] = &modes_table[i];
	}
	mode = nmodes ? modes[0] : &modes_table[0];
}

/*
 * Every table entry has the hook its trigger calls, and its aftermaths are
 * in afters[]: a mistake in the table fails at once, not in a test.
 */
static void table_check(void)
{
	for (size_t i = 0; i < NMODES_TABLE; i++) {
		const struct misbehaviour *m = &modes_table[i];
		bool ok;

		switch (m->trigger) {
		case TR_ACCEPT: ok = m->accept; break;
		case TR_LOGIN: case TR_LOGIN_OP: ok = m->login; break;
		case TR_READ: ok = m->read || m->reply; break;
		case TR_WRITE: ok = m->write; break;
		case TR_READ_PING: ok = m->read && m->ping; break;
		default: ok = true; break;
		}
		for (size_t j = 0; j < 2; j++) {
			size_t a = 0;

			while (m->after[j] && a < NAFTERS && afters[a] != m->after[j])
				a++;
			ok = ok && a < NAFTERS;
		}
		if (!ok) {
			fprintf(stderr, "evil: mode %s: its hooks do not match its trigger\n",
				m->name);
			exit(2);
		}
	}
}

/*
 * The current connection's turn in the main loop: its completions, what
 * waits for a time (a late access, a held READ, a hang-up). Returns the
 * poll timeout (ms).
 */
static int conn_turn(struct conn *c, struct pollfd *fd)
{
	int timeout = 1000;

	fd->fd = c->ch->fd;
	fd->events = POLLIN;
	if (ibv_req_notify_cq(c->cq, 0))
		c->closing = true;
	if (poll_cq(c, false))
		c->closing = true;
	for (size_t a = 0; a < NAFTERS; a++) {
		long ms = afters[a]->timer ? afters[a]->timer(c) : -1;

		if (ms >= 0 && ms < timeout)
			timeout = (int)ms;
	}
	return timeout;
}

/*
 * SIGUSR2 is blocked but while the loop waits (ppoll), so that one sent
 * after the loop looked for it still ends the wait.
 */
static int serve(void)
{
	sigset_t usr2, waiting;

	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	if (sigprocmask(SIG_BLOCK, &usr2, &waiting))
		return 1;
	sigdelset(&waiting, SIGUSR2);
	for (;;) {
		struct pollfd fds[2] = { { .fd = ec->fd, .events = POLLIN } };
		int nfds = 1, timeout = 1000;
		struct timespec ts;

		if (cur) {
			timeout = conn_turn(cur, &fds[1]);
			nfds = 2;
		}
		if (dump_wanted) {
			dump_wanted = 0;
			state_dump(cur);
		}
		if (rearm_wanted) {
			rearm_wanted = 0;
			rearm();
		}
		if (cur && cur->closing && !cur->disconnecting) {
			cur->disconnecting = true;
			rdma_disconnect(cur->id);
		}
		ts.tv_sec = timeout / 1000;
		ts.tv_nsec = timeout % 1000 * 1000000L;
		if (ppoll(fds, nfds, timeout < 0 ? NULL : &ts, &waiting) < 0 && errno != EINTR)
			return 1;
		if (cur && (fds[1].revents & POLLIN)) {
			struct ibv_cq *cq;
			void *ctx;

			if (!ibv_get_cq_event(cur->ch, &cq, &ctx))
				ibv_ack_cq_events(cq, 1);
		}
		cm_poll();
		if (cur && cur->dead) {
			conn_end(cur);
			cur = NULL;
		}
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(3260) };
	struct rdma_cm_id *listen_id;
	const char *addr = NULL;
	int opt;

	table_check();
	memset(slot_next, 0xff, sizeof(slot_next));	/* -1: not seen */
	mode = &modes_table[0];
	while ((opt = getopt(argc, argv, "a:p:m:k:l:s:u:r:P:v")) != -1) {
		switch (opt) {
		case 'u': unsol_mrdsl = (uint32_t)atoi(optarg); break;
		case 'r': nrx = atoi(optarg); break;
		case 'P': {
			unsigned long long lba, n;

			if (sscanf(optarg, "%llu:%llu", &lba, &n) != 2)
				usage();
			for (unsigned long long b = lba * BLOCK; b < (lba + n) * BLOCK; b++)
				putchar(stamp_byte(b));
			return fflush(stdout) ? 1 : 0;
		}
		case 'a': addr = optarg; break;
		case 'p': sin.sin_port = htons((uint16_t)atoi(optarg)); break;
		case 'k': fire_at = atoi(optarg); break;
		case 'l': fire_lba = atoll(optarg); break;
		case 's': disk_size = (size_t)atoi(optarg) << 20; break;
		case 'v': verbose = true; break;
		case 'm': parse_modes(optarg); break;
		default: usage();
		}
	}
	if (!addr || inet_pton(AF_INET, addr, &sin.sin_addr) != 1 || disk_size < (1u << 20) ||
	    (unsol_mrdsl && (unsol_mrdsl < 512 || unsol_mrdsl > MAX_DSL)) || nrx < 1 ||
	    nrx > 8192)
		usage();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGUSR1, on_usr1);
	signal(SIGUSR2, on_usr2);
	/* The disk, and scratch after it for INQUIRY and friends (a page) and
	 * for late RDMA READs. */
	disk = calloc(1, disk_size + SCRATCH);
	ec = rdma_create_event_channel();
	if (!disk || !ec || rdma_create_id(ec, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&sin) || rdma_listen(listen_id, 4)) {
		fprintf(stderr, "evil: cannot listen on %s:%u: %s\n", addr,
			ntohs(sin.sin_port), strerror(errno));
		return 1;
	}
	fcntl(ec->fd, F_SETFL, fcntl(ec->fd, F_GETFL) | O_NONBLOCK);
	printf("evil: listening on %s:%u, first mode %s of %d\n", addr, ntohs(sin.sin_port),
	       mode->name, nmodes);
	fflush(stdout);
	return serve();
}
