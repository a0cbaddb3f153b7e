//! `${VAR}` and `${VAR:-default}` expansion in every string value of the
//! config (keys are never expanded; `$$` stands for a literal `$`), and
//! secrets read from files: a table whose only key is `file`, such as
//! `url = { file = "/run/secrets/amqp-url" }`, becomes the file's text
//! (one trailing newline removed). The path may use `${VAR}`; the file's
//! text is taken as it is.

use crate::ConfigError;

/// Expands every string inside `value`, reporting errors at their key
/// path. The text of every secret file read is pushed to `secrets`, so
/// that output meant for people can mask it.
pub fn substitute_value(
    value: &mut toml::Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<(), ConfigError> {
    if let Some(file) = secret_file(value) {
        let file = expand(file, env).map_err(|m| ConfigError::new(format!("{path}.file"), m))?;
        let text = std::fs::read_to_string(&file)
            .map_err(|e| ConfigError::new(format!("{path}.file"), format!("cannot read secret file {file}: {e}")))?;
        let text = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text).to_owned();
        if !text.is_empty() {
            secrets.push(text.clone());
        }
        *value = toml::Value::String(text);
        return Ok(());
    }
    match value {
        toml::Value::String(s) => {
            *s = expand(s, env).map_err(|m| ConfigError::new(path, m))?;
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute_value(item, &format!("{path}[{i}]"), env, secrets)?;
            }
        }
        toml::Value::Table(table) => {
            for (k, v) in table.iter_mut() {
                let child = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                substitute_value(v, &child, env, secrets)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The path of a `{ file = "..." }` table.
fn secret_file(value: &toml::Value) -> Option<&str> {
    match value {
        toml::Value::Table(t) if t.len() == 1 => t.get("file").and_then(toml::Value::as_str),
        _ => None,
    }
}

/// Expands one string.
pub fn expand(input: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or_else(|| format!("unclosed `${{` in {input:?}"))?;
            let expr = &body[..end];
            let (name, default) = match expr.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (expr, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("`${{{expr}}}` is not a valid variable reference"));
            }
            match (env(name).filter(|v| !v.is_empty() || default.is_none()), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => {
                    return Err(format!(
                        "environment variable {name} is not set (use ${{{name}:-default}} for a default)"
                    ));
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}
