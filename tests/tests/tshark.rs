//! Wireshark, an independent dissector, reads the frames this crate emits with the same field
//! values and finds nothing malformed. IPv4 and IPv6, every opcode, random field values, and
//! the Communication Manager's messages to QP1.

use serde_json::Value;
use softrnic_tests::{PAYLOAD_GUESSERS, frames_to_check, scratch, write_pcap};
use softrnic_wire::cm::{CmMad, CmMessage};
use softrnic_wire::sample::Sample;
use softrnic_wire::{IpRepr, Opcode, Transport, frame};
use std::process::Command;

/// Wireshark's expert severity for warnings; anything at or above it fails the test.
const PI_WARN: u64 = 0x0060_0000;

fn flatten(v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::String(s) => out.push((k.clone(), s.clone())),
                    _ => flatten(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        _ => {}
    }
}

fn colon_hex(v: u32) -> String {
    v.to_be_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The fields Wireshark 4.0 shows for a frame, as it formats them.
fn expected(s: &Sample, frame_bytes: &[u8]) -> Vec<(&'static str, String)> {
    let r = &s.repr;
    let p = frame::parse(frame_bytes).expect("valid");
    let b = &r.bth;
    let mut e = vec![
        ("udp.srcport", r.udp.src_port.to_string()),
        ("udp.dstport", "4791".into()),
        ("udp.length", (p.layout.end - p.layout.udp).to_string()),
        ("infiniband.bth.opcode", (b.opcode as u8).to_string()),
        ("infiniband.bth.se", u8::from(b.solicited).to_string()),
        ("infiniband.bth.m", u8::from(b.mig_req).to_string()),
        ("infiniband.bth.padcnt", p.pad_count().to_string()),
        ("infiniband.bth.tver", "0".into()),
        ("infiniband.bth.p_key", b.pkey.to_string()),
        // Wireshark 4.0 shows the FECN/BECN byte as one "reserved" byte.
        (
            "infiniband.reserved",
            format!("{:02x}", u8::from(b.fecn) << 7 | u8::from(b.becn) << 6),
        ),
        ("infiniband.bth.destqp", format!("{:#08x}", b.dest_qp)),
        ("infiniband.bth.a", u8::from(b.ack_req).to_string()),
        ("infiniband.bth.psn", b.psn.to_string()),
    ];
    match r.ip {
        IpRepr::V4 {
            src,
            dst,
            dscp,
            ecn,
            ttl,
        } => e.extend([
            ("ip.src", src.to_string()),
            ("ip.dst", dst.to_string()),
            ("ip.dsfield.dscp", dscp.to_string()),
            ("ip.dsfield.ecn", ecn.to_string()),
            ("ip.ttl", ttl.to_string()),
        ]),
        IpRepr::V6 {
            src,
            dst,
            dscp,
            ecn,
            flow_label,
            hop_limit,
        } => e.extend([
            ("ipv6.src", src.to_string()),
            ("ipv6.dst", dst.to_string()),
            ("ipv6.tclass.dscp", dscp.to_string()),
            ("ipv6.tclass.ecn", ecn.to_string()),
            ("ipv6.flow", format!("{flow_label:#08x}")),
            ("ipv6.hlim", hop_limit.to_string()),
        ]),
    }
    if let Some(tag) = r.eth.vlan {
        e.extend([
            ("vlan.priority", tag.pcp.to_string()),
            ("vlan.dei", u8::from(tag.dei).to_string()),
            ("vlan.id", tag.vid.to_string()),
        ]);
    }
    // Wireshark 4.0 predates IBA 1.5's FLUSH and ATOMIC WRITE, and names XRC opcodes without
    // decoding their headers: it shows their BTH and nothing after it (no headers, no ICRC),
    // without calling them malformed. scapy checks their ICRCs (tests/tests/scapy.rs).
    let transport = b.opcode.info().transport;
    if matches!(b.opcode, Opcode::RcFlush | Opcode::RcAtomicWrite) || transport == Transport::Xrc {
        return e;
    }
    let x = &r.ext;
    if let Some(d) = x.deth {
        e.push(("infiniband.deth.q_key", format!("{:#018x}", d.qkey)));
        e.push(("infiniband.deth.srcqp", format!("{:#010x}", d.src_qp)));
    }
    if let Some(h) = x.reth {
        e.push(("infiniband.reth.va", format!("{:#018x}", h.va)));
        e.push(("infiniband.reth.r_key", format!("{:#010x}", h.rkey)));
        e.push(("infiniband.reth.dmalen", h.dma_len.to_string()));
    }
    if let Some(a) = x.atomic_eth {
        // Wireshark 4.0 labels the AtomicETH's address and key with the RETH's field names.
        e.push(("infiniband.reth.va", format!("{:#018x}", a.va)));
        e.push(("infiniband.reth.r_key", format!("{:#010x}", a.rkey)));
        e.push(("infiniband.atomiceth.swapdt", a.swap_add.to_string()));
        e.push(("infiniband.atomiceth.cmpdt", a.compare.to_string()));
    }
    if let Some(a) = x.aeth {
        e.push(("infiniband.aeth.syndrome", a.syndrome.to_byte().to_string()));
        e.push(("infiniband.aeth.msn", a.msn.to_string()));
    }
    if let Some(a) = x.atomic_ack_eth {
        e.push(("infiniband.atomicacketh.origremdt", a.orig.to_string()));
    }
    if let Some(v) = x.immdt {
        e.push(("infiniband.immdt", colon_hex(v)));
    }
    if let Some(v) = x.ieth {
        e.push(("infiniband.ieth", colon_hex(v)));
    }
    if let Ok(m) = softrnic_wire::cm::CmMad::parse(p.payload()) {
        e.extend(cm_fields(&m));
    }
    // Wireshark 4.0 does not know the CNP (it shows its body as vendor data), so it has no ICRC
    // field for it; for the rest, it must find the ICRC where we put it. It shows the four
    // bytes read big-endian; the CRC value is carried little-endian.
    if b.opcode != Opcode::Cnp {
        e.push((
            "infiniband.invariant.crc",
            format!("{:#010x}", p.icrc().swap_bytes()),
        ));
    }
    e
}

/// The CM fields Wireshark 4.0 shows, as it names and formats them (it does not decode SIDR).
fn cm_fields(m: &CmMad) -> Vec<(&'static str, String)> {
    let hex = |width: usize, v: u64| format!("{v:#0width$x}", width = width + 2);
    match &m.message {
        CmMessage::Req(r) => vec![
            ("infiniband.cm.req", hex(8, r.local_comm_id.into())),
            ("infiniband.cm.req.serviceid", hex(16, r.service_id)),
            ("infiniband.cm.req.localcaguid", hex(16, r.local_ca_guid)),
            ("infiniband.cm.req.localqpn", hex(6, r.local_qpn.into())),
            (
                "infiniband.cm.req.responderres",
                hex(2, r.responder_resources.into()),
            ),
            (
                "infiniband.cm.req.initdepth",
                hex(2, r.initiator_depth.into()),
            ),
            (
                "infiniband.cm.req.remoteresptout",
                hex(2, r.remote_cm_response_timeout.into()),
            ),
            (
                "infiniband.cm.req.transpsvctype",
                hex(2, r.transport.into()),
            ),
            ("infiniband.cm.req.startpsn", hex(6, r.starting_psn.into())),
            (
                "infiniband.cm.req.localresptout",
                hex(2, r.local_cm_response_timeout.into()),
            ),
            ("infiniband.cm.req.retrcount", hex(2, r.retry_count.into())),
            ("infiniband.cm.req.pkey", hex(4, r.pkey.into())),
            ("infiniband.cm.req.pppmtu", hex(2, r.path_mtu.into())),
            (
                "infiniband.cm.req.rnrretrcount",
                hex(2, r.rnr_retry_count.into()),
            ),
            (
                "infiniband.cm.req.maxcmretr",
                hex(2, r.max_cm_retries.into()),
            ),
            ("infiniband.cm.req.srq", hex(2, r.srq.into())),
            (
                "infiniband.cm.req.prim_hoplim",
                hex(2, r.primary_path.hop_limit.into()),
            ),
            (
                "infiniband.cm.req.prim_sl",
                hex(2, r.primary_path.sl.into()),
            ),
            (
                "infiniband.cm.req.prim_localacktout",
                hex(2, r.primary_path.local_ack_timeout.into()),
            ),
        ],
        CmMessage::Rep(r) => vec![
            ("infiniband.cm.rep", hex(8, r.local_comm_id.into())),
            (
                "infiniband.cm.rep.remotecommid",
                hex(8, r.remote_comm_id.into()),
            ),
            ("infiniband.cm.rep.localqpn", hex(6, r.local_qpn.into())),
            ("infiniband.cm.rep.startpsn", hex(6, r.starting_psn.into())),
            (
                "infiniband.cm.rep.respres",
                hex(2, r.responder_resources.into()),
            ),
            (
                "infiniband.cm.rep.initdepth",
                hex(2, r.initiator_depth.into()),
            ),
            (
                "infiniband.cm.rep.tgtackdelay",
                hex(2, r.target_ack_delay.into()),
            ),
            (
                "infiniband.cm.rep.rnrretrcount",
                hex(2, r.rnr_retry_count.into()),
            ),
            ("infiniband.cm.rep.localcaguid", hex(16, r.local_ca_guid)),
        ],
        CmMessage::Rtu(r) => vec![
            (
                "infiniband.cm.rtu.localcommid",
                hex(8, r.local_comm_id.into()),
            ),
            (
                "infiniband.cm.rtu.remotecommid",
                hex(8, r.remote_comm_id.into()),
            ),
        ],
        CmMessage::Dreq(r) => vec![
            (
                "infiniband.cm.dreq.localcommid",
                hex(8, r.local_comm_id.into()),
            ),
            (
                "infiniband.cm.dreq.remotecommid",
                hex(8, r.remote_comm_id.into()),
            ),
            // Wireshark 4.0 names this field after the REQ.
            (
                "infiniband.cm.req.remoteqpneecn",
                hex(6, r.remote_qpn.into()),
            ),
        ],
        CmMessage::Drep(r) => vec![
            (
                "infiniband.cm.drsp.localcommid",
                hex(8, r.local_comm_id.into()),
            ),
            (
                "infiniband.cm.drsp.remotecommid",
                hex(8, r.remote_comm_id.into()),
            ),
        ],
        CmMessage::Rej(r) => vec![
            (
                "infiniband.cm.rej.localcommid",
                hex(8, r.local_comm_id.into()),
            ),
            (
                "infiniband.cm.rej.remotecommid",
                hex(8, r.remote_comm_id.into()),
            ),
            (
                "infiniband.cm.rej.msgrej",
                hex(2, r.message_rejected.into()),
            ),
            ("infiniband.cm.rej.reason", hex(4, r.reason.into())),
        ],
        CmMessage::Mra(_) | CmMessage::SidrReq(_) | CmMessage::SidrRep(_) => Vec::new(),
    }
}

#[test]
fn wireshark_agrees_field_by_field() {
    let samples = frames_to_check(3);
    let dir = scratch("tshark");
    let pcap = dir.join("frames.pcap");
    write_pcap(&samples, &pcap);

    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(&pcap).args(["-T", "json"]);
    for p in PAYLOAD_GUESSERS {
        cmd.args(["--disable-protocol", p]);
    }
    let out = cmd
        .output()
        .expect("tshark runs (apt-get install tshark; .ci/run does)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packets: Vec<Value> = serde_json::from_slice(&out.stdout).expect("tshark JSON");
    assert_eq!(packets.len(), samples.len());

    let mut checked = 0;
    for (s, packet) in samples.iter().zip(&packets) {
        let mut fields = Vec::new();
        flatten(&packet["_source"]["layers"], &mut fields);
        let first = |key: &str| {
            fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        assert!(
            first("_ws.malformed").is_none(),
            "{}: Wireshark says malformed",
            s.name
        );
        for (k, v) in &fields {
            if k == "_ws.expert.severity" {
                let severity: u64 = v.parse().expect("severity is a number");
                assert!(severity < PI_WARN, "{}: expert info {fields:?}", s.name);
            }
        }
        let frame_bytes = s.frame();
        for (key, want) in expected(s, &frame_bytes) {
            assert_eq!(first(key), Some(want.as_str()), "{}: field {key}", s.name);
            checked += 1;
        }
    }
    // Every frame had its fields compared (a silent no-op would compare nothing).
    assert!(
        checked > samples.len() * 15,
        "only {checked} fields compared"
    );
    let _ = std::fs::remove_dir_all(dir);
}
