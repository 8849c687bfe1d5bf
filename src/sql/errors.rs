//! Errors as users read them: one line naming the table and location concerned, without
//! DataFusion's generic prefixes (`dpsql`, `dp-server`, the owner's configuration checks).

use datafusion::error::DataFusionError;

/// An error creating table `table` from `location`; [`one_line_error`] prefixes it with
/// `table NAME (LOCATION): `.
#[derive(Debug)]
pub struct TableError {
    pub table: String,
    pub location: String,
    pub source: DataFusionError,
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "table {} ({}): {}",
            self.table, self.location, self.source
        )
    }
}

impl std::error::Error for TableError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The hint for an object store refusing its credentials.
#[cfg(feature = "cli")]
fn credentials_hint(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    match e.downcast_ref::<object_store::Error>() {
        Some(
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. },
        ) => Some(
            " (check the credentials, e.g. AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and \
             their permissions)",
        ),
        _ => None,
    }
}

/// Without the `cli` feature no object store is opened by this crate.
#[cfg(not(feature = "cli"))]
fn credentials_hint(_: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    None
}

/// An error as one line for a data engineer: the innermost DataFusion message, without
/// DataFusion's generic prefixes or backtrace, with a server's XML error document reduced to
/// its code and message, every line joined, and the table and location it concerns in front.
pub fn one_line_error(error: &DataFusionError) -> String {
    let mut prefix = String::new();
    let mut hint = "";
    let mut level: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = level {
        if let Some(table) = e.downcast_ref::<TableError>() {
            prefix.push_str(&format!("table {} ({}): ", table.table, table.location));
        }
        hint = credentials_hint(e).unwrap_or(hint);
        level = e.source();
    }
    let text = match error.find_root() {
        DataFusionError::Plan(message)
        | DataFusionError::Configuration(message)
        | DataFusionError::Execution(message) => message.clone(),
        root => root.to_string(),
    };
    let text = text
        .split(DataFusionError::BACK_TRACE_SEP)
        .next()
        .unwrap_or_default();
    let text = compact_error_document(text);
    let line = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    // Coercion failures wrap our own message in DataFusion's: keep the innermost one.
    let inner = line
        .rsplit("Error during planning: ")
        .next()
        .unwrap_or(&line);
    let inner = inner
        .split(". No function matches")
        .next()
        .unwrap_or(inner)
        .trim_end_matches([':', ' ']);
    format!("{prefix}{inner}{hint}")
}

/// An object store's error response (`<?xml ...?><Error><Code>NoSuchBucket</Code><Message>The
/// specified bucket does not exist</Message>...</Error>`, as S3 and compatible servers send)
/// reduced to `NoSuchBucket: The specified bucket does not exist`.
fn compact_error_document(text: &str) -> String {
    let Some(start) = text.find("<?xml").or_else(|| text.find("<Error>")) else {
        return text.to_string();
    };
    let document = &text[start..];
    let element = |name: &str| {
        let open = format!("<{name}>");
        let from = document.find(&open)? + open.len();
        let to = from + document[from..].find(&format!("</{name}>"))?;
        let value = document[from..to]
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
        Some(value.trim().to_string()).filter(|v| !v.is_empty())
    };
    let summary = [element("Code"), element("Message")]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(": ");
    let end = document
        .find("</Error>")
        .map_or(text.len(), |i| start + i + "</Error>".len());
    let before = text[..start].trim_end();
    let after = &text[end..];
    match (before.is_empty(), summary.is_empty()) {
        (_, true) => format!("{before}{after}"),
        (true, false) => format!("{summary}{after}"),
        (false, false) => format!("{before} {summary}{after}"),
    }
}
