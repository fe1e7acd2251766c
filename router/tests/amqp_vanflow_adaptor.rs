//! Upstream's kube-adaptor as a vanflow source through skrouterd 3.5.1 to our router's collector (issue 43 item 4):
//! it sends as `pkg/vanflow`'s event source does (go-amqp): unsettled deliveries on a link to `mc/sfe.all`
//! (beacons) and on one to `mc/sfe.<id>` (records, with an empty `to`). Our router dialed skrouterd; its `/observe`
//! lists the adaptor's records (read by the `to-override` skrouterd routed them by), and every beacon the adaptor
//! sent is settled: skrouterd settles an unsettled multicast delivery once each receiver settled its copy, and
//! the adaptor's next sends wait for that (upstream's kube-adaptor logged `send timed out` for every beacon after
//! our router subscribed, and sent no records more). Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
#[path = "support/collector.rs"]
mod collector;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::time::{Duration, Instant};

use border::*;
use collector::attach;
use serde_json::{json, Value};
use snrouter::amqp::codec::Str;
use snrouter::amqp::conn::{Conn, Event, LinkId};
use snrouter::amqp::driver::{self, Handle, LinkOp};
use snrouter::amqp::performative::{Open, Role};
use snrouter::amqp::sasl::{self, Mechanism};
use snrouter::amqp::vanflow::records::{attr, kind};
use snrouter::amqp::vanflow::{encode, Beacon, Message, Record};
use support::*;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

const ADAPTOR: &str = "adaptor-site-uid";

/// The kube-adaptor's event source on skrouterd's `normal` listener: its two sending links, unsettled.
struct Adaptor {
    handle: Handle,
    streams: mpsc::Receiver<Event>,
    beacons: LinkId,
    records: LinkId,
}

impl Adaptor {
    async fn connect(port: u16) -> Adaptor {
        let mut sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
        let open = Open { container_id: Str::from("kube-flow-controller"), ..Open::default() };
        let conn = Conn::new(open, snrouter::amqp::interior::limits(), Instant::now());
        let mut handle = driver::spawn(sock, conn, auth.rest.freeze(), 250);
        let streams = handle.take_streams().unwrap();
        let sender = handle.sender();
        let beacons = sender.attach(attach("beacons", Role::Sender, None, Some("mc/sfe.all"))).await.unwrap();
        let address = format!("mc/sfe.{ADAPTOR}");
        let records = sender.attach(attach("records", Role::Sender, None, Some(&address))).await.unwrap();
        Adaptor { handle, streams, beacons, records }
    }

    async fn send(&self, link: LinkId, m: &Message) {
        assert!(self.handle.sender().op(link, LinkOp::Transfer { payload: encode(m), more: false }).await);
    }

    async fn beacon(&self) {
        let mut b = Beacon::router(ADAPTOR);
        b.source_type = "CONTROLLER".into();
        self.send(self.beacons, &Message::Beacon(b)).await;
    }

    /// Records as go-amqp sends `pkg/vanflow`'s: the `to` property empty.
    async fn records(&self, records: Vec<Record>) {
        self.send(self.records, &Message::Records { to: String::new(), records }).await;
    }

    /// How many of its beacons skrouterd settled so far (taking the events that came).
    fn settled_beacons(&mut self, count: &mut usize) {
        while let Ok(e) = self.streams.try_recv() {
            if let Event::Disposition { link, settled: true, .. } = e {
                if link == self.beacons {
                    *count += 1;
                }
            }
        }
    }
}

fn adaptor_records(slot: &snrouter::api::Slot) -> Vec<Value> {
    let sources = router(slot).observe()["vanflow"]["sources"].as_array().cloned().unwrap_or_default();
    let adaptor = sources.into_iter().find(|s| s["id"] == ADAPTOR).unwrap_or_default();
    adaptor["records"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kube_adaptors_records_reach_our_observe_and_its_beacons_are_settled() {
    let Some((net, slot, _)) = dialing("up-k", "up-k").await else { return };
    until("our link is up", &net.skrouterd, async || network(&slot)["links"][0]["up"] == json!(true)).await;
    adaptor_through(&net, &slot).await;
}

/// The same when skrouterd dialed our router access (its messages come over the connection's flow mux).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_skrouterd_dials_us_the_kube_adaptors_beacons_are_settled_too() {
    let Some(home) = upstream::home() else { return };
    let (net, slot, _) = dialed_by(&home, "up-kd", "up-kd", None).await;
    until("skrouterd is our neighbour", &net.skrouterd, async || {
        network(&slot)["upstream"]["neighbours"].as_array().is_some_and(|n| n.contains(&json!("up-kd")))
    })
    .await;
    adaptor_through(&net, &slot).await;
}

/// upstream's kube-adaptor on skrouterd's `normal` listener: its records reach our `/observe` and every beacon it
/// sent is settled.
async fn adaptor_through(net: &Net, slot: &snrouter::api::Slot) {
    let mut adaptor = Adaptor::connect(net.normal_port).await;
    let site = Record::new(kind::SITE, ADAPTOR).with(attr::NAME, "theirs");
    let pod = Record::new(kind::PROCESS, "pod-uid").with(attr::PARENT, ADAPTOR).with(attr::NAME, "backend-0");
    // beacons until our router follows the source and the routers carry its records to us
    let (start, mut sent, mut settled) = (Instant::now(), 0, 0);
    while adaptor_records(slot).len() < 2 {
        assert!(start.elapsed() < LIMIT, "no record of the adaptor reached our router\n{}", net.skrouterd.log());
        adaptor.beacon().await;
        adaptor.records(vec![site.clone(), pod.clone()]).await;
        sent += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let got = adaptor_records(slot);
    assert!(got.iter().any(|r| r["type"] == "ProcessRecord" && r["name"] == "backend-0"), "{got:#?}");
    // every beacon it sent is settled (our router is, with the adaptor, the only receiver of `mc/sfe.all`)
    let start = Instant::now();
    adaptor.settled_beacons(&mut settled);
    while settled < sent {
        assert!(start.elapsed() < Duration::from_secs(10), "{settled} of {sent} beacons settled by skrouterd");
        tokio::time::sleep(Duration::from_millis(100)).await;
        adaptor.settled_beacons(&mut settled);
    }
    stop(slot);
}
