// SPDX-License-Identifier: GPL-2.0
/*
 * riser's module parameters, with ib_iser's names, meanings and modes.
 *
 * They are declared in C because module_param_cb() is a macro and because
 * the Rust `module!` macro of this kernel registers parameters without sysfs
 * entries, while ib_iser shows them under /sys/module/.../parameters and lets
 * root change max_sectors and debug_level at run time (for sessions made
 * afterwards). Every value, at load time or written later, is checked by
 * riser_param_check(), which is Rust (rust/params.rs) and holds the bounds.
 */
#include <linux/delay.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/netdevice.h>
#include <linux/string.h>
#include <rdma/ib_verbs.h>

#include "riser_helpers.h"

static unsigned int max_sectors = 1024;
static unsigned int max_lun = 512;
static int debug_level;
static bool always_register = true;
static bool pi_enable;

/* Parses and checks a value; the bounds live in Rust. */
static int riser_param_parse_check(const char *val, const struct kernel_param *kp)
{
	long long n;
	int ret = kstrtoll(val, 0, &n);

	if (ret) {
		pr_err("riser: module parameter %s=%s is not a number\n", kp->name, val);
		return ret;
	}
	return riser_param_check(kp->name, n);
}

static int riser_set_uint(const char *val, const struct kernel_param *kp)
{
	return riser_param_parse_check(val, kp) ?: param_set_uint(val, kp);
}

static int riser_set_int(const char *val, const struct kernel_param *kp)
{
	return riser_param_parse_check(val, kp) ?: param_set_int(val, kp);
}

static const struct kernel_param_ops riser_uint_ops = {
	.set = riser_set_uint,
	.get = param_get_uint,
};

static const struct kernel_param_ops riser_int_ops = {
	.set = riser_set_int,
	.get = param_get_int,
};

module_param_cb(max_sectors, &riser_uint_ops, &max_sectors, 0644);
MODULE_PARM_DESC(max_sectors,
		 "Max number of sectors in a single scsi command, above 0; sessions use 8..32768 (default:1024)");
module_param_cb(max_lun, &riser_uint_ops, &max_lun, 0444);
MODULE_PARM_DESC(max_lun, "Max LUNs to allow per session, above 0 (default:512)");
module_param_cb(debug_level, &riser_int_ops, &debug_level, 0644);
MODULE_PARM_DESC(debug_level, "Enable debug tracing if > 2 (default:disabled)");
module_param(always_register, bool, 0444);
MODULE_PARM_DESC(always_register,
		 "Always register memory, even for continuous memory regions (default:true)");
module_param(pi_enable, bool, 0444);
MODULE_PARM_DESC(pi_enable, "Enable T10-PI offload support (default:disabled)");

unsigned int riser_param_max_sectors(void)
{
	return READ_ONCE(max_sectors);
}

unsigned int riser_param_max_lun(void)
{
	return READ_ONCE(max_lun);
}

int riser_param_debug_level(void)
{
	return READ_ONCE(debug_level);
}

bool riser_param_always_register(void)
{
	return READ_ONCE(always_register);
}

bool riser_param_pi_enable(void)
{
	return READ_ONCE(pi_enable);
}

#ifdef RISER_FAULT_INJECTION
/*
 * Fault injection, in a test build only (make RISER_FAULT_INJECTION=1, which
 * make check uses for tests/guest/inject.sh; a user's riser.ko has none of
 * this). Writing N to one of these makes the Nth call from then on of that
 * operation fail; 0 (the default) never.
 */
MODULE_INFO(test_build, "fault injection (RISER_FAULT_INJECTION=1): not for use");

