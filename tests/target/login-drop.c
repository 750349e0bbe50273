// SPDX-License-Identifier: GPL-2.0
/*
 * login-drop IP PORT INITIATOR TARGET ISID: an iSER connection to a portal
 * that sends one Login Request (a leading login straight to Full Feature
 * Phase, no authentication, the given 12-hex-digit ISID), waits until the
 * target has received it (the send's completion: the target acknowledged
 * it) and disconnects at once, before the Login Response can come. The
 * target is left completing a login whose initiator has gone, as when
 * iscsid's login timer expires just after its Login Request left: a later
 * login with the same ISID reinstates that session (tests/guest/
 * features.sh).
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "cm-client.h"

/* RFC 7145 section 9.2: the iSER header of an iSCSI control-type PDU. */
#define ISER_HDR_LEN 28
#define ISER_ISCSI_CTRL 0x10
#define BHS_LEN 48
/* RFC 7143 section 11.12: Login Request, immediate. */
#define OP_LOGIN_REQ_I 0x43
/* Transit, from operational negotiation (1) to Full Feature Phase (3). */
#define LOGIN_T_CSG1_NSG3 0x87

/* Appends KEY=VALUE and its NUL at BUF + *LEN, within CAP bytes. */
static int key(char *buf, size_t *len, size_t cap, const char *k, const char *v)
{
	int n = snprintf(buf + *len, cap - *len, "%s=%s", k, v);

	if (n < 0 || (size_t)n + 1 > cap - *len)
		return -1;
	*len += (size_t)n + 1;
	return 0;
}

/* The iSER header, BHS and keys of the Login Request; its length, or 0. */
static size_t build(unsigned char *pdu, size_t cap, const char *ini, const char *tgt,
		    const unsigned char isid[6])
{
	unsigned char *bhs = pdu + ISER_HDR_LEN;
	char *data = (char *)bhs + BHS_LEN;
	size_t cap_data = cap - ISER_HDR_LEN - BHS_LEN, len = 0;

	memset(pdu, 0, cap);
	pdu[0] = ISER_ISCSI_CTRL;
	if (key(data, &len, cap_data, "InitiatorName", ini) ||
	    key(data, &len, cap_data, "SessionType", "Normal") ||
	    key(data, &len, cap_data, "TargetName", tgt) ||
	    key(data, &len, cap_data, "HeaderDigest", "None") ||
	    key(data, &len, cap_data, "DataDigest", "None") ||
	    key(data, &len, cap_data, "RDMAExtensions", "Yes") ||
	    key(data, &len, cap_data, "InitiatorRecvDataSegmentLength", "8192") ||
	    key(data, &len, cap_data, "TargetRecvDataSegmentLength", "8192") ||
	    /* Every key LIO proposes, answered, or it does not transit. */
	    key(data, &len, cap_data, "InitialR2T", "Yes") ||
	    key(data, &len, cap_data, "ImmediateData", "Yes") ||
	    key(data, &len, cap_data, "MaxBurstLength", "262144") ||
	    key(data, &len, cap_data, "FirstBurstLength", "65536") ||
	    key(data, &len, cap_data, "DefaultTime2Wait", "2") ||
	    key(data, &len, cap_data, "DefaultTime2Retain", "0") ||
	    key(data, &len, cap_data, "MaxOutstandingR2T", "1") ||
	    key(data, &len, cap_data, "MaxConnections", "1") ||
	    key(data, &len, cap_data, "DataPDUInOrder", "Yes") ||
	    key(data, &len, cap_data, "DataSequenceInOrder", "Yes") ||
	    key(data, &len, cap_data, "ErrorRecoveryLevel", "0"))
		return 0;
	bhs[0] = OP_LOGIN_REQ_I;
	bhs[1] = LOGIN_T_CSG1_NSG3;
	bhs[5] = (unsigned char)(len >> 16);
	bhs[6] = (unsigned char)(len >> 8);
	bhs[7] = (unsigned char)len;
	memcpy(bhs + 8, isid, 6);
	/* TSIH, ITT, CID, CmdSN and ExpStatSN: 0. */
	return ISER_HDR_LEN + BHS_LEN + ((len + 3) & ~(size_t)3);
}

static int parse_isid(const char *s, unsigned char isid[6])
{
	unsigned int b;
	int i;

	if (strlen(s) != 12)
		return -1;
	for (i = 0; i < 6; i++) {
		if (sscanf(s + 2 * i, "%2x", &b) != 1)
			return -1;
		isid[i] = (unsigned char)b;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static unsigned char pdu[4096];
	unsigned char isid[6];
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
				  .num_sge = 1 };
	struct ibv_send_wr *bad;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct rdma_cm_id *id = NULL;
	struct ibv_mr *mr;
	size_t len = 0;
	int n, tries, usage = 1;

	if (argc == 6 && !parse_isid(argv[5], isid)) {
		len = build(pdu, sizeof(pdu), argv[3], argv[4], isid);
		if (!len) {
			fprintf(stderr, "login-drop: names too long\n");
			return 2;
		}
		id = cm_connect("login-drop", argv[1], argv[2], &usage);
	}
	if (!id) {
		if (usage)
			fprintf(stderr,
				"usage: login-drop IPV4 PORT INITIATOR TARGET ISID(12 hex digits)\n");
		return usage ? 2 : 1;
	}
	mr = ibv_reg_mr(id->qp->pd, pdu, sizeof(pdu), 0);
	if (!mr) {
		perror("login-drop: ibv_reg_mr");
		return 1;
	}
	/* The portal's login thread takes the connection before it is sent. */
	usleep(500 * 1000);
	sge.addr = (uintptr_t)pdu;
	sge.length = (uint32_t)len;
	sge.lkey = mr->lkey;
	wr.sg_list = &sge;
	if (ibv_post_send(id->qp, &wr, &bad)) {
		perror("login-drop: ibv_post_send");
		return 1;
	}
	/* Polled, not waited for: the disconnect follows the completion at once. */
	for (tries = 0; (n = ibv_poll_cq(id->qp->send_cq, 1, &wc)) == 0 && tries < 50000; tries++)
		usleep(100);
	if (n != 1 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "login-drop: the Login Request's send did not complete (%d, %s)\n",
			n, n == 1 ? ibv_wc_status_str(wc.status) : "none");
		return 1;
	}
	rdma_disconnect(id);
	printf("login-drop: Login Request (ISID %s, %zu bytes) received by %s:%s, disconnected\n",
	       argv[5], len, argv[1], argv[2]);
	return 0;
}
