//! A real `scopemem mcp` child process spoken to over stdio, line by line, as an MCP client
//! does (JSON-RPC 2.0): for tests that run it beside `serve` processes on one directory.

use serde_json::{json, Value};

/// A real `scopemem mcp` child speaking newline-delimited JSON-RPC on stdio.
pub struct Mcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    next_id: u64,
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Mcp {
    pub fn spawn(config: &std::path::Path) -> Mcp {
        use std::process::{Command, Stdio};
        let mut child = Command::new(crate::common::scopemem_bin())
            .args(["mcp", "--config", config.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut m = Mcp {
            child,
            stdin,
            lines: std::io::BufRead::lines(std::io::BufReader::new(stdout)),
            next_id: 0,
        };
        let init = m.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "processes-test", "version": "0"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "scopemem", "{init}");
        m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    pub fn send(&mut self, msg: Value) {
        use std::io::Write;
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self.lines.next().expect("mcp answered").unwrap();
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == json!(id) {
                return msg;
            }
        }
    }

    /// Call a tool for `conversation`; returns its structured result.
    pub fn call(&mut self, tool: &str, conversation: &str, arguments: Value) -> Value {
        let r = self.request(
            "tools/call",
            json!({"name": tool, "arguments": arguments,
                   "_meta": {"conversation_id": conversation}}),
        );
        assert!(r["result"]["isError"] != json!(true), "{r}");
        r["result"]["structuredContent"].clone()
    }
}
