//! Who may talk to the HTTP API: by default only the machine's own user.
//!
//! Three checks, all here so the policy is in one place:
//! - **Host**: every route but `/healthz` answers only requests whose `Host` names this machine
//!   (`localhost`, `127.0.0.1`, `[::1]`, any port) or an entry of `server.allowed_hosts`. A web
//!   page that rebinds its own DNS name to 127.0.0.1 still sends its own name as `Host`, so it gets
//!   403 instead of the user's memories (DNS rebinding).
//! - **Token**: with `server.auth_token` (or `SCOPEMEM_AUTH_TOKEN`) set, every route but
//!   `/healthz` needs `Authorization: Bearer <token>`, else 401. The scheme name is matched
//!   case-insensitively (RFC 7235 section 2.1: `bearer`, `BEARER` are the same scheme); the token
//!   itself is compared exactly, via SHA-256 digests and a constant-time equality, so neither its
//!   length nor a matching prefix shows in the response time.
//! - **Same origin** (state-changing methods, i.e. all but GET, HEAD and OPTIONS): a request
//!   whose `Sec-Fetch-Site` is present and not `same-origin` or `none`, or whose `Origin` is
//!   present and does not name the request's own `Host` (`null` included), gets 403
//!   `cross_site_request`; a body that is not `Content-Type: application/json` gets 415. A
//!   browser only sends such a request cross-origin without a CORS preflight as a form post or a
//!   "simple" fetch, which always carries one of these signs, so a page on another site cannot
//!   make the operator's browser erase memories even if it knew the token.
//! - **Bind**: [`check_bind`] refuses a listen address that is not loopback (`0.0.0.0`, a LAN
//!   address, a name resolving to one) unless a token is set.
//!
//! [`protect`] applies the first two as a layer over a whole router, so a route added later is
//! covered by default; `/healthz` is the one exemption (supervisors and load balancers probe it
//! without credentials, and it reveals only health). The operator page's static files
//! ([`super::ui::is_asset`], GET/HEAD only) skip the token but not the Host check: they hold no
//! data, and the browser cannot attach a bearer token to a page load; every data request the
//! page makes carries it. The token is never logged, never echoed,
//! and removed from the request before any handler sees it.

use std::net::{Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{Secret, ServerConfig, AUTH_TOKEN_ENV};

/// The one path answered without a Host or token check.
pub const HEALTHZ: &str = "/healthz";

/// Host names always accepted, with any port or none.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// How much of a client-supplied Host or path goes into a log line or an error message.
const ECHO_MAX: usize = 64;

/// Why the HTTP guard cannot be set up, or why `serve` must not listen.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error(
        "server.allowed_hosts entry {entry:?} is not a host name or IP address with an optional \
         port (e.g. \"memory.lan\" or \"memory.lan:8787\"; no scheme, path or wildcard): {reason}"
    )]
    InvalidAllowedHost { entry: String, reason: &'static str },
    #[error("server.http_addr '{addr}' cannot be resolved: {source}")]
    Resolve {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("server.http_addr '{addr}' resolves to no address")]
    NoAddress { addr: String },
    #[error(
        "refusing to listen on server.http_addr '{addr}': {ip} is not a loopback address and no \
         token is set, so anyone who can reach it could read and erase every memory. Set \
         server.auth_token in the config file (or the {env} environment variable); clients then \
         send Authorization: Bearer <token>. Or listen on 127.0.0.1.",
        env = AUTH_TOKEN_ENV
    )]
    PublicWithoutToken { addr: String, ip: SocketAddr },
}

/// The host part of an authority. Names are compared ASCII case-insensitively; IPv6 literals by
/// value, so `[0:0::1]` and `[::1]` are the same host.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostName<S> {
    Name(S),
    V6(Ipv6Addr),
}

/// `host[:port]` as found in a `Host` header or an `allowed_hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority<S> {
    host: HostName<S>,
    port: Option<u16>,
}

