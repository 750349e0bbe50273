// SPDX-License-Identifier: GPL-2.0

//! Raw bindings to the kernel's RDMA, SCSI, iSCSI and iSER C APIs and to
//! riser's C helpers.
//!
//! `bindings_generated.rs` is written at build time by `scripts/bindgen-module`
//! from `include/riser_bindings.h`. It holds only what `kernel::bindings` does
//! not already define; everything else is re-exported from there, so a kernel
//! type has exactly one Rust definition. The driver and `proto` never use
//! it; the modules that do are `rdma`, `iscsi`, `kernel_ext`'s (`scsi`,
//! `sg`, `sockaddr`, `kunit`, `wq`), `params`, `trace` and `fault`.

#![allow(
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    improper_ctypes,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::as_underscore,
    clippy::cast_lossless,
    clippy::ptr_as_ptr,
    clippy::ref_as_ptr,
    clippy::undocumented_unsafe_blocks,
    // Not a lint before rustc 1.88 (distribution kernels are built with
    // older compilers).
    unknown_lints,
    unnecessary_transmutes
)]

pub(crate) use kernel::bindings::*;
use kernel::ffi;
#[allow(unused_imports)]
use pin_init::{MaybeZeroable, Zeroable};

include!("bindings_generated.rs");
