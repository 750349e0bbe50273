// SPDX-License-Identifier: GPL-2.0

//! The one way riser declares where a registration keeps what its C
//! callbacks need.
//!
//! C callbacks (an `iscsi_transport`'s, an `ib_client`'s `add`) are plain
//! functions: what they need beyond their arguments (the registered C
//! object, a table) must sit in a static that the callback finds through
//! the implementing type. Each registration trait ([`crate::iscsi::TransportOps`],
//! [`crate::rdma::ClientDriver`]) asks for `fn registry() -> &'static R`,
//! where `R` is a registry type generic over the implementor; [`registry!`]
//! writes that function with its static. A registry is claimed by the
//! registration that fills it (compare-and-exchange), so a second
//! registration of the same type fails instead of overwriting it.

/// Writes `fn registry() -> &'static $ty`, returning a static of type `$ty`
/// made by its `const fn new()`. Used inside the implementation of a
/// registration trait, with the concrete type: `registry!(Registry<Iser>)`.
macro_rules! registry {
    ($ty:ty) => {
        fn registry() -> &'static $ty {
            static REGISTRY: $ty = <$ty>::new();
            &REGISTRY
        }
    };
}

pub(crate) use registry;
