//! The operator page at `/ui`: three static files compiled into the binary (no CDN, no build
//! step). They hold no data: every figure and memory on the page comes from the JSON API with
//! the operator's token, through the same guard and the same scope rules as any client.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS};
use axum::http::HeaderName;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const STYLE_CSS: &str = include_str!("ui/style.css");
const FAVICON_SVG: &str = include_str!("ui/favicon.svg");

/// The page's own paths. The guard lets GET/HEAD of these through without the token (a browser
/// cannot attach one to a page load), never without the Host check.
const ASSET_PATHS: [&str; 5] = [
    "/ui",
    "/ui/",
    "/ui/app.js",
    "/ui/style.css",
    "/ui/favicon.svg",
];

/// Scripts and styles only from this origin, no inline script, no framing, nothing sent
/// anywhere else: a memory text that slipped into markup could still not run or leak.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
                   frame-ancestors 'none'";

/// Whether `path` is one of the page's static files.
pub(crate) fn is_asset(path: &str) -> bool {
    ASSET_PATHS.contains(&path)
}

/// The page's routes, to merge into the API router (before the guard is applied).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/app.js", get(app_js))
        .route("/ui/style.css", get(style_css))
        .route("/ui/favicon.svg", get(favicon))
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn style_css() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

async fn favicon() -> Response {
    asset("image/svg+xml", FAVICON_SVG)
}

/// One embedded file with the page's security headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, content_type),
            (HeaderName::from_static("content-security-policy"), CSP),
            (X_FRAME_OPTIONS, "DENY"),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (HeaderName::from_static("referrer-policy"), "no-referrer"),
            (CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_exactly_the_page_files() {
        for p in ASSET_PATHS {
            assert!(is_asset(p));
        }
        for p in [
            "/ui/x",
            "/uix",
            "/ui/app.js/",
            "/v1/status",
            "/UI",
            "/ui/../v1/status",
        ] {
            assert!(!is_asset(p), "{p}");
        }
    }

    #[test]
    fn page_has_no_inline_script_or_style_and_no_remote_asset() {
        assert!(!INDEX_HTML.contains("<script>"), "scripts come from app.js");
        assert!(!INDEX_HTML.contains("style="), "styles come from style.css");
        assert!(!INDEX_HTML.contains("<style"), "styles come from style.css");
        for text in [INDEX_HTML, APP_JS, STYLE_CSS] {
            assert!(!text.contains("http://") && !text.contains("https://"));
        }
        assert!(
            INDEX_HTML.contains("/ui/favicon.svg"),
            "else the browser asks for /favicon.ico"
        );
        assert!(
            !APP_JS.contains("innerHTML"),
            "memory text goes in via textContent"
        );
    }
}
