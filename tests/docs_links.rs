//! The documentation holds together: every relative link in README.md, BENCHMARKS.md and
//! docs/*.md points to a file that exists and, with `#anchor`, to a heading in it (GitHub's
//! anchors); and the README stays short enough to read in five minutes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Pages that other work in flight adds (the Python package's page and the server limits);
/// a link to them is accepted while they are missing, never a broken anchor into them.
const PENDING: &[&str] = &["docs/python.md", "docs/server-limits.md"];

/// The README's length limit, in lines (issue 30).
const README_LINES: usize = 250;

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![
        Path::new(ROOT).join("README.md"),
        Path::new(ROOT).join("BENCHMARKS.md"),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces turned into hyphens; a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for line in prose(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        anchors.push(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// The targets of the inline links `[text](target)` of `text`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        // Inline code spans may hold brackets: drop them first.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    targets
}

#[test]
fn relative_links_and_anchors_resolve() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        let dir = page.parent().expect("dir");
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            let name = page
                .strip_prefix(ROOT)
                .unwrap_or(&page)
                .display()
                .to_string();
            let Ok(file) = file.canonicalize() else {
                let relative = dir
                    .join(path)
                    .strip_prefix(ROOT)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                let relative = relative.replace("docs/../", "");
                if !(PENDING.contains(&relative.as_str()) && anchor.is_none()) {
                    broken.push(format!("{name}: {target}: no such file"));
                }
                continue;
            };
            if let Some(anchor) = anchor {
                let target_text = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&target_text).iter().any(|a| a == anchor) {
                    broken.push(format!("{name}: {target}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_github() {
    let text = "# Title\n## The owner's configuration file\n```\n# not a heading\n```\n## Group keys: public declaration or private selection\n## Title\n";
    assert_eq!(
        anchors(text),
        [
            "title",
            "the-owners-configuration-file",
            "group-keys-public-declaration-or-private-selection",
            "title-1"
        ]
    );
}

#[test]
fn readme_is_short() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README");
    let lines = readme.lines().count();
    assert!(
        lines < README_LINES,
        "README.md has {lines} lines; keep it under {README_LINES} and move reference material to docs/"
    );
}
