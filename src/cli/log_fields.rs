//! The fields of text log lines, written so that no value can pass for another field or
//! another line: a value with a space, `=`, a quote, a backslash, a control or a format
//! character is quoted and escaped as a Rust string literal; the message keeps its words but
//! has its control and format characters escaped. JSON logs need none of this, but write the
//! lists some lines carry as arrays.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::keys::is_invisible_format;

/// The [`FormatFields`] of `--log-format text`.
#[derive(Debug, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl EscapingVisitor<'_> {
    fn write(&mut self, field: &Field, text: &str) {
        if self.result.is_err() {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = if field.name() == "message" {
            write!(self.writer, "{separator}{}", escaped_message(text))
        } else if needs_quotes(text) {
            write!(self.writer, "{separator}{}={text:?}", field.name())
        } else {
            write!(self.writer, "{separator}{}={text}", field.name())
        };
    }
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = String::new();
        // Writing into a String only fails if the value's own Debug fails; keep what it wrote.
        let _ = write!(text, "{value:?}");
        self.write(field, &text);
    }
}

/// A value that could be read as more than one value, or that hides or moves text.
fn needs_quotes(text: &str) -> bool {
    text.is_empty()
        || text
            .chars()
            .any(|c| matches!(c, ' ' | '=' | '"' | '\\') || hides_text(c))
}

fn hides_text(c: char) -> bool {
    c.is_control() || c.is_whitespace() || is_invisible_format(c)
}

/// The message with each control or format character written as its escape (`\n`,
/// `\u{202e}`); spaces stay.
fn escaped_message(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if c != ' ' && hides_text(c) {
            shown.extend(c.escape_debug());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// Fields whose value is a JSON array written as text (the engine's force release line:
/// `removed`, `answers`): the JSON log format writes them as arrays.
const LIST_FIELDS: [&str; 2] = ["removed", "answers"];

/// The [`FormatEvent`] of `--log-format json`: tracing-subscriber's JSON line, with each of
/// [`LIST_FIELDS`] that holds a JSON array turned from a string into that array (its JSON
/// format writes every field as a string or a number).
#[derive(Debug)]
pub struct ListsAsArrays<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for ListsAsArrays<F>
where
    F: FormatEvent<S, N>,
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
    N: for<'writer> FormatFields<'writer> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let has_list = (event.metadata().fields().iter()).any(|f| LIST_FIELDS.contains(&f.name()));
        if !has_list {
            return self.0.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        writer.write_str(&lists_as_arrays(&line).unwrap_or(line))
    }
}

/// `line` (one JSON object and a newline) with each of [`LIST_FIELDS`] holding a string that
/// parses as a JSON array replaced by the array, in place (the other fields keep their
/// order); `None` when nothing changes.
fn lists_as_arrays(line: &str) -> Option<String> {
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line.trim_end()).ok()?;
    let mut fixed = line.to_string();
    let mut changed = false;
    for name in LIST_FIELDS {
        let Some(serde_json::Value::String(text)) = object.get(name) else {
            continue;
        };
        let Ok(serde_json::Value::Array(_)) = serde_json::from_str(text) else {
            continue;
        };
        // The line was written by serde_json: the field reads exactly as it writes it.
        let written = serde_json::to_string(&serde_json::Value::String(text.clone())).ok()?;
        let field = format!("\"{name}\":{written}");
        if fixed.contains(&field) {
            fixed = fixed.replacen(&field, &format!("\"{name}\":{text}"), 1);
            changed = true;
        }
    }
    changed.then_some(fixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value that carries another field, a line break or a bidi override is quoted with its
    /// characters escaped; plain values and the message's spaces stay as they are.
    #[test]
    fn values_cannot_forge_fields_or_lines() {
        assert!(!needs_quotes("billing-close"));
        assert!(!needs_quotes("redis://127.0.0.1:6379"));
        for forged in [
            "x owner=root",
            "a\nb",
            "evil\u{202e}txt",
            "a\u{2028}b",
            "\"",
            "",
            "tab\tx",
        ] {
            assert!(needs_quotes(forged), "{forged:?}");
        }
        assert_eq!(format!("{:?}", "x owner=root"), "\"x owner=root\"");
        assert_eq!(format!("{:?}", "evil\u{202e}txt"), "\"evil\\u{202e}txt\"");
        assert_eq!(escaped_message("lease lost\nFAKE"), "lease lost\\nFAKE");
        assert_eq!(escaped_message("a\u{202e}b c"), "a\\u{202e}b c");
    }

    /// A list field holding a JSON array becomes that array; other fields, and a list field
    /// that holds no array, stay strings.
    #[test]
    fn json_lines_carry_their_lists_as_arrays() {
        let line = r#"{"timestamp":"t","removed":"[\"a|x, \\\"y\\\"\"]","answers":"[\"deleted\"]","resource":"[1]"}"#;
        let fixed = lists_as_arrays(&format!("{line}\n")).unwrap();
        assert!(fixed.ends_with('\n'));
        assert!(
            fixed.starts_with(r#"{"timestamp":"t","removed":["#),
            "{fixed}"
        );
        let value: serde_json::Value = serde_json::from_str(&fixed).unwrap();
        assert_eq!(value["removed"], serde_json::json!(["a|x, \"y\""]));
        assert_eq!(value["answers"], serde_json::json!(["deleted"]));
        assert_eq!(value["resource"], "[1]");
        assert_eq!(lists_as_arrays(r#"{"removed":"not a list"}"#), None);
    }
}
