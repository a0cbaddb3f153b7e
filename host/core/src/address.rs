//! Binding address templates: `{name}` in an address becomes the text of the
//! envelope's header of that exact name (`bridged/{mqtt.topic}`,
//! `orders.{region}`), which is how a route picks a destination by message
//! content. Shared by every transport whose address is free text.

use ferry_envelope::{Envelope, HeaderValue};

use crate::TransportError;

/// Expands every `{name}` in `template`. A missing or non-text header is a
/// permanent failure: retrying cannot make the header appear. A `{` without
/// a closing `}` is kept as it is.
pub fn expand(template: &str, envelope: &Envelope) -> Result<String, TransportError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        out.push_str(&rest[..start]);
        let name = &rest[start + 1..start + len];
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
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
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
    }
}
