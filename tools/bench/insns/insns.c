// SPDX-License-Identifier: GPL-2.0
/*
 * A QEMU TCG plugin for make bench: counts every instruction the guest
 * executes, and by translation block those in given address ranges (the
 * kernel's module area, the kernel's Rust code), and writes the counts out
 * whenever the guest executes the mark (mark.c: `xchg %bx,%bx` in user
 * mode, an instruction no compiler emits).
 *
 *   -plugin PATH/insns.so,out=FILE[,range=LO:HI]...
 *
 * Counted are the blocks that start in one of the ranges [LO, HI) (at most
 * eight; by default the module area of x86_64 without KASLR).
 * FILE gets, per mark, a line "mark N", a line "total INSNS" (every
 * instruction the guest executed since the mark before, on all vCPUs),
 * then the lines below, and one line "VADDR INSNS RUNS LOCKS" per counted
 * block that ran since the mark before: its start address, the
 * instructions it executed (times run * length), the times it ran and
 * the locked instructions it executed (`lock`-prefixed ones and `xchg`
 * with memory, which the CPU locks without a prefix). The counts are
 * exact: they do not depend on the host's speed, on sampling, or on
 * whether interrupts were enabled. bench.sh tells which module each
 * address belongs to; tools/bench/bench-report adds them up per module and
 * divides by the I/Os the disk completed between two marks.
 *
 * The inclusive count. The guest also executes the configuration mark
 * (mark.c with a file: `xchg %cx,%cx` with the file's text at %rdi, its
 * length in %rsi), naming, for the run that follows, the code ranges of
 * the initiator's stack ("root LO HI": its modules, the libraries it
 * is entered through) and of what it stops at ("stop LO HI": the RDMA
 * device, the target, the target's disk, the softirq loop), the device's
 * post_send and post_recv entries ("post_send ADDR", "post_recv ADDR") and
 * the context switch ("switch ADDR", __switch_to_asm), and more ranges
 * to count by block ("count LO HI": the kernel's Rust code when the host
 * has no System.map of the guest's kernel). The plugin then
 * keeps, per task, a stack of regions: a call into a root while outside
 * every root's call opens an included region, a call into a stop inside
 * one opens an excluded region, and each ends when its call returns (the
 * block at the return address runs with the stack pointer back above the
 * frame). Kernel instructions and locked instructions executed in included
 * regions are the "incl" line. The call is seen at the callee's first
 * block: the return address on the stack is taken only if a call
 * instruction precedes it (else the entry is counted in "rejected"). At
 * __switch_to_asm the state of the task switched out is kept and the one
 * switched in restored (%rdi, %rsi). Hard interrupts count for the region
 * they interrupt. Lines per mark: "kernel INSNS LOCKS" (all kernel-mode
 * instructions), "incl INSNS LOCKS", "regions OPENED REJECTED OVERFLOWED".
 *
 * Work requests: at the device's post_send and post_recv (%rsi: the first
 * work request of the chain) the plugin walks the chain and writes, per
 * mark, "post KIND CALLER CALLS WRS SIGNALED" (CALLER: the return address,
 * which names the module that posted; SIGNALED: send WRs with
 * IB_SEND_SIGNALED).
 *
 * A configuration flushes the translated code (qemu_plugin_reset), so
 * that every block is translated again knowing the ranges; a block keeps
 * its counter across translations.
 *
 * The counters are per vCPU (scoreboards), summed at each mark; the
 * fallback counter of a block beyond the scoreboard's slots is shared, and
 * exact only when the vCPUs run in one host thread, as under -icount.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

RISER_PLUGIN_EXPORT int qemu_plugin_version = 2;

#define MAX_RANGES 8
static struct {
	uint64_t lo, hi;
} ranges[MAX_RANGES];
static int nranges;
/* x86_64's module area without KASLR (MODULES_VADDR .. MODULES_END). */
static const uint64_t modules_lo = 0xffffffffa0000000ULL, modules_hi = 0xffffffffff000000ULL;
static FILE *out;
static qemu_plugin_id_t plugin_id;
/* Every instruction, added up inline by every block (no call). */
static struct qemu_plugin_scoreboard *total_board;
static qemu_plugin_u64 total;
/*
 * Per vCPU: kernel instructions and locked instructions so far (running
 * sums, inline), the mode (1: in an included region) and the return
 * address the innermost region waits for (0: none).
 */
