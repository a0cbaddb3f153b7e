//! Keeping secrets out of logs: every transport logs its broker URL through
//! [`url`], which masks the password.

/// `scheme://user:secret@host/...` -> `scheme://user:****@host/...`, for
/// each URL of a comma-separated list (`nats://a:4222,nats://u:p@b:4222`).
/// A URL without a password is returned as it is.
pub fn url(raw: &str) -> String {
    raw.split(',').map(one_url).collect::<Vec<_>>().join(",")
}

fn one_url(raw: &str) -> String {
    let Some(scheme_end) = raw.find("://") else {
        return raw.to_owned();
    };
    let start = scheme_end + 3;
    let authority_end = raw[start..].find(['/', '?', '#']).map_or(raw.len(), |i| start + i);
    let authority = &raw[start..authority_end];
    let Some(at) = authority.rfind('@') else {
        return raw.to_owned();
    };
    let user_info = &authority[..at];
    let Some(colon) = user_info.find(':') else {
        return raw.to_owned();
    };
    format!("{}{}:****{}", &raw[..start], &user_info[..colon], &raw[start + at..])
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_masked_and_the_rest_kept() {
        assert_eq!(super::url("amqp://guest:guest@127.0.0.1:5672/%2f"), "amqp://guest:****@127.0.0.1:5672/%2f");
        assert_eq!(super::url("mqtt://u:p%40ss@h:1"), "mqtt://u:****@h:1");
        assert_eq!(super::url("amqp://user@h"), "amqp://user@h");
        assert_eq!(super::url("amqp://h/vhost"), "amqp://h/vhost");
        assert_eq!(super::url("not a url"), "not a url");
        assert_eq!(
            super::url("nats://a:pw-a@h1:4222, nats://h2:4222,tls://b:pw-b@h3:4222"),
            "nats://a:****@h1:4222, nats://h2:4222,tls://b:****@h3:4222",
            "every URL of a list"
        );
    }
}