/// Parse `host[:port]` without allocating: a DNS name or IPv4 address (letters, digits, `-`, `.`,
/// `_`) or a bracketed IPv6 literal, then an optional decimal port. Anything else (userinfo,
/// paths, an empty port, bare IPv6) is refused: a browser never sends such a Host, and failing
/// closed is the point of this check.
fn parse_authority(text: &str) -> Result<Authority<&str>, &'static str> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or("unclosed '['")?;
        let ip: Ipv6Addr = inside.parse().map_err(|_| "not an IPv6 address")?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or("junk after ']'")?),
        };
        (HostName::V6(ip), port)
    } else {
        let (name, port) = match text.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        };
        if name.is_empty() {
            return Err("empty host");
        }
        if name.len() > 253 {
            return Err("host longer than 253 characters");
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            return Err("only letters, digits, '-', '.' and '_' may appear in a host name");
        }
        (HostName::Name(name), port)
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().map_err(|_| "port out of range")?)
        }
        Some(_) => return Err("the port must be a number"),
    };
    Ok(Authority { host, port })
}

/// An `allowed_hosts` entry (or a loopback name) ready to match: names lower-cased once.
fn allowed_entry(entry: &str) -> Result<Authority<String>, GuardError> {
    let trimmed = entry.trim();
    let invalid = |reason| GuardError::InvalidAllowedHost {
        entry: entry.to_string(),
        reason,
    };
    // `::1` is how people (and rmcp's defaults) write IPv6 hosts; accept it without brackets.
    let parsed = match trimmed.parse::<Ipv6Addr>() {
        Ok(ip) => Authority {
            host: HostName::V6(ip),
            port: None,
        },
        Err(_) => parse_authority(trimmed).map_err(invalid)?,
    };
    Ok(Authority {
        host: match parsed.host {
            HostName::Name(n) => HostName::Name(n.to_ascii_lowercase()),
            HostName::V6(ip) => HostName::V6(ip),
        },
        port: parsed.port,
    })
}

impl Authority<String> {
    /// An entry without a port matches any port; one with a port only that port.
    fn admits(&self, request: &Authority<&str>) -> bool {
        let host = match (&self.host, &request.host) {
            (HostName::Name(a), HostName::Name(b)) => a.eq_ignore_ascii_case(b),
            (HostName::V6(a), HostName::V6(b)) => a == b,
            _ => false,
        };
        host && self.port.is_none_or(|p| request.port == Some(p))
    }
}

/// Why a request was refused. Holds only what is safe to log and echo: never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 403: the Host is not this machine nor an `allowed_hosts` entry (`host` truncated).
    Host { host: String, reason: &'static str },
    /// 401: the bearer token is missing or wrong.
    Token { reason: &'static str },
    /// 403: a state-changing request sent by a page of another origin.
    CrossSite { reason: &'static str },
    /// 415: a state-changing request whose body is not declared as JSON.
    MediaType { reason: &'static str },
}

impl Refusal {
    /// The machine-readable `error.code` of the response.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Refusal::Host { .. } => "forbidden_host",
            Refusal::Token { .. } => "unauthorized",
            Refusal::CrossSite { .. } => "cross_site_request",
            Refusal::MediaType { .. } => "unsupported_media_type",
        }
    }

    /// Why, in a few words (safe to log: no header values).
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::Host { reason, .. }
            | Refusal::Token { reason }
            | Refusal::CrossSite { reason }
            | Refusal::MediaType { reason } => reason,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let code = self.code();
        match self {
            Refusal::Host { host, reason } => {
                let seen = if host.is_empty() {
                    reason.to_string()
                } else {
                    format!("{reason}: {host:?}")
                };
                let message = format!(
                    "this service answers only requests addressed to localhost, 127.0.0.1, [::1] \
                     or a name in server.allowed_hosts ({seen}); if you reach it under another \
                     name, add that name (optionally with :port) to server.allowed_hosts"
                );
                let body = Json(json!({"error": {"code": code, "message": message}}));
                (StatusCode::FORBIDDEN, body).into_response()
            }
            Refusal::Token { reason } => {
                let message = format!(
                    "{reason}: this service requires the header Authorization: Bearer <token>, \
                     with the token configured as server.auth_token or {AUTH_TOKEN_ENV}"
                );
                let body = Json(json!({"error": {"code": code, "message": message}}));
                let mut response = (StatusCode::UNAUTHORIZED, body).into_response();
                response
                    .headers_mut()
                    .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                response
            }
            Refusal::CrossSite { reason } => {
                let message = format!(
                    "{reason}: requests that change data must come from this service's own \
                     origin (the operator page) or from a client that is not a browser"
                );
                let body = Json(json!({"error": {"code": code, "message": message}}));
                (StatusCode::FORBIDDEN, body).into_response()
            }
            Refusal::MediaType { reason } => {
                let message =
                    format!("{reason}: send the body as JSON with Content-Type: application/json");
                let body = Json(json!({"error": {"code": code, "message": message}}));
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, body).into_response()
            }
        }
    }
}

