//! `dpsql` as the shell tools people know behave, run as a real process: output into a pipe
//! whose reader leaves early (`dpsql ... | head`) ends it quietly with status 0 in every output
//! format; no progress drawing when stderr is not a terminal; and `--plot FILE.svg`, a forest
//! plot of the result's interval column that parses as SVG with one marker per group, or a
//! one-line error naming `--plot` when there is nothing to draw.

mod common;

use quick_xml::events::Event;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const VISITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/visits.csv");
const DPSQL: &str = env!("CARGO_BIN_EXE_dpsql");

/// A query with far more output than a pipe holds (64 KiB on Linux), so that dpsql is still
/// writing when the reader goes away.
const MANY_ROWS: &str = "SELECT value, value * 2 AS twice FROM generate_series(1, 200000)";

/// Runs dpsql with `args`, reads the first kilobyte of its stdout (JSON output is one line),
/// closes the pipe and returns the exit status and stderr.
fn read_then_close(args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(DPSQL)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dpsql");
    let mut reader = child.stdout.take().expect("stdout");
    let mut start = [0u8; 1024];
    reader.read_exact(&mut start).expect("the first kilobyte");
    drop(reader);
    let output = child.wait_with_output().expect("wait for dpsql");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_reader_that_leaves_early_ends_dpsql_quietly() {
    for format in ["table", "csv", "json"] {
        let (status, stderr) = read_then_close(&["--format", format, "-c", MANY_ROWS]);
        assert_eq!(
            status.code(),
            Some(0),
            "--format {format}: status {status}; stderr:\n{stderr}"
        );
        for noise in ["panicked", "Broken pipe", "backtrace", "error"] {
            assert!(
                !stderr.contains(noise),
                "--format {format}: {noise:?} on stderr:\n{stderr}"
            );
        }
    }
}

#[test]
fn dpsql_piped_into_head_through_a_shell() {
    // As a user types it; pipefail makes the pipeline's status dpsql's own.
    let script = format!("set -o pipefail; '{DPSQL}' -c '{MANY_ROWS}' | head -n 2 >/dev/null");
    let output = Command::new("bash")
        .args(["-c", &script])
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run bash");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}: {stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A query running for well over dpsql's one-second spinner delay in a debug build (200M rows
/// took 0.99 s once, on an idle machine: five times that).
const SLOW: &str = "SELECT sum(value % 7) FROM generate_series(1, 1000000000)";

#[test]
fn progress_only_on_a_terminal() {
    // In a pipe: the result and its row count, nothing drawn.
    let output = Command::new(DPSQL)
        .args(["-c", SLOW])
        .stdin(Stdio::null())
        .output()
        .expect("run dpsql");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        !stderr.contains('\r') && !stderr.contains('\x1b') && !stderr.contains("running"),
        "progress drawn into a pipe: {stderr:?}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");

    // On a terminal (a pseudo-terminal from util-linux's `script`): the spinner shows, so the
    // query above was long enough for the pipe case to mean something.
    let script = format!("'{DPSQL}' -c '{SLOW}'");
    match Command::new("script")
        .args(["-qec", &script, "/dev/null"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stdout);
            assert!(output.status.success(), "{text}");
            assert!(
                text.contains("dpsql: ") && text.contains("running") && text.contains('\r'),
                "no progress on a terminal: {text:?}"
            );
        }
        Err(e) => eprintln!("progress on a terminal not checked: cannot run script: {e}"),
    }
}

/// A fresh directory under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        Self(common::scratch(name))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a test reads back from an SVG document.
#[derive(Default, Debug)]
struct Svg {
    /// Elements by their `class` attribute.
    classes: Vec<String>,
    /// The text of every text node, in order.
    texts: Vec<String>,
    root: String,
}

