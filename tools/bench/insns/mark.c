// SPDX-License-Identifier: GPL-2.0
/*
 * riser-mark: executes the instruction the bench's QEMU plugin (insns.c)
 * takes as its mark, once, and exits. Run in the guest by
 * tools/bench/guest/bench-mark around every measured workload.
 */
int main(void)
{
	__asm__ volatile("xchgw %%bx, %%bx" ::: "memory");
	return 0;
}
