// SPDX-License-Identifier: GPL-2.0

//! Fuzzes the sizing rules: `check_param`, `Params::new`, `sg_tablesize` and
//! `conn_sizing`, with arbitrary numbers, including parameter values that
//! `Params::new` would refuse.
//!
//! Nothing may panic or overflow (the target is built with overflow checks).
//! `check_param` must follow the bounds its documentation lists;
//! `conn_sizing`, when it sizes a connection, must stay within the device's
//! limits (work requests, registration pages), carry at least one and at most
//! the requested commands with their send work requests, the management PDUs
//! and a drain slot, map every command of `max_sectors` in one registration,
//! and size the CQ for both queues; it may fail only when the device cannot
//! carry one command. A device with larger limits never gets a smaller
//! sizing.

#![no_main]

mod common;
#[path = "../../../rust/proto.rs"]
mod proto;

use common::Input;
use libfuzzer_sys::fuzz_target;
use proto::sizing::{
    check_param, conn_sizing, sg_tablesize, signal_interval, ConnSizing, Params, MAX_SG_PAGES,
    MAX_UNSIGNALED_RUN, PAGE_4K, RX_MISC_PDUS, SECTOR_SIZE, SEND_WRS_PER_CMD, TX_MISC_PDUS,
};

/// The bounds `check_param`'s documentation gives.
const DOCUMENTED: [(&str, i64, i64); 5] = [
    ("max_sectors", 1, 0xffff_ffff),
    ("max_lun", 1, 0xffff_ffff),
    ("debug_level", -0x8000_0000, 0x7fff_ffff),
    ("always_register", 0, 1),
    ("pi_enable", 0, 1),
];

/// The most commands a caller asks for: libiscsi's `cmds_max` is a u16.
const MAX_CMDS: u32 = u16::MAX as u32;

fn check_params(input: &mut Input<'_>) {
    let sel = usize::from(input.u8());
    let value = input.u64() as i64;
    let name = DOCUMENTED.get(sel % 8).map_or("no_such_param", |d| d.0);
    let (min, max) = DOCUMENTED
        .iter()
        .find(|d| d.0 == name)
        .map_or((0, 0), |d| (d.1, d.2));
    let value = match sel >> 4 {
        // Mostly values near the bounds, sometimes anything.
        0..=5 => min + value % 4,
        6..=11 => max + value % 4,
        _ => value,
    };
    let res = check_param(name, value);
    match DOCUMENTED.iter().find(|d| d.0 == name) {
        Some(&(_, min, max)) => {
            assert_eq!(res.is_ok(), (min..=max).contains(&value), "{name}={value}");
            if let Err(e) = res {
                assert_eq!((e.name, e.value, e.min, e.max), (name, value, min, max));
            }
        }
        None => {
            let e = res.expect_err("unknown parameter accepted");
            assert_eq!(e.value, value);
            assert!(e.min > e.max, "an unknown name has an empty range");
        }
    }
}

fn check_sg(max_sectors: u32) {
    let sg = sg_tablesize(max_sectors);
    let bytes = (u64::from(max_sectors) * u64::from(SECTOR_SIZE)).min(u64::from(u32::MAX));
    assert_eq!(u64::from(sg), bytes / u64::from(PAGE_4K));
    if let Some(more) = max_sectors.checked_add(1) {
        assert!(sg_tablesize(more) >= sg);
    }
}

