//! Communication Management MADs to QP1, field by field: the MAD header, the CM message with
//! what each field is for, and rdma_cm's private-data header when there is one.

use core::fmt::{self, Write};

use super::Rows;
use crate::cm::{self, CmMad, CmMessage, CmaHeader, Loc, field};
use crate::mad::MAD_LEN;

/// How a field's value reads.
#[derive(Clone, Copy)]
enum Show {
    Dec,
    Hex,
    /// An rdma_cm service ID: port space and port.
    Service,
    /// A CM or ACK timeout: 4.096 µs × 2^n.
    Timeout,
    Transport,
    Mtu,
    /// Which message a REJ or MRA is about.
    About,
    Reason,
    Gid,
    /// An area of bytes, shown by length.
    Area,
}

type Row = (Loc, &'static str, Show, &'static str);

const IDS: [Row; 2] = [
    (
        field::LOCAL_COMM_ID,
        "LocalCommID",
        Show::Hex,
        "the sender's name for this connection",
    ),
    (
        field::REMOTE_COMM_ID,
        "RemoteCommID",
        Show::Hex,
        "the receiver's name for it (0 before it has one)",
    ),
];

const REQ: [Row; 22] = {
    use field::req::*;
    [
        (
            field::LOCAL_COMM_ID,
            "LocalCommID",
            Show::Hex,
            "the requester's name for this connection",
        ),
        (
            SERVICE_ID,
            "ServiceID",
            Show::Service,
            "the service asked for",
        ),
        (
            LOCAL_CA_GUID,
            "LocalCAGUID",
            Show::Hex,
            "the requester's adapter",
        ),
        (LOCAL_QKEY, "LocalQ_Key", Show::Hex, "RD only"),
        (LOCAL_QPN, "LocalQPN", Show::Hex, "the QP to connect"),
        (
            RESPONDER_RESOURCES,
            "RespResources",
            Show::Dec,
            "READs/atomics it accepts at once",
        ),
        (LOCAL_EECN, "LocalEECN", Show::Hex, "RD only"),
        (
            INITIATOR_DEPTH,
            "InitiatorDepth",
            Show::Dec,
            "READs/atomics it sends at once",
        ),
        (REMOTE_EECN, "RemoteEECN", Show::Hex, "RD only"),
        (
            REMOTE_CM_RESPONSE_TIMEOUT,
            "RemoteCMTimeout",
            Show::Timeout,
            "how long the responder may take",
        ),
        (TRANSPORT, "Transport", Show::Transport, "the QP's service"),
        (END_TO_END_FLOW_CONTROL, "E2EFlowCtrl", Show::Dec, "credits"),
        (
            STARTING_PSN,
            "StartingPSN",
            Show::Dec,
            "the responder sends from this PSN",
        ),
        (
            LOCAL_CM_RESPONSE_TIMEOUT,
            "LocalCMTimeout",
            Show::Timeout,
            "how long the requester may take to answer",
        ),
        (RETRY_COUNT, "RetryCount", Show::Dec, "transport retries"),
        (PKEY, "P_Key", Show::Hex, "partition"),
        (PATH_MTU, "PathMTU", Show::Mtu, "for both directions"),
        (RDC_EXISTS, "RDCExists", Show::Dec, "RD only"),
        (
            RNR_RETRY_COUNT,
            "RNRRetryCount",
            Show::Dec,
            "7: retry forever",
        ),
        (
            MAX_CM_RETRIES,
            "MaxCMRetries",
            Show::Dec,
            "resends of an unanswered CM message",
        ),
        (SRQ, "SRQ", Show::Dec, "its QP receives from an SRQ"),
        (EXTENDED_TRANSPORT, "ExtTransport", Show::Dec, "XRC"),
    ]
};

