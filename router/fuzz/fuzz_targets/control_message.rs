//! A CONTROL payload as a linked router could send it: parsed, checked against the limits and offered to a
//! link-state database (an advertisement) or to the reports kept (a traffic report); never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use snrouter::config::{Limits, Site};
use snrouter::linkstate::{Advert, Db};
use snrouter::message::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = serde_json::from_slice::<Message>(data) else { return };
    let me = Advert {
        router: "me".into(),
        site: Site { id: "s".into(), name: "s".into(), namespace: None },
        seq: 1,
        links: vec![],
        peers: vec![],
        services: vec![],
    };
    let mut db = Db::new(me);
    match message {
        Message::Ad { ad } => {
            let _ = db.offer(ad, &Limits::default(), 1_000_000);
            let _ = snrouter::linkstate::routes(&db.adverts, "me");
            db.purge(100.0, 10.0);
        }
        Message::Report { report } => {
            let mut reports = snrouter::report::Reports::new("me");
            let _ = reports.offer(report, data.len(), true, 5, 1_000_000, 0.0);
            reports.retain_known(|_| false);
        }
        Message::Hello { .. } => {}
    }
});