/// A header value as text safe to log or echo: visible ASCII only (anything else is replaced),
/// at most [`ECHO_MAX`] characters.
fn echo(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(ECHO_MAX)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect();
    if value.chars().count() > ECHO_MAX {
        out.push('…');
    }
    out
}

/// The Host and token policy for one server, built once from `server.*`.
pub struct Guard {
    hosts: Vec<Authority<String>>,
    /// SHA-256 of the configured token; the token itself is not kept here.
    token: Option<[u8; 32]>,
    /// Where refusals are counted (`/metrics`), when the server keeps metrics.
    metrics: Option<Arc<super::metrics::Metrics>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("hosts", &self.hosts)
            .field("token", &self.token.map(|_| "<set>"))
            .finish()
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The always-accepted loopback names (constants that parse; see the unit tests).
fn loopback() -> Vec<Authority<String>> {
    LOOPBACK_HOSTS
        .iter()
        .filter_map(|h| allowed_entry(h).ok())
        .collect()
}

impl Guard {
    /// The loopback names plus `allowed_hosts`; an invalid entry is an error naming it, so a typo
    /// such as `http://memory.lan` fails at start-up instead of as a 403 later.
    pub fn new(allowed_hosts: &[String], token: Option<&Secret>) -> Result<Guard, GuardError> {
        let mut hosts = loopback();
        for entry in allowed_hosts {
            hosts.push(allowed_entry(entry)?);
        }
        Ok(Guard {
            hosts,
            token: token.map(|t| digest(t.expose().as_bytes())),
            metrics: None,
        })
    }

    /// [`Guard::new`] for a router that cannot fail: an invalid `allowed_hosts` entry is logged
    /// and left out (so it admits nothing). `scopemem serve` validates with [`check_server`]
    /// first, so this only matters to other users of the library.
    pub(crate) fn for_server(server: &ServerConfig) -> Guard {
        let mut hosts = loopback();
        for entry in &server.allowed_hosts {
            match allowed_entry(entry) {
                Ok(a) => hosts.push(a),
                Err(e) => tracing::warn!(error = %e, "ignoring server.allowed_hosts entry"),
            }
        }
        Guard {
            hosts,
            token: server
                .auth_token
                .as_ref()
                .map(|t| digest(t.expose().as_bytes())),
            metrics: None,
        }
    }

    /// Count every refusal in `metrics` (shown in `/metrics` as `scopemem_http_refused_total`).
    pub(crate) fn counting_into(mut self, metrics: Arc<super::metrics::Metrics>) -> Guard {
        self.metrics = Some(metrics);
        self
    }

    /// Whether a token is required.
    #[cfg(test)]
    pub(crate) fn requires_token(&self) -> bool {
        self.token.is_some()
    }

    fn host_allowed(&self, text: &str) -> Result<(), &'static str> {
        let authority = parse_authority(text)?;
        if self.hosts.iter().any(|h| h.admits(&authority)) {
            Ok(())
        } else {
            Err("Host not allowed")
        }
    }

    /// The Host check: exactly one `Host` header naming an allowed host; an absolute-form
    /// request target (`GET http://x/…`) must name an allowed host too.
    pub(crate) fn check_host(
        &self,
        headers: &HeaderMap,
        uri: &axum::http::Uri,
    ) -> Result<(), Refusal> {
        let mut values = headers.get_all(HOST).iter();
        let Some(value) = values.next() else {
            return Err(Refusal::Host {
                host: String::new(),
                reason: "no Host header",
            });
        };
        let refuse = |host: &str, reason| Refusal::Host {
            host: echo(host),
            reason,
        };
        if values.next().is_some() {
            return Err(refuse("", "more than one Host header"));
        }
        let text = value
            .to_str()
            .map_err(|_| refuse("", "Host is not visible ASCII"))?;
        self.host_allowed(text).map_err(|r| refuse(text, r))?;
        if let Some(authority) = uri.authority() {
            self.host_allowed(authority.as_str())
                .map_err(|r| refuse(authority.as_str(), r))?;
        }
        Ok(())
    }

