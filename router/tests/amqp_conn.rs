//! The AMQP connection state machine (`amqp::conn`) under arbitrary input: the fuzz target `amqp_conn`'s body
//! over random bytes and over random sequences of well-formed performatives (sessions, attaches, transfers with
//! and without `more`, flows, dispositions over wide ranges, detaches, ends) on a few channels and handles.

#[path = "support/amqp_conn_fuzz.rs"]
mod fuzz_body;

use bytes::BytesMut;
use proptest::prelude::*;
use snrouter::amqp::frame::{write_frame, FrameBody};
use snrouter::amqp::performative::{Attach, Begin, Detach, Disposition, Ending, Flow, Performative, Role, Transfer};

fn performative() -> impl Strategy<Value = Performative> {
    prop_oneof![
        Just(Performative::Begin(Box::new(Begin { incoming_window: 2, outgoing_window: 9, ..Begin::default() }))),
        (0u32..6, any::<bool>()).prop_map(|(h, r)| Performative::Attach(Box::new(Attach {
            handle: h,
            role: if r { Role::Receiver } else { Role::Sender },
            ..Attach::default()
        }))),
        (0u32..6, any::<bool>(), any::<bool>()).prop_map(|(h, more, aborted)| Performative::Transfer(Transfer {
            handle: h,
            delivery_id: Some(h),
            more,
            aborted,
            ..Transfer::default()
        })),
        (0u32..6, any::<bool>()).prop_map(|(h, drain)| Performative::Flow(Flow {
            handle: Some(h),
            link_credit: Some(3),
            drain,
            echo: true,
            ..Flow::default()
        })),
        any::<u32>().prop_map(|last| Performative::Disposition(Disposition {
            role: Role::Receiver,
            first: 0,
            last: Some(last),
            settled: true,
            state: None,
            batchable: false
        })),
        (0u32..6).prop_map(|h| Performative::Detach(Detach { handle: h, ..Detach::default() })),
        Just(Performative::End(Ending::default())),
    ]
}

fn frames() -> impl Strategy<Value = Vec<u8>> {
    let frame = (0u16..3, performative(), proptest::collection::vec(any::<u8>(), 0..8));
    proptest::collection::vec(frame, 0..32).prop_map(|fs| {
        let mut out = BytesMut::new();
        // A session on channel 0 first, so most sequences get past "no session".
        let begin = Begin { incoming_window: 4, outgoing_window: 9, ..Begin::default() };
        write_frame(&mut out, 0, &FrameBody::Amqp(Performative::Begin(Box::new(begin))), &[]);
        for (ch, p, payload) in fs {
            write_frame(&mut out, ch, &FrameBody::Amqp(p), &payload);
        }
        out.to_vec()
    })
}

proptest! {
    #[test]
    fn any_bytes(data in proptest::collection::vec(any::<u8>(), 0..1024)) {
        fuzz_body::amqp_conn(&data);
    }

    #[test]
    fn any_sequence_of_performatives(data in frames()) {
        fuzz_body::amqp_conn(&data);
    }
}
