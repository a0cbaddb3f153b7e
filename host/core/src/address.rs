//! Binding address templates: `{name}` in an address becomes the text of the
//! envelope's header of that exact name (`bridged/{mqtt.topic}`,
//! `orders.{region}`), which is how a route picks a destination by message
//! content. Shared by every transport whose address is free text.

use ferry_envelope::{Envelope, HeaderValue};

use crate::TransportError;

/// A piece of an address template: text as written, or a `{name}`.
enum Piece<'a> {
    Text(&'a str),
    Name(&'a str),
}

/// The pieces of `template` in order, without allocating (addresses are
/// expanded on every send). A `{` without a closing `}` is text.
fn pieces(template: &str) -> impl Iterator<Item = Piece<'_>> {
    let mut rest = Some(template);
    let mut name = None;
    std::iter::from_fn(move || {
        if let Some(n) = name.take() {
            return Some(Piece::Name(n));
        }
        let r = rest?;
        match r.find('{').and_then(|start| r[start..].find('}').map(|len| (start, len))) {
            Some((start, len)) => {
                name = Some(&r[start + 1..start + len]);
                rest = Some(&r[start + len + 1..]);
                Some(Piece::Text(&r[..start]))
            }
            None => {
                rest = None;
                Some(Piece::Text(r))
            }
        }
    })
}

/// The header names `template` refers to, in order.
pub fn names(template: &str) -> Vec<&str> {
    pieces(template)
        .filter_map(|p| match p {
            Piece::Name(n) => Some(n),
            Piece::Text(_) => None,
        })
        .collect()
}

/// What URL path segments keep as they are: RFC 3986's unreserved
/// characters. Everything else (`/`, `?`, `#`, `%`, spaces, any non-ASCII
/// byte) is percent-encoded.
const SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `value` (a header a publisher set, an id a remote API gave) as exactly
/// one URL path segment or query value, so it can neither climb out of the
/// path it is put in nor start a query or fragment. `.` and `..` would
/// still be read as path steps however they are encoded, and an empty
/// value names nothing: those are refused.
pub fn url_segment(value: &str) -> Result<String, TransportError> {
    if value.is_empty() || value == "." || value == ".." {
        return Err(TransportError::unroutable(format!("{value:?} cannot be one URL path segment")));
    }
    Ok(percent_encoding::utf8_percent_encode(value, SEGMENT).to_string())
}

/// Expands every `{name}` in a URL template, each value encoded as one
/// path segment ([`url_segment`]). The template's own text is kept as
/// written.
pub fn expand_url(template: &str, envelope: &Envelope) -> Result<String, TransportError> {
    expand_with(template, envelope, url_segment)
}

/// Expands every `{name}` in `template`. A missing or non-text header is a
/// permanent failure: retrying cannot make the header appear. A `{` without
/// a closing `}` is kept as it is.
pub fn expand(template: &str, envelope: &Envelope) -> Result<String, TransportError> {
    expand_with(template, envelope, |v| Ok(v.to_owned()))
}

/// `value` as exactly one token of a `.`-separated subject (NATS): not
/// empty, without `.`, whitespace or control characters, and not a
/// wildcard (`*`, `>`), so a publisher's header can neither add tokens
/// nor reach another part of the subject space.
pub fn subject_token(value: &str) -> Result<String, TransportError> {
    if value.is_empty()
        || value == "*"
        || value == ">"
        || value.chars().any(|c| c == '.' || c.is_whitespace() || c.is_control())
    {
        return Err(TransportError::unroutable(format!("{value:?} cannot be one subject token")));
    }
    Ok(value.to_owned())
}

/// Expands a subject template, each value one token ([`subject_token`]).
/// The template's own text is kept as written.
pub fn expand_subject(template: &str, envelope: &Envelope) -> Result<String, TransportError> {
    expand_with(template, envelope, subject_token)
}

/// `value` as exactly one segment of a `:`-separated Redis key: not
/// empty, without `:`, whitespace or control characters, so a publisher's
/// header cannot reach another part of the key space.
pub fn key_segment(value: &str) -> Result<String, TransportError> {
    if value.is_empty() || value.chars().any(|c| c == ':' || c.is_whitespace() || c.is_control()) {
        return Err(TransportError::unroutable(format!("{value:?} cannot be one key segment")));
    }
    Ok(value.to_owned())
}

