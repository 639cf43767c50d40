//! One root daemon shared by several users, as a host gives RDMA to a group through
//! /dev/infiniband/uverbs*: its group may connect and nobody else, administration (devices,
//! captures) is for root and the admin group, users cannot reach each other's memory, each is
//! held to the per-user limits, and a connection passed to another process cannot make the
//! daemon reach whatever reused its first owner's PID. Run as root (setpriv makes the users).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use common::*;

/// The group that may use the daemon, the admin group, and the users (numbers need no entry
/// in /etc/passwd or /etc/group).
const USERS: u32 = 64000;
const ADMINS: u32 = 64001;
const ALICE: u32 = 64010;
const BOB: u32 = 64013;
const ADMIN: u32 = 64011;
const OUTSIDER: u32 = 64012;

struct Shared {
    host: Host,
    dir: PathBuf,
}

impl Shared {
    fn start(tag: &str) -> Shared {
        let shared = c_program("shared", &["-libverbs"]);
        let dir = for_everyone(tag, &[&shared]);
        let host = Host::with_args(
            tag,
            &[
                "--group",
                &USERS.to_string(),
                "--admin-group",
                &ADMINS.to_string(),
                "--max-qps-per-user",
                "4",
                "--max-mrs-per-user",
                "8",
                "--max-registered-per-user",
                "1M",
            ],
        );
        Shared { host, dir }
    }

    /// `softrnic ARGS` as user `uid` in `groups`.
    fn softrnic(&self, uid: u32, groups: &[u32], args: &[&str]) -> Command {
        let groups: Vec<String> = groups.iter().map(u32::to_string).collect();
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"));
        match groups.is_empty() {
            true => c.arg("--clear-groups"),
            false => c.arg(format!("--groups={}", groups.join(","))),
        };
        c.arg("--")
            .arg(self.dir.join("softrnic"))
            .args(args)
            .env("SOFTRNIC_SOCKET", &self.host.socket)
            .env_remove("XDG_RUNTIME_DIR")
            .current_dir(&self.dir);
        c
    }

