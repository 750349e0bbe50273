/* SPDX-License-Identifier: GPL-2.0 */
/*
 * An RDMA CM connection to an iSER portal, as an initiator opens it, for
 * the test programs that play a (broken) initiator: cm-idle.c,
 * login-drop.c. One RC QP (one send, one receive) on one CQ, the iSER CM
 * header (RFC 7145 section 9.1) with no flags.
 */
#ifndef RISER_TESTS_CM_CLIENT_H
#define RISER_TESTS_CM_CLIENT_H

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>

/* The next CM event on CH, which must be WANT; messages prefixed by PROG. */
static int cm_next_event(const char *prog, struct rdma_event_channel *ch,
			 enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	int ok;

	if (rdma_get_cm_event(ch, &ev)) {
		fprintf(stderr, "%s: rdma_get_cm_event: ", prog);
		perror(NULL);
		return -1;
	}
	ok = ev->event == want;
	if (!ok)
		fprintf(stderr, "%s: %s (status %d), not %s\n", prog, rdma_event_str(ev->event),
			ev->status, rdma_event_str(want));
	rdma_ack_cm_event(ev);
	return ok ? 0 : -1;
}

/*
 * Connects to IPV4:PORT; the established id (its QP in id->qp, with its PD
 * and CQ), or NULL after a message. Usage errors (a bad address) return
 * NULL too, with *USAGE set.
 */
static struct rdma_cm_id *cm_connect(const char *prog, const char *ipv4, const char *port,
				     int *usage)
{
	struct sockaddr_in dst = { .sin_family = AF_INET };
	unsigned char iser_cm[4] = { 0 };
	struct rdma_conn_param param = {
		.private_data = iser_cm,
		.private_data_len = sizeof(iser_cm),
		.responder_resources = 1,
		.initiator_depth = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	struct ibv_qp_init_attr qp = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;

	*usage = inet_pton(AF_INET, ipv4, &dst.sin_addr) != 1;
	if (*usage)
		return NULL;
	dst.sin_port = htons((unsigned short)atoi(port));
	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		fprintf(stderr, "%s: rdma_create_id: ", prog);
		perror(NULL);
		return NULL;
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 5000) ||
	    cm_next_event(prog, ch, RDMA_CM_EVENT_ADDR_RESOLVED) ||
	    rdma_resolve_route(id, 5000) || cm_next_event(prog, ch, RDMA_CM_EVENT_ROUTE_RESOLVED))
		return NULL;
	pd = ibv_alloc_pd(id->verbs);
	qp.send_cq = qp.recv_cq = ibv_create_cq(id->verbs, 2, NULL, NULL, 0);
	if (!pd || !qp.send_cq || rdma_create_qp(id, pd, &qp)) {
		fprintf(stderr, "%s: PD, CQ or QP: ", prog);
		perror(NULL);
		return NULL;
	}
	if (rdma_connect(id, &param) || cm_next_event(prog, ch, RDMA_CM_EVENT_ESTABLISHED))
		return NULL;
	return id;
}

#endif
