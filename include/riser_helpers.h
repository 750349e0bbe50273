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
struct ib_qp *riser_ib_create_qp(struct ib_pd *pd, struct ib_qp_init_attr *attr);
int riser_ib_destroy_qp(struct ib_qp *qp);
int riser_ib_dereg_mr(struct ib_mr *mr);
struct rdma_cm_id *riser_rdma_create_id(int (*handler)(struct rdma_cm_id *id,
						       struct rdma_cm_event *event),
					void *context, int ps, int qp_type);
void riser_kunit_skip(const char *reason);

/* Module parameters (rust/params.c); riser_param_check() is Rust. */
unsigned int riser_param_max_sectors(void);
unsigned int riser_param_max_lun(void);
int riser_param_debug_level(void);
bool riser_param_always_register(void);
bool riser_param_pi_enable(void);
int riser_param_check(const char *name, long long value);

#endif /* RISER_HELPERS_H */
