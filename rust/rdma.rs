// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over the kernel's RDMA stack (ib_core and rdma_cm).
//!
//! Every `unsafe` of riser's RDMA use lives in this module and its children.
//! The objects mirror the verbs: [`Device`] (an `ib_device`, borrowed),
//! [`Client`] (an `ib_client` registration with a per-device context),
//! [`Pd`], [`Cq`] (from the device's CQ pool), `Mr`, [`cm::CmId`] and
//! [`conn::Connection`] (a QP on a CM id). Each owning type releases its C
//! object when dropped.

pub(crate) mod cm;
pub(crate) mod conn;
mod device;
mod event;
mod verbs;

pub(crate) use device::{
    Client,
    ClientDriver,
    ClientRegistry,
    Device,
    DeviceCaps,
    DeviceRef,
    MapDevice, //
};
pub(crate) use event::AsyncEvent;
pub(crate) use verbs::{
    ib_post_send,
    post_result,
    Cq,
    Pd,
    PollContext, //
};
