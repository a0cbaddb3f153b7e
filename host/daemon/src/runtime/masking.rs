//! The config as an operator may see it: every secret masked, for `ferry
//! render` and the admin server's `GET /config`.

/// The config as JSON with its secrets masked: `secrets` (the secret files'
/// texts), the admin token, the transports' own secrets and the SQS
/// endpoint's keys wherever their text appears, every key that names a
/// secret and every URL's password (`ferry render`, `GET /config`).
pub fn masked(config: &ferry_config::Config, mut secrets: Vec<String>) -> Result<serde_json::Value, String> {
    let mut value = serde_json::to_value(config).map_err(|e| format!("cannot render: {e}"))?;
    // The admin token is a secret however it was written.
    secrets.extend(config.admin.token.as_ref().map(|t| t.expose().to_owned()));
    // So are the transports' own (tokens, signing secrets, API keys).
    for r in config.receivers.values() {
        secrets.extend(crate::transports::of_receiver(r).map(|t| t.receiver_secrets(r)).unwrap_or_default());
    }
    for s in config.senders.values() {
        secrets.extend(crate::transports::of_sender(s).map(|t| t.sender_secrets(s)).unwrap_or_default());
    }
    // And the SQS endpoint's access key secrets; its section as its crate
    // reads it, with its defaults.
    if let Ok(Some(sqs)) = ferry_sqs_endpoint::config::section(config) {
        secrets.extend(sqs.access_keys.iter().map(|k| k.secret.expose().to_owned()));
        if let (Ok(read), Some(endpoints)) = (serde_json::to_value(&sqs), value.get_mut("endpoints")) {
            endpoints["sqs"] = read;
        }
    }
    mask_secrets(&mut value, &secrets);
    Ok(value)
}

/// Whether a key names a secret by the usual spellings (`password`,
/// `api_key`, `token`, `secret`, …), wherever it is: in a transport
/// component's free-form `config` table ferry knows nothing else of it. A
/// key naming a file (`credentials_file`) holds a path, not the secret.
fn names_a_secret(key: &str) -> bool {
    const WORDS: [&str; 9] =
        ["password", "passwd", "secret", "token", "api_key", "apikey", "access_key", "private_key", "seed"];
    let key = key.to_ascii_lowercase();
    !key.ends_with("_file") && WORDS.iter().any(|w| key.contains(w))
}

/// Masks the password of every URL (each of a list too) under a key that
/// names URLs (`url`, `…_url`, `urls`), every text under a key that names a
/// secret ([`names_a_secret`]), and the text of every secret (secret files,
/// the admin token, what the transports declare) wherever it appears.
fn mask_secrets(value: &mut serde_json::Value, secrets: &[String]) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if names_a_secret(k) {
                    match v {
                        serde_json::Value::String(s) if !s.is_empty() => *s = "****".to_owned(),
                        serde_json::Value::Array(items) => {
                            for item in items {
                                if let serde_json::Value::String(s) = item {
                                    *s = "****".to_owned();
                                }
                            }
                        }
                        _ => {}
                    }
                }
                if k == "url" || k.ends_with("_url") || k == "urls" {
                    match v {
                        serde_json::Value::String(s) => *s = ferry_core::redact::url(s),
                        serde_json::Value::Array(items) => {
                            for item in items {
                                if let serde_json::Value::String(s) = item {
                                    *s = ferry_core::redact::url(s);
                                }
                            }
                        }
                        _ => {}
                    }
                }
                mask_secrets(v, secrets);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| mask_secrets(v, secrets)),
        serde_json::Value::String(s) => {
            for secret in secrets {
                if s.contains(secret.as_str()) {
                    *s = s.replace(secret.as_str(), "****");
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_masks_every_password_of_a_url_list_and_every_url_key() {
        let mut config = serde_json::json!({
            "receivers": { "in": { "type": "nats", "url": "nats://a:pw-one@h1:4222,nats://b:pw-two@h2:4222" } },
            "senders": {
                "out": { "type": "sqs", "endpoint_url": "http://k:pw-three@h:4566" },
                "many": { "urls": ["amqp://c:pw-four@h:5672"] }
            },
            "admin": { "token": "the-admin-token" }
        });
        mask_secrets(&mut config, &["the-admin-token".to_owned()]);
        let text = config.to_string();
        for secret in ["pw-one", "pw-two", "pw-three", "pw-four", "the-admin-token"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("nats://a:****@h1:4222,nats://b:****@h2:4222"), "{text}");
    }

    #[test]
    fn keys_that_name_a_secret_are_masked_in_any_table() {
        let mut v = serde_json::json!({"senders": {"c": {"config": {
            "api_key": "k1", "Password": "k2", "auth": {"client_secret": "k3", "tokens": ["k4"]},
            "routing_key": "orders", "credentials_file": "/etc/ferry/nats.creds", "queue": "q"
        }}}});
        mask_secrets(&mut v, &[]);
        let text = v.to_string();
        for secret in ["k1", "k2", "k3", "k4"] {
            assert!(!text.contains(&format!("\"{secret}\"")), "{secret} in {text}");
        }
        let c = &v["senders"]["c"]["config"];
        assert_eq!(c["routing_key"], "orders", "a routing key is not a secret");
        assert_eq!(c["credentials_file"], "/etc/ferry/nats.creds", "a path is not a secret");
        assert_eq!(c["queue"], "q");
    }

    #[test]
    fn url_passwords_are_masked() {
        let mut v = serde_json::json!({"senders": {"a": {"url": "mqtt://u:secret@h:1883"}}, "x": ["mqtt://no-pass"]});
        mask_secrets(&mut v, &[]);
        assert_eq!(v["senders"]["a"]["url"], "mqtt://u:****@h:1883");
        assert!(!v.to_string().contains("secret"));
    }

    #[test]
    fn secrets_from_files_are_masked_wherever_they_appear() {
        let mut v =
            serde_json::json!({"r": {"url": "amqp://user@h/s3cr3t-vhost", "config": {"token": "s3cr3t-vhost"}}});
        mask_secrets(&mut v, &["s3cr3t-vhost".to_owned()]);
        assert!(!v.to_string().contains("s3cr3t"), "{v}");
        assert_eq!(v["r"]["config"]["token"], "****");
    }
}