const PATH: [Row; 11] = {
    use field::path::*;
    [
        (LOCAL_LID, "LocalLID", Show::Hex, "no LIDs on RoCE"),
        (REMOTE_LID, "RemoteLID", Show::Hex, ""),
        (LOCAL_GID, "LocalGID", Show::Gid, "the requester's address"),
        (
            REMOTE_GID,
            "RemoteGID",
            Show::Gid,
            "the responder's address",
        ),
        (FLOW_LABEL, "FlowLabel", Show::Hex, "top 20 bits"),
        (PACKET_RATE, "PacketRate", Show::Dec, "IBA's rate code"),
        (TRAFFIC_CLASS, "TrafficClass", Show::Hex, "DSCP and ECN"),
        (HOP_LIMIT, "HopLimit", Show::Dec, "TTL"),
        (SL, "SL", Show::Dec, "service level"),
        (SUBNET_LOCAL, "SubnetLocal", Show::Dec, ""),
        (
            LOCAL_ACK_TIMEOUT,
            "LocalACKTimeout",
            Show::Timeout,
            "the QP's transport timeout",
        ),
    ]
};

const REP: [Row; 12] = {
    use field::rep::*;
    [
        (LOCAL_QKEY, "LocalQ_Key", Show::Hex, "RD only"),
        (LOCAL_QPN, "LocalQPN", Show::Hex, "the responder's QP"),
        (LOCAL_EECN, "LocalEECN", Show::Hex, "RD only"),
        (
            STARTING_PSN,
            "StartingPSN",
            Show::Dec,
            "the requester sends from this PSN",
        ),
        (
            RESPONDER_RESOURCES,
            "RespResources",
            Show::Dec,
            "READs/atomics it accepts at once",
        ),
        (
            INITIATOR_DEPTH,
            "InitiatorDepth",
            Show::Dec,
            "READs/atomics it sends at once",
        ),
        (TARGET_ACK_DELAY, "TargetACKDelay", Show::Timeout, ""),
        (FAILOVER_ACCEPTED, "Failover", Show::Dec, "0 accepted"),
        (END_TO_END_FLOW_CONTROL, "E2EFlowCtrl", Show::Dec, "credits"),
        (
            RNR_RETRY_COUNT,
            "RNRRetryCount",
            Show::Dec,
            "7: retry forever",
        ),
        (SRQ, "SRQ", Show::Dec, "its QP receives from an SRQ"),
        (
            LOCAL_CA_GUID,
            "LocalCAGUID",
            Show::Hex,
            "the responder's adapter",
        ),
    ]
};

const REJ: [Row; 4] = {
    use field::rej::*;
    [
        (MESSAGE_REJECTED, "MsgRejected", Show::About, ""),
        (
            REJECT_INFO_LEN,
            "RejInfoLen",
            Show::Dec,
            "bytes of ARI that count",
        ),
        (REASON, "Reason", Show::Reason, "IBA 12.6.7.2"),
        (ARI, "ARI", Show::Area, "additional rejection information"),
    ]
};

const MRA: [Row; 2] = {
    use field::mra::*;
    [
        (
            MESSAGE_MRAED,
            "MsgMRAed",
            Show::About,
            "the message received",
        ),
        (
            SERVICE_TIMEOUT,
            "ServiceTimeout",
            Show::Timeout,
            "how much longer to wait",
        ),
    ]
};

const DREQ: [Row; 1] = [(
    field::dreq::REMOTE_QPN,
    "RemoteQPN",
    Show::Hex,
    "the receiver's QP",
)];

const SIDR_REQ: [Row; 3] = {
    use field::sidr_req::*;
    [
        (REQUEST_ID, "RequestID", Show::Hex, "pairs the answer"),
        (PKEY, "P_Key", Show::Hex, "partition"),
        (
            SERVICE_ID,
            "ServiceID",
            Show::Service,
            "the service asked for",
        ),
    ]
};

const SIDR_REP: [Row; 7] = {
    use field::sidr_rep::*;
    [
        (REQUEST_ID, "RequestID", Show::Hex, "the request's"),
        (STATUS, "Status", Show::Dec, "0: the QP is valid"),
        (ADDITIONAL_INFO_LEN, "AddInfoLen", Show::Dec, ""),
        (QPN, "QPN", Show::Hex, "the service's UD QP"),
        (SERVICE_ID, "ServiceID", Show::Service, ""),
        (QKEY, "Q_Key", Show::Hex, "send to it with this"),
        (
            CLASS_PORT_INFO,
            "ClassPortInfo",
            Show::Area,
            "for a redirect",
        ),
    ]
};

