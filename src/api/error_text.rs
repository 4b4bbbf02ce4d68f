//! What an error says to a client. Responses name no filesystem path (rule: the full text,
//! paths included, goes to the log only); both entry points, HTTP and MCP, pass their error
//! messages through [`without_paths`], so it lives beside them rather than in either.

/// An error message fit for a response: every absolute filesystem path or object-store URI in
/// it (Lance names the file it could not read and its own source file) becomes `<path>`. The
/// full text stays in the log.
pub(crate) fn without_paths(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut token = String::new();
    let flush = |token: &mut String, out: &mut String| {
        // Object-store paths have no leading slash: two separators make a path too.
        let is_path = token.starts_with('/')
            || token.starts_with("~/")
            || token.contains("://")
            || token.as_bytes().get(1..3) == Some(b":\\")
            || token.split('/').filter(|part| !part.is_empty()).count() > 2;
        if is_path && token.len() > 1 {
            out.push_str("<path>");
        } else {
            out.push_str(token);
        }
        token.clear();
    };
    for c in message.chars() {
        if c.is_whitespace() || matches!(c, ',' | '(' | ')' | '"' | '\'' | '[' | ']' | '`') {
            flush(&mut token, &mut out);
            out.push(c);
        } else {
            token.push(c);
        }
    }
    flush(&mut token, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::without_paths;

    #[test]
    fn responses_name_no_paths() {
        let lance = "store_failed: lancedb: Not found: /tmp/.tmpAb/lancedb/memories.lance/data/0a.lance, /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/lance-io-14.0.2/src/local.rs:120:31";
        let clean = without_paths(lance);
        assert_eq!(clean, "store_failed: lancedb: Not found: <path>, <path>");
        assert_eq!(
            without_paths("cannot read s3://bucket/memories.lance (\"C:\\data\\x\")"),
            "cannot read <path> (\"<path>\")"
        );
        assert_eq!(
            without_paths("Not found: tmp/.tmpYz/db/memories.lance/_versions/1.manifest, x"),
            "Not found: <path>, x"
        );
        let plain = "invalid limit: limit must be between 1 and 50 / 2 items, a/b stays";
        assert_eq!(without_paths(plain), plain);
    }
}
