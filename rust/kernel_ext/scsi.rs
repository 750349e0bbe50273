// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over the SCSI midlayer: the host template that SCSI
//! hosts of riser's sessions are made from, and those hosts.

use crate::bindings;
use core::ptr::{
    null_mut,
    NonNull, //
};
use kernel::{
    error::to_result,
    prelude::*,
    types::Opaque,
    ThisModule, //
};

/// The limits a host template advertises to the SCSI midlayer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostLimits {
    /// Largest command, in 512-byte sectors.
    pub(crate) max_sectors: u32,
    /// Most scatter/gather entries of one command.
    pub(crate) sg_tablesize: u16,
    /// Commands queued per LUN by default.
    pub(crate) cmd_per_lun: i16,
    /// Per-command private data the midlayer allocates with each command.
    pub(crate) cmd_size: u32,
}

/// A SCSI host template whose command and error handlers are libiscsi's.
///
/// # Invariants
///
/// `sht` is fully initialised in `new` and never changed afterwards; the
/// strings it points to are `'static`.
#[pin_data]
pub(crate) struct HostTemplate {
    #[pin]
    sht: Opaque<bindings::scsi_host_template>,
}

// SAFETY: The template is read-only after construction.
unsafe impl Send for HostTemplate {}
// SAFETY: The template is read-only after construction.
unsafe impl Sync for HostTemplate {}

impl HostTemplate {
    /// A template named `name` for hosts that show `proc_name` in
    /// `/sys/class/scsi_host/*/proc_name`, with libiscsi's queuecommand and
    /// error handlers.
    pub(crate) fn new_iscsi(
        module: &'static ThisModule,
        name: &'static CStr,
        proc_name: &'static CStr,
        limits: HostLimits,
    ) -> impl PinInit<Self> {
        pin_init!(Self {
            sht <- Opaque::ffi_init(move |slot: *mut bindings::scsi_host_template| {
                // SAFETY: `slot` is valid for writes; an all-zero template is
                // a valid value that the assignments below complete.
                unsafe { core::ptr::write_bytes(slot, 0, 1) };
                // SAFETY: `slot` is valid and initialised just above.
                let t = unsafe { &mut *slot };
                t.module = module.as_ptr();
                t.name = name.as_char_ptr();
                t.proc_name = proc_name.as_char_ptr();
                t.queuecommand = Some(bindings::iscsi_queuecommand);
                t.change_queue_depth = Some(bindings::scsi_change_queue_depth);
                t.eh_timed_out = Some(bindings::iscsi_eh_cmd_timed_out);
                t.eh_abort_handler = Some(bindings::iscsi_eh_abort);
                t.eh_device_reset_handler = Some(bindings::iscsi_eh_device_reset);
                t.eh_target_reset_handler = Some(bindings::iscsi_eh_recover_target);
                t.target_alloc = Some(bindings::iscsi_target_alloc);
                t.this_id = -1;
                t.set_track_queue_depth(1);
                t.max_sectors = limits.max_sectors;
                t.sg_tablesize = limits.sg_tablesize;
                t.cmd_per_lun = limits.cmd_per_lun;
                t.cmd_size = limits.cmd_size;
            }),
        })
    }

    /// The raw template, for libiscsi's `iscsi_host_alloc`.
    pub(crate) fn as_raw(&self) -> *mut bindings::scsi_host_template {
        self.sht.get()
    }

    /// The template's `proc_name`.
    pub(crate) fn proc_name(&self) -> &CStr {
        // SAFETY: By the type invariant `proc_name` is a `'static` C string
        // set in `new` and never changed.
        unsafe { CStr::from_char_ptr((*self.sht.get()).proc_name) }
    }

    /// The limits the template advertises.
    pub(crate) fn limits(&self) -> HostLimits {
        // SAFETY: By the type invariant the template is initialised and not
        // written after `new`.
        let t = unsafe { &*self.sht.get() };
        HostLimits {
            max_sectors: t.max_sectors,
            sg_tablesize: t.sg_tablesize,
            cmd_per_lun: t.cmd_per_lun,
            cmd_size: t.cmd_size,
        }
    }
}

/// How a new host queues and splits commands, set before it is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostConfig {
    /// Commands the host queues at once.
    pub(crate) can_queue: u16,
    /// Commands queued per LUN by default.
    pub(crate) cmd_per_lun: i16,
    /// Scatter/gather entries per command.
    pub(crate) sg_tablesize: u16,
    /// Largest command, in 512-byte sectors.
    pub(crate) max_sectors: u32,
    /// Highest LUN scanned.
    pub(crate) max_lun: u64,
    /// Whether SG elements must not have gaps inside a 4 KiB page.
    pub(crate) virt_boundary_4k: bool,
}

