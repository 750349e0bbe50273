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
 * CM header in the accept of the next connection (cm_garbage). With -u,
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
 * silent-redo is silent-all (every TMF refused, so the initiator ends in a
 * session reset) whose trigger READ, sent again on the next connection, is
 * held REDO_HOLD_S seconds before it is served: "evil: silent-redo:
 * retried READ itt ... held" when it comes, "... served after N ms" when
 * its data and response go. A command the initiator completed meanwhile
 * (a stale task's completion landing on the retried command) reads
 * whatever its buffer held.
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

enum mode {
	M_NONE, M_SHORT, M_DSL_LONG, M_OVERRUN, M_UNKNOWN_ITT, M_STALE_ITT,
	M_INV_OTHER, M_INV_BAD, M_BAD_VERSION, M_BAD_FLAGS, M_AHS, M_BAD_OPCODE,
	M_FLOOD_NOP, M_FLOOD_ASYNC, M_SILENT, M_SILENT_ALL, M_LOGIN_LONG,
	M_LOGIN_DSL, M_LOGIN_BAD, M_DROP, M_PING, M_LATE_WRITE, M_LATE_READ,
	M_LATE_ABORT, M_EARLY_STATUS, M_LOGOUT_PING, M_DATA_IN, M_R2T, M_REJECT,
	M_WRONG_DATA, M_LOST_WRITE,
	/* Each in a phase of its own (hostile.sh): see conn_modes_doc below. */
	M_CM_RSVD, M_CM_SHORT, M_CM_LONG, M_BURST_MAX, M_BURST_MIN, M_INV_GLOBAL,
	M_LOGOUT_UNPROMPTED, M_ASYNC_LOGOUT,
	M_ASYNC_DROPCONN, M_ASYNC_DROPALL, M_ASYNC_NEGOTIATE, M_NOP_DATA, M_BIG_NOP,
	M_BIG_SENSE, M_BIG_RSP, M_INV_NONRESP, M_INV_NOMR, M_STALE_HELD, M_FF_LOGIN,
	M_TMF_SPOOF, M_TMF_DUP, M_ITT_JUNK, M_SILENT_REDO,
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
	[M_LATE_WRITE] = "late-write", [M_LATE_READ] = "late-read",
	[M_LATE_ABORT] = "late-abort", [M_EARLY_STATUS] = "early-status",
	[M_LOGOUT_PING] = "logout-ping", [M_DATA_IN] = "data-in", [M_R2T] = "r2t",
	[M_REJECT] = "reject",
	/* A broken target, to show by hand that hostile.sh's checks can fail. */
	[M_WRONG_DATA] = "wrong-data", [M_LOST_WRITE] = "lost-write",
	[M_CM_RSVD] = "cm-rsvd", [M_CM_SHORT] = "cm-short", [M_CM_LONG] = "cm-long",
	[M_BURST_MAX] = "burst-max", [M_BURST_MIN] = "burst-min",
	[M_INV_GLOBAL] = "inv-global",
	[M_LOGOUT_UNPROMPTED] = "logout-unprompted", [M_ASYNC_LOGOUT] = "async-logout",
	[M_ASYNC_DROPCONN] = "async-dropconn", [M_ASYNC_DROPALL] = "async-dropall",
	[M_ASYNC_NEGOTIATE] = "async-negotiate", [M_NOP_DATA] = "nop-data",
	[M_BIG_NOP] = "big-nop", [M_BIG_SENSE] = "big-sense", [M_BIG_RSP] = "big-rsp",
	[M_INV_NONRESP] = "inv-nonresp", [M_INV_NOMR] = "inv-nomr",
	[M_STALE_HELD] = "stale-held", [M_FF_LOGIN] = "ff-login",
	[M_TMF_SPOOF] = "tmf-spoof", [M_TMF_DUP] = "tmf-dup", [M_ITT_JUNK] = "itt-junk",
	[M_SILENT_REDO] = "silent-redo",
};

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
	bool late;		/* late-read: plain SEND, then read it again */
};

/*
 * How long after a command's end its old STag is tried: long enough that an
 * initiator starved of CPU (a guest under TCG on a loaded host took over
 * 50 ms to handle a response) has handled the end, so that a STag still
 * valid then is its bug and not its slowness; short enough that the task
 * slot's MR is not registered 256 times meanwhile (rkeys wrap at 256).
 */
#define LATE_MS 500

/* An RDMA access with a command's old STag, made LATE_MS after its end. */
struct late {
	bool on;
	bool posted;		/* posted, its completion not seen yet */
	bool write;		/* RDMA WRITE (a READ's rkey) or RDMA READ */
	uint32_t rkey;
	uint64_t va;
	uint32_t len;
	uint64_t src;		/* late write: disk offset of the bytes sent */
	struct timespec due;
};

