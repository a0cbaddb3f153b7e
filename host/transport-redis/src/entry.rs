//! Stream entries out of Redis's replies (`XREADGROUP`, `XAUTOCLAIM`,
//! `XPENDING`), read from the reply values themselves so that the fields
//! keep their order, repeats and binary values.

use redis::Value;

/// One stream entry: its id and fields in the order they were added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    /// Empty for an entry deleted from the stream while it was pending.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// False when the stream no longer holds the entry (it was trimmed or
    /// deleted while pending).
    pub exists: bool,
}

/// A reply that is not the shape the command answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unexpected(pub String);

impl std::fmt::Display for Unexpected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unexpected reply: {}", self.0)
    }
}

fn unexpected(what: &str, v: &Value) -> Unexpected {
    let mut shown = format!("{v:?}");
    shown.truncate(200);
    Unexpected(format!("{what}: {shown}"))
}

/// A reply value as bytes (a bulk or simple string).
pub fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// A reply value as text.
pub fn text(v: &Value) -> Option<String> {
    bytes(v).and_then(|b| std::str::from_utf8(b).ok()).map(str::to_owned)
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => text(other)?.parse().ok(),
    }
}

/// One entry: `[id, [field, value, …]]`, or `[id, nil]` when deleted.
fn entry(v: &Value) -> Result<Entry, Unexpected> {
    let Value::Array(parts) = v else { return Err(unexpected("entry", v)) };
    let [id, fields] = parts.as_slice() else { return Err(unexpected("entry", v)) };
    let id = text(id).ok_or_else(|| unexpected("entry id", id))?;
    let fields = match fields {
        Value::Nil => return Ok(Entry { id, fields: Vec::new(), exists: false }),
        Value::Array(flat) if flat.len() % 2 == 0 => flat
            .chunks_exact(2)
            .map(|pair| match (bytes(&pair[0]), bytes(&pair[1])) {
                (Some(f), Some(v)) => Ok((f.to_vec(), v.to_vec())),
                _ => Err(unexpected("entry field", &pair[0])),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Value::Map(pairs) => pairs
            .iter()
            .map(|(f, v)| match (bytes(f), bytes(v)) {
                (Some(f), Some(v)) => Ok((f.to_vec(), v.to_vec())),
                _ => Err(unexpected("entry field", f)),
            })
            .collect::<Result<Vec<_>, _>>()?,
        other => return Err(unexpected("entry fields", other)),
    };
    Ok(Entry { id, fields, exists: true })
}

fn entries(v: &Value) -> Result<Vec<Entry>, Unexpected> {
    match v {
        Value::Array(list) => list.iter().map(entry).collect(),
        Value::Nil => Ok(Vec::new()),
        other => Err(unexpected("entries", other)),
    }
}

/// The entries of an `XREADGROUP` reply on one stream: nil when the block
/// ran out, else `[[stream, [entry, …]]]` (a map under RESP3).
pub fn read_reply(v: &Value) -> Result<Vec<Entry>, Unexpected> {
    match v {
        Value::Nil => Ok(Vec::new()),
        Value::Array(streams) => {
            let mut all = Vec::new();
            for s in streams {
                let Value::Array(pair) = s else { return Err(unexpected("stream", s)) };
                let [_, list] = pair.as_slice() else { return Err(unexpected("stream", s)) };
                all.extend(entries(list)?);
            }
            Ok(all)
        }
        Value::Map(streams) => {
            let mut all = Vec::new();
            for (_, list) in streams {
                all.extend(entries(list)?);
            }
            Ok(all)
        }
        other => Err(unexpected("XREADGROUP", other)),
    }
}

/// An `XAUTOCLAIM` reply: the next cursor, the claimed entries, and the
/// ids of pending entries the stream no longer holds (Redis 7; Redis 6.2
/// lists those among the entries, with nil fields).
pub struct Claimed {
    pub cursor: String,
    pub entries: Vec<Entry>,
    pub deleted: Vec<String>,
}

pub fn autoclaim_reply(v: &Value) -> Result<Claimed, Unexpected> {
    let Value::Array(parts) = v else { return Err(unexpected("XAUTOCLAIM", v)) };
    let (cursor, list, deleted) = match parts.as_slice() {
        [cursor, list] => (cursor, list, None),
        [cursor, list, deleted] => (cursor, list, Some(deleted)),
        _ => return Err(unexpected("XAUTOCLAIM", v)),
    };
    let cursor = text(cursor).ok_or_else(|| unexpected("XAUTOCLAIM cursor", cursor))?;
    let mut entries = entries(list)?;
    let mut deleted: Vec<String> = match deleted {
        Some(Value::Array(ids)) => ids.iter().filter_map(text).collect(),
        _ => Vec::new(),
    };
    deleted.extend(entries.iter().filter(|e| !e.exists).map(|e| e.id.clone()));
    entries.retain(|e| e.exists);
    Ok(Claimed { cursor, entries, deleted })
}

/// An extended `XPENDING` reply: `(id, delivery count)` of each entry.
pub fn pending_reply(v: &Value) -> Result<Vec<(String, i64)>, Unexpected> {
    let Value::Array(rows) = v else { return Err(unexpected("XPENDING", v)) };
    rows.iter()
        .map(|row| match row {
            Value::Array(cols) if cols.len() == 4 => {
                let id = text(&cols[0]).ok_or_else(|| unexpected("XPENDING id", row))?;
                let count = int(&cols[3]).ok_or_else(|| unexpected("XPENDING count", row))?;
                Ok((id, count))
            }
            other => Err(unexpected("XPENDING row", other)),
        })
        .collect()
}

/// The milliseconds part of an entry id (`<ms>-<seq>`): when the stream
/// stored it.
pub fn id_millis(id: &str) -> Option<i64> {
    id.split_once('-').map_or(Some(id), |(ms, _)| Some(ms))?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_read_reply_keeps_field_order_repeats_and_bytes() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("orders"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk("1700000000123-0"),
                    Value::Array(vec![
                        bulk("b"),
                        bulk("1"),
                        bulk("a"),
                        bulk("2"),
                        bulk("b"),
                        bulk("3"),
                        bulk("raw"),
                        Value::BulkString(vec![0xff, 0]),
                    ]),
                ]),
                Value::Array(vec![bulk("1700000000124-0"), Value::Array(vec![])]),
            ]),
        ])]);
        let got = read_reply(&reply).expect("parsed");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].id, "1700000000123-0");
        let names: Vec<&[u8]> = got[0].fields.iter().map(|(f, _)| f.as_slice()).collect();
        assert_eq!(names, vec![&b"b"[..], b"a", b"b", b"raw"]);
        assert_eq!(got[0].fields[3].1, vec![0xff, 0]);
        assert!(got[1].fields.is_empty() && got[1].exists);
        assert_eq!(read_reply(&Value::Nil).expect("timed out"), vec![]);
    }

    #[test]
    fn an_autoclaim_reply_separates_deleted_entries() {
        let reply = Value::Array(vec![
            bulk("0-0"),
            Value::Array(vec![
                Value::Array(vec![bulk("5-0"), Value::Array(vec![bulk("payload"), bulk("x")])]),
                Value::Array(vec![bulk("6-0"), Value::Nil]),
            ]),
            Value::Array(vec![bulk("7-0")]),
        ]);
        let c = autoclaim_reply(&reply).expect("parsed");
        assert_eq!(c.cursor, "0-0");
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.deleted, vec!["7-0".to_owned(), "6-0".to_owned()]);
    }

    #[test]
    fn a_pending_reply_gives_delivery_counts() {
        let reply = Value::Array(vec![Value::Array(vec![bulk("5-0"), bulk("c"), Value::Int(10), Value::Int(3)])]);
        assert_eq!(pending_reply(&reply).expect("parsed"), vec![("5-0".to_owned(), 3)]);
    }

    #[test]
    fn shapes_redis_never_sends_are_errors_not_panics() {
        for v in [
            Value::Int(1),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Array(vec![bulk("s"), Value::Array(vec![Value::Array(vec![bulk("1-0")])])])]),
            Value::Array(vec![Value::Array(vec![
                bulk("s"),
                Value::Array(vec![Value::Array(vec![bulk("1-0"), Value::Array(vec![bulk("odd")])])]),
            ])]),
        ] {
            assert!(read_reply(&v).is_err(), "{v:?}");
        }
        assert!(autoclaim_reply(&Value::Array(vec![])).is_err());
        assert!(pending_reply(&Value::Array(vec![Value::Int(1)])).is_err());
    }

    #[test]
    fn the_id_gives_the_time_it_was_stored() {
        assert_eq!(id_millis("1700000000123-7"), Some(1_700_000_000_123));
        assert_eq!(id_millis("nonsense"), None);
    }
}
