// SPDX-License-Identifier: GPL-2.0

//! Module parameters: the values `rust/params.c` holds, and the check it
//! calls for every value set at load time or written to sysfs later.

use crate::{
    bindings,
    proto::sizing::{
        check_param,
        Params, //
    },
};
use kernel::{
    prelude::*,
    str::CStrExt, //
};

/// The parameters' current values, validated.
pub(crate) fn current() -> Result<Params> {
    // SAFETY: The getters only read the parameters with READ_ONCE.
    let raw = unsafe {
        (
            bindings::riser_param_max_sectors(),
            bindings::riser_param_max_lun(),
            bindings::riser_param_debug_level(),
            bindings::riser_param_always_register(),
            bindings::riser_param_pi_enable(),
        )
    };
    Params::new(raw.0, raw.1, raw.2, raw.3, raw.4).map_err(|e| {
        pr_err!("module parameters out of range: {}={}\n", e.name, e.value);
        EINVAL
    })
}

/// Whether riser's debug messages print: `debug_level` above 2, as
/// ib_iser's `iser_dbg` (its levels 1 and 2 add warnings and notices that
/// riser always prints). Read at each message: the parameter is writable.
pub(crate) fn debug() -> bool {
    // SAFETY: The getter only reads the parameter with READ_ONCE.
    unsafe { bindings::riser_param_debug_level() > 2 }
}

/// A debug message (`KERN_DEBUG`, with riser's prefix) when `debug_level`
/// is above 2 ([`debug`]).
macro_rules! riser_dbg {
    ($($arg:tt)*) => {
        if $crate::params::debug() {
            ::kernel::print_macro!(::kernel::print::format_strings::DEBUG, false, $($arg)*)
        }
    };
}
pub(crate) use riser_dbg;

/// Checks `value` for the parameter `name`; called by `rust/params.c` before
/// it stores a value. Returns 0, or `-EINVAL` after logging the bounds.
///
/// # Safety
///
/// `name` must point to a NUL-terminated string valid for the call (the
/// kernel_param's name).
#[no_mangle]
pub(crate) unsafe extern "C" fn riser_param_check(name: *const c_char, value: i64) -> c_int {
    // SAFETY: The caller passes a valid NUL-terminated string.
    let name = unsafe { CStr::from_char_ptr(name) };
    let Ok(name) = name.to_str() else {
        return EINVAL.to_errno();
    };
    match check_param(name, value) {
        Ok(()) => 0,
        Err(e) => {
            pr_err!(
                "module parameter {}={} is out of range {}..={}; refused\n",
                e.name,
                e.value,
                e.min,
                e.max
            );
            EINVAL.to_errno()
        }
    }
}
