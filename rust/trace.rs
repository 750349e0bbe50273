// SPDX-License-Identifier: GPL-2.0

//! riser's tracepoints (trace system `riser`, defined in
//! include/riser_trace.h): PDUs sent and received, completion errors and
//! connection state changes. A PDU event that is off costs a static
//! branch, tested here in Rust as the kernel's own Rust tracepoints test
//! theirs (`kernel::tracepoint`); the others a call and a static branch.
//!
//! A connection is named by an address (`conn`, which the trace shows
//! hashed, as `%p` does): the same value in every event of one connection.

use crate::bindings;
use kernel::prelude::*;

/// The BHS length.
/// The BHS length: `struct iscsi_hdr`, which the events copy.
const BHS_LEN: usize = core::mem::size_of::<bindings::iscsi_hdr>();

/// The address a connection's events carry.
pub(crate) fn id<T>(conn: &T) -> usize {
    core::ptr::from_ref(conn).addr()
}

fn ptr(conn: usize) -> *const c_void {
    core::ptr::without_provenance(conn)
}

// Only their addresses are taken (for the static branch): never read by
// value, so the parts that are not FFI-safe in some configurations (an
// empty `its_array`) do not matter.
#[cfg(CONFIG_TRACEPOINTS)]
#[allow(improper_ctypes)]
extern "C" {
    /// The PDU events' tracepoints, defined by rust/trace.c.
    static __tracepoint_riser_pdu_send: kernel::bindings::tracepoint;
    static __tracepoint_riser_pdu_recv: kernel::bindings::tracepoint;
}

/// Whether the `riser_pdu_send` event is on: its static branch.
#[inline(always)]
fn pdu_send_on() -> bool {
    #[cfg(CONFIG_TRACEPOINTS)]
    // SAFETY: The tracepoint is a real one, defined in C (rust/trace.c),
    // whose static key any context may test.
    return unsafe {
        kernel::jump_label::static_branch_unlikely!(
            __tracepoint_riser_pdu_send,
            kernel::bindings::tracepoint,
            key
        )
    };
    #[cfg(not(CONFIG_TRACEPOINTS))]
    false
}

/// Whether the `riser_pdu_recv` event is on, as [`pdu_send_on`].
#[inline(always)]
fn pdu_recv_on() -> bool {
    #[cfg(CONFIG_TRACEPOINTS)]
    // SAFETY: As in `pdu_send_on`.
    return unsafe {
        kernel::jump_label::static_branch_unlikely!(
            __tracepoint_riser_pdu_recv,
            kernel::bindings::tracepoint,
            key
        )
    };
    #[cfg(not(CONFIG_TRACEPOINTS))]
    false
}

/// A PDU was posted: its BHS and the STag the target was given (0: none).
#[inline(always)]
pub(crate) fn pdu_sent(conn: usize, bhs: &[u8; BHS_LEN], rkey: u32) {
    if pdu_send_on() {
        // SAFETY: `bhs` is valid for its 48 bytes during the call; the
        // connection's address is only recorded, never dereferenced.
        unsafe { bindings::riser_trace_pdu_send(ptr(conn), bhs.as_ptr(), rkey) }
    }
}

/// A PDU was received: its BHS and the STag the target invalidated with it
/// (0: none).
#[inline(always)]
pub(crate) fn pdu_received(conn: usize, bhs: &[u8; BHS_LEN], invalidated: u32) {
    if pdu_recv_on() {
        // SAFETY: As in `pdu_sent`.
        unsafe { bindings::riser_trace_pdu_recv(ptr(conn), bhs.as_ptr(), invalidated) }
    }
}

/// A work request completed with an error (flushes included).
pub(crate) fn wc_error(conn: usize, recv: bool, tag: u32, status: u32) {
    // SAFETY: Plain values; the address is only recorded.
    unsafe { bindings::riser_trace_wc_error(ptr(conn), recv, tag, status) }
}

/// A connection went from state `from` to `to` (0 resolving, 1
/// connecting, 2 up, 3 failed, 4 terminating).
pub(crate) fn conn_state(conn: usize, from: u8, to: u8) {
    // SAFETY: Plain values; the address is only recorded.
    unsafe { bindings::riser_trace_conn_state(ptr(conn), from, to) }
}
