// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions riser needs that the `kernel` crate does not have
//! (yet): each would belong under the kernel's `rust/kernel/`, and none
//! names riser's driver. [`rdma`](crate::rdma) and [`iscsi`](crate::iscsi),
//! larger, have modules of their own.

pub(crate) mod kunit;
pub(crate) mod rcu;
pub(crate) mod registry;
pub(crate) mod scsi;
pub(crate) mod sg;
pub(crate) mod slot;
pub(crate) mod sockaddr;
pub(crate) mod softirq;
pub(crate) mod wq;