/// What each message is, in a few words.
fn purpose(m: &CmMessage) -> &'static str {
    match m {
        CmMessage::Req(_) => "connection request",
        CmMessage::Mra(_) => "message received, more time needed",
        CmMessage::Rej(_) => "reject",
        CmMessage::Rep(_) => "reply: the request is accepted",
        CmMessage::Rtu(_) => "ready to use: the connection is established",
        CmMessage::Dreq(_) => "disconnect request",
        CmMessage::Drep(_) => "disconnect reply",
        CmMessage::SidrReq(_) => "which UD QP serves this service?",
        CmMessage::SidrRep(_) => "this UD QP does",
    }
}

/// Its fields before the paths and private data, and where its private data is.
fn layout(m: &CmMessage) -> (Vec<Row>, Loc) {
    let with_ids = |rest: &[Row]| IDS.iter().chain(rest).copied().collect();
    match m {
        CmMessage::Req(_) => (REQ.to_vec(), field::req::PRIVATE_DATA),
        CmMessage::Mra(_) => (with_ids(&MRA), field::mra::PRIVATE_DATA),
        CmMessage::Rej(_) => (with_ids(&REJ), field::rej::PRIVATE_DATA),
        CmMessage::Rep(_) => (with_ids(&REP), field::rep::PRIVATE_DATA),
        CmMessage::Rtu(_) | CmMessage::Drep(_) => (IDS.to_vec(), field::ids::PRIVATE_DATA),
        CmMessage::Dreq(_) => (with_ids(&DREQ), field::dreq::PRIVATE_DATA),
        CmMessage::SidrReq(_) => (SIDR_REQ.to_vec(), field::sidr_req::PRIVATE_DATA),
        CmMessage::SidrRep(_) => (SIDR_REP.to_vec(), field::sidr_rep::PRIVATE_DATA),
    }
}

fn service(id: u64) -> String {
    match cm::ip_service(id) {
        Some((space, port)) => {
            let name = match space {
                cm::port_space::TCP => "RDMA_PS_TCP",
                cm::port_space::UDP => "RDMA_PS_UDP",
                cm::port_space::IB => "RDMA_PS_IB",
                _ => "RDMA_PS_IPOIB",
            };
            format!("{id:#x}: {name} port {port}")
        }
        None => format!("{id:#x}"),
    }
}

fn value(show: Show, loc: Loc, body: &[u8]) -> String {
    let v = loc.read(body);
    match show {
        Show::Dec => v.to_string(),
        Show::Hex => format!("{v:#x}"),
        Show::Service => service(v),
        Show::Timeout => {
            let us = 4.096 * f64::from(1u32 << v.min(31));
            if us < 1000.0 {
                format!("{v} ({us:.0} us)")
            } else if us < 1e6 {
                format!("{v} ({:.1} ms)", us / 1e3)
            } else {
                format!("{v} ({:.1} s)", us / 1e6)
            }
        }
        Show::Transport => match v {
            0 => "0 RC".into(),
            1 => "1 UC".into(),
            2 => "2 RD".into(),
            _ => format!("{v} reserved"),
        },
        Show::Mtu => match v {
            1..=5 => format!("{v} ({} bytes)", 128 << v),
            _ => format!("{v} invalid"),
        },
        Show::About => match v as u8 {
            cm::about::REQ => "0 REQ".into(),
            cm::about::REP => "1 REP".into(),
            _ => format!("{v} other"),
        },
        Show::Reason => format!("{v} {}", reason(v as u16)),
        Show::Gid => {
            let bytes: [u8; 16] = body[loc.at..loc.at + 16].try_into().expect("16 bytes");
            // RoCE GIDs are IP addresses; IPv4 ones are IPv4-mapped IPv6.
            let gid = core::net::Ipv6Addr::from(bytes);
            match gid.to_ipv4_mapped() {
                Some(v4) => format!("::ffff:{v4}"),
                None => gid.to_string(),
            }
        }
        Show::Area => format!("{} bytes", loc.len),
    }
}

/// The name of a REJ reason (IBA 12.6.7.2).
fn reason(r: u16) -> &'static str {
    use cm::rej_reason::*;
    match r {
        NO_QP => "no QP",
        NO_RESOURCES => "no resources",
        TIMEOUT => "timeout",
        INVALID_COMM_ID => "invalid comm ID",
        INVALID_SERVICE_ID => "invalid service ID: nobody listens",
        STALE_CONN => "stale connection",
        PORT_REDIRECT => "port redirect",
        INVALID_GID => "invalid GID",
        INVALID_MTU => "invalid MTU",
        CONSUMER => "rejected by the consumer",
        DUPLICATE_COMM_ID => "duplicate comm ID",
        _ => "",
    }
}

