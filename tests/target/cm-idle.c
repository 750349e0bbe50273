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
#include <unistd.h>

#include "cm-client.h"

int main(int argc, char **argv)
{
	struct rdma_cm_id *id;
	int usage = 1;

	id = argc == 4 ? cm_connect("cm-idle", argv[1], argv[2], &usage) : NULL;
	if (!id) {
		if (usage)
			fprintf(stderr, "usage: cm-idle IPV4 PORT SECONDS\n");
		return usage ? 2 : 1;
	}
	printf("cm-idle: connected to %s:%s, idle for %s s\n", argv[1], argv[2], argv[3]);
	fflush(stdout);
	sleep((unsigned int)atoi(argv[3]));
	rdma_disconnect(id);
	printf("cm-idle: disconnected\n");
	return 0;
}
