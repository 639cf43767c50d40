//! The `softrnic` command.

use clap::{Parser, Subcommand};
use softrnic::capture::{self, Detail};

mod admin;
mod exec;
mod rdma;
mod view;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "softrnic", version, about = "A userspace RoCEv2 software RNIC")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Explain every RoCEv2 frame of a pcap or pcapng capture, field by field.
    Dissect {
        /// One line per frame (QPN, PSN, opcode, length, flags) instead of every field.
        #[arg(short, long)]
        compact: bool,
        /// Leave out frames that are not RoCEv2 (instead of a line saying each is skipped).
        #[arg(long)]
        roce_only: bool,
        /// With each frame, the bytes its ICRC hashes, the masked fields as ff.
        #[arg(long)]
        icrc: bool,
        /// Capture files (pcap or pcapng; Ethernet or Linux cooked from `tcpdump -i any`);
        /// `-` reads standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Draw each conversation of a capture as a ladder: who sent what when, what each ACK
    /// covers, gaps, retransmissions, NAKs and their causes, READ responses and their request.
    Ladder {
        /// The capture (pcap or pcapng; `-` for standard input).
        file: PathBuf,
        /// Also write the ladder as a self-contained HTML page, each packet's fields a click away.
        #[arg(long)]
        html: Option<PathBuf>,
        /// The path MTU, to count each READ's responses (by default the largest FIRST or
        /// MIDDLE payload in the capture).
        #[arg(long)]
        mtu: Option<usize>,
    },
    /// Run a lesson: a conversation on the simulated network with a fault chosen to show one
    /// rule of the protocol, its ladder, what happened, completions and counters.
    Lesson {
        /// The lesson (without it, the list).
        name: Option<String>,
        #[command(flatten)]
        out: RunOutput,
    },
    /// Run work between two simulated hosts with faults of your choice, deterministic from
    /// the seed: the ladder, what happened, completions and counters.
    Simulate {
        /// What A posts, in order (send, write, read, cas, fadd); repeat for several.
        #[arg(long = "op", default_value = "send")]
        ops: Vec<String>,
        /// Bytes per SEND, WRITE or READ.
        #[arg(long, default_value_t = 3000)]
        size: usize,
        /// How many times each operation is posted.
        #[arg(long, default_value_t = 1)]
        count: usize,
        /// Lose a packet: its number (from 1, both ways counted) or the first of an opcode
        /// (e.g. SEND_MIDDLE, RC_ACKNOWLEDGE); repeat for several.
        #[arg(long)]
        drop: Vec<String>,
        /// Have the network deliver a packet twice (chosen as for --drop); repeat for several.
        #[arg(long)]
        twice: Vec<String>,
        /// Have a congested switch mark a packet CE (chosen as for --drop; A then sends
        /// ECN-capable packets); repeat for several.
        #[arg(long)]
        mark: Vec<String>,
        /// Lose each packet with this probability.
        #[arg(long, default_value_t = 0.0)]
        loss: f64,
        /// Deliver each packet late, behind later ones, with this probability.
        #[arg(long, default_value_t = 0.0)]
        reorder: f64,
        /// Deliver each packet twice with this probability.
        #[arg(long, default_value_t = 0.0)]
        duplicate: f64,
        /// The path MTU: 256, 512, 1024, 2048 or 4096.
        #[arg(long, default_value_t = 1024)]
        mtu: u32,
        /// Everything random comes from it.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// A's first PSN (try 0xfffffe: PSNs wrap at 2^24).
        #[arg(long, default_value = "0", value_parser = parse_number)]
        psn: u32,
        /// B posts its receive buffers this many microseconds late (RNR NAKs until then).
        #[arg(long)]
        late_receive: Option<u64>,
        /// The ACK timeout exponent (4.096 µs × 2^N).
        #[arg(long, default_value_t = 4)]
        timeout: u8,
        #[command(flatten)]
        out: RunOutput,
    },
    /// Incast on the simulated network: N senders WRITE to one receiver through one switch
    /// port, with and without DCQCN and PFC; prints utilisation, peak queue, drops and
    /// fairness for each run.
    Incast {
        /// Senders per run; repeat for several (by default 8 and 32).
        #[arg(long = "senders")]
        senders: Vec<usize>,
        /// How long the senders send, in microseconds of virtual time.
        #[arg(long, default_value_t = 5_000)]
        duration: u64,
        /// Everything random comes from it.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// KiB the switch's queue to the receiver holds.
        #[arg(long, default_value_t = 1024)]
        buffer: u64,
        /// Also plot each run over time (queue, per-sender rates, fairness) as SVG.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// Write the sample capture (every opcode, IPv4 and IPv6, NAKs, VLAN, ECN, CM messages) as pcap.
    SampleCapture {
        /// Where to write it.
        out: PathBuf,
    },
    /// Run the daemon in the foreground (`up` starts one in the background when needed).
    Daemon {
        /// Data-path threads (devices are shared out among them); by default
        /// `SOFTRNIC_WORKERS`, or one per two CPUs.
        #[arg(long)]
        workers: Option<std::num::NonZeroUsize>,
        /// Engines per device, each serving its share of the programs (and their QPs) on its
        /// own worker, and on AF_XDP its share of the interface's queues (so at most one per
        /// queue; AF_PACKET has one); by default `SOFTRNIC_SHARDS`, or one. Programs on
        /// different shards cannot share an XRC domain.
        #[arg(long)]
        shards: Option<std::num::NonZeroUsize>,
        #[command(flatten)]
        sharing: admin::SharingArgs,
    },
    /// Add a device: on an interface (AF_XDP or AF_PACKET), or local (same host only).
    Up {
        /// The interface (e.g. eth0); without it, a local device that reaches only the
        /// daemon's other devices and needs no privileges.
        #[arg(long)]
        netdev: Option<String>,
        /// The backend; by default the best that works: AF_XDP native, generic, AF_PACKET.
        #[arg(long, value_enum)]
        backend: Option<admin::Backend>,
        /// The network namespace of the interface (a name under /var/run/netns, or a path).
        #[arg(long)]
        netns: Option<String>,
    },
    /// Remove a device.
    Down {
        /// Its name (e.g. srnic0).
        device: String,
    },
    /// The daemon, its devices, their GIDs and object counts.
    Status,
    /// A device's congestion control (DCQCN) parameters, by mlx5's names (its
    /// `ecn/roce_np` and `ecn/roce_rp` files); `NAME=VALUE` sets one (times in µs, rates in
    /// Mb/s) for the device's QPs from then on.
    Dcqcn {
        /// The device (e.g. srnic0).
        device: String,
        /// Parameters to set, e.g. `rpg_time_reset=55 rp_enable=0`.
        set: Vec<String>,
    },
    /// Counters, with the names rxe and mlx5 users know.
    Stat {
        /// One device (all by default).
        device: Option<String>,
    },
    /// Run an unmodified RDMA program on softrnic (starting the daemon, with a local device,
    /// if none is running): `softrnic exec -- ib_write_bw -d srnic0`.
    Exec {
        /// Leave /sys and /dev as they are: without it the program runs in a private mount
        /// namespace where /sys/class/infiniband and /dev/infiniband show softrnic's devices
        /// (UCX looks for devices there).
        #[arg(long)]
        no_view: bool,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        program: Vec<std::ffi::OsString>,
    },
    /// Answer iproute2's `rdma link [show]` and `rdma dev [show]` (`-j` for JSON) for
    /// softrnic's devices: what `softrnic exec` gives programs as `rdma` (rdma-core's tests
    /// run `rdma link show -j`).
    Rdma {
        /// rdma's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Fuzz another RoCEv2 implementation over live connections: connect to its
    /// `ibv_rc_pingpong` server (run in a loop), send structure-aware mutations of our own
    /// requests, and save what the oracles find as a pcapng and the command that replays it.
    Fuzz(FuzzArgs),
    /// Capture every frame in and out (same-host frames too) to a pcapng file, until
    /// interrupted or `--count` frames.
    Capture {
        /// The pcapng file to write.
        #[arg(short = 'w', long)]
        write: PathBuf,
        /// One device (all by default).
        #[arg(long)]
        device: Option<String>,
        /// Stop after this many frames.
        #[arg(short, long)]
        count: Option<u64>,
    },
}

/// `softrnic fuzz`'s options.
#[derive(clap::Args)]
struct FuzzArgs {
    /// The interface the peer is reached on (AF_PACKET: needs CAP_NET_RAW).
    #[arg(long)]
    interface: String,
    /// The peer's pingpong server, ADDRESS or ADDRESS:PORT (port 18515 by default).
    #[arg(long)]
    peer: String,
    /// Every choice follows from it.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many rounds (connections).
    #[arg(long, default_value_t = 10)]
    rounds: u32,
    /// The first round's number, to replay a round.
    #[arg(long, default_value_t = 0)]
    first_round: u32,
    /// Mutations per round.
    #[arg(long, default_value_t = 8)]
    mutations: u32,
    /// The classes to draw from, comma-separated (all by default): opcode, psn, length,
    /// pad, key, address, atomic, header, duplicate, truncate, icrc, checksum, forged-ack.
    #[arg(long, value_delimiter = ',')]
    classes: Vec<String>,
    /// The message size, as the server's `-s` (pingpong's default is 4096).
    #[arg(long, default_value_t = 4096)]
    size: u32,
    /// The path MTU, as the server's `-m`.
    #[arg(long, default_value_t = 1024)]
    mtu: u32,
    /// Seconds the peer may take to take a connection or answer a message.
    #[arg(long, default_value_t = 10.0)]
    peer_timeout: f64,
    /// Milliseconds to watch for answers after each mutation.
    #[arg(long, default_value_t = 100)]
    window_ms: u64,
    /// A command run after each round (`sh -c`); failing is a finding (e.g. a grep of the
    /// peer's kernel log for WARN, BUG or oops).
    #[arg(long)]
    check: Option<String>,
    /// Where findings go.
    #[arg(long, default_value = "fuzz-findings")]
    out: PathBuf,
}

impl FuzzArgs {
    fn options(self) -> Result<softrnic::fuzz::Options, String> {
        use softrnic::fuzz::Options;
        use softrnic_wire::mutate::Class;
        let peer = match self.peer.parse::<std::net::SocketAddr>() {
            Ok(a) => a,
            Err(_) => self
                .peer
                .parse::<std::net::IpAddr>()
                .map(|ip| std::net::SocketAddr::new(ip, 18515))
                .map_err(|_| format!("--peer {}: not an address or address:port", self.peer))?,
        };
        let classes = if self.classes.is_empty() {
            Class::ALL.to_vec()
        } else {
            self.classes
                .iter()
                .map(|n| Class::from_name(n).ok_or_else(|| format!("--classes: no class {n}")))
                .collect::<Result<_, _>>()?
        };
        let mtu = [256, 512, 1024, 2048, 4096]
            .iter()
            .position(|&m| m == self.mtu)
            .and_then(|i| softrnic_emu_core::Mtu::from_ibv(i as u8 + 1))
            .ok_or_else(|| format!("--mtu {}: 256, 512, 1024, 2048 or 4096", self.mtu))?;
        if !(self.peer_timeout > 0.0 && self.peer_timeout.is_finite()) {
            return Err("--peer-timeout: a positive number of seconds".into());
        }
        Ok(Options {
            interface: self.interface,
            peer,
            seed: self.seed,
            first_round: self.first_round,
            rounds: self.rounds,
            mutations: self.mutations,
            classes,
            size: self.size,
            mtu,
            peer_timeout: std::time::Duration::from_secs_f64(self.peer_timeout),
            window: std::time::Duration::from_millis(self.window_ms),
            check: self.check,
            out: self.out,
        })
    }
}

/// Runs `softrnic fuzz` and prints its summary. Findings are results, not a failure.
fn fuzz(args: FuzzArgs) -> Result<(), String> {
    let opts = args.options()?;
    let report = softrnic::fuzz::run(&opts, &mut std::io::stdout())?;
    println!(
        "{} rounds, {} ended with a working connection; {} findings (in {})",
        report.rounds,
        report.survived,
        report.findings.len(),
        opts.out.display()
    );
    for (class, (sent, answered)) in &report.classes {
        println!("  {class:<11} {sent:>5} sent, {answered:>5} answered");
    }
    Ok(())
}

/// Where a lesson's or simulation's capture and ladder go.
#[derive(clap::Args)]
struct RunOutput {
    /// The pcapng capture of every port (by default NAME.pcapng in this directory, NAME the
    /// lesson's or "simulation").
    #[arg(short = 'w', long)]
    write: Option<PathBuf>,
    /// Also write the ladder as an HTML page.
    #[arg(long)]
    html: Option<PathBuf>,
}

fn parse_number(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SOFTRNIC_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Called `rdma` (the name `softrnic exec` gives it on PATH), it is that command.
    let mut args = std::env::args();
    let called = args.next().unwrap_or_default();
    let result = if Path::new(&called).file_name() == Some("rdma".as_ref()) {
        exec::rdma(&args.collect::<Vec<_>>())
    } else {
        run(Cli::parse())
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrnic: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Dissect {
            compact,
            roce_only,
            icrc,
            files,
        } => {
            let detail = if compact {
                Detail::Compact
            } else {
                Detail::Full
            };
            dissect_files(
                &files,
                capture::Show {
                    detail,
                    roce_only,
                    icrc,
                },
            )
        }
        Command::Ladder { file, html, mtu } => ladder(&file, html.as_deref(), mtu),
        Command::Incast {
            senders,
            duration,
            seed,
            buffer,
            svg,
        } => incast(&senders, duration, seed, buffer, svg.as_deref()),
        Command::Lesson { name, out } => match name {
            None => {
                for l in softrnic::lesson::LESSONS {
                    println!("{:<18} {}", l.name, l.title);
                }
                Ok(())
            }
            Some(name) => {
                let lesson = softrnic::lesson::LESSONS
                    .iter()
                    .find(|l| l.name == name)
                    .ok_or_else(|| format!("no lesson {name}; `softrnic lesson` lists them"))?;
                let options = softrnic::lesson::lesson_options(lesson.name)
                    .ok_or_else(|| format!("lesson {name} has no run"))?;
                run_simulation(&options, Some(lesson), &out, lesson.name)
            }
        },
        Command::Simulate {
            ops,
            size,
            count,
            drop,
            twice,
            mark,
            loss,
            reorder,
            duplicate,
            mtu,
            seed,
            psn,
            late_receive,
            timeout,
            out,
        } => {
            use softrnic::lesson::{Op, Options, Pick};
            let ops = ops
                .iter()
                .map(|o| {
                    Op::from_name(o).ok_or(format!("--op {o}: send, write, read, cas or fadd"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let picks = |v: &[String]| {
                v.iter()
                    .map(|d| Pick::parse(d))
                    .collect::<Result<Vec<_>, _>>()
            };
            let (drop, twice, mark) = (picks(&drop)?, picks(&twice)?, picks(&mark)?);
            let mtu = softrnic_emu_core::Mtu::from_bytes(mtu)
                .ok_or(format!("--mtu {mtu}: 256, 512, 1024, 2048 or 4096"))?;
            for (name, p) in [
                ("loss", loss),
                ("reorder", reorder),
                ("duplicate", duplicate),
            ] {
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!("--{name} {p}: a probability, from 0 to 1"));
                }
            }
            if psn > 0xff_ffff {
                return Err(format!("--psn {psn:#x}: PSNs are 24 bits"));
            }
            let options = Options {
                ops,
                size,
                count,
                mtu,
                seed,
                drop,
                twice,
                mark,
                faults: softrnic_link::faults::Faults {
                    loss,
                    reorder,
                    duplicate,
                    corrupt: 0.0,
                },
                first_psn: psn,
                late_receive_us: late_receive,
                timeout,
            };
            run_simulation(&options, None, &out, "simulation")
        }
        Command::SampleCapture { out } => {
            let file =
                std::fs::File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            capture::write_pcap(&capture::sample_frames(), std::io::BufWriter::new(file))
                .map_err(|e| format!("{}: {e}", out.display()))
        }
        Command::Daemon {
            workers,
            shards,
            sharing,
        } => admin::run_daemon(workers, shards, &sharing),
        Command::Up {
            netdev,
            backend,
            netns,
        } => admin::up(netdev, backend, netns),
        Command::Down { device } => admin::down(&device),
        Command::Status => admin::status(),
        Command::Stat { device } => admin::stat(device),
        Command::Dcqcn { device, set } => admin::dcqcn(&device, &set),
        Command::Exec { no_view, program } => exec::exec(&program, !no_view),
        Command::Rdma { args } => exec::rdma(&args),
        Command::Capture {
            write,
            device,
            count,
        } => admin::capture(&write, device.as_deref(), count),
        Command::Fuzz(args) => fuzz(args),
    }
}

/// Dissects each file in turn, each under its name when there are several; a file that cannot
/// be read, or is damaged part way, is said so and the rest are still shown.
fn dissect_files(files: &[PathBuf], show: capture::Show) -> Result<(), String> {
    use std::io::{Read, Write};
    let mut failed = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let name = if path.as_os_str() == "-" {
            "standard input".to_string()
        } else {
            path.display().to_string()
        };
        let mut stdout = std::io::stdout().lock();
        if files.len() > 1 {
            let gap = if i > 0 { "\n" } else { "" };
            if let Err(e) = writeln!(stdout, "{gap}==> {name} <==") {
                return quiet_pipe(e);
            }
        }
        let bytes = if path.as_os_str() == "-" {
            let mut b = Vec::new();
            std::io::stdin().read_to_end(&mut b).map(|_| b)
        } else {
            std::fs::read(path)
        };
        let c = match bytes
            .map_err(|e| e.to_string())
            .and_then(|b| capture::read_capture(&b).map_err(|e| e.to_string()))
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("softrnic: {name}: {e}");
                failed.push(name);
                continue;
            }
        };
        if let Err(e) = capture::dissect_frames(&c.frames, show, &mut stdout) {
            return quiet_pipe(e);
        }
        if let Some(d) = c.damage {
            let _ = stdout.flush();
            eprintln!(
                "softrnic: {name}: {d}; the {} frames before it are shown",
                c.frames.len()
            );
            failed.push(name);
        }
    }
    match failed.len() {
        0 => Ok(()),
        _ => Err(format!("could not read all of {}", failed.join(", "))),
    }
}

/// A reader that closed the pipe (`| head`) has seen what it wanted.
fn incast(
    senders: &[usize],
    duration_us: u64,
    seed: u64,
    buffer_kib: u64,
    svg: Option<&std::path::Path>,
) -> Result<(), String> {
    use softrnic::incast::{self, Setup};
    let senders = if senders.is_empty() {
        &[8, 32][..]
    } else {
        senders
    };
    let mut runs = Vec::new();
    for &n in senders {
        for (dcqcn, pfc) in [(false, false), (true, false), (false, true), (true, true)] {
            let setup = Setup {
                senders: n,
                dcqcn,
                pfc,
                duration_us,
                seed,
                buffer: buffer_kib * 1024,
            };
            runs.push(incast::run(setup)?);
        }
    }
    print!("{}", incast::table(&runs));
    if let Some(path) = svg {
        std::fs::write(path, incast::svg(&runs)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn quiet_pipe(e: std::io::Error) -> Result<(), String> {
    match e.kind() {
        std::io::ErrorKind::BrokenPipe => Ok(()),
        _ => Err(e.to_string()),
    }
}

/// `softrnic ladder`: the text ladder of a capture, and the HTML page if asked.
fn ladder(
    file: &std::path::Path,
    html: Option<&std::path::Path>,
    mtu: Option<usize>,
) -> Result<(), String> {
    use std::io::Read;
    let name = file.display().to_string();
    let bytes = if name == "-" {
        let mut b = Vec::new();
        std::io::stdin().read_to_end(&mut b).map(|_| b)
    } else {
        std::fs::read(file)
    }
    .map_err(|e| format!("{name}: {e}"))?;
    let c = capture::read_capture(&bytes).map_err(|e| format!("{name}: {e}"))?;
    let known = softrnic::conversation::Known {
        mtu,
        complete: false,
    };
    let analysis = softrnic::conversation::analyse(&c.frames, known);
    print!("{}", softrnic::ladder::text(&analysis));
    if let Some(path) = html {
        std::fs::write(path, softrnic::ladder::html(&analysis, &name))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    match c.damage {
        Some(d) => Err(format!(
            "{name}: {d}; the ladder shows the frames before it"
        )),
        None => Ok(()),
    }
}

/// Runs a lesson or a simulation, prints its report, and writes its capture (and ladder page).
fn run_simulation(
    options: &softrnic::lesson::Options,
    lesson: Option<&softrnic::lesson::Lesson>,
    out: &RunOutput,
    name: &str,
) -> Result<(), String> {
    let outcome = softrnic::lesson::simulate(options)?;
    print!("{}", softrnic::lesson::report(&outcome, lesson));
    let path = out
        .write
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{name}.pcapng")));
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    capture::write_pcapng(&outcome.frames, std::io::BufWriter::new(file))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    println!(
        "Capture: {} ({} frames)",
        path.display(),
        outcome.frames.len()
    );
    if let Some(html) = &out.html {
        std::fs::write(html, softrnic::lesson::page(&outcome, name))
            .map_err(|e| format!("{}: {e}", html.display()))?;
        println!("Ladder page: {}", html.display());
    }
    match outcome.data_ok {
        true => Ok(()),
        false => Err(format!("the data did not land as sent: {}", outcome.data)),
    }
}
