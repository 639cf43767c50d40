//! The `softrnic` command.

use clap::{Parser, Subcommand};
use softrnic::capture::{self, Detail};
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
        /// Capture files (pcap or pcapng, Ethernet link type).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write the sample capture (every opcode, IPv4 and IPv6, NAKs, VLAN, ECN) as pcap.
    SampleCapture {
        /// Where to write it.
        out: PathBuf,
    },
}

fn main() -> ExitCode {
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
        Command::Dissect { compact, files } => {
            let detail = if compact {
                Detail::Compact
            } else {
                Detail::Full
            };
            for path in files {
                let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let frames =
                    capture::read(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
                let stdout = std::io::stdout().lock();
                match capture::dissect_frames(&frames, detail, stdout) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                    other => other.map_err(|e| e.to_string())?,
                }
            }
            Ok(())
        }
        Command::SampleCapture { out } => {
            let file =
                std::fs::File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            capture::write_pcap(&capture::sample_frames(), std::io::BufWriter::new(file))
                .map_err(|e| format!("{}: {e}", out.display()))
        }
    }
}
