//! The body of the `control` fuzz target: what a hostile program sends on its connection to the
//! daemon. A victim (root, with one object of each kind on a local device) and a hostile
//! context (another user, not an admin) share a daemon; the input is the hostile connection's
//! byte stream, length-prefixed requests as a program writes them. The daemon must answer
//! everything without panicking, the victim's objects must come through untouched, and closing
//! the hostile context must free everything it made.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};

use softrnic_client::proto::{self, Reply, Request, UpRequest};
use softrnic_emu_core::{Access, AttrMask, QpAttr, QpCap, QpInit, QpState, QpType};

use crate::{Daemon, device_at};

/// The memory both contexts register: the hostile one's regions are moved into it, so that
/// what the daemon writes for it lands in memory of this process that nothing else uses.
const ARENA: usize = 1 << 16;

/// The victim's objects, and what must stay true of them.
struct Victim {
    ctx: usize,
    pd: u32,
    cq: u32,
    qpn: u32,
    key: u32,
}

/// Feeds `data` to the daemon as the hostile program's stream.
pub fn control(data: &[u8]) {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!("srn-fuzz-control-{}", std::process::id()));
    let path = dir.join(format!("{}.sock", N.fetch_add(1, Ordering::Relaxed)));
    let mut d = Daemon::bind(&path, 1).expect("a daemon socket");
    d.cm = crate::rdma_cm::RdmaCm::seeded(1);
    let arena = vec![0u8; 2 * ARENA];
    let base = arena.as_ptr() as u64;
    let (victim, _victim_end) = victim(&mut d, base);
    let _hostile_end = UnixStream::connect(&path).expect("connect");
    assert!(d.accept(), "the hostile connection");
    let h = d.contexts.iter().rposition(Option::is_some).expect("it");
    let ctx = d.contexts[h].as_mut().expect("open");
    (ctx.uid, ctx.groups) = (65534, Vec::new());
    ctx.inbuf.extend_from_slice(data);
    let before = snapshot(&d, &victim);
    let mut made = Vec::new();
    while let Some(body) = d.contexts[h].as_mut().and_then(|c| c.next_message()) {
        let Ok(req) = body else { continue };
        let xrc_target = matches!(req, Request::CreateXrcRecvQp { .. });
        let reply = d.handle(h, into_arena(req, base + ARENA as u64));
        match reply {
            Reply::QpCreated { qpn, .. } => made.push(qpn),
            // An XRC target QP's number comes back as a handle.
            Reply::Handle(qpn) if xrc_target => made.push(qpn),
            Reply::Error { errno, .. } => assert!(errno > 0, "an errno"),
            _ => {}
        }
        if d.contexts[h].as_ref().is_none_or(|c| c.broken) {
            break;
        }
    }
    assert_eq!(
        snapshot(&d, &victim),
        before,
        "the victim's objects changed"
    );
    d.close(h);
    if let Some(dev) = device_at(&d.devices, 0) {
        for qpn in made {
            assert!(
                dev.engine.query_qp(qpn).is_err(),
                "QP {qpn:#x} outlived its context"
            );
        }
        dev.engine
            .check_invariants()
            .expect("the engine's invariants");
    }
    assert_eq!(
        snapshot(&d, &victim),
        before,
        "closing the other context changed the victim's"
    );
    d.close(victim.ctx);
    let _ = std::fs::remove_file(&path);
    // Only now: both contexts and their regions are gone.
    drop(arena);
}

/// Root's context: a local device, and a PD, an MR over the arena's first half, a CQ and an RC
/// QP in INIT on it.
fn victim(d: &mut Daemon, base: u64) -> (Victim, UnixStream) {
    let end = UnixStream::connect(&d.path).expect("connect");
    assert!(d.accept(), "the victim's connection");
    let ctx = d.contexts.iter().rposition(Option::is_some).expect("it");
    let mut ask = |req| d.handle(ctx, req);
    ask(Request::Hello {
        version: proto::VERSION,
    });
    let up = UpRequest {
        netdev: None,
        backend: None,
        netns: None,
    };
    let name = d.up(&up, [1, 2]).expect("a local device");
    let mut ask = |req| d.handle(ctx, req);
    assert!(matches!(ask(Request::Open { name }), Reply::Ok), "open");
    let handle = |r| match r {
        Reply::Handle(h) => h,
        r => panic!("{r:?}"),
    };
    let pd = handle(ask(Request::AllocPd));
    let key = handle(ask(Request::RegMr {
        pd,
        addr: base,
        len: ARENA as u64,
        iova: base,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        shared: None,
    }));
    let Reply::CqCreated { cq, .. } = ask(Request::CreateCq {
        cqe: 16,
        channel: None,
    }) else {
        panic!("a CQ")
    };
    let init = QpInit::new(QpType::Rc, cq, QpCap::new(8, 1, 8));
    let Reply::QpCreated { qpn, .. } = ask(Request::CreateQp { pd, init }) else {
        panic!("a QP")
    };
    let attr = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: Access::REMOTE_WRITE,
        ..QpAttr::default()
    };
    let mask = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    let r = ask(Request::ModifyQp { qpn, attr, mask });
    assert!(matches!(r, Reply::Ok), "{r:?}");
    let v = Victim {
        ctx,
        pd,
        cq,
        qpn,
        key,
    };
    (v, end)
}