struct vstate {
	uint64_t kins, klocks, mode, watch;
};
static struct qemu_plugin_scoreboard *vboard;
static qemu_plugin_u64 kins_e, klocks_e, mode_e, watch_e;
static int vcpus;
static unsigned long marks;

/*
 * A counted block: how often it ran is a u64 of the scoreboard "runs",
 * slot SLOT, added to inline by the block itself (no call out of the
 * translated code); blocks beyond the scoreboard's slots count through a
 * callback instead.
 */
struct block {
	uint64_t vaddr;
	uint64_t len;
	uint64_t locks;
	long slot;
	uint64_t runs;
	struct block *next;
	struct block *hnext;
};

#define SLOTS (1L << 18)
static struct qemu_plugin_scoreboard *runs_board;
static long slots_used;

/* Every instrumented block, newest first, and by address (kept across flushes). */
static struct block *blocks;
#define BHASH (1 << 16)
static struct block *bhash[BHASH];

/* ------------------------------------------------------------ configuration */
#define MAX_CRANGES 64
struct crange {
	uint64_t lo, hi;
	int kind; /* 1 root, 2 stop, 3 counted by block */
};
static struct crange cranges[MAX_CRANGES];
static int ncranges;
static uint64_t post_send_addr[4], post_recv_addr[4], switch_addr;
static int nposts_send, nposts_recv;

/* ------------------------------------------------------------ regions */
struct region {
	uint64_t ret, sp;
	int mode;
};
#define MAX_DEPTH 48
struct tstate {
	uint64_t task;
	int depth;
	struct region stk[MAX_DEPTH];
};
#define TASKS 16384
static struct tstate *tasks[TASKS];
static struct tstate boot_state[8];
static struct tstate *cur[8];
/* Per vCPU: the running sums where the current segment began, its mode. */
static uint64_t seg_kins[8], seg_klocks[8];
static uint64_t incl_kins[8], incl_klocks[8];
static uint64_t mark_kins[8], mark_klocks[8];
static unsigned long opened, rejected, overflowed, untracked;
static uint64_t cur_vaddr;
static unsigned long rejected_all;
/* INSNS_DEBUG=FILE: the first refused entries, for whoever debugs the plugin. */
static FILE *debug;

/* Registers, found at the first vCPU's start. */
static struct qemu_plugin_register *reg_rsp, *reg_rdi, *reg_rsi;
static riser_gbytearray *rbuf, *mbuf;

/* ------------------------------------------------------------ work requests */
struct post {
	int kind; /* 0 send, 1 recv */
	uint64_t caller;
	uint64_t calls, wrs, signaled;
	struct post *next;
};
static struct post *posts;

static qemu_plugin_u64 slot_entry(long slot)
{
	qemu_plugin_u64 e = { .score = runs_board, .offset = slot * sizeof(uint64_t) };

	return e;
}

static uint64_t read_reg(struct qemu_plugin_register *r)
{
	uint64_t v = 0;

	if (!r)
		return 0;
	g_byte_array_set_size(rbuf, 0);
	if (qemu_plugin_read_register(r, rbuf) >= 8)
		memcpy(&v, rbuf->data, 8);
	return v;
}

static bool read_mem(uint64_t addr, void *dst, size_t len)
{
	g_byte_array_set_size(mbuf, 0);
	if (!qemu_plugin_read_memory_vaddr(addr, mbuf, len) || mbuf->len < len)
		return false;
	memcpy(dst, mbuf->data, len);
	return true;
}

static void set_vstate(unsigned int v, struct tstate *t)
{
	const struct region *top = t->depth ? &t->stk[t->depth - 1] : NULL;

	qemu_plugin_u64_set(mode_e, v, top ? (uint64_t)top->mode : 0);
	qemu_plugin_u64_set(watch_e, v, top ? top->ret : 0);
}

