//! The documentation runs as written. Every fenced block of commands in README.md and docs/
//! carries a marker on the line above it, and this test does what the marker says:
//!
//! - `<!-- doc: run -->`: the block runs with bash (`set -euo pipefail`) and must succeed.
//!   Clauses after `;` adjust it: `prints "TEXT"` (the output must contain TEXT), `shorter "A"
//!   => "B"` (runs with A replaced by B: a bounded version of a long run, which the marker's
//!   reason explains), `hosts` (root: the block runs in a network namespace of its own that has
//!   an `eth0`, beside a namespace `ns1` that has a `veth0`), `in DIR` (the working directory:
//!   `scratch` for a scratch directory, else relative to the repository, the default; a
//!   scratch directory is the default for `hosts`).
//! - `<!-- doc: workflow; skip-step "NAME": REASON -->` on a GitHub Actions job: each step's
//!   `run:` script runs in order in a scratch directory, but the steps named.
//! - `<!-- doc: skip: REASON -->`: not run, for the reason written there.
//!
//! Commands named in running text are fragments or point at these blocks; the blocks are what
//! a reader copies. Rust blocks are doc tests instead (`softrnic/src/lib.rs` includes the pages that have any);
//! text blocks (diagrams, dumps that `tests/tests/generated.rs` keeps current) are not
//! commands. A command block without a marker fails this test. Every run has its own daemon
//! socket and runtime directory, and whatever it started is stopped afterwards.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The longest one block may take (a release build with LTO among them, on 2 cores).
const BLOCK_LIMIT: Duration = Duration::from_secs(1800);

/// The pages whose Rust blocks are doc tests of the `softrnic` crate.
const DOCTESTED: [&str; 3] = ["README.md", "docs/engine.md", "docs/fuzzing.md"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fenced block of a page.
#[derive(Debug)]
struct Block {
    page: String,
    line: usize,
    lang: String,
    marker: Option<String>,
    body: String,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }
}

/// Every page: README.md and docs/*.md.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.ends_with(".md").then(|| format!("docs/{name}"))
        })
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn blocks() -> Vec<Block> {
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(root().join(&page)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let Some(lang) = lines[i].strip_prefix("```") else {
                i += 1;
                continue;
            };
            let start = i;
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].starts_with("```"))
                .unwrap_or_else(|| panic!("{page}:{}: an unclosed block", start + 1));
            let marker = start
                .checked_sub(1)
                .and_then(|p| lines[p].trim().strip_prefix("<!-- doc:"))
                .and_then(|m| m.strip_suffix("-->"))
                .map(|m| m.trim().to_owned());
            out.push(Block {
                page: page.clone(),
                line: start + 1,
                lang: lang.trim().to_owned(),
                marker,
                body: lines[start + 1..end].join("\n") + "\n",
            });
            i = end + 1;
        }
    }
    out
}

/// What a marker asks.
#[derive(Debug, Default)]
struct Run {
    prints: Vec<String>,
    shorter: Vec<(String, String)>,
    hosts: bool,
    dir: Option<String>,
    skip_steps: Vec<String>,
    workflow: bool,
}

/// A quoted string at the start of `s`, and the rest.
fn quoted(s: &str) -> Option<(String, &str)> {
    let s = s.trim_start().strip_prefix('"')?;
    let end = s.find('"')?;
    Some((s[..end].to_owned(), &s[end + 1..]))
}