fn show_rows<W: Write>(
    rows: &mut Rows<'_, W>,
    body: usize,
    base: usize,
    list: &[Row],
) -> fmt::Result {
    let bytes = &rows.frame[body..body + MAD_LEN - 24];
    let lines: Vec<(Loc, &str, Show, String, &str)> = list
        .iter()
        .map(|&(loc, name, show, note)| {
            let loc = Loc {
                at: loc.at + base,
                ..loc
            };
            (loc, name, show, value(show, loc, bytes), note)
        })
        .collect();
    for (loc, name, show, v, note) in lines {
        let at = body + loc.at;
        if loc.bits.is_some() {
            rows.bits(at, loc.mask(), name, &v, note)?;
        } else {
            // An area's first bytes only: its value says how long it is.
            let shown = if matches!(show, Show::Area) {
                8
            } else {
                loc.len
            };
            rows.field(at, shown, name, &v, note)?;
        }
    }
    Ok(())
}

/// Explains a CM MAD that starts at frame offset `at`.
pub(super) fn dissect<W: Write>(rows: &mut Rows<'_, W>, at: usize, m: &CmMad) -> fmt::Result {
    let name = m.message.name();
    rows.layer("MAD: Management Datagram header", at, 24)?;
    rows.field(at, 1, "BaseVersion", "1", "the MAD format")?;
    rows.field(at + 1, 1, "MgmtClass", "0x07", "Communication Management")?;
    rows.field(at + 2, 1, "ClassVersion", "2", "")?;
    rows.bits(
        at + 3,
        0x80,
        "R",
        "0",
        "not a response: CM messages are sent",
    )?;
    rows.bits(
        at + 3,
        0x7f,
        "Method",
        "3 (Send)",
        "one datagram per message",
    )?;
    rows.field(at + 4, 2, "Status", "0", "")?;
    rows.field(at + 6, 2, "ClassSpecific", "0", "")?;
    rows.field(
        at + 8,
        8,
        "TransactionID",
        &format!("{:#x}", m.transaction_id),
        "kept when the message is resent",
    )?;
    rows.field(
        at + 16,
        2,
        "AttributeID",
        &format!("{:#06x} {name}", m.message.attribute_id()),
        "which CM message",
    )?;
    rows.field(at + 18, 2, "Reserved", "0", "")?;
    rows.field(at + 20, 4, "AttributeModifier", "0", "")?;

    let body = at + 24;
    let (list, private) = layout(&m.message);
    rows.layer(
        &format!("CM {name}: {}", purpose(&m.message)),
        body,
        private.at,
    )?;
    show_rows(rows, body, 0, &list)?;
    if let CmMessage::Req(r) = &m.message {
        let paths = [
            ("Primary path", field::req::PRIMARY_PATH, true),
            (
                "Alternate path",
                field::req::ALTERNATE_PATH,
                r.alternate_path != Default::default(),
            ),
        ];
        for (title, base, used) in paths {
            rows.layer(title, body + base, 44)?;
            if used {
                show_rows(rows, body, base, &PATH)?;
            } else {
                rows.field(body + base, 8, "(none)", "zeros", "one path only")?;
            }
        }
    }
    private_data(rows, body, private, &m.message)
}