/* Ends the vCPU's current segment: its instructions go to the included sums if it was. */
static void flush_seg(unsigned int v)
{
	uint64_t k = qemu_plugin_u64_get(kins_e, v), l = qemu_plugin_u64_get(klocks_e, v);

	if (qemu_plugin_u64_get(mode_e, v)) {
		incl_kins[v] += k - seg_kins[v];
		incl_klocks[v] += l - seg_klocks[v];
	}
	seg_kins[v] = k;
	seg_klocks[v] = l;
}

/*
 * Whether a call instruction ends right before ADDR (the return address):
 * call rel32 (e8), or call r/m64 (ff /2, any ModRM, SIB and displacement,
 * with a REX prefix and a segment or notrack prefix or not).
 */
static bool after_call(uint64_t addr)
{
	uint8_t b[10];
	int k;

	if (!read_mem(addr - sizeof(b), b, sizeof(b)))
		return false;
	if (b[sizeof(b) - 5] == 0xe8)
		return true;
	for (k = 2; k <= 9; k++) {
		int i = sizeof(b) - k, len;
		uint8_t modrm, mod, rm;

		if (b[i] == 0x2e || b[i] == 0x3e)
			i++;
		if ((b[i] & 0xf0) == 0x40)
			i++;
		if (i + 1 >= (int)sizeof(b) || b[i] != 0xff)
			continue;
		modrm = b[i + 1];
		if (((modrm >> 3) & 7) != 2)
			continue;
		mod = modrm >> 6;
		rm = modrm & 7;
		len = 2;
		if (mod != 3 && rm == 4) {
			len++;
			if (i + 2 < (int)sizeof(b) && mod == 0 && (b[i + 2] & 7) == 5)
				len += 4;
		}
		if (mod == 0 && rm == 5)
			len += 4;
		else if (mod == 1)
			len += 1;
		else if (mod == 2)
			len += 4;
		if (i + len == (int)sizeof(b))
			return true;
	}
	return false;
}

static void push(unsigned int v, int mode)
{
	struct tstate *t = cur[v];
	uint64_t sp = read_reg(reg_rsp), ret;

	if (!read_mem(sp, &ret, 8) || !after_call(ret)) {
		rejected++;
		if (debug && rejected_all++ < 300)
			fprintf(debug, "insns: refused %s at %" PRIx64 " (stack %" PRIx64 ": %" PRIx64
				", depth %d)\n", mode ? "root" : "stop", cur_vaddr, sp, ret, t->depth);
		return;
	}
	if (t->depth == MAX_DEPTH) {
		overflowed++;
		return;
	}
	flush_seg(v);
	t->stk[t->depth].ret = ret;
	t->stk[t->depth].sp = sp;
	t->stk[t->depth].mode = mode;
	t->depth++;
	opened++;
	set_vstate(v, t);
}

static void enter_root(unsigned int v, void *udata)
{
	cur_vaddr = (uint64_t)(uintptr_t)udata;
	push(v, 1);
}

static void enter_stop(unsigned int v, void *udata)
{
	cur_vaddr = (uint64_t)(uintptr_t)udata;
	push(v, 0);
}

/* The block at the innermost region's return address runs. */
static void at_return(unsigned int v, void *udata)
{
	struct tstate *t = cur[v];
	uint64_t vaddr = (uint64_t)(uintptr_t)udata, sp = read_reg(reg_rsp);
	bool popped = false;

	if (!t->depth)
		return;
	flush_seg(v);
	while (t->depth && t->stk[t->depth - 1].ret == vaddr && sp >= t->stk[t->depth - 1].sp + 8) {
		t->depth--;
		popped = true;
	}
	if (popped)
		set_vstate(v, t);
}

static struct tstate *task_state(uint64_t task, bool create)
{
	unsigned long h = (task >> 6) % TASKS, i;

