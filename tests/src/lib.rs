//! Helpers for the cross-crate tests: paths in the repository, generated files kept in sync, and
//! the frames the independent checks look at.

use softrnic_wire::sample::{self, Ip, Sample};
use softrnic_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, Headers, IpRepr, RethRepr, Syndrome,
    UdpChecksum, VlanTag, opcode::TABLE,
};
use std::path::{Path, PathBuf};

pub use softrnic_link::sim;
pub mod workload;

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Whether generated files should be rewritten rather than checked (`SOFTRNIC_BLESS=1`).
pub fn bless() -> bool {
    std::env::var_os("SOFTRNIC_BLESS").is_some_and(|v| v == "1")
}

/// Checks that `path` holds `want`, or writes it when blessing.
pub fn check_generated(path: &Path, want: &[u8]) {
    if bless() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create dir");
        }
        std::fs::write(path, want).expect("write generated file");
        return;
    }
    let have = std::fs::read(path).unwrap_or_default();
    assert!(
        have == want,
        "{} is out of date; regenerate it with SOFTRNIC_BLESS=1 cargo test -p softrnic-tests",
        path.display()
    );
}

/// A file name for a sample: lower case, words joined by `_`.
pub fn file_name(sample: &Sample) -> String {
    let mut name = String::new();
    for word in sample
        .name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        if !name.is_empty() {
            name.push('_');
        }
        name.push_str(&word.to_ascii_lowercase());
    }
    name
}

pub use softrnic_emu_core::Rng;

/// The frames for the independent checks: the sample capture, then every opcode over both IP
/// versions `variants` more times with random field values, payload lengths, VLAN tags and
/// congestion marks.
pub fn frames_to_check(variants: usize) -> Vec<Sample> {
    let mut frames = sample::capture();
    let mut rng = Rng::new(0x5eed_50f7_121c);
    for round in 0..variants {
        for info in TABLE {
            for ip in [Ip::V4, Ip::V6] {
                let mut s = sample::example(
                    info.opcode,
                    ip,
                    rng.below(1 << 24) as u32,
                    rng.below(300) as usize,
                );
                randomize(&mut s, &mut rng);
                s.name = format!("{} (random {round})", s.name);
                frames.push(s);
            }
        }
    }
    frames
}

fn randomize(s: &mut Sample, rng: &mut Rng) {
    let r = &mut s.repr;
    let bth = &mut r.bth;
    bth.pkey = rng.next_u64() as u16;
    bth.dest_qp = rng.below(1 << 24) as u32;
    bth.solicited = rng.flip();
    bth.mig_req = rng.flip();
    bth.ack_req = rng.flip();
    bth.fecn = rng.flip();
    bth.becn = rng.flip();
    // From the range RoCEv2 senders draw from (rxe: 0xC000 plus a 14-bit hash); a well-known
    // source port would make a decoder (scapy) take the frame for another protocol.
    r.udp.src_port = 0xc000 | rng.below(0x4000) as u16;
    if rng.below(4) == 0 {
        r.eth.vlan = Some(VlanTag {
            pcp: rng.below(8) as u8,
            dei: rng.flip(),
            vid: rng.below(4095) as u16 + 1,
        });
    }
    match &mut r.ip {
        IpRepr::V4 { dscp, ecn, ttl, .. } => {
            (*dscp, *ecn, *ttl) = (
                rng.below(64) as u8,
                rng.below(4) as u8,
                rng.next_u64() as u8,
            );
        }
        IpRepr::V6 {
            dscp,
            ecn,
            flow_label,
            hop_limit,
            ..
        } => {
            (*dscp, *ecn) = (rng.below(64) as u8, rng.below(4) as u8);
            (*flow_label, *hop_limit) = (rng.below(1 << 20) as u32, rng.next_u64() as u8);
            r.udp.checksum = UdpChecksum::Computed;
        }
    }
    let h = r.bth.opcode.info().headers;
    let x = &mut r.ext;
    if h.contains(Headers::XRCETH) {
        x.xrceth = Some(rng.below(1 << 24) as u32);
    }
    if h.contains(Headers::DETH) {
        x.deth = Some(DethRepr {
            qkey: rng.next_u64() as u32,
            src_qp: rng.below(1 << 24) as u32,
        });
    }
    if h.contains(Headers::RETH) {
        x.reth = Some(RethRepr {
            va: rng.next_u64(),
            rkey: rng.next_u64() as u32,
            dma_len: rng.next_u64() as u32,
        });
    }
    if h.contains(Headers::ATOMIC_ETH) {
        x.atomic_eth = Some(AtomicEthRepr {
            va: rng.next_u64() & !7,
            rkey: rng.next_u64() as u32,
            swap_add: rng.next_u64(),
            compare: rng.next_u64(),
        });
    }
    if h.contains(Headers::AETH) {
        x.aeth = Some(AethRepr {
            syndrome: Syndrome::from_byte(rng.next_u64() as u8 & 0x7f),
            msn: rng.below(1 << 24) as u32,
        });
    }
    if h.contains(Headers::ATOMIC_ACK_ETH) {
        x.atomic_ack_eth = Some(AtomicAckEthRepr {
            orig: rng.next_u64(),
        });
    }
    if h.contains(Headers::IMMDT) {
        x.immdt = Some(rng.next_u64() as u32);
    }
    if h.contains(Headers::IETH) {
        x.ieth = Some(rng.next_u64() as u32);
    }
}

/// Writes the samples' frames as a pcap file at `path`.
pub fn write_pcap(samples: &[Sample], path: &Path) {
    let frames: Vec<_> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            softrnic::capture::CapturedFrame::new(
                std::time::Duration::from_millis(i as u64),
                s.frame(),
            )
        })
        .collect();
    let file = std::fs::File::create(path).expect("create pcap");
    softrnic::capture::write_pcap(&frames, std::io::BufWriter::new(file)).expect("write pcap");
}

/// A fresh scratch directory for one test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softrnic-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Protocols that guess at what a payload carries (NFS over RDMA, SMB Direct, iSER, ...). Our
/// payloads are arbitrary bytes, so their guesses would fail; the RoCE headers are unaffected.
pub const PAYLOAD_GUESSERS: &[&str] = &[
    "rpcordma",
    "smc",
    "smb_direct",
    "nvme-rdma",
    "lnet",
    "iser",
    "infiniband_sdp",
    "fcoib",
    "eoib",
];
