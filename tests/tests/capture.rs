//! `softrnic capture`'s machinery: a capture of a daemon's traffic (two local devices, RC
//! between them, so every frame is same-host) written as pcapng, where every frame parses with
//! a valid ICRC and tshark reads it as RoCEv2 with nothing malformed.

use std::process::Command;
use std::time::Duration;

use softrnic::capture::LiveWriter;
use softrnic_client::client::Client;
use softrnic_client::proto::UpRequest;
use softrnic_daemon::Running;
use softrnic_emu_core::{
    Access, AddressHandle, Mtu, QpAttr, QpCap, QpInit, QpType, RecvWr, Remote, SendFlags, SendOp,
    SendWr, Sge, WcStatus, bring_up,
};
use softrnic_tests::{PAYLOAD_GUESSERS, scratch};
use softrnic_wire::{EthernetAddress, frame};

const ALL: Access = Access::from_bits_retain(15);

fn rc_qp(c: &mut Client) -> (u32, u32, u32) {
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(64).unwrap();
    let cap = QpCap::new(16, 1, 0);
    let init = QpInit {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: true,
        block_self_mcast_lb: false,
    };
    (pd, cq, c.create_qp(pd, init).unwrap())
}

fn connect(c: &mut Client, qp: u32, peer: u32, psn: u32, peer_psn: u32) {
    // Each local device has its own address in 198.19.255.0/24 (the first one has 127.0.0.1
    // before it, as it stands on lo): .1 and .2 here, and each side names the other.
    let gids = c.gids().unwrap();
    let index = gids
        .iter()
        .position(|g| g.0[12..15] == [198, 19, 255])
        .expect("a GID in 198.19.255.0/24");
    let mut dgid = gids[index];
    dgid.0[15] ^= 3;
    let ah = AddressHandle {
        dgid,
        sgid_index: index as u8,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        dmac: EthernetAddress([0; 6]),
    };
    let attr = QpAttr {
        qp_access_flags: ALL,
        ah: Some(ah),
        path_mtu: Mtu::M1024,
        rq_psn: peer_psn,
        sq_psn: psn,
        dest_qp_num: peer,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ..QpAttr::default()
    };
    for (state, mask) in bring_up(QpType::Rc) {
        let a = QpAttr {
            qp_state: state,
            ..attr
        };
        c.modify_qp(qp, a, mask).unwrap();
    }
}

#[test]
fn a_capture_of_same_host_traffic_is_valid_rocev2() {
    let path = std::env::temp_dir().join(format!("softrnic-cap-{}.sock", std::process::id()));
    let daemon = Running::start(&path).unwrap();
    let mut admin = Client::connect(&path).unwrap();
    for _ in 0..2 {
        let up = UpRequest {
            netdev: None,
            backend: None,
            netns: None,
        };
        admin.up(up).unwrap();
    }
    let mut tap = Client::connect(&path).unwrap();
    tap.capture(None).unwrap();

    let (mut a, mut b) = (
        Client::connect(&path).unwrap(),
        Client::connect(&path).unwrap(),
    );
    a.open("srnic0").unwrap();
    b.open("srnic1").unwrap();
    let (pda, cqa, qpa) = rc_qp(&mut a);
    let (pdb, cqb, qpb) = rc_qp(&mut b);
    connect(&mut a, qpa, qpb, 10, 20);
    connect(&mut b, qpb, qpa, 20, 10);
    let src = vec![0x42u8; 5000];
    let dst = vec![0u8; 5000];
    let rbuf = [0u8; 64];
    let ka = a.reg_mr(pda, src.as_ptr() as u64, 5000, ALL).unwrap();
    let kb = b.reg_mr(pdb, dst.as_ptr() as u64, 5000, ALL).unwrap();
    let kr = b.reg_mr(pdb, rbuf.as_ptr() as u64, 64, ALL).unwrap();
    let sgl = vec![Sge {
        addr: rbuf.as_ptr() as u64,
        length: 64,
        lkey: kr,
    }];
    b.post_recv(qpb, vec![RecvWr { wr_id: 1, sgl }]).unwrap();
    let sge = |len: u32| {
        vec![Sge {
            addr: src.as_ptr() as u64,
            length: len,
            lkey: ka,
        }]
    };
    let remote = Remote {
        addr: dst.as_ptr() as u64,
        rkey: kb,
    };
    let wrs = vec![
        SendWr {
            wr_id: 1,
            op: SendOp::Write(remote),
            sgl: sge(5000),
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        },
        SendWr {
            wr_id: 2,
            op: SendOp::Read(remote),
            sgl: sge(5000),
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        },
        SendWr {
            wr_id: 3,
            op: SendOp::Send,
            sgl: sge(64),
            flags: SendFlags::SIGNALED,
            ud: None,
            xrc_srqn: None,
        },
    ];
    a.post_send(qpa, wrs).unwrap();
    let done = a.wait(cqa, 3, Duration::from_secs(10)).unwrap();
    assert!(
        done.len() == 3 && done.iter().all(|w| w.status == WcStatus::Success),
        "{done:?}"
    );
    assert_eq!(b.wait(cqb, 1, Duration::from_secs(10)).unwrap().len(), 1);

    // WRITE 5 packets, READ request 1 and responses 5, SEND 1, ACKs (at least 2): each frame
    // is seen leaving one device and entering the other.
    let file = scratch("capture").join("same-host.pcapng");
    let mut out = LiveWriter::new(std::fs::File::create(&file).unwrap()).unwrap();
    let (mut frames, mut outbound) = (0, 0);
    while tap.readable(200) {
        let f = tap.next_frame().unwrap().expect("a frame");
        frame::parse(&f.data).expect("a valid RoCEv2 frame with a good ICRC");
        out.write(&f.device, f.outbound, f.unix_nanos, f.dropped, &f.data)
            .unwrap();
        frames += 1;
        outbound += usize::from(f.outbound);
    }
    out.flush().unwrap();
    assert!(outbound >= 14, "{outbound} frames sent");
    assert_eq!(
        frames,
        2 * outbound,
        "every frame seen going out and coming in"
    );

    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(&file).args([
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "_ws.malformed",
        "-e",
        "infiniband.bth.opcode",
    ]);
    for p in PAYLOAD_GUESSERS {
        cmd.args(["--disable-protocol", p]);
    }
    let res = cmd.output().expect("tshark runs");
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let text = String::from_utf8(res.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), frames, "tshark reads every frame");
    for r in &rows {
        assert!(r.get(1).is_none_or(|m| m.is_empty()), "malformed: {r:?}");
        assert!(
            r.get(2).is_some_and(|o| !o.is_empty()),
            "not RoCEv2 to tshark: {r:?}"
        );
    }
    drop(daemon);
}