	for (i = 0; i < TASKS; i++) {
		struct tstate **s = &tasks[(h + i) % TASKS];

		if (!*s) {
			if (!create)
				return NULL;
			*s = calloc(1, sizeof(**s));
			if (!*s)
				return NULL;
			(*s)->task = task;
			return *s;
		}
		if ((*s)->task == task)
			return *s;
	}
	return NULL;
}

/* __switch_to_asm: %rdi the task switched out, %rsi the one switched in. */
static void at_switch(unsigned int v, void *udata)
{
	uint64_t prev = read_reg(reg_rdi), next = read_reg(reg_rsi);
	struct tstate *p, *n;

	(void)udata;
	flush_seg(v);
	p = task_state(prev, true);
	if (p && p != cur[v]) {
		memcpy(p->stk, cur[v]->stk, sizeof(p->stk));
		p->depth = cur[v]->depth;
	}
	n = task_state(next, true);
	if (!n) {
		untracked++;
		n = &boot_state[v];
		n->depth = 0;
	}
	cur[v] = n;
	set_vstate(v, n);
}

static void at_post(unsigned int v, void *udata)
{
	int kind = (int)(uintptr_t)udata;
	uint64_t sp = read_reg(reg_rsp), caller = 0, wr = read_reg(reg_rsi);
	uint64_t wrs = 0, sig = 0;
	struct post *p;

	(void)v;
	read_mem(sp, &caller, 8);
	while (wr && wrs < 256) {
		uint8_t w[40];
		uint32_t flags;

		if (!read_mem(wr, w, kind ? 8 : sizeof(w)))
			break;
		wrs++;
		if (!kind) {
			memcpy(&flags, w + 32, 4);
			sig += !!(flags & 2); /* IB_SEND_SIGNALED */
		}
		memcpy(&wr, w, 8);
	}
	for (p = posts; p; p = p->next)
		if (p->kind == kind && p->caller == caller)
			break;
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return;
		p->kind = kind;
		p->caller = caller;
		p->next = posts;
		posts = p;
	}
	p->calls++;
	p->wrs += wrs;
	p->signaled += sig;
}

/* ------------------------------------------------------------ marks */
static void block_ran(unsigned int vcpu, void *udata)
{
	struct block *b = udata;

	(void)vcpu;
	b->runs++;
}

static void dump(void)
{
	struct block *b;
	struct post *p;
	uint64_t kins = 0, klocks = 0, iins = 0, ilocks = 0;
	int i;

	fprintf(out, "mark %lu\ntotal %" PRIu64 "\n", marks++, qemu_plugin_u64_sum(total));
	for (i = 0; i < vcpus; i++) {
		uint64_t k = qemu_plugin_u64_get(kins_e, i), l = qemu_plugin_u64_get(klocks_e, i);

		qemu_plugin_u64_set(total, i, 0);
		flush_seg(i);
		kins += k - mark_kins[i];
		klocks += l - mark_klocks[i];
		mark_kins[i] = k;
		mark_klocks[i] = l;
		iins += incl_kins[i];
		ilocks += incl_klocks[i];
		incl_kins[i] = incl_klocks[i] = 0;
	}
	fprintf(out, "kernel %" PRIu64 " %" PRIu64 "\nincl %" PRIu64 " %" PRIu64 "\n", kins, klocks,
		iins, ilocks);
	fprintf(out, "regions %lu %lu %lu %lu\n", opened, rejected, overflowed, untracked);
	opened = rejected = overflowed = untracked = 0;
	for (p = posts; p; p = p->next) {
		if (p->calls)
			fprintf(out, "post %s %" PRIx64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
				p->kind ? "recv" : "send", p->caller, p->calls, p->wrs, p->signaled);
		p->calls = p->wrs = p->signaled = 0;
	}
	for (b = blocks; b; b = b->next) {
		uint64_t runs = b->runs;

		if (b->slot >= 0) {
			runs = qemu_plugin_u64_sum(slot_entry(b->slot));
			for (i = 0; runs && i < vcpus; i++)
				qemu_plugin_u64_set(slot_entry(b->slot), i, 0);
		}
		b->runs = 0;
		if (runs)
			fprintf(out, "%" PRIx64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", b->vaddr,
				runs * b->len, runs, runs * b->locks);
	}
	fflush(out);
}

