// SPDX-License-Identifier: GPL-2.0

//! Socket addresses between Rust's `SocketAddr` and the kernel's C
//! structures, for the layers that hand addresses to C (the RDMA CM, the
//! iSCSI transport class): one place that knows their layout. IPv4 and IPv6.

use crate::bindings;
use core::net::{
    Ipv4Addr,
    Ipv6Addr,
    SocketAddr,
    SocketAddrV4,
    SocketAddrV6, //
};
use kernel::prelude::*;

/// `AF_INET` in the C family field's type.
// CAST: AF_INET (2) fits the family type.
const AF_INET: bindings::__kernel_sa_family_t = bindings::AF_INET as bindings::__kernel_sa_family_t;

/// `AF_INET6` in the C family field's type.
// CAST: AF_INET6 (10) fits the family type.
const AF_INET6: bindings::__kernel_sa_family_t =
    bindings::AF_INET6 as bindings::__kernel_sa_family_t;

/// Why bytes from C are no address riser can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddrError {
    /// Fewer bytes than the family's structure (or than a family field).
    Short {
        /// The family read, if there were bytes for it.
        family: Option<u16>,
        /// How many bytes there were.
        len: usize,
    },
    /// Neither `AF_INET` nor `AF_INET6`.
    Family(u16),
}

impl kernel::fmt::Display for AddrError {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        match self {
            Self::Short {
                family: Some(fam),
                len,
            } => write!(f, "{len} bytes are too few for an address of family {fam}"),
            Self::Short { family: None, len } => write!(f, "{len} bytes hold no address family"),
            Self::Family(fam) => write!(f, "address family {fam} is neither IPv4 nor IPv6"),
        }
    }
}

/// The C `sockaddr_in` of `a`.
fn sockaddr_in(a: SocketAddrV4) -> bindings::sockaddr_in {
    bindings::sockaddr_in {
        sin_family: AF_INET,
        sin_port: a.port().to_be(),
        sin_addr: bindings::in_addr {
            s_addr: u32::from_ne_bytes(a.ip().octets()),
        },
        ..Default::default()
    }
}

/// The C `sockaddr_in6` of `a` (flow label and scope id included: a
/// link-local portal names its interface by the scope id).
fn sockaddr_in6(a: SocketAddrV6) -> bindings::sockaddr_in6 {
    let mut sin6 = bindings::sockaddr_in6 {
        sin6_family: AF_INET6,
        sin6_port: a.port().to_be(),
        sin6_flowinfo: a.flowinfo().to_be(),
        sin6_scope_id: a.scope_id(),
        ..Default::default()
    };
    sin6.sin6_addr.in6_u.u6_addr8 = a.ip().octets();
    sin6
}

/// Copies the bytes of the plain-data `v` to the start of `ss`.
fn put<V>(ss: &mut bindings::__kernel_sockaddr_storage, v: &V) {
    const { assert!(size_of::<V>() <= size_of::<bindings::__kernel_sockaddr_storage>()) };
    // SAFETY: `v` is readable for `size_of::<V>()` bytes, `ss` writable for
    // at least that many (checked at compile time above); the two do not
    // overlap (`ss` is borrowed mutably, `v` shared). The callers pass
    // `sockaddr_in`/`sockaddr_in6`, plain data whose every byte is
    // initialised (made from `Default`), and any bytes are a valid storage.
    unsafe {
        core::ptr::copy_nonoverlapping(
            core::ptr::from_ref(v).cast::<u8>(),
            core::ptr::from_mut(ss).cast::<u8>(),
            size_of::<V>(),
        )
    };
}

/// `a` in a `sockaddr_storage`: what the RDMA CM and the iSCSI transport
/// class's address helpers take, for either family.
pub(crate) fn storage(a: SocketAddr) -> bindings::__kernel_sockaddr_storage {
    let mut ss = bindings::__kernel_sockaddr_storage::default();
    match a {
        SocketAddr::V4(a) => put(&mut ss, &sockaddr_in(a)),
        SocketAddr::V6(a) => put(&mut ss, &sockaddr_in6(a)),
    }
    ss
}