/// An iSCSI host (a `Scsi_Host` carrying libiscsi's `iscsi_host`), from
/// its allocation to its free: dropping it removes it from the midlayer if
/// it was added, then frees it.
///
/// # Invariants
///
/// `ptr` was allocated by `iscsi_host_alloc` and is owned by this value;
/// it has been added to the midlayer (`iscsi_host_add`) exactly when
/// `added` is set.
pub(crate) struct Host {
    ptr: NonNull<bindings::Scsi_Host>,
    added: bool,
}

impl Host {
    /// Allocates a host from `sht` for the SCSI transport `transportt`,
    /// configured by `cfg`, not yet added. One target, one channel, CDBs of
    /// up to 16 bytes; no transmit workqueue.
    ///
    /// # Safety
    ///
    /// `sht` and `transportt` must stay valid until the host is freed.
    pub(crate) unsafe fn new_iscsi(
        sht: *mut bindings::scsi_host_template,
        transportt: *mut bindings::scsi_transport_template,
        cfg: &HostConfig,
    ) -> Result<Self> {
        // SAFETY: `sht` is valid (function contract).
        let ptr =
            NonNull::new(unsafe { bindings::iscsi_host_alloc(sht, 0, false) }).ok_or(ENOMEM)?;
        let sh = ptr.as_ptr();
        // SAFETY: `sh` is a new host, not added, owned here.
        unsafe {
            (*sh).transportt = transportt;
            (*sh).cmd_per_lun = cfg.cmd_per_lun;
            (*sh).max_lun = cfg.max_lun;
            (*sh).max_id = 0;
            (*sh).max_channel = 0;
            (*sh).max_cmd_len = 16;
            (*sh).can_queue = c_int::from(cfg.can_queue);
            (*sh).sg_tablesize = cfg.sg_tablesize;
            (*sh).max_sectors = cfg.max_sectors;
            if cfg.virt_boundary_4k {
                (*sh).virt_boundary_mask = 4096 - 1;
            }
        }
        // INVARIANT: allocated just above, not added.
        Ok(Self { ptr, added: false })
    }

    /// Adds the host to the midlayer, as a child of `parent` (the device
    /// that does its DMA) if given.
    pub(crate) fn add(&mut self, parent: Option<&kernel::device::Device>) -> Result {
        if self.added {
            return Err(EBUSY);
        }
        let parent = parent.map_or(null_mut(), |d| {
            // `Device` is transparent over the C `struct device`.
            core::ptr::from_ref(d).cast_mut().cast::<bindings::device>()
        });
        // SAFETY: The host is allocated and not added (type invariant);
        // `parent` is null or a live device.
        to_result(unsafe { bindings::iscsi_host_add(self.ptr.as_ptr(), parent) })?;
        // INVARIANT: added just above.
        self.added = true;
        Ok(())
    }

    /// The C host, for libiscsi's session setup.
    pub(crate) fn as_raw(&self) -> *mut bindings::Scsi_Host {
        self.ptr.as_ptr()
    }

    /// Gives the added host to the C object that owns it from now on (the
    /// libiscsi session made on it); [`Host::from_raw_added`] takes it back
    /// to free it.
    pub(crate) fn into_raw(self) -> NonNull<bindings::Scsi_Host> {
        let ptr = self.ptr;
        core::mem::forget(self);
        ptr
    }

    /// Takes back a host given away by [`Host::into_raw`] once added.
    ///
    /// # Safety
    ///
    /// `ptr` must come from `into_raw` of an added host, and be taken back
    /// once.
    pub(crate) unsafe fn from_raw_added(ptr: NonNull<bindings::Scsi_Host>) -> Self {
        // INVARIANT: allocated, added and owned (function contract).
        Self { ptr, added: true }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // SAFETY: The host is owned here, and added exactly when `added` is
        // set (type invariant); nothing uses it after.
        unsafe {
            if self.added {
                bindings::iscsi_host_remove(self.ptr.as_ptr(), false);
            }
            bindings::iscsi_host_free(self.ptr.as_ptr());
        }
    }
}

#[kunit_tests(riser_scsi)]
mod tests {
    use super::*;

    #[test]
    fn host_template_keeps_names_and_limits() -> Result {
        let limits = HostLimits {
            max_sectors: 1024,
            sg_tablesize: 128,
            cmd_per_lun: 512,
            cmd_size: 64,
        };
        let t = KBox::pin_init(
            HostTemplate::new_iscsi(
                kernel::module::this_module::<crate::LocalModule>(),
                c"riser test",
                c"iscsi_iser",
                limits,
            ),
            GFP_KERNEL,
        )?;
        assert_eq!(t.proc_name(), c"iscsi_iser");
        assert_eq!(t.limits(), limits);
        Ok(())
    }
}
