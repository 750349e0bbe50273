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
 * and then one line "VADDR INSNS" per counted block that ran since the
 * mark before: its start address and the instructions it executed (times
 * run * length). The counts are exact:
 * they do not depend on the host's speed, on sampling, or on whether
 * interrupts were enabled. bench.sh tells which module each address
 * belongs to; tools/bench/bench-report adds them up per module and
 * divides by the I/Os the disk completed between two marks.
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
/* Every instruction, added up inline by every block (no call). */
static struct qemu_plugin_scoreboard *total_board;
static qemu_plugin_u64 total;
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
	long slot;
	uint64_t runs;
	struct block *next;
};

#define SLOTS (1L << 18)
static struct qemu_plugin_scoreboard *runs_board;
static long slots_used;

/* Every instrumented block, newest first. */
static struct block *blocks;

static qemu_plugin_u64 slot_entry(long slot)
{
	qemu_plugin_u64 e = { .score = runs_board, .offset = slot * sizeof(uint64_t) };

	return e;
}

static void block_ran(unsigned int vcpu, void *udata)
{
	struct block *b = udata;

	(void)vcpu;
	b->runs++;
}

static void dump(void)
{
	struct block *b;
	int i;

	fprintf(out, "mark %lu\ntotal %" PRIu64 "\n", marks++, qemu_plugin_u64_sum(total));
	for (i = 0; i < vcpus; i++)
		qemu_plugin_u64_set(total, i, 0);
	for (b = blocks; b; b = b->next) {
		uint64_t runs = b->runs;

		if (b->slot >= 0) {
			runs = qemu_plugin_u64_sum(slot_entry(b->slot));
			for (i = 0; runs && i < vcpus; i++)
				qemu_plugin_u64_set(slot_entry(b->slot), i, 0);
		}
		b->runs = 0;
		if (runs)
			fprintf(out, "%" PRIx64 " %" PRIu64 "\n", b->vaddr, runs * b->len);
	}
	fflush(out);
}

static void mark_ran(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	(void)udata;
	dump();
}

static bool counted(uint64_t vaddr)
{
	int i;

	for (i = 0; i < nranges; i++)
		if (vaddr >= ranges[i].lo && vaddr < ranges[i].hi)
			return true;
	return false;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	uint64_t vaddr = qemu_plugin_tb_vaddr(tb);
	size_t n = qemu_plugin_tb_n_insns(tb), i;
	struct block *b;

	(void)id;
	qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64, total, n);
	if (counted(vaddr)) {
		b = calloc(1, sizeof(*b));
		if (!b)
			return;
		b->vaddr = vaddr;
		b->len = n;
		b->next = blocks;
		blocks = b;
		if (slots_used < SLOTS) {
			b->slot = slots_used++;
			qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64,
									  slot_entry(b->slot), 1);
		} else {
			b->slot = -1;
			qemu_plugin_register_vcpu_tb_exec_cb(tb, block_ran, QEMU_PLUGIN_CB_NO_REGS, b);
		}
		return;
	}
	if (vaddr >> 47)
		return;
	/* User mode: look for the mark. */
	for (i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		unsigned char op[3];

		if (qemu_plugin_insn_size(insn) != sizeof(op) ||
		    qemu_plugin_insn_data(insn, op, sizeof(op)) != sizeof(op))
			continue;
		if (op[0] == 0x66 && op[1] == 0x87 && op[2] == 0xdb)
			qemu_plugin_register_vcpu_insn_exec_cb(insn, mark_ran, QEMU_PLUGIN_CB_NO_REGS,
							       NULL);
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
	total_board = qemu_plugin_scoreboard_new(sizeof(uint64_t));
	runs_board = qemu_plugin_scoreboard_new(SLOTS * sizeof(uint64_t));
	total.score = total_board;
	total.offset = 0;
	out = fopen(path, "w");
	if (!out)
		return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	qemu_plugin_register_atexit_cb(id, at_exit, NULL);
	return 0;
}