static int fault_post_send, fault_post_recv, fault_map_mr, fault_dma_map, fault_post_dataout;
module_param(fault_post_send, int, 0644);
MODULE_PARM_DESC(fault_post_send, "Test build: fail the Nth post_send from now");
module_param(fault_post_recv, int, 0644);
MODULE_PARM_DESC(fault_post_recv, "Test build: fail the Nth post_recv from now");
module_param(fault_map_mr, int, 0644);
MODULE_PARM_DESC(fault_map_mr, "Test build: fail the Nth MR mapping from now");
module_param(fault_dma_map, int, 0644);
MODULE_PARM_DESC(fault_dma_map, "Test build: fail the Nth DMA mapping of command data from now");
module_param(fault_post_dataout, int, 0644);
MODULE_PARM_DESC(fault_post_dataout, "Test build: fail the Nth post of a Data-Out from now");

static int *const riser_faults[] = {
	&fault_post_send, &fault_post_recv, &fault_map_mr, &fault_dma_map, &fault_post_dataout,
};
static const char *const riser_fault_names[] = {
	"post_send", "post_recv", "map_mr", "dma_map", "post_dataout",
};

bool riser_fault_hit(int site)
{
	int *p, n;

	if (site < 0 || site >= (int)ARRAY_SIZE(riser_faults))
		return false;
	p = riser_faults[site];
	do {
		n = READ_ONCE(*p);
		if (n <= 0)
			return false;
	} while (cmpxchg(p, n, n - 1) != n);
	if (n != 1)
		return false;
	pr_warn("riser: fault injected: %s fails\n", riser_fault_names[site]);
	return true;
}

/*
 * Writing N makes each of the next N signaled send completions wait 1 ms
 * in riser's handler before it takes what the send's tag held: a window in
 * which another CPU may post on a tag a completion has freed too early.
 */
static int fault_send_done_delay;
module_param(fault_send_done_delay, int, 0644);
MODULE_PARM_DESC(fault_send_done_delay,
		 "Test build: delay each of the next N send completions by 1 ms");

void riser_fault_delay_send_done(void)
{
	int n;

	do {
		n = READ_ONCE(fault_send_done_delay);
		if (n <= 0)
			return;
	} while (cmpxchg(&fault_send_done_delay, n, n - 1) != n);
	if (n == 1)
		pr_warn("riser: fault injected: the last delayed send completion\n");
	mdelay(1);
}

/*
 * While this is non-zero, a connection's release (riser_release queue: the
 * QP drained and destroyed, then riser's task references dropped) waits,
 * up to 60 s, before it starts: a window in which libiscsi, had the stop
 * not waited for the release, would fail the connection's commands and
 * the SCSI layer send a command it had timed out again while riser still
 * held the old task (tests/guest/hostile.sh, silent-redo).
 */
static int fault_release_hold;
module_param(fault_release_hold, int, 0644);
MODULE_PARM_DESC(fault_release_hold,
		 "Test build: hold each connection's release while non-zero (at most 60 s)");

void riser_fault_delay_release(void)
{
	unsigned long t0 = jiffies;

	if (!READ_ONCE(fault_release_hold))
		return;
	pr_warn("riser: fault injected: release held\n");
	while (READ_ONCE(fault_release_hold) && time_before(jiffies, t0 + 60 * HZ))
		msleep(100);
	pr_warn("riser: fault injected: release goes on after %u ms\n",
		jiffies_to_msecs(jiffies - t0));
}

/*
 * Writing N to fault_hold_command makes the Nth SCSI command from then on
 * wait in riser's xmit_task, between libiscsi's allocation of its task (its
 * ITT is known, and libiscsi would take a response for it) and the
 * publication of its task slot's completion word; to fault_hold_posting,
 * between that publication and the post of its work requests (its
 * registration and SEND). It waits until a SCSI Response with its ITT has
 * been handled by the receive path (on the other CPU), or 5 s: a target's
 * answer to the command, sent before the command can have arrived (its ITT
 * predicted), then meets the command in that window whatever the timing
 * (tests/guest/hostile.sh, early-rsp and stale-key). xmit_task runs under
 * the session's frwd_lock with bottom halves off: the wait is a busy one.
 */