    /// The token check (a no-op when no token is configured): exactly one
    /// `Authorization: Bearer <token>` whose token matches, compared in constant time.
    pub(crate) fn check_token(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(expected) = &self.token else {
            return Ok(());
        };
        let refuse = |reason| Refusal::Token { reason };
        let mut values = headers.get_all(AUTHORIZATION).iter();
        let value = values
            .next()
            .ok_or(refuse("missing Authorization header"))?;
        if values.next().is_some() {
            return Err(refuse("more than one Authorization header"));
        }
        let text = value
            .to_str()
            .map_err(|_| refuse("malformed Authorization header"))?;
        let (scheme, token) = text
            .split_once(' ')
            .ok_or(refuse("Authorization is not a Bearer token"))?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(refuse("Authorization is not a Bearer token"));
        }
        let token = token.trim();
        if token.is_empty() {
            return Err(refuse("empty Bearer token"));
        }
        if bool::from(digest(token.as_bytes())[..].ct_eq(&expected[..])) {
            Ok(())
        } else {
            Err(refuse("wrong Bearer token"))
        }
    }
}

/// Axum middleware: refuse with 403/401/415 unless the request passes [`Guard::check_host`],
/// [`check_same_origin`] and [`Guard::check_token`] (the page's assets skip the token);
/// `/healthz` passes untouched. Refusals are logged at warn with the
/// (truncated) Host and path, never a credential.
pub(crate) async fn enforce(
    State(guard): State<Arc<Guard>>,
    mut req: Request,
    next: Next,
) -> Response {
    if req.uri().path() == HEALTHZ {
        return next.run(req).await;
    }
    let asset = is_safe(req.method()) && super::ui::is_asset(req.uri().path());
    let checked = guard
        .check_host(req.headers(), req.uri())
        .and_then(|()| check_same_origin(req.method(), req.headers()))
        .and_then(|()| match asset {
            true => Ok(()),
            false => guard.check_token(req.headers()),
        });
    if let Err(refusal) = checked {
        let host = req
            .headers()
            .get(HOST)
            .map(|v| echo(&String::from_utf8_lossy(v.as_bytes())))
            .unwrap_or_default();
        tracing::warn!(
            code = refusal.code(),
            reason = refusal.reason(),
            host = %host,
            path = %echo(req.uri().path()),
            method = %req.method(),
            "refused HTTP request"
        );
        let code = refusal.code();
        let response = refusal.into_response();
        if let Some(metrics) = &guard.metrics {
            metrics.refused(code, response.status().as_u16());
        }
        return response;
    }
    // Handlers (and rmcp, which keeps the request parts) never need the credential.
    req.headers_mut().remove(AUTHORIZATION);
    next.run(req).await
}

/// Methods that change nothing here (no route answers them with a side effect).
fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The cross-site rule for state-changing requests (see the module docs). Runs after the Host
/// check, so `Host` is known to be a single, allowed value.
pub(crate) fn check_same_origin(method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
    if is_safe(method) {
        return Ok(());
    }
    let cross = |reason| Refusal::CrossSite { reason };
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.as_bytes();
        if !site.eq_ignore_ascii_case(b"same-origin") && !site.eq_ignore_ascii_case(b"none") {
            return Err(cross(
                "Sec-Fetch-Site says the request comes from another site",
            ));
        }
    }
    let mut origins = headers.get_all(ORIGIN).iter();
    if let Some(origin) = origins.next() {
        if origins.next().is_some() {
            return Err(cross("more than one Origin header"));
        }
        let host = headers.get(HOST).map(HeaderValue::as_bytes);
        if !host.is_some_and(|h| origin_names_host(origin.as_bytes(), h)) {
            return Err(cross("Origin is not this service's own origin"));
        }
    }
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(Refusal::MediaType {
            reason: "Content-Type is not application/json",
        });
    }
    Ok(())
}

/// Whether an `Origin` (`http://host[:port]` or `https://…`, no path) names the same authority
/// as `Host`. Browsers omit the default port from both, so the texts compare directly; `null`
/// (sandboxed or privacy-sensitive contexts) never matches.
fn origin_names_host(origin: &[u8], host: &[u8]) -> bool {
    let authority = origin
        .strip_prefix(b"http://")
        .or_else(|| origin.strip_prefix(b"https://"));
    authority.is_some_and(|a| !a.is_empty() && a.eq_ignore_ascii_case(host))
}

