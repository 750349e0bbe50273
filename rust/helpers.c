// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers: static inline functions and macros of the kernel headers, made
 * callable from Rust. Each is a one-line forward; see include/riser_helpers.h.
 * The one per-CPU variable, which Rust cannot define, is here too: the mark
 * rust/iscsi/context.rs keeps of the callbacks libiscsi runs under its locks.
 */
#include <kunit/test.h>
#include <kunit/test-bug.h>
#include <linux/bottom_half.h>
#include <linux/lockdep.h>
#include <linux/percpu.h>
#include <linux/percpu-refcount.h>
#include <linux/preempt.h>
#include <linux/workqueue.h>
#include <net/net_namespace.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include <scsi/scsi_cmnd.h>
#include <scsi/scsi_host.h>
#include <scsi/libiscsi.h>
#include <scsi/scsi_transport_iscsi.h>

#include "riser_helpers.h"

/*
 * Where Kbuild links these into the crate as LLVM bitcode (a kernel with
 * CONFIG_RUST_INLINE_HELPERS: see Kbuild), each is inlined into its Rust
 * callers, as the kernel's own helpers are (rust/helpers/helpers.c, which
 * says why it takes __always_inline: LLVM otherwise refuses to inline C
 * built with -fno-delete-null-pointer-checks into Rust). Elsewhere they are
 * plain functions of their own object.
 */
#ifdef RISER_HELPERS_BC
#define __riser_helper __always_inline
#else
#define __riser_helper
#endif

__riser_helper struct ib_pd *riser_ib_alloc_pd(struct ib_device *device, unsigned int flags)
{
	return ib_alloc_pd(device, flags);
}

__riser_helper void riser_ib_dealloc_pd(struct ib_pd *pd)
{
	ib_dealloc_pd(pd);
}

__riser_helper void *riser_ib_get_client_data(struct ib_device *device, struct ib_client *client)
{
	return ib_get_client_data(device, client);
}

__riser_helper int riser_ib_dereg_mr(struct ib_mr *mr)
{
	return ib_dereg_mr(mr);
}

__riser_helper struct rdma_cm_id *riser_rdma_create_id(int (*handler)(struct rdma_cm_id *id,
						       struct rdma_cm_event *event),
					void *context, int ps, int qp_type)
{
	return rdma_create_id(&init_net, handler, context, ps, qp_type);
}

__riser_helper u64 riser_ib_dma_map_single(struct ib_device *dev, void *addr, size_t size, int dir)
{
	return ib_dma_map_single(dev, addr, size, dir);
}

__riser_helper int riser_ib_dma_mapping_error(struct ib_device *dev, u64 addr)
{
	return ib_dma_mapping_error(dev, addr);
}

__riser_helper void riser_ib_dma_unmap_single(struct ib_device *dev, u64 addr, size_t size, int dir)
{
	ib_dma_unmap_single(dev, addr, size, dir);
}

__riser_helper void riser_ib_dma_sync_for_cpu(struct ib_device *dev, u64 addr, size_t size, int dir)
{
	ib_dma_sync_single_for_cpu(dev, addr, size, dir);
}

__riser_helper void riser_ib_dma_sync_for_device(struct ib_device *dev, u64 addr, size_t size, int dir)
{
	ib_dma_sync_single_for_device(dev, addr, size, dir);
}

__riser_helper int riser_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents, int dir)
{
	return ib_dma_map_sg(dev, sg, nents, dir);
}

__riser_helper void riser_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents, int dir)
{
	ib_dma_unmap_sg(dev, sg, nents, dir);
}

__riser_helper bool riser_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

__riser_helper struct iscsi_cls_session *riser_iscsi_session_of_conn(struct iscsi_cls_conn *conn)
{
	return iscsi_conn_to_session(conn);
}

__riser_helper struct Scsi_Host *riser_iscsi_session_to_shost(struct iscsi_cls_session *session)
{
	return iscsi_session_to_shost(session);
}