    /// tests/c/shared.c in mode ARGS, as user `uid` of the daemon's group, its input a pipe.
    fn shared(&self, uid: u32, args: &[&str]) -> (Running, BufReader<ChildStdout>) {
        let exe = self.dir.join("shared").display().to_string();
        let mut argv = vec!["exec", "--", exe.as_str()];
        argv.extend(args);
        let mut child = self
            .softrnic(uid, &[USERS], &argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("setpriv (util-linux)");
        let out = BufReader::new(child.stdout.take().unwrap());
        (Running(child), out)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn line(out: &mut BufReader<ChildStdout>) -> String {
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    l.trim_end().to_owned()
}

/// Closes a program's input and returns the rest of what it printed, once it has exited 0.
fn finish(mut p: Running, out: &mut BufReader<ChildStdout>) -> String {
    drop(p.0.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(out, &mut rest).unwrap();
    let status = p.wait_at_most(Duration::from_secs(120)).expect("it ends");
    let mut err = String::new();
    std::io::Read::read_to_string(p.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{rest}{err}");
    rest
}

fn fails_with(mut c: Command, what: &str) {
    let out = c.output().unwrap();
    let said = text(&out.stderr);
    assert!(!out.status.success() && said.contains(what), "{said}");
}

#[test]
fn the_group_may_connect_and_only_admins_administer_or_capture() {
    let _serial = serial();
    let s = Shared::start("group");
    let socket = std::fs::metadata(&s.host.socket).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&socket.permissions()) & 0o777,
        0o660
    );
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&socket), USERS);

    // Not in the group: the socket refuses.
    fails_with(s.softrnic(OUTSIDER, &[], &["status"]), "Permission denied");
    // In the group: it serves, but administration and captures are the admins'.
    let status = s.softrnic(ALICE, &[USERS], &["status"]).output().unwrap();
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert!(text(&status.stdout).contains("srnic0"));
    for args in [
        &["up"][..],
        &["down", "srnic0"],
        &["capture", "-w", "x.pcapng", "-c", "1"],
    ] {
        fails_with(s.softrnic(ALICE, &[USERS], args), "admin group");
    }
    // An admin captures what a user's programs send.
    let capture = s.dir.join("admin.pcapng");
    let mut admin = Running(
        s.softrnic(ADMIN, &[USERS, ADMINS], &["capture", "-w"])
            .arg(&capture)
            .args(["-c", "2"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    admin.wait_until("captures", || capture.exists());
    let (hold, mut held) = s.shared(ALICE, &["hold"]);
    let key = line(&mut held);
    let (rkey, addr) = key.split_once(' ').expect("RKEY ADDR");
    let (steal, mut stole) = s.shared(BOB, &["steal", rkey, addr]);
    let said = finish(steal, &mut stole);
    admin.finish(&[]);
    assert!(std::fs::metadata(&capture).unwrap().len() > 100);
    // Bob's READ and WRITE with Alice's key, through his own QPs, were refused by the key's
    // PD check (IBA 10.6.3.2 / 9.7.5.1.3: a remote access error), and Alice's page is as it was.
    assert_eq!(
        said.trim(),
        "steal: read remote access error, write remote access error"
    );
    assert_eq!(finish(hold, &mut held).trim(), "hold: intact");
}

#[test]
fn each_user_is_held_to_the_limits_over_all_their_programs() {
    let _serial = serial();
    let s = Shared::start("limits");
    // Alice holds a 4 KiB region in one program; in another she reaches the QP limit (4), then
    // the byte limit (1 MiB: three 256 KiB regions beside the first program's 4 KiB). Bob,
    // holding nothing, has his own: four regions fill his MiB exactly.
    let (hold, mut held) = s.shared(ALICE, &["hold"]);
    line(&mut held);
    let (alice, mut a) = s.shared(ALICE, &["limits"]);
    assert_eq!(
        finish(alice, &mut a).trim(),
        format!(
            "limits: 4 qps (errno {}), 3 mrs (errno {})",
            libc::EAGAIN,
            libc::ENOMEM
        )
    );
    let (bob, mut b) = s.shared(BOB, &["limits"]);
    assert_eq!(
        finish(bob, &mut b).trim(),
        format!(
            "limits: 4 qps (errno {}), 4 mrs (errno {})",
            libc::EAGAIN,
            libc::ENOMEM
        )
    );
    assert_eq!(finish(hold, &mut held).trim(), "hold: intact");
}

/// Spawns tests/c/shared.c `victim` with PID `pid` (set as the kernel's last PID just before),
/// or gives up after some tries (another process took it).
fn victim_at(exe: &Path, pid: u32) -> Option<(Child, BufReader<ChildStdout>)> {
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let mut v = Command::new(exe)
            .arg("victim")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        if v.id() == pid {
            let out = BufReader::new(v.stdout.take().unwrap());
            return Some((v, out));
        }
        let _ = v.kill();
        let _ = v.wait();
    }
    None
}

/// A connection passed on to a child cannot reach the process that took its parent's PID.
/// Reached through system calls (`SOFTRNIC_SHARED_MR=0`), the parent's memory is gone with it
/// and the child's WRITE fails; shared with the daemon (the default), the registration keeps
/// the pages, as a kernel provider keeps pages pinned, and the WRITE lands in them.
#[test]
fn a_connection_passed_on_cannot_reach_a_process_that_reused_the_pid() {
    let _serial = serial();
    let exe = c_program("shared", &["-libverbs"]);
    let host = Host::start("reuse", None, None);
    for (mode, status) in [("0", "local protection error"), ("", "success")] {
        // The program registers its pages and forks; the parent, the process that connected,
        // exits; the child keeps the connection.
        let mut parent = host
            .program(&[exe.display().to_string(), "reuse".into()])
            .env("SOFTRNIC_SHARED_MR", mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = parent.stdin.take().unwrap();
        let mut out = BufReader::new(parent.stdout.take().unwrap());
        let said = line(&mut out);
        let pid: u32 = said
            .strip_prefix("reuse: pid ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{said}"));
        assert!(parent.wait().unwrap().success());
        // Another process now has its PID, and the same pages at the same address.
        let (mut victim, mut seen) = victim_at(&exe, pid).expect("the PID given again");
        assert_eq!(line(&mut seen), "victim: ready");
        // The child WRITEs page 0 onto page 1 of the parent's region: the daemon must not read
        // or write the process that has the parent's PID now.
        writeln!(stdin, "go").unwrap();
        let result = line(&mut out);
        drop(victim.stdin.take());
        let fate = line(&mut seen);
        let _ = victim.wait();
        assert_eq!(
            fate, "victim: intact",
            "{mode:?}: the child's WRITE said: {result}"
        );
        assert_eq!(result, format!("reuse: write {status}"), "{mode:?}");
    }
}

/// The systemd unit in the repository, run as systemd would run it (its ExecStart, then its
/// ExecStartPost, through a shell that splits the variables as systemd does), with the
/// commands built here and the groups by number: the daemon serves the group with a device.
#[test]
fn the_systemd_unit_starts_a_shared_daemon_with_its_device() {
    let _serial = serial();
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../systemd/softrnic.service"
    ))
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_softrnic");
    let line = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key}"))
            .replace("/usr/bin/softrnic", bin)
            .replace("softrnic-admin", &ADMINS.to_string())
            .replace("--group rdma", &format!("--group {USERS}"))
    };
    let socket = std::env::temp_dir().join(format!("srn-unit-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let run = |command: String| {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(command)
            .env("SOFTRNIC_SOCKET", &socket)
            .env("SOFTRNIC_UP", "")
            .env("SOFTRNIC_LIMITS", "--max-qps-per-user 4")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    };
    let mut daemon = Running(run(format!("exec {}", line("ExecStart="))).spawn().unwrap());
    let post = run(line("ExecStartPost=")).output().unwrap();
    assert!(post.status.success(), "{}", text(&post.stderr));
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o660
    );
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), USERS);
    let status = Command::new(bin)
        .arg("status")
        .env("SOFTRNIC_SOCKET", &socket)
        .output()
        .unwrap();
    assert!(
        text(&status.stdout).contains("srnic0"),
        "{}",
        text(&status.stderr)
    );
    let _ = daemon.0.kill();
    let _ = daemon.0.wait();
    let _ = std::fs::remove_file(&socket);
}
