/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Read right after the kernel's configuration (include/linux/kconfig.h)
 * when clang compiles C for a kernel built with GCC (scripts/clang-gcc-flags):
 * the configuration as a clang-built kernel of the same options has it.
 *
 * x86's per-CPU accessors use GCC's named address spaces where GCC has them
 * (CONFIG_CC_HAS_NAMED_AS, which arch/x86/Kconfig allows GCC only): their
 * inline assembly then names the %gs segment through the operand's address
 * space rather than in the template, and clang, which accepts __seg_gs, does
 * not print the segment of an asm memory operand: this_cpu_inc() on a
 * per-CPU pointer would be a plain increment of the per-CPU offset, a fault.
 * Without them the accessors write %gs: themselves, as on every clang-built
 * kernel; the per-CPU layout is the same either way.
 */
#undef CONFIG_CC_HAS_NAMED_AS
#undef CONFIG_USE_X86_SEG_SUPPORT
