// SPDX-License-Identifier: GPL-2.0

//! Fuzzes the task slots' completion words (`slot`): arbitrary sequences
//! of events on three slots (posts of any shape and their returns, SEND, Data-Out and
//! LOCAL_INV completions, responses with any ITT and any invalidation,
//! Data-Outs given up, failed posts, TMFs ending any set of slots, the
//! teardown of one slot or of all), each step checked against a shadow
//! of what was posted, given, sent and invalidated
//! (`slot::model::Shadow`): the outcome the module documents, and its
//! invariants (no completion while a key given to the target is valid or
//! a SEND is outstanding, one completion per command, one LOCAL_INV per
//! key and as soon as it is due, one task reference at most and only
//! when completion waits, the target's violations refused, the word's
//! queries, the TMF hold's among them, agreeing with the shadow).
//!
//! With the first byte's top bit set, arbitrary 64-bit values instead:
//! every transition of any word must not panic or overflow (the target is
//! built with overflow checks), and a consistent word must step to a
//! consistent one (`slot::model::any_word`).

#![no_main]

mod common;
#[path = "../../../rust/proto.rs"]
mod proto;

use common::Input;
use libfuzzer_sys::fuzz_target;
use proto::slot::{
    model::{any_word, Shadow},
    Event, Key, Post, Response,
};

const SLOTS: usize = 3;

/// The wire form of an ITT libiscsi built as `host` (host order).
fn wire(host: u32) -> u32 {
    u32::from_be_bytes(host.to_ne_bytes())
}

fn host(wire: u32) -> u32 {
    u32::from_ne_bytes(wire.to_be_bytes())
}

/// The event `kind` (below 10) for `slot`, whose command has `itt` and
/// gave `rkey`, with its parameters from the input.
fn event(input: &mut Input<'_>, kind: u8, slot: u32, itt: u32, rkey: u32) -> Event {
    match kind {
        0 => {
            let f = input.u8();
            let data_outs = if f & 0x10 != 0 {
                input.u32()
            } else {
                u32::from(input.u8() % 4)
            };
            let itt = if f & 0x20 != 0 {
                input.u32()
            } else {
                wire(slot | (u32::from(f >> 6) << 28))
            };
            Event::Post(Post {
                itt,
                send: f & 1 != 0,
                data_outs,
                key: [Key::None, Key::Given, Key::GivenSendsUseMr][usize::from((f >> 1) % 3)],
                hold: f & 8 != 0,
            })
        }
        1 => Event::SendDone,
        2 => Event::DataOutDone,
        3 => {
            let n = input.u8();
            Event::DataOutsUnsent(if n & 0x80 != 0 {
                input.u32()
            } else {
                u32::from(n % 4)
            })
        }
        4 => {
            let p = input.u8();
            let itt = match p & 3 {
                0 | 1 => itt,
                // A bit libiscsi ignores, or the session age.
                2 => wire(host(itt) ^ (1 << (13 + u32::from(input.u8() % 19)))),
                _ => input.u32(),
            };
            let invalidated = match (p >> 2) & 3 {
                0 | 1 => None,
                2 => Some(rkey),
                _ => Some(input.u32()),
            };
            Event::Response(Response {
                itt,
                invalidated,
                rkey,
                remote_inv: p & 0x10 == 0,
            })
        }
        5 => Event::InvDone,
        6 => Event::Abort,
        7 => Event::NotPosted(input.u8() & 1 != 0),
        8 => Event::Posted,
        _ => Event::Teardown,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    if input.u8() & 0x80 != 0 {
        while !input.is_empty() {
            let raw = input.u64();
            let kind = input.u8() % 10;
            let ev = event(&mut input, kind, 0, wire(0x1000_0000), 0x42);
            if let Err(e) = any_word(raw, &ev) {
                panic!("{e}: {ev:?} on {raw:#x}");
            }
        }
        return;
    }
    let mut slots = [Shadow::new(); SLOTS];
    let mut rkeys = [0x1000u32, 0x2000, 0x3000];
    while !input.is_empty() {
        let b = input.u8();
        let i = usize::from(b & 3) % SLOTS;
        let kind = (b >> 2) % 12;
        // CAST: three slots.
        let slot = i as u32;
        let itt = slots[i].word().itt().unwrap_or(wire(slot));
        // Up to one event per slot; `SLOTS` for none.
        let mut todo = [(SLOTS, Event::Abort); SLOTS];
        match kind {
            // A TMF ended a set of slots' commands ("function complete").
            10 => {
                let mask = input.u8();
                for (j, t) in todo.iter_mut().enumerate() {
                    if mask & (1 << j) != 0 {
                        *t = (j, Event::Abort);
                    }
                }
            }
            // The connection's teardown, after the drain.
            11 => {
                for (j, t) in todo.iter_mut().enumerate() {
                    *t = (j, Event::Teardown);
                }
            }
            k => todo[0] = (i, event(&mut input, k, slot, itt, rkeys[i])),
        }
        for (j, ev) in todo {
            let Some(s) = slots.get_mut(j) else {
                continue;
            };
            match s.step(&ev) {
                Err(e) => panic!("{e}: {ev:?} on slot {j}: {s:?}"),
                // A new command, a new key.
                Ok(Ok(_)) if matches!(ev, Event::Post(_)) => {
                    rkeys[j] = rkeys[j].wrapping_add(0x1_0000);
                }
                Ok(_) => {}
            }
        }
    }
});
