// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over the SCSI midlayer: the host template that SCSI
//! hosts of riser's sessions are made from.

use crate::bindings;
use kernel::{prelude::*, types::Opaque, ThisModule};

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
