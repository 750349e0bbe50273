/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The part of QEMU's TCG plugin interface (include/qemu/qemu-plugin.h,
 * API version 2 and later; registers and guest memory from QEMU 9.2 on)
 * that insns.c uses, declared from its documentation. QEMU checks qemu_plugin_version against the range it
 * supports when it loads the plugin.
 */
#ifndef RISER_QEMU_PLUGIN_H
#define RISER_QEMU_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RISER_PLUGIN_EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;

typedef struct qemu_info_t {
	const char *target_name;
	struct {
		int min;
		int cur;
	} version;
	bool system_emulation;
	union {
		struct {
			int smp_vcpus;
			int max_vcpus;
		} system;
	};
} qemu_info_t;

struct qemu_plugin_tb;
struct qemu_plugin_insn;

enum qemu_plugin_cb_flags {
	QEMU_PLUGIN_CB_NO_REGS,
	QEMU_PLUGIN_CB_R_REGS,
	QEMU_PLUGIN_CB_RW_REGS,
};

enum qemu_plugin_op {
	QEMU_PLUGIN_INLINE_ADD_U64,
	QEMU_PLUGIN_INLINE_STORE_U64,
};

/* A per-vCPU array of elements; qemu_plugin_u64 names a u64 in them. */
struct qemu_plugin_scoreboard;
typedef struct {
	struct qemu_plugin_scoreboard *score;
	size_t offset;
} qemu_plugin_u64;

typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
					  enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
					    qemu_plugin_vcpu_udata_cb_t cb,
					    enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
void qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(struct qemu_plugin_tb *tb,
							enum qemu_plugin_op op, qemu_plugin_u64 entry,
							uint64_t imm);
struct qemu_plugin_scoreboard *qemu_plugin_scoreboard_new(size_t element_size);
uint64_t qemu_plugin_u64_sum(qemu_plugin_u64 entry);
void qemu_plugin_u64_set(qemu_plugin_u64 entry, unsigned int vcpu_index, uint64_t v);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *insn, void *dest, size_t len);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_outs(const char *string);

/* Conditional callbacks (API 2): cb runs when ENTRY COND IMM holds. */
enum qemu_plugin_cond {
	QEMU_PLUGIN_COND_NEVER,
	QEMU_PLUGIN_COND_ALWAYS,
	QEMU_PLUGIN_COND_EQ,
	QEMU_PLUGIN_COND_NE,
	QEMU_PLUGIN_COND_LT,
	QEMU_PLUGIN_COND_LE,
	QEMU_PLUGIN_COND_GT,
	QEMU_PLUGIN_COND_GE,
};
void qemu_plugin_register_vcpu_tb_exec_cond_cb(struct qemu_plugin_tb *tb,
					       qemu_plugin_vcpu_udata_cb_t cb,
					       enum qemu_plugin_cb_flags flags,
					       enum qemu_plugin_cond cond, qemu_plugin_u64 entry,
					       uint64_t imm, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_cond_cb(struct qemu_plugin_insn *insn,
						 qemu_plugin_vcpu_udata_cb_t cb,
						 enum qemu_plugin_cb_flags flags,
						 enum qemu_plugin_cond cond, qemu_plugin_u64 entry,
						 uint64_t imm, void *userdata);
uint64_t qemu_plugin_u64_get(qemu_plugin_u64 entry, unsigned int vcpu_index);

/*
 * Registers and guest memory, read from a callback registered with
 * QEMU_PLUGIN_CB_R_REGS (registers) or any vCPU callback (memory). The
 * buffers are GLib's GArray and GByteArray, whose functions QEMU's own
 * process provides: declared here, resolved when QEMU loads the plugin.
 */
typedef struct {
	char *data;
	unsigned int len;
} riser_garray;
typedef struct {
	uint8_t *data;
	unsigned int len;
} riser_gbytearray;
struct qemu_plugin_register;
typedef struct {
	struct qemu_plugin_register *handle;
	const char *name;
	const char *feature;
} qemu_plugin_reg_descriptor;
typedef void (*qemu_plugin_vcpu_simple_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index);
typedef void (*qemu_plugin_simple_cb_t)(qemu_plugin_id_t id);
void qemu_plugin_register_vcpu_init_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_simple_cb_t cb);
riser_garray *qemu_plugin_get_registers(void);
int qemu_plugin_read_register(struct qemu_plugin_register *handle, riser_gbytearray *buf);
bool qemu_plugin_read_memory_vaddr(uint64_t addr, riser_gbytearray *data, size_t len);
/* Flushes the translated code (and unregisters the plugin's callbacks; cb re-registers). */
void qemu_plugin_reset(qemu_plugin_id_t id, qemu_plugin_simple_cb_t cb);
riser_gbytearray *g_byte_array_new(void);
riser_gbytearray *g_byte_array_set_size(riser_gbytearray *array, unsigned int length);

#endif