static void mark_ran(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	(void)udata;
	dump();
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
static void at_exit(qemu_plugin_id_t id, void *udata);

static void after_reset(qemu_plugin_id_t id)
{
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	qemu_plugin_register_atexit_cb(id, at_exit, NULL);
}

/* The configuration mark: %rdi the text, %rsi its length. */
static void config_ran(unsigned int vcpu, void *udata)
{
	uint64_t addr = read_reg(reg_rdi), len = read_reg(reg_rsi);
	char *text, *line, *save;

	(void)udata;
	(void)vcpu;
	if (!len || len > 65536)
		return;
	text = calloc(1, len + 1);
	if (!text || !read_mem(addr, text, len)) {
		free(text);
		qemu_plugin_outs("insns: cannot read the configuration\n");
		return;
	}
	ncranges = nposts_send = nposts_recv = 0;
	switch_addr = 0;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char what[16];
		uint64_t a, b;
		int n = sscanf(line, "%15s %" SCNx64 " %" SCNx64, what, &a, &b);

		if (n == 3 && (!strcmp(what, "root") || !strcmp(what, "stop") || !strcmp(what, "count")) &&
		    ncranges < MAX_CRANGES && a < b) {
			cranges[ncranges].lo = a;
			cranges[ncranges].hi = b;
			cranges[ncranges].kind = what[0] == 'r' ? 1 : what[0] == 's' ? 2 : 3;
			ncranges++;
		} else if (n >= 2 && !strcmp(what, "post_send") && nposts_send < 4) {
			post_send_addr[nposts_send++] = a;
		} else if (n >= 2 && !strcmp(what, "post_recv") && nposts_recv < 4) {
			post_recv_addr[nposts_recv++] = a;
		} else if (n >= 2 && !strcmp(what, "switch")) {
			switch_addr = a;
		}
	}
	free(text);
	/* Translate everything again, knowing the ranges. */
	qemu_plugin_reset(plugin_id, after_reset);
}

static int crange_kind(uint64_t vaddr)
{
	int i;

	for (i = 0; i < ncranges; i++)
		if (vaddr >= cranges[i].lo && vaddr < cranges[i].hi && cranges[i].kind != 3)
			return cranges[i].kind;
	return 0;
}

static bool counted(uint64_t vaddr)
{
	int i;

	for (i = 0; i < nranges; i++)
		if (vaddr >= ranges[i].lo && vaddr < ranges[i].hi)
			return true;
	for (i = 0; i < ncranges; i++)
		if (vaddr >= cranges[i].lo && vaddr < cranges[i].hi && cranges[i].kind == 3)
			return true;
	return false;
}

/* Whether an instruction is locked: a lock prefix, or xchg with memory. */
static bool locked(struct qemu_plugin_insn *insn)
{
	uint8_t op[16];
	size_t n = qemu_plugin_insn_data(insn, op, sizeof(op)), i;

	for (i = 0; i < n; i++) {
		switch (op[i]) {
		case 0xf0:
			return true;
		case 0x26: case 0x2e: case 0x36: case 0x3e: case 0x64: case 0x65:
		case 0x66: case 0x67: case 0xf2: case 0xf3:
			continue;
		}
		break;
	}
	if (i < n && (op[i] & 0xf0) == 0x40)
		i++;
	return i + 1 < n && (op[i] == 0x86 || op[i] == 0x87) && (op[i + 1] >> 6) != 3;
}

static struct block *block_of(uint64_t vaddr, uint64_t len, uint64_t locks)
{
	unsigned long h = (vaddr ^ (vaddr >> 16) ^ len) % BHASH;
	struct block *b;

	for (b = bhash[h]; b; b = b->hnext)
		if (b->vaddr == vaddr && b->len == len && b->locks == locks)
			return b;
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->vaddr = vaddr;
	b->len = len;
	b->locks = locks;
	b->slot = slots_used < SLOTS ? slots_used++ : -1;
	b->next = blocks;
	blocks = b;
	b->hnext = bhash[h];
	bhash[h] = b;
	return b;
}

