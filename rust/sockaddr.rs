// SPDX-License-Identifier: GPL-2.0

//! Socket addresses between Rust's `SocketAddrV4` and the kernel's C
//! structures, for the layers that hand addresses to C (the RDMA CM, the
//! iSCSI transport class): one place that knows their layout.

use crate::bindings;
use core::net::{Ipv4Addr, SocketAddrV4};
use kernel::prelude::*;

/// `AF_INET` in the C family field's type.
// CAST: AF_INET (2) fits the family type.
const AF_INET: bindings::__kernel_sa_family_t = bindings::AF_INET as bindings::__kernel_sa_family_t;

/// The C `sockaddr_in` of `a`.
pub(crate) fn sockaddr_in(a: SocketAddrV4) -> bindings::sockaddr_in {
    bindings::sockaddr_in {
        sin_family: AF_INET,
        sin_port: a.port().to_be(),
        sin_addr: bindings::in_addr {
            s_addr: u32::from_ne_bytes(a.ip().octets()),
        },
        ..Default::default()
    }
}

/// `a` in a `sockaddr_storage`, as the iSCSI transport class's address
/// helpers take it.
pub(crate) fn storage(a: SocketAddrV4) -> bindings::__kernel_sockaddr_storage {
    let sin = sockaddr_in(a);
    let mut ss = bindings::__kernel_sockaddr_storage::default();
    const _: () = assert!(
        size_of::<bindings::sockaddr_in>() <= size_of::<bindings::__kernel_sockaddr_storage>()
    );
    // SAFETY: Both are plain data; a `sockaddr_in` is no larger than the
    // storage (checked at compile time above); the two do not overlap.
    unsafe {
        core::ptr::copy_nonoverlapping(
            (&raw const sin).cast::<u8>(),
            (&raw mut ss).cast::<u8>(),
            size_of::<bindings::sockaddr_in>(),
        )
    };
    ss
}

/// The IPv4 address at `p`, or `None` for another family.
///
/// Reads no more than a `struct sockaddr` (16 bytes), the size the iSCSI
/// transport class checks a netlink address against.
///
/// # Safety
///
/// `p` must point to at least `size_of::<sockaddr>()` readable bytes.
pub(crate) unsafe fn from_raw(p: *const bindings::sockaddr) -> Option<SocketAddrV4> {
    const _: () = assert!(size_of::<bindings::sockaddr_in>() <= size_of::<bindings::sockaddr>());
    // SAFETY: `p` holds a `sockaddr`'s bytes (function contract), which a
    // `sockaddr_in` does not exceed (checked above); every bit pattern is a
    // valid `sockaddr_in`, read unaligned as netlink payloads may be.
    let sin = unsafe { core::ptr::read_unaligned(p.cast::<bindings::sockaddr_in>()) };
    if sin.sin_family != AF_INET {
        return None;
    }
    Some(SocketAddrV4::new(
        Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
        u16::from_be(sin.sin_port),
    ))
}

#[kunit_tests(riser_sockaddr)]
mod tests {
    use super::*;

    #[test]
    fn an_address_survives_the_c_structures() {
        let a = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 7), 3260);
        let ss = storage(a);
        // SAFETY: `ss` is a whole `sockaddr_storage`, larger than a `sockaddr`.
        let back = unsafe { from_raw((&raw const ss).cast()) };
        assert_eq!(back, Some(a));
        let sin = sockaddr_in(a);
        assert_eq!(sin.sin_port, 3260u16.to_be());
    }

    #[test]
    fn another_family_is_no_ipv4_address() {
        let mut ss = storage(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1));
        // CAST: AF_INET6 (10) fits the family type.
        ss.__bindgen_anon_1.__bindgen_anon_1.ss_family =
            bindings::AF_INET6 as bindings::__kernel_sa_family_t;
        // SAFETY: As above.
        assert_eq!(unsafe { from_raw((&raw const ss).cast()) }, None);
    }
}