/// The private data area: rdma_cm's header first in a REQ or SIDR_REQ for an IP service.
fn private_data<W: Write>(
    rows: &mut Rows<'_, W>,
    body: usize,
    area: Loc,
    m: &CmMessage,
) -> fmt::Result {
    let at = body + area.at;
    rows.layer("Private data", at, area.len)?;
    let (service, data) = match m {
        CmMessage::Req(r) => (Some(r.service_id), r.private_data),
        CmMessage::SidrReq(r) => (Some(r.service_id), r.private_data),
        _ => (None, &[][..]),
    };
    let cma = service
        .and_then(cm::ip_service)
        .and_then(|_| CmaHeader::parse(data).ok());
    let mut rest = at;
    if let Some(h) = cma {
        let ip = if h.src.is_ipv4() { 4 } else { 6 };
        rows.field(at, 1, "CMA version", "0", "rdma_cm's header")?;
        rows.bits(at + 1, 0xf0, "IP version", &ip.to_string(), "")?;
        rows.field(
            at + 2,
            2,
            "SrcPort",
            &h.src_port.to_string(),
            "the client's port (the service ID has the server's)",
        )?;
        rows.field(at + 4, 16, "SrcAddr", &h.src.to_string(), "the client")?;
        rows.field(at + 20, 16, "DstAddr", &h.dst.to_string(), "the server")?;
        rest = at + CmaHeader::LEN;
    }
    let left = at + area.len - rest;
    let used = rows.frame[rest..rest + left]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i + 1);
    rows.field(
        rest,
        used.min(8),
        "Data",
        &format!("{left} bytes"),
        &format!("the application's {used}, then zeros"),
    )
}

/// A few words for the one-line summary.
pub(super) fn summary(m: &CmMad) -> String {
    let name = m.message.name();
    match &m.message {
        CmMessage::Req(r) => format!(
            "CM {name} lcid={:#x} svc={} qpn={:#x} psn={}",
            r.local_comm_id,
            service(r.service_id),
            r.local_qpn,
            r.starting_psn
        ),
        CmMessage::Rep(r) => format!(
            "CM {name} lcid={:#x} rcid={:#x} qpn={:#x} psn={}",
            r.local_comm_id, r.remote_comm_id, r.local_qpn, r.starting_psn
        ),
        CmMessage::Rej(r) => format!(
            "CM {name} lcid={:#x} rcid={:#x} reason={} ({})",
            r.local_comm_id,
            r.remote_comm_id,
            r.reason,
            reason(r.reason)
        ),
        CmMessage::Mra(r) => format!(
            "CM {name} lcid={:#x} rcid={:#x}",
            r.local_comm_id, r.remote_comm_id
        ),
        CmMessage::Rtu(r) | CmMessage::Drep(r) => format!(
            "CM {name} lcid={:#x} rcid={:#x}",
            r.local_comm_id, r.remote_comm_id
        ),
        CmMessage::Dreq(r) => format!(
            "CM {name} lcid={:#x} rcid={:#x} qpn={:#x}",
            r.local_comm_id, r.remote_comm_id, r.remote_qpn
        ),
        CmMessage::SidrReq(r) => format!(
            "CM {name} id={:#x} svc={}",
            r.request_id,
            service(r.service_id)
        ),
        CmMessage::SidrRep(r) => format!(
            "CM {name} id={:#x} status={} qpn={:#x} qkey={:#x}",
            r.request_id, r.status, r.qpn, r.qkey
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::dissect;
    use crate::sample;

    #[test]
    fn every_cm_message_is_explained() {
        for s in sample::cm_conversation() {
            let frame = s.frame();
            let mut text = String::new();
            dissect::dissect(&frame, &mut text).unwrap();
            let name = s.name.split_whitespace().nth(1).unwrap();
            assert!(
                text.contains("MAD: Management Datagram header"),
                "{}",
                s.name
            );
            assert!(
                text.contains(&format!("CM {name}: ")),
                "{}:\n{text}",
                s.name
            );
            assert!(text.contains("Private data ["), "{}", s.name);
            assert!(
                !text.contains("Payload ["),
                "{}: shown as a plain payload",
                s.name
            );
            assert!(
                dissect::summary(&frame).contains(&format!(" CM {name} ")),
                "{}",
                s.name
            );
        }
    }

    #[test]
    fn a_req_shows_its_service_path_and_addresses() {
        let req = &sample::cm_conversation()[0];
        let mut text = String::new();
        dissect::dissect(&req.frame(), &mut text).unwrap();
        for want in [
            "0x1061c06: RDMA_PS_TCP port 7174",
            "LocalQPN         0x11",
            "1010 0... = 20 (4.3 s)",
            "Primary path [bytes 138..182, 44 bytes]",
            "::ffff:198.18.0.2",
            "SrcAddr          198.18.0.1",
            "SrcPort          49152",
            "(none)",
        ] {
            assert!(text.contains(want), "no {want:?} in:\n{text}");
        }
    }
}
