//! Raw bytes into the frame decoder: frames, waiting or an error; never a panic, never a partial frame consumed.
#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use snrouter::native::frame::Frame;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    loop {
        let before = buf.len();
        match Frame::decode(&mut buf) {
            Ok(Some(frame)) => {
                // an RST may carry bytes after its reason (ignored: room for a message in a later version)
                if matches!(frame, Frame::Rst { .. }) {
                    assert!(before - buf.len() >= frame.wire_len());
                } else {
                    assert_eq!(before - buf.len(), frame.wire_len());
                }
                // what decodes re-encodes to the same bytes
                let mut again = BytesMut::new();
                frame.encode(&mut again);
                assert_eq!(Frame::decode(&mut again).unwrap().unwrap(), frame);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before);
                break;
            }
            Err(_) => break,
        }
    }
});
