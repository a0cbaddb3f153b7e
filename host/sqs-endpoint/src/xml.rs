//! The query protocol's XML replies, written by `aws-smithy-xml`'s writer
//! (the AWS SDK's own, already in the tree), so that every text is escaped
//! by one complete rule and every element closed: shared by the SQS
//! ([`crate::protocol`]) and SNS ([`crate::sns`]) replies, a module of its
//! own so that neither imports the other.
//!
//! Besides the five markup characters, the writer escapes the line breaks an
//! XML parser would otherwise normalise (`\r`, `\r\n`, U+0085, U+2028): a
//! message body with a CR reaches an SDK as it was sent.

pub use aws_smithy_xml::encode::{ScopeWriter, XmlWriter};

/// What every reply document starts with.
const DECLARATION: &str = "<?xml version=\"1.0\"?>";

/// An element of a reply, built before it is written.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `<name>text</name>`.
    Text(&'static str, String),
    /// `<name>children…</name>`.
    Parent(&'static str, Vec<Node>),
}

impl Node {
    pub fn text(name: &'static str, text: impl Into<String>) -> Self {
        Self::Text(name, text.into())
    }

    fn write(&self, scope: &mut ScopeWriter) {
        match self {
            Self::Text(name, text) => text_el(scope, name, text),
            Self::Parent(name, children) => {
                let mut inner = scope.start_el(name).finish();
                for child in children {
                    child.write(&mut inner);
                }
            }
        }
    }
}

/// `<name>text</name>` inside `scope`.
pub fn text_el(scope: &mut ScopeWriter, name: &str, text: &str) {
    scope.start_el(name).finish().data(text);
}

/// A whole reply: `<{action}Response xmlns=…>`, what `body` writes inside
/// it, then the request id.
pub fn response(action: &str, xmlns: &str, request_id: &str, body: impl FnOnce(&mut ScopeWriter)) -> String {
    let mut out = String::from(DECLARATION);
    let name = format!("{action}Response");
    let mut doc = XmlWriter::new(&mut out);
    let mut root = doc.start_el(&name).write_ns(xmlns, None).finish();
    body(&mut root);
    text_el(&mut root.start_el("ResponseMetadata").finish(), "RequestId", request_id);
    root.finish();
    out
}

/// `<{action}Result>` holding `nodes`, or nothing when there are none (an
/// action that answers with metadata only).
pub fn result_nodes(scope: &mut ScopeWriter, action: &str, nodes: &[Node]) {
    if nodes.is_empty() {
        return;
    }
    let name = format!("{action}Result");
    let mut result = scope.start_el(&name).finish();
    for node in nodes {
        node.write(&mut result);
    }
}

/// An error document: `<ErrorResponse xmlns=…><Error>…</Error><RequestId>`.
pub fn error(xmlns: &str, fault: &str, code: &str, message: &str, request_id: &str) -> String {
    let mut out = String::from(DECLARATION);
    let mut doc = XmlWriter::new(&mut out);
    let mut root = doc.start_el("ErrorResponse").write_ns(xmlns, None).finish();
    {
        let mut err = root.start_el("Error").finish();
        text_el(&mut err, "Type", fault);
        text_el(&mut err, "Code", code);
        text_el(&mut err, "Message", message);
        err.start_el("Detail").finish();
    }
    text_el(&mut root, "RequestId", request_id);
    root.finish();
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use aws_smithy_xml::decode::{Document, ScopedDecoder, try_data};

    /// The text at `path` below the root of `xml`, as an XML parser reads it.
    pub(crate) fn read_text(xml: &str, path: &[&str]) -> String {
        fn find(scope: &mut ScopedDecoder, path: &[&str]) -> Option<String> {
            while let Some(mut tag) = scope.next_tag() {
                if tag.start_el().local() == path[0] {
                    return match path {
                        [_] => Some(try_data(&mut tag).ok()?.into_owned()),
                        _ => find(&mut tag, &path[1..]),
                    };
                }
            }
            None
        }
        let mut doc = Document::new(xml);
        let mut root = doc.root_element().expect("a root element");
        find(&mut root, path).unwrap_or_else(|| panic!("no {path:?} in {xml}"))
    }

    #[test]
    fn text_an_xml_parser_would_change_reads_back_as_written() {
        // The hand-written escape of before left U+0085 and U+2028 as they
        // were, line breaks an XML 1.1 parser (and some SDKs' readers)
        // normalise to LF: none may stand in the document as itself.
        let awkward = "a\r\nb\rc\u{85}d\u{2028}e <&> \"q\" 'a' ]]> \t end";
        let nodes = [Node::Parent("Body", vec![Node::text("Text", awkward)])];
        let xml = response("Act", "urn:x", "rid<1>", |scope| result_nodes(scope, "Act", &nodes));
        assert_eq!(read_text(&xml, &["ActResult", "Body", "Text"]), awkward);
        assert_eq!(read_text(&xml, &["ResponseMetadata", "RequestId"]), "rid<1>");
        assert!(!xml.contains(['\r', '\u{85}', '\u{2028}']), "{xml:?}");
        assert!(xml.starts_with("<?xml version=\"1.0\"?><ActResponse xmlns=\"urn:x\">"), "{xml}");
    }

    #[test]
    fn no_nodes_write_no_result_element() {
        let xml = response("Act", "urn:x", "rid", |scope| result_nodes(scope, "Act", &[]));
        assert!(!xml.contains("ActResult"), "{xml}");
    }

    #[test]
    fn an_error_message_is_escaped() {
        let xml = error("urn:x", "Sender", "Bad", "a < b & \r\n c", "r");
        assert_eq!(read_text(&xml, &["Error", "Message"]), "a < b & \r\n c");
        assert_eq!(read_text(&xml, &["Error", "Code"]), "Bad");
    }
}