/// Wrap every route of `router` (and its 404 fallback) in [`enforce`]. Call it last, after all
/// routes are added: axum layers cover only the routes present when applied.
pub fn protect(router: Router, guard: Arc<Guard>) -> Router {
    router.layer(axum::middleware::from_fn_with_state(guard, enforce))
}

/// Whether `serve` may listen on `addrs` (what `http_addr` resolved to): every address must be
/// loopback unless a token is set. IPv4-mapped IPv6 (`::ffff:127.0.0.1`) counts as its IPv4.
pub(crate) fn check_addrs(
    http_addr: &str,
    addrs: &[SocketAddr],
    token: Option<&Secret>,
) -> Result<(), GuardError> {
    if addrs.is_empty() {
        return Err(GuardError::NoAddress {
            addr: http_addr.to_string(),
        });
    }
    if token.is_some() {
        return Ok(());
    }
    match addrs.iter().find(|a| !a.ip().to_canonical().is_loopback()) {
        Some(public) => Err(GuardError::PublicWithoutToken {
            addr: http_addr.to_string(),
            ip: *public,
        }),
        None => Ok(()),
    }
}

/// Resolve `http_addr` and apply [`check_addrs`]. Returns the addresses checked, so the caller
/// binds exactly those (a second lookup could answer differently).
pub(crate) async fn check_bind(
    http_addr: &str,
    token: Option<&Secret>,
) -> Result<Vec<SocketAddr>, GuardError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(http_addr)
        .await
        .map_err(|source| GuardError::Resolve {
            addr: http_addr.to_string(),
            source,
        })?
        .collect();
    check_addrs(http_addr, &addrs, token)?;
    Ok(addrs)
}