/// Parses `text` as XML (failing the test when it is not well-formed) and collects the
/// classes of its elements and its texts.
fn parse_svg(text: &str) -> Svg {
    let mut reader = quick_xml::Reader::from_str(text);
    let mut svg = Svg::default();
    let mut depth = 0i64;
    loop {
        let event = reader.read_event().expect("well-formed XML");
        if let Event::Start(element) | Event::Empty(element) = &event {
            if svg.root.is_empty() {
                svg.root = String::from_utf8_lossy(element.name().as_ref()).into_owned();
            }
            if let Some(class) = element.try_get_attribute("class").expect("attribute") {
                svg.classes
                    .push(String::from_utf8_lossy(&class.value).into_owned());
            }
        }
        match event {
            Event::Start(_) => depth += 1,
            Event::End(_) => depth -= 1,
            Event::Text(text) => {
                let text = text.decode().expect("text").trim().to_string();
                if !text.is_empty() {
                    svg.texts.push(text);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(depth, 0, "unbalanced elements");
    svg
}

fn plot(statistic: &str, dir: &TempDir) -> (String, String) {
    let path = dir.0.join(format!("{statistic}.svg"));
    let output = Command::new(DPSQL)
        .args([
            "--table",
            &format!("visits={VISITS}"),
            "--plot",
            path.to_str().unwrap(),
            "-c",
            "SET dp.public_groups = 'assert'",
            "-c",
            &format!(
                "SELECT region, dp_{statistic}_ci(outcome, exposed, 0.5) AS ci \
                 FROM visits GROUP BY region ORDER BY region"
            ),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run dpsql");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    (std::fs::read_to_string(&path).expect("the plot"), stderr)
}

#[test]
fn forest_plot_of_each_interval() {
    let dir = TempDir::new("forest");
    for (statistic, title, scale, reference) in [
        ("rr", "Relative risk", "log", "1"),
        ("or", "Odds ratio", "log", "1"),
        ("rd", "Risk difference", "linear", "0"),
    ] {
        let (text, stderr) = plot(statistic, &dir);
        assert!(stderr.contains("wrote the forest plot"), "{stderr}");
        let svg = parse_svg(&text);
        assert_eq!(svg.root, "svg", "{statistic}");
        let count = |class: &str| svg.classes.iter().filter(|c| *c == class).count();
        // The bundled data has four regions: one estimate and one interval each.
        assert_eq!(count("estimate"), 4, "{statistic}: {:?}", svg.classes);
        assert_eq!(count("interval"), 4, "{statistic}");
        assert_eq!(count("reference"), 1, "{statistic}");
        for region in ["east", "north", "south", "west"] {
            assert!(svg.texts.iter().any(|t| t == region), "{region}: {svg:?}");
        }
        assert!(
            svg.texts.iter().any(|t| t.starts_with(title)),
            "{title}: {:?}",
            svg.texts
        );
        assert!(
            svg.texts
                .iter()
                .any(|t| t.contains(&format!("({scale} scale)"))),
            "{scale}: {:?}",
            svg.texts
        );
        assert!(
            svg.texts.iter().any(|t| t == reference),
            "tick at the reference {reference}: {:?}",
            svg.texts
        );
        // One DP call over four disjoint regions at ε = 0.5: the query is charged 0.5 once
        // (parallel composition), and the caption says so.
        assert!(
            svg.texts
                .iter()
                .any(|t| t.starts_with("ε spent: 0.5 ") && t.ends_with("; 4 groups")),
            "caption: {:?}",
            svg.texts
        );
    }
}

#[test]
fn plot_without_an_interval_is_a_clear_error() {
    let dir = TempDir::new("none");
    let path = dir.0.join("none.svg");
    let output = Command::new(DPSQL)
        .args([
            "--plot",
            path.to_str().unwrap(),
            "--format",
            "csv",
            "-c",
            "SELECT 1 AS one",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run dpsql");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("error: --plot") && lines[0].contains("dp_rr_ci"),
        "{stderr}"
    );
    assert!(!path.exists(), "a plot was written");

    // --plot draws the result of statements: refused, naming it, without any.
    let output = Command::new(DPSQL)
        .args(["--plot", path.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .expect("run dpsql");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("--plot FILE.svg"), "{stderr}");
}

/// `\functions` lists every DP aggregate of the registry with its signature and the summary of
/// its documentation, from `-c` and in
/// the interactive shell (here fed through a pipe), so a statistic added to `STATISTICS`
/// appears without touching dpsql; an unknown meta-command is a one-line error.
#[test]
fn functions_meta_command_lists_the_registry() {
    use datafusion_dp::sql::functions::aggregate::STATISTICS;
    use std::io::Write;
    let check = |stdout: &str, how: &str| {
        for statistic in STATISTICS {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.trim_start().starts_with(&statistic.signature())),
                "{how}: {} missing from:\n{stdout}",
                statistic.name()
            );
            assert!(
                stdout.contains(statistic.doc().summary),
                "{how}: {}'s summary missing from:\n{stdout}",
                statistic.name()
            );
        }
        assert!(
            stdout.contains("dp_sum(expr, lower, upper, epsilon"),
            "{how}: {stdout}"
        );
    };
    let output = Command::new(DPSQL)
        .args(["-c", "\\functions"])
        .stdin(Stdio::null())
        .output()
        .expect("run dpsql");
    assert!(output.status.success(), "{output:?}");
    check(&String::from_utf8_lossy(&output.stdout), "-c");

    let mut child = Command::new(DPSQL)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dpsql");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"\\df\n\\nonsense\n\\q\n")
        .expect("write to dpsql");
    let output = child.wait_with_output().expect("wait for dpsql");
    assert!(output.status.success(), "{output:?}");
    check(&String::from_utf8_lossy(&output.stdout), "shell");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown meta-command '\\nonsense'"),
        "{stderr}"
    );

    let output = Command::new(DPSQL)
        .args(["-c", "\\nonsense"])
        .stdin(Stdio::null())
        .output()
        .expect("run dpsql");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
}
