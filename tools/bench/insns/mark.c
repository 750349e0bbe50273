// SPDX-License-Identifier: GPL-2.0
/*
 * riser-mark: executes the instruction the bench's QEMU plugin (insns.c)
 * takes as its mark, once, and exits. Run in the guest by
 * tools/bench/guest/bench-mark around every measured workload.
 *
 * riser-mark FILE: executes the configuration mark instead (`xchg
 * %cx,%cx`), with FILE's text at %rdi and its length in %rsi, from which
 * the plugin reads the code ranges of the run that follows (insns.c).
 */
#include <fcntl.h>
#include <unistd.h>

static char text[65536];

int main(int argc, char **argv)
{
	long n = 0, r;
	int fd;

	if (argc < 2) {
		__asm__ volatile("xchgw %%bx, %%bx" ::: "memory");
		return 0;
	}
	fd = open(argv[1], O_RDONLY);
	if (fd < 0)
		return 1;
	while (n < (long)sizeof(text) - 1 && (r = read(fd, text + n, sizeof(text) - 1 - n)) > 0)
		n += r;
	close(fd);
	if (n <= 0)
		return 1;
	__asm__ volatile("xchgw %%cx, %%cx" : : "D"(text), "S"(n) : "memory");
	return 0;
}