fn check_sizing(p: &Params, cmds: u32, max_qp_wr: u32, max_fr_pages: u32, gaps: bool) {
    let got = conn_sizing(p, cmds, max_qp_wr, max_fr_pages, gaps);
    let reserved = u32::from(!gaps);
    // Work requests one command needs, with the management PDUs and the
    // drain slot.
    let one_cmd = u64::from(SEND_WRS_PER_CMD + TX_MISC_PDUS + RX_MISC_PDUS + 1);
    let sg_possible = sg_tablesize(p.max_sectors)
        .min(MAX_SG_PAGES)
        .min(max_fr_pages.saturating_sub(reserved));
    let carries_one = cmds >= 1 && u64::from(max_qp_wr) >= one_cmd && sg_possible >= 1;
    let Some(s) = got else {
        if cmds <= MAX_CMDS {
            assert!(!carries_one, "refused a device that carries a command");
        }
        return;
    };
    assert!(
        carries_one,
        "sized a device that cannot carry a command: {s:?}"
    );
    let ConnSizing {
        max_cmds,
        max_send_wr,
        max_recv_wr,
        signal_interval: interval,
        cq_entries,
        sg_tablesize: sg,
        pages_per_mr,
        max_sectors,
    } = s;
    // Inline SENDs are signaled one in `interval`: the finished ones a
    // provider may not have reclaimed yet fit what the queue holds beyond
    // the commands, the management PDUs and the drain slot.
    assert_eq!(interval, signal_interval(max_send_wr, max_cmds));
    assert!((1..=1 + MAX_UNSIGNALED_RUN).contains(&interval));
    assert!(interval.is_power_of_two());
    // Commands: at least one, no more than asked, each with its sends.
    assert!(max_cmds >= 1 && max_cmds <= cmds);
    let sends =
        u64::from(max_cmds) * u64::from(SEND_WRS_PER_CMD) + u64::from(TX_MISC_PDUS + RX_MISC_PDUS);
    assert!(sends < u64::from(max_send_wr), "no drain slot: {s:?}");
    // As many commands as the send queue holds (or as asked).
    assert!(
        max_cmds == cmds || sends + u64::from(SEND_WRS_PER_CMD) + 1 > u64::from(max_send_wr),
        "room for another command: {s:?}"
    );
    // Queues within the device, a receive per command plus a drain slot.
    assert!(max_send_wr <= max_qp_wr && max_recv_wr <= max_qp_wr);
    assert!(max_recv_wr > max_cmds);
    assert_eq!(
        u64::from(cq_entries),
        u64::from(max_send_wr) + u64::from(max_recv_wr)
    );
    // Registration within the device, a command fits one MR.
    assert!(sg >= 1 && sg <= MAX_SG_PAGES && sg <= sg_tablesize(p.max_sectors));
    assert_eq!(pages_per_mr, sg + reserved);
    assert!(pages_per_mr <= max_fr_pages);
    assert!(max_sectors >= PAGE_4K / SECTOR_SIZE && max_sectors <= p.max_sectors);
    assert!(u64::from(max_sectors) * u64::from(SECTOR_SIZE) <= u64::from(sg) * u64::from(PAGE_4K));

    // A larger device never gets less. (With more commands than libiscsi
    // can ask for and a QP of billions of WRs, the CQ size overflows u32 and
    // conn_sizing refuses: not a case a real caller reaches.)
    if cmds > MAX_CMDS {
        return;
    }
    if let Some(more) = max_qp_wr.checked_add(1 + max_qp_wr / 2) {
        let t = conn_sizing(p, cmds, more, max_fr_pages, gaps).expect("larger QP refused");
        assert!(t.max_cmds >= max_cmds && t.max_send_wr >= max_send_wr);
        assert_eq!(t.sg_tablesize, sg);
    }
    if let Some(more) = max_fr_pages.checked_add(1 + max_fr_pages / 2) {
        let t = conn_sizing(p, cmds, max_qp_wr, more, gaps).expect("larger MRs refused");
        assert!(t.sg_tablesize >= sg && t.max_sectors >= max_sectors);
        assert_eq!(t.max_cmds, max_cmds);
    }
    // Fewer commands asked, never more given.
    let fewer = conn_sizing(p, max_cmds, max_qp_wr, max_fr_pages, gaps).expect("fewer refused");
    assert_eq!(fewer.max_cmds, max_cmds);
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    check_params(&mut input);

    let raw_sectors = input.u32();
    let max_lun = input.u32();
    let debug_level = input.u32() as i32;
    let flags = input.u8();
    check_sg(raw_sectors);

    let validated = Params::new(
        raw_sectors,
        max_lun,
        debug_level,
        flags & 1 != 0,
        flags & 2 != 0,
    );
    let in_range = |name: &str, v: i64| check_param(name, v).is_ok();
    assert_eq!(
        validated.is_ok(),
        in_range("max_sectors", raw_sectors.into())
            && in_range("max_lun", max_lun.into())
            && in_range("debug_level", debug_level.into())
    );
    // conn_sizing gets validated parameters in the driver; it must not
    // panic on any, though.
    let p = match validated {
        Ok(p) => {
            assert!(u32::from(p.sg_tablesize()) <= MAX_SG_PAGES);
            assert_eq!(u32::from(p.sg_tablesize()), sg_tablesize(p.max_sectors));
            // Sessions use the value given within a page and 16 MiB.
            assert_eq!(p.max_sectors_given, raw_sectors);
            assert_eq!(p.max_sectors, raw_sectors.clamp(8, 32768));
            assert_eq!(p.max_sectors_adjusted(), !(8..=32768).contains(&raw_sectors));
            p
        }
        Err(_) => Params {
            max_sectors: raw_sectors,
            max_sectors_given: raw_sectors,
            max_lun,
            debug_level,
            always_register: flags & 1 != 0,
            pi_enable: flags & 2 != 0,
        },
    };

    let cmds = input.u32();
    let cmds = if flags & 0x80 != 0 {
        cmds
    } else {
        cmds % (MAX_CMDS + 1)
    };
    let max_qp_wr = input.u32();
    let max_qp_wr = if flags & 0x40 != 0 {
        max_qp_wr
    } else {
        max_qp_wr % 0x10_0000
    };
    let max_fr_pages = input.u32();
    let max_fr_pages = if flags & 0x20 != 0 {
        max_fr_pages
    } else {
        max_fr_pages % 8192
    };
    check_sizing(&p, cmds, max_qp_wr, max_fr_pages, flags & 4 != 0);
});
