# SPDX-License-Identifier: GPL-2.0
#
# Splits a guest's dmesg into what tests/run-guest checks (stdout) and one
# report of rdma_rxe's that is known not to be riser's: its first lines go to
# the file named by -v known=FILE.
#
# rxe_resp_queue_pkt() queues a received request on the destination QP's
# req_pkts, the skb carrying the QP reference rxe_rcv() took, and then
# schedules the QP's receive task. If that QP is in the error state or being
# destroyed, its receiver drains req_pkts (drain_req_pkts drops each skb's
# reference) in between, the QP's last reference goes and ib_core frees it,
# and rxe_sched_task() then works on freed memory: WARN_ON(refcount <= 0) at
# rxe_task.c, and a KASAN use-after-free on the task's spin lock. The
# sender is a peer QP on the same rxe device (the hostile target's, which
# keeps sending while riser's connection fails and iscsid destroys its QP).
#
# A block counts as that report only when its call trace has
# rxe_sched_task called from rxe_resp_queue_pkt and no frame of riser's
# ([riser]); for a KASAN report, in the access stack (before "Allocated by
# task"), and only when no other report started inside it (another CPU's).
# Any other report stays in the checked output, and so does a block with
# any line inside it (after its first) that tests/run-guest counts as bad
# (-v bad=KERNEL_BAD).

function flush_block(  i, ok) {
	if (kind == "warn")
		ok = (buf[1] ~ /WARNING: drivers\/infiniband\/sw\/rxe\/rxe_task\.c:[0-9]+ at rxe_sched_task/) &&
			(trace ~ /rxe_resp_queue_pkt\+/) && !(trace ~ /\[riser\]/) && !mixed
	else
		ok = (trace ~ /rxe_sched_task\+/) && (trace ~ /rxe_resp_queue_pkt\+/) && !(trace ~ /\[riser\]/) && !mixed
	if (ok)
		print buf[1] > known
	else
		for (i = 1; i <= nb; i++) print buf[i]
	nb = 0; kind = ""; trace = ""; mixed = 0
}

{
	if (kind == "") {
		if ($0 ~ /WARNING: drivers\/infiniband\/sw\/rxe\//) { kind = "warn"; inside = 1 }
		else if ($0 ~ /BUG: KASAN: /) { kind = "kasan"; inside = 1 }
		else { print; next }
	}
	if (nb > 0 && $0 ~ bad) mixed = 1
	buf[++nb] = $0
	if ($0 ~ /(Allocated|Freed) by task/) inside = 0
	if (inside) trace = trace "\n" $0
	if (kind == "warn" && $0 ~ /---\[ end trace/) flush_block()
	else if (kind == "kasan" && nb > 1 && $0 ~ /\] =+$/) flush_block()
}

# A report cut short is checked as it is.
END { for (i = 1; i <= nb; i++) print buf[i] }