/// What the victim has: its objects as the daemon records them, and its QP as the engine has it.
fn snapshot(d: &Daemon, v: &Victim) -> String {
    let Some(dev) = device_at(&d.devices, 0) else {
        return "no device".into();
    };
    let port = &dev.ports[&v.ctx];
    let (o, r) = (&port.owned, &port.rings);
    let qp = dev
        .engine
        .query_qp(v.qpn)
        .map(|(a, c)| (a.qp_state, a.qp_access_flags, c));
    format!(
        "{:?} {:?} {:?} {:?} {:?} {qp:?} pd {} cq {} key {:#x}",
        o.pds,
        o.mrs,
        r.sqs.keys().collect::<Vec<_>>(),
        r.cqs.keys().collect::<Vec<_>>(),
        port.counts(),
        v.pd,
        v.cq,
        v.key
    )
}

/// The request, with any memory it names moved into `arena` (the arena's second half): the
/// daemon reaches whatever the program maps, and here the program is this process.
fn into_arena(mut req: Request, arena: u64) -> Request {
    let inside = |addr: u64, len: u64| {
        let off = addr % ARENA as u64;
        (arena + off, len.min(ARENA as u64 - off))
    };
    match &mut req {
        Request::RegMr {
            addr, len, shared, ..
        } => {
            (*addr, *len) = inside(*addr, *len);
            // Every context here is this one process, whose descriptors include the other
            // contexts' rings: a program can name only its own.
            *shared = None;
        }
        Request::ReregMr {
            translation: Some((addr, len)),
            ..
        } => (*addr, *len) = inside(*addr, *len),
        _ => {}
    }
    req
}

/// Inputs for the corpus: a program's calls, each well formed, naming its own objects (handles
/// count from 1 in each context) and the victim's QP and key (the same in every run: the
/// device's seeds are fixed).
pub fn seeds() -> Vec<Vec<u8>> {
    let (qpn, key) = {
        let path = std::env::temp_dir().join(format!("srn-fuzz-seeds-{}.sock", std::process::id()));
        let mut d = Daemon::bind(&path, 1).expect("a daemon socket");
        let arena = vec![0u8; ARENA];
        let (v, _end) = victim(&mut d, arena.as_ptr() as u64);
        d.close(v.ctx);
        let _ = std::fs::remove_file(&path);
        (v.qpn, v.key)
    };
    let cap = QpCap::new(4, 1, 4);
    let hello = || Request::Hello {
        version: proto::VERSION,
    };
    // A program that has opened the device, then `calls`.
    let opened = |calls: Vec<Request>| {
        let open = Request::Open {
            name: "srnic0".into(),
        };
        [vec![hello(), open], calls].concat()
    };
    let calls: Vec<Vec<Request>> = vec![
        vec![hello()],
        vec![
            hello(),
            Request::ListDevices,
            Request::Down {
                name: "srnic0".into(),
            },
            Request::Capture { device: None },
        ],
        opened(vec![
            Request::AllocPd,
            Request::RegMr {
                pd: 1,
                addr: 0,
                len: 4096,
                iova: 0,
                access: Access::LOCAL_WRITE,
                shared: None,
            },
            Request::CreateCq {
                cqe: 4,
                channel: None,
            },
            Request::CreateQp {
                pd: 1,
                init: QpInit::new(QpType::Rc, 1, cap),
            },
            Request::QueryQp(qpn),
            Request::ModifyQp {
                qpn,
                attr: QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                },
                mask: AttrMask::STATE,
            },
            Request::DestroyQp(qpn),
            Request::DeregMr(key),
            Request::ReregMr {
                key,
                pd: Some(1),
                translation: None,
                access: None,
            },
            Request::DeallocPd(1),
            Request::DestroyCq(1),
        ]),
        opened(vec![
            Request::AllocPd,
            Request::CreateSrq {
                pd: 1,
                max_wr: 4,
                max_sge: 1,
            },
            Request::OpenXrcd {
                file: None,
                create: true,
                exclusive: false,
            },
            Request::CreateXrcRecvQp { xrcd: 0 },
            Request::AllocMw {
                pd: 1,
                mw_type: softrnic_emu_core::MwType::Type2,
            },
            Request::PollEvents,
            Request::QueryDevice,
            Request::QueryPort,
            Request::QueryGids,
        ]),
        vec![
            hello(),
            Request::CmOpen,
            Request::CmCreateId {
                ps: 0x0106,
                qp_type: QpType::Rc,
            },
            Request::CmBind {
                id: 1,
                addr: "127.0.0.1:0".parse().expect("an address"),
            },
            Request::CmListen { id: 1, backlog: 4 },
            Request::CmDestroyId(1),
        ],
    ];
    calls
        .into_iter()
        .map(|reqs| {
            reqs.iter()
                .flat_map(|r| proto::encode(r).expect("encodes"))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_and_garbage_leave_the_victim_alone() {
        for seed in seeds() {
            control(&seed);
            for cut in [1, seed.len() / 2, seed.len() - 1] {
                control(&seed[..cut]);
            }
            let mut bad = seed.clone();
            bad[seed.len() / 3] ^= 0x5a;
            control(&bad);
        }
        control(&[0xff; 64]);
    }
}