__riser_helper bool riser_iscsi_task_has_unsol_data(struct iscsi_task *task)
{
	return iscsi_task_has_unsol_data(task);
}

__riser_helper bool riser_iscsi_put_task_not_last(struct iscsi_task *task)
{
	return refcount_dec_not_one(&task->refcount);
}

/* The session's back_lock, which iscsi_itt_to_ctask() wants held. */
__riser_helper void riser_iscsi_back_lock(struct iscsi_conn *conn)
{
	spin_lock(&conn->session->back_lock);
}

__riser_helper void riser_iscsi_back_unlock(struct iscsi_conn *conn)
{
	spin_unlock(&conn->session->back_lock);
}

/* One entry for a kernel buffer (KUnit's mappings). */
void riser_sg_init_one(struct scatterlist *sg, const void *buf, unsigned int len)
{
	sg_init_one(sg, buf, len);
}

/* Both session locks, in libiscsi's order, bottom halves off. */
void riser_iscsi_session_lock(struct iscsi_session *session)
{
	spin_lock_bh(&session->frwd_lock);
	spin_lock(&session->back_lock);
}

void riser_iscsi_session_unlock(struct iscsi_session *session)
{
	spin_unlock(&session->back_lock);
	spin_unlock_bh(&session->frwd_lock);
}

/* How deep this CPU is in transport callbacks run under libiscsi's locks. */
static DEFINE_PER_CPU(unsigned int, riser_iscsi_locked);

/*
 * Called with bottom halves off, which keep the caller on this CPU
 * (preemption is off with them, except on PREEMPT_RT, where they only
 * keep it from migrating: there preemption is turned off here too, so
 * that no other thread runs on the marked CPU).
 */
__riser_helper void riser_iscsi_locked_enter(void)
{
	lockdep_assert_once(in_softirq());
	if (IS_ENABLED(CONFIG_PREEMPT_RT))
		preempt_disable();
	this_cpu_inc(riser_iscsi_locked);
}

__riser_helper void riser_iscsi_locked_exit(void)
{
	this_cpu_dec(riser_iscsi_locked);
	if (IS_ENABLED(CONFIG_PREEMPT_RT))
		preempt_enable();
}

__riser_helper bool riser_bh_lock_allowed(void)
{
	return !in_hardirq() && !in_nmi() && !irqs_disabled();
}

__riser_helper int riser_iscsi_lock_context(void)
{
	if (this_cpu_read(riser_iscsi_locked) || !riser_bh_lock_allowed())
		return -1;
	return softirq_count() ? 0 : 1;
}

__riser_helper void riser_local_bh_disable(void)
{
	local_bh_disable();
}

__riser_helper void riser_local_bh_enable(void)
{
	local_bh_enable();
}

__riser_helper bool riser_try_module_get(struct module *module)
{
	return try_module_get(module);
}

__riser_helper void riser_kunit_skip(const char *reason)
{
#if IS_ENABLED(CONFIG_KUNIT)
	struct kunit *test = kunit_get_current_test();

	if (test)
		kunit_mark_skipped(test, "%s", reason);
#endif
}

__riser_helper struct workqueue_struct *riser_alloc_workqueue(const char *name)
{
	return alloc_workqueue("%s", WQ_UNBOUND | WQ_MEM_RECLAIM, 0, name);
}

/* Per-CPU reference counts (rust/rdma/device.rs: MapDevice). */
__riser_helper int riser_percpu_ref_init(struct percpu_ref *ref, percpu_ref_func_t *release)
{
	return percpu_ref_init(ref, release, 0, GFP_KERNEL);
}

__riser_helper void riser_percpu_ref_exit(struct percpu_ref *ref)
{
	percpu_ref_exit(ref);
}

__riser_helper void riser_percpu_ref_get(struct percpu_ref *ref)
{
	percpu_ref_get(ref);
}

__riser_helper void riser_percpu_ref_put(struct percpu_ref *ref)
{
	percpu_ref_put(ref);
}

__riser_helper void riser_percpu_ref_kill(struct percpu_ref *ref)
{
	percpu_ref_kill(ref);
}