/* early-status: a WRITE answered before its Data-Outs came. */
#define NEARLY 8
struct early {
	bool used;
	uint32_t itt;
	uint64_t off;		/* the disk offset the WRITE named */
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
	bool nomr_held;		/* the READ held back by inv-nomr */
	uint32_t held_itt;
	uint32_t held_rstag;
	uint64_t held_rva;
	uint32_t held_len, held_lba;
	/* ping: NOP-In pings sent one at a time, each when the last is
	 * answered; pings_sent 0 when none is going on */
	int pings_sent;
	struct late late;
	/* late-abort, tmf-spoof, tmf-dup (abort_mode): the READ left
	 * unanswered, until its ABORT TASK */
	bool abort_wait;
	enum mode abort_mode;
	uint32_t abort_itt, abort_rstag, abort_len;
	uint64_t abort_rva, abort_off;
	/* tmf-spoof: the last NOP-Out ping left unanswered meanwhile */
	bool ping_held;
	uint32_t ping_itt;
	/* logout-ping: disconnect at disc_due */
	bool disc_on;
	struct timespec disc_due;
	struct early early[NEARLY];
	uint32_t first_burst;	/* -u: the FirstBurstLength answered (0: none yet) */
	uint32_t prime_rstag;	/* inv-global: the priming READ's STag */
	bool burst_seen;	/* a burst mode fired on this connection */
	/* silent-redo: the retried trigger READ, served at redo_due */
	bool redo_on;
	struct timespec redo_due;
	double redo_t0;
	uint32_t redo_itt, redo_rstag, redo_len;
	uint64_t redo_rva, redo_off;
};

/* ping: how many NOP-Ins that ask for an answer (a valid TTT) it sends. */
#define PINGS 600
#define PING_TTT 0x50000000u

/* The misbehaviours to show, in order, one per trigger; mode is the next. */
#define MAX_MODES 64
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
/* logout-ping: armed by its trigger READ, fired by the next NOP-Out ping */
static bool nop_armed;
/*
 * big-sense, big-rsp: the READ of block retry_lba was answered with CHECK
 * CONDITION (UNIT ATTENTION); the SCSI layer must send it again.
 */
static bool retry_armed;
static uint64_t retry_lba;
/*
 * silent-redo: the trigger READ went unanswered; its retry on a later
 * connection is held REDO_HOLD_S seconds.
 */
#define REDO_HOLD_S 5
static bool redo_armed;
static uint64_t redo_lba;
/*
 * stale-held: the trigger READ is held back and the connection dropped; on
 * a later connection, its response goes out when a SCSI command comes whose
 * ITT names the same libiscsi task slot (ITT & 0x1fff) with another session
 * age (bits 28-31). libiscsi's ITTs are in the initiator's byte order,
 * which is this host's (the target runs beside it).
 */
static bool stale_on;
static uint32_t stale_itt;	/* as on the wire (big-endian read) */
static uint32_t stale_raw;	/* in the initiator's byte order */
#define ITT_SLOT(raw) ((raw) & 0x1fffu)
#define ITT_AGE(raw) (((raw) >> 28) & 0xfu)
/*
 * itt-junk: bits ORed into the READ's ITT in the initiator's byte order
 * (as stale_raw). libiscsi builds an ITT as index | age << 28 (build_itt)
 * in host order and puts it in the header unconverted (no cpu_to_be32);
 * of what comes back it reads only the index (get_itt: ISCSI_ITT_MASK,
 * bits 0-12) and the age (ISCSI_AGE_SHIFT, bits 28-31). Bits 13-23 lie in
 * the part it ignores (13-27): libiscsi would take the response for the
 * READ's. ORed into the big-endian value be32() reads instead, they would
 * set bits 8-12 of the index on a little-endian host (another task).
 */
#define ITT_JUNK 0x00ffe000u
/* nop-data: the TTT of its ping */
#define NOP_DATA_TTT 0x4e000001u
/* lost-write: the next WRITE of block LOST_LBA is answered GOOD unread */
static bool lost_armed;
#define LOST_LBA 4096
/*
 * -u N: negotiate InitialR2T=No and ImmediateData=Yes, declare
 * MaxRecvDataSegmentLength=N, first and largest burst FIRST_BURST: a WRITE
 * comes as immediate data and unsolicited Data-Outs of N bytes. 0: off.
 */
static uint32_t unsol_mrdsl;
#define FIRST_BURST 262144u
/*
 * The largest FirstBurstLength and MaxBurstLength the target answers:
 * FIRST_BURST, or from burst-max on 2^24 - 1 (the most RFC 7143 allows),
 * from burst-min on 512 (the least). Each connection keeps the
 * FirstBurstLength its login settled on.
 */
static uint32_t burst_cap = FIRST_BURST;
#define BURST_MAX 16777215u
#define BURST_MIN 512u
/*
 * A burst mode fires on the first login, and then only on the first login
 * after a Logout Request: the reconnection of a failed connection keeps the
 * session's bursts.
 */
static bool burst_ready = true;
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

static struct conn *conn_new(struct rdma_cm_event *ev);
/* SIGUSR1: print the commands the target waits on (state_dump). */
static volatile sig_atomic_t dump_wanted;
static void logv(const char *fmt, ...);
static double now_s(void);

/*
 * Handles the CM events that are there, without waiting. Called from the
 * main loop and while waiting for send buffers (a flood must notice that the
 * initiator went away). A connection the CM ends is marked dead; the main
 * loop frees it.
 */
static void late_drain(struct conn *c);
static void conn_free(struct conn *c);

