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

/// Expands every `{name}` in `template`. A missing or non-text header is a
/// permanent failure: retrying cannot make the header appear. A `{` without
/// a closing `}` is kept as it is.
pub fn expand(template: &str, envelope: &Envelope) -> Result<String, TransportError> {
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
            Some(HeaderValue::Text(v)) => out.push_str(v),
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
    fn names_are_the_headers_a_template_uses() {
        assert_eq!(names("a/{x}/b/{y.z}"), ["x", "y.z"]);
        assert_eq!(names("open{brace"), Vec::<&str>::new());
        assert!(names("plain").is_empty());
    }
}