/// The address in the `len` bytes at `p`: an IPv4 `sockaddr_in` or an IPv6
/// `sockaddr_in6`, whole; anything else is an [`AddrError`].
///
/// # Safety
///
/// `p` must point to at least `len` readable bytes (of any alignment).
pub(crate) unsafe fn from_raw(p: *const u8, len: usize) -> Result<SocketAddr, AddrError> {
    let fam_len = size_of::<bindings::__kernel_sa_family_t>();
    if len < fam_len {
        return Err(AddrError::Short { family: None, len });
    }
    // SAFETY: `p` holds at least `fam_len` bytes (checked above, function
    // contract); any bits are a valid family; read unaligned, as netlink
    // payloads may be.
    let family = unsafe { core::ptr::read_unaligned(p.cast::<bindings::__kernel_sa_family_t>()) };
    let short = Err(AddrError::Short {
        family: Some(family),
        len,
    });
    match family {
        AF_INET => {
            if len < size_of::<bindings::sockaddr_in>() {
                return short;
            }
            // SAFETY: `p` holds a whole `sockaddr_in` (checked above);
            // every bit pattern is a valid one.
            let sin = unsafe { core::ptr::read_unaligned(p.cast::<bindings::sockaddr_in>()) };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        AF_INET6 => {
            if len < size_of::<bindings::sockaddr_in6>() {
                return short;
            }
            // SAFETY: `p` holds a whole `sockaddr_in6` (checked above);
            // every bit pattern is a valid one.
            let sin6 = unsafe { core::ptr::read_unaligned(p.cast::<bindings::sockaddr_in6>()) };
            // SAFETY: Every bit pattern of the address union is a valid
            // byte array.
            let octets = unsafe { sin6.sin6_addr.in6_u.u6_addr8 };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(octets),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        other => Err(AddrError::Family(other)),
    }
}

#[kunit_tests(riser_sockaddr)]
mod tests {
    use super::*;

    fn round_trip(a: SocketAddr) -> Result<SocketAddr, AddrError> {
        let ss = storage(a);
        // SAFETY: `ss` is a whole `sockaddr_storage`.
        unsafe { from_raw((&raw const ss).cast(), size_of_val(&ss)) }
    }

    #[test]
    fn an_ipv4_address_survives_the_c_structures() {
        let a = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 7), 3260));
        assert_eq!(round_trip(a), Ok(a));
        let ss = storage(a);
        // SAFETY: `storage` wrote a `sockaddr_in` at the start of `ss`.
        let sin =
            unsafe { core::ptr::read_unaligned((&raw const ss).cast::<bindings::sockaddr_in>()) };
        assert_eq!(sin.sin_family, AF_INET);
        assert_eq!(sin.sin_port, 3260u16.to_be());
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [192, 0, 2, 7]);
    }

    #[test]
    fn an_ipv6_address_survives_the_c_structures() {
        let ip = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1);
        let a = SocketAddr::V6(SocketAddrV6::new(ip, 3260, 0x12345, 7));
        assert_eq!(round_trip(a), Ok(a));
        let ss = storage(a);
        // SAFETY: `storage` wrote a `sockaddr_in6` at the start of `ss`.
        let sin6 =
            unsafe { core::ptr::read_unaligned((&raw const ss).cast::<bindings::sockaddr_in6>()) };
        assert_eq!(sin6.sin6_family, AF_INET6);
        assert_eq!(sin6.sin6_port, 3260u16.to_be());
        assert_eq!(sin6.sin6_scope_id, 7);
        // SAFETY: Every bit pattern of the union is a byte array.
        assert_eq!(unsafe { sin6.sin6_addr.in6_u.u6_addr8 }, ip.octets());
    }

    #[test]
    fn too_few_bytes_or_another_family_are_refused() {
        let v6 = storage(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::LOCALHOST,
            1,
            0,
            0,
        )));
        let p: *const u8 = (&raw const v6).cast();
        // SAFETY: `v6` holds more than each length given.
        let (sockaddr_only, one_byte) = unsafe { (from_raw(p, 16), from_raw(p, 1)) };
        // A `struct sockaddr`'s 16 bytes are not a whole `sockaddr_in6`.
        assert_eq!(
            sockaddr_only,
            Err(AddrError::Short {
                family: Some(AF_INET6),
                len: 16
            })
        );
        assert_eq!(
            one_byte,
            Err(AddrError::Short {
                family: None,
                len: 1
            })
        );
        let v4 = storage(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1)));
        let mut other = v4;
        // CAST: AF_UNIX (1) fits the family type.
        other.__bindgen_anon_1.__bindgen_anon_1.ss_family =
            bindings::AF_UNIX as bindings::__kernel_sa_family_t;
        // SAFETY: Each storage holds more than the length given.
        let (v4_short, unix) = unsafe {
            (
                from_raw((&raw const v4).cast(), 15),
                from_raw((&raw const other).cast(), size_of_val(&other)),
            )
        };
        assert!(v4_short.is_err());
        assert_eq!(unix, Err(AddrError::Family(1)));
    }
}