static void cm_poll(void)
{
	struct rdma_cm_event *ev;

	while (rdma_get_cm_event(ec, &ev) == 0) {
		enum rdma_cm_event_type t = ev->event;
		struct rdma_cm_id *id = ev->id;

		logv("cm event %s\n", rdma_event_str(t));
		if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
			if (cur && cur->silent_all && !cur->dead) {
				/*
				 * A new connection while the one gone silent is
				 * still up: the initiator gave up on it without
				 * a disconnect. A target reinstates the session:
				 * the old connection goes, the new one is taken.
				 */
				printf("evil: connection request while the silent connection is up: dropping it at %.3f\n",
				       now_s());
				fflush(stdout);
				rdma_disconnect(cur->id);
				late_drain(cur);
				conn_free(cur);
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

/*
 * Modes that fire when a connection is accepted (the CM modes) or at its
 * operational login stage (the burst modes): never on a READ.
 */
static bool conn_mode(enum mode m)
{
	return m == M_CM_RSVD || m == M_CM_SHORT || m == M_CM_LONG || m == M_BURST_MAX ||
	       m == M_BURST_MIN;
}

static bool login_mode(enum mode m)
{
	return m == M_LOGIN_LONG || m == M_LOGIN_DSL || m == M_LOGIN_BAD || conn_mode(m);
}

static bool armed(enum mode m)
{
	return mode == m;
}

/* Modes that a WRITE at the trigger block fires (after the priming READ). */
static bool write_mode(enum mode m)
{
	return m == M_LATE_READ || m == M_EARLY_STATUS;
}

/* Seconds since boot (CLOCK_MONOTONIC), to compare with dmesg's stamps. */
/* A line in the kernel log, so that the test times it on the kernel's clock. */
static void kmsg(const char *line)
{
	FILE *k = fopen("/dev/kmsg", "w");

	if (!k)
		return;
	fprintf(k, "%s\n", line);
	fclose(k);
}

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

/*
 * big-sense, big-rsp: CHECK CONDITION, UNIT ATTENTION (POWER ON, RESET, OR
 * BUS DEVICE RESET OCCURRED: the SCSI layer retries the command) in a data
 * segment of dlen bytes: SenseLength 252, the largest sense SPC allows
 * (fixed format, additional length 244), then response data ('r') up to
 * dlen. The READ's rkey is invalidated with it when rstag is non-zero.
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
	c->last_itt = itt;
	c->have_last = true;
	return tx_post(c, i, HDRS + ((dlen + 3) & ~3u), rstag, rstag != 0);
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

/*
 * late-write, late-read, late-abort, tmf-spoof, tmf-dup, itt-junk: LATE_MS
 * from now, use a STag the initiator gave for a command that has ended
 * since (an RDMA WRITE of the bytes at disk offset src, or an RDMA READ
 * into scratch memory).
 */
static void late_arm(struct conn *c, bool write, uint32_t rkey, uint64_t va, uint32_t len,
		     uint64_t src)
{
	c->late = (struct late){
		.on = true, .write = write, .rkey = rkey, .va = va,
		.len = len < LATE_MAX ? len : LATE_MAX, .src = src,
	};
	ts_after(&c->late.due, LATE_MS);
	printf("evil: late %s armed: rkey 0x%08x va 0x%llx, %u bytes, in %d ms\n",
	       write ? "write" : "read", rkey, (unsigned long long)va, c->late.len, LATE_MS);
	fflush(stdout);
}

/* silent-redo: the held retry of the trigger READ, served now. */
static void redo_serve(struct conn *c)
{
	long held = (long)((now_s() - c->redo_t0) * 1000);

	c->redo_on = false;
	if (rdma_op(c, true, c->redo_rstag, c->redo_rva, c->redo_off, c->redo_len, 0) ||
	    send_rsp(c, c->redo_itt, 0, 0, 0, 0, c->redo_rstag != 0, c->redo_rstag)) {
		printf("evil: silent-redo: retried READ itt 0x%08x: cannot serve it\n", c->redo_itt);
	} else {
		printf("evil: silent-redo: retried READ itt 0x%08x served after %ld ms\n",
		       c->redo_itt, held);
	}
	fflush(stdout);
}

static void late_post(struct conn *c)
{
	struct late *l = &c->late;
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

	c->late.posted = false;
	if (wc->status == IBV_WC_SUCCESS) {
		printf("evil: late %s completed", what);
		if (!write)
			printf(" (the bytes read are %s the command wrote)",
			       memcmp(disk + disk_size + SCRATCH_LATE, disk + c->late.src,
				      c->late.len) ? "not what" : "what");
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

static void put_text(uint8_t *d, size_t *len, const char *key, const char *val)
{
	*len += (size_t)sprintf((char *)d + *len, "%s=%s", key, val) + 1;
}

/*
 * burst-max, burst-min (-u only): from this login on, answer
 * FirstBurstLength and MaxBurstLength with at most 2^24 - 1 or 512.
 */
static void burst_fire(struct conn *c)
{
	if (c->burst_seen || !burst_ready || (!armed(M_BURST_MAX) && !armed(M_BURST_MIN)))
		return;
	c->burst_seen = true;
	burst_ready = false;
	burst_cap = armed(M_BURST_MAX) ? BURST_MAX : BURST_MIN;
	fire();
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
	if (csg == 1 && unsol_mrdsl)
		burst_fire(c);
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
		if (!strcmp(kv, "AuthMethod")) {
			put_text(d, &len, kv, "None");
		} else if (!strcmp(kv, "ImmediateData")) {
			put_text(d, &len, kv, unsol_mrdsl ? eq + 1 : "No");
		} else if (!strcmp(kv, "InitialR2T")) {
			put_text(d, &len, kv, unsol_mrdsl ? eq + 1 : "Yes");
		} else if (unsol_mrdsl && (!strcmp(kv, "FirstBurstLength") ||
					   !strcmp(kv, "MaxBurstLength"))) {
			char v[16];
			unsigned long n = strtoul(eq + 1, NULL, 0);

			n = n < burst_cap ? n : burst_cap;
			snprintf(v, sizeof(v), "%lu", n);
			put_text(d, &len, kv, v);
			if (!strcmp(kv, "FirstBurstLength"))
				c->first_burst = (uint32_t)n;
			printf("evil: login: %s offered %s, answered %lu\n", kv, eq + 1, n);
			fflush(stdout);
		} else {
			put_text(d, &len, kv, eq + 1);
		}
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

/*
 * inv-global: the READ's response by SEND_WITH_INV of the STag it was
 * given, whatever the initiator's CM header said. With always_register=0 a
 * one-segment READ's STag is the PD's global rkey: the same for the
 * priming READ, which the target says.
 */
static void inv_global(struct conn *c, uint32_t itt, uint32_t rstag)
{
	printf("evil: inv-global: READ itt 0x%08x STag 0x%08x, the priming READ's 0x%08x: %s; initiator's CM header %s Send with Invalidate\n",
	       itt, rstag, c->prime_rstag, rstag == c->prime_rstag ? "same key" : "another key",
	       c->inv_ok ? "takes" : "refuses");
	fflush(stdout);
	c->inv_ok = true;
	send_rsp(c, itt, 0, 0, 0, 0, true, rstag);
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
	case M_DATA_IN:
	case M_R2T:
		/*
		 * The PDUs iSER replaces with RDMA: a Data-In carrying the
		 * READ's status (F and S bits), or an R2T asking for 4 KiB.
		 */
		i = tx_get(c);
		if (i < 0)
			return;
		p = pdu_start(c, i);
		bhs = p + ISER_HDR;
		put32(bhs + 16, itt);
		if (m == M_DATA_IN) {
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
		break;
	case M_REJECT:
		/*
		 * A Reject (protocol error) of the READ's command, its header
		 * in the data segment; the READ stays unanswered.
		 */
		i = tx_get(c);
		if (i < 0)
			return;
		p = pdu_start(c, i);
		bhs = p + ISER_HDR;
		bhs[0] = 0x3f;
		bhs[1] = 0x80;
		bhs[2] = 0x04;
		put24(bhs + 5, BHS);
		put32(bhs + 16, 0xffffffff);
		set_sn(c, bhs, true);
		memset(p + HDRS, 0, BHS);
		p[HDRS] = 0x01;
		p[HDRS + 1] = 0xc0;
		put32(p + HDRS + 16, itt);
		tx_post(c, i, HDRS + BHS, 0, false);
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
	case M_INV_GLOBAL:
		inv_global(c, itt, rstag);
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
	case M_LOGOUT_UNPROMPTED:
		/* The READ's response, then a Logout Response naming its ITT. */
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		send_simple(c, 0x26, itt, 0, true, NULL, 0);
		break;
	case M_ASYNC_LOGOUT:
		/* The READ's response, then a request to log out within 2 s
		 * (Parameter3); the Logout Request gets its answer. */
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		send_async(c, 1, 0, 0, 2);
		break;
	case M_ASYNC_DROPCONN:
	case M_ASYNC_DROPALL:
		/*
		 * The READ's response, then "dropping connection 0" with
		 * Time2Wait 2 s (or all connections, 20 s: longer than a
		 * reconnect takes under TCG, so that the wait shows), Time2Retain
		 * 30 s, and the hang-up 200 ms later.
		 */
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		if (m == M_ASYNC_DROPCONN)
			send_async(c, 2, 0, 2, 30);
		else
			send_async(c, 3, 0, 20, 30);
		c->disc_on = true;
		ts_after(&c->disc_due, 200);
		break;
	case M_ASYNC_NEGOTIATE:
		/* The READ's response, then a request to renegotiate
		 * parameters (a Text exchange) within 2 s. */
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		send_async(c, 4, 0, 0, 2);
		break;
	case M_NOP_DATA:
		/* The READ's response, then a ping (valid TTT) with 200 bytes. */
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		send_nopin(c, NOP_DATA_TTT, 200, 0, false);
		break;
	case M_BIG_NOP:
		/* The READ's response, then a NOP-In (no ping) with 8 KiB. */
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		send_nopin(c, 0xffffffff, MAX_DSL, 0, false);
		break;
	case M_BIG_SENSE:
	case M_BIG_RSP:
		/*
		 * CHECK CONDITION (UNIT ATTENTION) with 252 bytes of sense: the
		 * segment is 254 bytes (big-sense) or 8 KiB (big-rsp, the rest
		 * response data), the MaxRecvDataSegmentLength riser declares.
		 */
		retry_armed = true;
		send_rsp_ua(c, itt, rstag, m == M_BIG_SENSE ? 254 : MAX_DSL);
		break;
	case M_INV_NONRESP:
		/* A NOP-In that invalidates the READ's rkey, then the READ's
		 * response by plain SEND. */
		c->inv_ok = true;
		send_nopin(c, 0xffffffff, 0, rstag, true);
		send_rsp(c, itt, 0, 0, 0, 0, false, 0);
		break;
	case M_FF_LOGIN:
		/* The READ's response, then a Login Response (final, into the
		 * full-feature phase) naming its ITT. */
		send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
		i = tx_get(c);
		if (i < 0)
			return;
		p = pdu_start(c, i);
		bhs = p + ISER_HDR;
		bhs[0] = 0x23;
		bhs[1] = 0x80 | (1 << 2) | 3;
		bhs[15] = 1;	/* TSIH */
		put32(bhs + 16, itt);
		set_sn(c, bhs, true);
		tx_post(c, i, HDRS, 0, false);
		break;
	default:
		break;
	}
}

/* A SCSI command: a tiny disk. Returns after the response is posted. */
/*
 * A WRITE's data is all in the disk: answer it. late-read: with a plain
 * SEND, and RDMA-READ its write STag again LATE_MS later.
 */
static void write_done(struct conn *c, struct pend *pe)
{
	pe->used = false;
	if (pe->late) {
		send_rsp(c, pe->itt, 0, 0, 0, 0, false, 0);
		late_arm(c, false, pe->stag, pe->va, pe->rdma_len, pe->off + pe->len - pe->rdma_len);
		return;
	}
	send_rsp(c, pe->itt, 0, 0, 0, 0, pe->stag != 0, pe->stag);
}

/*
 * A Data-Out: unsolicited data of a WRITE that waits for it, or (early-status)
 * one for a WRITE already answered, whose bytes must still be its own.
 */
static void do_dataout(struct conn *c, uint8_t *bhs, const uint8_t *data, uint32_t dlen)
{
	uint32_t itt = be32(bhs + 16), boff = be32(bhs + 40);
	int i;

	for (i = 0; i < NEARLY; i++) {
		struct early *e = &c->early[i];
		long bad;

		if (!e->used || e->itt != itt)
			continue;
		bad = stamp_mismatch(data, e->off + boff, dlen);
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
		return;
	}
	for (i = 0; i < NPEND; i++) {
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

static void do_scsi(struct conn *c, uint8_t *iser, uint8_t *bhs, const uint8_t *data,
		    uint32_t imm)
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
	/* early-status: a new command with that ITT: the old one is over. */
	for (int e = 0; e < NEARLY; e++)
		if (c->early[e].used && c->early[e].itt == itt)
			c->early[e].used = false;
	if (stale_on && armed(M_STALE_HELD)) {
		uint32_t raw;

		memcpy(&raw, bhs + 16, sizeof(raw));
		if (ITT_SLOT(raw) == ITT_SLOT(stale_raw) && ITT_AGE(raw) != ITT_AGE(stale_raw)) {
			/* The held READ's response, before this command's. */
			stale_on = false;
			fire();
			printf("evil: stale-held: response for held itt 0x%08x sent at command itt 0x%08x (slot 0x%x, age %u, then %u)\n",
			       stale_itt, itt, ITT_SLOT(raw), ITT_AGE(stale_raw), ITT_AGE(raw));
			fflush(stdout);
			send_rsp(c, stale_itt, 0, 0, 0, 0, false, 0);
		}
	}
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
		if (c->nomr_held && armed(M_INV_NOMR)) {
			/*
			 * inv-nomr: the held READ's data, then this command's
			 * response (it has no data, no STag) invalidating the
			 * READ's rkey, then the READ's by plain SEND.
			 */
			c->nomr_held = false;
			if (rdma_op(c, true, c->held_rstag, c->held_rva,
				    (uint64_t)c->held_lba * BLOCK, c->held_len, 0))
				return;
			fire();
			printf("evil: inv-nomr: TEST UNIT READY itt 0x%08x answered invalidating rkey 0x%08x of READ itt 0x%08x\n",
			       itt, c->held_rstag, c->held_itt);
			fflush(stdout);
			c->inv_ok = true;
			send_rsp(c, itt, 0, 0, 0, 0, true, c->held_rstag);
			send_rsp(c, c->held_itt, 0, 0, 0, 0, false, 0);
			return;
		}
		send_rsp(c, itt, 0, 0, 0, 0, false, 0);
		return;
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
		bool trig;

		if (off + len > disk_size || len != edtl || !(flags & 0x04)) {
			send_rsp(c, itt, 0x02, 0x05, 0x21, 0, false, 0);
			return;
		}
		c->reads++;
		if (redo_armed && !c->silent && lba == redo_lba && !c->redo_on) {
			redo_armed = false;
			c->redo_on = true;
			c->redo_itt = itt;
			c->redo_rstag = rstag;
			c->redo_rva = rva;
			c->redo_len = len;
			c->redo_off = off;
			c->redo_t0 = now_s();
			ts_after(&c->redo_due, REDO_HOLD_S * 1000L);
			printf("evil: silent-redo: retried READ itt 0x%08x held %d s\n", itt,
			       REDO_HOLD_S);
			fflush(stdout);
			return;
		}
		if (retry_armed && lba == retry_lba) {
			retry_armed = false;
			printf("evil: retried READ of block %llu, itt 0x%08x: served\n",
			       (unsigned long long)lba, itt);
			fflush(stdout);
		}
		if (fire_lba >= 0 && (long long)lba == fire_lba - 8) {
			primed = true;
			c->prime_rstag = rstag;
		}
		trig = fire_lba >= 0 ? primed && (long long)lba == fire_lba : c->reads >= fire_at;
		if (mode == M_LOGOUT_PING && trig) {
			/* Served normally; the next NOP-Out ping fires it. */
			primed = false;
			nop_armed = true;
			printf("evil: logout-ping armed at %.3f: the next NOP-Out ping gets a Logout Response\n",
			       now_s());
			fflush(stdout);
		} else if (mode != M_NONE && !login_mode(mode) && !write_mode(mode) &&
			   mode != M_LOGOUT_PING && (trig || c->has_held)) {
			primed = false;
			if (mode == M_SILENT || mode == M_SILENT_ALL || mode == M_SILENT_REDO) {
				c->silent = true;
				c->silent_all = mode == M_SILENT_ALL || mode == M_SILENT_REDO;
				if (mode == M_SILENT_REDO) {
					redo_armed = true;
					redo_lba = lba;
				}
				fire();
				return;
			}
			if (mode == M_DROP) {
				fire();
				rdma_disconnect(c->id);
				return;
			}
			if (mode == M_STALE_HELD) {
				/* No answer; hang up, and answer it on a later
				 * connection (see do_scsi's start). */
				stale_on = true;
				stale_itt = itt;
				memcpy(&stale_raw, bhs + 16, sizeof(stale_raw));
				c->closing = true;
				printf("evil: stale-held: READ itt 0x%08x (slot 0x%x, age %u) held, hanging up\n",
				       itt, ITT_SLOT(stale_raw), ITT_AGE(stale_raw));
				fflush(stdout);
				return;
			}
			if (mode == M_INV_NOMR) {
				/* Held until a TEST UNIT READY comes. */
				c->nomr_held = true;
				c->held_itt = itt;
				c->held_rstag = rstag;
				c->held_rva = rva;
				c->held_len = len;
				c->held_lba = (uint32_t)lba;
				printf("evil: inv-nomr: READ itt 0x%08x held until a TEST UNIT READY\n", itt);
				fflush(stdout);
				return;
			}
			if (mode == M_LATE_ABORT || mode == M_TMF_SPOOF || mode == M_TMF_DUP) {
				/* No answer, no data: wait for its ABORT TASK
				 * (tmf-spoof: holding the pings that come). */
				c->abort_mode = mode;
				fire();
				c->abort_wait = true;
				c->abort_itt = itt;
				c->abort_rstag = rstag;
				c->abort_rva = rva;
				c->abort_len = len;
				c->abort_off = off;
				c->ping_held = false;
				printf("evil: %s: READ itt 0x%08x left unanswered\n",
				       mode_names[c->abort_mode], itt);
				fflush(stdout);
				return;
			}
			if (mode == M_ITT_JUNK) {
				/* The data, then the status by plain SEND with
				 * ITT_JUNK in the ITT, then later the same data
				 * again with the READ's rkey. */
				uint32_t raw;
				uint8_t w[4];

				if (rdma_op(c, true, rstag, rva, off, len, 0))
					return;
				fire();
				memcpy(&raw, bhs + 16, sizeof(raw));
				raw |= ITT_JUNK;
				memcpy(w, &raw, sizeof(w));
				printf("evil: itt-junk: READ itt 0x%08x answered as 0x%08x\n", itt,
				       be32(w));
				fflush(stdout);
				send_rsp(c, be32(w), 0, 0, 0, 0, false, 0);
				late_arm(c, true, rstag, rva, len, off);
				return;
			}
			if (mode == M_WRONG_DATA || mode == M_LOST_WRITE) {
				/* wrong-data: the next block's data, status GOOD */
				bool wrong = mode == M_WRONG_DATA;

				if (rdma_op(c, true, rstag, rva, off + (wrong ? 4096 : 0), len, 0))
					return;
				fire();
				lost_armed = !wrong;
				send_rsp(c, itt, 0, 0, 0, 0, rstag != 0, rstag);
				return;
			}
			if (mode == M_LATE_WRITE) {
				/* The data, a plain SEND (no invalidation), then later
				 * the same data again with the READ's rkey. */
				if (rdma_op(c, true, rstag, rva, off, len, 0))
					return;
				fire();
				send_rsp(c, itt, 0, 0, 0, 0, false, 0);
				late_arm(c, true, rstag, rva, len, off);
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
				retry_lba = lba;
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
		/* InitialR2T=No: the first burst comes unasked. */
		uint32_t fb = c->first_burst ? c->first_burst : FIRST_BURST;
		uint32_t unsol = unsol_mrdsl ? (len < fb ? len : fb) : 0;
		bool wsv = flags & 0x08, late = false;
		int pi;

		if (off + len > disk_size || len != edtl || imm > len ||
		    (imm && !unsol_mrdsl) || (unsol < imm) || (len > unsol && !wsv)) {
			printf("evil: WRITE itt 0x%08x refused: %u bytes, %u immediate, write STag %s\n",
			       itt, len, imm, wsv ? "valid" : "none");
			fflush(stdout);
			send_rsp(c, itt, 0x02, 0x05, 0x21, 0, false, 0);
			return;
		}
		if (lost_armed && lba == LOST_LBA) {
			lost_armed = false;
			printf("evil: lost-write: WRITE itt 0x%08x answered GOOD, its data not read\n",
			       itt);
			fflush(stdout);
			send_rsp(c, itt, 0, 0, 0, 0, false, 0);
			return;
		}
		if (write_mode(mode) && fire_lba >= 0 && primed && (long long)lba == fire_lba) {
			primed = false;
			if (mode == M_EARLY_STATUS) {
				/*
				 * CHECK CONDITION at once; its Data-Outs, still
				 * to come, are looked at when they arrive.
				 */
				long bad = stamp_mismatch(data, off, imm);
				int e;

				fire();
				send_rsp(c, itt, 0x02, 0x05, 0x21, 0, false, 0);
				for (e = 0; e < NEARLY && c->early[e].used; e++)
					;
				if (e == NEARLY)
					e = 0;
				c->early[e] = (struct early){ .used = true, .itt = itt, .off = off };
				printf("evil: early-status: WRITE itt 0x%08x answered, %u bytes, %u immediate, %u unsolicited\n",
				       itt, len, imm, unsol);
				if (bad >= 0)
					printf("evil: foreign data in the immediate data itt=0x%08x offset=%ld\n",
					       itt, bad);
				fflush(stdout);
				return;
			}
			if (mode == M_LATE_READ && len > unsol) {
				fire();
				late = true;
			} else {
				printf("evil: %s: the trigger WRITE has no data to pull: not fired\n",
				       mode_names[mode]);
				fflush(stdout);
			}
		}
		pi = pend_new(c);
		if (pi < 0) {
			send_rsp(c, itt, 0x08, 0, 0, 0, false, 0);	/* BUSY */
			return;
		}
		c->pend[pi].itt = itt;
		c->pend[pi].stag = wsv ? wstag : 0;
		c->pend[pi].va = wva;
		c->pend[pi].write = true;
		c->pend[pi].len = len;
		c->pend[pi].off = off;
		c->pend[pi].unsol_left = unsol - imm;
		c->pend[pi].rdma_len = len - unsol;
		c->pend[pi].late = late;
		memcpy(disk + off, data, imm);
		if (len > unsol) {
			c->pend[pi].rdma_busy = true;
			if (rdma_op(c, false, wstag, wva, off + unsol, len - unsol, pi)) {
				c->pend[pi].used = false;
				return;
			}
		}
		if (!c->pend[pi].unsol_left && !c->pend[pi].rdma_busy)
			write_done(c, &c->pend[pi]);
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
		do_scsi(c, p, bhs, p + HDRS, dlen);
		break;
	case 0x05:	/* SCSI Data-Out */
		do_dataout(c, bhs, p + HDRS, dlen);
		break;
	case 0x00:	/* NOP-Out */
		if (!(bhs[0] & 0x40))
			c->exp_cmdsn = be32(bhs + 24) + 1;
		if (be32(bhs + 16) != 0xffffffff && armed(M_LOGOUT_PING) && nop_armed) {
			/*
			 * A ping from the initiator (a real ITT): answer it with
			 * a Logout Response, and hang up 100 ms later.
			 */
			nop_armed = false;
			fire();
			/* In the kernel log first: the test times riser's answer from it. */
			kmsg("evil: logout-ping: Logout Response sent");
			send_simple(c, 0x26, be32(bhs + 16), 0, true, NULL, 0);
			c->disc_on = true;
			ts_after(&c->disc_due, 100);
			printf("evil: Logout Response sent for NOP-Out itt 0x%08x at %.3f\n",
			       be32(bhs + 16), now_s());
			fflush(stdout);
		} else if (be32(bhs + 16) != 0xffffffff && c->abort_wait &&
			   c->abort_mode == M_TMF_SPOOF) {
			/* tmf-spoof: unanswered; its ITT answers the ABORT TASK. */
			c->ping_held = true;
			c->ping_itt = be32(bhs + 16);
			printf("evil: tmf-spoof: ping itt 0x%08x held\n", c->ping_itt);
			fflush(stdout);
		} else if (be32(bhs + 16) != 0xffffffff) {
			if (nop_armed) {
				printf("evil: NOP-Out ping itt 0x%08x at %.3f answered\n",
				       be32(bhs + 16), now_s());
				fflush(stdout);
			}
			send_simple(c, 0x20, be32(bhs + 16), 0xffffffff, true, p + HDRS, dlen);
		}
		else if (be32(bhs + 20) == NOP_DATA_TTT) {
			printf("evil: nop-data: ping answered, TTT 0x%08x echoed, %u bytes of data%s\n",
			       NOP_DATA_TTT, dlen,
			       dlen == 200 && p[HDRS] == 'n' && p[HDRS + 199] == 'n' ? " (the ping's)" : "");
			fflush(stdout);
		} else
			ping_answered(c, be32(bhs + 20));
		break;
	case 0x02: {	/* Task management: done (a held command is dropped) */
		uint8_t fn = bhs[1] & 0x7f;
		uint32_t itt = be32(bhs + 16), rsp_itt = itt;
		/* the ABORT TASK of the READ late-abort, tmf-spoof or tmf-dup holds */
		bool held = fn == 1 && c->abort_wait && be32(bhs + 20) == c->abort_itt;
		enum mode am = held ? c->abort_mode : M_NONE;

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
		/* tmf-spoof: the answer names the held ping, not this TMF. */
		if (am == M_TMF_SPOOF && c->ping_held)
			rsp_itt = c->ping_itt;
		if (send_tmf_rsp(c, rsp_itt, c->silent_all ? 5 : 0))
			break;
		/* tmf-dup: the same answer again, with the next StatSN. */
		if (am == M_TMF_DUP && send_tmf_rsp(c, itt, 0))
			break;
		if (!held)
			break;
		/* The aborted READ's rkey, LATE_MS from now. */
		c->abort_wait = false;
		if (am == M_TMF_SPOOF && c->ping_held)
			printf("evil: tmf-spoof: ABORT TASK itt 0x%08x answered with the ping's itt 0x%08x\n",
			       itt, rsp_itt);
		else if (am == M_TMF_SPOOF)
			printf("evil: tmf-spoof: no ping held: ABORT TASK itt 0x%08x answered with its own itt, not spoofed\n",
			       itt);
		else if (am == M_TMF_DUP)
			printf("evil: tmf-dup: ABORT TASK itt 0x%08x answered twice\n", itt);
		else
			printf("evil: late-abort: ABORT TASK for itt 0x%08x answered\n",
			       c->abort_itt);
		c->ping_held = false;
		late_arm(c, true, c->abort_rstag, c->abort_rva, c->abort_len, c->abort_off);
		break;
	}
	case 0x04:	/* Text: nothing to say */
		if (!(bhs[0] & 0x40))
			c->exp_cmdsn = be32(bhs + 24) + 1;
		send_simple(c, 0x24, be32(bhs + 16), 0xffffffff, true, NULL, 0);
		break;
	case 0x06:	/* Logout */
		burst_ready = true;
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
		if (!c->late.posted)
			break;
		usleep(10000);
	} while (++waited < 200);
	if (c->late.posted) {
		/*
		 * Posted, and neither acknowledged nor refused in 2 s: the
		 * initiator's QP, in error, drops it (an RC responder that
		 * took it would have acknowledged it at once); this QP only
		 * retries. Said as such, then flushed.
		 */
		c->late.posted = false;
		printf("evil: late %s not acknowledged in 2 s: the initiator's QP did not take it\n",
		       c->late.write ? "write" : "read");
		fflush(stdout);
	}
	if (c->late.on) {
		c->late.on = false;
		printf("evil: late %s not tried: the connection closed first\n",
		       c->late.write ? "write" : "read");
		fflush(stdout);
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

/*
 * The CM modes: the iSER CM header in the accept (REP) spoilt. cm-rsvd:
 * every reserved bit set (flags byte and the three reserved bytes), beside
 * Z; cm-short: two bytes, a header cut short (the CM pads it with zeros);
 * cm-long: the most private data a REP carries, 196 bytes (the CM refuses
 * more, on the target's side), a valid header and 192 bytes of garbage.
 */
#define CM_REP_MAX 196
static void cm_garbage(struct rdma_conn_param *cp)
{
	static uint8_t g[CM_REP_MAX];
	enum mode m = mode;

	if (m != M_CM_RSVD && m != M_CM_SHORT && m != M_CM_LONG)
		return;
	memset(g, 0, sizeof(g));
	if (m == M_CM_RSVD) {
		g[0] = 0xbf;	/* Z, not I, every reserved bit */
		memset(g + 1, 0xff, 3);
		cp->private_data_len = 4;
	} else if (m == M_CM_SHORT) {
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
	       mode_names[m], cp->private_data_len, g[0], g[1], g[2], g[3]);
	fflush(stdout);
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
	cm_garbage(&cp);
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

/* What the current connection waits for: WRITEs missing data, sends in flight. */
static void state_dump(struct conn *c)
{
	int n = 0;

	printf("evil: state at %.3f: %s", now_s(), c ? "" : "no connection\n");
	if (!c) {
		fflush(stdout);
		return;
	}
	printf("%d sends in flight, exp_cmdsn %u, statsn %u%s\n", c->tx_inflight, c->exp_cmdsn,
	       c->statsn, c->silent ? ", silent" : "");
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
	if (!addr || inet_pton(AF_INET, addr, &sin.sin_addr) != 1 || disk_size < (1u << 20) ||
	    (unsol_mrdsl && (unsol_mrdsl < 512 || unsol_mrdsl > MAX_DSL)) || nrx < 1 ||
	    nrx > 8192)
		usage();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGUSR1, on_usr1);
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
	       mode_names[mode], nmodes);
	fflush(stdout);
	for (;;) {
		struct pollfd fds[2] = { { .fd = ec->fd, .events = POLLIN } };
		int nfds = 1, timeout = 1000;

		if (cur) {
			fds[1].fd = cur->ch->fd;
			fds[1].events = POLLIN;
			nfds = 2;
			if (ibv_req_notify_cq(cur->cq, 0))
				cur->closing = true;
			if (poll_cq(cur, false))
				cur->closing = true;
			/* What waits for a time: a late access, a hang-up. */
			if (cur->late.on) {
				long ms = ms_until(&cur->late.due);

				if (!ms)
					late_post(cur);
				else if (ms < timeout)
					timeout = (int)ms;
			}
			if (cur->redo_on) {
				long ms = ms_until(&cur->redo_due);

				if (!ms)
					redo_serve(cur);
				else if (ms < timeout)
					timeout = (int)ms;
			}
			if (cur->disc_on) {
				long ms = ms_until(&cur->disc_due);

				if (!ms) {
					cur->disc_on = false;
					cur->closing = true;
					printf("evil: disconnecting as announced at %.3f\n", now_s());
					fflush(stdout);
				} else if (ms < timeout) {
					timeout = (int)ms;
				}
			}
		}
		if (dump_wanted) {
			dump_wanted = 0;
			state_dump(cur);
		}
		if (cur && cur->closing && !cur->disconnecting) {
			cur->disconnecting = true;
			rdma_disconnect(cur->id);
		}
		if (poll(fds, nfds, timeout) < 0 && errno != EINTR)
			return 1;
		if (cur && (fds[1].revents & POLLIN)) {
			struct ibv_cq *cq;
			void *ctx;

			if (!ibv_get_cq_event(cur->ch, &cq, &ctx))
				ibv_ack_cq_events(cq, 1);
		}
		cm_poll();
		if (cur && cur->dead) {
			late_drain(cur);
			conn_free(cur);
			cur = NULL;
		}
	}
}