/// Everything `scopemem serve` checks about `server.*` before it starts: the `allowed_hosts`
/// entries parse, and the listen address is loopback unless a token is set. Returns the
/// addresses to bind.
pub async fn check_server(server: &ServerConfig) -> Result<Vec<SocketAddr>, GuardError> {
    Guard::new(&server.allowed_hosts, server.auth_token.as_ref())?;
    check_bind(&server.http_addr, server.auth_token.as_ref()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Uri;

    fn secret(s: &str) -> Secret {
        Secret::new(s).expect("non-empty secret")
    }

    fn headers(pairs: &[(&axum::http::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).expect("test header"));
        }
        h
    }

    fn host_ok(guard: &Guard, host: &str) -> bool {
        guard
            .check_host(&headers(&[(&HOST, host)]), &Uri::from_static("/v1/status"))
            .is_ok()
    }

    #[test]
    fn loopback_names_any_port_case_insensitive() {
        let g = Guard::new(&[], None).unwrap();
        for ok in [
            "localhost",
            "localhost:8787",
            "LOCALHOST",
            "LocalHost:1",
            "127.0.0.1",
            "127.0.0.1:65535",
            "[::1]",
            "[::1]:1234",
            "[0:0:0:0:0:0:0:1]:80",
        ] {
            assert!(host_ok(&g, ok), "{ok} must be accepted");
        }
        for bad in [
            "evil.example",
            "attacker.com:8787",
            "localhost.evil.example",
            "127.0.0.2",
            "0.0.0.0",
            "[::2]",
            "::1",
            "localhost:",
            "localhost:99999",
            "localhost:80x",
            "evil.example@localhost",
            "localhost/x",
            "[::1",
            "[::1]x",
            "",
        ] {
            assert!(!host_ok(&g, bad), "{bad:?} must be refused");
        }
    }

    #[test]
    fn missing_or_repeated_host_is_refused() {
        let g = Guard::new(&[], None).unwrap();
        let uri = Uri::from_static("/v1/status");
        assert!(g.check_host(&HeaderMap::new(), &uri).is_err());
        let two = headers(&[(&HOST, "localhost"), (&HOST, "localhost")]);
        assert!(g.check_host(&two, &uri).is_err());
    }

    #[test]
    fn absolute_form_target_must_be_allowed_too() {
        let g = Guard::new(&[], None).unwrap();
        let h = headers(&[(&HOST, "localhost")]);
        assert!(g
            .check_host(&h, &Uri::from_static("http://localhost:8787/v1/status"))
            .is_ok());
        assert!(g
            .check_host(&h, &Uri::from_static("http://evil.example/v1/status"))
            .is_err());
    }

    #[test]
    fn allowed_hosts_with_and_without_port() {
        let g = Guard::new(
            &[
                "Memory.LAN".into(),
                "box.lan:8787".into(),
                " 10.0.0.5 ".into(),
                "::2".into(),
                "[fe80::1]:9000".into(),
            ],
            None,
        )
        .unwrap();
        assert!(host_ok(&g, "memory.lan"));
        assert!(host_ok(&g, "MEMORY.lan:1234"));
        assert!(host_ok(&g, "box.lan:8787"));
        assert!(!host_ok(&g, "box.lan"), "an entry with a port needs it");
        assert!(!host_ok(&g, "box.lan:8788"));
        assert!(host_ok(&g, "10.0.0.5:8787"));
        assert!(host_ok(&g, "[::2]:80"));
        assert!(host_ok(&g, "[fe80::1]:9000"));
        assert!(!host_ok(&g, "[fe80::1]:9001"));
        assert!(!host_ok(&g, "sub.memory.lan"), "no implicit subdomains");
    }

    #[test]
    fn invalid_allowed_hosts_entries_are_named() {
        for bad in [
            "http://memory.lan",
            "*.lan",
            "memory.lan/x",
            "",
            "a:b",
            "[::1",
        ] {
            let e = Guard::new(&[bad.to_string()], None).unwrap_err();
            assert!(
                matches!(&e, GuardError::InvalidAllowedHost { entry, .. } if entry == bad),
                "{bad}: {e}"
            );
            assert!(e.to_string().contains("server.allowed_hosts"), "{e}");
        }
        let config = crate::config::Config::from_value(
            &json!({"server": {"allowed_hosts": ["http://bad", "good.lan"]}}),
        )
        .unwrap()
        .config;
        let g = Guard::for_server(&config.server);
        assert!(host_ok(&g, "good.lan"), "valid entries survive a bad one");
        assert!(!host_ok(&g, "bad"));
    }

    #[test]
    fn token_checks() {
        let open = Guard::new(&[], None).unwrap();
        assert!(!open.requires_token());
        assert!(open.check_token(&HeaderMap::new()).is_ok());

        let g = Guard::new(&[], Some(&secret("s3cret-Token"))).unwrap();
        assert!(g.requires_token());
        let auth = |v: &str| g.check_token(&headers(&[(&AUTHORIZATION, v)]));
        assert!(auth("Bearer s3cret-Token").is_ok());
        assert!(
            auth("bearer s3cret-Token").is_ok(),
            "scheme is case-insensitive"
        );
        assert!(auth("BEARER   s3cret-Token ").is_ok());
        assert!(auth("Bearer s3cret-token").is_err(), "the token is exact");
        assert!(auth("Bearer s3cret-Token2").is_err());
        assert!(auth("Bearer s3cret").is_err());
        assert!(auth("Bearer ").is_err());
        assert!(auth("Bearer").is_err());
        assert!(auth("s3cret-Token").is_err());
        assert!(auth("Basic s3cret-Token").is_err());
        assert!(auth("Bearers3cret-Token").is_err());
        assert!(g.check_token(&HeaderMap::new()).is_err());
        let two = headers(&[
            (&AUTHORIZATION, "Bearer s3cret-Token"),
            (&AUTHORIZATION, "Bearer s3cret-Token"),
        ]);
        assert!(g.check_token(&two).is_err());
    }

    fn same_origin(method: Method, pairs: &[(&str, &str)]) -> Result<(), &'static str> {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).expect("test header name"),
                HeaderValue::from_str(v).expect("test header"),
            );
        }
        check_same_origin(&method, &h).map_err(|r| r.code())
    }

    #[test]
    fn cross_site_rule_for_state_changing_requests() {
        let json = ("content-type", "application/json");
        let host = ("host", "127.0.0.1:8787");
        // Safe methods are never refused by this rule.
        for m in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert_eq!(
                same_origin(
                    m,
                    &[
                        host,
                        ("origin", "http://evil.example"),
                        ("sec-fetch-site", "cross-site")
                    ]
                ),
                Ok(())
            );
        }
        // Non-browser clients (no Origin, no Sec-Fetch-Site) and the page itself pass.
        assert_eq!(same_origin(Method::POST, &[host, json]), Ok(()));
        assert_eq!(
            same_origin(
                Method::POST,
                &[host, ("content-type", "Application/JSON; charset=utf-8")]
            ),
            Ok(())
        );
        for ok in [
            vec![
                ("origin", "http://127.0.0.1:8787"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![("origin", "https://127.0.0.1:8787")],
            vec![("sec-fetch-site", "none")],
        ] {
            let mut pairs = vec![host, json];
            pairs.extend(ok.iter().copied());
            assert_eq!(same_origin(Method::POST, &pairs), Ok(()), "{ok:?}");
        }
        // Another origin, however close, is refused before anything else is looked at.
        for bad in [
            vec![("origin", "http://evil.example")],
            vec![("origin", "http://127.0.0.1:8788")],
            vec![("origin", "http://localhost:8787")],
            vec![("origin", "null")],
            vec![("origin", "http://127.0.0.1:8787/")],
            vec![("origin", "127.0.0.1:8787")],
            vec![
                ("origin", "http://127.0.0.1:8787"),
                ("origin", "http://127.0.0.1:8787"),
            ],
            vec![("sec-fetch-site", "cross-site")],
            vec![("sec-fetch-site", "same-site")],
            vec![
                ("sec-fetch-site", "cross-site"),
                ("origin", "http://127.0.0.1:8787"),
            ],
        ] {
            for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
                let mut pairs = vec![host, json];
                pairs.extend(bad.iter().copied());
                assert_eq!(
                    same_origin(m.clone(), &pairs),
                    Err("cross_site_request"),
                    "{m} {bad:?}"
                );
            }
        }
        // A body not declared as JSON (what a form post sends) is refused.
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            assert_eq!(
                same_origin(Method::POST, &[host, ("content-type", ct)]),
                Err("unsupported_media_type"),
                "{ct}"
            );
        }
        assert_eq!(
            same_origin(Method::POST, &[host]),
            Err("unsupported_media_type")
        );
    }

    #[test]
    fn refusals_never_carry_the_token() {
        let g = Guard::new(&[], Some(&secret("TOPSECRET"))).unwrap();
        let r = g
            .check_token(&headers(&[(&AUTHORIZATION, "Bearer TOPSECRE")]))
            .unwrap_err();
        assert!(!format!("{r:?}").contains("TOPSECRE"));
        assert!(!format!("{g:?}").contains("TOPSECRET"));
    }

    #[test]
    fn echo_truncates_and_masks() {
        assert_eq!(echo("a b\u{7f}c"), "a?b?c");
        let long = "x".repeat(200);
        assert_eq!(echo(&long).chars().count(), ECHO_MAX + 1);
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn bind_check() {
        let t = secret("tok");
        for loopback in [
            "127.0.0.1:8787",
            "127.9.9.9:1",
            "[::1]:8787",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(
                check_addrs("x", &[addr(loopback)], None).is_ok(),
                "{loopback}"
            );
        }
        for public in [
            "0.0.0.0:8787",
            "[::]:8787",
            "192.168.1.10:80",
            "[::ffff:10.0.0.1]:1",
        ] {
            let e = check_addrs("the-addr", &[addr(public)], None).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("server.auth_token") && text.contains(AUTH_TOKEN_ENV),
                "{text}"
            );
            assert!(text.contains("the-addr"), "{text}");
            assert!(check_addrs("x", &[addr(public)], Some(&t)).is_ok());
        }
        // A name resolving to loopback and a public address is refused as a whole.
        assert!(check_addrs("x", &[addr("127.0.0.1:1"), addr("10.1.2.3:1")], None).is_err());
        assert!(matches!(
            check_addrs("x", &[], Some(&t)),
            Err(GuardError::NoAddress { .. })
        ));
    }

    #[tokio::test]
    async fn check_bind_resolves() {
        assert_eq!(
            check_bind("127.0.0.1:0", None).await.unwrap(),
            vec![addr("127.0.0.1:0")]
        );
        assert!(matches!(
            check_bind("0.0.0.0:0", None).await,
            Err(GuardError::PublicWithoutToken { .. })
        ));
        assert!(check_bind("0.0.0.0:0", Some(&secret("t"))).await.is_ok());
        assert!(matches!(
            check_bind("no port here", None).await,
            Err(GuardError::Resolve { .. })
        ));
    }
}
