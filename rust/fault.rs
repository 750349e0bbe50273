// SPDX-License-Identifier: GPL-2.0

//! Fault injection for tests: in a build made with
//! `make RISER_FAULT_INJECTION=1` (on make's command line only: Kbuild),
//! which says so in modinfo (`test_build`) and at load, module parameters make the Nth call of an
//! operation fail (`rust/params.c`), so the failure paths run under test. In
//! any other build [`hit`] is `false` and costs nothing.

/// Says at load that this is a test build: its knobs make riser fail and
/// wait on purpose.
#[cfg(riser_fault_injection)]
pub(crate) fn announce() {
    kernel::pr_warn!(
        "test build (RISER_FAULT_INJECTION=1): fault-injection knobs loaded, not for use\n"
    );
}

/// Nothing, outside a test build.
#[cfg(not(riser_fault_injection))]
#[inline(always)]
pub(crate) fn announce() {}

/// An operation that can be made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Site {
    /// `ib_post_send`.
    PostSend = 0,
    /// `ib_post_recv`.
    PostRecv = 1,
    /// `ib_map_mr_sg`.
    MapMr = 2,
    /// `ib_dma_map_sg` of a command's data.
    DmaMap = 3,
    /// The post of an unsolicited Data-Out (refused before it reaches the
    /// provider, as `PostSend` would refuse it): `PostSend` counts every
    /// post, and which one the Nth is depends on timing (a NOP-Out, a
    /// command's chain).
    PostDataOut = 4,
}

/// Whether this call of `site` must fail.
#[cfg(riser_fault_injection)]
pub(crate) fn hit(site: Site) -> bool {
    // SAFETY: A plain C function with no pointer arguments.
    unsafe { crate::bindings::riser_fault_hit(site as kernel::ffi::c_int) }
}

/// In a test build, waits 1 ms while `fault_send_done_delay` counts down:
/// a send completion's handler calls it before it takes what the send's
/// tag held.
#[cfg(riser_fault_injection)]
pub(crate) fn delay_send_done() {
    // SAFETY: A plain C function with no arguments.
    unsafe { crate::bindings::riser_fault_delay_send_done() }
}

/// Nothing, outside a test build.
#[cfg(not(riser_fault_injection))]
#[inline(always)]
pub(crate) fn delay_send_done() {}

/// In a test build, sleeps while `fault_release_hold` is set (at most 60 s):
/// a connection's release calls it before it drains the QP and drops its
/// task references.
#[cfg(riser_fault_injection)]
pub(crate) fn delay_release() {
    // SAFETY: A plain C function with no arguments, called from process
    // context (it sleeps).
    unsafe { crate::bindings::riser_fault_delay_release() }
}

/// Nothing, outside a test build.
#[cfg(not(riser_fault_injection))]
#[inline(always)]
pub(crate) fn delay_release() {}

/// In a test build, when `fault_hold_command` counts down to this call:
/// the send path calls it for a SCSI command (ITT `itt`, as read from its
/// BHS) after libiscsi allocated its task and before its slot word is
/// published, and it waits (busy, at most 5 s) until the receive path has
/// handled a SCSI Response with that ITT ([`response_handled`]).
#[cfg(riser_fault_injection)]
pub(crate) fn hold_command(itt: u32) {
    // SAFETY: A plain C function with an integer argument; it busy-waits,
    // which the send path's atomic context allows.
    unsafe { crate::bindings::riser_fault_hold_command(itt) }
}

/// Nothing, outside a test build.
#[cfg(not(riser_fault_injection))]
#[inline(always)]
pub(crate) fn hold_command(_itt: u32) {}

/// In a test build, as [`hold_command`] when `fault_hold_posting` counts
/// down to this call: after the command's slot word is published and before
/// its work requests are posted.
#[cfg(riser_fault_injection)]
pub(crate) fn hold_posting(itt: u32) {
    // SAFETY: A plain C function with an integer argument; it busy-waits,
    // which the send path's atomic context allows.
    unsafe { crate::bindings::riser_fault_hold_posting(itt) }
}

/// Nothing, outside a test build.
#[cfg(not(riser_fault_injection))]
#[inline(always)]
pub(crate) fn hold_posting(_itt: u32) {}

/// In a test build, the receive path has handled a SCSI Response with ITT
/// `itt` (handed it on, or failed the connection on it): a command held by
/// [`hold_command`] with that ITT goes on.
#[cfg(riser_fault_injection)]
pub(crate) fn response_handled(itt: u32) {
    // SAFETY: A plain C function with an integer argument.
    unsafe { crate::bindings::riser_fault_response_handled(itt) }
}

/// Nothing, outside a test build.
#[cfg(not(riser_fault_injection))]
#[inline(always)]
pub(crate) fn response_handled(_itt: u32) {}

/// Whether this call of `site` must fail: never, outside a test build.
#[cfg(not(riser_fault_injection))]
#[inline(always)]
pub(crate) fn hit(_site: Site) -> bool {
    false
}