/* Whether the block holds the instruction at FN, at most 16 bytes from its start. */
static bool at_entry(struct qemu_plugin_tb *tb, uint64_t fn)
{
	uint64_t vaddr = qemu_plugin_tb_vaddr(tb);
	size_t i, n = qemu_plugin_tb_n_insns(tb);

	if (vaddr == fn)
		return true;
	if (vaddr > fn || vaddr + 16 < fn)
		return false;
	for (i = 0; i < n; i++)
		if (qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i)) == fn)
			return true;
	return false;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	uint64_t vaddr = qemu_plugin_tb_vaddr(tb);
	size_t n = qemu_plugin_tb_n_insns(tb), i, locks = 0;
	struct block *b;
	int kind;

	(void)id;
	if (!(vaddr >> 47)) {
		qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64,
								  total, n);
		/* User mode: look for the marks. */
		for (i = 0; i < n; i++) {
			struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
			unsigned char op[3];

			if (qemu_plugin_insn_size(insn) != sizeof(op) ||
			    qemu_plugin_insn_data(insn, op, sizeof(op)) != sizeof(op))
				continue;
			if (op[0] == 0x66 && op[1] == 0x87 && op[2] == 0xdb)
				qemu_plugin_register_vcpu_insn_exec_cb(insn, mark_ran,
								       QEMU_PLUGIN_CB_NO_REGS, NULL);
			if (op[0] == 0x66 && op[1] == 0x87 && op[2] == 0xc9)
				qemu_plugin_register_vcpu_insn_exec_cb(insn, config_ran,
								       QEMU_PLUGIN_CB_R_REGS, NULL);
		}
		return;
	}
	/*
	 * Kernel mode. The callbacks first, so that a block that opens or
	 * ends a region counts in the region it starts.
	 */
	qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, at_return, QEMU_PLUGIN_CB_R_REGS,
						  QEMU_PLUGIN_COND_EQ, watch_e, vaddr,
						  (void *)(uintptr_t)vaddr);
	kind = crange_kind(vaddr);
	if (kind == 1)
		qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, enter_root, QEMU_PLUGIN_CB_R_REGS,
							  QEMU_PLUGIN_COND_EQ, mode_e, 0,
							  (void *)(uintptr_t)vaddr);
	else if (kind == 2)
		qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, enter_stop, QEMU_PLUGIN_CB_R_REGS,
							  QEMU_PLUGIN_COND_EQ, mode_e, 1,
							  (void *)(uintptr_t)vaddr);
	/*
	 * A hooked function's block starts at its address, or in the 16 bytes
	 * of padding before it when call depth tracking has its callers call
	 * the accounting thunk there (distribution kernels), which falls
	 * through into the function and leaves the arguments alone: the
	 * block holds the function's first instruction then.
	 */
	if (switch_addr && at_entry(tb, switch_addr))
		qemu_plugin_register_vcpu_tb_exec_cb(tb, at_switch, QEMU_PLUGIN_CB_R_REGS, NULL);
	for (i = 0; i < (size_t)nposts_send; i++)
		if (at_entry(tb, post_send_addr[i]))
			qemu_plugin_register_vcpu_tb_exec_cb(tb, at_post, QEMU_PLUGIN_CB_R_REGS,
							     (void *)0);
	for (i = 0; i < (size_t)nposts_recv; i++)
		if (at_entry(tb, post_recv_addr[i]))
			qemu_plugin_register_vcpu_tb_exec_cb(tb, at_post, QEMU_PLUGIN_CB_R_REGS,
							     (void *)1);
	for (i = 0; i < n; i++)
		locks += locked(qemu_plugin_tb_get_insn(tb, i));
	qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64, total, n);
	qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64, kins_e, n);
	if (locks)
		qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64,
								  klocks_e, locks);
	if (!counted(vaddr))
		return;
	b = block_of(vaddr, n, locks);
	if (!b)
		return;
	if (b->slot >= 0)
		qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64,
								  slot_entry(b->slot), 1);
	else
		qemu_plugin_register_vcpu_tb_exec_cb(tb, block_ran, QEMU_PLUGIN_CB_NO_REGS, b);
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu)
{
	riser_garray *regs;
	unsigned int i;

	(void)id;
	if (vcpu < 8 && !cur[vcpu])
		cur[vcpu] = &boot_state[vcpu];
	if (reg_rsp)
		return;
	regs = qemu_plugin_get_registers();
	if (!regs)
		return;
	for (i = 0; i < regs->len; i++) {
		qemu_plugin_reg_descriptor *d = &((qemu_plugin_reg_descriptor *)regs->data)[i];

		if (!strcmp(d->name, "rsp"))
			reg_rsp = d->handle;
		else if (!strcmp(d->name, "rdi"))
			reg_rdi = d->handle;
		else if (!strcmp(d->name, "rsi"))
			reg_rsi = d->handle;
	}
}