static int fault_hold_command, fault_hold_posting;
module_param(fault_hold_command, int, 0644);
MODULE_PARM_DESC(fault_hold_command,
		 "Test build: hold the Nth SCSI command from now before its slot word, until a response for it came (5 s at most)");
module_param(fault_hold_posting, int, 0644);
MODULE_PARM_DESC(fault_hold_posting,
		 "Test build: hold the Nth SCSI command from now after its slot word, before its post, until a response for it came (5 s at most)");

static u32 fault_held_itt;
static bool fault_holding, fault_held_answered;

static void riser_fault_hold(int *knob, const char *where, u32 itt)
{
	unsigned long t0 = jiffies;
	bool answered;
	int n;

	do {
		n = READ_ONCE(*knob);
		if (n <= 0)
			return;
	} while (cmpxchg(knob, n, n - 1) != n);
	if (n != 1)
		return;
	WRITE_ONCE(fault_held_itt, itt);
	WRITE_ONCE(fault_held_answered, false);
	smp_store_release(&fault_holding, true);
	pr_warn("riser: fault injected: command itt %#x held %s\n", itt, where);
	while (!(answered = smp_load_acquire(&fault_held_answered)) &&
	       time_before(jiffies, t0 + 5 * HZ))
		mdelay(1);
	WRITE_ONCE(fault_holding, false);
	pr_warn("riser: fault injected: command itt %#x held %u ms, %s\n", itt,
		jiffies_to_msecs(jiffies - t0),
		answered ? "until a SCSI Response for it was handled" : "and no response for it came");
}

void riser_fault_hold_command(u32 itt)
{
	riser_fault_hold(&fault_hold_command, "before its slot word", itt);
}

void riser_fault_hold_posting(u32 itt)
{
	riser_fault_hold(&fault_hold_posting, "after its slot word, before its post", itt);
}

void riser_fault_response_handled(u32 itt)
{
	if (smp_load_acquire(&fault_holding) && READ_ONCE(fault_held_itt) == itt)
		smp_store_release(&fault_held_answered, true);
}

/*
 * Writing a network interface's name makes ib_core deliver
 * IB_EVENT_DEVICE_FATAL for the RDMA device on it (ib_dispatch_event, to
 * every registered event handler, riser's among them), as a provider does
 * when its device dies; rxe and siw never do. Write-only.
 */
static int fault_device_fatal_set(const char *val, const struct kernel_param *kp)
{
	char name[IFNAMSIZ], *n;
	struct net_device *ndev;
	struct ib_device *ibdev;
	struct ib_event ev = { .event = IB_EVENT_DEVICE_FATAL };

	if (strscpy(name, val, sizeof(name)) < 0)
		return -EINVAL;
	n = strim(name);
	ndev = dev_get_by_name(&init_net, n);
	if (!ndev)
		return -ENODEV;
	ibdev = ib_device_get_by_netdev(ndev, RDMA_DRIVER_UNKNOWN);
	dev_put(ndev);
	if (!ibdev)
		return -ENODEV;
	ev.device = ibdev;
	ev.element.port_num = 1;
	pr_warn("riser: fault injected: device fatal event on %s\n", dev_name(&ibdev->dev));
	ib_dispatch_event(&ev);
	ib_device_put(ibdev);
	return 0;
}

static const struct kernel_param_ops fault_device_fatal_ops = {
	.set = fault_device_fatal_set,
};
module_param_cb(fault_device_fatal, &fault_device_fatal_ops, NULL, 0200);
MODULE_PARM_DESC(fault_device_fatal,
		 "Test build: deliver a DEVICE_FATAL event for the RDMA device on this interface");
#else
bool riser_fault_hit(int site)
{
	return false;
}

void riser_fault_delay_send_done(void)
{
}

void riser_fault_delay_release(void)
{
}

void riser_fault_hold_command(u32 itt)
{
}

void riser_fault_hold_posting(u32 itt)
{
}

void riser_fault_response_handled(u32 itt)
{
}
#endif
