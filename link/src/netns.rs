//! Test hosts: two network namespaces joined by a veth pair, at 198.18.1.1 and 198.18.1.2
//! (RFC 2544 benchmarking space), removed on drop. For tests and benchmarks; needs root.

use std::io;
use std::process::Command;

fn run(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Two namespaces, `ns[0]` holding interface `ifs[0]` and `ns[1]` holding `ifs[1]`.
#[derive(Debug)]
pub struct VethPair {
    /// The namespaces' names (under /var/run/netns).
    pub ns: [String; 2],
    /// The interfaces' names.
    pub ifs: [String; 2],
}

impl VethPair {
    /// Creates the pair with interface MTU `mtu`; `tag` keeps names of concurrent pairs apart.
    pub fn new(tag: &str, mtu: u32) -> io::Result<VethPair> {
        VethPair::with_queues(tag, mtu, 1)
    }

    /// As [`new`](Self::new), each interface with `queues` receive and transmit queues (a
    /// frame sent on transmit queue N arrives on the peer's receive queue N).
    pub fn with_queues(tag: &str, mtu: u32, queues: u32) -> io::Result<VethPair> {
        let base = format!("srn{}{tag}", std::process::id() % 100_000);
        let pair = VethPair {
            ns: [format!("{base}a"), format!("{base}b")],
            ifs: [format!("{base}x"), format!("{base}y")],
        };
        for n in &pair.ns {
            let _ = run(&["netns", "del", n]);
            run(&["netns", "add", n])?;
        }
        let (x, y) = (&pair.ifs[0], &pair.ifs[1]);
        let q = queues.to_string();
        let queues = ["numtxqueues", &q, "numrxqueues", &q];
        let mut add = vec!["link", "add", x];
        add.extend(queues);
        add.extend(["type", "veth", "peer", "name", y]);
        add.extend(queues);
        run(&add)?;
        let mtu = mtu.to_string();
        for i in 0..2 {
            let (ns, ifname) = (&pair.ns[i], &pair.ifs[i]);
            run(&["link", "set", ifname, "netns", ns])?;
            let addr = format!("198.18.1.{}/24", i + 1);
            for cmd in [
                &["ip", "link", "set", "lo", "up"][..],
                &["ip", "link", "set", ifname, "mtu", &mtu],
                &["ip", "addr", "add", &addr, "dev", ifname],
                &["ip", "link", "set", ifname, "up"],
            ] {
                pair.exec(i, cmd)?;
            }
        }
        Ok(pair)
    }

    /// The path of namespace `i`, for [`softrnic_sys::enter_netns`].
    pub fn path(&self, i: usize) -> String {
        format!("/var/run/netns/{}", self.ns[i])
    }

    /// Runs a command inside namespace `i`.
    pub fn exec(&self, i: usize, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["netns", "exec", &self.ns[i]];
        all.extend_from_slice(args);
        run(&all)
    }

    /// Adds IPv6 address `cidr` to interface `i`, usable at once (no duplicate address
    /// detection).
    pub fn add_ipv6(&self, i: usize, cidr: &str) -> io::Result<()> {
        self.exec(
            i,
            &["ip", "addr", "add", cidr, "dev", &self.ifs[i], "nodad"],
        )
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = run(&["netns", "del", n]);
        }
    }
}