/// Expands a Redis key template, each value one segment ([`key_segment`]).
pub fn expand_key(template: &str, envelope: &Envelope) -> Result<String, TransportError> {
    expand_with(template, envelope, key_segment)
}

fn expand_with(
    template: &str,
    envelope: &Envelope,
    encode: impl Fn(&str) -> Result<String, TransportError>,
) -> Result<String, TransportError> {
    let mut out = String::with_capacity(template.len());
    for piece in pieces(template) {
        let name = match piece {
            Piece::Text(t) => {
                out.push_str(t);
                continue;
            }
            Piece::Name(name) => name,
        };
        match envelope.headers.get(name) {
            Some(HeaderValue::Text(v)) => out.push_str(&encode(v).map_err(|e| {
                TransportError::unroutable(format!("address template {template:?}: header {name:?}: {}", e.reason))
            })?),
            Some(other) => {
                return Err(TransportError::unroutable(format!(
                    "address template {template:?}: header {name:?} is {}, not text",
                    other.kind()
                )));
            }
            None => {
                return Err(TransportError::unroutable(format!(
                    "address template {template:?}: header {name:?} is missing"
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_value_is_one_token() {
        let mut e = Envelope::new("1", &b""[..]);
        e.set_header("tenant", "acme");
        assert_eq!(expand_subject("orders.{tenant}.new", &e).expect("ok"), "orders.acme.new");
        for hostile in ["a.admin", "*", ">", "", "a b", "x\ny"] {
            e.set_header("tenant", hostile);
            let error = expand_subject("orders.{tenant}", &e).expect_err(hostile);
            assert!(!error.is_transient(), "{hostile:?}");
        }
    }

    #[test]
    fn a_key_value_is_one_segment() {
        let mut e = Envelope::new("1", &b""[..]);
        e.set_header("tenant", "acme");
        assert_eq!(expand_key("events:{tenant}", &e).expect("ok"), "events:acme");
        for hostile in ["a:admin", "", "a b", "x\ny"] {
            e.set_header("tenant", hostile);
            let error = expand_key("events:{tenant}", &e).expect_err(hostile);
            assert!(!error.is_transient(), "{hostile:?}");
        }
    }

    #[test]
    fn headers_fill_the_template() {
        let mut e = Envelope::new("1", &b""[..]);
        e.set_header("region", "eu");
        e.set_header("n", HeaderValue::Integer(3));
        assert_eq!(expand("orders.{region}.new", &e).expect("ok"), "orders.eu.new");
        assert_eq!(expand("plain", &e).expect("ok"), "plain");
        assert_eq!(expand("open{brace", &e).expect("ok"), "open{brace");
        assert!(!expand("{missing}", &e).expect_err("missing").is_transient());
        assert!(!expand("{n}", &e).expect_err("not text").is_transient());
        assert_eq!(expand("{region}{region}/x{", &e).expect("ok"), "eueu/x{");
    }

    #[test]
    fn url_templates_put_each_value_in_one_path_segment() {
        let mut e = Envelope::new("1", &b""[..]);
        for (value, want) in [
            ("dev-1", "http://h/d/dev-1/x"),
            ("../../admin", "http://h/d/..%2F..%2Fadmin/x"),
            ("a?b=1#frag", "http://h/d/a%3Fb%3D1%23frag/x"),
            ("100% sure", "http://h/d/100%25%20sure/x"),
            ("Malmö", "http://h/d/Malm%C3%B6/x"),
        ] {
            e.set_header("device", value);
            assert_eq!(expand_url("http://h/d/{device}/x", &e).expect("encodes"), want, "{value:?}");
        }
        for refused in ["", ".", ".."] {
            e.set_header("device", refused);
            let err = expand_url("http://h/d/{device}/x", &e).expect_err("refused");
            assert!(!err.is_transient() && err.reason.contains("device"), "{refused:?}: {}", err.reason);
        }
        assert_eq!(url_segment("..x").expect("not a step"), "..x");
    }

    #[test]
    fn names_are_the_headers_a_template_uses() {
        assert_eq!(names("a/{x}/b/{y.z}"), ["x", "y.z"]);
        assert_eq!(names("open{brace"), Vec::<&str>::new());
        assert!(names("plain").is_empty());
    }
}
