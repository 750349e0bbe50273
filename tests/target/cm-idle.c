// SPDX-License-Identifier: GPL-2.0
/*
 * cm-idle IP PORT SECONDS: an RDMA CM connection to an iSER portal that
 * sends nothing for SECONDS, then disconnects. LIO's login thread serves
 * one connection of a portal at a time and waits for its Login Request
 * until its login timer (15 s) fires, even after the initiator has gone:
 * every login behind this connection waits that long (tests/guest/
 * features.sh: a first login that times out behind it, which iscsid then
 * tries again).
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static struct rdma_event_channel *ch;

/* The next CM event, which must be WANT. */
static int next_event(enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	int ok;

	if (rdma_get_cm_event(ch, &ev)) {
		perror("cm-idle: rdma_get_cm_event");
		return -1;
	}
	ok = ev->event == want;
	if (!ok)
		fprintf(stderr, "cm-idle: %s (status %d), not %s\n", rdma_event_str(ev->event),
			ev->status, rdma_event_str(want));
	rdma_ack_cm_event(ev);
	return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in dst = { .sin_family = AF_INET };
	/* The iSER CM header (RFC 7145 section 9.1): no flags. */
	unsigned char iser_hdr[4] = { 0 };
	struct rdma_conn_param param = {
		.private_data = iser_hdr,
		.private_data_len = sizeof(iser_hdr),
		.responder_resources = 1,
		.initiator_depth = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	struct ibv_qp_init_attr qp = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct rdma_cm_id *id;
	struct ibv_pd *pd;

	if (argc != 4 || inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
		fprintf(stderr, "usage: cm-idle IPV4 PORT SECONDS\n");
		return 2;
	}
	dst.sin_port = htons((unsigned short)atoi(argv[2]));
	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("cm-idle: rdma_create_id");
		return 1;
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 5000) ||
	    next_event(RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(id, 5000) ||
	    next_event(RDMA_CM_EVENT_ROUTE_RESOLVED))
		return 1;
	pd = ibv_alloc_pd(id->verbs);
	qp.send_cq = qp.recv_cq = ibv_create_cq(id->verbs, 2, NULL, NULL, 0);
	if (!pd || !qp.send_cq || rdma_create_qp(id, pd, &qp)) {
		perror("cm-idle: PD, CQ or QP");
		return 1;
	}
	if (rdma_connect(id, &param) || next_event(RDMA_CM_EVENT_ESTABLISHED))
		return 1;
	printf("cm-idle: connected to %s:%s, idle for %s s\n", argv[1], argv[2], argv[3]);
	fflush(stdout);
	sleep((unsigned int)atoi(argv[3]));
	rdma_disconnect(id);
	printf("cm-idle: disconnected\n");
	return 0;
}
