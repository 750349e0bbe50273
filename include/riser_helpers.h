/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Prototypes of riser's C helpers (rust/helpers.c).
 *
 * Each wraps one static inline function or macro of the kernel's RDMA, SCSI
 * or KUnit headers that bindgen cannot turn into a callable symbol. They do
 * nothing else: the logic stays in Rust.
 */
#ifndef RISER_HELPERS_H
#define RISER_HELPERS_H

#include <linux/types.h>
#include <linux/percpu-refcount.h>

struct ib_device;
struct ib_client;
struct ib_pd;
struct ib_qp;
struct ib_qp_init_attr;
struct ib_mr;
struct rdma_cm_id;
struct rdma_cm_event;

struct ib_pd *riser_ib_alloc_pd(struct ib_device *device, unsigned int flags);
void riser_ib_dealloc_pd(struct ib_pd *pd);
void *riser_ib_get_client_data(struct ib_device *device, struct ib_client *client);
int riser_ib_dereg_mr(struct ib_mr *mr);
struct rdma_cm_id *riser_rdma_create_id(int (*handler)(struct rdma_cm_id *id,
						       struct rdma_cm_event *event),
					void *context, int ps, int qp_type);
struct scatterlist;
struct iscsi_cls_conn;
struct iscsi_cls_session;
struct iscsi_task;
struct Scsi_Host;
u64 riser_ib_dma_map_single(struct ib_device *dev, void *addr, size_t size, int dir);
int riser_ib_dma_mapping_error(struct ib_device *dev, u64 addr);
void riser_ib_dma_unmap_single(struct ib_device *dev, u64 addr, size_t size, int dir);
void riser_ib_dma_sync_for_cpu(struct ib_device *dev, u64 addr, size_t size, int dir);
void riser_ib_dma_sync_for_device(struct ib_device *dev, u64 addr, size_t size, int dir);
int riser_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents, int dir);
void riser_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents, int dir);
bool riser_ib_device_try_get(struct ib_device *dev);
struct iscsi_cls_session *riser_iscsi_session_of_conn(struct iscsi_cls_conn *conn);
struct Scsi_Host *riser_iscsi_session_to_shost(struct iscsi_cls_session *session);
bool riser_iscsi_task_has_unsol_data(struct iscsi_task *task);
bool riser_iscsi_put_task_not_last(struct iscsi_task *task);
struct iscsi_conn;
void riser_iscsi_back_lock(struct iscsi_conn *conn);
void riser_iscsi_back_unlock(struct iscsi_conn *conn);
void riser_sg_init_one(struct scatterlist *sg, const void *buf, unsigned int len);
struct iscsi_session;
void riser_iscsi_session_lock(struct iscsi_session *session);
void riser_iscsi_session_unlock(struct iscsi_session *session);
/*
 * The context rust/iscsi checks before it takes libiscsi's session locks:
 * transport callbacks that libiscsi calls under them mark the CPU (with
 * bottom halves off, the caller's) while they run.
 * riser_iscsi_lock_context() is negative where the locks may not be taken
 * (marked, hard interrupt, NMI, interrupts off), 0 where they may and
 * bottom halves are off already, 1 where they may once bottom halves are
 * turned off.
 */
void riser_iscsi_locked_enter(void);
void riser_iscsi_locked_exit(void);
int riser_iscsi_lock_context(void);
bool riser_bh_lock_allowed(void);
void riser_local_bh_disable(void);
void riser_local_bh_enable(void);
struct module;
bool riser_try_module_get(struct module *module);
/* An unbound, reclaim-safe workqueue named name (alloc_workqueue is a macro). */
struct workqueue_struct *riser_alloc_workqueue(const char *name);
void riser_kunit_skip(const char *reason);

/* Module parameters (rust/params.c); riser_param_check() is Rust. */
unsigned int riser_param_max_sectors(void);
unsigned int riser_param_max_lun(void);
int riser_param_debug_level(void);
bool riser_param_always_register(void);
bool riser_param_pi_enable(void);
int riser_param_check(const char *name, long long value);
/* Fault injection (rust/params.c): true when this call must fail. */
bool riser_fault_hit(int site);
/* Fault injection: a delay in the send completion handler (test build). */
void riser_fault_delay_send_done(void);
/* In a test build, waits while fault_release_hold is set (rust/params.c). */
void riser_fault_delay_release(void);
/* In a test build, holds a SCSI command before its slot word (rust/params.c). */
void riser_fault_hold_command(u32 itt);
/* The same, after the slot word and before the post (rust/params.c). */
void riser_fault_hold_posting(u32 itt);
/* In a test build, ends that hold once a response for the command was handled. */
void riser_fault_response_handled(u32 itt);

/* Per-CPU reference counts (rust/rdma/device.rs: MapDevice). */
int riser_percpu_ref_init(struct percpu_ref *ref, percpu_ref_func_t *release);
void riser_percpu_ref_exit(struct percpu_ref *ref);
void riser_percpu_ref_get(struct percpu_ref *ref);
void riser_percpu_ref_put(struct percpu_ref *ref);
void riser_percpu_ref_kill(struct percpu_ref *ref);
/* Tracepoints (rust/trace.c, include/riser_trace.h). */
void riser_trace_pdu_send(const void *conn, const u8 *bhs, u32 rkey);
void riser_trace_pdu_recv(const void *conn, const u8 *bhs, u32 invalidated);
void riser_trace_wc_error(const void *conn, bool recv, u32 tag, u32 status);
void riser_trace_conn_state(const void *conn, u8 from, u8 to);

#endif /* RISER_HELPERS_H */
