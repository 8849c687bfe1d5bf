//! Writing to the terminal the way the shell tools people know do it.
//!
//! - Output goes through [`print_out`]: when the reader goes away early (`dpsql ... | head`),
//!   the process ends quietly with status 0 instead of panicking with a backtrace, as Rust's
//!   `println!` does on a broken pipe. (The conventional alternative, dying of `SIGPIPE`, would
//!   need the signal's default action back; that would also kill the process on a write to a
//!   closed network socket, which object stores and servers must survive.)
//! - Messages on stderr go through [`note`], which never panics: a closed stderr
//!   (`2>&-`, or `2>&1 | head`) loses the message and nothing else.
//! - Progress for long work ([`Progress`]) appears only when stderr is a terminal: never in
//!   pipes, files, CI logs or tests.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Writes `text` to stdout and flushes it. A reader that has gone away (a broken pipe) ends
/// the process quietly with status 0: everything it wanted has been written. Any other write
/// error is returned, as a message naming stdout.
pub fn print_out(text: &str) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(format!("cannot write to stdout: {e}")),
    }
}

/// [`print_out`] of `line` and a newline.
pub fn print_line(line: &str) -> Result<(), String> {
    let mut text = String::with_capacity(line.len() + 1);
    text.push_str(line);
    text.push('\n');
    print_out(&text)
}

/// [`print_line`] for programs without an error path of their own (the examples): a write
/// error other than a broken pipe is reported on stderr and ends the process with status 1.
pub fn print_line_or_exit(line: &str) {
    if let Err(e) = print_line(line) {
        note(&format!("error: {e}"));
        std::process::exit(1);
    }
}

/// `println!` through [`print_line_or_exit`]: quiet when the reader goes away (`| head`).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::terminal::print_line_or_exit("")
    };
    ($($arg:tt)*) => {
        $crate::cli::terminal::print_line_or_exit(&format!($($arg)*))
    };
}

/// Writes `line` and a newline to stderr, ignoring a failure: a message nobody can read must
/// not turn into a panic.
pub fn note(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
}

/// Whether progress may be drawn: stderr is a terminal.
pub fn progress_enabled() -> bool {
    std::io::stderr().is_terminal()
}

/// A one-line progress display for long work, redrawn in place on stderr (`label: message,
/// 12 s`) and erased when the work ends or the value is dropped. It draws nothing unless
/// stderr is a terminal ([`progress_enabled`]), so pipes, logs and tests never see it.
pub struct Progress {
    label: String,
    start: Instant,
    enabled: bool,
    drawn: bool,
}

impl Progress {
    /// Progress of the work named `label`, timed from now.
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            start: Instant::now(),
            enabled: progress_enabled(),
            drawn: false,
        }
    }

    /// Redraws the line with `message` (what is being done now) and the time elapsed.
    pub fn update(&mut self, message: &str) {
        if !self.enabled {
            return;
        }
        let mut stderr = std::io::stderr().lock();
        // \r and "erase to the end of the line" (ANSI): the line is redrawn in place.
        let _ = write!(
            stderr,
            "\r\x1b[K{}: {message}, {:.0} s",
            self.label,
            self.start.elapsed().as_secs_f64()
        );
        let _ = stderr.flush();
        self.drawn = true;
    }

    /// The time since the work started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Erases the line (nothing to do when nothing was drawn).
    pub fn finish(&mut self) {
        if self.drawn {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
