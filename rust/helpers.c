// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers: static inline functions and macros of the kernel headers, made
 * callable from Rust. Each is a one-line forward; see include/riser_helpers.h.
 */
#include <kunit/test.h>
#include <kunit/test-bug.h>
#include <net/net_namespace.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "riser_helpers.h"

struct ib_pd *riser_ib_alloc_pd(struct ib_device *device, unsigned int flags)
{
	return ib_alloc_pd(device, flags);
}

void riser_ib_dealloc_pd(struct ib_pd *pd)
{
	ib_dealloc_pd(pd);
}

void *riser_ib_get_client_data(struct ib_device *device, struct ib_client *client)
{
	return ib_get_client_data(device, client);
}

struct ib_qp *riser_ib_create_qp(struct ib_pd *pd, struct ib_qp_init_attr *attr)
{
	return ib_create_qp(pd, attr);
}

int riser_ib_destroy_qp(struct ib_qp *qp)
{
	return ib_destroy_qp(qp);
}

int riser_ib_dereg_mr(struct ib_mr *mr)
{
	return ib_dereg_mr(mr);
}

struct rdma_cm_id *riser_rdma_create_id(int (*handler)(struct rdma_cm_id *id,
						       struct rdma_cm_event *event),
					void *context, int ps, int qp_type)
{
	return rdma_create_id(&init_net, handler, context, ps, qp_type);
}

void riser_kunit_skip(const char *reason)
{
#if IS_ENABLED(CONFIG_KUNIT)
	struct kunit *test = kunit_get_current_test();

	if (test)
		kunit_mark_skipped(test, "%s", reason);
#endif
}
