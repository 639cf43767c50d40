//! Pages as a person sees them: headless Chromium (Debian's `chromium`) builds a page's DOM
//! and takes its screenshot.
// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Chromium on `page` in a window of `size` ("W,H"), with `args`.
fn chromium(page: &Path, size: &str, args: &[&str]) -> Output {
    Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu"])
        .arg(format!("--window-size={size}"))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium (Debian's chromium package)")
}

/// The DOM Chromium builds from `page`.
pub fn dom(page: &Path, size: &str) -> String {
    String::from_utf8(chromium(page, size, &["--dump-dom"]).stdout).unwrap()
}

/// A screenshot of `page` into `shot`: a PNG of at least `min_bytes` (something drawn).
pub fn screenshot(page: &Path, size: &str, shot: &Path, min_bytes: usize) {
    let arg = format!("--screenshot={}", shot.display());
    assert!(chromium(page, size, &[&arg]).status.success());
    let png = std::fs::read(shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > min_bytes,
        "a screenshot with something in it: {}",
        shot.display()
    );
}
