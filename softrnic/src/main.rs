//! The `softrnic` command.

use clap::{Parser, Subcommand};
use softrnic::capture::{self, Detail};

mod admin;
mod exec;
mod view;
use std::path::PathBuf;
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
        /// Capture files (pcap or pcapng; Ethernet or Linux cooked from `tcpdump -i any`);
        /// `-` reads standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
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

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SOFTRNIC_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(Cli::parse()) {
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
            files,
        } => {
            let detail = if compact {
                Detail::Compact
            } else {
                Detail::Full
            };
            dissect_files(&files, capture::Show { detail, roce_only })
        }
        Command::SampleCapture { out } => {
            let file =
                std::fs::File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            capture::write_pcap(&capture::sample_frames(), std::io::BufWriter::new(file))
                .map_err(|e| format!("{}: {e}", out.display()))
        }
        Command::Daemon { workers } => admin::run_daemon(workers),
        Command::Up {
            netdev,
            backend,
            netns,
        } => admin::up(netdev, backend, netns),
        Command::Down { device } => admin::down(&device),
        Command::Status => admin::status(),
        Command::Stat { device } => admin::stat(device),
        Command::Exec { no_view, program } => exec::exec(&program, !no_view),
        Command::Capture {
            write,
            device,
            count,
        } => admin::capture(&write, device.as_deref(), count),
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
fn quiet_pipe(e: std::io::Error) -> Result<(), String> {
    match e.kind() {
        std::io::ErrorKind::BrokenPipe => Ok(()),
        _ => Err(e.to_string()),
    }
}
