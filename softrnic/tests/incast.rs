//! Incast through one switch port in the simulator: what DCQCN and PFC do, as figures, the
//! plot in the docs (current, and as a person sees it), and the command.

mod browser;

use std::path::{Path, PathBuf};
use std::process::Command;

use softrnic::incast::{self, Figures, Setup};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `path` holds `want`; with `SOFTRNIC_BLESS=1` it is written instead.
fn check_current(path: &Path, want: &str) {
    if std::env::var_os("SOFTRNIC_BLESS").is_some() {
        std::fs::write(path, want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale: run with SOFTRNIC_BLESS=1",
        path.display()
    );
}

/// The docs' block after `<!-- incast: figures -->` (a ```text fence) set to `table`.
fn with_table(doc: &str, table: &str) -> String {
    let marker = doc.find("<!-- incast: figures -->").expect("the marker");
    let body = marker + doc[marker..].find("```text\n").expect("a fence") + "```text\n".len();
    let end = body + doc[body..].find("```").expect("the closing fence");
    format!("{}{table}{}", &doc[..body], &doc[end..])
}

#[test]
fn incast_with_and_without_dcqcn_and_pfc() {
    let runs: Vec<Figures> = [8, 32]
        .into_iter()
        .flat_map(|senders| {
            [(false, false), (true, false), (false, true), (true, true)].map(|(dcqcn, pfc)| {
                incast::run(Setup {
                    senders,
                    dcqcn,
                    pfc,
                    ..Setup::default()
                })
                .expect("the run")
            })
        })
        .collect();
    let table = incast::table(&runs);
    let find = |senders: usize, dcqcn: bool, pfc: bool| {
        runs.iter()
            .find(|f| f.setup.senders == senders && f.setup.dcqcn == dcqcn && f.setup.pfc == pfc)
            .unwrap()
    };
    for f in &runs {
        // Senders without DCQCN send Not-ECT: nothing to mark, no CNPs. With it, the marks
        // come back as CNPs.
        if f.setup.dcqcn {
            assert!(f.marked > 0 && f.cnps > 0, "{table}");
        } else {
            assert_eq!((f.marked, f.cnps), (0, 0), "{table}");
        }
        // PFC loses nothing, and its headroom holds what was on the wire.
        if f.setup.pfc {
            assert_eq!(f.dropped, 0, "{table}");
            assert!(f.peak_queue <= f.setup.buffer);
        }
        assert_eq!(f.failed, 0, "no QP ran out of retries: {table}");
    }
    // 8 senders: DCQCN keeps the queue lower, nothing dropped either way.
    assert!(find(8, true, false).peak_queue < find(8, false, false).peak_queue * 9 / 10);
    assert_eq!(find(8, true, false).dropped, 0, "{table}");
    // 32 senders, no PFC and no DCQCN: drops, go-back-N and one sender taking the link.
    let storm = find(32, false, false);
    assert!(
        storm.dropped > 1000 && storm.retransmitted > storm.dropped,
        "{table}"
    );
    assert!(storm.jain < 0.2, "{table}");
    // With both, nothing lost and the senders share.
    let both = find(32, true, true);
    assert!(both.jain > 0.9 && both.goodput > 0.5, "{table}");

    // The docs show this run: its table and its plot.
    let doc_path = root().join("docs/congestion.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    check_current(&doc_path, &with_table(&doc, &table));
    let svg = incast::svg(&runs);
    let svg_path = root().join("docs/incast.svg");
    check_current(&svg_path, &svg);

    // The plot as a person sees it: Chromium renders it, a row of three plots per run.
    let dir = std::env::temp_dir().join(format!("softrnic-incast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dom = browser::dom(&svg_path, "1300,1450");
    assert_eq!(dom.matches("<g class=\"run\"").count(), runs.len(), "{dom}");
    assert_eq!(dom.matches("<rect class=\"axes\"").count(), 3 * runs.len());
    let lines = runs.iter().map(|f| 2 + f.setup.senders).sum::<usize>();
    assert_eq!(dom.matches("<polyline").count(), lines);
    assert!(dom.contains("32 senders, DCQCN on, PFC on"));
    browser::screenshot(&svg_path, "1300,1450", &dir.join("incast.png"), 50_000);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_command_prints_the_figures_and_writes_the_plot() {
    let svg = std::env::temp_dir().join(format!("softrnic-incast-{}.svg", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_softrnic"))
        .args(["incast", "--senders", "2", "--duration", "300", "--svg"])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("senders  DCQCN  PFC"), "{text}");
    assert_eq!(text.lines().count(), 5, "a heading and four runs: {text}");
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(plot.matches("<g class=\"run\"").count(), 4);
    std::fs::remove_file(&svg).unwrap();
    // Bad input is an error, not a panic.
    let out = Command::new(env!("CARGO_BIN_EXE_softrnic"))
        .args(["incast", "--senders", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("senders: 1 to 200"));
}