/// A marker's clauses: split at each `;` outside quotes.
fn clauses(marker: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in marker.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ';' if !quoted => {
                out.push(marker[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(marker[start..].trim());
    out
}

/// Reads a marker: `Ok(None)` for a skip with its reason, `Err` for a bad marker.
fn parse(marker: &str) -> Result<Option<Run>, String> {
    if let Some(reason) = marker.strip_prefix("skip:") {
        return if reason.trim().len() < 10 {
            Err("a skip needs its reason".into())
        } else {
            Ok(None)
        };
    }
    let mut clauses = clauses(marker).into_iter();
    let mut run = Run::default();
    match clauses.next() {
        Some("run") => {}
        Some("workflow") => run.workflow = true,
        other => return Err(format!("unknown marker {other:?}")),
    }
    for c in clauses {
        if let Some(rest) = c.strip_prefix("prints") {
            run.prints.push(quoted(rest).ok_or("prints \"TEXT\"")?.0);
        } else if let Some(rest) = c.strip_prefix("shorter") {
            let (from, rest) = quoted(rest).ok_or("shorter \"A\" => \"B\"")?;
            let rest = rest
                .trim_start()
                .strip_prefix("=>")
                .ok_or("shorter needs =>")?;
            let (to, reason) = quoted(rest).ok_or("shorter \"A\" => \"B\": REASON")?;
            if reason.trim().trim_start_matches(':').trim().len() < 10 {
                return Err("shorter needs its reason".into());
            }
            run.shorter.push((from, to));
        } else if let Some(rest) = c.strip_prefix("skip-step") {
            let (name, reason) = quoted(rest).ok_or("skip-step \"NAME\": REASON")?;
            if reason.trim().trim_start_matches(':').trim().len() < 10 {
                return Err("skip-step needs its reason".into());
            }
            run.skip_steps.push(name);
        } else if c == "hosts" {
            run.hosts = true;
        } else if let Some(dir) = c.strip_prefix("in ") {
            run.dir = Some(dir.trim().to_owned());
        } else {
            return Err(format!("unknown clause {c:?}"));
        }
    }
    Ok(Some(run))
}

/// Whether a block holds commands (and so needs a marker).
fn commands(b: &Block) -> bool {
    matches!(
        b.lang.as_str(),
        "sh" | "bash" | "console" | "shell" | "yaml" | "yml"
    )
}

#[test]
fn every_command_block_says_how_it_is_checked() {
    let mut problems = Vec::new();
    for b in blocks() {
        if b.lang == "rust" && !DOCTESTED.contains(&b.page.as_str()) {
            problems.push(format!(
                "{}: a Rust block in a page that is not a doc test",
                b.at()
            ));
        }
        if !commands(&b) {
            continue;
        }
        match b.marker.as_deref().map(parse) {
            None => problems.push(format!("{}: no <!-- doc: ... --> marker", b.at())),
            Some(Err(e)) => problems.push(format!("{}: {e}", b.at())),
            Some(Ok(Some(r))) if r.workflow != matches!(b.lang.as_str(), "yaml" | "yml") => {
                problems.push(format!("{}: workflow is for GitHub Actions jobs", b.at()))
            }
            Some(Ok(_)) => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A scratch environment for one block: its own daemon socket and runtime directory, the
/// `softrnic` under test first in PATH.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(n: usize) -> Scratch {
        let dir = std::env::temp_dir().join(format!("srn-docs-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("run")).unwrap();
        Scratch { dir }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("run/softrnic.sock")
    }

    /// What a GitHub Actions step adds to PATH for the next ones (`$GITHUB_PATH`).
    fn github_path(&self) -> PathBuf {
        self.dir.join("github-path")
    }

    fn command(&self, script: &str, cwd: &Path, netns: Option<&str>) -> Command {
        let bin = Path::new(env!("CARGO_BIN_EXE_softrnic")).parent().unwrap();
        let added = std::fs::read_to_string(self.github_path()).unwrap_or_default();
        let mut path: Vec<String> = added.lines().rev().map(str::to_owned).collect();
        path.push(bin.display().to_string());
        path.push(std::env::var("PATH").unwrap());
        let mut c = in_ns(netns, "bash");
        c.args(["-c", &format!("set -euo pipefail\n{script}")])
            .current_dir(cwd)
            .env("PATH", path.join(":"))
            .env("SOFTRNIC_SOCKET", self.socket())
            .env("XDG_RUNTIME_DIR", self.dir.join("run"))
            // A workflow's environment: the runner's scratch space, and softrnic's repository
            // (the one under test).
            .env("GITHUB_PATH", self.github_path())
            .env("RUNNER_TEMP", &self.dir)
            .env(
                "SOFTRNIC_GIT",
                format!("file://{}", root().canonicalize().unwrap().display()),
            )
            .stdin(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c
    }

    /// Runs `script`; its output, or why it failed. The output goes to a file (a pipe would
    /// fill and stall a block that prints much, such as a dissection).
    fn run(&self, script: &str, cwd: &Path, netns: Option<&str>) -> Result<String, String> {
        let log = self.dir.join("output");
        let file = std::fs::File::create(&log).unwrap();
        let child = self
            .command(script, cwd, netns)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let pgid = child.id();
        let mut child = Running(child);
        let status = child.wait_at_most(BLOCK_LIMIT);
        // What the block left running in the background (servers, captures) goes with it.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .output();
        let all = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
        match status {
            Some(s) if s.success() => Ok(all),
            s => Err(format!("ended with {s:?}:\n{all}")),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // The daemon a block started (exec and capture start one) stops with it.
        if let Ok(c) = softrnic_client::client::Client::connect(&self.socket()) {
            let _ = Command::new("kill")
                .arg(c.daemon_pid().to_string())
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The namespaces a `hosts` block runs among: one with an `eth0`, and `ns1` with a `veth0`,
/// each the end of a veth pair whose other end is in a namespace of its own.
struct Hosts {
    names: Vec<String>,
}

impl Hosts {
    const HOST: &str = "srndoc-host";

    fn new() -> Hosts {
        let id = std::process::id() % 100_000;
        let peers = [format!("srndoc-p{id}"), format!("srndoc-q{id}")];
        let names = vec![Self::HOST.to_owned(), "ns1".to_owned()];
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(out.status.success(), "ip {args:?}: {}", text(&out.stderr));
        };
        for n in names.iter().chain(&peers) {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
            ip(&["netns", "add", n]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        for (i, (ns, ifname)) in [(Self::HOST, "eth0"), ("ns1", "veth0")].iter().enumerate() {
            let peer = &peers[i];
            ip(&[
                "link",
                "add",
                "srndoc-tmp",
                "type",
                "veth",
                "peer",
                "name",
                "srndoc-tmp2",
            ]);
            ip(&["link", "set", "srndoc-tmp", "netns", ns]);
            ip(&["link", "set", "srndoc-tmp2", "netns", peer]);
            ip(&["-n", ns, "link", "set", "srndoc-tmp", "name", ifname]);
            let addr = format!("198.18.{}.1/24", 10 + i);
            ip(&["-n", ns, "addr", "add", &addr, "dev", ifname]);
            ip(&["-n", ns, "link", "set", ifname, "up"]);
            let addr = format!("198.18.{}.2/24", 10 + i);
            ip(&["-n", peer, "addr", "add", &addr, "dev", "srndoc-tmp2"]);
            ip(&["-n", peer, "link", "set", "srndoc-tmp2", "up"]);
        }
        Hosts {
            names: names.into_iter().chain(peers).collect(),
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// The `run:` scripts of a GitHub Actions job, by step name.
fn steps(yaml: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let lines: Vec<&str> = yaml.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_start();
        if let Some(name) = l.strip_prefix("- name:") {
            out.push((name.trim().to_owned(), String::new()));
        } else if let Some(run) = l.strip_prefix("run:") {
            let run = run.trim();
            let step = out.last_mut().expect("run: in a named step");
            if run == "|" {
                let indent = lines[i].len() - l.len() + 2;
                while i + 1 < lines.len()
                    && (lines[i + 1].trim().is_empty()
                        || lines[i + 1].len() - lines[i + 1].trim_start().len() >= indent)
                {
                    i += 1;
                    step.1.push_str(lines[i].get(indent..).unwrap_or(""));
                    step.1.push('\n');
                }
            } else {
                step.1 = format!("{run}\n");
            }
        }
        i += 1;
    }
    out.retain(|s| !s.1.is_empty());
    out
}

#[test]
fn every_command_block_runs_as_written() {
    let _serial = serial();
    let mut failures = Vec::new();
    let mut ran = 0;
    for (n, b) in blocks().iter().enumerate() {
        if !commands(b) {
            continue;
        }
        let Some(Ok(Some(run))) = b.marker.as_deref().map(parse) else {
            continue;
        };
        let scratch = Scratch::new(n);
        let hosts = run.hosts.then(Hosts::new);
        let cwd = match (&run.dir, run.hosts || run.workflow) {
            (Some(d), _) if d == "scratch" => scratch.dir.clone(),
            (Some(d), _) => root().join(d),
            (None, true) => scratch.dir.clone(),
            (None, false) => root(),
        };
        let netns = hosts.as_ref().map(|_| Hosts::HOST);
        let mut scripts = Vec::new();
        if run.workflow {
            for (name, script) in steps(&b.body) {
                if !run.skip_steps.contains(&name) {
                    scripts.push((format!("step {name:?}"), script));
                }
            }
        } else {
            let mut script = b.body.clone();
            for (from, to) in &run.shorter {
                assert!(script.contains(from), "{}: no {from:?}", b.at());
                script = script.replace(from, to);
            }
            scripts.push(("block".to_owned(), script));
        }
        let started = Instant::now();
        for (what, script) in scripts {
            match scratch.run(&script, &cwd, netns) {
                Ok(out) => {
                    for want in &run.prints {
                        if !out.contains(want.as_str()) {
                            let tail =
                                &out[out.floor_char_boundary(out.len().saturating_sub(3000))..];
                            failures.push(format!("{} {what}: no {want:?} in:\n...{tail}", b.at()));
                        }
                    }
                }
                Err(e) => failures.push(format!("{} {what}:\n{script}\n{e}", b.at())),
            }
        }
        eprintln!("{}: ran in {:.1?}", b.at(), started.elapsed());
        ran += 1;
    }
    assert!(ran >= 5, "only {ran} blocks ran");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