static void at_exit(qemu_plugin_id_t id, void *udata)
{
	(void)id;
	(void)udata;
	fclose(out);
}

/* "LO:HI", both hexadecimal (with or without 0x), LO < HI. */
static int parse_range(const char *s)
{
	char *end;
	uint64_t lo, hi;

	if (nranges == MAX_RANGES)
		return -1;
	errno = 0;
	lo = strtoull(s, &end, 16);
	if (errno || *end != ':')
		return -1;
	hi = strtoull(end + 1, &end, 16);
	if (errno || *end || lo >= hi)
		return -1;
	ranges[nranges].lo = lo;
	ranges[nranges].hi = hi;
	nranges++;
	return 0;
}

RISER_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
					    char **argv)
{
	const char *path = NULL;
	int i;

	if (!info->system_emulation || strcmp(info->target_name, "x86_64")) {
		qemu_plugin_outs("insns: x86_64 system emulation only\n");
		return -1;
	}
	for (i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "out=", 4)) {
			path = argv[i] + 4;
		} else if (!strncmp(argv[i], "range=", 6)) {
			if (parse_range(argv[i] + 6)) {
				qemu_plugin_outs("insns: range=LO:HI, hexadecimal, LO < HI, at most eight\n");
				return -1;
			}
		} else {
			qemu_plugin_outs("insns: unknown argument\n");
			return -1;
		}
	}
	if (!path) {
		qemu_plugin_outs("insns: needs out=FILE\n");
		return -1;
	}
	if (!nranges) {
		ranges[0].lo = modules_lo;
		ranges[0].hi = modules_hi;
		nranges = 1;
	}
	vcpus = info->system.max_vcpus;
	if (vcpus > 8) {
		qemu_plugin_outs("insns: at most 8 vCPUs\n");
		return -1;
	}
	plugin_id = id;
	rbuf = g_byte_array_new();
	mbuf = g_byte_array_new();
	total_board = qemu_plugin_scoreboard_new(sizeof(uint64_t));
	runs_board = qemu_plugin_scoreboard_new(SLOTS * sizeof(uint64_t));
	vboard = qemu_plugin_scoreboard_new(sizeof(struct vstate));
	total.score = total_board;
	total.offset = 0;
	kins_e = (qemu_plugin_u64){ vboard, offsetof(struct vstate, kins) };
	klocks_e = (qemu_plugin_u64){ vboard, offsetof(struct vstate, klocks) };
	mode_e = (qemu_plugin_u64){ vboard, offsetof(struct vstate, mode) };
	watch_e = (qemu_plugin_u64){ vboard, offsetof(struct vstate, watch) };
	out = fopen(path, "w");
	if (!out)
		return -1;
	if (getenv("INSNS_DEBUG")) {
		debug = fopen(getenv("INSNS_DEBUG"), "w");
		if (debug)
			setvbuf(debug, NULL, _IOLBF, 0);
	}
	qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	qemu_plugin_register_atexit_cb(id, at_exit, NULL);
	return 0;
}
