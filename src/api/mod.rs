//! Entry points for frameworks and operators: HTTP (axum) and the demo client.

pub mod demo;
pub mod http;
