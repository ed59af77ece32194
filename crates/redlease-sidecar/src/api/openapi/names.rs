//! The rule every name follows (resource, owner, actor, reason, prefix), as the document's
//! `pattern`: one or more characters, none a control character, a format character or a line
//! separator. The class is computed from the engine's own checks (`keys`), so it cannot
//! drift from them. Only the Basic Multilingual Plane is listed (the escapes every regular
//! expression dialect reads); the few format characters above it (tags, musical symbol
//! formatting) are refused all the same, as the descriptions say.

use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{OpenApi, RefOr};
use utoipa::Modify;

use crate::keys::is_invisible_format;

/// Path and query parameters that are names.
const NAMED_PARAMETERS: [&str; 3] = ["resource", "prefix", "after"];
/// Body fields that are names: (schema, property).
const NAMED_FIELDS: [(&str, &str); 4] = [
    ("AcquireBody", "owner"),
    ("CampaignBody", "owner"),
    ("ForceReleaseBody", "actor"),
    ("ForceReleaseBody", "reason"),
];

/// Puts [`name_pattern`] on every name of the document.
pub(super) struct Names;

impl Modify for Names {
    fn modify(&self, openapi: &mut OpenApi) {
        let pattern = name_pattern();
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.get, &mut item.post, &mut item.delete];
            let parameters = operations
                .into_iter()
                .flatten()
                .flat_map(|operation| operation.parameters.iter_mut().flatten());
            for parameter in parameters {
                let named = NAMED_PARAMETERS.contains(&parameter.name.as_str());
                let place = matches!(
                    parameter.parameter_in,
                    ParameterIn::Path | ParameterIn::Query
                );
                if let (true, true, Some(RefOr::T(Schema::Object(schema)))) =
                    (named, place, &mut parameter.schema)
                {
                    schema.pattern = Some(pattern.clone());
                    schema.min_length = Some(1);
                }
            }
        }
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for (name, field) in NAMED_FIELDS {
            let Some(RefOr::T(Schema::Object(body))) = components.schemas.get_mut(name) else {
                continue;
            };
            if let Some(RefOr::T(Schema::Object(property))) = body.properties.get_mut(field) {
                property.pattern = Some(pattern.clone());
            }
        }
    }
}

/// `^[^…]+$`, the class listing every character of the Basic Multilingual Plane that a name
/// may not hold, as ranges of `\uXXXX` escapes.
pub(super) fn name_pattern() -> String {
    let refused = |c: char| c.is_control() || is_invisible_format(c);
    let mut class = String::new();
    let mut run: Option<(u32, u32)> = None;
    let bmp = (0..=0xFFFF_u32).filter_map(char::from_u32);
    for c in bmp.filter(|c| refused(*c)) {
        let code = u32::from(c);
        run = match run {
            Some((first, last)) if last + 1 == code => Some((first, code)),
            Some(done) => {
                push_range(&mut class, done);
                Some((code, code))
            }
            None => Some((code, code)),
        };
    }
    if let Some(done) = run {
        push_range(&mut class, done);
    }
    format!("^[^{class}]+$")
}

fn push_range(class: &mut String, (first, last): (u32, u32)) {
    class.push_str(&format!("\\u{first:04x}"));
    if last > first {
        class.push_str(&format!("-\\u{last:04x}"));
    }
}
